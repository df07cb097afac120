"""Chapters 3 (local convergence) and 4 (many inputs): invariants of the experiment modules' pieces.

Fast: no full ``run()``; short trainings and closed forms only.
"""
import numpy as np
import pytest
import torch

from mmtoken import geometry, grad, instances, svm, train
from mmtoken.experiments import local_convergence as lc
from mmtoken.experiments import many_inputs as mi


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
    ce = lc.counterexample_instance()
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
    ce = lc.counterexample_instance()
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
    P = lc.cone_starts([1.0, 0.0], lc.CONE_MU, lc.CONE_R)
    g = grad.grad_p(inst.problem(), torch.as_tensor(P, dtype=torch.float64))
    step = -g.direction.numpy()
    assert (step[:, 0] > 0).all()                     # along k_1 - k_2 = (1, 0)
    assert np.allclose(np.linalg.norm(step, axis=-1), 1.0)


# ---------------------------------------------------------------- chapter 4
def test_fig2_gmm_is_the_pair_formula():
    inst = instances.fig2()
    opt = geometry.optimal_tokens(inst.gamma)
    assert opt.tolist() == [0, 0, 0]
    sol = svm.att_svm(inst.K, opt)
    nb = geometry.svm_neighbours(inst.K, opt, sol.x)
    assert len(nb) == 2                                   # two active constraints, from two inputs
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
        b = train.train_p(inst.problem(), inst.starts, steps=100, lr=1.0, method="gd", record_every=100,
                          record_probs=False)
    # normalized steps move exactly 0.1, so ||p|| <= ||p0|| + 10; plain GD falls far behind
    assert bool((a.norm[-1] <= a.norm[0] + 10 + 1e-9).all()) and bool((a.norm[-1] > 8).all())
    assert bool((b.norm[-1] < 0.5 * a.norm[-1]).all())
