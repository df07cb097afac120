"""The l_q Att-SVM of mirror descent, solved with cvxpy and checked by its KKT conditions and a second solver.

``min ||p||_q s.t. (k_{i alpha_i} - k_it)^T p >= 1`` for all ``t != alpha_i``, all ``i``, for ``q >= 1``
(Julistiono, Tarzanagh and Azizan).

Mirror descent with the potential ``psi(p) = (1/q)||p||_q^q`` converges in direction to it, as gradient descent
(``q = 2``) converges to :func:`mmtoken.attention.svm.att_svm`. It is solved with cvxpy (Clarabel: ``pnorm`` is
exact for rational ``q``; ``q = 1`` is a linear program), and every solution is checked twice before it is
returned: by its KKT conditions (multipliers by non-negative least squares on the active rows, independent of the
solver's own duals), and by a second solver (SciPy: SLSQP on ``(1/q)||p||_q^q`` for ``q > 1``, HiGHS on the split
linear program for ``q = 1``), whose optimal value must agree.
"""

from __future__ import annotations

__all__ = ["LQ_TOL", "Q_RANGE", "LqSolution", "lq_att_svm", "lq_norm"]

import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linprog, minimize, nnls

from mmtoken import validate
from mmtoken.attention.mirror import inverse_mirror_map, mirror_map
from mmtoken.attention.svm import att_svm
from mmtoken.attention.svm_exact import unit_scale
from mmtoken.attention.svm_solvers import SCALE_RANGE, SOLVER, InfeasibleSVM, SolverFailed

LQ_TOL = 1e-6
"""Relative tolerance of the checks: active margins within it of 1, relative stationarity residual, and the
relative gap between the two solvers' optimal values."""
Q_RANGE = (1.05, 6.0)
"""The norms ``q > 1`` that :func:`lq_att_svm` accepts (``q = 1`` too): cvxpy's ``pnorm`` approximates ``q`` by a
fraction, which is 1 for ``q`` within about ``1e-3`` of it, and the KKT system's powers ``|x|^(q-1)`` and
``|theta|^(1/(q-1))`` lose the check's precision outside this range (tested at its ends)."""


def _check_q(q, low: float, high: float, one: bool = False) -> float:
    """``q`` as a float in ``[low, high]`` (``high`` may be ``inf``; ``one``: 1 as well), or ``ValueError`` naming
    it and the range."""
    try:
        value = validate.real_number(q, "q") if not (isinstance(q, float) and q == np.inf) else np.inf
    except ValueError:
        value = None
    if value is None or not (low <= value <= high or (one and value == 1)):
        either = "1 or " if one else ""
        raise ValueError(f"q must be {either}a real number in [{low:g}, {high:g}], got {q!r}")
    return float(value)


def lq_norm(x, q: float) -> np.ndarray:
    """``||x||_q`` over the last axis (``q >= 1``, ``inf`` the largest entry), scaled by the largest entry so that
    no power overflows.

    Raises
    ------
    ValueError naming ``q`` outside ``[1, inf]`` (``nan`` included), before any computing.
    """
    q = _check_q(q, 1.0, np.inf)
    x = np.abs(np.asarray(x, dtype=float))
    a = x.max(-1, keepdims=True)
    a = np.where(a > 0, a, 1.0)
    return a[..., 0] * ((x / a) ** q).sum(-1) ** (1 / q)


@dataclass
class LqSolution:
    """A solved l_q Att-SVM.

    Attributes
    ----------
    x : ``(m,)`` the solution ``p^mm_q``.
    q : the norm.
    D : ``(N, m)`` constraint rows ``k_{i alpha_i} - k_it``; rows : ``(i, t)`` of each.
    dual : ``(N,)`` multipliers ``lambda >= 0`` of the active rows (NNLS), 0 elsewhere:
        ``grad (1/q)||x||_q^q = sign(x)|x|^(q-1) = D^T lambda`` for ``q > 1``.
    check : the measures of the two checks (``primal``, ``active``, ``stationarity``, ``second_solver_gap``).
    """

    x: np.ndarray
    q: float
    D: np.ndarray
    rows: list
    dual: np.ndarray
    check: dict = field(default_factory=dict)

    @property
    def norm(self) -> float:
        """``||x||_q``, the inverse of the l_q margin."""
        return float(lq_norm(self.x, self.q))


def _cvxpy_point(D: np.ndarray, q: float) -> np.ndarray:
    import cvxpy as cp  # imported when a problem is solved (about a second)

    p = cp.Variable(D.shape[1])
    objective = cp.norm1(p) if q == 1 else cp.pnorm(p, q)
    problem = cp.Problem(cp.Minimize(objective), [D @ p >= 1])
    try:
        with warnings.catch_warnings():  # "may be inaccurate": the point is checked independently below
            warnings.simplefilter("ignore", UserWarning)
            problem.solve(solver=SOLVER, tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11, max_iter=500)
    except cp.error.SolverError as exc:
        raise SolverFailed(f"cvxpy ({SOLVER}) failed on the l_{q:g} Att-SVM ({exc})") from None
    if problem.status in ("infeasible", "infeasible_inaccurate"):
        raise InfeasibleSVM("the l_q Att-SVM is infeasible: no direction separates the selection")
    if p.value is None or not np.isfinite(p.value).all():
        raise SolverFailed(f"cvxpy ({SOLVER}) returned no point (status {problem.status})")
    return np.asarray(p.value, dtype=float)


def _nnls(A: np.ndarray, b: np.ndarray, what: str):
    """SciPy's ``nnls(A, b)``, called only on input it handles: at least one column, every entry finite (it aborts
    the interpreter, a double free, on a matrix with no column)."""
    if A.ndim != 2 or A.shape[1] == 0 or not (np.isfinite(A).all() and np.isfinite(b).all()):
        raise SolverFailed(f"{what}: no active row, or non-finite values, at the solver's point (shape {A.shape})")
    return nnls(A, b)


def _polish(D: np.ndarray, x: np.ndarray, q: float, active: np.ndarray) -> np.ndarray:
    """Newton's method on the KKT system of the active rows, in their multipliers ``lambda``:
    ``D_A phi(D_A^T lambda) = 1`` with ``phi(theta) = sign(theta)|theta|^(1/(q-1))`` (the inverse mirror map).
    The interior-point solver stops near ``1e-6`` relative stationarity on ``pnorm``; this brings it to rounding.
    Returns the Newton point (stationary by construction) where it is finite, feasible and has ``lambda >= 0``,
    else ``x`` unchanged (the checks of :func:`lq_att_svm` then judge the solver's own point)."""
    A = D[active]
    lam, _ = _nnls(A.T, mirror_map(x, q), "the l_q Att-SVM's polish")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for _ in range(30):
            th = A.T @ lam
            F = A @ inverse_mirror_map(th, q) - 1
            if np.abs(F).max() < 1e-14:
                break
            J = A @ ((np.abs(th) ** ((2 - q) / (q - 1)) / (q - 1))[:, None] * A.T)
            if not np.isfinite(J).all():
                return x
            lam = lam - np.linalg.lstsq(J, F, rcond=None)[0]
        p = inverse_mirror_map(A.T @ lam, q)  # stationary by construction; feasible and dual feasible, or refused
    ok = np.isfinite(p).all() and (lam >= 0).all() and (D @ p >= 1 - 1e-12).all() and np.abs(A @ p - 1).max() < 1e-12
    return p if ok else x


def _second_value(D: np.ndarray, q: float, start: np.ndarray) -> float:
    """The optimal value ``||p||_q`` from SciPy, started from the l_2 solution (not from cvxpy's point)."""
    N, m = D.shape
    if q == 1:  # p = a - b, a, b >= 0: min sum(a + b) s.t. D (a - b) >= 1
        res = linprog(np.ones(2 * m), A_ub=-np.hstack([D, -D]), b_ub=-np.ones(N), bounds=(0, None), method="highs")
        if res.status != 0:
            raise SolverFailed(f"HiGHS failed on the l_1 Att-SVM: {res.message}")
        return float(res.fun)
    res = minimize(
        lambda p: (np.abs(p) ** q).sum() / q,
        start,
        jac=lambda p: mirror_map(p, q),
        constraints=[{"type": "ineq", "fun": lambda p: D @ p - 1, "jac": lambda p: D}],
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 2000},
    )
    # SLSQP often reports a failed line search at the optimum with so tight a tolerance: any nearly feasible point
    # it ends on is compared, scaled to feasibility (a point short of the optimum has a larger value and fails)
    low = float((D @ res.x).min()) if np.isfinite(res.x).all() else 0.0
    return float(lq_norm(res.x, q)) / min(low, 1.0) if low > 1 - 1e-6 else float("nan")


def lq_att_svm(K, alpha, q: float, mask=None) -> LqSolution:
    """The l_q Att-SVM ``p^mm_q(alpha)``.

    Parameters
    ----------
    K : ``(n, T, m)`` keys, ``T >= 2``, finite, at any scale (solved on ``K / s``, ``s`` a power of two from
        :func:`~mmtoken.attention.svm_exact.unit_scale`, and mapped back: ``p^mm_q`` scales as ``1/s``);
        alpha : ``(n,)`` the selection; mask : optional bool ``(n, T)`` (as in
        :func:`mmtoken.attention.svm.att_svm`).
    q : the norm, ``q = 1`` or ``q`` in :data:`Q_RANGE` (``q = 2`` is :func:`~mmtoken.attention.svm.att_svm`).

    Returns
    -------
    LqSolution, checked: feasible (margins ``>= 1 - LQ_TOL``), an active margin at 1, KKT stationarity (``q > 1``:
    ``||sign(x)|x|^(q-1) - D_A^T lambda|| <= LQ_TOL ||sign(x)|x|^(q-1)||`` with ``lambda >= 0`` on the active rows;
    ``q = 1``: ``D_A^T lambda`` in the subdifferential of ``||.||_1``), and the second solver's value within
    ``LQ_TOL`` (relative). The checks are scale-free (done on ``K / s``); ``dual`` is at ``K``'s own scale and may
    under- or overflow at extreme ones.

    Raises
    ------
    ValueError naming the argument (``q`` outside its range, malformed or non-finite ``K``, a solution outside
    float64's range), before any computing; InfeasibleSVM where the l_2 problem (same constraints) is infeasible;
    SolverFailed where a check fails.
    """
    q = _check_q(q, *Q_RANGE, one=True)
    K = validate.real_array(K, "K", ndim=3)
    s = unit_scale(K)
    l2 = att_svm(K / s, alpha, mask)  # checks K, alpha and mask; raises InfeasibleSVM (the constraints do not
    D, rows = l2.D, l2.rows  # depend on q); D at unit scale
    with np.errstate(over="ignore", under="ignore"):
        D_K = D * s
    if not np.isfinite(D_K).all() or not SCALE_RANGE[0] < np.log(np.abs(l2.x).max()) - np.log(s) < SCALE_RANGE[1]:
        raise ValueError(
            f"K: keys of size about 1e{np.log10(s):.0f} give constraint rows or a solution outside the range "
            "float64 holds with full precision (1e-305 to 1e305); rescale K"
        )
    x = _cvxpy_point(D, q)
    low = float((D @ x).min())
    if not low > 0:
        raise SolverFailed(f"cvxpy ({SOLVER}) returned a point that meets no margin (min D x = {low:.3g})")
    x = x / min(1.0, low)  # a feasible point: the solver's slack removed by scaling
    active = D @ x - 1 <= LQ_TOL * max(1.0, float(np.abs(D @ x).max()))
    if q > 1:
        x = l2.x if q == 2 else _polish(D, x, q, active)
    slack = D @ x - 1
    dual = np.zeros(len(rows))
    what = f"the l_{q:g} Att-SVM's multipliers"
    if q > 1:
        g = mirror_map(x, q)
        dual[active], resid = _nnls(D[active].T, g, what)
        stationarity = resid / np.linalg.norm(g)
    else:  # the LP's multipliers: D_A^T lambda = sign(x) where x != 0, |.| <= 1 where x == 0
        on = np.abs(x) > LQ_TOL * np.abs(x).max()
        dual[active], _ = _nnls(
            np.vstack([D[active][:, on].T, 1e-12 * np.eye(active.sum())]),
            np.concatenate([np.sign(x[on]), np.zeros(active.sum())]),
            what,
        )
        g = D.T @ dual
        stationarity = max(float(np.abs(g[on] - np.sign(x[on])).max()), float(np.abs(g[~on]).max(initial=0.0)) - 1)
    value = float(lq_norm(x, q))
    second = _second_value(D, q, l2.x)
    check = {
        "primal": float(max(0.0, -slack.min())),
        "active": float(slack.min()),
        "stationarity": float(max(stationarity, 0.0)),
        "second_solver_gap": abs(second - value) / value if np.isfinite(second) else float("inf"),
    }
    failed = [k for k in ("primal", "stationarity", "second_solver_gap") if check[k] > LQ_TOL]
    if failed or check["active"] > LQ_TOL:
        raise SolverFailed(f"the l_{q:g} Att-SVM for alpha={list(map(int, alpha))} fails its check ({check})")
    if s == 1.0:
        return LqSolution(x, float(q), D, rows, dual, check)
    with np.errstate(over="ignore", under="ignore", divide="ignore"):  # p scales as 1/s, lambda as s^-q (q = 1: s^-1)
        return LqSolution(x / s, float(q), D_K, rows, dual / np.power(np.float64(s), q), check)
