"""Self-attention read out at a query token, and its ``W`` parameterisation (Part III).

The model of *Transformers as Support Vector Machines* (Tarzanagh, Li,
Thrampoulidis, Oymak, 2023): for an input ``X_i (T, d)`` with query ``z_i (d,)``
and a fixed head ``v (d,)``,

    f(X_i) = v^T X_i^T softmax(X_i W z_i),

with the attention matrix ``W (d, d)`` trained directly or as ``W = K Q^T``
(``K, Q (d, m)``).

The logits ``x_it^T W z_i = <W, x_it z_i^T>`` are linear in ``W``: the ``W`` problem *is* paper A's ``p`` problem
with keys ``vec(x_it z_i^T)`` in dimension ``d^2`` (:func:`w_keys`), so paper A's saturation-safe trainer applies
unchanged (:func:`train_w`), and the Frobenius Att-SVM is paper A's ATT-SVM on those keys (:func:`frobenius_svm`).

Chapter 13 writes the rest of its experiment itself (``mmtoken.chapters.ch13_w_vs_kq``: the ``(K, Q)`` trainer,
the plain-softmax run, the nuclear-norm Att-SVM*), built on :func:`w_dim`, :func:`as_square`,
:func:`keys_selection` and the :class:`Run` record here.

Everything is float64; instances are batched along leading axes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from mmtoken import validate
from mmtoken.attention import svm, train
from mmtoken.attention.model import AttentionProblem, as_tensor, scores

# --------------------------------------------------------------------------- the model and the keys map


def _tokens_queries(X, Z) -> tuple[torch.Tensor, torch.Tensor]:
    X, Z = as_tensor(X, "X"), as_tensor(Z, "Z")  # finite: as_tensor refuses NaN and infinity
    if X.ndim < 3 or 0 in X.shape:
        raise ValueError(f"X must have shape (..., n, T, d) with no empty dimension, got {tuple(X.shape)}")
    if Z.ndim < 2 or Z.shape[-2:] != (X.shape[-3], X.shape[-1]):
        raise ValueError(
            f"Z must have shape (..., n, d) = (..., {X.shape[-3]}, {X.shape[-1]}) (one query per "
            f"input of X), got {tuple(Z.shape)}"
        )
    try:
        validate.batch_shape(X.shape[:-3], Z.shape[:-2])
    except ValueError:
        raise ValueError(f"the batch shapes of X {tuple(X.shape)} and Z {tuple(Z.shape)} do not broadcast") from None
    return X, Z.to(X.device)


def w_keys(X, Z) -> torch.Tensor:
    """Keys of the ``W`` problem: ``K[..., i, t] = vec(x_it z_i^T)`` (row-major).

    So ``K[i, t] @ W.reshape(-1) == X[i, t] @ W @ Z[i]``: paper A's logits ``<k_it, p>`` with ``p = vec(W)``.

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
    return AttentionProblem(w_keys(X, Z), scores(X, Y, as_tensor(v, "v", device=X.device)))


def as_square(W, d: int, name: str = "W") -> torch.Tensor:
    """``W`` as a finite float64 tensor ``(..., d, d)``; a ``ValueError`` naming ``name`` otherwise."""
    W = as_tensor(W, name)
    if W.ndim < 2 or W.shape[-2:] != (d, d):
        raise ValueError(f"{name} must have shape (..., {d}, {d}), got {tuple(W.shape)}")
    return W


def logits(X, Z, W) -> torch.Tensor:
    """Attention logits ``x_it^T W z_i``: ``X (..., n, T, d)``, ``Z (..., n, d)``, ``W (..., d, d)``
    -> ``(..., n, T)``."""
    X, Z = _tokens_queries(X, Z)
    W = as_square(W, X.shape[-1]).to(X.device)
    Wz = (W.unsqueeze(-3) @ Z.unsqueeze(-1)).squeeze(-1)  # (..., n, d)
    return (X @ Wz.unsqueeze(-1)).squeeze(-1)


def output(X, Z, W, v) -> torch.Tensor:
    """Model output ``f(X_i) = v^T X_i^T softmax(X_i W z_i)``, ``(..., n)`` (plain softmax: not for saturated ``W``)."""
    X = as_tensor(X, "X")
    v = as_tensor(v, "v", device=X.device)
    s = torch.softmax(logits(X, Z, W), -1)
    return ((s.unsqueeze(-1) * X).sum(-2) @ v.unsqueeze(-1)).squeeze(-1)


# --------------------------------------------------------------------------- training


@dataclass
class Run:
    """A recorded training run (``S`` records, batch shape ``...``).

    steps : ``(S,)``; W : ``(S, ..., d, d)`` (``K Q^T`` for a ``(K, Q)`` run: chapter 13's ``train_kq``);
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

    This is :func:`mmtoken.attention.train.train_p` on ``p = vec(W)``, unchanged.

    Parameters
    ----------
    problem : :func:`w_problem` (keys ``(..., n, T, d*d)``).
    W0 : ``(..., d, d)`` starts, broadcasting against the problem's batch.
    steps, lr, record_every : as in :func:`mmtoken.attention.train.train_p`.

    Returns
    -------
    Run with ``W (S, ..., d, d)``.
    """
    d = w_dim(problem)
    W0 = as_square(W0, d, "W0")
    h = train.train_p(problem, W0.flatten(-2), steps=steps, lr=lr, method="normalized", record_every=record_every)
    return Run(h.steps, h.p.unflatten(-1, (d, d)), h.probs)


def w_dim(problem: AttentionProblem) -> int:
    """The ``d`` of a ``W`` problem (:func:`w_problem`, keys of dimension ``d*d``); a ``ValueError`` otherwise."""
    if not isinstance(problem, AttentionProblem):
        raise ValueError(f"problem must be an AttentionProblem (tfsvm.w_problem), got {type(problem).__name__}")
    d = math.isqrt(problem.m)
    if d * d != problem.m:
        raise ValueError(f"problem has key dimension {problem.m}, not a square d*d: not a W problem (tfsvm.w_problem)")
    return d


# --------------------------------------------------------------------------- the Frobenius SVM


def keys_selection(X, Z, alpha) -> tuple[np.ndarray, np.ndarray]:
    """One instance checked for an Att-SVM: its keys :func:`w_keys` ``(n, T, d*d)`` and the selection ``alpha (n,)``.

    ``X (n, T, d)`` with ``T >= 2``, ``Z (n, d)``, ``alpha`` one token per input; a ``ValueError`` naming the
    argument otherwise.
    """
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

    Paper A's ATT-SVM (:func:`mmtoken.attention.svm.att_svm`) on the keys :func:`w_keys`.

    Parameters
    ----------
    X : ``(n, T, d)``; Z : ``(n, d)``; alpha : ``(n,)`` selected token of each input.

    Returns
    -------
    SVMSolution with ``x = W (d, d)``.

    Raises
    ------
    ValueError naming the argument; :class:`mmtoken.attention.svm.InfeasibleSVM` when no ``W`` separates.
    """
    K, alpha = keys_selection(X, Z, alpha)
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


# --------------------------------------------------------------------------- instances


def random_instances(count: int, n: int, T: int, d: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``count`` random instances of the public code's experiments, batched.

    Instance ``b`` is the public code's ``data_generator(seed + b)`` (``TFasSVM/local_converge.ipynb``): a
    ``torch.Generator`` seeded with ``seed + b`` draws, in this order and in float32, the head ``v`` (normalised),
    the labels ``Y`` (sign of a Gaussian), the tokens ``X`` and the queries ``Z`` (each row normalised).

    Returns
    -------
    ``X (count, n, T, d)``, ``Z (count, n, d)``, ``v (count, d)``, ``Y (count, n)`` (float64).
    """
    count, n = validate.count(count, "count", minimum=1), validate.count(n, "n", minimum=1)
    T, d = validate.count(T, "T", minimum=2), validate.count(d, "d", minimum=1)
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
    "as_square",
    "logits",
    "output",
    "Run",
    "train_w",
    "w_dim",
    "keys_selection",
    "frobenius_svm",
    "random_instances",
]
