"""The generalised attention SVM and the multi-token instance (chapter 15, mmtoken.chapters.ch15_multi_token)."""

import warnings

import cvxpy as cp
import numpy as np
import pytest
import torch

from mmtoken.attention import geometry, svm
from mmtoken.chapters import ch15_multi_token as mt
from mmtoken.selfattention import tfsvm


@pytest.fixture
def XZ():
    rng = np.random.default_rng(0)
    return rng.normal(size=(3, 4, 5)), rng.normal(size=(3, 5))


def test_w_keys_bilinear(XZ):
    X, Z = XZ
    W = np.random.default_rng(1).normal(size=(5, 5))
    K = np.asarray(tfsvm.w_keys(X, Z))
    assert K.shape == (3, 4, 25)
    np.testing.assert_allclose(K @ W.reshape(-1), np.einsum("ntd,de,ne->nt", X, W, Z), atol=1e-12)


def test_w_keys_bad_input(XZ):
    X, Z = XZ
    with pytest.raises(ValueError, match="Z"):
        tfsvm.w_keys(X, Z[:2])
    with pytest.raises(ValueError, match="X"):
        tfsvm.w_keys(X[0], Z)


def test_singletons_reduce_to_att_svm(XZ):
    K = np.asarray(tfsvm.w_keys(*XZ))
    for alpha in [(0, 1, 2), (3, 3, 0)]:
        sol = mt.gen_svm(K, [[a] for a in alpha])
        np.testing.assert_allclose(sol.x, svm.att_svm(K, alpha).x, atol=1e-7)
        assert len(sol.E) == 0


@pytest.mark.parametrize("tied", [True, False])
def test_kkt_and_cvxpy(XZ, tied):
    K = np.asarray(tfsvm.w_keys(*XZ))
    sets = [(0, 1), (2,), (1, 2, 3)]
    sol = mt.gen_svm(K, sets, tied)
    assert all(v < 1e-8 for v in sol.kkt_residuals().values()), sol.kkt_residuals()
    assert sol.active.any()
    w = cp.Variable(K.shape[-1])
    cons = [sol.D @ w >= 1] + ([sol.E @ w == 0] if len(sol.E) else [])
    cp.Problem(cp.Minimize(cp.sum_squares(w)), cons).solve(solver="CLARABEL")
    np.testing.assert_allclose(sol.x, w.value, atol=1e-6)


def test_ties_hold_and_untied_is_not_longer(XZ):
    K = np.asarray(tfsvm.w_keys(*XZ))
    sets = [(0, 1), (2,), (1, 2, 3)]
    tied, free = mt.gen_svm(K, sets), mt.gen_svm(K, sets, tied=False)
    for i, o in enumerate(sets):
        logits = K[i] @ tied.x
        assert np.ptp(logits[list(o)]) < 1e-8
        assert logits[list(o)].min() - np.delete(logits, o).max() >= 1 - 1e-8
    assert np.linalg.norm(free.x) <= np.linalg.norm(tied.x) + 1e-9  # fewer constraints


def test_infeasible_reported():
    # input 0: token 1 is the mean of tokens 0 and 2, so {0, 2} tied above 1 is impossible
    K = np.array([[[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]])
    with pytest.raises(svm.InfeasibleSVM):
        mt.gen_svm(K, [(0, 2)])
    assert mt.gen_svm(K, [(0,)]).x.shape == (2,)  # feasible


def test_bad_sets():
    K = np.zeros((2, 3, 2))
    with pytest.raises(ValueError, match="one set per input"):
        mt.gen_svm(K, [(0,)])
    with pytest.raises(ValueError, match="sets\\[1\\]"):
        mt.gen_svm(K, [(0,), ()])
    with pytest.raises(ValueError, match="sets\\[0\\]"):
        mt.gen_svm(K, [(0, 5), (1,)])
    with pytest.raises(ValueError, match="all T tokens"):
        mt.gen_svm(K, [(0, 1, 2), (0, 1, 2)])


def test_sets_from_probs():
    P = np.array([[0.6, 0.4 - 1e-7, 1e-7], [1 - 2e-7, 1e-7, 1e-7]])
    assert mt.sets_from_probs(P) == [(0, 1), (0,)]
    with pytest.raises(ValueError, match="no clean split"):
        mt.sets_from_probs(np.array([[0.9, 0.0999, 1e-4]]), low=1e-6)


def test_simplex_projection():
    rng = np.random.default_rng(2)
    for y in rng.normal(size=(20, 5)):
        s = mt.simplex_projection(y)
        assert abs(s.sum() - 1) < 1e-12 and s.min() >= 0
        # optimality: no vertex direction improves ||s - y||^2 (KKT of the projection)
        g = s - y
        assert g.min() >= g[s > 0].max() - 1e-12


def test_instance_construction():
    inst = mt.make_instance()
    G = np.einsum("ntd,nsd->nts", inst.X, inst.X)
    np.testing.assert_allclose(G, np.broadcast_to(np.eye(4), G.shape), atol=1e-12)
    np.testing.assert_allclose(inst.gamma, mt.SCORES, atol=1e-12)
    assert inst.optimal_sets() == [(0, 1), (1, 2, 3), (2,), (0, 3)]
    assert inst.complementarity_gap() > 0
    with pytest.raises(ValueError, match="d must"):
        mt.make_instance(d=4)


def test_closed_form_gradient_matches_autograd():
    inst = mt.make_instance()
    obj = mt.Objective(inst)
    W = torch.randn(3, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 2
    G, _ = obj.grad(W)
    Wr = W.clone().requires_grad_(True)
    (Ga,) = torch.autograd.grad(obj.value(Wr).sum(), Wr)
    torch.testing.assert_close(G, Ga, rtol=1e-10, atol=1e-13)


def test_optimal_attention_beats_random_attention():
    inst = mt.make_instance()
    S = inst.optimal_attention()
    h = lambda s: (
        np.einsum("nt,nt->n", s, inst.gamma) - inst.lam * np.einsum("nt,ntd->nd", s, inst.X).__pow__(2).sum(-1)
    )
    rng = np.random.default_rng(3)
    for _ in range(200):
        R = rng.dirichlet(np.ones(4), size=4)
        assert (h(R) <= h(S) + 1e-12).all()


def test_simplex_qp_matches_projection_and_cvxpy():
    rng = np.random.default_rng(4)
    for _ in range(10):
        g = rng.normal(size=4)
        np.testing.assert_allclose(mt.simplex_qp(g, 0.3 * np.eye(4)), mt.simplex_projection(g / 0.6), atol=1e-10)
        X = rng.normal(size=(4, 5))
        M = 0.3 * X @ X.T
        s = cp.Variable(4)
        cp.Problem(cp.Maximize(g @ s - cp.quad_form(s, M)), [s >= 0, cp.sum(s) == 1]).solve(solver="CLARABEL")
        np.testing.assert_allclose(mt.simplex_qp(g, M), s.value, atol=1e-6)
    with pytest.raises(ValueError, match="g must be"):
        mt.simplex_qp(np.zeros(3), np.eye(4))


def test_generic_instance_criteria():
    seed, inst = mt.generic_instance()
    S = inst.optimal_attention()
    sizes = (S > 0).sum(1)
    assert sizes.max() < 4 and (sizes >= 2).sum() >= 2 and S[S > 0].min() >= mt.GENERIC["min_weight"]
    sets = inst.optimal_sets()
    tied = mt.w_gen_svm(inst.X, inst.Z, sets)
    free = mt.w_gen_svm(inst.X, inst.Z, sets, tied=False)
    assert geometry.correlation(tied.ravel(), free.ravel()) < mt.GENERIC["max_tied_untied_corr"]


# ---------------------------------------------------------------- paper C's own experiment (ReLU head)
def test_public_draw_reproduces_the_public_generator():
    """Seed 1 at n = 3, T = 4, d = 4, as the public ``data_generator(1, mode="relu")`` draws it (checked once
    against the public notebook's generator run on the same torch; the values are float32 draws)."""
    X, Y, Z, V = mt.public_draw(1, 3, 4, 4)
    assert X.shape == (3, 4, 4) and Y.shape == (3,) and Z.shape == (3, 4) and V.shape == (4, 4)
    assert X.dtype == np.float64
    np.testing.assert_allclose(V[0], [-0.40382618, -0.19858682, -0.17310914, -0.42603162], atol=1e-7)
    np.testing.assert_allclose(X[0, 0], [-0.45348573, -0.75525045, 0.45515788, 0.12953264], atol=1e-7)
    np.testing.assert_allclose(Z[0], [-0.11623929, 0.69840926, -0.20818025, -0.67481399], atol=1e-7)
    np.testing.assert_array_equal(Y, [1.0, -1.0, 1.0])
    np.testing.assert_allclose(np.linalg.norm(V), 1.0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(X, axis=-1), 1.0, atol=1e-6)
    # seed 3 draws no negative label: the public loop skips it
    assert (mt.public_draw(3, 3, 4, 4)[1] > 0).all()


def test_public_draw_and_init_bad_input():
    with pytest.raises(ValueError, match="d"):
        mt.public_draw(1, 3, 4, 0)
    with pytest.raises(ValueError, match="seed"):
        mt.public_draw(-1)
    with pytest.raises(ValueError, match="init_seed"):
        mt.public_init(1, 4, -2)
    W0 = mt.public_init(5, 9)
    assert W0.shape == (9, 9) and np.abs(W0).max() <= 1 / 3
    np.testing.assert_array_equal(W0, mt.public_init(5, 9))
    assert not np.array_equal(W0, mt.public_init(5, 9, init_seed=1))


def _batch(seeds=(1, 2), d=5):
    draws = [mt.public_draw(s, 3, 4, d) for s in seeds]
    return mt.PublicBatch(*(np.stack([dr[k] for dr in draws]) for k in range(4)))


def test_relu_gradient_matches_autograd():
    obj = _batch().objective()
    W = torch.randn(2, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 3
    G, log_s = obj.grad(W)
    Wr = W.clone().requires_grad_(True)
    (Ga,) = torch.autograd.grad(obj.value(Wr).sum(), Wr)
    torch.testing.assert_close(G, Ga, rtol=1e-10, atol=1e-15)
    torch.testing.assert_close(log_s.exp().sum(-1), torch.ones(2, 3, dtype=torch.float64))


def test_relu_gradient_keeps_its_direction_when_saturated():
    """Far out along a direction the top token's row is formed from the small probabilities: the gradient lies in
    the span of the key differences ``(x_it - x_iu) z_i^T`` (the naive ``g - s^T g`` loses that once ``1 - s_top``
    rounds)."""
    b = _batch(seeds=(1,))
    obj = b.objective()
    W = torch.randn(1, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 200
    G, log_s = obj.grad(W)
    assert log_s.exp().max(-1).values.min() == 1.0  # saturated in float64
    K = np.asarray(tfsvm.w_keys(b.X[0], b.Z[0]))  # (n, T, d^2)
    diffs = (K[:, 1:] - K[:, :1]).reshape(-1, 25)  # the span of the key differences
    g = G[0].numpy().ravel()
    coef = np.linalg.lstsq(diffs.T, g, rcond=None)[0]
    assert np.linalg.norm(diffs.T @ coef - g) <= 1e-8 * np.linalg.norm(g)


def test_public_batch_and_train_w_bad_shapes():
    b = _batch()
    with pytest.raises(ValueError, match="PublicBatch"):
        mt.PublicBatch(b.X, b.Y[:, :2], b.Z, b.V).objective()
    with pytest.raises(ValueError, match="W0"):
        mt.train_w(b, np.zeros((2, 4, 4)), 1, 0.1)


def test_public_fit_recovers_finite_part_and_coefficient():
    """``W_last = W_fin + 5 W_mm`` with ``W_fin`` in the ties' span and attention from ``W_last``: the fit returns
    that ``W_fin`` (the projection on the ties' span) and ``R = 5``."""
    X, _, Z, _ = mt.public_draw(1, 3, 4, 5)
    sets = [(0, 1), (2,), (1, 3)]
    W_mm = mt.w_gen_svm(X, Z, sets)
    _, _, E, _ = mt.constraint_rows(np.asarray(tfsvm.w_keys(X, Z)), sets)
    A = np.random.default_rng(0).normal(size=25)
    W_fin0 = np.linalg.lstsq(E, E @ A, rcond=None)[0].reshape(5, 5)  # projection of A on the ties' span
    W_last = W_fin0 + 5.0 * W_mm
    log_s = torch.log_softmax(torch.as_tensor(np.einsum("ntd,de,ne->nt", X, W_last, Z)), -1).numpy()
    got_mm, W_fin, R = mt.public_fit(X, Z, log_s, sets, W_last)
    np.testing.assert_allclose(got_mm, W_mm)
    np.testing.assert_allclose(W_fin, W_fin0, atol=1e-9)
    assert abs(R - 5.0) < 1e-9
    assert mt.projection_residual(X, Z, sets, W_fin, W_last) < 1e-10
    assert abs(geometry.correlation(W_last.ravel(), (W_fin + R * W_mm).ravel()) - 1) < 1e-12


def test_public_runs_small():
    """A short public loop: the first pub_runs draws with a negative label, every seed accounted for, every run
    kept (none chosen by its outcome), records to the last step."""
    s = mt.Settings(pub_ds=(4,), pub_runs=3, pub_steps=301)
    a, meta = mt.public_runs(s, 4)
    seeds = a["seed"]
    assert len(seeds) == 3 and seeds[0] >= s.pub_first_seed and (np.diff(seeds) > 0).all()
    assert meta["last_seed"] == seeds[-1]  # the loop stops at the last draw it needs
    assert meta["skipped"] + len(seeds) == meta["last_seed"] - s.pub_first_seed + 1
    for sd in seeds:  # each run's draw has a negative label, as the public loop requires
        assert (mt.public_draw(int(sd), s.pub_n, s.pub_T, 4)[1] < 0).any()
    assert a["steps"][-1] == s.pub_steps and a["eq"].shape == (3, len(a["steps"]))
    fit = np.isfinite(a["eq"][:, -1])
    assert (a["eq"][fit, -1] >= a["mm"][fit, -1] - 1e-6).all()  # at the last step the fit includes W_mm's line
    assert (a["fin_residual"][np.isfinite(a["fin_residual"])] < 1e-8).all()
    clean = a["clean"].astype(bool)
    assert (a["log10_out"][clean] <= np.log10(s.pub_low) + 1e-9).all()  # a clean run: nothing else above low
    for sets in meta["sets"]:
        assert sets == [] or (len(sets) == s.pub_n and all(len(o) >= 1 for o in sets))


def test_public_result_gap_bad_ref():
    r = mt.PublicResult((4,), {4: {"eq": np.ones((2, 3)), "mm": np.ones((2, 3)), "one": np.ones((2, 3))}}, {})
    np.testing.assert_allclose(r.gap(4), 0.0)
    with pytest.raises(ValueError, match="ref"):
        r.gap(4, "untied")


@pytest.mark.parametrize("c", [1e-300, 1e-200, 1.0, 1e200, 1e300])
def test_gen_svm_kkt_holds_at_any_scale_of_the_keys(c):
    """Keys near float64's ends: the same x / c and the same (rounding-sized) KKT residuals, no NaN, no warning."""
    K = np.random.default_rng(0).standard_normal((3, 4, 12))
    sets = [(0,), (0, 1), (2,)]
    ref = mt.gen_svm(K, sets)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an overflow or 0/0 inside the solve or the check fails the test
        sol = mt.gen_svm(K * c, sets)
        res = sol.kkt_residuals()
    np.testing.assert_allclose(sol.x * c, ref.x, rtol=1e-9)
    assert all(np.isfinite(v) and v < 1e-12 for v in res.values()), res
    assert (sol.active == ref.active).all()


def test_gen_svm_refuses_a_solution_float64_cannot_hold():
    K = np.random.default_rng(0).standard_normal((3, 4, 12))
    with pytest.raises(ValueError, match="rescale K"):
        mt.gen_svm(K * 1e-310, [(0,), (0, 1), (2,)])
