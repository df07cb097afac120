"""The solvers behind the hard-margin SVMs of :mod:`mmtoken.attention.svm`: ``min ||x|| s.t. D x >= b``.

:func:`solve_min_norm` returns the verified answer as an :class:`SVMSolution`; :func:`min_norm_nnls` is the
NNLS route on its own, for any rows. The problems and their constraint rows are in :mod:`mmtoken.attention.svm`.

Right at every scale
--------------------
The solution of ``min ||x|| s.t. D x >= b`` scales as ``1/c`` when ``D`` scales as ``c``, but an interior-point
solver works to absolute tolerances: on keys of size ``1e5`` or ``1e-5`` it returns wrong points or wrong statuses.
So the answer is an *exact point accepted only after an independent check at the problem's own scale*: every
constraint met, at least one active, the KKT conditions satisfied to :data:`KKT_TOL` relative to the scale
(:meth:`SVMSolution.kkt_relative`). The exact point is Clarabel's solution (of the problem as given or, where that
fails, of a normalised form: unit rows, largest right-hand side 1) polished on its active set by an exact
least-norm solve; failing that, the least-distance solution of the normalised form by NNLS. Where Clarabel's own
point lies within :data:`ACCURACY` (relative) of the verified one it is returned instead, with its multipliers:
the answers the book has always printed for well-scaled data (``check["method"]`` says which).

Two errors, never confused:

:class:`InfeasibleSVM` (a ``ValueError``)
    no direction meets the constraints: reported only with an independent certificate (Farkas multipliers from
    the NNLS route) that bound the margin of every feasible point at rounding (``CERTIFICATE_TOL`` times the rounding
    the bound carries, :func:`~mmtoken.attention.svm_exact.certified`);
    the message names the inputs to blame.
:class:`SolverFailed` (a ``RuntimeError``)
    neither a point that passes the check nor a certificate of infeasibility: the problem is too ill-conditioned.
    It says nothing about feasibility, so :func:`mmtoken.attention.geometry.classify` lets it propagate.
"""

from __future__ import annotations

__all__ = [
    "SOLVER",
    "KKT_TOL",
    "ACCURACY",
    "SCALE_RANGE",
    "CERTIFICATE_TOL",
    "KKT_MEASURES",
    "InfeasibleSVM",
    "SolverFailed",
    "SVMSolution",
    "least_distance",
    "clarabel_qp",
    "solve_min_norm",
    "min_norm_nnls",
]

import warnings
from dataclasses import dataclass, field

import numpy as np

from mmtoken import validate
from mmtoken.attention.svm_exact import (
    CERTIFICATE_TOL,
    active_rows,
    certified,
    exact_points,
    ldp_rounds,
    least_distance,
    pinv_point,
    scaled_norm,
)

SOLVER = "CLARABEL"
KKT_TOL = 1e-9
"""Relative tolerance of the acceptance check (primal, active, dual, stationarity, complementarity)
of the verified point; an exact point (polished or NNLS) meets it at the level of rounding."""
ACCURACY = 1e-7
"""Clarabel's own point is returned when it lies within this relative distance of the verified one."""
SCALE_RANGE = (np.log(1e-305), np.log(1e305))
"""Natural-log range of the solution's scale ``max b_j / ||D_j||`` that float64 holds with full precision."""
KKT_MEASURES = ("primal", "active", "dual", "stationarity", "complementarity")


class InfeasibleSVM(ValueError):
    """No direction meets the margin constraints (confirmed by an independent certificate)."""


class SolverFailed(RuntimeError):
    """No solver produced a point that passes the independent check; feasibility is unknown."""


@dataclass
class SVMSolution:
    """A solved max-margin problem.

    Attributes
    ----------
    x : the solution (``p``, ``v`` or ``W``), never zero.
    D : ``(N, k)`` constraint rows (each row ``a_j``: ``a_j^T x >= b_j``), flattened for ``W``.
    b : ``(N,)`` right-hand sides.
    dual : ``(N,)`` Lagrange multipliers of ``min 1/2||x||^2 s.t. D x >= b`` (they scale as ``1/c^2`` with the
        data and may underflow to 0 at extreme scales; :attr:`check` holds the scale-free verification).
    rows : list of ``(i, t)`` naming the input and token of each row.
    check : the relative KKT measures of the verified exact point (:meth:`kkt_relative`), the ``method`` that
        produced the returned one and, for Clarabel's own point, its relative ``distance_to_verified``.
    """

    x: np.ndarray
    D: np.ndarray
    b: np.ndarray
    dual: np.ndarray
    rows: list
    check: dict = field(default_factory=dict)

    @property
    def margin(self) -> float:
        """``1 / ||x||``: the margin of the normalised solution (finite: ``x`` is never zero)."""
        return 1.0 / _norm(self.x)

    def kkt_residuals(self) -> dict[str, float]:
        """Largest absolute violation of each KKT condition of ``min 1/2||x||^2 s.t. D x >= b``.

        Absolute values depend on the scale of the data; :meth:`kkt_relative` does not.
        """
        x = self.x.ravel()
        slack = self.D @ x - self.b
        return {
            "primal": float(max(0.0, -slack.min())) if len(slack) else 0.0,
            "dual": float(max(0.0, -self.dual.min())) if len(self.dual) else 0.0,
            "stationarity": float(np.abs(x - self.D.T @ self.dual).max()),
            "complementarity": float(np.abs(self.dual * slack).max()) if len(slack) else 0.0,
        }

    def kkt_relative(self) -> dict[str, float]:
        """The scale-free KKT measures of the verified exact point (each ``<= KKT_TOL``).

        With unit rows ``a_j = D_j/||D_j||``, ``x̂ = x/||x||``, relative slacks
        ``tau_j = (D_j x - b_j) / (||D_j|| ||x||)`` and multipliers of the unit rows
        ``nu_j = ||D_j|| dual_j / ||x||``: ``primal = max(0, -min tau)``,
        ``active = min over b_j > 0 of (D_j x - b_j)/b_j``, ``dual = max(0, -min nu)``,
        ``stationarity = ||x̂ - sum nu_j a_j||``, ``complementarity = sum nu_j |tau_j|``.
        """
        return {k: v for k, v in self.check.items() if k in KKT_MEASURES}


# --------------------------------------------------------------------------- scale-safe norms and the acceptance check


_norm = scaled_norm


def _row_norms(D: np.ndarray) -> np.ndarray:
    s = np.abs(D).max(axis=1) if D.shape[1] else np.zeros(D.shape[0])
    safe = np.where(s > 0, s, 1.0)
    return np.where(s > 0, s * np.linalg.norm(D / safe[:, None], axis=1), 0.0)


def _relative_kkt(D, b, r, x, nu) -> dict[str, float]:
    """Scale-free KKT measures of ``x`` with unit-row multipliers ``nu`` (rows with ``r = 0`` excluded).

    The sums over multipliers are measured against their own size, ``max(1, sum |nu_j| / ||x||)``: the backward
    error of ``x = sum nu_j a_j`` (a margin far below the rows' size has multipliers far above ``||x||``, whose
    cancellation leaves a residual at rounding of *their* size, not of ``||x||``'s).
    """
    nx = _norm(x)
    if not np.isfinite(nx) or nx == 0 or not np.isfinite(nu).all():
        return {"primal": np.inf, "active": np.inf, "dual": np.inf, "stationarity": np.inf, "complementarity": np.inf}
    x = x.ravel()
    a = D / r[:, None]
    xh = x / nx
    tau = a @ xh - (b / r) / nx
    pos = b > 0
    with np.errstate(over="ignore", invalid="ignore"):
        rel_b = (D[pos] @ x - b[pos]) / b[pos]
    nuh = nu / nx
    size = max(1.0, float(np.abs(nuh).sum()))
    return {
        "primal": float(max(0.0, -tau.min())),
        "active": float(abs(min(rel_b.min(), 1.0))) if pos.any() else 0.0,
        "dual": float(max(0.0, -nuh.min())) / size,
        "stationarity": float(np.linalg.norm(xh - a.T @ nuh)) / size,
        "complementarity": float(np.sum(np.abs(nuh) * np.abs(tau))) / size,
    }


# --------------------------------------------------------------------------- Clarabel, NNLS and the exact polish


def clarabel_qp(G: np.ndarray, h: np.ndarray):
    """Clarabel on ``min 1/2||y||^2 s.t. G y >= h``: ``(y, mu, status)`` (``y`` None unless solved)."""
    import cvxpy as cp  # imported when a problem is solved (about a second, with scipy.stats)

    y = cp.Variable(G.shape[1])
    constraint = G @ y >= h
    problem = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(y)), [constraint])
    try:
        with warnings.catch_warnings():  # an inaccurate solution is caught by the check, not by a warning
            warnings.simplefilter("ignore", UserWarning)
            problem.solve(solver=SOLVER)
    except cp.error.SolverError as exc:
        return None, None, f"solver error ({exc})"
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or y.value is None:
        return None, None, problem.status
    mu = np.maximum(np.asarray(constraint.dual_value, dtype=float).ravel(), 0.0)
    return np.asarray(y.value, dtype=float), mu, problem.status


def _polish(G: np.ndarray, h: np.ndarray, y: np.ndarray, mu: np.ndarray):
    """The exact least-norm point on the rows active at an approximate solution ``(y, mu)``
    (:func:`~mmtoken.attention.svm_exact.pinv_point` on :func:`~mmtoken.attention.svm_exact.active_rows`)."""
    return pinv_point(G, h, active_rows(G, h, y, mu))


def _normalise(D: np.ndarray, b: np.ndarray, r: np.ndarray, keep: np.ndarray, data: str):
    """The normalised problem ``G y >= h`` of the rows ``keep`` (unit rows, largest right-hand side 1, ``x = c y``):
    ``(c, G, h)``, with ``c = max b_j / ||D_j||``, refusing data whose solution float64 cannot hold.

    Right-hand sides below ``-1e300`` are clipped there: any point float64 can hold meets them, so they cannot bind.
    """
    if not np.isfinite(D).all():
        raise ValueError(f"{data}: the constraint rows overflow float64 (differences of huge entries); rescale {data}")
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        log_c = np.max(np.log(b[keep & (b > 0)]) - np.log(r[keep & (b > 0)]))
    if not SCALE_RANGE[0] < log_c < SCALE_RANGE[1]:
        raise ValueError(
            f"{data}: the solution would have norm about 1e{log_c / np.log(10):.0f}, outside the range "
            f"float64 holds with full precision; rescale {data}"
        )
    c = float(np.exp(log_c))
    with np.errstate(over="ignore", under="ignore"):
        h = np.maximum((b[keep] / r[keep]) / c, -1e300)
    return c, D[keep] / r[keep, None], h


def solve_min_norm(D: np.ndarray, b: np.ndarray, rows: list, what: str, data: str = "K", rounding=None) -> SVMSolution:
    """``min 1/2||x||^2 s.t. D x >= b``, right at every scale; see the module docstring.

    ``data`` names the argument(s) the rows come from, for the errors; ``rounding`` (``(N,)``, ``>= 1``, default
    1) the relative rounding each row carries beyond its own entries (a difference of keys ``c`` times larger than
    itself: ``c``), which a certificate of infeasibility may reach (:func:`~mmtoken.attention.svm_exact.certified`).
    """
    r = _row_norms(D)
    zero = r == 0
    if (zero & (b > 0)).any():
        bad = sorted({rows[j] for j in np.flatnonzero(zero & (b > 0))})
        raise InfeasibleSVM(
            f"{what}: no solution. Constraint rows {bad} (input, token) are zero: "
            "the token equals the selected one, so no direction can separate them."
        )
    keep = ~zero
    if not (b[keep] > 0).any():
        raise ValueError(f"{what}: every right-hand side is 0, so x = 0 is the solution and there is no margin")
    c, G, h = _normalise(D, b, r, keep, data)

    def verified(y, mu):
        """The measures of ``x = c y`` (unit-row multipliers ``c mu``) at the problem's scale, if it passes."""
        m = _relative_kkt(D[keep], b[keep], r[keep], c * y, c * mu)
        return m if all(np.isfinite(v) and v <= KKT_TOL for v in m.values()) else None

    # 1. Clarabel on the problem as given (the book's stored answers), as a starting point
    with np.errstate(all="ignore"):
        x0, lam0, status = clarabel_qp(D[keep], b[keep])
        usable = x0 is not None and np.isfinite(x0).all() and np.isfinite(lam0 * r[keep]).all()
        start = (x0 / c, lam0 * r[keep] / c) if usable else None
    # 2. Clarabel on the normalised problem where that failed
    if start is None:
        y1, mu1, status = clarabel_qp(G, h)
        start = None if y1 is None else (y1, mu1)
    # an exact point: the start polished on its active set, else the NNLS least-distance solution
    exact = None
    if start is not None:
        y_p, mu_p = _polish(G, h, *start)
        if y_p is not None and (m := verified(y_p, mu_p)) is not None:
            exact = (y_p, mu_p, m, "clarabel+polish")
    if exact is None:  # the NNLS route: its point, or the exact points on its active set or certificate's support
        point, u, bound = ldp_rounds(G, h)
        for y_n, mu_n in exact_points(G, h, point, u):
            if y_n is not None and (m := verified(y_n, mu_n)) is not None:
                exact = (y_n, mu_n, m, "nnls")
                break
    if exact is None:
        kept = None if rounding is None else np.asarray(rounding, dtype=float)[keep]
        if certified(u, bound, kept, h=h):
            raise InfeasibleSVM(
                f"{what}: no solution (Clarabel: {status}; certified by NNLS Farkas multipliers, "
                f"margin bound {bound:.1e}). " + _blame(G, h, [rows[j] for j in np.flatnonzero(keep)], kept)
            )
        if point is None:
            raise SolverFailed(
                f"{what}: Clarabel reports {status} and the NNLS certificate only bounds the "
                f"normalised margin by {bound:.1e} (above rounding, {CERTIFICATE_TOL:.1e}): feasibility cannot "
                "be decided at float64 precision."
            )
        raise SolverFailed(
            f"{what}: neither Clarabel (status {status}) nor the NNLS route produced a point that "
            f"passes the KKT check at relative tolerance {KKT_TOL}; the rows are too ill-conditioned "
            f"to decide (row norms from {r[keep].min():.3g} to {r[keep].max():.3g})."
        )
    y, mu, measures, method = exact
    x = c * y
    nu = np.zeros(len(b))
    nu[keep] = c * mu
    with np.errstate(under="ignore", over="ignore"):
        dual = np.where(keep, nu / np.where(keep, r, 1.0), 0.0)
    check = dict(measures, method=method)
    if x0 is not None and _norm(x0 - x) <= ACCURACY * _norm(x):
        # Clarabel's own point agrees with the verified one: keep it (and its multipliers), so that
        # well-scaled problems give the answers the book has always printed
        full = np.zeros(len(b))
        full[keep] = lam0
        check.update(method="clarabel, verified", distance_to_verified=_norm(x0 - x) / _norm(x))
        return SVMSolution(np.asarray(x0, dtype=float), D, b, full, rows, check)
    return SVMSolution(x, D, b, dual, rows, check)


def _blame(G, h, rows, rounding=None) -> str:
    """Name the inputs whose own constraints are already infeasible (certified by the NNLS route)."""
    inputs = sorted({i for i, _ in rows})
    bad = []
    for i in inputs:
        own = [j for j, q in enumerate(rows) if q[0] == i]
        kind, u, bound = least_distance(G[own], h[own])
        if kind != "feasible" and certified(u, bound, None if rounding is None else rounding[own], h=h[own]):
            bad.append(i)
    if bad:
        return f"input(s) {bad} cannot be separated on their own (their selected token is not a vertex the keys can single out)"
    return f"each input is separable alone, but inputs {inputs} cannot be separated by one common direction"


def min_norm_nnls(D, b, data: str = "D and b", rounding=None) -> np.ndarray:
    """``min ||x|| s.t. D x >= b`` by Lawson and Hanson's least-distance programming via NNLS.

    An independent check on the cvxpy solutions (active-set, no interior point), on the normalised rows
    (:func:`least_distance`), mapped back to the scale of ``D``.

    Parameters
    ----------
    D : ``(N, k)`` rows, ``k >= 1``; b : ``(N,)``.
    data : what the rows were built from, named in the errors (a caller's own argument).
    rounding : optional ``(N,)``, ``>= 1``: the relative rounding each row carries beyond its own entries (as in
        :func:`solve_min_norm`).

    Returns
    -------
    ``(k,)`` the least-norm feasible point (zero when no constraint binds, e.g. ``N = 0``).

    Raises
    ------
    InfeasibleSVM with a certificate when no point meets the constraints; SolverFailed where NNLS decides neither.
    """
    D = validate.real_array(D, "D", ndim=2)
    b = validate.real_array(b, "b", ndim=1)
    if D.shape[1] == 0:
        raise ValueError(f"D must have at least one column, got shape {D.shape}")
    if b.shape != (D.shape[0],):
        raise ValueError(f"b must have shape ({D.shape[0]},) (one entry per row of D), got {b.shape}")
    r = _row_norms(D)
    zero = r == 0
    if (zero & (b > 0)).any():
        raise InfeasibleSVM(
            f"least-distance problem is infeasible: rows {np.flatnonzero(zero & (b > 0)).tolist()} "
            "of D are zero with b > 0"
        )
    keep = ~zero
    if not (b[keep] > 0).any():
        return np.zeros(D.shape[1])  # x = 0 meets every constraint (also when there is none)
    c, G, h = _normalise(D, b, r, keep, data)
    point, u, bound = ldp_rounds(G, h)
    if point is not None:
        return c * point[0]
    for y, _ in exact_points(G, h, None, u):  # a margin so small that NNLS reads the problem as infeasible
        if y is not None and ((G @ y - h) / np.maximum(h, h.max()) >= -KKT_TOL).all():
            return c * y
    if certified(u, bound, None if rounding is None else np.asarray(rounding, dtype=float)[keep], h=h):
        raise InfeasibleSVM(f"least-distance problem is infeasible (certificate bounds the margin by {bound:.1e})")
    raise SolverFailed(
        f"least-distance problem on {data}: NNLS neither resolves a point nor certifies infeasibility (the "
        f"margin bound {bound:.1e} is above rounding, {CERTIFICATE_TOL:.1e}): undecided at float64 precision"
    )
