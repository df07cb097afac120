"""Hard-margin SVM problems of paper A, solved with cvxpy (Clarabel).

* ATT-SVM for a selection ``alpha``:
  ``min ||p|| s.t. (k_{i alpha_i} - k_it)^T p >= 1`` for all ``t != alpha_i``, all ``i``.
* Relaxed ATT-SVM: inputs outside a set ``S`` (the non-support vectors of the
  head SVM) only need ``>= 0``.
* Head SVM: ``min ||v|| s.t. Y_i v^T x_{i alpha_i} >= 1``.
* W-form SVM: ``min ||W||_F s.t. (x_{i alpha_i} - x_it)^T W p >= 1``.

Arrays are NumPy float64 (torch tensors are accepted). Every solver checks
shapes and raises :class:`InfeasibleSVM` naming the inputs that cannot be
separated.
"""
from __future__ import annotations

from dataclasses import dataclass

import cvxpy as cp
import numpy as np
from scipy.optimize import nnls

SOLVER = "CLARABEL"


class InfeasibleSVM(ValueError):
    """No direction meets the margin constraints."""


@dataclass
class SVMSolution:
    """A solved max-margin problem.

    Attributes
    ----------
    x : the solution (``p``, ``v`` or ``W``).
    D : ``(N, k)`` constraint rows (each row ``a_j``: ``a_j^T x >= b_j``), flattened for ``W``.
    b : ``(N,)`` right-hand sides.
    dual : ``(N,)`` Lagrange multipliers.
    rows : list of ``(i, t)`` naming the input and token of each row.
    """

    x: np.ndarray
    D: np.ndarray
    b: np.ndarray
    dual: np.ndarray
    rows: list

    @property
    def margin(self) -> float:
        """``1 / ||x||``: the margin of the normalised solution."""
        return 1.0 / float(np.linalg.norm(self.x))

    def kkt_residuals(self) -> dict[str, float]:
        """Largest violation of each KKT condition of ``min 1/2||x||^2 s.t. D x >= b``."""
        x = self.x.ravel()
        slack = self.D @ x - self.b
        return {
            "primal": float(max(0.0, -slack.min())) if len(slack) else 0.0,
            "dual": float(max(0.0, -self.dual.min())) if len(self.dual) else 0.0,
            "stationarity": float(np.abs(x - self.D.T @ self.dual).max()),
            "complementarity": float(np.abs(self.dual * slack).max()) if len(slack) else 0.0,
        }


def _np(a, name: str) -> np.ndarray:
    a = np.asarray(a.detach().cpu() if hasattr(a, "detach") else a, dtype=float)
    if not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return a


def _check_keys_selection(K, alpha):
    K = _np(K, "K")
    if K.ndim != 3:
        raise ValueError(f"keys must have shape (n, T, m), got {K.shape}")
    alpha = np.asarray(alpha, dtype=int)
    if alpha.shape != (K.shape[0],):
        raise ValueError(f"selection alpha must have shape ({K.shape[0]},), got {alpha.shape}")
    if alpha.min() < 0 or alpha.max() >= K.shape[1]:
        raise ValueError(f"selection alpha must index tokens 0..{K.shape[1] - 1}, got {alpha.tolist()}")
    return K, alpha


def _difference_rows(K, alpha, mask=None):
    n, T, _ = K.shape
    rows, D = [], []
    for i in range(n):
        for t in range(T):
            if t == alpha[i] or (mask is not None and not mask[i, t]):
                continue
            rows.append((i, t))
            D.append(K[i, alpha[i]] - K[i, t])
    return np.array(D).reshape(len(rows), K.shape[2]), rows


def _solve_min_norm(D: np.ndarray, b: np.ndarray, rows: list, what: str) -> SVMSolution:
    """``min 1/2||x||^2 s.t. D x >= b`` with cvxpy/Clarabel."""
    x = cp.Variable(D.shape[1])
    constraint = D @ x >= b
    problem = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(x)), [constraint])
    try:
        problem.solve(solver=SOLVER)
    except cp.error.SolverError as exc:
        raise InfeasibleSVM(f"{what}: the solver failed ({exc})") from exc
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise InfeasibleSVM(f"{what}: no solution ({problem.status}). " + _blame(D, b, rows))
    return SVMSolution(np.asarray(x.value), D, b, np.maximum(np.asarray(constraint.dual_value), 0.0), rows)


def _feasible(D: np.ndarray, b: np.ndarray) -> bool:
    x = cp.Variable(D.shape[1])
    prob = cp.Problem(cp.Minimize(0), [D @ x >= b])
    prob.solve(solver=SOLVER)
    return prob.status in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE)


def _blame(D, b, rows) -> str:
    """Name the inputs whose own constraints are already infeasible."""
    inputs = sorted({i for i, _ in rows})
    bad = [i for i in inputs if not _feasible(D[[j for j, r in enumerate(rows) if r[0] == i]],
                                               b[[j for j, r in enumerate(rows) if r[0] == i]])]
    if bad:
        return f"input(s) {bad} cannot be separated on their own (their selected token is not a vertex the keys can single out)"
    return f"each input is separable alone, but inputs {inputs} cannot be separated by one common direction"


def att_svm(K, alpha, mask=None) -> SVMSolution:
    """ATT-SVM ``p^mm(alpha)``.

    Parameters
    ----------
    K : ``(n, T, m)`` keys.
    alpha : ``(n,)`` selected token of each input.
    mask : optional bool ``(n, T)``; padded tokens carry no constraint.

    Returns
    -------
    SVMSolution with ``x = p_mm (m,)``.

    Raises
    ------
    InfeasibleSVM naming the inputs that cannot be separated.
    """
    K, alpha = _check_keys_selection(K, alpha)
    D, rows = _difference_rows(K, alpha, None if mask is None else np.asarray(mask, bool))
    return _solve_min_norm(D, np.ones(len(rows)), rows, f"ATT-SVM for selection alpha={alpha.tolist()}")


def relaxed_att_svm(K, alpha, support) -> SVMSolution:
    """Relaxed ATT-SVM: margin 1 for inputs in ``support``, margin 0 for the others.

    ``support`` : iterable of input indices (the support vectors of the head SVM).
    """
    K, alpha = _check_keys_selection(K, alpha)
    support = set(int(i) for i in support)
    if not support <= set(range(K.shape[0])):
        raise ValueError(f"support {sorted(support)} names inputs outside 0..{K.shape[0] - 1}")
    D, rows = _difference_rows(K, alpha)
    b = np.array([1.0 if i in support else 0.0 for i, _ in rows])
    return _solve_min_norm(D, b, rows, f"relaxed ATT-SVM for alpha={alpha.tolist()}, support={sorted(support)}")


def head_svm(X, Y, alpha) -> SVMSolution:
    """Head SVM ``v_mm``: ``min ||v|| s.t. Y_i v^T x_{i alpha_i} >= 1``.

    Parameters
    ----------
    X : ``(n, T, d)``; Y : ``(n,)`` in ``{+1, -1}``; alpha : ``(n,)``.
    """
    X, alpha = _check_keys_selection(X, alpha)
    Y = _np(Y, "Y")
    if Y.shape != (X.shape[0],) or not np.isin(Y, (-1, 1)).all():
        raise ValueError(f"Y must be ({X.shape[0]},) labels in {{+1, -1}}")
    D = Y[:, None] * X[np.arange(X.shape[0]), alpha]
    rows = [(i, int(alpha[i])) for i in range(X.shape[0])]
    return _solve_min_norm(D, np.ones(len(rows)), rows, f"head SVM for selection alpha={alpha.tolist()}")


def head_support(solution: SVMSolution, tol: float = 1e-6) -> list[int]:
    """Inputs whose head-SVM constraint is active (the support vectors)."""
    slack = solution.D @ solution.x - solution.b
    return [solution.rows[j][0] for j in np.flatnonzero(slack <= tol)]


def w_svm(X, alpha, p) -> SVMSolution:
    """W-form SVM ``min ||W||_F s.t. (x_{i alpha_i} - x_it)^T W p >= 1``.

    Parameters
    ----------
    X : ``(n, T, d)`` tokens; alpha : ``(n,)``; p : ``(m,)`` fixed token.

    Returns
    -------
    SVMSolution with ``x = W (d, m)``; ``D`` holds the flattened rows.
    """
    X, alpha = _check_keys_selection(X, alpha)
    p = _np(p, "p")
    if p.ndim != 1 or not np.any(p):
        raise ValueError("p must be a non-zero vector")
    Dx, rows = _difference_rows(X, alpha)
    D = np.einsum("jd,m->jdm", Dx, p).reshape(len(rows), -1)
    sol = _solve_min_norm(D, np.ones(len(rows)), rows, f"W-SVM for selection alpha={alpha.tolist()}")
    sol.x = sol.x.reshape(X.shape[2], p.shape[0])
    return sol


def min_norm_nnls(D, b) -> np.ndarray:
    """``min ||x|| s.t. D x >= b`` by Lawson and Hanson's least-distance programming via NNLS.

    An independent check on the cvxpy solutions (active-set, no interior point):
    with ``E = [D^T; b^T]`` and ``f = (0, .., 0, 1)``, solve ``min_u>=0 ||E u - f||``;
    then ``x = -r[:-1] / r[-1]`` for the residual ``r = E u - f``.
    """
    D, b = _np(D, "D"), _np(b, "b")
    E = np.vstack([D.T, b[None, :]])
    f = np.zeros(E.shape[0])
    f[-1] = 1.0
    u, _ = nnls(E, f, maxiter=50 * E.shape[1])
    r = E @ u - f
    if np.linalg.norm(r) < 1e-12 or r[-1] >= 0:
        raise InfeasibleSVM("least-distance problem is infeasible")
    return -r[:-1] / r[-1]
