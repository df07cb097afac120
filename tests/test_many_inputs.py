"""Chapter 4: the Fig. 2 instance as the public code generates it, and its SVM."""

import numpy as np
import torch

from mmtoken.attention import geometry, instances, svm
from mmtoken.chapters import ch04_inputs as mi


def test_fig2_is_the_public_generation():
    inst = instances.fig2()
    X = mi.public_draw()
    assert np.array_equal(inst.X, X)
    assert np.array_equal(inst.K, X[..., :2])
    assert inst.gamma[:, 0].tolist() == [1.0] * 3 and np.all(inst.gamma[:, 1:] == 0.5)
    # a (3, 7, 2) draw of the same generator is a different instance
    g = torch.Generator().manual_seed(0)
    assert not np.allclose(
        (0.2 * torch.randn((3, 7, 2), generator=g)).numpy()[:, 1:4] + [-1.0, 1.0], inst.K[:, 1:4], atol=1e-3
    )


def test_fig2_seed_changes_the_draw():
    assert not np.allclose(instances.fig2(1).K, instances.fig2(0).K)
    assert np.array_equal(instances.fig2(1).K, mi.public_draw(1)[..., :2])


def test_notebook_svm_cost_closed_form_and_stored_value():
    inst = instances.fig2()
    a = float(np.sum(svm.att_svm(inst.K, [0, 0, 0]).x ** 2))
    cost = mi.notebook_svm_cost(inst.X)
    assert abs(cost - 2 * a / (4 + a)) < 1e-7
    assert round(cost, 5) == mi.STORED_PCOST
    assert round(mi.draw_check()["notebook_cost_372"], 5) != mi.STORED_PCOST


def test_fig2_two_active_constraints_with_positive_multipliers():
    inst = instances.fig2()
    sol = svm.att_svm(inst.K, [0, 0, 0])
    nb = geometry.svm_neighbours(inst.K, [0, 0, 0], sol.x)
    assert len(nb) == 2 and len({i for i, _ in nb}) == 2
    D = np.stack([inst.K[i, 0] - inst.K[i, t] for i, t in nb])
    lam = np.linalg.solve(D @ D.T, np.ones(2))
    assert np.all(lam > 0)
    assert np.allclose(D.T @ lam, sol.x, atol=1e-6)  # KKT: p_mm is the combination of the active rows


def test_settings_defaults_are_the_published_run():
    s = mi.Settings()
    assert np.array_equal(np.array(s.starts), instances.fig2().starts)
    assert (s.lr_ngd, s.lr_gd, s.loss) == (0.1, 1.0, "logistic")
    assert mi.settings("quick") == s
    paper = mi.settings("paper")
    assert (paper.steps_ngd, paper.steps_gd) == (20_000, 20_000) and paper.starts == s.starts


def test_run_follows_its_settings():
    short = mi.Settings(steps_ngd=20, steps_gd=20, starts=((1.0, 0.0), (0.0, -1.0)))
    r = mi.run(short)
    assert r.settings is short and r.ngd.paths.shape == (21, 2, 2) and r.gd.lr == 1.0
    # every normalized step has length lr_ngd
    assert np.allclose(np.linalg.norm(np.diff(r.ngd.paths, axis=0), axis=-1), short.lr_ngd)
    other = mi.run(mi.Settings(steps_ngd=20, steps_gd=20, starts=short.starts, loss="exponential"))
    assert not np.allclose(other.gd.paths[-1], r.gd.paths[-1])  # the loss reaches the trainer
    assert mi.run(short) is r  # memoised on the settings
