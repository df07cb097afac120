"""Over-parameterisation in W (chapter 14, mmtoken.chapters.ch14_overparam)."""

import itertools

import numpy as np
import pytest

from mmtoken.chapters import ch14_overparam as op
from mmtoken.selfattention import tfsvm


def test_instances_shapes_and_scores():
    r = op.w_instances(5, 3, 4, 6, seed=1)
    assert r["K"].shape == (5, 3, 4, 36)
    np.testing.assert_allclose(r["gamma"], r["Y"][..., None] * np.einsum("cntd,cd->cnt", r["X"], r["v"]))
    K0 = np.asarray(tfsvm.w_keys(r["X"][2], r["Z"][2]))
    np.testing.assert_allclose(r["K"][2], K0)
    with pytest.raises(ValueError, match="T >= 2"):
        op.w_instances(2, 3, 1, 4)


def test_certificate_agrees_with_lp():
    """Where the rank certificate holds, every selection is LP-feasible; below the threshold some are not."""
    r = op.w_instances(6, 3, 4, 3, seed=2)
    cert = op.rank_certificate(r["X"], r["Z"])
    assert cert.all()
    for K in r["K"][:3]:
        assert op.all_selections_feasible(K) == (64, 0, 0)
    low = op.w_instances(6, 3, 4, 2, seed=2)
    assert not op.rank_certificate(low["X"], low["Z"]).any()
    counts = np.array([op.all_selections_feasible(K) for K in low["K"][:3]])
    assert counts[:, 1].sum() > 0 and counts[:, 2].sum() == 0


def test_constructed_infeasible_selection():
    # one input, d = 2: token 1 is the midpoint of tokens 0 and 2, so it can never be the strict top
    X = np.array([[[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]])
    Z = np.array([[1.0, 0.3]])
    K = tfsvm.w_keys(X, Z)
    assert op.selection_feasible(K, [1]) is False
    assert op.selection_feasible(K, [0]) is True
    # the certificate is about *affine* independence: collinear tokens fail it
    assert not op.rank_certificate(X[None], Z[None])[0]


def test_rank_certificate_bad_input():
    with pytest.raises(ValueError, match="X must be"):
        op.rank_certificate(np.zeros((2, 3, 4)), np.zeros((2, 4)))


def test_certificate_construction_is_feasible_point():
    """The lemma's explicit W meets every margin of every selection."""
    r = op.w_instances(1, 3, 4, 4, seed=3)
    X, Z = r["X"][0], r["Z"][0]
    Wd = np.linalg.pinv(Z)  # (d, n): columns w_i with w_i^T z_j = delta_ij
    for alpha in itertools.product(range(4), repeat=3):
        W = np.zeros((4, 4))
        for i in range(3):
            D = X[i, alpha[i]] - np.delete(X[i], alpha[i], axis=0)
            u = np.linalg.lstsq(D, np.ones(3), rcond=None)[0]
            W += np.outer(u, Wd[:, i])
        for i in range(3):
            lg = X[i] @ W @ Z[i]
            assert lg[alpha[i]] - np.delete(lg, alpha[i]).max() >= 1 - 1e-9
