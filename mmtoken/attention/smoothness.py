"""Smoothness of the attention loss ``L(p)``: the constant behind the step condition ``eta <= 1/L``.

Theorems 2 and 3 of paper A are about gradient descent with a step below ``1/L_p``, ``L_p`` the Lipschitz constant
of ``grad L``. For one input write ``u = sum_t s_t gamma_t`` with ``s = softmax(K p)``. Then, with moments taken
under ``s`` (``kbar = E_s[k]``),

* ``grad u = E_s[(gamma - u)(k - kbar)]`` (a covariance),
* ``hess u = E_s[(gamma - u)(k - kbar)(k - kbar)^T]``,
* ``hess L = l''(u) grad u grad u^T + l'(u) hess u`` (averaged over inputs).

Since ``u`` stays in ``[min gamma, max gamma]``, ``|gamma_t - u| <= dgamma`` (the score range), and
``Var_s(w^T k) <= D^2 / 4`` for a unit ``w`` (Popoviciu; ``D`` the diameter of the keys), so

``||hess L|| <= dgamma D^2 / 4 * (max|l'| + max|l''| dgamma / 4)``,

the maxima of the loss derivatives taken over ``[min gamma, max gamma]``. :func:`smoothness_bound` evaluates this
bound (per input, averaged); :func:`hessian` the closed form above, to compare with the largest Hessian norm met
on a grid.
"""

from __future__ import annotations

import numpy as np
import torch

from mmtoken import validate
from mmtoken.attention.grad import saturation
from mmtoken.attention.losses import Loss, get_loss
from mmtoken.attention.model import AttentionProblem, as_tensor


def _second_derivative(loss: Loss, u: torch.Tensor) -> torch.Tensor:
    """``l''(u)`` by autograd of ``l'`` (elementwise)."""
    with torch.enable_grad():
        x = u.detach().clone().requires_grad_(True)
        d1 = loss.deriv(x)
        if not d1.requires_grad:  # l' constant (correlation loss): l'' = 0
            return torch.zeros_like(u)
        (d2,) = torch.autograd.grad(d1.sum(), x)
    return d2.detach()


def derivative_bounds(loss: str | Loss, lo: float, hi: float) -> tuple[float, float]:
    """``(max |l'|, max |l''|)`` over ``u in [lo, hi]`` for the losses of Assumption A.

    For these losses ``|l'|`` is largest at ``lo`` and ``|l''|`` at ``lo``, ``hi`` or the point of ``[lo, hi]``
    closest to 0 (logistic), so three evaluations are exact.
    """
    loss = get_loss(loss)
    lo, hi = validate.real_number(lo, "lo"), validate.real_number(hi, "hi")
    if not lo <= hi:
        raise ValueError(f"need lo <= hi, got lo={lo}, hi={hi}")
    u = torch.tensor([lo, hi, min(max(0.0, lo), hi)], dtype=torch.float64)
    d1 = float(loss.deriv(u).abs().max())
    d2 = float(_second_derivative(loss, u).abs().max())
    return d1, d2


def smoothness_bound(K, gamma, loss: str | Loss = "logistic") -> float:
    """Upper bound on ``sup_p ||hess L(p)||_2`` from the score range and the key diameter.

    Parameters
    ----------
    K : ``(n, T, m)`` keys; gamma : ``(n, T)`` scores.

    Returns
    -------
    ``(1/n) sum_i dgamma_i D_i^2 / 4 * (max|l'| + max|l''| dgamma_i / 4)``; a step
    ``eta <= 1 / bound`` satisfies the step condition of Theorems 2-3.
    """
    K, gamma = validate.real_array(K, "K", ndim=3), validate.real_array(gamma, "gamma", ndim=2)
    if gamma.shape != K.shape[:2]:
        raise ValueError(f"gamma must have shape (n, T) = {K.shape[:2]} like K, got {gamma.shape}")
    if 0 in K.shape:
        raise ValueError(f"K must have shape (n, T, m) with no empty dimension, got {K.shape}")
    get_loss(loss)
    total = 0.0
    for Ki, gi in zip(K, gamma):
        dg = float(gi.max() - gi.min())
        D = float(np.linalg.norm(Ki[:, None] - Ki[None], axis=-1).max())
        d1, d2 = derivative_bounds(loss, float(gi.min()), float(gi.max()))
        total += dg * D**2 / 4 * (d1 + d2 * dg / 4)
    return total / len(K)


def hessian(problem: AttentionProblem, p, loss: str | Loss = "logistic") -> torch.Tensor:
    """``hess L(p)`` in closed form, ``(..., m, m)`` for ``p (..., m)``.

    Moments under the softmax are formed from :func:`mmtoken.attention.grad.saturation`, so the result stays
    finite under saturation, where it tends to zero.
    """
    loss = get_loss(loss)
    if not isinstance(problem, AttentionProblem):
        raise ValueError(f"problem must be an AttentionProblem, got {type(problem).__name__}")
    p = as_tensor(p, "p", device=problem.K.device)
    sat = saturation(problem, p)
    s = sat.probs  # (..., n, T)
    dk = sat.dK - (s[..., None] * sat.dK).sum(-2, keepdim=True)  # k - kbar
    dg = sat.dgamma - sat.u_minus_top[..., None]  # gamma - u
    grad_u = ((s * dg)[..., None] * dk).sum(-2)  # (..., n, m)
    hess_u = torch.einsum("...t,...ta,...tb->...ab", s * dg, dk, dk)
    d1 = loss.deriv(sat.u)  # (..., n)
    d2 = _second_derivative(loss, sat.u)
    H = d2[..., None, None] * grad_u[..., :, None] * grad_u[..., None, :] + d1[..., None, None] * hess_u
    return H.mean(-3)


def hessian_norm_max(
    problem: AttentionProblem, box: float, points: int = 301, loss: str | Loss = "logistic"
) -> tuple[float, np.ndarray]:
    """Largest ``||hess L(p)||_2`` over a square grid ``[-box, box]^2`` (planar ``p`` only), and the grid point
    where it is met."""
    if not isinstance(problem, AttentionProblem):
        raise ValueError(f"problem must be an AttentionProblem, got {type(problem).__name__}")
    if problem.m != 2:
        raise ValueError(f"hessian_norm_max scans a planar grid; the keys have m={problem.m}")
    box = validate.positive(box, "box")
    points = validate.count(points, "points", minimum=2)
    xs = np.linspace(-box, box, points)
    P = torch.as_tensor(np.stack(np.meshgrid(xs, xs, indexing="ij"), -1).reshape(-1, 2))
    nrm = torch.linalg.matrix_norm(hessian(problem, P, loss), ord=2)
    i = int(nrm.argmax())
    return float(nrm[i]), P[i].numpy()


__all__ = ["derivative_bounds", "smoothness_bound", "hessian", "hessian_norm_max"]
