"""The l_q Att-SVM (mmtoken.attention.svm_lq) and the primitives of Part IV in train_p and grad: mirror descent
(``mirror_q``), the Polyak step and ``log_excess``."""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import linprog

from mmtoken.attention import grad, svm, svm_lq, train
from mmtoken.attention.model import AttentionProblem
from mmtoken.attention.svm_solvers import InfeasibleSVM


def one_constraint(a):
    """Keys ``(1, 2, m)`` whose one constraint row ``k_0 - k_1`` is ``a``."""
    a = np.asarray(a, float)
    return np.stack([a, np.zeros_like(a)])[None]


@pytest.mark.parametrize("q", [1.5, 2.0, 3.0, 4.0])
def test_closed_form_for_one_constraint(q):
    a = np.array([0.5, -1.0, 2.0, 0.3])
    qs = q / (q - 1)
    closed = np.sign(a) * np.abs(a) ** (qs - 1) / (np.abs(a) ** qs).sum()
    sol = svm_lq.lq_att_svm(one_constraint(a), [0], q)
    np.testing.assert_allclose(sol.x, closed, atol=1e-7)
    assert sol.norm == pytest.approx(1 / svm_lq.lq_norm(a, qs), rel=1e-7)
    assert a @ sol.x == pytest.approx(1.0, abs=1e-7)
    # and it is not the Euclidean solution (the test can fail)
    if q != 2:
        assert np.abs(sol.x - a / (a @ a)).max() > 1e-2


def random_keys(seed, n=3, T=4, d=4):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, T, d)) / 2


def feasible_selection(K):
    """The selection of a random direction: feasible by construction."""
    return (K @ np.array([1.0, -0.5, 0.3, 0.8])).argmax(-1)


def test_q2_equals_att_svm():
    K = random_keys(1)
    a = feasible_selection(K)
    np.testing.assert_allclose(svm_lq.lq_att_svm(K, a, 2.0).x, svm.att_svm(K, a).x, atol=1e-9)


def test_q1_value_equals_an_lp_solved_another_way():
    """min sum t s.t. -t <= p <= t, D p >= 1 (variables (p, t)), by HiGHS' dual simplex."""
    K = random_keys(2)
    a = feasible_selection(K)
    sol = svm_lq.lq_att_svm(K, a, 1.0)
    D, m = sol.D, K.shape[-1]
    eye = np.eye(m)
    A = np.vstack([np.hstack([-D, np.zeros_like(D)]), np.hstack([eye, -eye]), np.hstack([-eye, -eye])])
    b = np.concatenate([-np.ones(len(D)), np.zeros(2 * m)])
    res = linprog(np.r_[np.zeros(m), np.ones(m)], A_ub=A, b_ub=b, bounds=(None, None), method="highs-ds")
    assert res.status == 0
    assert sol.norm == pytest.approx(res.fun, rel=1e-7)


def test_kkt_multipliers_reproduce_the_mirror_variable():
    K = random_keys(3)
    a = feasible_selection(K)
    for q in (1.5, 3.0):
        sol = svm_lq.lq_att_svm(K, a, q)
        theta = np.sign(sol.x) * np.abs(sol.x) ** (q - 1)
        assert (sol.dual >= 0).all() and sol.dual.max() > 0
        np.testing.assert_allclose(sol.D.T @ sol.dual, theta, atol=1e-6 * np.abs(theta).max())


def test_infeasible_selection_raises():
    K = np.array([[[-1.0], [0.0], [1.0]]])  # the middle token is never the strict top logit
    with pytest.raises(InfeasibleSVM):
        svm_lq.lq_att_svm(K, [1], 1.5)


@pytest.mark.parametrize("q", [0.5, 0.999, float("inf")])
def test_bad_q_raises_naming_q(q):
    with pytest.raises(ValueError, match="q"):
        svm_lq.lq_att_svm(one_constraint([1.0, 2.0]), [0], q)


# ------------------------------------------------------------------------------------------------ train_p, grad


def small_problem(seed=0):
    rng = np.random.default_rng(seed)
    return AttentionProblem(rng.normal(size=(3, 4, 4)) / 2, rng.normal(size=(3, 4)))


@pytest.mark.parametrize("method", ["normalized", "gd"])
@pytest.mark.parametrize("q", [1.5, 3.0])
def test_mirror_kernel_and_torch_agree(monkeypatch, method, q):
    prob = small_problem(1)
    p0 = np.array([[0.2, -0.1, 0.3, 0.0], [0.0, 0.0, 0.0, 0.0]])
    fast = train.train_p(prob, p0, steps=300, lr=0.1, method=method, mirror_q=q, record_every=100).p
    monkeypatch.setenv("MMTOKEN_FASTPATH", "off")
    slow = train.train_p(prob, p0, steps=300, lr=0.1, method=method, mirror_q=q, record_every=100).p
    np.testing.assert_allclose(fast.numpy(), slow.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("q", [1.5, 3.0])
def test_one_plain_mirror_step_is_the_dual_step_of_autograd(q):
    prob = small_problem(2)
    p0 = torch.tensor([0.3, -0.2, 0.1, 0.5], dtype=torch.float64)
    lr = 0.7
    g = grad.autograd_grad(prob, p0)
    theta = p0.sign() * p0.abs() ** (q - 1) - lr * g
    expected = theta.sign() * theta.abs() ** (1 / (q - 1))
    got = train.train_p(prob, p0, steps=1, lr=lr, method="gd", mirror_q=q).p[-1]
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-10, atol=1e-13)
    assert np.abs(got.numpy() - (p0 - lr * g).numpy()).max() > 1e-3  # not the Euclidean step


@pytest.mark.parametrize("method", ["normalized", "gd"])
def test_q2_is_bit_identical_to_the_default(method):
    prob = small_problem(3)
    p0 = np.array([0.1, 0.2, -0.3, 0.0])
    a = train.train_p(prob, p0, steps=200, lr=0.2, method=method).p
    b = train.train_p(prob, p0, steps=200, lr=0.2, method=method, mirror_q=2.0).p
    assert torch.equal(a, b)


def l_star(prob):
    return float(torch.nn.functional.softplus(-prob.gamma.max(-1).values).mean())


def test_polyak_one_step():
    prob = small_problem(4)
    p0 = torch.tensor([0.3, -0.2, 0.1, 0.5], dtype=torch.float64)
    g = grad.autograd_grad(prob, p0)
    L = float(grad.loss_value(prob, p0))
    expected = p0 - (L - l_star(prob)) / float(g @ g) * g
    got = train.train_p(prob, p0, steps=1, lr=1.0, method="polyak").p[-1]
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-10, atol=1e-13)


def test_log_excess_direct_and_saturated():
    prob = small_problem(5)
    p = torch.tensor([0.3, -0.2, 0.1, 0.5], dtype=torch.float64)
    direct = math.log(float(grad.loss_value(prob, p)) - l_star(prob))
    assert float(grad.log_excess(prob, p)) == pytest.approx(direct, rel=1e-10)
    # a saturated point: one input, the optimal token ahead by a margin of about 100
    K = torch.tensor([[[1.0, 0.0], [0.0, 0.0], [-1.0, 0.5]]], dtype=torch.float64)
    sat_prob = AttentionProblem(K, torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64))
    far = torch.tensor([100.0, 0.0], dtype=torch.float64)
    assert float(grad.loss_value(sat_prob, far)) - l_star(sat_prob) == 0.0
    le = float(grad.log_excess(sat_prob, far))
    assert math.isfinite(le)
    # first order: L - L* = sigma(-1) * (e^-100 + e^-200) (1 - 0), up to O(e^-200)
    assert le == pytest.approx(math.log(1 / (1 + math.e)) - 100.0, abs=1e-6)


@pytest.mark.parametrize("bad", [1.0, 0.5, -2.0, float("inf")])
def test_bad_mirror_q_raises_naming_it(bad):
    with pytest.raises(ValueError, match="mirror_q"):
        train.train_p(small_problem(), np.zeros(4), steps=1, mirror_q=bad)


def test_polyak_needs_euclidean_geometry():
    with pytest.raises(ValueError, match="mirror_q"):
        train.train_p(small_problem(), np.zeros(4), steps=1, method="polyak", mirror_q=1.5)
