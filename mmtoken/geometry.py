"""Geometry of token selection: optimal tokens, SVM-neighbours, local optimality, cones, correlations."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from .svm import InfeasibleSVM, SVMSolution, att_svm


def _np(a) -> np.ndarray:
    return np.asarray(a.detach().cpu() if hasattr(a, "detach") else a, dtype=float)


def correlation(a, b) -> np.ndarray | float:
    """Cosine ``<a, b> / (||a|| ||b||)`` over the last axis (broadcasting)."""
    a, b = _np(a), _np(b)
    with np.errstate(invalid="ignore", divide="ignore"):  # a zero vector has no direction: nan
        c = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return float(c) if np.ndim(c) == 0 else c


def optimal_tokens(gamma) -> np.ndarray:
    """``opt_i = argmax_t gamma_it``, ``(..., n)``."""
    return _np(gamma).argmax(-1)


def selection(K, p) -> np.ndarray:
    """The token each input attends to most at ``p``: ``argmax_t <k_it, p>``, ``(..., n)``."""
    K, p = _np(K), _np(p)
    return np.einsum("...ntm,...m->...nt", K, p).argmax(-1)


def margins(K, alpha, p) -> np.ndarray:
    """``(k_{i alpha_i} - k_it)^T p`` for every ``t != alpha_i``; ``nan`` at ``alpha_i``. ``(n, T)``."""
    K, p = _np(K), _np(p)
    alpha = np.asarray(alpha, int)
    z = K @ p
    out = z[np.arange(len(alpha)), alpha][:, None] - z
    out[np.arange(len(alpha)), alpha] = np.nan
    return out


def svm_neighbours(K, alpha, p_mm, tol: float = 1e-6) -> list[tuple[int, int]]:
    """Tokens whose ATT-SVM constraint is active at ``p_mm``: ``(k_{i alpha_i} - k_it)^T p_mm = 1``."""
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


def classify(K, gamma, alpha, tol: float = 1e-6) -> SelectionReport:
    """Feasibility, SVM-neighbours and local optimality of ``alpha``.

    ``alpha`` is locally optimal when ATT-SVM(alpha) is feasible and every
    selected token scores strictly higher than each of its SVM-neighbours.
    """
    K, gamma = _np(K), _np(gamma)
    alpha = tuple(int(a) for a in alpha)
    glob = alpha == tuple(optimal_tokens(gamma).tolist())
    try:
        sol: SVMSolution = att_svm(K, alpha)
    except InfeasibleSVM:
        return SelectionReport(alpha, False, None, [], False, glob)
    nb = svm_neighbours(K, alpha, sol.x, tol)
    local = all(gamma[i, alpha[i]] > gamma[i, t] for i, t in nb)
    return SelectionReport(alpha, True, sol.x, nb, local, glob)


def enumerate_selections(K, gamma, tol: float = 1e-6) -> list[SelectionReport]:
    """Classify every selection (one token per input): ``T^n`` of them, so keep ``n, T`` small."""
    n, T = _np(gamma).shape
    if T ** n > 4096:
        raise ValueError(f"{T}^{n} selections are too many to enumerate")
    return [classify(K, gamma, a, tol) for a in itertools.product(range(T), repeat=n)]


def in_cone(p, q, mu: float, R: float) -> np.ndarray | bool:
    """Membership in ``C_{mu,R}(q) = {p : ||p|| >= R, <p/||p||, q/||q||> >= 1 - mu}``."""
    p = _np(p)
    ok = (np.linalg.norm(p, axis=-1) >= R) & (correlation(p, q) >= 1 - mu)
    return bool(ok) if np.ndim(ok) == 0 else ok


def cone_start(q, mu: float, R: float, n_starts: int, seed: int = 0) -> np.ndarray:
    """``n_starts`` random points of norm ``R`` on the boundary-ish of the cone ``C_{mu,R}(q)``.

    Each is ``R`` times a unit vector at correlation exactly ``1 - mu/2`` with ``q``.
    """
    q = _np(q)
    u = q / np.linalg.norm(q)
    rng = np.random.default_rng(seed)
    c = 1 - mu / 2
    out = []
    for _ in range(n_starts):
        r = rng.normal(size=u.shape)
        r -= (r @ u) * u
        if np.linalg.norm(r) == 0:
            out.append(R * u)
            continue
        r /= np.linalg.norm(r)
        out.append(R * (c * u + np.sqrt(1 - c * c) * r))
    return np.array(out)


def to_numpy(t: torch.Tensor | np.ndarray) -> np.ndarray:
    return _np(t)
