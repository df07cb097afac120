"""Phase two of paper B on real data: ``p`` trained with ``E`` fixed, and the selection it makes.

With ``E`` fixed the ``p`` problem is paper A's with keys ``E_s`` (:func:`mmtoken.embeddings.embedding.cls_problem`),
but the key tensor ``(N, T, d)`` of a corpus is too large to form: the gradient is taken on the logits ``a = E p``
(:func:`logit_gradient`) and mapped back, ``grad_p L = E^T grad_a L``, for normalized GD (:func:`phase_two`).
"""

from __future__ import annotations

__all__ = ["LOGISTIC", "logit_gradient", "PhaseTwo", "phase_two", "top_tokens", "selection_conflicts"]

import math
from dataclasses import dataclass

import numpy as np
import torch

from mmtoken.attention.losses import get_loss
from mmtoken.datasets.tokenize import PAD_ID
from mmtoken.embeddings.review_model import Chunks, collapse

LOGISTIC = get_loss("logistic")


def logit_gradient(a: torch.Tensor, b: torch.Tensor, data: Chunks) -> tuple[torch.Tensor, float, float, float]:
    """Saturation-safe gradient of the logistic loss with respect to the logits ``a (V,)``, values ``b (V,)`` fixed.

    Logits ``z_it = a_{x_it}``, scores ``gamma_it = y_i b_{x_it}``. As in :mod:`mmtoken.attention.grad`, the
    quantities that saturation would wipe out come from the small probabilities: logits relative to each review's
    top token, ``log s_it`` by log-sum-exp, ``u_i - gamma_itop = sum_t s_it (gamma_it - gamma_itop)``; then
    ``dL/da_s = (1/N) sum_i l'(u_i) sum_{t: x_it = s} s_it (gamma_it - u_i)``, weights in log space, rescaled by
    their largest value per chunk. Not :func:`mmtoken.attention.grad.grad_p` (a test checks the two agree): its keys
    ``E_{x_it}`` would be ``N T d`` floats (IMDB: ~10^9); here the weights are summed per token (``index_add``).

    Returns
    -------
    g : ``(V,)`` the gradient divided by ``exp(log_scale)``.
    log_scale : float.
    loss : mean logistic loss.
    unsaturated : largest ``1 - max_t s_it`` over the reviews (how far from one-token attention).
    """
    parts, loss, unsat = [], 0.0, 0.0
    for tok, cnt, y in data:
        mask = tok != PAD_ID
        z = (a[tok] + torch.log(cnt.to(a.dtype))).masked_fill(~mask, float("-inf"))  # collapsed rows
        top = z.argmax(-1, keepdim=True)
        log_s = torch.log_softmax(z - z.gather(-1, top), dim=-1)  # exact 0 logit at the top token
        gamma = y.to(a.dtype)[:, None] * b[tok]
        dgamma = (gamma - gamma.gather(-1, top)).masked_fill(~mask, 0.0)  # gamma_t - gamma_top
        u_minus_top = (log_s.exp() * dgamma).sum(-1)
        u = gamma.gather(-1, top).squeeze(-1) + u_minus_top
        loss += float(LOGISTIC.value(u).sum())
        gap = dgamma - u_minus_top[:, None]  # gamma_t - u, accurate
        log_w = LOGISTIC.log_neg_deriv(u)[:, None] + log_s + torch.log(gap.abs())
        M = float(log_w.max())
        if math.isfinite(M):
            g = torch.zeros_like(a).index_add_(
                0, tok.reshape(-1), (-torch.sign(gap) * torch.exp(log_w - M)).reshape(-1)
            )
            parts.append((M, g))  # l' < 0: the sign flips
        unsat = max(unsat, float(-torch.expm1(log_s.max(-1).values).max()))
    if not parts:
        return torch.zeros_like(a), -math.inf, loss / data.n, unsat
    M = max(m for m, _ in parts)
    g = sum(math.exp(m - M) * gi for m, gi in parts)
    return g, M - math.log(data.n), loss / data.n, unsat


@dataclass
class PhaseTwo:
    """Normalized GD on ``p`` with ``E`` fixed: the end point, lists over the recorded steps (``steps``, ``loss``,
    ``p_norm``, ...), the number of ``accepted`` steps and why it stopped (``stop``)."""

    p: torch.Tensor
    steps: list[int]
    loss: list[float]
    p_norm: list[float]
    step_size: list[float]
    grad_log_norm: list[float]
    unsaturated: list[float]
    accepted: int
    stop: str


def phase_two(
    E: torch.Tensor,
    v: torch.Tensor,
    data: Chunks,
    *,
    steps: int,
    lr: float = 0.05,
    grow: float = 1.2,
    tol: float = 1e-9,
    window: int = 20,
    record_every: int = 5,
) -> PhaseTwo:
    """Phase two of the theory: ``E`` fixed, ``p`` from 0 by normalized GD with a monotone step.

    ``p <- p - eta g/||g||`` with ``g = E^T dL/da`` (:func:`logit_gradient`, in the dtype of ``E``). ``eta`` starts
    at ``lr``, grows by ``grow`` after a step that lowers the loss and halves (the step rejected) after one that does
    not, so it grows with ``||p||`` as chapter 11's relative steps do. Stops after ``steps`` gradient evaluations, or
    once the loss has fallen by less than ``tol`` (relative) over the last ``window`` (``stop = "converged"``).
    """
    if steps < 1 or lr <= 0 or grow < 1 or tol < 0 or window < 1:
        raise ValueError(
            f"need steps >= 1, lr > 0, grow >= 1, tol >= 0, window >= 1; got {steps}, {lr}, {grow}, {tol}, {window}"
        )
    b = E @ v
    p = torch.zeros(E.shape[1], dtype=E.dtype, device=E.device)

    def at(q):
        g, log_scale, loss, unsat = logit_gradient(E @ q, b, data)
        gp = E.T @ g
        norm = float(gp.norm())
        return gp / norm if norm > 0 else gp, log_scale + math.log(norm) if norm > 0 else -math.inf, loss, unsat

    direction, log_norm, loss, unsat = at(p)
    eta, accepted, stop = lr, 0, "budget"
    past = [loss]
    rec = {
        "steps": [0],
        "loss": [loss],
        "p_norm": [0.0],
        "step_size": [eta],
        "grad_log_norm": [log_norm],
        "unsaturated": [unsat],
    }
    for k in range(1, steps + 1):
        q = p - eta * direction
        d_q, ln_q, loss_q, unsat_q = at(q)
        if loss_q < loss:
            p, direction, log_norm, loss, unsat = q, d_q, ln_q, loss_q, unsat_q
            eta *= grow
            accepted += 1
        else:
            eta /= 2
        if k % record_every == 0 or k == steps:
            for key, val in zip(rec, (k, loss, float(p.norm()), eta, log_norm, unsat)):
                rec[key].append(val)
        past.append(loss)
        if (len(past) > window and past[-window - 1] - loss <= tol * abs(loss)) or not math.isfinite(log_norm):
            stop = "converged"
            if rec["steps"][-1] != k:  # the stopping step, recorded in every history (not only in ``steps``)
                for key, val in zip(rec, (k, loss, float(p.norm()), eta, log_norm, unsat)):
                    rec[key].append(val)
            break
    return PhaseTwo(p, **rec, accepted=accepted, stop=stop)


@torch.no_grad()
def top_tokens(scores: torch.Tensor, data: Chunks, labels: bool = False) -> np.ndarray:
    """Per row of ``data`` (original order, ``(N,)``), the distinct token with the largest ``scores (V,)``; with
    ``labels`` that of ``y_i scores[s]`` (for ``E v``: each review's optimal token; for ``E p``: the most attended)."""
    out = np.empty(data.n, dtype=np.int64)
    for (tok, _, y), rows in zip(data, data.rows):
        z = scores[tok] * (y.to(scores.dtype)[:, None] if labels else 1.0)
        z = z.masked_fill(tok == PAD_ID, float("-inf"))
        out[rows] = tok.gather(-1, z.argmax(-1, keepdim=True)).squeeze(-1).cpu().numpy()
    return out


def selection_conflicts(tokens: np.ndarray, chosen: np.ndarray, V: int) -> dict:
    """Whether one ``p`` can make every review attend to its ``chosen`` token, when the logits are free.

    With ``d >= |V|`` and independent keys every ``a = E p`` is reachable, so the selection (``tokens (N, T)``,
    ``chosen (N,)``) is feasible exactly when the constraints ``a_{chosen_i} > a_t`` (``t`` in review ``i``) have no
    cycle: a constraint lies on one iff both ends share a strongly connected component of their graph.

    Returns
    -------
    dict: ``constraints`` (distinct edges), ``feasible``, ``two_cycles`` (pairs each chosen over the other),
    ``conflicted`` (share of reviews with a constraint on a cycle), ``largest`` (tokens in the largest component),
    ``example`` (the two-cycle with the most reviews on its weaker side) and its review counts ``example_counts``.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    tokens, chosen = np.asarray(tokens), np.asarray(chosen)
    if tokens.ndim != 2 or chosen.shape != (tokens.shape[0],):
        raise ValueError(f"tokens must be (N, T) and chosen (N,), got {tokens.shape} and {chosen.shape}")
    tokens = collapse(tokens)[0]  # distinct tokens per review: one constraint per (review, token)
    src = np.repeat(chosen, tokens.shape[1])
    dst = tokens.ravel()
    row = np.repeat(np.arange(tokens.shape[0]), tokens.shape[1])
    keep = (dst != PAD_ID) & (dst != src)
    src, dst, row = src[keep], dst[keep], row[keep]
    edges, n_reviews = np.unique(src * V + dst, return_counts=True)  # each edge and the reviews that impose it
    e_src, e_dst = edges // V, edges % V
    graph = coo_matrix((np.ones(edges.size), (e_src, e_dst)), shape=(V, V)).tocsr()
    _, comp = connected_components(graph, directed=True, connection="strong")
    on_cycle = comp[src] == comp[dst]
    conflicted = np.zeros(tokens.shape[0], dtype=bool)
    conflicted[row[on_cycle]] = True
    reverse = e_dst * V + e_src
    pos = np.searchsorted(edges, reverse)
    pos = np.minimum(pos, edges.size - 1)
    two = (edges[pos] == reverse) & (e_src < e_dst)
    example, counts = None, None
    if two.any():
        weaker = np.minimum(n_reviews, n_reviews[pos])
        k = int(np.flatnonzero(two)[np.argmax(weaker[two])])
        example, counts = (int(e_src[k]), int(e_dst[k])), (int(n_reviews[k]), int(n_reviews[pos[k]]))
    sizes = np.bincount(comp)
    return {
        "constraints": int(edges.size),
        "feasible": not bool(on_cycle.any()),
        "two_cycles": int(two.sum()),
        "conflicted": float(conflicted.mean()),
        "largest": int(sizes.max()),
        "example": example,
        "example_counts": counts,
    }
