"""ATT-SVM, relaxed, head and W-form SVMs: KKT, independent solver, closed forms, errors."""
import numpy as np
import pytest

from mmtoken import geometry, instances, svm


def test_att_svm_kkt_and_nnls_agree():
    rng = np.random.default_rng(1)
    for _ in range(10):
        K = rng.normal(size=(2, 3, 5))
        alpha = rng.integers(0, 3, size=2)
        sol = svm.att_svm(K, alpha)
        assert max(sol.kkt_residuals().values()) < 1e-6
        np.testing.assert_allclose(svm.min_norm_nnls(sol.D, sol.b), sol.x, atol=1e-6)


def test_att_svm_closed_form_one_constraint():
    # one input, two tokens: p_mm = d / ||d||^2 with d = k_0 - k_1
    K = np.array([[[1.0, 2.0], [0.0, -1.0]]])
    d = K[0, 0] - K[0, 1]
    np.testing.assert_allclose(svm.att_svm(K, [0]).x, d / (d @ d), atol=1e-7)


def test_fig1_gmm_is_the_known_solution():
    inst = instances.fig1("global")
    sol = svm.att_svm(inst.K, [0])
    d = inst.K[0, 0] - inst.K[0, 2]                        # the only active constraint
    np.testing.assert_allclose(sol.x, d / (d @ d), atol=1e-7)
    assert geometry.svm_neighbours(inst.K, [0], sol.x) == [(0, 2)]


def test_infeasible_selection_names_the_input():
    # token 2 is the midpoint of tokens 0 and 1: no direction makes it strictly largest
    K = np.array([[[1.0, 0.0], [-1.0, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
    with pytest.raises(svm.InfeasibleSVM, match=r"input\(s\) \[0\]"):
        svm.att_svm(K, [2, 0])


def test_bad_selection_shapes():
    K = np.zeros((2, 3, 2))
    with pytest.raises(ValueError, match="shape"):
        svm.att_svm(K, [0])
    with pytest.raises(ValueError, match="index tokens"):
        svm.att_svm(K, [0, 3])
    with pytest.raises(ValueError, match="NaN"):
        svm.att_svm(np.full((1, 2, 2), np.nan), [0])


def test_relaxed_svm_drops_non_support_margins():
    inst = instances.fig3("loose")
    alpha = [1, 1, 1]
    full = svm.att_svm(inst.K, alpha)
    relaxed = svm.relaxed_att_svm(inst.K, alpha, support=[0, 1])
    assert np.linalg.norm(relaxed.x) <= np.linalg.norm(full.x) + 1e-9
    assert max(relaxed.kkt_residuals().values()) < 1e-6
    m = geometry.margins(inst.K, alpha, relaxed.x)
    assert np.nanmin(m[[0, 1]]) >= 1 - 1e-6 and np.nanmin(m[2]) >= -1e-6


def test_head_svm_and_support():
    inst = instances.fig3("loose")
    sol = svm.head_svm(inst.X, inst.Y, [1, 1, 1])
    assert max(sol.kkt_residuals().values()) < 1e-6
    assert 2 not in svm.head_support(sol)                  # the loose third input is not a support vector


def test_w_svm_is_rank_one_outer_product():
    """min ||W||_F s.t. (x_a - x_t)^T W p >= 1 has the solution p_mm(X) p^T / ||p||^2."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2, 3, 4))
    p = rng.normal(size=3)
    W = svm.w_svm(X, [0, 1], p).x
    q = svm.att_svm(X, [0, 1]).x
    np.testing.assert_allclose(W, np.outer(q, p) / (p @ p), atol=1e-6)
    assert np.linalg.svd(W, compute_uv=False)[1] < 1e-6
