"""Paper B's model: attention with trained embeddings.

``f(X) = softmax(E_X p)^T E_X v`` for a sequence ``X = (x_1..x_T)`` of token ids, embedding table ``E``
(``V x d``), <cls> embedding ``p`` and output vector ``v`` (both ``d``). It depends on ``E`` only through the
per-token numbers ``E p`` (logit) and ``E v`` (value), so a batch computes those once and gathers them per position
(:func:`gather_outputs`). Padded positions get exactly zero attention.

Here: the synthetic experiments' corpus, output vector and initial tables (:func:`corpus`, :func:`head`,
:func:`init`), the closed-form first step on ``E`` at ``p = 0`` (:func:`one_step`) and the ``p`` phase with ``E``
fixed as a paper-A problem (:func:`cls_problem`). Chapter 11's trainers live in
:mod:`mmtoken.chapters.ch11_cls_margin`.
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
    "check_batch",
    "one_step_gradient",
    "one_step",
    "cls_problem",
]

import numpy as np
import torch

from mmtoken.embeddings import synthetic

CORPUS_FIELDS = ("n", "T", "n_pos", "n_neg", "n_neutral", "min_len", "pos_frac", "data_seed")
"""The settings fields :func:`corpus` reads (chapters 10 and 11 keep them under these names)."""


def corpus(s) -> synthetic.SyntheticData:
    """Paper B's synthetic corpus for the settings ``s`` of a chapter: ``s.n`` sequences of padded length ``s.T``.

    ``s`` is any object with the attributes :data:`CORPUS_FIELDS` (a chapter's frozen ``Settings``), passed on to
    :func:`mmtoken.embeddings.synthetic.generate` (``data_seed`` as its ``seed``), which checks their values.
    """
    missing = [f for f in CORPUS_FIELDS if not hasattr(s, f)]
    if missing:
        raise TypeError(f"s must have the corpus fields {CORPUS_FIELDS}; {type(s).__name__} lacks {missing}")
    return synthetic.generate(**{f: getattr(s, f) for f in CORPUS_FIELDS if f != "data_seed"}, seed=s.data_seed)


def head(d: int, *, seed: int) -> torch.Tensor:
    """A fixed output vector ``v``: a seeded random unit vector, float64 ``(d,)``."""
    if d < 1:
        raise ValueError(f"d must be a positive dimension, got {d}")
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    return v / v.norm()


def init(V: int, scales, seeds: int, *, d: int, seed: int) -> torch.Tensor:
    """Initial tables ``E^0`` with i.i.d. ``N(0, sigma0^2/d)`` entries (so ``||E_s^0|| ~ sigma0``): one standard
    Gaussian draw per seed, rescaled to every ``sigma0`` in ``scales``.

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


def _check_tokens(tokens: torch.Tensor, mask: torch.Tensor | None) -> None:
    if tokens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"tokens must be an integer tensor, got {tokens.dtype}")
    if mask is not None:
        if mask.shape != tokens.shape:
            raise ValueError(f"mask shape {tuple(mask.shape)} differs from tokens {tuple(tokens.shape)}")
        if not bool(mask.any(dim=-1).all()):
            raise ValueError("a sequence holds only padding")


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
    occurrences of one token (rows collapsed by :func:`mmtoken.embeddings.review_model.collapse`): its logit gets
    ``log counts`` and its attention is the total over those occurrences, so the output is unchanged.
    The one implementation of the model's forward pass: :func:`forward` and
    :func:`mmtoken.embeddings.review_model.outputs` call it (no argument checks here; they check).
    """
    z = a[tokens]
    if counts is not None:
        z = z + torch.log(counts.to(z.dtype))
    if mask is not None:
        z = z.masked_fill(~mask, float("-inf"))
    s = torch.softmax(z, dim=-1)
    return (s * b[tokens]).sum(-1), s


def attention(E: torch.Tensor, p: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax attention of the <cls> token over each sequence.

    Parameters
    ----------
    E, p : ``(V, d)`` and ``(d,)``, or batched, ``(..., V, d)`` and ``(..., d)`` (leading dims broadcast).
    tokens : int ``(N, T)``.
    mask : bool ``(N, T)``, True at real tokens (None: no padding).

    Returns
    -------
    ``(..., N, T)`` attention weights, rows summing to one, zero at padding.
    """
    if E.ndim < 2 or p.ndim < 1 or p.shape[-1] != E.shape[-1]:
        raise ValueError(f"E must be (..., V, d) and p (..., d), got {tuple(E.shape)} and {tuple(p.shape)}")
    _check_tokens(tokens, mask)
    if E.ndim > 2 or p.ndim > 1:
        z = (E @ p.unsqueeze(-1)).squeeze(-1)[..., tokens]
    else:
        z = (E @ p)[tokens]
    if mask is not None:
        z = z.masked_fill(~mask, float("-inf"))
    return torch.softmax(z, dim=-1)


def forward(
    E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Model output ``f(X_i) = sum_t s_it E_{x_it}^T v`` for each sequence, ``(N,)``."""
    if E.ndim != 2 or p.shape != (E.shape[1],) or v.shape != (E.shape[1],):
        raise ValueError(
            f"E, p and v must be (V, d), (d,), (d,), got {tuple(E.shape)}, {tuple(p.shape)}, {tuple(v.shape)}"
        )
    _check_tokens(tokens, mask)
    return gather_outputs(E @ p, E @ v, tokens, mask)[0]


def check_batch(tokens: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None, V: int) -> torch.Tensor:
    """Validate a labelled batch for a trainer and return its mask (all True if ``mask`` is None).

    ``tokens`` int ``(N, T)`` with ids in ``[0, V)``, ``labels (N,)`` of +1 and -1, ``mask`` bool ``(N, T)`` (True
    at real tokens, at least one per sequence).
    """
    if tokens.ndim != 2:
        raise ValueError(f"tokens must have shape (N, T), got {tuple(tokens.shape)}")
    _check_tokens(tokens, mask)
    if labels.shape != (tokens.shape[0],):
        raise ValueError(f"labels must have shape ({tokens.shape[0]},), got {tuple(labels.shape)}")
    if not bool(((labels == 1) | (labels == -1)).all()):
        raise ValueError("labels must be +1 or -1")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= V):
        raise ValueError(f"token ids must lie in [0, {V})")
    return torch.ones_like(tokens, dtype=torch.bool) if mask is None else mask.bool()


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

    At ``p = 0`` the attention is uniform over the real tokens, so ``f^0(X_i) = sum_s C_is E_s^T v`` and
    ``grad_{E_s} L = -(1/N) sum_i y_i sigma(-y_i f^0(X_i)) C_is v`` with ``C = frequencies(tokens)``.

    Parameters
    ----------
    E : ``(..., V, d)``; v : ``(d,)``; tokens, mask : ``(N, T)``; labels : ``(N,)``.

    Returns
    -------
    ``(..., V, d)``.
    """
    if E.ndim < 2 or v.shape != (E.shape[-1],):
        raise ValueError(f"E must be (..., V, d) and v (d,), got {tuple(E.shape)} and {tuple(v.shape)}")
    mask = check_batch(tokens, labels, mask, E.shape[-2])
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


def cls_problem(
    E: torch.Tensor, v: torch.Tensor, tokens: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None = None
):
    """The ``p`` phase with ``E`` fixed as a paper-A problem.

    Keys ``K_it = E_{x_it}``, scores ``gamma_it = y_i E_{x_it}^T v`` and the padding mask: an
    :class:`mmtoken.attention.model.AttentionProblem` with ``n = N`` inputs, so :func:`mmtoken.attention.train.train_p`,
    :func:`mmtoken.attention.grad.grad_p` and :func:`mmtoken.attention.svm.att_svm` apply unchanged. ``E`` may be
    batched, ``(..., V, d)`` (one problem per table): keys ``(..., N, T, d)``, scores ``(..., N, T)``.
    """
    from mmtoken.attention.model import AttentionProblem

    if E.ndim < 2 or v.shape != (E.shape[-1],):
        raise ValueError(f"E must be (..., V, d) and v (d,), got {tuple(E.shape)} and {tuple(v.shape)}")
    mask = check_batch(tokens, labels, mask, E.shape[-2])
    K = E[..., tokens, :]  # (..., N, T, d)
    gamma = labels.to(E.dtype)[:, None] * (E @ v)[..., tokens]  # (..., N, T)
    return AttentionProblem(K, gamma, mask)
