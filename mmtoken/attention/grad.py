"""Saturation-safe gradients of the attention loss (the numerical trap of the book).

Once the softmax saturates, ``1 - s_top`` and ``gamma_top - f`` are differences of nearly equal numbers; computed
naively they lose every digit and the gradient direction is noise. Here every such difference is formed from the
*small* probabilities themselves:

* logits are taken relative to the most attended token ``top``, ``delta_t = <k_t - k_top, p>`` (0 at ``top``);
* ``log s_t = delta_t - logsumexp(delta)`` is accurate in relative terms even far below the float64 range of
  ``1 - s_top``;
* ``u - gamma_top = sum_{t != top} s_t (gamma_t - gamma_top)``;
* the loss gradient ``grad L = (1/n) sum_i l'(u_i) sum_{t != top} s_it (gamma_it - u_i)(k_it - k_itop)`` has its
  weights assembled in log space and rescaled by their maximum before summing, so the *direction* survives even
  when every weight underflows; the scale is returned separately as ``log ||grad L||``.
"""

from __future__ import annotations

__all__ = [
    "Saturation",
    "saturation",
    "StableGrad",
    "grad_p",
    "loss_value",
    "loss_parts",
    "log_excess",
    "log_expm1",
    "autograd_grad",
    "unit_and_log_norm",
    "safe_norm",
]

import math
from dataclasses import dataclass

import torch

from mmtoken import validate
from mmtoken.attention.losses import LOSSES, Loss, get_loss
from mmtoken.attention.model import AttentionProblem, as_tensor


def _problem_and_point(problem, p) -> torch.Tensor:
    """Check the arguments of the public functions; return ``p`` as a tensor on the problem's device."""
    if not isinstance(problem, AttentionProblem):
        raise ValueError(f"problem must be an AttentionProblem, got {type(problem).__name__}")
    if not isinstance(p, torch.Tensor) or p.dtype != problem.K.dtype or p.device != problem.K.device:
        p = as_tensor(p, "p", dtype=problem.K.dtype, device=problem.K.device)
    if p.ndim < 1:
        raise ValueError("p must have shape (..., m), got a scalar")
    return p


@dataclass
class Saturation:
    """Per-input quantities of the softmax, all accurate under saturation.

    Shapes: ``(..., n, T)`` for ``log_s``, ``dgamma``; ``(..., n, T, m)`` for ``dK``;
    ``(..., n)`` for ``top``, ``gamma_top``, ``u_minus_top``.
    """

    top: torch.Tensor  # index of the most attended token
    log_s: torch.Tensor  # log softmax probabilities
    dK: torch.Tensor  # k_t - k_top
    dgamma: torch.Tensor  # gamma_t - gamma_top
    gamma_top: torch.Tensor
    u_minus_top: torch.Tensor  # u - gamma_top, from the small probabilities

    @property
    def u(self) -> torch.Tensor:
        """Margins ``u_i = Y_i f(X_i)``."""
        return self.gamma_top + self.u_minus_top

    @property
    def probs(self) -> torch.Tensor:
        return self.log_s.exp()


def saturation(problem: AttentionProblem, p: torch.Tensor) -> Saturation:
    """Softmax quantities of ``problem`` at ``p (..., m)``, formed without cancellation."""
    p = _problem_and_point(problem, p)
    K, gamma, mask = problem.K, problem.gamma, problem.mask
    if p.shape[-1] != K.shape[-1]:
        raise ValueError(f"p has dimension {p.shape[-1]} but the keys have {K.shape[-1]}")
    try:
        validate.batch_shape(K.shape[:-3], gamma.shape[:-2], p.shape[:-1], () if mask is None else mask.shape[:-2])
    except ValueError:
        raise ValueError(
            f"p {tuple(p.shape)} does not broadcast against the problem's batch "
            f"(K {tuple(K.shape)}, gamma {tuple(gamma.shape)})"
        ) from None
    z = (K @ p.unsqueeze(-2).unsqueeze(-1)).squeeze(-1)
    if mask is not None:
        z = z.masked_fill(~mask, float("-inf"))
    top = z.argmax(-1)
    batch = torch.Size(validate.batch_shape(K.shape[:-1], z.shape))  # not torch's: its sympy import is slow
    K_b = K.expand(*batch, K.shape[-1])
    k_top = torch.gather(K_b, -2, top[..., None, None].expand(*top.shape, 1, K.shape[-1]))
    dK = K_b - k_top
    delta = (dK @ p.unsqueeze(-2).unsqueeze(-1)).squeeze(-1)
    if mask is not None:
        delta = delta.masked_fill(~mask, float("-inf"))
    log_s = delta - torch.logsumexp(delta, -1, keepdim=True)
    gamma_b = gamma.expand(batch)
    gamma_top = torch.gather(gamma_b, -1, top[..., None]).squeeze(-1)
    dgamma = gamma_b - gamma_top[..., None]
    if mask is not None:
        dgamma = dgamma.masked_fill(~mask, 0.0)
    u_minus_top = (log_s.exp() * dgamma).sum(-1)
    return Saturation(top, log_s, dK, dgamma, gamma_top, u_minus_top)


@dataclass
class StableGrad:
    """A gradient stored as its unit direction ``grad / ||grad||`` ``(..., m)`` and ``log_norm = log ||grad||``
    ``(...)`` (zero direction and ``-inf`` where the gradient is exactly zero)."""

    direction: torch.Tensor
    log_norm: torch.Tensor

    def value(self) -> torch.Tensor:
        """The gradient itself (underflows to zero gracefully)."""
        return self.direction * self.log_norm.exp().unsqueeze(-1)


SAFE_RANGE = 2.0**-500, 2.0**500
"""Largest entries whose squares are formed as they are; beyond, a vector is divided by its
largest entry first (``||x||^2`` overflows from about ``1e154`` and underflows below ``1e-154``)."""


def unit_and_log_norm(G: torch.Tensor, dims: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """``G / ||G||`` and ``log ||G||`` over the last ``dims`` dims, without overflow or underflow.

    Where the largest entry lies outside :data:`SAFE_RANGE` the vector is divided by it before the squares are
    summed; inside, nothing is rescaled (the very same bits as a plain norm). Zero (or non-finite) vectors give a
    zero direction and ``log_norm = -inf``.
    """
    flat = G.flatten(-dims) if dims > 1 else G
    a = flat.abs().amax(-1) if flat.shape[-1] else torch.zeros(flat.shape[:-1], dtype=G.dtype, device=G.device)
    plain = ((a >= SAFE_RANGE[0]) & (a <= SAFE_RANGE[1])) | ~torch.isfinite(a) | (a == 0)
    scale = torch.where(plain, torch.ones_like(a), a)
    Gs = flat / scale[..., None]
    norm = Gs.norm(dim=-1)
    ok = (norm > 0) & torch.isfinite(norm)
    tiny = torch.finfo(G.dtype).tiny
    unit = torch.where(ok[..., None], Gs / norm.clamp_min(tiny)[..., None], torch.zeros_like(Gs))
    log_norm = torch.where(ok, torch.log(norm.clamp_min(tiny)) + torch.log(scale), torch.full_like(norm, float("-inf")))
    return unit.reshape(G.shape), log_norm


def safe_norm(G: torch.Tensor) -> torch.Tensor:
    """``||G||`` over the last dim: the plain norm where it is representable and exact (the same
    bits), the scaled one (:func:`unit_and_log_norm`) where the squares overflow or underflow."""
    norm = G.norm(dim=-1)
    a = G.abs().amax(-1) if G.shape[-1] else norm
    bad = (a < SAFE_RANGE[0]) | (a > SAFE_RANGE[1])
    if bool(bad.any()):
        _, log_norm = unit_and_log_norm(G)
        norm = torch.where(bad & torch.isfinite(a), log_norm.exp(), norm)
    return norm


def grad_p(
    problem: AttentionProblem, p: torch.Tensor, loss: str | Loss = "logistic", sat: Saturation | None = None
) -> StableGrad:
    """Saturation-safe ``grad_p L(p)`` for ``L(p) = (1/n) sum_i l(Y_i f(X_i))``.

    Parameters
    ----------
    problem : keys ``(..., n, T, m)`` and scores ``(..., n, T)``.
    p : ``(..., m)``.
    loss : a loss of Assumption A.
    sat : precomputed :func:`saturation` at ``p`` (optional).

    Returns
    -------
    StableGrad with ``direction (..., m)`` and ``log_norm (...)``.
    """
    loss = get_loss(loss)
    p = _problem_and_point(problem, p)
    sat = sat or saturation(problem, p)
    gap = sat.dgamma - sat.u_minus_top[..., None]  # gamma_t - u, accurate
    log_w = loss.log_neg_deriv(sat.u)[..., None] + sat.log_s + torch.log(gap.abs())
    is_top = torch.zeros_like(log_w, dtype=torch.bool).scatter_(-1, sat.top[..., None], True)
    log_w = log_w.masked_fill(is_top, float("-inf"))  # k_top - k_top = 0
    sign = -torch.sign(gap)  # l' < 0
    # the weights rescaled by their maximum M over (n, T) in log space, so the direction survives underflow
    M = log_w.flatten(-2).max(-1).values
    M_safe = torch.where(torch.isfinite(M), M, torch.zeros_like(M))
    w = sign * torch.exp(log_w - M_safe[..., None, None])
    G = (w.unsqueeze(-1) * sat.dK).flatten(-3, -2).sum(-2)
    direction, log_norm_G = unit_and_log_norm(G)
    ok = torch.isfinite(log_norm_G) & torch.isfinite(M)
    direction = torch.where(ok[..., None], direction, torch.zeros_like(G))
    log_norm = torch.where(ok, M_safe + log_norm_G - math.log(problem.n), torch.full_like(M_safe, float("-inf")))
    return StableGrad(direction, log_norm)


def loss_value(
    problem: AttentionProblem, p: torch.Tensor, loss: str | Loss = "logistic", sat: Saturation | None = None
) -> torch.Tensor:
    """``L(p)``, ``(...)``, with margins formed without cancellation."""
    loss = get_loss(loss)
    sat = sat or saturation(problem, p)
    return loss.value(sat.u).mean(-1)


def loss_parts(
    problem: AttentionProblem, p: torch.Tensor, loss: str | Loss = "logistic", sat: Saturation | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``L(p)`` split as ``base + excess``: ``base = mean l(gamma_top)``, ``excess`` tiny under saturation, where
    it keeps the digits that ``L`` itself loses to rounding."""
    loss = get_loss(loss)
    sat = sat or saturation(problem, p)
    base = loss.value(sat.gamma_top).mean(-1)
    return base, loss.excess(sat.gamma_top, sat.u_minus_top).mean(-1)


def log_expm1(la: torch.Tensor) -> torch.Tensor:
    """``log(e^a - 1)`` from ``la = log a`` (``a >= 0``): no underflow for tiny ``a``, no overflow for large."""
    a = la.exp()
    mid = torch.log(torch.expm1(a.clamp(max=30.0)))
    return torch.where(la < -30.0, la + 0.5 * a, torch.where(a > 30.0, a + torch.log1p(-torch.exp(-a)), mid))


def log_excess(
    problem: AttentionProblem, p: torch.Tensor, loss: str | Loss = "logistic", sat: Saturation | None = None
) -> torch.Tensor:
    """``log(L(p) - L*)``, ``(...)``, with ``L* = mean_i l(max_t gamma_it)``: the infimum of ``L`` when the optimal
    tokens are separable, the ``L*`` of the Polyak step (:func:`mmtoken.attention.train.train_p`).

    The gap ``a_i = gamma*_i - u_i = sum_t s_it (gamma*_i - gamma_it)`` is a sum of non-negative terms, summed in log
    space; ``l(gamma* - a) - l(gamma*)`` is then formed in log space for the built-in losses, so the result stays
    finite long after ``L - L*`` itself underflows. Only the losses of :data:`mmtoken.attention.losses.LOSSES`.
    """
    loss = get_loss(loss)
    if LOSSES.get(loss.name) is not loss:  # its excess is formed by name below: a look-alike would be misread
        raise ValueError(
            f"loss must be one of the built-in losses {sorted(LOSSES)} (the objects themselves: the excess is "
            f"formed from their formulas, and a custom Loss, even one named like them, has its own), got {loss!r}"
        )
    sat = sat or saturation(problem, p)
    gamma = problem.gamma.expand(sat.log_s.shape)
    if problem.mask is not None:
        gamma = gamma.masked_fill(~problem.mask, float("-inf"))
    g_star = gamma.max(-1).values
    below = gamma < g_star[..., None]
    terms = torch.where(below, sat.log_s + torch.log((g_star[..., None] - gamma).where(below, 1.0)), -math.inf)
    la = torch.logsumexp(terms, -1)  # log a_i
    if loss.name == "correlation":  # l(u) = -u: the excess is a itself
        per_input = la
    elif loss.name == "exponential":  # e^{-(g - a)} - e^{-g} = e^{-g} (e^a - 1)
        per_input = -g_star + log_expm1(la)
    else:  # log log1p(sigmoid(-g) (e^a - 1))
        ly = -torch.nn.functional.softplus(g_star) + log_expm1(la)
        per_input = torch.where(ly < -30.0, ly, torch.log(torch.log1p(ly.clamp(max=700.0).exp())))
    return torch.logsumexp(per_input, -1) - math.log(problem.n)


# --------------------------------------------------------------------------- the naive computations of the trap chapter


def autograd_grad(
    problem: AttentionProblem, p: torch.Tensor, loss: str | Loss = "logistic", dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """``grad_p L`` by autograd through the plain softmax, in ``dtype``, as the public code computes it (in
    float32): accurate while the softmax is not saturated, noise once it is."""
    loss = get_loss(loss)
    p = _problem_and_point(problem, p)
    with torch.enable_grad():
        K, gamma = problem.K.to(dtype), problem.gamma.to(dtype)
        q = p.detach().clone().to(dtype).requires_grad_(True)
        z = (K @ q.unsqueeze(-2).unsqueeze(-1)).squeeze(-1)
        if problem.mask is not None:
            z = z.masked_fill(~problem.mask, float("-inf"))
        s = torch.softmax(z, -1)
        u = (s * gamma).sum(-1)
        L = loss.value(u).mean(-1)
        (g,) = torch.autograd.grad(L.sum(), q)
    return g.detach()
