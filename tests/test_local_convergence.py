"""Chapters 3 (local convergence) and 4 (many inputs): invariants of the chapters' pieces.

Fast: no full ``run()``; short trainings and closed forms only.
"""

import numpy as np
import pytest
import torch

from mmtoken import config
from mmtoken.attention import geometry, grad, instances, svm, train
from mmtoken.attention.model import AttentionProblem
from mmtoken.chapters import ch03_local as lc
from mmtoken.chapters import ch04_inputs as mi


# ---------------------------------------------------------------- chapter 3
def test_cone_starts_on_the_cone_edge():
    q = np.array([3.0, -1.0])
    P = lc.cone_starts(q, 0.002, 50.0)
    assert P.shape == (2, 2)
    assert np.allclose(np.linalg.norm(P, axis=-1), 50.0)
    assert np.allclose(geometry.correlation(P, q), 1 - 0.001)
    assert geometry.in_cone(P, q, 0.002, 50.0 - 1e-9).all()
    # the two starts lie on opposite sides of q
    cross = q[0] * P[:, 1] - q[1] * P[:, 0]
    assert cross[0] > 0 > cross[1]


def test_cone_starts_rejects_bad_direction():
    with pytest.raises(ValueError, match="non-zero"):
        lc.cone_starts(np.zeros(2), 0.01, 1.0)
    with pytest.raises(ValueError, match="planar"):
        lc.cone_starts(np.ones(3), 0.01, 1.0)


def test_fig1_classification_matches_hand_derivation():
    # local case: tokens 0 and 1 locally optimal, token 2 not; global case: only token 0 (token 1 ties)
    expect = {"local": [True, True, False], "global": [True, False, False]}
    for case, flags in expect.items():
        inst = instances.fig1(case)
        reps = geometry.enumerate_selections(inst.K, inst.gamma)
        assert [r.locally_optimal for r in reps] == flags
        assert all(r.feasible for r in reps)
    # LMM of the local case: p_mm((1,)) = (1, 0), its only neighbour the key at the origin
    inst = instances.fig1("local")
    rep = geometry.classify(inst.K, inst.gamma, [1])
    assert np.allclose(rep.p_mm, [1.0, 0.0], atol=1e-7)
    assert rep.neighbours == [(0, 2)]


def test_counterexample_closed_forms():
    ce = instances.counterexample()
    assert ce.X.shape == (2, 2, 2) and ce.starts.shape == (16, 2)
    assert np.allclose(ce.gamma, [[1, 0], [3, 2]])
    reps = {r.alpha: r for r in geometry.enumerate_selections(ce.K, ce.gamma)}
    # GMM: p1 >= 1 and -2 p1 + p2 >= 1, both active: (1, 3); LMM: input 0 alone, (1, 0)
    assert np.allclose(reps[(0, 0)].p_mm, [1.0, 3.0], atol=1e-6)
    assert np.allclose(reps[(0, 1)].p_mm, [1.0, 0.0], atol=1e-6)
    assert reps[(0, 0)].globally_optimal and reps[(0, 1)].locally_optimal
    assert not reps[(1, 0)].locally_optimal and not reps[(1, 1)].locally_optimal
    assert np.allclose(ce.starts[list(lc.COUNTER_STARTS)], [[0, 1], [0, -1]])


def test_counterexample_two_limits_short_run():
    ce = instances.counterexample()
    starts = ce.starts[list(lc.COUNTER_STARTS)]
    with torch.inference_mode():
        h = train.train_p(ce.problem(), starts, steps=300, lr=0.1, record_every=300, record_probs=False)
    p = h.final_p.numpy()
    assert geometry.correlation(p[0], [1.0, 3.0]) > 0.99
    assert geometry.correlation(p[1], [1.0, 0.0]) > 0.99
    # selections agree with the limits: (0, 0) and (0, 1)
    assert geometry.selection(ce.K, p[0]).tolist() == [0, 0]
    assert geometry.selection(ce.K, p[1]).tolist() == [0, 1]


def test_stable_gradient_in_cone_points_back_for_lmm():
    # far out on the edge of the LMM cone, the descent direction increases the neighbour's margin
    inst = instances.fig1("local")
    s = lc.Settings()
    P = lc.cone_starts([1.0, 0.0], s.cone_mu, s.cone_r)
    g = grad.grad_p(inst.problem(), torch.as_tensor(P, dtype=torch.float64))
    step = -g.direction.numpy()
    assert (step[:, 0] > 0).all()  # along k_1 - k_2 = (1, 0)
    assert np.allclose(np.linalg.norm(step, axis=-1), 1.0)


def test_project_to_cone():
    q = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    w = torch.nn.functional.normalize(
        torch.randn(200, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64), dim=-1
    )
    out = lc.project_to_cone(w, q, 0.1)
    c_in, c_out = (w * q).sum(-1), (out * q).sum(-1)
    assert torch.allclose(out.norm(dim=-1), torch.ones(200, dtype=torch.float64))
    inside = c_in >= 0.9
    assert torch.equal(out[inside], w[inside])  # inside: unchanged
    assert torch.allclose(c_out[~inside], torch.full_like(c_out[~inside], 0.9))  # outside: on the boundary
    # the boundary point lies in the plane of q and w, on w's side
    perp_w, perp_o = w[~inside, 1:], out[~inside, 1:]
    assert torch.allclose(torch.nn.functional.normalize(perp_w, dim=-1), torch.nn.functional.normalize(perp_o, dim=-1))


def test_cone_path_stays_on_sphere_and_in_cone():
    inst = instances.fig1("local")
    q = np.array([[-1.0, -1.1]])  # p_mm of the origin token (not locally optimal)
    radii = np.array([3.0, 20.0])
    pts = lc.cone_regularization_path(
        AttentionProblem(inst.K[None], inst.gamma[None]), radii, q, 0.01, iters=80
    ).numpy()
    assert pts.shape == (2, 1, 1, 2)
    np.testing.assert_allclose(np.linalg.norm(pts, axis=-1)[:, 0, 0], radii, rtol=1e-12)
    c = geometry.correlation(pts[:, 0, 0], q[0])
    np.testing.assert_allclose(c, 0.99, atol=1e-9)  # pushed to the boundary


@pytest.mark.slow
def test_cone_path_with_a_wide_cone_is_the_regularization_path():
    """With mu near 2 the cone is (almost) the whole sphere: the two sphere descents must agree."""
    inst = instances.fig1("global")
    pr = inst.problem()
    radii = np.array([2.0, 8.0])
    gmm = svm.att_svm(inst.K, [0]).x
    a = lc.cone_regularization_path(pr, radii, gmm, 0.999, iters=300).numpy()[:, 0]
    b = train.best_of_starts(pr, train.regularization_path(pr, radii, np.array([gmm]), iters=300)).numpy()
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_cone_path_rejects_bad_arguments():
    pr = instances.fig1("local").problem()
    with pytest.raises(ValueError, match="mu"):
        lc.cone_regularization_path(pr, [1.0], [1.0, 0.0], 0.0)
    with pytest.raises(ValueError, match="dimension"):
        lc.cone_regularization_path(pr, [1.0], [1.0, 0.0, 0.0], 0.1)
    with pytest.raises(ValueError, match="radii"):
        lc.cone_regularization_path(pr, [-1.0], [1.0, 0.0], 0.1)
    with pytest.raises(ValueError, match="w0"):
        lc.cone_regularization_path(pr, [1.0], [1.0, 0.0], 0.1, np.ones((2, 1, 2)))


def test_best_over_radii_keeps_the_least_loss():
    inst = instances.fig1("local")
    pr = inst.problem()
    # the origin token's direction: the loss grows with the radius, so the inner radius wins
    pts = torch.as_tensor(np.array([[[-1.0, -1.1]]]) * np.array([1.0, 2.0, 4.0])[:, None, None])
    best = lc.best_over_radii(pr, pts).numpy()
    np.testing.assert_allclose(best, pts.numpy()[[0, 0, 0]])
    # the LMM direction: the loss falls with the radius
    pts = torch.as_tensor(np.array([[[1.0, 0.0]]]) * np.array([1.0, 2.0, 4.0])[:, None, None])
    np.testing.assert_allclose(lc.best_over_radii(pr, pts).numpy(), pts.numpy())


def test_neighbour_cone_width_closed_form():
    """LMM of Fig. 1 (local): token 0 overtakes the neighbour when 0.1 cos(th) = sin(th), tan(th) = 0.1."""
    inst = instances.fig1("local")
    mu0 = lc.neighbour_cone_width(inst.K, [1], [1.0, 0.0])
    assert mu0 == pytest.approx(1 - 1 / np.sqrt(1.01), abs=1e-6)
    assert lc.Settings().reg_mu < mu0 and lc.Settings().cone_mu < mu0


def test_settings_are_the_published_values_at_each_scale():
    s = lc.settings("quick")
    assert s == lc.Settings()
    assert (s.lr, s.steps, s.counter_steps, s.cone_mu, s.cone_r, s.reg_mu) == (0.1, 2000, 1500, 0.002, 50.0, 0.002)
    assert np.array_equal(np.array(s.starts), instances.FIG1_STARTS)
    p = lc.settings("paper")
    assert (p.steps, p.counter_steps, p.reg_radii, p.reg_iters, p.sweep_iters) == (20_000, 10_000, 13, 1000, 1000)
    with config.use_scale("paper"):
        assert lc.settings() == p


def test_settings_reject_bad_values():
    with pytest.raises(ValueError, match="Settings.steps"):
        lc.Settings(steps=0)
    with pytest.raises(ValueError, match="Settings.cone_mu"):
        lc.Settings(cone_mu=0.0)
    with pytest.raises(ValueError, match="Settings.starts"):
        lc.Settings(starts=((0.0, 1.0, 2.0),))


def test_per_settings_memoises_and_follows_the_scale():
    calls = []
    f = lc.per_settings(lambda s: calls.append(s) or s.steps)
    with config.use_scale("quick"):
        assert f() == 2000 and f(lc.Settings()) == 2000  # one computation for both
    with config.use_scale("paper"):
        assert f() == 20_000
    assert len(calls) == 2


def test_run_with_other_settings_is_its_own_run():
    s = lc.Settings(steps=40, record_every=20, starts=((0.0, 1.0), (0.0, -1.5)))
    r = lc.run(s)
    assert r.s is s and r.fig1.paths.shape == (3, 2, 2) and r.cones.paths.shape == (3, 12, 2)
    assert np.allclose(r.fig1.paths[0], s.starts)
    assert lc.run(s) is r  # memoised on its settings


# ---------------------------------------------------------------- chapter 4
def test_fig2_gmm_is_the_pair_formula():
    inst = instances.fig2()
    opt = geometry.optimal_tokens(inst.gamma)
    assert opt.tolist() == [0, 0, 0]
    sol = svm.att_svm(inst.K, opt)
    nb = geometry.svm_neighbours(inst.K, opt, sol.x)
    assert len(nb) == 2  # two active constraints, from two inputs
    D = np.stack([inst.K[i, 0] - inst.K[i, t] for i, t in nb])
    assert np.allclose(sol.x, np.linalg.solve(D, np.ones(2)), atol=1e-6)


def test_loglog_slope_known_curves():
    k = np.arange(0, 1001)
    assert mi.loglog_slope(k, 0.1 * k + 1e-12, 500) == pytest.approx(1.0, abs=1e-6)
    assert mi.loglog_slope(k, np.full(len(k), 3.0), 500) == pytest.approx(0.0, abs=1e-9)
    assert mi.loglog_slope(k, np.sqrt(k)[:, None] * np.ones((1, 4)), 500) == pytest.approx(0.5, abs=1e-6)
    with pytest.raises(ValueError, match="two recorded"):
        mi.loglog_slope(k, k, 5000)


def test_run_first_step_and_mean():
    steps = np.arange(5)
    p_opt = np.array([0.5, 0.9, 0.985, 0.995, 0.999])[:, None, None] * np.ones((1, 2, 3))
    r = mi.Run("gd", 1.0, steps, np.zeros((5, 2, 2)), np.ones((5, 2)), p_opt, np.ones((5, 2)))
    assert np.allclose(r.mean_p_opt, p_opt[:, 0, 0])
    assert r.first_step(0.99) == 3
    assert r.first_step(0.9999) is None


def test_plain_gd_slower_than_normalized_short():
    inst = instances.fig2()
    with torch.inference_mode():
        a = train.train_p(inst.problem(), inst.starts, steps=100, lr=0.1, record_every=100, record_probs=False)
        b = train.train_p(
            inst.problem(), inst.starts, steps=100, lr=1.0, method="gd", record_every=100, record_probs=False
        )
    # normalized steps move exactly 0.1, so ||p|| <= ||p0|| + 10; plain GD falls far behind
    assert bool((a.norm[-1] <= a.norm[0] + 10 + 1e-9).all()) and bool((a.norm[-1] > 8).all())
    assert bool((b.norm[-1] < 0.5 * a.norm[-1]).all())
