"""The generalised attention SVM: several selected tokens per input (Part III, chapter 15).

For keys ``K (n, T, m)`` and a selected set ``O_i`` of tokens per input, the
generalised SVM (reconstructed from *Transformers as Support Vector Machines*,
Sec. 6, and its public code ``TFasSVM/base_nonlinear.py``; see the chapter) is

    min ||w||  s.t.  (k_{i tau} - k_{i t})^T w  = 0   for tau, t in O_i          (ties)
                     (k_{i tau} - k_{i t})^T w >= 1   for tau in O_i, t not in O_i

The equalities say that the selected tokens keep *finite* logit differences
(their softmax mixture stays interior), so the diverging part of the weights
cannot separate them; ``tied=False`` drops them (the selected tokens' logits
are then free among themselves, as the non-chosen optimal tokens of paper A's
ATT-SVM', Theorem 8). With one token per set both are paper A's ATT-SVM
(:func:`mmtoken.svm.att_svm`).

The equalities are eliminated exactly: ``w = N y`` with ``N`` an orthonormal
basis of their null space (``||w|| = ||y||``), and the reduced least-distance
problem ``min ||y|| s.t. (D N) y >= 1`` is solved by NNLS with a Farkas
certificate of infeasibility (:func:`mmtoken.svm.min_norm_nnls`). The
multipliers are recovered on the active set and the KKT conditions checked
(:meth:`GenSVMSolution.kkt_residuals`).

For the attention weights ``W`` of a transformer read out at query ``z_i`` the
keys are ``vec(x_it z_i^T)`` (:func:`mmtoken.tfsvm.w_keys`), so :func:`w_gen_svm` is the same
problem in ``W``.
"""

from __future__ import annotations

__all__ = [
    "RANK_TOL",
    "ACTIVE_TOL",
    "check_sets",
    "GenSVMSolution",
    "constraint_rows",
    "gen_svm",
    "w_gen_svm",
    "feasible",
    "sets_from_probs",
]

from dataclasses import dataclass

import numpy as np

from . import svm, validate
from .tfsvm import w_keys

RANK_TOL = 1e-10
"""Relative singular-value cut-off for the null space of the equality rows."""
ACTIVE_TOL = 1e-7
"""A margin constraint is active when its relative slack is at most this."""


def _real(x, name: str, ndim: int) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype == object or np.iscomplexobj(a) or not np.issubdtype(a.dtype, np.number):
        raise ValueError(f"{name} must be a real numeric array, got dtype {a.dtype}")
    a = a.astype(float)
    if a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} has non-finite entries")
    return a


def check_sets(sets, n: int, T: int) -> list[tuple[int, ...]]:
    """Validate ``sets``: ``n`` non-empty sets of distinct token indices in ``[0, T)``, each leaving a token out."""
    if isinstance(sets, (str, bytes)) or not hasattr(sets, "__iter__"):
        raise ValueError(f"sets must be a list of iterables of token indices, one per input, got {sets!r:.60}")
    try:
        raw = [list(o) for o in sets]
    except TypeError:
        raise ValueError("sets must be a list of iterables of token indices, one per input") from None
    # each entry a whole number (an integral float accepted; a fraction or a boolean is refused, not truncated)
    sets = [tuple(sorted(validate.count(t, f"sets[{i}] entries") for t in o)) for i, o in enumerate(raw)]
    if len(sets) != n:
        raise ValueError(f"sets must hold one set per input (n = {n}), got {len(sets)}")
    for i, o in enumerate(sets):
        if not o:
            raise ValueError(f"sets[{i}] is empty: every input selects at least one token")
        if len(set(o)) != len(o) or o[0] < 0 or o[-1] >= T:
            raise ValueError(f"sets[{i}] = {o} must hold distinct token indices in [0, {T})")
    if all(len(o) == T for o in sets):
        raise ValueError("every set holds all T tokens: there is no non-selected token to separate")
    return sets


@dataclass
class GenSVMSolution:
    """A solved generalised SVM.

    Attributes
    ----------
    x : ``(m,)`` the solution.
    D : ``(N, m)`` margin rows ``k_{i tau} - k_{it}`` (``D x >= 1``); rows : their ``(i, tau, t)``.
    E : ``(M, m)`` tie rows (``E x = 0``); ties : their ``(i, tau, t)``.
    dual : ``(N,)`` multipliers of the margin rows (``>= 0``); mu : ``(M,)`` of the ties (free).
    """

    x: np.ndarray
    D: np.ndarray
    rows: list
    E: np.ndarray
    ties: list
    dual: np.ndarray
    mu: np.ndarray

    @property
    def active(self) -> np.ndarray:
        """Bool ``(N,)``: the margin rows met with equality (the support vectors)."""
        return self.D @ self.x - 1.0 <= ACTIVE_TOL * max(1.0, float(np.abs(self.D @ self.x).max()))

    def kkt_residuals(self) -> dict[str, float]:
        """Relative KKT violations of ``min 1/2||x||^2 s.t. D x >= 1, E x = 0`` (all ~ rounding at a solution)."""
        nx = float(np.linalg.norm(self.x))
        slack = self.D @ self.x - 1.0
        recon = self.D.T @ self.dual + (self.E.T @ self.mu if len(self.mu) else 0.0)
        return {
            "primal": float(max(0.0, -slack.min())),
            "ties": float(np.abs(self.E @ self.x).max() / nx) if len(self.E) else 0.0,
            "dual": float(max(0.0, -self.dual.min()) / max(self.dual.max(), 1e-300)),
            "stationarity": float(np.linalg.norm(self.x - recon) / nx),
            "complementarity": float(np.abs(self.dual * slack).max() / max(self.dual.max(), 1e-300)),
        }


def constraint_rows(K, sets, tied: bool = True):
    """The margin rows ``D`` (with ``rows``) and tie rows ``E`` (with ``ties``) of the generalised SVM.

    Ties are taken against the first token of each set (the others follow).
    """
    K = _real(K, "K", 3)
    n, T, m = K.shape
    sets = check_sets(sets, n, T)
    rows, D, ties, E = [], [], [], []
    for i, o in enumerate(sets):
        for t in range(T):
            if t in o:
                continue
            for tau in o:
                rows.append((i, tau, t))
                D.append(K[i, tau] - K[i, t])
        if tied:
            for tau in o[1:]:
                ties.append((i, tau, o[0]))
                E.append(K[i, tau] - K[i, o[0]])
    return np.array(D).reshape(-1, m), rows, np.array(E).reshape(-1, m), ties


def gen_svm(K, sets, tied: bool = True) -> GenSVMSolution:
    """The generalised SVM for keys ``K (n, T, m)`` and selected sets ``sets`` (one per input).

    Parameters
    ----------
    K : ``(n, T, m)`` keys.
    sets : ``n`` non-empty iterables of token indices (the selected set ``O_i`` of each input).
    tied : keep the equalities between the selected tokens (default); ``False`` leaves them free.

    Returns
    -------
    GenSVMSolution, with multipliers and a KKT check.

    Raises
    ------
    ValueError naming the argument for malformed input; :class:`mmtoken.svm.InfeasibleSVM` (with a
    Farkas certificate) when no direction meets the constraints.
    """
    D, rows, E, ties = constraint_rows(K, sets, tied)
    m = D.shape[1]
    if len(E):
        _, s, vt = np.linalg.svd(E, full_matrices=True)
        rank = int((s > RANK_TOL * max(s.max(), 1e-300)).sum())
        N = vt[rank:].T  # (m, m - rank) orthonormal null space of E
    else:
        N = np.eye(m)
    if N.shape[1] == 0:
        raise svm.InfeasibleSVM("the ties leave only w = 0, which meets no margin constraint")
    y = svm.min_norm_nnls(D @ N, np.ones(len(D)), data="K")  # raises InfeasibleSVM with a certificate
    x = N @ y
    if not np.any(x):
        raise svm.InfeasibleSVM("generalised SVM: the least-norm point is 0")
    # multipliers on the active set: x = D_A^T lam + E^T mu (least squares; lam >= 0 is checked in the KKT)
    act = D @ x - 1.0 <= ACTIVE_TOL * max(1.0, float(np.abs(D @ x).max()))
    A = np.vstack([D[act], E]) if len(E) else D[act]
    coef = np.linalg.lstsq(A.T, x, rcond=None)[0]
    dual = np.zeros(len(D))
    dual[act] = coef[: act.sum()]
    return GenSVMSolution(x, D, rows, E, ties, dual, coef[act.sum() :])


def w_gen_svm(X, Z, sets, tied: bool = True) -> np.ndarray:
    """The generalised SVM in ``W``: ``(d, d)`` solution for tokens ``X (n, T, d)`` and queries ``Z (n, d)``."""
    X = _real(X, "X", 3)
    Z = _real(Z, "Z", 2)
    d = X.shape[2]
    sx, sz = float(np.abs(X).max(initial=0.0)), float(np.abs(Z).max(initial=0.0))
    with np.errstate(divide="ignore"):
        log_s = np.log(sx) + np.log(sz)
    if svm.OUTER_LOG_RANGE[0] < log_s < svm.OUTER_LOG_RANGE[1] or sx == 0 or sz == 0:
        return gen_svm(np.asarray(w_keys(X, Z)), sets, tied).x.reshape(d, d)
    # the keys x z^T would underflow (or overflow) and read as zero rows (a false certificate):
    # solve for unit-scaled factors (the problem is homogeneous: W scales as 1 / (sx sz))
    x = gen_svm(np.asarray(w_keys(X / sx, Z / sz)), sets, tied).x
    log_norm = np.log(np.abs(x).max()) - log_s
    if not svm.SCALE_RANGE[0] < log_norm < svm.SCALE_RANGE[1]:
        raise ValueError(
            f"X and Z: the solution would have entries of about 1e{log_norm / np.log(10):.0f}, outside the "
            "range float64 holds with full precision; rescale X and Z"
        )
    return (x / sx / sz).reshape(d, d)


def feasible(K, sets, tied: bool = True) -> bool:
    """Whether the generalised SVM has a solution (decided by NNLS with a Farkas certificate)."""
    try:
        gen_svm(K, sets, tied)
    except svm.InfeasibleSVM:
        return False
    return True


def sets_from_probs(probs, high: float = 1e-3, low: float = 1e-6) -> list[tuple[int, ...]]:
    """The selected sets read off final attention ``probs (n, T)``: tokens with mass ``>= high``.

    Raises ``ValueError`` when some token lies in ``(low, high)``: the split is then not clean (the run
    has not separated selected from non-selected tokens) and no set can be read off.
    """
    P = _real(probs, "probs", 2)
    low, high = validate.positive(low, "low"), validate.positive(high, "high")
    if not 0 < low < high < 1:
        raise ValueError(f"need 0 < low < high < 1, got low={low}, high={high}")
    grey = (P > low) & (P < high)
    if grey.any():
        i, t = map(int, np.argwhere(grey)[0])
        raise ValueError(f"probs[{i}, {t}] = {P[i, t]:.2e} lies between low={low} and high={high}: no clean split")
    return [tuple(int(t) for t in np.flatnonzero(row >= high)) for row in P]
