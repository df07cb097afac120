"""Geometry of token selection: optimal tokens, SVM-neighbours, local optimality, cones, correlations."""

from __future__ import annotations

__all__ = [
    "correlation",
    "optimal_tokens",
    "selection",
    "margins",
    "svm_neighbours",
    "SelectionReport",
    "classify",
    "enumerate_selections",
    "in_cone",
    "optimal_sets",
]

import itertools
from dataclasses import dataclass, field

import numpy as np

from mmtoken import validate
from mmtoken.attention.svm import InfeasibleSVM, SVMSolution, att_svm


def _keys(K) -> np.ndarray:
    K = validate.real_array(K, "K", ndim=3)
    if 0 in K.shape:
        raise ValueError(f"K must have shape (n, T, m) with no empty dimension, got {K.shape}")
    return K


def correlation(a, b) -> np.ndarray | float:
    """Cosine ``<a, b> / (||a|| ||b||)`` over the last axis (broadcasting); ``nan`` where a vector is zero."""
    a, b = validate.real_array(a, "a", min_ndim=1), validate.real_array(b, "b", min_ndim=1)
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"a {a.shape} and b {b.shape} do not broadcast (the last axis is the vector)") from None
    c = (_unit(a) * _unit(b)).sum(-1)
    return float(c) if np.ndim(c) == 0 else c


def _unit(a: np.ndarray) -> np.ndarray:
    """``a / ||a||`` over the last axis, scaled first so huge or tiny vectors neither overflow nor
    underflow; ``nan`` where ``a`` is zero (a zero vector has no direction)."""
    s = np.abs(a).max(-1, keepdims=True)
    safe = np.where(s > 0, s, 1.0)
    u = a / safe
    n = np.linalg.norm(u, axis=-1, keepdims=True)
    return np.where(s > 0, u / np.where(n > 0, n, 1.0), np.nan)


def optimal_tokens(gamma) -> np.ndarray:
    """``opt_i = argmax_t gamma_it``, ``(..., n)``: the first maximiser where scores tie
    (the optimal tokens are then a set, :func:`optimal_sets`; :func:`classify` uses the set)."""
    return optimal_sets(gamma).argmax(-1)


def optimal_sets(gamma) -> np.ndarray:
    """The maximisers of each input's scores, as a boolean mask ``(..., n, T)``: ``gamma_it == max_t gamma_it``.

    Paper A's ``opt_i = argmax_t gamma_it`` is this set; it has one element unless scores tie.
    """
    gamma = validate.real_array(gamma, "gamma", min_ndim=1)
    if gamma.shape[-1] == 0:
        raise ValueError("gamma has no token (last axis of length 0)")
    return gamma == gamma.max(-1, keepdims=True)


def selection(K, p) -> np.ndarray:
    """The token each input attends to most at ``p``: ``argmax_t <k_it, p>``, ``(..., n)``."""
    K, p = validate.real_array(K, "K", min_ndim=3), validate.real_array(p, "p", min_ndim=1)
    if K.shape[-1] != p.shape[-1] or K.shape[-2] == 0:
        raise ValueError(f"keys {K.shape} and p {p.shape} must share the last dimension m (and T >= 1)")
    try:
        return np.einsum("...ntm,...m->...nt", K, p).argmax(-1)
    except ValueError as exc:
        raise ValueError(f"the batch dimensions of K {K.shape} and p {p.shape} do not broadcast") from exc


def margins(K, alpha, p) -> np.ndarray:
    """``(k_{i alpha_i} - k_it)^T p`` for every ``t != alpha_i``; ``nan`` at ``alpha_i``. ``(n, T)``."""
    K = _keys(K)
    alpha = validate.selection(alpha, K.shape[0], K.shape[1])
    p = validate.real_array(p, "p", ndim=1)
    if p.shape != (K.shape[2],):
        raise ValueError(f"p must have shape ({K.shape[2]},) like the keys, got {p.shape}")
    z = K @ p
    out = z[np.arange(len(alpha)), alpha][:, None] - z
    out[np.arange(len(alpha)), alpha] = np.nan
    return out


def svm_neighbours(K, alpha, p_mm, tol: float = 1e-6) -> list[tuple[int, int]]:
    """Tokens whose ATT-SVM constraint is active at ``p_mm``: ``(k_{i alpha_i} - k_it)^T p_mm = 1``."""
    tol = validate.positive(tol, "tol")
    m = margins(K, alpha, p_mm)
    return [(int(i), int(t)) for i, t in zip(*np.nonzero(np.abs(m - 1) <= tol))]


@dataclass
class SelectionReport:
    """Classification of one selection ``alpha`` (definitions of paper A, section 2.2)."""

    alpha: tuple
    feasible: bool
    p_mm: np.ndarray | None
    neighbours: list
    locally_optimal: bool
    globally_optimal: bool
    ties: list = field(default_factory=list)
    """``(i, t)``: token ``t != alpha_i`` of input ``i`` scoring exactly as the selected one; with such a tie at
    the top several selections are globally optimal, and a tied SVM-neighbour makes ``alpha`` not locally optimal."""


def classify(K, gamma, alpha, tol: float = 1e-6) -> SelectionReport:
    """Feasibility, SVM-neighbours, local and global optimality of ``alpha``.

    ``alpha`` is locally optimal when ATT-SVM(alpha) is feasible and every selected token scores strictly higher
    than each of its SVM-neighbours; globally optimal when every selected token is *a* maximiser of its input's
    scores (:func:`optimal_sets`). No verdict depends on the order the tokens are listed in.
    """
    K, gamma = _keys(K), validate.real_array(gamma, "gamma", ndim=2)
    if gamma.shape != K.shape[:2]:
        raise ValueError(f"gamma must have shape (n, T) = {K.shape[:2]} like the keys, got {gamma.shape}")
    tol = validate.positive(tol, "tol")
    alpha = tuple(int(a) for a in validate.selection(alpha, K.shape[0], K.shape[1]))
    rows = np.arange(len(alpha))
    glob = bool(optimal_sets(gamma)[rows, list(alpha)].all())
    sel = gamma[rows, list(alpha)]
    ties = [(int(i), int(t)) for i, t in zip(*np.nonzero(gamma == sel[:, None])) if t != alpha[i]]
    try:
        sol: SVMSolution = att_svm(K, alpha)
    except InfeasibleSVM:  # certified infeasible; a SolverFailed propagates (feasibility unknown)
        return SelectionReport(alpha, False, None, [], False, glob, ties)
    nb = svm_neighbours(K, alpha, sol.x, tol)
    local = all(gamma[i, alpha[i]] > gamma[i, t] for i, t in nb)
    return SelectionReport(alpha, True, sol.x, nb, local, glob, ties)


def enumerate_selections(K, gamma, tol: float = 1e-6) -> list[SelectionReport]:
    """Classify every selection (one token per input): ``T^n`` of them, so keep ``n, T`` small."""
    K, gamma = _keys(K), validate.real_array(gamma, "gamma", ndim=2)
    if gamma.shape != K.shape[:2]:
        raise ValueError(f"gamma must have shape (n, T) = {K.shape[:2]} like the keys, got {gamma.shape}")
    n, T = gamma.shape
    if T**n > 4096:
        raise ValueError(f"{T}^{n} selections are too many to enumerate")
    return [classify(K, gamma, a, tol) for a in itertools.product(range(T), repeat=n)]


def in_cone(p, q, mu: float, R: float) -> np.ndarray | bool:
    """Membership in ``C_{mu,R}(q) = {p : ||p|| >= R, <p/||p||, q/||q||> >= 1 - mu}``; ``mu`` in ``(0, 2]``,
    ``R >= 0``, ``q`` non-zero."""
    mu, R = validate.positive(mu, "mu", maximum=2.0), validate.nonnegative(R, "R")
    p, q = validate.real_array(p, "p", min_ndim=1), validate.real_array(q, "q", ndim=1)
    if not np.any(q):
        raise ValueError("q must be a non-zero vector (the cone's axis)")
    ok = (np.linalg.norm(p, axis=-1) >= R) & (correlation(p, q) >= 1 - mu)
    return bool(ok) if np.ndim(ok) == 0 else ok
