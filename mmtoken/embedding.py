"""Paper B's model: attention with trained embeddings.

``f(X) = softmax(E_X p)^T E_X v`` for a sequence ``X = (x_1..x_T)`` of token
ids, embedding table ``E`` (``V x d``), <cls> embedding ``p`` and output
vector ``v`` (both ``d``). The model depends on ``E`` only through the two
per-token numbers ``E p`` (attention logit) and ``E v`` (value), so a batch
is evaluated by computing those once and gathering them per position.
Padded positions get exactly zero attention.
"""
from __future__ import annotations

import torch


def _check(E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, tokens: torch.Tensor) -> None:
    if E.ndim != 2:
        raise ValueError(f"E must have shape (V, d), got {tuple(E.shape)}")
    d = E.shape[1]
    if p.shape != (d,) or v.shape != (d,):
        raise ValueError(f"p and v must have shape ({d},), got {tuple(p.shape)} and {tuple(v.shape)}")
    if tokens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"tokens must be an integer tensor, got {tokens.dtype}")


def token_logits_values(E: torch.Tensor, p: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token attention logit ``E p`` and value ``E v``, both ``(V,)``."""
    return E @ p, E @ v


def attention(E: torch.Tensor, p: torch.Tensor, tokens: torch.Tensor,
              mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax attention of the <cls> token over each sequence.

    Parameters
    ----------
    E : ``(V, d)``; p : ``(d,)``.
    tokens : int ``(N, T)``.
    mask : bool ``(N, T)``, True at real tokens (None: no padding).

    Returns
    -------
    ``(N, T)`` attention weights, rows summing to one, zero at padding.
    """
    _check(E, p, p, tokens)
    z = (E @ p)[tokens]
    if mask is not None:
        if mask.shape != tokens.shape:
            raise ValueError(f"mask shape {tuple(mask.shape)} differs from tokens {tuple(tokens.shape)}")
        if not bool(mask.any(dim=-1).all()):
            raise ValueError("a sequence holds only padding")
        z = z.masked_fill(~mask, float("-inf"))
    return torch.softmax(z, dim=-1)


def forward(E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, tokens: torch.Tensor,
            mask: torch.Tensor | None = None) -> torch.Tensor:
    """Model output ``f(X_i) = sum_t s_it E_{x_it}^T v`` for each sequence, ``(N,)``."""
    _check(E, p, v, tokens)
    s = attention(E, p, tokens, mask)
    return (s * (E @ v)[tokens]).sum(dim=-1)


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


def frequencies(tokens: torch.Tensor, V: int, mask: torch.Tensor | None = None,
                dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``C_is = n_s(X_i) / T_i``: relative count of token ``s`` among the real tokens of sequence ``i``, ``(N, V)``."""
    if mask is None:
        mask = torch.ones_like(tokens, dtype=torch.bool)
    w = mask.to(dtype) / mask.sum(-1, keepdim=True).to(dtype)
    C = torch.zeros(tokens.shape[0], V, dtype=dtype, device=tokens.device)
    return C.scatter_add_(1, tokens.long(), w)


def logistic_loss(E: torch.Tensor, p: torch.Tensor, v: torch.Tensor, tokens: torch.Tensor,
                  labels: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``L(E, p) = (1/N) sum_i log(1 + exp(-y_i f(X_i)))`` (plain autograd-friendly form)."""
    f = forward(E, p, v, tokens, mask)
    return torch.nn.functional.softplus(-labels.to(f.dtype) * f).mean()


def one_step_gradient(E: torch.Tensor, v: torch.Tensor, tokens: torch.Tensor, labels: torch.Tensor,
                      mask: torch.Tensor | None = None) -> torch.Tensor:
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
    C = frequencies(tokens, E.shape[-2], mask, E.dtype)         # (N, V)
    y = labels.to(E.dtype)
    f0 = (E @ v) @ C.T                                           # (..., N)
    w = y * torch.sigmoid(-y * f0)                               # (..., N)
    coef = -(w @ C) / tokens.shape[0]                            # (..., V)
    return coef[..., None] * v


def one_step(E0: torch.Tensor, v: torch.Tensor, tokens: torch.Tensor, labels: torch.Tensor, lr: float,
             mask: torch.Tensor | None = None) -> torch.Tensor:
    """``E^1 = E^0 - lr grad_E L(E^0, p=0)`` in closed form, batched over leading dims of ``E0``."""
    return E0 - lr * one_step_gradient(E0, v, tokens, labels, mask)


def one_step_autograd(E0: torch.Tensor, v: torch.Tensor, tokens: torch.Tensor, labels: torch.Tensor, lr: float,
                      mask: torch.Tensor | None = None) -> torch.Tensor:
    """The same step by autograd through :func:`forward` (an independent check; ``E0`` is ``(V, d)``)."""
    with torch.enable_grad():
        E = E0.detach().clone().requires_grad_(True)
        p = torch.zeros_like(v)
        (g,) = torch.autograd.grad(logistic_loss(E, p, v, tokens, labels, mask), E)
    return (E0 - lr * g).detach()


def cls_problem(E: torch.Tensor, v: torch.Tensor, tokens: torch.Tensor, labels: torch.Tensor,
                mask: torch.Tensor | None = None):
    """The ``p`` phase with ``E`` fixed as a paper-A problem.

    Keys ``K_it = E_{x_it}``, scores ``gamma_it = y_i E_{x_it}^T v`` and the
    padding mask: an :class:`mmtoken.model.AttentionProblem` with ``n = N``
    inputs, so :func:`mmtoken.train.train_p`, :func:`mmtoken.grad.grad_p` and
    :func:`mmtoken.svm.att_svm` apply unchanged.
    """
    from .model import AttentionProblem

    if E.ndim != 2 or v.shape != (E.shape[1],):
        raise ValueError(f"E must be (V, d) and v (d,), got {tuple(E.shape)} and {tuple(v.shape)}")
    mask = _check_batch(tokens, labels, mask, E.shape[0])
    K = E[tokens]                                                 # (N, T, d)
    gamma = labels.to(E.dtype)[:, None] * (E @ v)[tokens]         # (N, T)
    return AttentionProblem(K, gamma, mask)


def train_cls(E: torch.Tensor, v: torch.Tensor, tokens: torch.Tensor, labels: torch.Tensor,
              mask: torch.Tensor | None = None, *, steps: int, lr: float, p0: torch.Tensor | None = None,
              rel_lr: float | None = None, stage: int = 50, record_every: int = 1, record_probs: bool = True):
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

    import numpy as np

    from .train import History, train_p

    problem = cls_problem(E, v, tokens, labels, mask)
    p = torch.zeros(E.shape[1], dtype=E.dtype) if p0 is None else p0
    if rel_lr is None:
        with torch.inference_mode():
            return train_p(problem, p, steps=steps, lr=lr, method="normalized", record_every=record_every,
                           record_probs=record_probs)
    if stage < 1 or rel_lr <= 0:
        raise ValueError(f"stage must be >= 1 and rel_lr > 0, got {stage}, {rel_lr}")
    parts: list[History] = []
    done = 0
    with torch.inference_mode():
        while done < steps:
            k = min(stage, steps - done)
            eta = max(lr, rel_lr * float(p.norm()))
            h = train_p(problem, p, steps=k, lr=eta, method="normalized", record_every=math.gcd(stage, record_every),
                        record_probs=record_probs)
            keep = [j for j, st in enumerate(h.steps) if (st + done) % record_every == 0 or st + done == steps]
            if parts:
                keep = [j for j in keep if j > 0]
            h.steps = h.steps + done
            parts.append(History(h.steps[keep], h.p[keep], h.norm[keep], h.loss[keep],
                                 None if h.probs is None else h.probs[keep]))
            p = h.p[-1].to(E.device)
            done += k
    cat = lambda xs: torch.cat(xs) if xs[0] is not None else None  # noqa: E731
    return History(np.concatenate([h.steps for h in parts]), cat([h.p for h in parts]),
                   cat([h.norm for h in parts]), cat([h.loss for h in parts]), cat([h.probs for h in parts]))
