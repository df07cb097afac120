"""Exact points and certificates of ``min ||y|| s.t. G y >= h`` (unit rows ``G``), at the margin's own scale.

The independent route of :func:`mmtoken.attention.svm_solvers.solve_min_norm`: least-distance programming by NNLS
(:func:`least_distance`, :func:`ldp_rounds`), which returns a point or Farkas multipliers, and the exact point on a
set of active rows (:func:`exact_points`), each a candidate that the caller accepts only after its KKT check.

No threshold here is on the margin's size. A vertex a relative ``1e-15`` above the others (an apex over a segment)
has a margin of ``1e-15`` and multipliers of ``1e30``; NNLS alone reads it as infeasible and ``pinv`` cuts the small
singular value that carries it, so the rounds rescale to the margin and the vertex is solved with its columns
scaled by powers of two. Infeasibility is certified only at rounding (:func:`certified`): the margin bound of the
Farkas multipliers at most :data:`CERTIFICATE_TOL` times the rounding it carries (a row formed as a difference of
keys far larger than itself carries their rounding, not its own; multipliers far above ``h^T u`` carry theirs).
"""

from __future__ import annotations

__all__ = [
    "CERTIFICATE_TOL",
    "LDP_RESOLVED",
    "LDP_ROUNDS",
    "LDP_SHRINK",
    "scaled_norm",
    "unit_scale",
    "least_distance",
    "ldp_rounds",
    "certified",
    "active_rows",
    "pinv_point",
    "vertex_point",
    "exact_points",
]

import numpy as np
from scipy.optimize import nnls

CERTIFICATE_TOL = 16 * np.finfo(float).eps
"""Farkas multipliers certify infeasibility when they bound the margin (of unit rows) below this times the rounding
the bound carries: the rows' own, or that of ``G^T u`` over ``h^T u`` (:func:`certified`). NNLS's own certificates
of infeasible problems bound it by 1 to 8 ``eps`` (``||G^T u||`` below ``eps sum u_j``); a feasible apex a
relative ``1e-15`` above a segment has the bound ``2e-15`` and is solved before any verdict."""
LDP_RESOLVED = 1e-6
"""An NNLS residual ``-1/(1 + ||y||^2)`` at most ``-LDP_RESOLVED`` resolves ``y`` (``||y|| <= 1e3`` in the units
of its round)."""
LDP_ROUNDS = 8
"""At most this many rescaled NNLS rounds ..."""
LDP_SHRINK = 0.5
"""... each while the margin bound falls by this factor or more."""


def scaled_norm(v) -> float:
    """``||v||`` without overflow or underflow of the squares."""
    v = np.asarray(v, dtype=float).ravel()
    s = np.abs(v).max() if v.size else 0.0
    return float(s * np.linalg.norm(v / s)) if s > 0 else 0.0


def unit_scale(a, window: float = 8.0) -> float:
    """A power of two ``s`` that brings the largest ``|a|`` (finite) near 1: ``1.0`` where it lies within
    ``2^-window .. 2^window`` already (well-scaled data are solved as given, bit for bit), else ``2^round(log2
    max|a|)``; ``1.0`` for an all-zero ``a``. Dividing by ``s`` is exact, and the max-margin directions are
    scale-equivariant (the solution on ``a / s`` is ``s`` times the solution on ``a``)."""
    top = float(np.abs(np.asarray(a, dtype=float)).max(initial=0.0))
    if top == 0 or abs(np.log2(top)) <= window:
        return 1.0
    return float(np.exp2(np.round(np.log2(top))))


def least_distance(G: np.ndarray, h: np.ndarray):
    """Least-distance programming ``min ||y|| s.t. G y >= h`` by NNLS (Lawson & Hanson, ch. 23), at the margin's
    own scale (:func:`ldp_rounds`).

    Returns ``("feasible", y, mu)`` with ``y = G^T mu, mu >= 0`` (a candidate, to be checked), or
    ``("infeasible", u, bound)``: Farkas multipliers ``u >= 0`` and the bound ``||G^T u|| / h^T u`` on the margin
    of any feasible point (a certificate only where :func:`certified` says so).
    """
    point, u, bound = ldp_rounds(G, h)
    return ("feasible", *point) if point is not None else ("infeasible", u, bound)


def ldp_rounds(G: np.ndarray, h: np.ndarray):
    """NNLS rounds of least-distance programming: ``(point, u, bound)``.

    Lawson and Hanson's NNLS residual ends in ``-1/(1 + ||y||^2)``: once the margin ``1/||y||`` is far below 1 it
    is lost to rounding, and a feasible problem reads as infeasible (an apex ``1e-9`` above a segment did). So the
    right-hand side is rescaled, ``G y >= sigma h`` (solution ``sigma y``), ``sigma`` the margin bound of the
    previous round, while that bound falls by :data:`LDP_SHRINK` or more and is above rounding.

    ``point`` is ``(y, mu)`` (``y = G^T mu``, ``mu >= 0``) from the first round whose residual resolves it
    (:data:`LDP_RESOLVED`), else None; ``(u, bound)`` the Farkas multipliers ``u >= 0`` with the smallest bound
    ``||G^T u|| / h^T u`` on the margin of any feasible point (``u = 0``, ``bound = inf`` where no round gave one).
    """
    k = G.shape[1]
    f = np.zeros(k + 1)
    f[-1] = 1.0
    sigma, point, best = 1.0, None, (np.zeros(len(h)), np.inf)
    for _ in range(LDP_ROUNDS):
        E = np.vstack([G.T, sigma * h[None, :]])
        u, _ = nnls(E, f, maxiter=max(50 * E.shape[1], 1000))
        res = E @ u - f
        if res[-1] <= -LDP_RESOLVED:  # ||sigma y||^2 = -1/res[-1] - 1: resolved
            point = (-res[:-1] / res[-1] / sigma, u / (-res[-1]) / sigma)
            break
        beta = float(h @ u)
        bound = scaled_norm(G.T @ u) / beta if beta > 0 else np.inf
        if not bound < LDP_SHRINK * best[1]:
            break  # no progress
        best = (u, bound)
        if bound <= CERTIFICATE_TOL:
            break  # at rounding (its support may still carry a feasible vertex: exact_points tries it)
        sigma = bound
    return point, *best


def certified(u: np.ndarray, bound: float, rounding=None, *, h: np.ndarray) -> bool:
    """Whether Farkas multipliers ``u`` of ``G y >= h`` (unit rows ``G``) with margin bound ``bound`` certify
    infeasibility: ``bound`` at most :data:`CERTIFICATE_TOL` times the rounding it carries, the larger of

    * the largest ``rounding`` (``(N,)``, ``>= 1``, default 1) of the rows ``u`` uses, and
    * ``sum_j u_j rounding_j / h^T u``: the rows are known to a relative ``rounding_j eps``, so ``G^T u`` only to
      about ``eps sum_j u_j rounding_j`` and the bound ``||G^T u|| / h^T u`` only to that over ``h^T u``. A bound
      within :data:`CERTIFICATE_TOL` of it is a backward error: the rows lie within ``16 rounding_j eps``
      (relative) of rows for which ``u`` is an exact certificate (as
      :meth:`~mmtoken.attention.svm_solvers.SVMSolution.kkt_relative` measures stationarity against the
      multipliers' own size).

    The second exceeds the first where the certificate rests on rows of small ``h_j`` (rows far longer than the
    one that sets the normalisation): an input whose selected token lies inside its other tokens' hull, beside an
    input of small query, certifies with ``sum u_j / h^T u`` near 50 and ``||G^T u||`` at ``0.6 eps sum u_j``: a
    bound of ``7e-15`` that the first alone left undecided (chapter 14 at paper scale, ``d = 2``).
    """
    if not np.isfinite(bound) or u.max(initial=0.0) <= 0:
        return False
    rho = np.ones(len(u)) if rounding is None else np.maximum(np.asarray(rounding, dtype=float), 1.0)
    scale = float(np.max(rho[u > 1e-6 * u.max()]))
    beta = float(h @ u)
    if beta > 0:
        scale = max(scale, float(u @ rho) / beta)
    return bound <= CERTIFICATE_TOL * scale


def active_rows(G: np.ndarray, h: np.ndarray, y: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Bool ``(N,)``: the rows active at an approximate solution ``(y, mu)`` (slack at most ``1e-6`` relative to
    ``max(||y||, 1)``, or carrying a multiplier)."""
    ny = np.linalg.norm(y)
    return ((G @ y - h) <= 1e-6 * max(ny, 1.0)) | (mu > 1e-6 * max(mu.max(initial=0.0), 1e-300))


def _multipliers(GA: np.ndarray, y_star: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Multipliers of ``y* = G_A^T mu_A``: least squares, or NNLS where that has negative entries."""
    muA = np.linalg.lstsq(GA.T, y_star, rcond=None)[0]
    if muA.min() < 0:
        muA = nnls(GA.T, y_star, maxiter=max(50 * GA.shape[0], 1000))[0]
    out = np.zeros(len(active))
    out[active] = muA
    return out


def pinv_point(G: np.ndarray, h: np.ndarray, active: np.ndarray):
    """The least-norm point ``y* = pinv(G_A) h_A`` on the rows ``A`` (bool ``active``), with multipliers from a
    least-squares fit ``G_A^T mu_A = y*`` (a non-negative one where that fit has negative entries, e.g. degenerate
    vertices); ``(None, None)`` where no row is active."""
    if not active.any():
        return None, None
    GA, hA = G[active], h[active]
    y_star = np.linalg.pinv(GA) @ hA
    return y_star, _multipliers(GA, y_star, active)


def vertex_point(G: np.ndarray, h: np.ndarray, active: np.ndarray):
    """The vertex ``G_A y = h_A`` of ``k`` active rows in ``k`` dimensions, solved with its columns scaled by powers
    of two (exact) to unit size, multipliers from the scaled transpose: where the margin is far below the rows'
    size, ``pinv`` cuts the small singular value that carries the answer, the scaled system keeps it.
    ``(None, None)`` where ``A`` is not square or is singular."""
    GA, hA = G[active], h[active]
    if GA.shape[0] != GA.shape[1] or GA.shape[0] == 0:
        return None, None
    col = np.abs(GA).max(0)
    if not (col > 0).all():
        return None, None
    s = np.exp2(np.round(np.log2(col)))
    try:
        with np.errstate(all="ignore"):
            z = np.linalg.solve(GA / s, hA)
            muA = np.linalg.solve((GA / s).T, z / s**2)  # G_A^T mu = y = z / s
    except np.linalg.LinAlgError:
        return None, None
    out = np.zeros(len(h))
    out[active] = muA
    return z / s, out


def exact_points(G: np.ndarray, h: np.ndarray, point, u: np.ndarray) -> list:
    """Candidates ``(y, mu)`` of the NNLS route, in order: the NNLS ``point`` (or None), the exact points on its
    active set (:func:`pinv_point`, :func:`vertex_point`), and those on the support of the Farkas multipliers ``u``
    (where the margin is so small that NNLS reads the problem as infeasible, ``u`` points along the optimal
    multipliers). Entries may be ``(None, None)``."""
    out = []
    if point is not None:
        active = active_rows(G, h, *point)
        out += [point, pinv_point(G, h, active), vertex_point(G, h, active)]
    if u.max(initial=0.0) > 0:
        on = u > 1e-6 * u.max()
        out += [pinv_point(G, h, on), vertex_point(G, h, on)]
    return out
