"""Hard-margin SVM problems of paper A, solved with cvxpy (Clarabel) and checked independently.

* ATT-SVM for a selection ``alpha``:
  ``min ||p|| s.t. (k_{i alpha_i} - k_it)^T p >= 1`` for all ``t != alpha_i``, all ``i``.
* Relaxed ATT-SVM: inputs outside a set ``S`` (the non-support vectors of the
  head SVM) only need ``>= 0``.
* Head SVM: ``min ||v|| s.t. Y_i v^T x_{i alpha_i} >= 1``.
* W-form SVM: ``min ||W||_F s.t. (x_{i alpha_i} - x_it)^T W p >= 1``.

Arrays are NumPy float64 (torch tensors are accepted; complex values, fractional selections and non-finite
entries are refused with a :class:`ValueError` naming the argument).

Each problem builds its constraint rows and hands them to
:func:`mmtoken.attention.svm_solvers.solve_min_norm` (right at every scale, checked independently);
:class:`SVMSolution`, :class:`InfeasibleSVM`, :class:`SolverFailed`, :data:`KKT_TOL`, :data:`SOLVER`
and :func:`min_norm_nnls` are defined there and re-exported here.
"""

from __future__ import annotations

__all__ = [
    "SOLVER",
    "KKT_TOL",
    "InfeasibleSVM",
    "SolverFailed",
    "SVMSolution",
    "att_svm",
    "relaxed_att_svm",
    "head_svm",
    "head_support",
    "w_svm",
    "min_norm_nnls",
    "outer_svm",
    "difference_rounding",
    "ROUNDING_CAP",
]

import numpy as np

from mmtoken import validate
from mmtoken.attention.svm_solvers import (
    KKT_TOL,
    SCALE_RANGE,
    SOLVER,
    InfeasibleSVM,
    SolverFailed,
    SVMSolution,
    min_norm_nnls,
    solve_min_norm,
)


def _check_keys_selection(K, alpha, name: str = "K", min_tokens: int = 2):
    K = validate.real_array(K, name, ndim=3)
    n, T, m = K.shape
    if n == 0 or m == 0:
        raise ValueError(f"{name} must have shape (n, T, m) with n >= 1 and m >= 1, got {K.shape}")
    if T < min_tokens:
        raise ValueError(
            f"{name} has T = {T} token(s) per input; at least {min_tokens} are needed "
            "(with one token there is nothing to select against)"
        )
    return K, validate.selection(alpha, n, T, "alpha")


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


ROUNDING_CAP = 1e6
"""A row's rounding factor (:func:`difference_rounding`) is capped here: a certificate never needs a margin bound
above ``1e6`` rounding units (about ``3.6e-9`` relative)."""


def difference_rounding(K, alpha, rows, D) -> np.ndarray:
    """``(N,)``: for each row ``k_{i alpha_i} - k_it`` of ``D``, ``(||k_{i alpha_i}|| + ||k_it||) / ||row||`` (at
    least 1, at most :data:`ROUNDING_CAP`): the rounding of the keys the difference carries, in units of its own
    size (:func:`mmtoken.attention.svm_exact.certified`)."""
    if not rows:
        return np.ones(0)
    i, t = np.array(rows).T
    s = float(np.abs(K).max()) or 1.0
    with np.errstate(divide="ignore", invalid="ignore", under="ignore"):
        keys = np.linalg.norm(K[i, alpha[i]] / s, axis=1) + np.linalg.norm(K[i, t] / s, axis=1)
        ratio = keys / np.linalg.norm(D / s, axis=1)
    return np.clip(np.nan_to_num(ratio, nan=ROUNDING_CAP, posinf=ROUNDING_CAP), 1.0, ROUNDING_CAP)


def att_svm(K, alpha, mask=None) -> SVMSolution:
    """ATT-SVM ``p^mm(alpha)``.

    Parameters
    ----------
    K : ``(n, T, m)`` keys, ``T >= 2``.
    alpha : ``(n,)`` selected token of each input (integers).
    mask : optional bool ``(n, T)``; padded tokens carry no constraint. The selected
        tokens must be real (unmasked), and some other token must be real.

    Returns
    -------
    SVMSolution with ``x = p_mm (m,)``, verified at the scale of ``K``.

    Raises
    ------
    ValueError naming the argument; InfeasibleSVM naming the inputs that cannot be separated; SolverFailed if the
    problem is too ill-conditioned to decide.
    """
    K, alpha = _check_keys_selection(K, alpha)
    if mask is not None:
        mask = validate.mask(mask, K.shape[:2], "mask")
        hidden = [int(i) for i in np.flatnonzero(~mask[np.arange(K.shape[0]), alpha])]
        if hidden:
            raise ValueError(f"mask hides the selected token of input(s) {hidden}: a padded token cannot be selected")
    D, rows = _difference_rows(K, alpha, mask)
    if not rows:
        raise ValueError("mask leaves no token besides the selected ones: ATT-SVM has no constraint")
    what = f"ATT-SVM for selection alpha={alpha.tolist()}"
    return solve_min_norm(D, np.ones(len(rows)), rows, what, rounding=difference_rounding(K, alpha, rows, D))


def relaxed_att_svm(K, alpha, support) -> SVMSolution:
    """Relaxed ATT-SVM: margin 1 for the inputs in ``support`` (a non-empty iterable of input indices, the support
    vectors of the head SVM), margin 0 for the others."""
    K, alpha = _check_keys_selection(K, alpha)
    try:
        items = list(support)
    except TypeError:
        raise ValueError(f"support must be an iterable of input indices, got {support!r}") from None
    if not items:
        raise ValueError("support is empty: with no support vector the relaxed ATT-SVM is solved by p = 0")
    support = set(int(i) for i in validate.selection(items, len(items), K.shape[0], "support"))
    D, rows = _difference_rows(K, alpha)
    b = np.array([1.0 if i in support else 0.0 for i, _ in rows])
    what = f"relaxed ATT-SVM for alpha={alpha.tolist()}, support={sorted(support)}"
    return solve_min_norm(D, b, rows, what, rounding=difference_rounding(K, alpha, rows, D))


def head_svm(X, Y, alpha) -> SVMSolution:
    """Head SVM ``v_mm``: ``min ||v|| s.t. Y_i v^T x_{i alpha_i} >= 1``.

    Parameters
    ----------
    X : ``(n, T, d)``; Y : ``(n,)`` in ``{+1, -1}``; alpha : ``(n,)``.
    """
    X, alpha = _check_keys_selection(X, alpha, "X", min_tokens=1)
    Y = validate.real_array(Y, "Y")
    if Y.shape != (X.shape[0],) or not np.isin(Y, (-1, 1)).all():
        raise ValueError(f"Y must be ({X.shape[0]},) labels in {{+1, -1}}, got shape {Y.shape}")
    D = Y[:, None] * X[np.arange(X.shape[0]), alpha]
    rows = [(i, int(alpha[i])) for i in range(X.shape[0])]
    return solve_min_norm(D, np.ones(len(rows)), rows, f"head SVM for selection alpha={alpha.tolist()}", "X")


def head_support(solution: SVMSolution, tol: float = 1e-6) -> list[int]:
    """Inputs whose head-SVM constraint is active (the support vectors): relative slack ``<= tol``."""
    tol = validate.positive(tol, "tol")
    slack = (solution.D @ solution.x - solution.b) / np.where(solution.b > 0, solution.b, 1.0)
    return [solution.rows[j][0] for j in np.flatnonzero(slack <= tol)]


OUTER_LOG_RANGE = (np.log(1e-290), np.log(1e290))
"""Natural-log range of a row's largest entry inside which products of factors are formed as they are."""


def outer_svm(A, Q, rows: list, what: str, data: str) -> SVMSolution:
    """``min ||x|| s.t. vec(a_j q_j^T)^T x >= 1`` for the rows ``a_j (N, d)``, ``q_j (N, m)``.

    The constraint rows of the W-form problems are outer products; formed naively they underflow or overflow, and
    a zero product row would read as a certificate of infeasibility. Here a row is zero only when a factor is
    exactly zero (the message says which); where some row's largest entry ``max|a_j| max|q_j|`` falls outside
    :data:`OUTER_LOG_RANGE` each row is formed from its factors divided by their largest entries, its right-hand
    side ``1 / (max|a_j| max|q_j|)`` kept in log space. Inside the range the rows are the plain products.

    ``rows`` names each row (``(input, token)``); ``data`` the arguments, for the errors.
    """
    A = validate.real_array(A, "A", ndim=2)
    Q = validate.real_array(Q, "Q", ndim=2)
    if A.shape[0] != Q.shape[0] or A.shape[0] != len(rows):
        raise ValueError(f"A {A.shape} and Q {Q.shape} must have one row per entry of rows ({len(rows)})")
    aa, aq = np.abs(A).max(1), np.abs(Q).max(1)
    za, zq = aa == 0, aq == 0
    if za.any():
        bad = sorted({rows[j] for j in np.flatnonzero(za)})
        raise InfeasibleSVM(
            f"{what}: no solution. Constraint rows {bad} (input, token) are zero: "
            "the token equals the selected one, so no direction can separate them."
        )
    if zq.any():
        bad = sorted({rows[j][0] for j in np.flatnonzero(zq)})
        raise InfeasibleSVM(
            f"{what}: no solution. The query (or fixed vector) of input(s) {bad} is zero: every "
            "logit of such an input is 0, so none of its tokens can be separated."
        )
    with np.errstate(divide="ignore"):
        log_max = np.log(aa) + np.log(aq)
    if ((log_max > OUTER_LOG_RANGE[0]) & (log_max < OUTER_LOG_RANGE[1])).all():
        D = np.einsum("jd,jm->jdm", A, Q).reshape(len(rows), -1)
        return solve_min_norm(D, np.ones(len(rows)), rows, what, data)
    log_b = -log_max  # each row divided by max|a_j| max|q_j|: unit largest entry
    if not (SCALE_RANGE[0] < log_b.max() < SCALE_RANGE[1]):
        raise ValueError(
            f"{what}: {data}: the solution would have norm about 1e{log_b.max() / np.log(10):.0f}, outside "
            f"the range float64 holds with full precision; rescale {data}"
        )
    # rows whose right-hand side is below 1e-300 of the largest cannot bind before float64 runs out
    b = np.exp(np.maximum(log_b - log_b.max(), np.log(1e-300)))
    D = np.einsum("jd,jm->jdm", A / aa[:, None], Q / aq[:, None]).reshape(len(rows), -1)
    sol = solve_min_norm(D, b, rows, what, data)
    scale = np.exp(log_b.max())
    sol.x = sol.x * scale
    sol.b = sol.b * scale  # the rows stay the normalised ones; the constraints D x >= b hold as stated
    with np.errstate(over="ignore", under="ignore"):
        sol.dual = sol.dual * scale  # x = scale y = D^T (scale mu)
    sol.check = dict(sol.check, rows="normalised factors (products outside float64's range)")
    return sol


def w_svm(X, alpha, p) -> SVMSolution:
    """W-form SVM ``min ||W||_F s.t. (x_{i alpha_i} - x_it)^T W p >= 1``.

    Parameters
    ----------
    X : ``(n, T, d)`` tokens; alpha : ``(n,)``; p : ``(m,)`` fixed non-zero token.

    Returns
    -------
    SVMSolution with ``x = W (d, m)``; ``D`` holds the flattened rows.
    """
    X, alpha = _check_keys_selection(X, alpha, "X")
    p = validate.real_array(p, "p", ndim=1)
    if not np.any(p):
        raise ValueError("p must be a non-zero vector")
    Dx, rows = _difference_rows(X, alpha)
    sol = outer_svm(
        Dx, np.broadcast_to(p, (len(rows), p.shape[0])), rows, f"W-SVM for selection alpha={alpha.tolist()}", "X and p"
    )
    sol.x = sol.x.reshape(X.shape[2], p.shape[0])
    return sol
