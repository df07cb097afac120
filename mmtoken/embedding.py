"""Paper B's model: attention with trained embeddings.

``f(X) = softmax(E_X p)^T E_X v`` for a sequence ``X = (x_1..x_T)`` of token
ids, embedding table ``E`` (``V x d``), <cls> embedding ``p`` and output
vector ``v`` (both ``d``). The model depends on ``E`` only through the two
per-token numbers ``E p`` (attention logit) and ``E v`` (value), so a batch
is evaluated by computing those once and gathering them per position.
Padded positions get exactly zero attention.

Parameters of the synthetic experiments: the corpus of a chapter's settings
(:func:`corpus`), a seeded unit output vector (:func:`head`) and Gaussian
initial tables at several scales (:func:`init`).

Training: the closed-form first step on ``E`` at ``p = 0`` (:func:`one_step`),
the ``p`` phase with ``E`` fixed as a paper-A problem (:func:`cls_problem`,
:func:`train_cls`, :func:`train_cls_batch` for several tables with their own
step budgets), and joint gradient descent on ``(E, p)`` with ``v`` fixed
(:func:`joint_gradient`, :func:`joint_gd`).
"""

from __future__ import annotations

__all__ = [
    "CORPUS_FIELDS",
    "corpus",
    "head",
    "init",
    "gather_outputs",
    "attention",
    "forward",
    "frequencies",
    "logistic_loss",
    "one_step_gradient",
    "one_step",
    "one_step_autograd",
    "cls_problem",
    "train_cls",
    "train_cls_batch",
    "joint_gradient",
    "JointHistory",
    "joint_gd",
]

from dataclasses import dataclass

import numpy as np
import torch

from . import config, synthetic

CORPUS_FIELDS = ("n", "T", "n_pos", "n_neg", "n_neutral", "min_len", "pos_frac", "data_seed")
"""The settings fields :func:`corpus` reads (chapters 10 and 11 keep them under these names)."""


def corpus(s) -> synthetic.SyntheticData:
    """Paper B's synthetic corpus for the settings ``s`` of a chapter: ``s.n`` sequences of padded length ``s.T``.

    ``s`` is any object with the attributes :data:`CORPUS_FIELDS` (a chapter's frozen ``Settings``):
    ``n_pos, n_neg, n_neutral`` the vocabulary sizes of the three token kinds, ``min_len`` the shortest
    sequence, ``pos_frac`` the fraction of positive sequences and ``data_seed`` the generator's seed
    (see :func:`mmtoken.synthetic.generate`, which checks their values).
    """
    missing = [f for f in CORPUS_FIELDS if not hasattr(s, f)]
    if missing:
        raise TypeError(f"s must have the corpus fields {CORPUS_FIELDS}; {type(s).__name__} lacks {missing}")
    return synthetic.generate(
        s.n,
        s.T,
        n_pos=s.n_pos,
        n_neg=s.n_neg,
        n_neutral=s.n_neutral,
        min_len=s.min_len,
        pos_frac=s.pos_frac,
        seed=s.data_seed,
    )


def head(d: int, *, seed: int) -> torch.Tensor:
    """A fixed output vector ``v``: a seeded random unit vector, float64 ``(d,)``."""
    if d < 1:
        raise ValueError(f"d must be a positive dimension, got {d}")
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    return v / v.norm()


def init(V: int, scales, seeds: int, *, d: int, seed: int) -> torch.Tensor:
    """Initial tables ``E^0`` with i.i.d. ``N(0, sigma0^2/d)`` entries (so ``||E_s^0|| ~ sigma0``).

    One standard Gaussian draw per seed, rescaled to every ``sigma0`` in ``scales``
    (so the tables of one seed differ only by their scale).

    Parameters
    ----------
    V : vocabulary size; scales : ``(S,)`` initialisation scales ``sigma0``;
    seeds : number of draws; d : embedding dimension; seed : seed of the draws.

    Returns
    -------
    float64 ``(seeds, S, V, d)``.
    """
    scales = np.asarray(scales, float)
    if V < 1 or d < 1 or seeds < 1 or scales.ndim != 1 or scales.size == 0:
        raise ValueError(f"need V, d, seeds >= 1 and a 1-d list of scales, got V={V}, d={d}, seeds={seeds}")
    g = torch.Generator().manual_seed(seed)
    Z = torch.randn(seeds, 1, V, d, generator=g, dtype=torch.float64)
    return Z * torch.as_tensor(scales)[None, :, None, None] / np.sqrt(d)


def _check(E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, tokens: torch.Tensor) -> None:
    if E.ndim != 2:
        raise ValueError(f"E must have shape (V, d), got {tuple(E.shape)}")
    d = E.shape[1]
    if p.shape != (d,) or v.shape != (d,):
        raise ValueError(f"p and v must have shape ({d},), got {tuple(p.shape)} and {tuple(v.shape)}")
    if tokens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"tokens must be an integer tensor, got {tokens.dtype}")


def gather_outputs(
    a: torch.Tensor,
    b: torch.Tensor,
    tokens: torch.Tensor,
    mask: torch.Tensor | None = None,
    counts: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gather model: output ``(N,)`` and attention ``(N, T)`` from per-token logits and values.

    ``a = E p`` and ``b = E v`` are ``(V,)``; ``tokens`` int ``(N, T)``; ``mask`` bool ``(N, T)``, True at
    real tokens (None: no padding). With ``counts (N, T)`` entry ``t`` stands for ``counts[:, t]``
    occurrences of one token (rows collapsed by :func:`mmtoken.review_model.collapse`): its logit gets
    ``log counts`` and its attention is the total over those occurrences, so the output is unchanged.
    The one implementation of the model's forward pass: :func:`forward` and
    :func:`mmtoken.review_model.outputs` call it (no argument checks here; they check).
    """
    z = a[tokens]
    if counts is not None:
        z = z + torch.log(counts.to(z.dtype))
    if mask is not None:
        z = z.masked_fill(~mask, float("-inf"))
    s = torch.softmax(z, dim=-1)
    return (s * b[tokens]).sum(-1), s


def _check_mask(mask: torch.Tensor | None, tokens: torch.Tensor) -> None:
    if mask is not None:
        if mask.shape != tokens.shape:
            raise ValueError(f"mask shape {tuple(mask.shape)} differs from tokens {tuple(tokens.shape)}")
        if not bool(mask.any(dim=-1).all()):
            raise ValueError("a sequence holds only padding")


def attention(E: torch.Tensor, p: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax attention of the <cls> token over each sequence.

    Parameters
    ----------
    E : ``(V, d)``; p : ``(d,)``; or batched, ``E (..., V, d)`` and ``p (..., d)``
        (leading dims broadcast, e.g. recorded iterates x initialisation scales).
    tokens : int ``(N, T)``.
    mask : bool ``(N, T)``, True at real tokens (None: no padding).

    Returns
    -------
    ``(..., N, T)`` attention weights, rows summing to one, zero at padding.
    """
    if E.ndim > 2 or p.ndim > 1:
        if E.ndim < 2 or p.shape[-1] != E.shape[-1]:
            raise ValueError(f"E must be (..., V, d) and p (..., d), got {tuple(E.shape)} and {tuple(p.shape)}")
        if tokens.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"tokens must be an integer tensor, got {tokens.dtype}")
        z = (E @ p.unsqueeze(-1)).squeeze(-1)[..., tokens]
    else:
        _check(E, p, p, tokens)
        z = (E @ p)[tokens]
    _check_mask(mask, tokens)
    if mask is not None:
        z = z.masked_fill(~mask, float("-inf"))
    return torch.softmax(z, dim=-1)


def forward(
    E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Model output ``f(X_i) = sum_t s_it E_{x_it}^T v`` for each sequence, ``(N,)``."""
    _check(E, p, v, tokens)
    _check_mask(mask, tokens)
    return gather_outputs(E @ p, E @ v, tokens, mask)[0]


# ---------------------------------------------------------------------------
# Training protocol of paper B: one gradient step on E at p = 0, then the p phase.


def _check_batch(tokens: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None, V: int) -> torch.Tensor:
    """Validate ``tokens (N, T)``, ``labels (N,)``, ``mask``; return the mask (all True if None)."""
    if tokens.ndim != 2:
        raise ValueError(f"tokens must have shape (N, T), got {tuple(tokens.shape)}")
    if tokens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"tokens must be an integer tensor, got {tokens.dtype}")
    if labels.shape != (tokens.shape[0],):
        raise ValueError(f"labels must have shape ({tokens.shape[0]},), got {tuple(labels.shape)}")
    if not bool(((labels == 1) | (labels == -1)).all()):
        raise ValueError("labels must be +1 or -1")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= V):
        raise ValueError(f"token ids must lie in [0, {V})")
    if mask is None:
        return torch.ones_like(tokens, dtype=torch.bool)
    if mask.shape != tokens.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} differs from tokens {tuple(tokens.shape)}")
    if not bool(mask.any(dim=-1).all()):
        raise ValueError("a sequence holds only padding")
    return mask.bool()


def frequencies(
    tokens: torch.Tensor, V: int, mask: torch.Tensor | None = None, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """``C_is = n_s(X_i) / T_i``: relative count of token ``s`` among the real tokens of sequence ``i``, ``(N, V)``."""
    if mask is None:
        mask = torch.ones_like(tokens, dtype=torch.bool)
    w = mask.to(dtype) / mask.sum(-1, keepdim=True).to(dtype)
    C = torch.zeros(tokens.shape[0], V, dtype=dtype, device=tokens.device)
    return C.scatter_add_(1, tokens.long(), w)


def logistic_loss(
    E: torch.Tensor,
    p: torch.Tensor,
    v: torch.Tensor,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``L(E, p) = (1/N) sum_i log(1 + exp(-y_i f(X_i)))`` (plain autograd-friendly form)."""
    f = forward(E, p, v, tokens, mask)
    return torch.nn.functional.softplus(-labels.to(f.dtype) * f).mean()


def one_step_gradient(
    E: torch.Tensor, v: torch.Tensor, tokens: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Closed form of ``grad_E L`` at ``p = 0`` (logistic loss), batched over leading dims of ``E``.

    At ``p = 0`` the attention is uniform over the real tokens, so
    ``f^0(X_i) = sum_s C_is E_s^T v`` and
    ``grad_{E_s} L = -(1/N) sum_i y_i sigma(-y_i f^0(X_i)) C_is v``
    with ``C = frequencies(tokens)``.

    Parameters
    ----------
    E : ``(..., V, d)``; v : ``(d,)``; tokens, mask : ``(N, T)``; labels : ``(N,)``.

    Returns
    -------
    ``(..., V, d)``.
    """
    if E.ndim < 2 or v.shape != (E.shape[-1],):
        raise ValueError(f"E must be (..., V, d) and v (d,), got {tuple(E.shape)} and {tuple(v.shape)}")
    mask = _check_batch(tokens, labels, mask, E.shape[-2])
    C = frequencies(tokens, E.shape[-2], mask, E.dtype)  # (N, V)
    y = labels.to(E.dtype)
    f0 = (E @ v) @ C.T  # (..., N)
    w = y * torch.sigmoid(-y * f0)  # (..., N)
    coef = -(w @ C) / tokens.shape[0]  # (..., V)
    return coef[..., None] * v


def one_step(
    E0: torch.Tensor,
    v: torch.Tensor,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    lr: float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``E^1 = E^0 - lr grad_E L(E^0, p=0)`` in closed form, batched over leading dims of ``E0``."""
    return E0 - lr * one_step_gradient(E0, v, tokens, labels, mask)


def one_step_autograd(
    E0: torch.Tensor,
    v: torch.Tensor,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    lr: float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The same step by autograd through :func:`forward` (an independent check; ``E0`` is ``(V, d)``)."""
    with torch.enable_grad():
        E = E0.detach().clone().requires_grad_(True)
        p = torch.zeros_like(v)
        (g,) = torch.autograd.grad(logistic_loss(E, p, v, tokens, labels, mask), E)
    return (E0 - lr * g).detach()


def cls_problem(
    E: torch.Tensor, v: torch.Tensor, tokens: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None = None
):
    """The ``p`` phase with ``E`` fixed as a paper-A problem.

    Keys ``K_it = E_{x_it}``, scores ``gamma_it = y_i E_{x_it}^T v`` and the
    padding mask: an :class:`mmtoken.model.AttentionProblem` with ``n = N``
    inputs, so :func:`mmtoken.train.train_p`, :func:`mmtoken.grad.grad_p` and
    :func:`mmtoken.svm.att_svm` apply unchanged. ``E`` may carry leading batch
    dimensions ``(..., V, d)`` (several tables, one problem each); the keys are
    then ``(..., N, T, d)`` and the scores ``(..., N, T)``.
    """
    from .model import AttentionProblem

    if E.ndim < 2 or v.shape != (E.shape[-1],):
        raise ValueError(f"E must be (..., V, d) and v (d,), got {tuple(E.shape)} and {tuple(v.shape)}")
    mask = _check_batch(tokens, labels, mask, E.shape[-2])
    K = E[..., tokens, :]  # (..., N, T, d)
    gamma = labels.to(E.dtype)[:, None] * (E @ v)[..., tokens]  # (..., N, T)
    return AttentionProblem(K, gamma, mask)


def train_cls(
    E: torch.Tensor,
    v: torch.Tensor,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    steps: int,
    lr: float,
    p0: torch.Tensor | None = None,
    rel_lr: float | None = None,
    stage: int = 50,
    record_every: int = 1,
    record_probs: bool = True,
):
    """Normalized GD on the <cls> embedding ``p`` with ``E`` fixed (saturation-safe gradients).

    ``p <- p - eta_k g/||g||`` with ``eta_k = lr`` (fixed step), or, when
    ``rel_lr`` is given, ``eta_k = max(lr, rel_lr ||p||)`` refreshed every
    ``stage`` steps: a step of fixed *angle* once ``||p||`` is large, so the
    direction of the gradient flow is followed to large norms in few steps
    (a time change of the flow; the iterates still move along ``-grad L``).

    Returns the :class:`mmtoken.train.History` of :func:`mmtoken.train.train_p`
    (steps counted over all stages).
    """
    import math

    from .train import History, train_p

    problem = cls_problem(E, v, tokens, labels, mask)
    p = torch.zeros(E.shape[1], dtype=E.dtype) if p0 is None else p0
    if rel_lr is None:
        with torch.inference_mode():
            return train_p(
                problem,
                p,
                steps=steps,
                lr=lr,
                method="normalized",
                record_every=record_every,
                record_probs=record_probs,
            )
    if stage < 1 or rel_lr <= 0:
        raise ValueError(f"stage must be >= 1 and rel_lr > 0, got {stage}, {rel_lr}")
    parts: list[History] = []
    done = 0
    with torch.inference_mode():
        while done < steps:
            k = min(stage, steps - done)
            eta = max(lr, rel_lr * float(p.norm()))
            h = train_p(
                problem,
                p,
                steps=k,
                lr=eta,
                method="normalized",
                record_every=math.gcd(stage, record_every),
                record_probs=record_probs,
            )
            keep = [j for j, st in enumerate(h.steps) if (st + done) % record_every == 0 or st + done == steps]
            if parts:
                keep = [j for j in keep if j > 0]
            h.steps = h.steps + done
            parts.append(
                History(
                    h.steps[keep], h.p[keep], h.norm[keep], h.loss[keep], None if h.probs is None else h.probs[keep]
                )
            )
            p = h.p[-1].to(E.device)
            done += k
    cat = lambda xs: torch.cat(xs) if xs[0] is not None else None  # noqa: E731
    return History(
        np.concatenate([h.steps for h in parts]),
        cat([h.p for h in parts]),
        cat([h.norm for h in parts]),
        cat([h.loss for h in parts]),
        cat([h.probs for h in parts]),
    )


def train_cls_batch(
    E: torch.Tensor,
    v: torch.Tensor,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    budgets,
    lr: float,
    record_every: int,
    chunk: int = 20,
    record_probs: bool = True,
) -> list:
    """Normalized GD on ``p`` from ``p = 0`` for several tables at once, each with its own step budget.

    ``p <- p - lr g/||g||`` with a fixed step ``lr`` (saturation-safe
    gradients, the compiled kernel of :func:`mmtoken.train.train_p`). Table
    ``j`` runs ``budgets[j]`` steps. All tables still running share one call
    of :func:`~mmtoken.train.train_p`; a table drops out of the batch when its
    budget is spent, so no table runs past its budget. The calls are cut into
    chunks of ``chunk`` records, which bounds the memory of the history.

    Parameters
    ----------
    E : ``(S, V, d)`` embedding tables (``E`` fixed during the run).
    v : ``(d,)``; tokens, mask : ``(N, T)``; labels : ``(N,)``.
    budgets : ``(S,)`` numbers of steps, each a positive multiple of ``record_every``.
    lr : the fixed step length.
    record_every : thinning of the histories.

    Returns
    -------
    list of ``S`` :class:`mmtoken.train.History`, one per table, recorded at
    every multiple of ``record_every`` up to its budget (step 0 included).
    """
    from .train import History, train_p

    if E.ndim != 3:
        raise ValueError(f"E must have shape (S, V, d), got {tuple(E.shape)}")
    budgets = np.asarray(budgets, dtype=np.int64)
    if budgets.shape != (E.shape[0],):
        raise ValueError(f"budgets must have shape ({E.shape[0]},), got {budgets.shape}")
    if record_every < 1 or chunk < 1:
        raise ValueError(f"record_every and chunk must be >= 1, got {record_every}, {chunk}")
    if np.any(budgets < 1) or np.any(budgets % record_every):
        raise ValueError(f"budgets must be positive multiples of record_every={record_every}, got {budgets.tolist()}")
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr}")
    S, d = E.shape[0], E.shape[-1]
    p = torch.zeros(S, d, dtype=E.dtype)
    parts: list[list[History]] = [[] for _ in range(S)]
    done = 0
    with torch.inference_mode(), config.single_thread():
        while done < budgets.max():
            active = np.flatnonzero(budgets > done)
            stop = min(done + chunk * record_every, int(budgets[active].min()))
            problem = cls_problem(E[active], v, tokens, labels, mask)
            h = train_p(
                problem,
                p[active],
                steps=stop - done,
                lr=lr,
                method="normalized",
                record_every=record_every,
                record_probs=record_probs,
            )
            first = 0 if done == 0 else 1  # the start of a chunk is the end of the last
            for a, j in enumerate(active):
                parts[j].append(
                    History(
                        h.steps[first:] + done,
                        h.p[first:, a],
                        h.norm[first:, a],
                        h.loss[first:, a],
                        None if h.probs is None else h.probs[first:, a],
                    )
                )
            p[active] = h.p[-1].to(p.dtype)
            done = stop
    cat = lambda xs: torch.cat(xs) if xs[0] is not None else None  # noqa: E731
    return [
        History(
            np.concatenate([h.steps for h in hs]),
            cat([h.p for h in hs]),
            cat([h.norm for h in hs]),
            cat([h.loss for h in hs]),
            cat([h.probs for h in hs]),
        )
        for hs in parts
    ]


# ---------------------------------------------------------------------------
# Joint training of (E, p) with v fixed.


def joint_gradient(
    E: torch.Tensor,
    p: torch.Tensor,
    v: torch.Tensor,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(grad_E L, grad_p L, L)`` of the logistic loss, saturation-safe, batched over leading dims.

    With ``u_i = y_i f(X_i)``, ``gamma_it = y_i E_{x_it}^T v`` and the attention ``s_it``,

    ``grad_p L = (1/N) sum_it a_it E_{x_it}``,
    ``grad_{E_s} L = (1/N) sum_{it: x_it = s} (a_it p + b_it v)``,

    with ``a_it = l'(u_i) s_it (gamma_it - u_i)`` and ``b_it = l'(u_i) y_i s_it``.
    As in :mod:`mmtoken.grad`, logits are taken relative to the most attended
    token, ``log s_it`` is formed from them, and ``u_i - gamma_itop`` is summed
    from the small probabilities; so every weight keeps its relative accuracy
    when the softmax saturates (``1 - s_top`` is never formed). Token weights
    are gathered per vocabulary entry, so a step costs ``O(V d + N T)``.

    Parameters
    ----------
    E : ``(..., V, d)``; p : ``(..., d)`` (broadcast against ``E``'s batch); v : ``(d,)``.
    tokens, mask : ``(N, T)``; labels : ``(N,)``.

    Returns
    -------
    ``grad_E (..., V, d)``, ``grad_p (..., d)``, ``L (...)``.
    """
    import torch.nn.functional as F

    if E.ndim < 2 or v.shape != (E.shape[-1],) or p.shape[-1] != E.shape[-1]:
        raise ValueError(
            f"E must be (..., V, d), p (..., d) and v (d,), got {tuple(E.shape)}, {tuple(p.shape)}, {tuple(v.shape)}"
        )
    mask = _check_batch(tokens, labels, mask, E.shape[-2])
    batch = torch.Size(np.broadcast_shapes(tuple(E.shape[:-2]), tuple(p.shape[:-1])))  # not torch's slow reference path
    E = E.expand(*batch, *E.shape[-2:])
    p = p.expand(*batch, p.shape[-1])
    y = labels.to(E.dtype)
    N, T = tokens.shape
    z = (E @ p.unsqueeze(-1)).squeeze(-1)[..., tokens].masked_fill(~mask, float("-inf"))  # (..., N, T)
    top = z.argmax(-1, keepdim=True)
    delta = z - z.gather(-1, top)  # 0 at the top token, exactly
    log_s = delta - torch.logsumexp(delta, -1, keepdim=True)
    gamma = y[:, None] * (E @ v)[..., tokens]
    dgamma = (gamma - gamma.gather(-1, top)).masked_fill(~mask, 0.0)
    s = log_s.exp()
    u_minus_top = (s * dgamma).sum(-1)  # from the small probabilities
    u = gamma.gather(-1, top).squeeze(-1) + u_minus_top
    w = torch.exp(-F.softplus(u).unsqueeze(-1) + log_s)  # |l'(u_i)| s_it
    a = -w * (dgamma - u_minus_top.unsqueeze(-1))  # l'(u) s (gamma - u); accurate at the top too
    b = -w * y[:, None]
    index = tokens.reshape(-1).expand(*batch, N * T)
    zeros = torch.zeros(*batch, E.shape[-2], dtype=E.dtype, device=E.device)
    ca = zeros.scatter_add(-1, index, a.reshape(*batch, N * T)) / N  # (..., V)
    cb = zeros.scatter_add(-1, index, b.reshape(*batch, N * T)) / N
    grad_E = ca.unsqueeze(-1) * p.unsqueeze(-2) + cb.unsqueeze(-1) * v
    grad_p = (ca.unsqueeze(-2) @ E).squeeze(-2)
    return grad_E, grad_p, F.softplus(-u).mean(-1)


@dataclass
class JointHistory:
    """What :func:`joint_gd` recorded (``R`` records, batch shape ``...``).

    steps : ``(R,)``; E : ``(R, ..., V, d)``; p : ``(R, ..., d)``; loss : ``(R, ...)``.
    """

    steps: np.ndarray
    E: torch.Tensor
    p: torch.Tensor
    loss: torch.Tensor


def joint_gd(
    E0: torch.Tensor,
    v: torch.Tensor,
    tokens: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    steps: int,
    lr: float,
    p0: torch.Tensor | None = None,
    record_every: int = 1,
) -> JointHistory:
    """Plain gradient descent on ``(E, p)`` together, ``v`` fixed, from ``(E0, p0)`` (``p0 = 0`` by default).

    Both move with the same step: ``E <- E - lr grad_E L``, ``p <- p - lr grad_p L``
    (:func:`joint_gradient`). From ``p0 = 0`` the first ``E`` update is the
    one step of :func:`one_step` (the ``p`` part of ``grad_E`` vanishes at
    ``p = 0``). Batched over leading dims of ``E0`` (e.g. initialisation scales).

    Returns
    -------
    JointHistory recorded every ``record_every`` steps and at the end.
    """
    if steps < 0 or record_every < 1 or not lr > 0:
        raise ValueError(f"need steps >= 0, record_every >= 1 and lr > 0, got {steps}, {record_every}, {lr}")
    E = E0.clone()
    p = torch.zeros(*E0.shape[:-2], E0.shape[-1], dtype=E0.dtype, device=E0.device) if p0 is None else p0.clone()
    record = set(range(0, steps + 1, record_every)) | {steps}
    rows: dict[str, list] = {"step": [], "E": [], "p": [], "loss": []}
    with torch.inference_mode(), config.single_thread():
        for k in range(steps + 1):
            gE, gp, L = joint_gradient(E, p, v, tokens, labels, mask)
            if k in record:
                rows["step"].append(k)
                rows["E"].append(E.clone())
                rows["p"].append(p.clone())
                rows["loss"].append(L)
            if k == steps:
                break
            E = E - lr * gE
            p = p - lr * gp
    return JointHistory(
        np.array(rows["step"]), torch.stack(rows["E"]), torch.stack(rows["p"]), torch.stack(rows["loss"])
    )
