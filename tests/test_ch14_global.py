"""Global convergence in W (chapter 14, mmtoken.chapters.ch14_overparam): the counterexample and the true cases."""

import numpy as np
import pytest

from mmtoken.attention import geometry, instances, smoothness
from mmtoken.chapters import ch14_overparam as tg
from mmtoken.selfattention import tfsvm

S = tg.Settings()
W0 = np.array(S.w0)


def test_ortho_instances_have_the_theorems_hypotheses():
    data = tg.ortho_instances(3, 3, 4, 4, seed=5)
    Z = data["Z"]
    assert np.allclose(Z @ np.swapaxes(Z, -1, -2), np.eye(3), atol=1e-12)  # orthonormal queries
    gamma = data["Y"][..., None] * np.einsum("cntd,cd->cnt", data["X"], data["v"])
    assert np.allclose(gamma[..., 0], 1.0) and np.allclose(gamma[..., 1:], 0.0)  # equal non-optimal scores
    with pytest.raises(ValueError, match="d >= n"):
        tg.ortho_instances(1, 3, 4, 2)


def test_nearest_selection_is_another_feasible_selection():
    K = tfsvm.w_keys(instances.CE_X, np.eye(2)).numpy()
    sel, x = tg.nearest_selection(K, [0, 0])
    assert sel != (0, 0) and x.shape == (4,)
    assert geometry.classify(K, np.array([[1.0, 0.0], [3.0, 2.0]]), list(sel)).feasible


@pytest.mark.slow
def test_the_counterexample_meets_the_former_box_and_ends_local():
    """The false n-input box's hypotheses hold on every angle, and plain GD within 1/L ends on (0, 1)."""
    ce = tg.counterexample(tg.Settings(angles=(0.5,)))
    Z = tg.ce_queries(0.5)
    assert abs(np.linalg.det(Z)) > 0.1  # independent queries: the lemma holds, every selection feasible
    prob = tfsvm.w_problem(instances.CE_X, instances.CE_Y, instances.CE_V, Z)
    assert S.ce_lr <= 1.0 / smoothness.smoothness_bound(prob.K.numpy(), prob.gamma.numpy())
    assert tuple(ce.plain["selection"][0]) == (0, 1)
    assert tg.counterexample_check("local", ce).passed and not tg.counterexample_check("global", ce).passed
    # the regularization path, paper A's Theorem 1 on the W keys, reaches the global SVM there
    assert tg.reg_check("global", ce).passed
    # the natural reading of a favourable initial gradient holds on the counterexample: it cannot be enough
    g = np.asarray(ce.init_grad_corr["global"])
    assert (g > 0).all()


@pytest.mark.slow
def test_orthogonal_queries_make_gd_global_from_the_same_start():
    prob = tfsvm.w_problem(instances.CE_X, instances.CE_Y, instances.CE_V, np.eye(2))
    run = tg.plain_gd(prob, W0[None], S.ce_lr, steps=20_000)
    assert tuple(run["selection"][0]) == (0, 0)
    gmm = tfsvm.frobenius_svm(instances.CE_X, np.eye(2), [0, 0]).x.ravel()
    c = geometry.correlation(run["W"].reshape(2, -1), gmm)
    assert c[-1] > c[0] > 0.9


def test_planar_reduction_keeps_the_loss_and_the_certificate_bounds_the_minimiser():
    """Issue 43, item 8: the counterexample's ball problem is a planar one (two inputs of two tokens), and the
    certificate on it is a bound: from a point off the minimiser it still covers the minimiser."""
    import torch

    from mmtoken.attention import grad, long_paths

    problem = tfsvm.w_problem(instances.CE_X, instances.CE_Y, instances.CE_V, tg.ce_queries(0.5))
    planar, B = long_paths.planar_reduction(problem)
    assert np.allclose(B.T @ B, np.eye(2), atol=1e-12)
    W = np.random.default_rng(0).normal(size=(5, 4)) * 3
    assert np.allclose(grad.loss_value(problem, torch.as_tensor(W)), grad.loss_value(planar, torch.as_tensor(W @ B)))
    # the minimiser on the circle of radius 30 by a fine scan of the planar problem, and a point 20 degrees off
    th = np.linspace(-np.pi, np.pi, 20001)
    circle = 30.0 * np.stack([np.cos(th), np.sin(th)], -1)
    best = circle[int(grad.log_excess(planar, torch.as_tensor(circle)).argmin())]
    rot = np.radians(20.0)
    off = np.array([[np.cos(rot), -np.sin(rot)], [np.sin(rot), np.cos(rot)]]) @ best
    assert long_paths.planar_certificate(planar, best) < np.radians(1.0)
    assert long_paths.planar_certificate(planar, off) >= rot - np.radians(0.1)
    with pytest.raises(ValueError, match="disk"):
        long_paths.planar_certificate(planar, 2 * best, radius=30.0)
