"""mmtoken.selfattention.tfsvm (keys map, W trainer, Frobenius Att-SVM) and chapter 13's own code (mmtoken.chapters.ch13_w_vs_kq:
the (K, Q) gradients and trainer, the plain-softmax gradient, the nuclear-norm Att-SVM*); input checks."""

import numpy as np
import pytest
import torch

from mmtoken.attention import geometry, grad, svm
from mmtoken.chapters import ch13_w_vs_kq as ch13
from mmtoken.selfattention import tfsvm


@pytest.fixture(scope="module")
def inst():
    return {k: v[0] for k, v in tfsvm.random_instances(1, 3, 4, 5, seed=3).items()}


def test_w_keys_is_the_bilinear_form(inst):
    rng = np.random.default_rng(0)
    W = rng.normal(size=(5, 5))
    K = tfsvm.w_keys(inst["X"], inst["Z"]).numpy()
    assert K.shape == (3, 4, 25)
    direct = np.einsum("ntd,de,ne->nt", inst["X"], W, inst["Z"])
    np.testing.assert_allclose(K @ W.reshape(-1), direct, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(tfsvm.logits(inst["X"], inst["Z"], W).numpy(), direct, rtol=1e-13, atol=1e-13)


def test_w_keys_batched():
    data = tfsvm.random_instances(4, 2, 3, 3, seed=1)
    K = tfsvm.w_keys(data["X"], data["Z"])
    for b in range(4):
        np.testing.assert_array_equal(K[b].numpy(), tfsvm.w_keys(data["X"][b], data["Z"][b]).numpy())


def _autograd_kq(inst, K, Q, lam=0.0):
    """Autograd of L(K Q^T) + lam (||K||^2 + ||Q||^2) through the plain softmax (accurate when unsaturated)."""
    K, Q = (torch.tensor(A, requires_grad=True) for A in (K, Q))
    X, Z = torch.tensor(inst["X"]), torch.tensor(inst["Z"])
    out = tfsvm.output(X, Z, K @ Q.T, torch.tensor(inst["v"]))
    loss = torch.nn.functional.softplus(-torch.tensor(inst["Y"]) * out).mean()
    return torch.autograd.grad(loss + lam * (K.norm() ** 2 + Q.norm() ** 2), (K, Q))


@pytest.mark.parametrize(("lam", "scale", "m"), [(0.0, 0.3, 4), (1e-3, 0.5, 3), (0.05, 0.5, 3)])
def test_kq_gradient_matches_autograd(inst, lam, scale, m):
    """Directions of G Q + 2 lam K and G^T K + 2 lam Q (stable G) against autograd at an unsaturated point."""
    problem = tfsvm.w_problem(inst["X"], inst["Y"], inst["v"], inst["Z"])
    rng = np.random.default_rng(1)
    K, Q = rng.normal(size=(2, 5, m)) * scale
    gK, gQ = _autograd_kq(inst, K, Q, lam)
    dK, dQ, log_norm = ch13.kq_grad(problem, torch.tensor(K), torch.tensor(Q), penalty=lam)
    np.testing.assert_allclose(dK.numpy(), (gK / gK.norm()).numpy(), atol=1e-12)
    np.testing.assert_allclose(dQ.numpy(), (gQ / gQ.norm()).numpy(), atol=1e-12)
    W = torch.tensor(K @ Q.T).reshape(-1)
    assert abs(float(log_norm) - float(grad.grad_p(problem, W).log_norm)) < 1e-14


def test_penalty_alone_where_the_loss_gradient_underflows(inst):
    """Far out along a separating direction ||G|| is below any float: the penalty's gradient K, Q remains."""
    problem = tfsvm.w_problem(inst["X"], inst["Y"], inst["v"], inst["Z"])
    W = tfsvm.frobenius_svm(inst["X"], inst["Z"], [0, 1, 2]).x
    U, S, Vt = np.linalg.svd(W)
    K, Q = torch.tensor(U * np.sqrt(S) * 300.0), torch.tensor(Vt.T * np.sqrt(S) * 300.0)
    dK, dQ, log_norm = ch13.kq_grad(problem, K, Q, penalty=ch13.PENALTY)
    assert float(log_norm) < np.log(ch13.PENALTY) - ch13.PENALTY_NEGLIGIBLE  # the loss's share is dropped
    np.testing.assert_allclose(dK.numpy(), (K / K.norm()).numpy(), atol=1e-12)
    np.testing.assert_allclose(dQ.numpy(), (Q / Q.norm()).numpy(), atol=1e-12)
    # without the penalty the direction is the loss's alone (not K's)
    dK0, _, _ = ch13.kq_grad(problem, K, Q)
    assert float((dK0 * dK).sum()) < 0.999


def test_penalised_runs_agree_compiled_and_torch_and_balance(inst, monkeypatch):
    """A strong penalty: both code paths agree and the factors end balanced (K^T K = Q^T Q at a stationary point)."""
    problem = tfsvm.w_problem(inst["X"], inst["Y"], inst["v"], inst["Z"])
    rng = np.random.default_rng(6)
    K0, Q0 = rng.uniform(-0.5, 0.5, size=(2, 5, 5))
    kw = dict(steps=3000, lr=0.002, record_every=3000, separate=False, penalty=1e-3)
    a = ch13.train_kq(problem, K0, Q0, **kw)
    monkeypatch.setenv("MMTOKEN_FASTPATH", "off")
    b = ch13.train_kq(problem, K0, Q0, **kw)
    np.testing.assert_allclose(a.W.numpy(), b.W.numpy(), rtol=1e-8, atol=1e-8)
    K, Q = a.K[-1].numpy(), a.Q[-1].numpy()
    imbalance = np.linalg.norm(K.T @ K - Q.T @ Q) / np.linalg.norm(K @ Q.T)
    start = np.linalg.norm(K0.T @ K0 - Q0.T @ Q0) / np.linalg.norm(K0 @ Q0.T)
    assert imbalance < 0.05 * start


def test_random_instances_are_the_public_draws():
    """Instance b is the draw of seed + b (one torch.Generator each), float32 values, unit rows, labels +-1."""
    batch = tfsvm.random_instances(3, 2, 4, 5, seed=7)
    for b in range(3):
        one = tfsvm.random_instances(1, 2, 4, 5, seed=7 + b)
        for k in "XZvY":
            assert np.array_equal(batch[k][b], one[k][0])
    for k in "XZv":
        assert np.array_equal(batch[k].astype(np.float32).astype(np.float64), batch[k])
        np.testing.assert_allclose(np.linalg.norm(batch[k], axis=-1), 1.0, rtol=1e-6)
    assert set(np.unique(batch["Y"])) <= {-1.0, 1.0}
    g = torch.Generator().manual_seed(7)  # the head is the generator's first draw
    v = torch.randn(5, generator=g)
    assert np.array_equal(batch["v"][0], (v / v.norm()).double().numpy())


def test_naive_grad_is_autograd(inst):
    problem = tfsvm.w_problem(inst["X"], inst["Y"], inst["v"], inst["Z"])
    p = torch.tensor(np.random.default_rng(2).normal(size=25))
    np.testing.assert_allclose(
        ch13.naive_grad(problem, p).numpy(), grad.autograd_grad(problem, p).numpy(), rtol=1e-10, atol=1e-15
    )


def test_compiled_and_torch_kq_agree(inst, monkeypatch):
    problem = tfsvm.w_problem(inst["X"], inst["Y"], inst["v"], inst["Z"])
    rng = np.random.default_rng(4)
    K0, Q0 = rng.uniform(-0.4, 0.4, size=(2, 2, 5, 5))
    runs = {sep: ch13.train_kq(problem, K0, Q0, steps=30, record_every=10, separate=sep) for sep in (True, False)}
    monkeypatch.setenv("MMTOKEN_FASTPATH", "off")
    for sep, a in runs.items():
        b = ch13.train_kq(problem, K0, Q0, steps=30, record_every=10, separate=sep)
        assert a.steps.tolist() == b.steps.tolist() == [0, 10, 20, 30]
        np.testing.assert_allclose(a.W.numpy(), b.W.numpy(), rtol=1e-9, atol=1e-9)
    # the separate and joint steps are different algorithms
    assert not np.allclose(runs[True].W[-1].numpy(), runs[False].W[-1].numpy())
    # one step: each factor moves by lr (separate), or the pair by lr (joint), in Frobenius norm
    step = lambda A: (A[1] - A[0]).flatten(-2).norm(dim=-1).numpy()
    one = {sep: ch13.train_kq(problem, K0, Q0, steps=1, record_every=1, separate=sep) for sep in (True, False)}
    np.testing.assert_allclose(step(one[True].K), 0.1, rtol=1e-12)
    np.testing.assert_allclose(step(one[True].Q), 0.1, rtol=1e-12)
    np.testing.assert_allclose(np.hypot(step(one[False].K), step(one[False].Q)), 0.1, rtol=1e-12)


def test_frobenius_svm_is_paper_a_att_svm(inst):
    alpha = [0, 1, 2]
    sol = tfsvm.frobenius_svm(inst["X"], inst["Z"], alpha)
    assert sol.x.shape == (5, 5)
    assert max(sol.kkt_relative().values()) <= svm.KKT_TOL
    margins = geometry.margins(tfsvm.w_keys(inst["X"], inst["Z"]).numpy(), alpha, sol.x.ravel())
    assert np.nanmin(margins) == pytest.approx(1.0, abs=1e-8)
    nuc = ch13.nuclear_svm(inst["X"], inst["Z"], alpha)
    # same feasible set, different norms: each solution wins on its own objective
    assert np.linalg.norm(sol.x) <= np.linalg.norm(nuc.W) + 1e-8
    s = lambda A: np.linalg.svd(A, compute_uv=False).sum()
    assert nuc.objective <= s(sol.x) * (1 + 1e-7)


def test_nuclear_svm_certificate(inst):
    sol = ch13.nuclear_svm(inst["X"], inst["Z"], [3, 0, 1])
    c = sol.check
    assert c["primal"] <= 1e-6 and c["dual"] <= 1e-6 and c["gap"] <= 1e-6 and c["active"] >= 1
    # weak duality by hand: M = sum mu_j A_j has ||M||_op ~ 1 and sum mu ~ ||W||_*
    M = (np.maximum(sol.dual, 0) @ sol.D).reshape(5, 5)
    assert np.linalg.norm(M, 2) == pytest.approx(1.0, rel=1e-5)
    assert sol.dual.sum() == pytest.approx(sol.objective, rel=1e-5)
    # a perturbed feasible point is never better
    rng = np.random.default_rng(5)
    for _ in range(20):
        W = sol.W + 1e-2 * rng.normal(size=(5, 5))
        m = (sol.D @ W.ravel()).min()
        if m > 0:
            assert np.linalg.svd(W / m, compute_uv=False).sum() >= sol.objective * (1 - 1e-7)


def test_certificate_detects_a_suboptimal_point(inst):
    sol = ch13.nuclear_svm(inst["X"], inst["Z"], [3, 0, 1])
    fro = tfsvm.frobenius_svm(inst["X"], inst["Z"], [3, 0, 1]).x
    bad = ch13.nuclear_certificate(fro, sol.D, sol.dual)
    assert bad["gap"] > 1e-3


def test_rank_threshold():
    W = np.diag([1.0, 0.5, 0.011, 0.009])
    assert ch13.numerical_rank(W) == 3
    assert ch13.numerical_rank(np.stack([W, np.eye(4)])).tolist() == [3, 4]


def test_infeasible_selection_raises():
    # two inputs with the same tokens and query cannot select different tokens... unless d allows;
    # one input whose tokens are identical cannot separate any selection
    X = np.ones((1, 3, 2))
    Z = np.array([[1.0, 0.0]])
    with pytest.raises(svm.InfeasibleSVM):
        ch13.nuclear_svm(X, Z, [0])
    with pytest.raises(svm.InfeasibleSVM):
        tfsvm.frobenius_svm(X, Z, [0])


@pytest.mark.parametrize("bad", ["shape", "nan", "alpha", "Z"])
def test_bad_input_raises(inst, bad):
    X, Z, alpha = inst["X"].copy(), inst["Z"].copy(), [0, 1, 2]
    if bad == "shape":
        X = X[0]
    elif bad == "nan":
        X[0, 0, 0] = np.nan
    elif bad == "alpha":
        alpha = [0, 1, 9]
    else:
        Z = Z[:, :3]
    for f in (ch13.nuclear_svm, tfsvm.frobenius_svm):
        with pytest.raises(ValueError, match="X|Z|alpha"):
            f(X, Z, alpha)
    if bad in ("shape", "nan", "Z"):
        with pytest.raises(ValueError, match="X|Z"):
            tfsvm.w_keys(X, Z)


def test_the_checks_chapter_13_calls_name_the_argument(inst):
    problem = tfsvm.w_problem(inst["X"], inst["Y"], inst["v"], inst["Z"])
    assert tfsvm.w_dim(problem) == 5
    with pytest.raises(ValueError, match="not a W problem"):
        tfsvm.w_dim(type(problem)(problem.K[..., :24], problem.gamma))
    with pytest.raises(ValueError, match="problem must be an AttentionProblem"):
        tfsvm.w_dim(inst["X"])
    with pytest.raises(ValueError, match="W0 must have shape"):
        tfsvm.as_square(np.eye(4), 5, "W0")
    assert tfsvm.as_square(np.eye(5), 5).dtype == torch.float64
    K, alpha = tfsvm.keys_selection(inst["X"], inst["Z"], [0, 1, 2])
    assert K.shape == (3, 4, 25) and alpha.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="at least 2"):
        tfsvm.keys_selection(inst["X"][:, :1], inst["Z"], [0, 0, 0])


def test_trainers_refuse_bad_input(inst):
    problem = tfsvm.w_problem(inst["X"], inst["Y"], inst["v"], inst["Z"])
    with pytest.raises(ValueError, match="W0"):
        tfsvm.train_w(problem, np.zeros((4, 4)), steps=1)
    with pytest.raises(ValueError, match="K0|Q0"):
        ch13.train_kq(problem, np.zeros((5, 2)), np.zeros((5, 3)), steps=1)
    with pytest.raises(ValueError, match="Y"):
        tfsvm.w_problem(inst["X"], inst["Y"] * 2, inst["v"], inst["Z"])


# ---------------------------------------------------------------- the rank-constrained SVM (m < d)


def test_balanced_factors_cost_the_truncated_nuclear_norm():
    W = np.random.default_rng(2).normal(size=(5, 5))
    S = np.linalg.svd(W, compute_uv=False)
    for m in (1, 3, 5):
        x = ch13.balanced_factors(W, m)
        K, Q = x[: 5 * m].reshape(5, m), x[5 * m :].reshape(5, m)
        assert np.abs(K @ Q.T - ch13.truncate(W, m)).max() < 1e-12
        assert 0.5 * (x @ x) == pytest.approx(S[:m].sum(), rel=1e-12)
        assert ch13.numerical_rank(ch13.truncate(W, m), 1e-9) == m


def test_rank_svm_is_the_convex_svm_where_the_rank_bound_is_loose(inst):
    alpha = [3, 0, 1]
    nuc = ch13.nuclear_svm(inst["X"], inst["Z"], alpha)
    m = nuc.rank(1e-6)
    sol = ch13.rank_svm(inst["X"], inst["Z"], alpha, m, n_starts=5)
    assert sol.lower == pytest.approx(nuc.objective)
    # the factored problem's value is the convex one (the SDP is certified), and W is the same point
    assert sol.objective == pytest.approx(nuc.objective, rel=1e-5)
    assert ch13.corr(sol.W, nuc.W) > 1 - 1e-6
    assert sol.agree >= 1


def test_rank_svm_binds_below_the_rank_of_att_svm_star(inst):
    alpha = [3, 0, 1]
    nuc = ch13.nuclear_svm(inst["X"], inst["Z"], alpha)
    m = nuc.rank(1e-6) - 1
    assert m >= 1
    sol = ch13.rank_svm(inst["X"], inst["Z"], alpha, m)
    margins = nuc.D @ sol.W.ravel()
    assert margins.min() >= 1 - 1e-8  # feasible
    assert np.linalg.matrix_rank(sol.W, tol=1e-9 * np.abs(sol.W).max()) <= m
    assert sol.objective > nuc.objective * (1 + 1e-4)  # the rank constraint costs something
    # balanced at the optimum: the factor cost is the nuclear norm of K Q^T
    assert np.linalg.svd(sol.W, compute_uv=False).sum() == pytest.approx(sol.objective, rel=1e-5)
    # no feasible rank-m point nearby is cheaper (a local minimum): perturb the factors, rescale to margin 1
    rng = np.random.default_rng(0)
    for _ in range(20):
        K = sol.K + 1e-3 * rng.normal(size=sol.K.shape)
        Q = sol.Q + 1e-3 * rng.normal(size=sol.Q.shape)
        W = K @ Q.T
        W = W / (nuc.D @ W.ravel()).min()
        assert np.linalg.svd(W, compute_uv=False).sum() >= sol.objective * (1 - 1e-6)
    # the run's view: polishing the best point's own direction stays there
    again = ch13.polish(inst["X"], inst["Z"], alpha, 3.0 * sol.W, m)
    assert again.objective == pytest.approx(sol.objective, rel=1e-6)


def test_rank_svm_and_polish_name_bad_arguments(inst):
    alpha = [3, 0, 1]
    with pytest.raises(ValueError, match="m must be at most d"):
        ch13.rank_svm(inst["X"], inst["Z"], alpha, 6)
    with pytest.raises(ValueError, match="m"):
        ch13.rank_svm(inst["X"], inst["Z"], alpha, 0)
    with pytest.raises(ValueError, match="n_starts"):
        ch13.rank_svm(inst["X"], inst["Z"], alpha, 2, n_starts=-1)
    with pytest.raises(ValueError, match="W must separate"):
        ch13.polish(inst["X"], inst["Z"], alpha, np.zeros((5, 5)), 2)


def test_the_rank_claims_check_rejects_both_competitors():
    # the claim's own check on the chapter's run; each competitor is the same check with another target
    for target in ("nuclear", "truncated"):
        m = ch13.constrained_check(target)
        assert not m.passed and m.value["below_0.99"] > 0 and m.value["binding"] >= 1
