"""Self-attention read out at a query token, and its two parameterisations (Part III).

The model of *Transformers as Support Vector Machines* (Tarzanagh, Li,
Thrampoulidis, Oymak, 2023): for an input ``X_i (T, d)`` with query ``z_i (d,)``
and a fixed head ``v (d,)``,

    f(X_i) = v^T X_i^T softmax(X_i W z_i),

with the attention matrix ``W (d, d)`` trained directly or as ``W = K Q^T``
(``K, Q (d, m)``).

The logits ``x_it^T W z_i = <W, x_it z_i^T>`` are linear in ``W``: the ``W``
problem *is* paper A's ``p`` problem with keys ``vec(x_it z_i^T)`` in dimension
``d^2`` (:func:`w_keys`), so the saturation-safe gradient of :mod:`mmtoken.grad`
and the trainer :func:`mmtoken.train.train_p` apply unchanged. For ``(K, Q)`` the
chain rule gives ``grad_K = G Q`` and ``grad_Q = G^T K`` with ``G = grad_W L``;
each normalized step needs only the *direction* of ``G``, which the stable
gradient keeps when ``||G||`` underflows.

Two max-margin problems name the limits, for a selection ``alpha``:

* Frobenius Att-SVM: ``min ||W||_F s.t. (x_{i alpha_i} - x_it)^T W z_i >= 1``
  (paper A's ATT-SVM on the keys :func:`w_keys`; :func:`frobenius_svm`);
* nuclear-norm Att-SVM*: the same constraints, ``min ||W||_*``
  (:func:`nuclear_svm`, cvxpy, its optimality certified by a duality gap).

Everything is float64; instances are batched along leading axes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from . import config, fastpath, grad, svm, train, validate
from .model import AttentionProblem, as_tensor, scores

NUCLEAR_SOLVER = "CLARABEL"
"""Interior-point conic solver with semidefinite cones (the nuclear norm is an SDP);
SCS (first order) reaches only about 1e-4 here, too coarse for a rank threshold."""
NUCLEAR_TOL = 1e-6
PENALTY = float(np.finfo(np.float64).eps)
"""The public code's ``lambda`` in ``L + lambda (||K||_F^2 + ||Q||_F^2)`` for ``(K, Q)`` runs: ``2.2e-16``."""
PENALTY_NEGLIGIBLE = 300.0
"""Above this ``log(||G|| / 2 lambda)`` the penalty's gradient is below ``1e-130`` of the loss's: dropped."""
"""Relative tolerance of the optimality certificate of :func:`nuclear_svm`."""
RANK_TOL = 1e-2
"""Singular values above this fraction of the largest count towards the rank (issue 18)."""


# ---------------------------------------------------------------------------
# the model and the keys map
# ---------------------------------------------------------------------------


def _tokens_queries(X, Z) -> tuple[torch.Tensor, torch.Tensor]:
    X, Z = as_tensor(X, "X"), as_tensor(Z, "Z", device=None)
    if X.ndim < 3 or 0 in X.shape:
        raise ValueError(f"X must have shape (..., n, T, d) with no empty dimension, got {tuple(X.shape)}")
    if Z.ndim < 2 or Z.shape[-2:] != (X.shape[-3], X.shape[-1]):
        raise ValueError(
            f"Z must have shape (..., n, d) = (..., {X.shape[-3]}, {X.shape[-1]}) (one query per "
            f"input of X), got {tuple(Z.shape)}"
        )
    for name, a in (("X", X), ("Z", Z)):
        if not bool(torch.isfinite(a).all()):
            raise ValueError(f"{name} contains NaN or infinite values")
    try:
        validate.batch_shape(X.shape[:-3], Z.shape[:-2])
    except ValueError:
        raise ValueError(f"the batch shapes of X {tuple(X.shape)} and Z {tuple(Z.shape)} do not broadcast") from None
    return X, Z.to(X.device)


def w_keys(X, Z) -> torch.Tensor:
    """Keys of the ``W`` problem: ``K[..., i, t] = vec(x_it z_i^T)`` (row-major).

    So ``K[i, t] @ W.reshape(-1) == X[i, t] @ W @ Z[i]``: the logits of the
    attention model are paper A's logits ``<k_it, p>`` with ``p = vec(W)``.

    Parameters
    ----------
    X : ``(..., n, T, d)`` tokens.
    Z : ``(..., n, d)`` query of each input.

    Returns
    -------
    ``(..., n, T, d*d)`` float64 tensor.
    """
    X, Z = _tokens_queries(X, Z)
    K = X.unsqueeze(-1) * Z.unsqueeze(-2).unsqueeze(-2)  # (..., n, T, d, d): x_it[a] z_i[b]
    return K.flatten(-2)


def w_problem(X, Y, v, Z) -> AttentionProblem:
    """Paper A's ``p`` problem of the ``W`` model: keys :func:`w_keys`, scores ``Y_i x_it^T v``.

    ``X (..., n, T, d)``, ``Y (..., n)`` labels in ``{+1, -1}``, ``v (..., d)``, ``Z (..., n, d)``.
    """
    X, Z = _tokens_queries(X, Z)
    Y = as_tensor(Y, "Y", device=X.device)
    if Y.ndim < 1 or Y.shape[-1] != X.shape[-3]:
        raise ValueError(f"Y must have shape (..., {X.shape[-3]}) (one label per input of X), got {tuple(Y.shape)}")
    if not bool(((Y == 1) | (Y == -1)).all()):
        raise ValueError("labels Y must be +1 or -1")
    v = as_tensor(v, "v", device=X.device)
    if not bool(torch.isfinite(v).all()):
        raise ValueError("v contains NaN or infinite values")
    return AttentionProblem(w_keys(X, Z), scores(X, Y, v))


def _square(W, d: int, name: str = "W") -> torch.Tensor:
    W = as_tensor(W, name)
    if W.ndim < 2 or W.shape[-2:] != (d, d):
        raise ValueError(f"{name} must have shape (..., {d}, {d}), got {tuple(W.shape)}")
    if not bool(torch.isfinite(W).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    return W


def logits(X, Z, W) -> torch.Tensor:
    """Attention logits ``x_it^T W z_i``: ``X (..., n, T, d)``, ``Z (..., n, d)``, ``W (..., d, d)``
    -> ``(..., n, T)``."""
    X, Z = _tokens_queries(X, Z)
    W = _square(W, X.shape[-1]).to(X.device)
    Wz = (W.unsqueeze(-3) @ Z.unsqueeze(-1)).squeeze(-1)  # (..., n, d)
    return (X @ Wz.unsqueeze(-1)).squeeze(-1)


def output(X, Z, W, v) -> torch.Tensor:
    """Model output ``f(X_i) = v^T X_i^T softmax(X_i W z_i)``, ``(..., n)`` (plain softmax: not for saturated ``W``)."""
    X = as_tensor(X, "X")
    v = as_tensor(v, "v", device=X.device)
    s = torch.softmax(logits(X, Z, W), -1)
    return ((s.unsqueeze(-1) * X).sum(-2) @ v.unsqueeze(-1)).squeeze(-1)


# ---------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------


@dataclass
class Run:
    """A recorded training run (``S`` records, batch shape ``...``).

    steps : ``(S,)``; W : ``(S, ..., d, d)`` (``K Q^T`` for a ``(K, Q)`` run);
    probs : ``(S, ..., n, T)`` softmax probabilities (from the stable log-softmax);
    K, Q : ``(S, ..., d, m)`` factors (``(K, Q)`` runs only).
    """

    steps: np.ndarray
    W: torch.Tensor
    probs: torch.Tensor
    K: torch.Tensor | None = None
    Q: torch.Tensor | None = None

    @property
    def selection(self) -> np.ndarray:
        """Token each input attends to most at the last record, ``(..., n)``."""
        return self.probs[-1].argmax(-1).numpy()


def train_w(problem: AttentionProblem, W0, *, steps: int, lr: float = 0.1, record_every: int | None = None) -> Run:
    """Normalized GD ``W <- W - lr G/||G||_F`` on the ``W`` problem (:func:`w_problem`).

    This is :func:`mmtoken.train.train_p` on ``p = vec(W)``, unchanged (the
    saturation-safe gradient, the compiled kernel on the CPU).

    Parameters
    ----------
    problem : :func:`w_problem` (keys ``(..., n, T, d*d)``).
    W0 : ``(..., d, d)`` starts, broadcasting against the problem's batch.
    steps, lr, record_every : as in :func:`mmtoken.train.train_p`.

    Returns
    -------
    Run with ``W (S, ..., d, d)``.
    """
    d = _dim(problem)
    W0 = _square(W0, d, "W0")
    h = train.train_p(
        problem,
        W0.flatten(-2),
        steps=steps,
        lr=lr,
        method="normalized",
        record_every=record_every,
        record_probs=True,
        progress=None,  # a bar for long runs in Jupyter or a terminal (config.progress_enabled)
    )
    return Run(h.steps, h.p.unflatten(-1, (d, d)), h.probs)


def _dim(problem: AttentionProblem) -> int:
    if not isinstance(problem, AttentionProblem):
        raise ValueError(f"problem must be an AttentionProblem (tfsvm.w_problem), got {type(problem).__name__}")
    d = math.isqrt(problem.m)
    if d * d != problem.m:
        raise ValueError(f"problem has key dimension {problem.m}, not a square d*d: not a W problem (tfsvm.w_problem)")
    return d


def kq_grad(
    problem: AttentionProblem, K: torch.Tensor, Q: torch.Tensor, penalty: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Directions of ``grad_K = G Q + 2 lambda K`` and ``grad_Q = G^T K + 2 lambda Q`` at ``W = K Q^T``.

    ``G = grad_W L`` is paper A's saturation-safe ``p``-gradient on the keys
    :func:`w_keys`, kept as a unit direction ``Ĝ`` and ``log ||G||``; since
    ``G Q = ||G|| Ĝ Q`` the directions of ``Ĝ Q`` and ``Ĝ^T K`` are those of the
    two gradients, whatever the size of ``||G||``. With a penalty
    ``lambda (||K||_F^2 + ||Q||_F^2)`` (``penalty = lambda``), the two terms are
    weighed in log space, ``exp(log ||G|| - log 2 lambda) Ĝ Q + K``, so a gradient
    far below the smallest float still counts against the penalty's.

    Parameters
    ----------
    problem : :func:`w_problem`; K, Q : ``(..., d, m)``; penalty : ``lambda >= 0``.

    Returns
    -------
    ``(dK, dQ, log_norm_G)``: unit (Frobenius) directions ``(..., d, m)`` (zero where the
    gradient vanishes) and ``log ||G||_F`` ``(...)``.
    """
    penalty = validate.nonnegative(penalty, "penalty")
    d = _dim(problem)
    K, Q = as_tensor(K, "K", device=problem.K.device), as_tensor(Q, "Q", device=problem.K.device)
    for name, A in (("K", K), ("Q", Q)):
        if A.ndim < 2 or A.shape[-2] != d or A.shape[-1] == 0:
            raise ValueError(f"{name} must have shape (..., {d}, m) with m >= 1, got {tuple(A.shape)}")
    if K.shape[-1] != Q.shape[-1]:
        raise ValueError(f"K and Q must share the inner dimension m, got {tuple(K.shape)} and {tuple(Q.shape)}")
    gK, gQ, log_norm = _kq_raw(problem, K, Q, penalty)
    return _unit(gK), _unit(gQ), log_norm


def _kq_raw(problem, K, Q, penalty):
    """The two gradients divided by one common positive factor (``||G||`` or ``2 lambda``), and ``log ||G||``."""
    d = _dim(problem)
    g = grad.grad_p(problem, (K @ Q.transpose(-1, -2)).flatten(-2))
    G = g.direction.unflatten(-1, (d, d))
    gK, gQ = G @ Q, G.transpose(-1, -2) @ K
    if penalty > 0:
        r = g.log_norm - math.log(2 * penalty)
        keep = r < PENALTY_NEGLIGIBLE
        a = torch.where(keep, r.clamp(max=PENALTY_NEGLIGIBLE).exp(), torch.zeros_like(r))[..., None, None]
        keep = keep[..., None, None]
        gK, gQ = torch.where(keep, a * gK + K, gK), torch.where(keep, a * gQ + Q, gQ)
    return gK, gQ, g.log_norm


def _unit(A: torch.Tensor) -> torch.Tensor:
    return grad.unit_and_log_norm(A, dims=2)[0]  # scaled before the norm (no overflow)


def train_kq(
    problem: AttentionProblem,
    K0,
    Q0,
    *,
    steps: int,
    lr: float = 0.1,
    record_every: int = 100,
    separate: bool = True,
    penalty: float = PENALTY,
) -> Run:
    """Normalized GD on ``(K, Q)``: ``K <- K - lr dK``, ``Q <- Q - lr dQ`` (each its own unit step).

    The loss is the public code's, ``L(K Q^T) + lambda (||K||_F^2 + ||Q||_F^2)`` with
    ``lambda = penalty`` (default :data:`PENALTY`, its ``2.2e-16``; ``0`` for none).
    The directions come from :func:`kq_grad` (stable ``G``); both factors are
    updated from the same point (simultaneous steps), as the public code's
    optimizer does.

    Parameters
    ----------
    problem : :func:`w_problem` (keys ``(..., n, T, d*d)``).
    K0, Q0 : ``(..., d, m)`` starts (batch broadcasting against the problem's).
    steps : whole number >= 0; lr : positive step; record_every : whole number >= 1.
    separate : ``True`` (default, the public code): each factor its own unit step;
        ``False``: one unit step for the pair, ``(K, Q) -= lr (dK, dQ) / ||(dK, dQ)||``
        (normalized GD on the joint parameter, a time change of gradient flow).
    penalty : ``lambda >= 0``.

    Returns
    -------
    Run with ``W = K Q^T``, ``K``, ``Q`` recorded every ``record_every`` steps and at the end.
    """
    d = _dim(problem)
    steps = validate.count(steps, "steps")
    lr = validate.positive(lr, "lr")
    record_every = validate.count(record_every, "record_every", minimum=1)
    penalty = validate.nonnegative(penalty, "penalty")
    separate = validate.flag(separate, "separate")
    K, Q = as_tensor(K0, "K0"), as_tensor(Q0, "Q0")
    for name, A in (("K0", K), ("Q0", Q)):
        if A.ndim < 2 or A.shape[-2] != d or A.shape[-1] == 0 or not bool(torch.isfinite(A).all()):
            raise ValueError(f"{name} must be a finite (..., {d}, m) array with m >= 1, got shape {tuple(A.shape)}")
    if K.shape[-1] != Q.shape[-1]:
        raise ValueError(f"K0 and Q0 must share the inner dimension m, got {tuple(K.shape)} and {tuple(Q.shape)}")
    try:
        batch = torch.Size(
            validate.batch_shape(problem.K.shape[:-3], problem.gamma.shape[:-2], K.shape[:-2], Q.shape[:-2])
        )
    except ValueError:
        raise ValueError(
            f"K0 {tuple(K.shape)} and Q0 {tuple(Q.shape)} do not broadcast against the problem's "
            f"batch {tuple(problem.K.shape[:-3])}"
        ) from None
    m = K.shape[-1]
    K, Q = K.expand(*batch, d, m).clone(), Q.expand(*batch, d, m).clone()
    record = sorted(set(range(0, steps + 1, record_every)) | {steps})
    if fastpath.available() and problem.K.device.type == "cpu" and problem.mask is None:
        Ks, Qs = _train_kq_compiled(problem, K, Q, steps, lr, record, bool(separate), penalty)
        W = Ks @ Qs.transpose(-1, -2)
        return Run(np.array(record), W, grad.saturation(problem, W.flatten(-2)).probs, Ks, Qs)
    rows_k, rows_K, rows_Q = [], [], []
    with torch.inference_mode():
        for k in range(steps + 1):
            if k == record[len(rows_k)]:
                rows_k.append(k)
                rows_K.append(K.clone())
                rows_Q.append(Q.clone())
            if k == steps:
                break
            if separate:
                dK, dQ, _ = kq_grad(problem, K, Q, penalty)
            else:
                gK, gQ, _ = _kq_raw(problem, K, Q, penalty)
                # the pair's unit step, both divided by their largest entry first where the
                # squares would overflow or underflow (grad.SAFE_RANGE); unchanged otherwise
                a = torch.maximum(gK.abs().amax((-2, -1)), gQ.abs().amax((-2, -1)))
                plain = ((a >= grad.SAFE_RANGE[0]) & (a <= grad.SAFE_RANGE[1])) | (a == 0)
                c = torch.where(plain, torch.ones_like(a), a)[..., None, None]
                gK, gQ = gK / c, gQ / c
                both = (gK.flatten(-2).norm(dim=-1) ** 2 + gQ.flatten(-2).norm(dim=-1) ** 2).sqrt()[..., None, None]
                both = both.clamp_min(torch.finfo(gK.dtype).tiny)
                dK, dQ = gK / both, gQ / both
            K, Q = K - lr * dK, Q - lr * dQ
    Ks, Qs = torch.stack(rows_K), torch.stack(rows_Q)
    W = Ks @ Qs.transpose(-1, -2)
    probs = grad.saturation(problem, W.flatten(-2)).probs
    return Run(np.array(rows_k), W, probs, Ks, Qs)


def _train_kq_compiled(problem, K, Q, steps, lr, record, separate, penalty):
    """:func:`train_kq` through the compiled kernel; returns the recorded ``K, Q (R, ..., d, m)``."""
    batch, (d, m) = K.shape[:-2], K.shape[-2:]
    flat = lambda x, tail: np.ascontiguousarray(x.expand(*batch, *tail).reshape(-1, *tail).numpy())
    n, T = problem.n, problem.T
    Kx, gamma = flat(problem.K, (n, T, d * d)), flat(problem.gamma, (n, T))
    Kf, Qf = flat(K, (d, m)).copy(), flat(Q, (d, m)).copy()
    mask = np.ones(gamma.shape, dtype=np.bool_)
    R = len(record)
    out_K, out_Q = np.empty((R, Kf.shape[0], d, m)), np.empty((R, Kf.shape[0], d, m))
    from . import fastpath_kernels as kernels  # numba: imported on first use

    kernels.run_kq(
        Kx,
        gamma,
        mask,
        Kf,
        Qf,
        steps,
        lr,
        separate,
        penalty,
        PENALTY_NEGLIGIBLE,
        np.array(record[:-1] if record[-1] == steps else record, dtype=np.int64),
        out_K,
        out_Q,
    )
    if record[-1] == steps:
        out_K[-1], out_Q[-1] = Kf, Qf
    shape = lambda a: torch.from_numpy(a).reshape(R, *batch, d, m)
    return shape(out_K), shape(out_Q)


def naive_grad(problem: AttentionProblem, p: torch.Tensor) -> torch.Tensor:
    """``grad_p L`` (logistic loss) through the plain softmax, in the dtype of ``p``: what autograd computes.

    Autograd's softmax backward gives ``dL/dz_it = (1/n) l'(u_i) s_it (gamma_it - u_i)``;
    here that product is formed directly (no graph, so long runs are cheap). Once the
    softmax saturates, ``gamma_top - u`` is rounding noise and ``s_t`` underflows: the
    direction of the result is then noise (the trap of the book's appendix).

    Parameters
    ----------
    problem : keys ``(..., n, T, m)``, scores ``(..., n, T)`` (cast to the dtype of ``p``).
    p : ``(..., m)`` float tensor.

    Returns
    -------
    ``(..., m)`` in the dtype of ``p``.
    """
    K, gamma = problem.K.to(p.dtype), problem.gamma.to(p.dtype)
    s = torch.softmax((K @ p.unsqueeze(-2).unsqueeze(-1)).squeeze(-1), -1)
    u = (s * gamma).sum(-1)
    dl = -torch.sigmoid(-u)  # logistic l'(u)
    w = dl.unsqueeze(-1) * s * (gamma - u.unsqueeze(-1))
    return (w.unsqueeze(-1) * K).sum((-3, -2)) / problem.n


def train_w_naive(
    problem: AttentionProblem,
    W0,
    *,
    steps: int,
    lr: float = 0.1,
    record_every: int = 100,
    dtype: torch.dtype = torch.float64,
) -> Run:
    """The naive run: normalized GD on ``W`` with :func:`naive_grad` (plain softmax) in ``dtype``.

    The step divides by ``||g|| + eps`` as the public code does (``eps`` of ``dtype``), so
    a gradient that has underflowed to zero gives a zero step instead of NaN. For the
    chapter's section on what this does after saturation; never for results.

    Returns
    -------
    Run with ``W (S, ..., d, d)`` in float64 (the iterates themselves are kept in ``dtype``).
    """
    d = _dim(problem)
    steps = validate.count(steps, "steps")
    lr = validate.positive(lr, "lr")
    record_every = validate.count(record_every, "record_every", minimum=1)
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    p = _square(W0, d, "W0").flatten(-2).to(dtype).clone()
    eps = torch.finfo(dtype).eps
    rows_k, rows_p = [], []
    with config.single_thread():  # tiny tensors: torch's thread pool costs more than the arithmetic
        rows_k, rows_p = _naive_loop(problem, p, steps, lr, record_every, eps)
    P = torch.stack(rows_p)
    return Run(np.array(rows_k), P.unflatten(-1, (d, d)), grad.saturation(problem, P).probs)


def _naive_loop(problem, p, steps, lr, record_every, eps):
    rows_k, rows_p = [], []
    with torch.inference_mode():
        for k in range(steps + 1):
            if k % record_every == 0 or k == steps:
                rows_k.append(k)
                rows_p.append(p.to(torch.float64))
            if k == steps:
                break
            g = naive_grad(problem, p)
            p = p - lr * g / (g.norm(dim=-1, keepdim=True) + eps)
    return rows_k, rows_p


# ---------------------------------------------------------------------------
# the two SVMs
# ---------------------------------------------------------------------------


def _keys_selection(X, Z, alpha) -> tuple[np.ndarray, np.ndarray]:
    X = validate.real_array(X, "X", ndim=3)
    n, T, d = X.shape
    if 0 in X.shape:
        raise ValueError(f"X must have shape (n, T, d) with no empty dimension, got {X.shape}")
    if T < 2:
        raise ValueError(f"X has T = {T} token(s) per input; at least 2 are needed")
    Z = validate.real_array(Z, "Z", ndim=2)
    if Z.shape != (n, d):
        raise ValueError(f"Z must have shape (n, d) = ({n}, {d}) (one query per input of X), got {Z.shape}")
    alpha = validate.selection(alpha, n, T, "alpha")
    return w_keys(X, Z).numpy(), alpha


def frobenius_svm(X, Z, alpha) -> svm.SVMSolution:
    """Frobenius Att-SVM ``W^mm(alpha)``: ``min ||W||_F s.t. (x_{i alpha_i} - x_it)^T W z_i >= 1``.

    Paper A's ATT-SVM (:func:`mmtoken.svm.att_svm`, with its independent KKT check)
    on the keys :func:`w_keys`.

    Parameters
    ----------
    X : ``(n, T, d)``; Z : ``(n, d)``; alpha : ``(n,)`` selected token of each input.

    Returns
    -------
    SVMSolution with ``x = W (d, d)``.

    Raises
    ------
    ValueError naming the argument; :class:`mmtoken.svm.InfeasibleSVM` when no ``W`` separates.
    """
    K, alpha = _keys_selection(X, Z, alpha)
    X, Z = validate.real_array(X, "X"), validate.real_array(Z, "Z")  # checked above
    n, T, d = X.shape
    rows = [(i, t) for i in range(n) for t in range(T) if t != alpha[i]]
    A = np.stack([X[i, alpha[i]] - X[i, t] for i, t in rows])  # the row a_j z_i^T, by its factors
    Q = np.stack([Z[i] for i, _ in rows])
    with np.errstate(divide="ignore"):
        log_max = np.log(np.abs(A).max(1)) + np.log(np.abs(Q).max(1))
    if ((log_max > svm.OUTER_LOG_RANGE[0]) & (log_max < svm.OUTER_LOG_RANGE[1])).all():
        sol = svm.att_svm(K, alpha)  # products representable: paper A's ATT-SVM on the keys, as always
    else:  # a zero factor, or products that underflow / overflow: decided from the factors
        sol = svm.outer_svm(A, Q, rows, f"ATT-SVM for selection alpha={alpha.tolist()}", "X and Z")
    sol.x = sol.x.reshape(d, d)
    return sol


@dataclass
class NuclearSolution:
    """The nuclear-norm Att-SVM* of one selection.

    W : ``(d, d)`` solution; dual : ``(N,)`` multipliers ``mu`` of the constraints
    ``<A_j, W> >= 1`` (``A_j = (x_{i alpha_i} - x_it) z_i^T``, flattened in ``D (N, d*d)``);
    rows : ``(i, t)`` of each constraint; check : the certificate (see :func:`nuclear_svm`).
    """

    W: np.ndarray
    dual: np.ndarray
    D: np.ndarray
    rows: list
    check: dict = field(default_factory=dict)

    @property
    def objective(self) -> float:
        """``||W||_*``."""
        return float(np.linalg.svd(self.W, compute_uv=False).sum())

    def rank(self, tol: float = RANK_TOL) -> int:
        """Number of singular values above ``tol`` times the largest."""
        return numerical_rank(self.W, tol)


def numerical_rank(W, tol: float = RANK_TOL) -> np.ndarray | int:
    """Singular values of ``W (..., d, m)`` above ``tol`` times the largest, counted: ``(...)``."""
    tol = validate.positive(tol, "tol", maximum=1.0)
    s = np.linalg.svd(validate.real_array(W, "W", min_ndim=2), compute_uv=False)
    r = (s > tol * s[..., :1]).sum(-1)
    return int(r) if np.ndim(r) == 0 else r


def nuclear_certificate(W, D, dual) -> dict:
    """Scale-free optimality measures of ``W`` for ``min ||W||_* s.t. D vec(W) >= 1`` with multipliers ``dual``.

    The dual problem is ``max sum mu_j s.t. mu >= 0, ||sum_j mu_j A_j||_op <= 1``.
    For any feasible ``W'``: ``||W'||_* >= <W', M>/||M||_op >= sum_j mu_j / ||M||_op``
    with ``M = sum_j mu_j A_j``, so ``W`` is optimal to within ``gap`` (relative) when

    * ``primal = max(0, 1 - min_j <A_j, W>)`` (constraint violation),
    * ``dual = max(0, -min_j mu_j) / max_j mu_j`` (negative multipliers),
    * ``gap = | ||W||_* - sum_j mu_j / ||M||_op | / ||W||_*``

    are small. Also ``active``: the number of constraints with ``<A_j, W> <= 1 + 1e-6``
    (at least one at an optimum) and ``complementarity = max_j mu_j |<A_j, W> - 1| / sum mu``.
    """
    W = validate.real_array(W, "W", ndim=2)
    D = validate.real_array(D, "D", ndim=2)
    mu = validate.real_array(dual, "dual", ndim=1)
    if D.shape != (len(mu), W.size):
        raise ValueError(f"D must have shape ({len(mu)}, {W.size}), got {D.shape}")
    margin = D @ W.ravel()
    mu_pos = np.maximum(mu, 0.0)
    M = (mu_pos @ D).reshape(W.shape)
    op = float(np.linalg.norm(M, 2))
    nuc = float(np.linalg.svd(W, compute_uv=False).sum())
    dual_value = float(mu_pos.sum() / op) if op > 0 else 0.0
    return {
        "primal": float(max(0.0, 1.0 - margin.min())),
        "dual": float(max(0.0, -mu.min()) / max(mu.max(), np.finfo(float).tiny)),
        "gap": abs(nuc - dual_value) / nuc,
        "active": int((margin <= 1.0 + 1e-6).sum()),
        "complementarity": float(np.max(mu_pos * np.abs(margin - 1.0)) / max(mu_pos.sum(), np.finfo(float).tiny)),
        "op_norm": op,
    }


def nuclear_excess(X, Z, alpha, W, optimum: float) -> np.ndarray | float:
    """How far the direction of ``W`` is from solving Att-SVM* for ``alpha``, in objective.

    ``W`` is rescaled to smallest margin one, ``min_{i, t != alpha_i} (x_{i alpha_i} - x_it)^T W z_i = 1``;
    the result is its nuclear norm over ``optimum`` (``||W_*^mm||_*``) minus one: zero at the
    nuclear-norm solution's direction, positive at any other direction that meets every constraint,
    ``inf`` where ``W`` violates one (margin <= 0).

    Parameters
    ----------
    X : ``(..., n, T, d)``; Z : ``(..., n, d)``; alpha : ``(..., n)`` integer selections;
    W : ``(..., d, d)``; optimum : ``(...)`` positive optimal values.

    Returns
    -------
    ``(...)`` float.
    """
    keys = w_keys(X, Z).numpy()  # (..., n, T, d*d)
    W = validate.real_array(W, "W", min_ndim=2)
    alpha = validate.numeric(alpha, "alpha")
    if alpha.shape != keys.shape[:-2] or alpha.dtype.kind not in "iu":
        raise ValueError(f"alpha must hold one integer token per input, shape {keys.shape[:-2]}, got {alpha.shape}")
    if W.shape[-2:] != (X_d := math.isqrt(keys.shape[-1]),) * 2:
        raise ValueError(f"W must have shape (..., {X_d}, {X_d}), got {W.shape}")
    if alpha.size and (alpha.min() < 0 or alpha.max() >= keys.shape[-2]):
        raise ValueError(f"alpha must hold tokens in 0..{keys.shape[-2] - 1}")
    z = np.einsum("...ntm,...m->...nt", keys, W.reshape(*W.shape[:-2], -1))
    top = np.take_along_axis(z, alpha[..., None], -1)
    gaps = top - z
    np.put_along_axis(gaps, alpha[..., None], np.inf, -1)
    margin = gaps.reshape(*gaps.shape[:-2], -1).min(-1)
    nuc = np.linalg.svd(W, compute_uv=False).sum(-1)
    optimum = validate.real_array(optimum, "optimum")
    if not (optimum > 0).all():
        raise ValueError(f"optimum must hold positive optimal values (||W_*^mm||_*), got {optimum.tolist()!r:.80}")
    try:
        np.broadcast_shapes(optimum.shape, margin.shape)
    except ValueError:
        raise ValueError(f"optimum {optimum.shape} does not broadcast against the batch {margin.shape}") from None
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(margin > 0, nuc / margin / optimum - 1.0, np.inf)
    return float(out) if np.ndim(out) == 0 else out


def nuclear_svm(X, Z, alpha, solver: str = NUCLEAR_SOLVER, tol: float = NUCLEAR_TOL) -> NuclearSolution:
    """Nuclear-norm Att-SVM* ``W^mm_*(alpha)``: ``min ||W||_* s.t. (x_{i alpha_i} - x_it)^T W z_i >= 1``.

    Solved with cvxpy (``cp.normNuc``, an SDP; default solver :data:`NUCLEAR_SOLVER`),
    then accepted only if the certificate :func:`nuclear_certificate` built from the
    solver's multipliers meets ``tol`` (``primal``, ``dual``, ``gap``) and some
    constraint is active.

    Parameters
    ----------
    X : ``(n, T, d)``; Z : ``(n, d)``; alpha : ``(n,)`` selected token of each input.
    solver : a cvxpy solver with semidefinite cones (``"CLARABEL"`` or ``"SCS"``).
    tol : relative tolerance of the certificate.

    Returns
    -------
    NuclearSolution (``W (d, d)``, multipliers, certificate in ``check``).

    Raises
    ------
    ValueError naming the argument; :class:`mmtoken.svm.InfeasibleSVM` when no ``W``
    separates (confirmed by paper A's certified ATT-SVM, whose feasible set is the
    same); :class:`mmtoken.svm.SolverFailed` when the solver's answer fails the certificate.
    """
    K, alpha = _keys_selection(X, Z, alpha)
    tol = validate.positive(tol, "tol")
    if not isinstance(solver, str) or solver.upper() not in ("CLARABEL", "SCS"):
        raise ValueError(f"solver must be 'CLARABEL' or 'SCS' (a solver with semidefinite cones), got {solver!r}")
    n, T, m = K.shape
    d = math.isqrt(m)
    rows = [(i, t) for i in range(n) for t in range(T) if t != alpha[i]]
    D = np.stack([K[i, alpha[i]] - K[i, t] for i, t in rows])
    what = f"nuclear-norm Att-SVM* for selection alpha={alpha.tolist()}"
    import cvxpy as cp  # imported when an SVM is solved (about a second)

    W = cp.Variable((d, d))
    cons = [D @ cp.vec(W, order="C") >= 1]
    prob = cp.Problem(cp.Minimize(cp.normNuc(W)), cons)
    try:
        prob.solve(solver=solver.upper())
    except cp.error.SolverError as exc:
        raise svm.SolverFailed(f"{what}: solver {solver} failed ({exc})") from None
    if prob.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE) or W.value is None:
        # the feasible set is the Frobenius problem's: let the certified ATT-SVM decide
        frobenius_svm(X, Z, alpha)  # raises InfeasibleSVM naming the inputs when infeasible
        raise svm.SolverFailed(
            f"{what}: solver {solver} reports {prob.status}, but the Frobenius "
            "Att-SVM of the same constraints is feasible"
        )
    Wv, mu = np.asarray(W.value, float), np.asarray(cons[0].dual_value, float).ravel()
    check = nuclear_certificate(Wv, D, mu)
    check["status"] = prob.status
    check["solver"] = solver.upper()
    bad = {k: check[k] for k in ("primal", "dual", "gap") if check[k] > tol}
    if bad or check["active"] == 0:
        raise svm.SolverFailed(
            f"{what}: the solver's answer fails the optimality certificate "
            f"(tol {tol:g}): {bad or 'no active constraint'}"
        )
    return NuclearSolution(Wv, mu, D, rows, check)


# ---------------------------------------------------------------------------
# instances
# ---------------------------------------------------------------------------


def random_instances(count: int, n: int, T: int, d: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``count`` random instances of the public code's experiments, batched.

    Instance ``b`` is the public code's ``data_generator(seed + b)``
    (``TFasSVM/local_converge.ipynb``): a ``torch.Generator`` seeded with
    ``seed + b`` draws, in this order, the head ``v (d)`` (normalised), the labels
    ``Y (n)`` (sign of a Gaussian), the tokens ``X (n, T, d)`` and the queries
    ``Z (n, d)`` (each row normalised), in float32; the public code then casts them
    to float64, as here.

    Returns
    -------
    ``X (count, n, T, d)``, ``Z (count, n, d)``, ``v (count, d)``, ``Y (count, n)`` (float64).
    """
    count, n, T, d = (
        validate.count(val, name, minimum=lo)
        for name, val, lo in (("count", count, 1), ("n", n, 1), ("T", T, 2), ("d", d, 1))
    )
    seed = validate.count(seed, "seed")
    rows = {"X": [], "Z": [], "v": [], "Y": []}
    for b in range(count):
        g = torch.Generator().manual_seed(seed + b)
        v = torch.randn(d, generator=g)
        Y = 2.0 * (torch.randn(n, generator=g) > 0) - 1.0
        X = torch.randn((n, T, d), generator=g)
        Z = torch.randn((n, d), generator=g)
        rows["v"].append(v / v.norm())
        rows["Y"].append(Y)
        rows["X"].append(X / X.norm(dim=-1, keepdim=True))
        rows["Z"].append(Z / Z.norm(dim=-1, keepdim=True))
    return {k: torch.stack(a).double().numpy() for k, a in rows.items()}


__all__ = [
    "w_keys",
    "w_problem",
    "logits",
    "output",
    "Run",
    "train_w",
    "kq_grad",
    "train_kq",
    "naive_grad",
    "train_w_naive",
    "frobenius_svm",
    "NuclearSolution",
    "nuclear_svm",
    "nuclear_certificate",
    "nuclear_excess",
    "numerical_rank",
    "random_instances",
    "NUCLEAR_SOLVER",
    "NUCLEAR_TOL",
    "RANK_TOL",
    "PENALTY",
    "PENALTY_NEGLIGIBLE",
]
