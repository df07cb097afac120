"""Regularization paths restricted to a cone: the *local* paths of paper A, Theorem 4.

For a direction ``q``, a width ``mu`` and a radius ``R``, the local path
minimises the loss over the part of the sphere ``||p|| = R`` inside the cone
``C_mu(q) = {p : corr(p, q) >= 1 - mu}``:

``pbar_C(R) = argmin { L(p) : ||p|| = R, corr(p, q) >= 1 - mu }``.

(The paper minimises over the truncated cone ``{p in C_{mu,R0}(q), ||p|| <= R}``;
that minimum is the best of these sphere minima over the radii ``R0 <= r <= R``,
see :func:`best_over_radii`.)

The descent is the one every regularization path of the package uses
(:func:`mmtoken.train.sphere_step`, rotations whose angle grows on success and
halves on failure), with one change: a rotated point that leaves the cone is
projected back onto its boundary (the nearest point of the cone on the
sphere), and accepted only if it lowers the loss. A path whose minimum lies on
the boundary therefore ends exactly there: ``corr(pbar_C, q) = 1 - mu``.
"""

from __future__ import annotations

import torch

from . import validate
from .grad import grad_p, loss_parts
from .losses import Loss, get_loss
from .model import AttentionProblem, as_tensor
from .train import accept, sphere_step


def project_to_cone(w: torch.Tensor, q: torch.Tensor, mu: float) -> torch.Tensor:
    """Nearest unit vector to ``w`` with ``<w, q> >= 1 - mu``.

    ``w (..., m)`` and ``q (..., m)`` unit vectors (broadcasting). Inside the
    cone ``w`` is returned unchanged; outside, the boundary point in the plane
    of ``q`` and ``w``: ``c q + sqrt(1 - c^2) e`` with ``c = 1 - mu`` and ``e``
    the unit part of ``w`` orthogonal to ``q``. (If ``w = -q`` exactly the plane
    is undefined and ``q`` itself is returned.)
    """
    c = 1.0 - mu
    cos = (w * q).sum(-1, keepdim=True)
    perp = w - cos * q
    pn = perp.norm(dim=-1, keepdim=True)
    e = torch.where(pn > 0, perp / pn.clamp_min(1e-300), torch.zeros_like(perp))
    edge = c * q + (1 - c * c) ** 0.5 * e
    edge = torch.where(pn > 0, edge, q.expand_as(edge))
    return torch.where(cos >= c, w, edge / edge.norm(dim=-1, keepdim=True))


def cone_regularization_path(
    problem: AttentionProblem,
    radii,
    q,
    mu: float,
    w0=None,
    *,
    loss: str | Loss = "logistic",
    iters: int = 300,
    theta0: float = 0.05,
) -> torch.Tensor:
    """Minimise ``L`` on ``{||p|| = R} ∩ C_mu(q)`` for each ``R`` in ``radii``.

    Parameters
    ----------
    problem : keys and scores, batch shape ``B`` (e.g. one copy of an instance per direction).
    radii : ``(nR,)`` positive radii.
    q : ``(*B, m)`` cone axes (need not be unit; broadcast against the problem's batch).
    mu : cone width, ``0 < mu < 1``: ``corr(p, q) >= 1 - mu``.
    w0 : ``(starts, *B, m)`` start directions (projected into the cone); default the axis ``q``.
    iters : rotations per radius.
    theta0 : first rotation angle (should be well below the cone's half-angle ``arccos(1 - mu)``).

    Returns
    -------
    ``(nR, starts, *B, m)``: the point reached for each radius and start
    (take the best start with :func:`mmtoken.train.best_of_starts`).
    """
    loss = get_loss(loss)
    if not 0.0 < mu < 1.0:
        raise ValueError(f"mu must lie in (0, 1), got {mu}")
    dev = problem.K.device
    radii = as_tensor(radii, "radii", device=dev)
    if radii.ndim != 1 or not bool((radii > 0).all()):
        raise ValueError("radii must be a 1-d array of positive numbers")
    q = as_tensor(q, "q", device=dev)
    if q.shape[-1] != problem.m:
        raise ValueError(f"q has dimension {q.shape[-1]} but the keys have {problem.m}")
    if not bool((q.norm(dim=-1) > 0).all()):
        raise ValueError("q must be non-zero")
    q = q / q.norm(dim=-1, keepdim=True)
    batch = torch.Size(validate.batch_shape(problem.K.shape[:-3], q.shape[:-1]))
    q = q.expand(*batch, problem.m)
    w0 = q[None] if w0 is None else as_tensor(w0, "w0", device=dev)
    if w0.ndim != 2 + len(batch) or w0.shape[-1] != problem.m:
        raise ValueError(f"w0 must have shape (starts, *B, m) with B = {tuple(batch)}, got {tuple(w0.shape)}")
    w = project_to_cone(w0 / w0.norm(dim=-1, keepdim=True), q, mu)
    w = w.expand(len(radii), w.shape[0], *batch, problem.m).clone()
    R = radii.reshape(-1, *([1] * (w.ndim - 1)))
    theta = torch.full(w.shape[:-1], theta0, dtype=w.dtype, device=dev)
    base, excess = loss_parts(problem, R * w, loss)
    for _ in range(iters):
        g = grad_p(problem, R * w, loss)
        cand = project_to_cone(sphere_step(w, g.direction, theta), q, mu)
        b_new, e_new = loss_parts(problem, R * cand, loss)
        # compare base + excess part by part: the excess keeps the digits L itself loses
        ok = ((b_new - base) + (e_new - excess)) < 0
        base, excess = torch.where(ok, b_new, base), torch.where(ok, e_new, excess)
        w, theta = accept(ok, cand, w, theta)
    return (R * w).cpu()


def best_over_radii(problem: AttentionProblem, points: torch.Tensor, loss: str | Loss = "logistic") -> torch.Tensor:
    """The truncated-cone path from the sphere minima: for each ``k``, the point of least loss among
    ``points[:k+1]`` (radii in increasing order).

    ``points (nR, *B, m)`` (one start per radius); returns the same shape.
    """
    points = points.to(problem.K.device)
    base, excess = loss_parts(problem, points, loss)
    out = points.clone()
    best_b, best_e, best_p = base[0], excess[0], points[0]
    for k in range(len(points)):
        # part by part, as in the path itself: base + excess alone rounds away the excess
        better = ((base[k] - best_b) + (excess[k] - best_e)) < 0
        best_b, best_e = torch.where(better, base[k], best_b), torch.where(better, excess[k], best_e)
        best_p = torch.where(better[..., None], points[k], best_p)
        out[k] = best_p
    return out.cpu()


__all__ = ["project_to_cone", "cone_regularization_path", "best_over_radii"]
