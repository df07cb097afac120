"""Training loops: gradient descent, normalized GD, the Polyak step, mirror descent, regularization paths.

All loops run every start / instance of a batch in one tensor operation and record a :class:`History` (a thinned
copy of the iterates, norms, losses and softmax probabilities), as joint training does
(:func:`mmtoken.attention.joint.train_joint`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from mmtoken import validate
from mmtoken.attention import fastpath
from mmtoken.attention.grad import (
    grad_p,
    log_excess,
    loss_parts,
    loss_value,
    safe_norm,
    saturation,
    unit_and_log_norm,
)
from mmtoken.attention.losses import LOSSES, Loss, get_loss
from mmtoken.attention.mirror import inverse_mirror_map, mirror_map
from mmtoken.attention.model import AttentionProblem, as_tensor
from mmtoken.config import progress_bar, progress_enabled

METHODS = ("normalized", "gd", "polyak")
MAX_RECORDS = 10_000
"""With ``record_every=None`` (the default) a run records every step up to this many steps,
and beyond that every ``ceil(steps / MAX_RECORDS)``-th step: the history stays bounded."""
HISTORY_WARN_BYTES = 1 << 30
"""A history estimated above this size (an explicit ``record_every`` on a long run) warns; above 32 times this
size it is refused (``ValueError`` naming ``record_every``) before any memory is taken."""


@dataclass
class History:
    """What a training run recorded, every ``record_every`` steps and at the end.

    Attributes (``S`` recorded steps, batch shape ``...``)
    ----------
    steps : ``(S,)`` step indices (0 = the start).
    p : ``(S, ..., m)`` iterates.
    norm : ``(S, ...)`` ``||p||``.
    loss : ``(S, ...)`` training loss.
    probs : ``(S, ..., n, T)`` softmax probabilities (if recorded).
    v : ``(S, ..., d)`` head iterates (joint training only, :func:`mmtoken.attention.joint.train_joint`).
    """

    steps: np.ndarray
    p: torch.Tensor
    norm: torch.Tensor
    loss: torch.Tensor
    probs: torch.Tensor | None = None
    v: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)

    @property
    def final_p(self) -> torch.Tensor:
        return self.p[-1]


def record_steps(steps: int, record_every: int | None, floats_per_record: int = 0) -> set[int]:
    """The steps a run records: every ``record_every``-th (``None``: bounded by :data:`MAX_RECORDS`) and the
    last; a history of ``floats_per_record`` floats a record above :data:`HISTORY_WARN_BYTES` warns."""
    steps = validate.count(steps, "steps")
    if record_every is None:
        record_every = max(1, math.ceil(steps / MAX_RECORDS))
    record_every = validate.count(record_every, "record_every", minimum=1)
    n_records = steps // record_every + 1 + (steps % record_every != 0)
    size = 8 * n_records * floats_per_record
    msg = (
        f"the recorded history would take about {size / 2**30:.1f} GiB ({n_records} records); "
        "pass a larger record_every (or leave it at None, which bounds the history)"
    )
    if size > 32 * HISTORY_WARN_BYTES:
        raise ValueError(msg.replace("would take", "would take more memory than is sensible:"))
    if size > HISTORY_WARN_BYTES:
        warnings.warn(msg, UserWarning, stacklevel=3)
    return set(range(0, steps + 1, record_every)) | {steps}


def progress_flag(progress, name: str = "progress"):
    """``progress`` checked: ``True``, ``False`` or ``None`` (``ValueError`` naming ``name`` otherwise)."""
    if progress is not None and not isinstance(progress, (bool, np.bool_)):
        raise ValueError(f"{name} must be True, False or None, got {progress!r}")
    return progress


def stack_rows(rows: list[torch.Tensor]) -> torch.Tensor:
    """The recorded rows of a history, ``S`` tensors of one shape, as one ``(S, ...)`` tensor on the CPU."""
    return torch.stack(rows).cpu()


def train_p(
    problem: AttentionProblem,
    p0,
    *,
    steps: int,
    lr: float = 0.1,
    method: str = "normalized",
    loss: str | Loss = "logistic",
    record_every: int | None = None,
    record_probs: bool = True,
    progress: bool | None = None,
    mirror_q: float = 2.0,
) -> History:
    """Train the tunable token ``p`` with the head fixed.

    Parameters
    ----------
    problem : keys and scores, batch shape ``B`` (e.g. instances).
    p0 : starts, shape broadcastable to ``(..., m)`` against the problem's batch
        (e.g. ``(starts, m)`` for one instance, or ``(starts, 1, m)`` against ``I`` instances).
    steps, lr : number of steps and step size.
    method : ``"normalized"`` (``p -= lr g/||g||``, the published runs), ``"gd"`` (``p -= lr g``) or ``"polyak"``
        (``p -= lr (L - L*) g / ||g||^2``, the Polyak step with ``L* = mean_i l(max_t gamma_it)``, the infimum of
        ``L`` when the optimal tokens are separable; :func:`mmtoken.attention.grad.log_excess`; ``lr = 1`` is
        Polyak's step).
    loss : a name (logistic, the default; exponential; correlation) or any :class:`~mmtoken.attention.losses.Loss`;
        only the built-in ones run in the compiled kernel (:func:`~mmtoken.attention.fastpath.runs_loss`).
    record_every : thinning of the recorded history; ``None`` (default): every step up to :data:`MAX_RECORDS`
        steps, a bounded thinned history beyond.
    record_probs : also keep the softmax probabilities.
    progress : show a progress bar (default: long runs only, :func:`mmtoken.config.progress_enabled`).
    mirror_q : mirror descent with the potential ``psi(p) = (1/q)||p||_q^q`` (``q > 1``): the step above is taken
        in the dual variable ``theta = grad psi(p) = sign(p)|p|^(q-1)`` and ``p = sign(theta)|theta|^(1/(q-1))``;
        the default 2 is gradient descent itself. Not with ``"polyak"``.

    Returns
    -------
    History (of the primal iterates ``p``)

    Raises
    ------
    ValueError naming the argument (a bad count, step size, start or batch shape). Ctrl-C stops the run
    between chunks of steps.
    """
    if not isinstance(problem, AttentionProblem):
        raise ValueError(f"problem must be an AttentionProblem, got {type(problem).__name__}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    loss = get_loss(loss)
    lr = validate.positive(lr, "lr")
    mirror_q = validate.positive(mirror_q, "mirror_q")
    if not mirror_q > 1 or not math.isfinite(mirror_q):
        raise ValueError(f"mirror_q must be a finite number > 1 (the potential (1/q)||p||_q^q), got {mirror_q!r}")
    if method == "polyak" and mirror_q != 2:
        raise ValueError(
            f"method 'polyak' runs in the Euclidean geometry only (mirror_q = 2), got mirror_q = {mirror_q}"
        )
    if method == "polyak" and LOSSES.get(loss.name) is not loss:  # L - L* is formed from the built-ins' formulas
        raise ValueError(
            f"method 'polyak' needs L - L* and knows it for the built-in losses {sorted(LOSSES)} only (the objects "
            f"themselves, not a custom Loss named like one), got {loss!r}"
        )
    record_probs = validate.flag(record_probs, "record_probs")
    progress = progress_flag(progress)
    p = as_tensor(p0, "p0", device=problem.K.device).clone()
    steps = validate.count(steps, "steps")
    if p.ndim == 0 or p.shape[-1] != problem.m:
        raise ValueError(f"p0 must end in the key dimension m = {problem.m}, got shape {tuple(p.shape)}")
    mask_batch = () if problem.mask is None else problem.mask.shape[:-2]
    try:
        batch = torch.Size(
            validate.batch_shape(problem.K.shape[:-3], problem.gamma.shape[:-2], p.shape[:-1], mask_batch)
        )
    except ValueError:
        raise ValueError(
            f"p0 {tuple(p.shape)} does not broadcast against the problem's batch {tuple(problem.K.shape[:-3])}"
        ) from None
    if math.prod(batch) == 0:
        raise ValueError(f"p0 holds no start (batch shape {tuple(batch)})")
    record = record_steps(
        steps, record_every, math.prod(batch) * (problem.m + 2 + (problem.n * problem.T if record_probs else 0))
    )
    p = p.expand(*batch, problem.m).clone()
    bar = progress if progress is not None else progress_enabled(steps * max(p.numel(), 1))
    if problem.K.device.type == "cpu" and fastpath.available() and fastpath.runs_loss(loss):
        h = _train_p_compiled(problem, p, steps, lr, method, loss, sorted(record), record_probs, bar, mirror_q)
        return _warn_non_finite(h, method)
    rows: dict[str, list] = {"step": [], "p": [], "loss": [], "probs": []}
    theta = p if mirror_q == 2 else mirror_map(p, mirror_q)  # the dual variable of mirror descent
    for k in progress_bar(range(steps + 1), enabled=bar, desc=f"{method} GD"):
        p = theta if mirror_q == 2 else inverse_mirror_map(theta, mirror_q)  # the primal point
        sat = saturation(problem, p)
        if k in record:
            rows["step"].append(k)
            rows["p"].append(p.clone())
            rows["loss"].append(loss.value(sat.u).mean(-1))
            if record_probs:
                rows["probs"].append(sat.probs)
        if k == steps:
            break
        g = grad_p(problem, p, loss, sat)
        if method == "normalized":
            step = g.direction
        elif method == "gd":
            step = g.value()
        else:  # (L - L*) g / ||g||^2 = (L - L*) / ||g|| times the unit direction, in log space
            log_scale = log_excess(problem, p, loss, sat) - g.log_norm
            step = g.direction * torch.where(torch.isfinite(g.log_norm), log_scale.exp(), 0.0).unsqueeze(-1)
        theta = theta - lr * step
    P, probs = stack_rows(rows["p"]), stack_rows(rows["probs"]) if record_probs else None
    return _warn_non_finite(History(np.array(rows["step"]), P, safe_norm(P), stack_rows(rows["loss"]), probs), method)


def _warn_non_finite(h: History, method: str) -> History:
    """``h``, with a ``RuntimeWarning`` when some run's final iterate is not finite (it is kept as it is)."""
    bad = ~torch.isfinite(h.p[-1]).all(-1)
    if bool(bad.any()):
        why = (
            ": the Polyak step's L* = mean l(max_t gamma_it) is not approached by a run going to another selection, "
            "and its step (L - L*)/||g|| grows without bound"
            if method == "polyak"
            else ""
        )
        warnings.warn(
            f"{int(bad.sum())} of {bad.numel()} runs left the floating-point range (inf or nan){why}",
            RuntimeWarning,
            stacklevel=3,
        )
    return h


def _train_p_compiled(
    problem: AttentionProblem, p, steps, lr, method, loss, record, record_probs, bar, mirror_q
) -> History:
    """:func:`train_p` through the compiled CPU kernel (in chunks); the history is evaluated afterwards."""
    K, gamma, mask = problem.K, problem.gamma, problem.mask
    n, T, m = problem.n, problem.T, problem.m
    batch = p.shape[:-1]
    flat = lambda x, tail: x.expand(*batch, *tail).reshape(-1, *tail).numpy()
    full_mask = torch.ones(gamma.shape, dtype=torch.bool) if mask is None else mask
    arrays = flat(K, (n, T, m)), flat(gamma, (n, T)), flat(full_mask, (n, T)), flat(p, (m,))
    with progress_bar(total=steps, enabled=bar, desc=f"{method} GD") as pbar:
        update = lambda done: pbar.update(done - pbar.n)
        out = fastpath.run(*arrays, steps, lr, method, loss.name, np.array(record), mirror_q=mirror_q, callback=update)
    P = torch.from_numpy(out).reshape(len(record), *batch, m)
    sat = saturation(problem, P)
    return History(np.array(record), P, safe_norm(P), loss.value(sat.u).mean(-1), sat.probs if record_probs else None)


def sphere_step(w: torch.Tensor, direction: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """Rotate unit vectors ``w (..., m)`` by angles ``theta (...)`` against the tangent part of ``direction (..., m)``.

    The descent move on a sphere of every regularization path of the package. Returns unit vectors ``(..., m)``;
    where the tangent part vanishes ``w`` is returned unchanged.
    """
    # the loops of the package pass tensors (unchecked, for speed); anything else is checked and converted
    w = w if isinstance(w, torch.Tensor) else as_tensor(w, "w")
    direction = direction if isinstance(direction, torch.Tensor) else as_tensor(direction, "direction", device=w.device)
    theta = theta if isinstance(theta, torch.Tensor) else as_tensor(theta, "theta", dtype=w.dtype, device=w.device)
    if w.ndim < 1 or direction.shape[-1:] != w.shape[-1:]:
        raise ValueError(
            f"w and direction must end in the same dimension m, got {tuple(w.shape)}, {tuple(direction.shape)}"
        )
    tangent = direction - (direction * w).sum(-1, keepdim=True) * w
    tn = tangent.norm(dim=-1, keepdim=True)
    t = torch.where(tn > 0, tangent / tn.clamp_min(1e-300), torch.zeros_like(tangent))
    new = torch.cos(theta)[..., None] * w - torch.sin(theta)[..., None] * t
    return new / new.norm(dim=-1, keepdim=True)


def accept(
    ok: torch.Tensor, candidate: torch.Tensor, current: torch.Tensor, theta: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The monotone line search of every regularization path, one step: keep what lowered the loss.

    ``ok (...)`` says where ``candidate (..., m)`` lowered the loss; there it replaces ``current (..., m)``
    and its rotation angle grows by 1.5 (at most 1 radian), elsewhere ``current`` stays and the angle
    ``theta (...)`` halves. Returns the new points and angles; the loss never increases.
    """
    if not isinstance(ok, torch.Tensor) or ok.dtype != torch.bool:
        raise ValueError(f"ok must be a boolean tensor (where the candidate lowered the loss), got {type(ok).__name__}")
    for name, a in (("candidate", candidate), ("current", current), ("theta", theta)):
        if not isinstance(a, torch.Tensor):
            raise ValueError(f"{name} must be a tensor, got {type(a).__name__}")
    return (torch.where(ok[..., None], candidate, current), torch.where(ok, (theta * 1.5).clamp_max(1.0), theta * 0.5))


def _log_excess(problem: AttentionProblem, p: torch.Tensor, loss: Loss) -> tuple[torch.Tensor, torch.Tensor]:
    """First-order excess loss ``(1/n) sum_i |l'(g_i)| sum_t s_it (g_i - gamma_it)`` as ``log`` of its
    positive and negative parts, ``(...)`` each: finite where the excess itself underflows."""
    sat = saturation(problem, p)
    log_w = loss.log_neg_deriv(sat.gamma_top)[..., None] + sat.log_s + torch.log(sat.dgamma.abs())
    flat = lambda x: x.flatten(-2)
    pos = torch.where(flat(sat.dgamma) < 0, flat(log_w), torch.full_like(flat(log_w), float("-inf")))
    neg = torch.where(flat(sat.dgamma) > 0, flat(log_w), torch.full_like(flat(log_w), float("-inf")))
    return torch.logsumexp(pos, -1), torch.logsumexp(neg, -1)


def _better(problem: AttentionProblem, p_new, p_old, loss, parts_old) -> tuple[torch.Tensor, tuple]:
    """Whether ``L(p_new) < L(p_old)``, and the loss parts of ``p_new``: ``base + excess`` compared
    (:func:`~mmtoken.attention.grad.loss_parts`, those of ``p_old`` passed in), or where the two are equal to the
    last digit (excess underflowed at large ``||p||``) the first-order excesses in log space."""
    b_new, e_new = parts_new = loss_parts(problem, p_new, loss)
    b_old, e_old = parts_old
    diff = (b_new - b_old) + (e_new - e_old)
    tie = (b_new == b_old) & (e_new == e_old)
    if bool(tie.any()):
        P_new, N_new = _log_excess(problem, p_new, loss)
        P_old, N_old = _log_excess(problem, p_old, loss)
        log_cmp = torch.logaddexp(P_new, N_old) < torch.logaddexp(P_old, N_new)
        return torch.where(tie, log_cmp, diff < 0), parts_new
    return diff < 0, parts_new


def regularization_path(
    problem: AttentionProblem, radii, w0, *, loss: str | Loss = "logistic", iters: int = 500, theta0: float = 0.3
) -> torch.Tensor:
    """Solutions of ``min L(p) s.t. ||p|| <= R`` for each ``R`` in ``radii``.

    With no finite critical point (Assumption A) the minimiser lies on the sphere ``||p|| = R``; we descend on
    it from the start directions ``w0`` by rotations whose angle grows on success and halves on failure (a
    monotone, per-element line search), all radii and starts at once.

    Parameters
    ----------
    problem : keys and scores (batch shape ``B``).
    radii : ``(nR,)`` positive finite radii (at least one).
    w0 : ``(starts, m)`` non-zero start directions (normalised here), at least one.
    iters : rotations per radius (``>= 1``).
    theta0 : first rotation angle in radians, in ``(0, pi]``.

    Returns
    -------
    ``(nR, starts, ..., m)``: for each radius and start, the point reached;
    take the best start with :func:`best_of_starts`.
    """
    if not isinstance(problem, AttentionProblem):
        raise ValueError(f"problem must be an AttentionProblem, got {type(problem).__name__}")
    loss = get_loss(loss)
    iters = validate.count(iters, "iters", minimum=1)
    theta0 = validate.positive(theta0, "theta0", maximum=math.pi)
    dev = problem.K.device
    radii = as_tensor(radii, "radii", device=dev)
    if radii.ndim != 1 or radii.numel() == 0 or not bool((radii > 0).all()):
        raise ValueError("radii must be a non-empty 1-d array of positive numbers")
    w0 = as_tensor(w0, "w0", device=dev)
    if w0.ndim != 2 or w0.shape[0] == 0 or w0.shape[1] != problem.m:
        raise ValueError(f"w0 must have shape (starts, {problem.m}) with at least one start, got {tuple(w0.shape)}")
    if not bool((w0 != 0).any(-1).all()):
        raise ValueError(
            f"w0 rows {torch.nonzero(~(w0 != 0).any(-1)).flatten().tolist()} are zero: "
            "a start direction must be non-zero"
        )
    batch = problem.K.shape[:-3]
    w = unit_and_log_norm(w0)[0].reshape(1, w0.shape[0], *([1] * len(batch)), w0.shape[1])
    w = w.expand(len(radii), w0.shape[0], *batch, w0.shape[1]).clone()
    R = radii.reshape(-1, 1, *([1] * len(batch)), 1)
    theta = torch.full(w.shape[:-1], theta0, dtype=w.dtype, device=dev)
    parts = loss_parts(problem, R * w, loss)
    for _ in range(iters):
        g = grad_p(problem, R * w, loss)
        cand = sphere_step(w, g.direction, theta)
        ok, cand_parts = _better(problem, R * cand, R * w, loss, parts)
        parts = tuple(torch.where(ok, new, old) for new, old in zip(cand_parts, parts))
        w, theta = accept(ok, cand, w, theta)
    return (R * w).cpu()


def best_of_starts(problem: AttentionProblem, points: torch.Tensor, loss: str | Loss = "logistic") -> torch.Tensor:
    """Among ``points (nR, starts, ..., m)`` keep, per radius, the start of lowest loss: ``(nR, ..., m)``.

    Compared as :func:`regularization_path` compares: by ``base + excess``
    (:func:`~mmtoken.attention.grad.loss_parts`), and where starts tie there to the last digit (at large ``||p||``
    the excess underflows to 0 for every start) by the first-order excess in log space; without that, the first
    of the tied starts would be kept, whatever its loss."""
    if not isinstance(problem, AttentionProblem):
        raise ValueError(f"problem must be an AttentionProblem, got {type(problem).__name__}")
    points = as_tensor(points, "points", device=problem.K.device)
    if points.ndim < 3 or points.shape[-1] != problem.m or 0 in points.shape:
        raise ValueError(f"points must have shape (nR, starts, ..., {problem.m}), got {tuple(points.shape)}")
    loss = get_loss(loss)
    base, excess = loss_parts(problem, points, loss)
    # order by base first, then by excess (ties in base are exact when selections agree)
    key = base - base.amin(1, keepdim=True) + excess
    idx = key.argmin(1)
    tied = key == key.amin(1, keepdim=True)  # (nR, starts, ...): the starts that share the lowest key
    if bool((tied.sum(1) > 1).any()):
        # equal to the last digit: at large ||p|| the excess underflows to 0 and every start ties; among the tied,
        # the lowest first-order excess in log space, the comparison of the descent itself (_better)
        P, N = _log_excess(problem, points, loss)
        pick = lambda x, i: torch.gather(x, 1, i[:, None]).squeeze(1)
        for j in range(points.shape[1]):
            lower = torch.logaddexp(P[:, j], pick(N, idx)) < torch.logaddexp(pick(P, idx), N[:, j])
            idx = torch.where(tied[:, j] & lower, j, idx)
    return torch.gather(points, 1, idx[:, None, ..., None].expand(-1, 1, *points.shape[2:])).squeeze(1).cpu()


__all__ = [
    "History",
    "record_steps",
    "progress_flag",
    "stack_rows",
    "train_p",
    "regularization_path",
    "best_of_starts",
    "sphere_step",
    "accept",
    "loss_value",
]
