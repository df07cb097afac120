"""The generalised attention SVM and the multi-token instance (chapter 15, mmtoken.chapters.ch15_multi_token)."""

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
