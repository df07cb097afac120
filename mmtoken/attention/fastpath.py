"""A compiled CPU kernel for the ``p``-dynamics of small problems.

The published configurations are tiny, so on a CPU every torch operation costs far more in dispatch than in
arithmetic. This module runs the saturation-safe gradient descent of :func:`mmtoken.attention.grad.grad_p`, step for
step, as one compiled loop per batch element (numba); :func:`mmtoken.attention.train.train_p` uses it on the CPU
unless ``MMTOKEN_FASTPATH=off`` (the tests check the two against each other).

Long runs are cut into chunks of steps (one kernel call each, the state carried over): the result is bit for bit
that of one call, while a progress bar advances and Ctrl-C is honoured between chunks. Every array is checked
(shapes, labels, finiteness) before the kernel reads it.
"""

from __future__ import annotations

__all__ = ["LOSS_IDS", "MODES", "available", "runs_loss", "CHUNK_WORK", "run_joint", "run"]

import importlib.util
import os

import numpy as np

from mmtoken import validate
from mmtoken.attention.mirror import inverse_mirror_map, mirror_map

LOSS_IDS = {"logistic": 0, "exponential": 1, "correlation": 2}


def runs_loss(loss) -> bool:
    """Whether the compiled kernel implements ``loss`` (a :class:`~mmtoken.attention.losses.Loss`): only the built-in
    losses of :data:`mmtoken.attention.losses.LOSSES`, recognised by identity, never by name. A loss made with
    ``dataclasses.replace(losses.logistic, value=...)`` keeps the name ``"logistic"`` but is another
    function: it takes the torch path."""
    from mmtoken.attention.losses import LOSSES

    return loss.name in LOSS_IDS and LOSSES.get(loss.name) is loss


def available() -> bool:
    """Whether the compiled kernel can be used (numba installed and not switched off); imports nothing: numba
    (about a second) and :mod:`mmtoken.attention.fastpath_kernels` load when a kernel first runs."""
    return importlib.util.find_spec("numba") is not None and os.environ.get("MMTOKEN_FASTPATH", "on") != "off"


CHUNK_WORK = 4_000_000
"""Elementary updates (batch x inputs x tokens x dimension x steps) per kernel call; a few hundredths of a second
on a laptop core, so a progress bar moves and Ctrl-C is honoured between calls."""


def _chunks(steps: int, work_per_step: int, chunk: int | None, callback):
    """``(k0, k1)`` for each chunk of ``[0, steps)``; ``callback(k1)`` once the caller has run it."""
    size = chunk if chunk is not None else max(1, CHUNK_WORK // max(work_per_step, 1))
    for k0 in range(0, steps, size):
        yield k0, min(k0 + size, steps)
        if callback is not None:
            callback(min(k0 + size, steps))


def _check_record(record, steps: int) -> np.ndarray:
    record = np.asarray(record)
    if record.ndim != 1 or record.size == 0 or record.dtype.kind not in "iu":
        raise ValueError(f"record must be a non-empty 1-d array of step indices, got {record!r:.80}")
    if record.min() < 0 or record.max() > steps or np.any(np.diff(record) <= 0):
        raise ValueError(f"record must be strictly increasing step indices in 0..{steps}")
    return record.astype(np.int64)


def _check_common(steps, lr, loss, chunk):
    steps = validate.count(steps, "steps")
    lr = validate.positive(lr, "lr")
    if loss not in LOSS_IDS:
        raise ValueError(f"loss must be one of {sorted(LOSS_IDS)} for the compiled kernel, got {loss!r}")
    if chunk is not None:
        chunk = validate.count(chunk, "chunk", minimum=1)
    return steps, lr, chunk


def _float_array(x, name: str, ndim: int) -> np.ndarray:
    return np.ascontiguousarray(validate.real_array(x, name, ndim=ndim))


def run_joint(
    X, Y, K, p0, v0, steps: int, lr: float, lr_v: float, loss: str, record, *, chunk: int | None = None, callback=None
) -> tuple[np.ndarray, np.ndarray]:
    """Joint normalized GD through the kernel: ``X (n, T, d)``, ``Y (n,)`` in ``{+1, -1}``, ``K (n, T, m)``,
    starts ``p0 (B, m)``, ``v0 (B, d)``; ``record``, ``chunk`` and ``callback`` as in :func:`run`.

    Returns the recorded ``p (R, B, m)`` and ``v (R, B, d)``.
    """
    from mmtoken.attention import fastpath_kernels as kernels  # numba: imported on first use

    steps, lr, chunk = _check_common(steps, lr, loss, chunk)
    lr_v = validate.positive(lr_v, "lr_v")
    X, K = _float_array(X, "X", 3), _float_array(K, "K", 3)
    Y = _float_array(Y, "Y", 1)
    p0, v0 = _float_array(p0, "p0", 2), _float_array(v0, "v0", 2)
    n, T, d = X.shape
    if K.shape[:2] != (n, T):
        raise ValueError(f"K must have shape ({n}, {T}, m) like X, got {K.shape}")
    if Y.shape != (n,) or not np.isin(Y, (-1.0, 1.0)).all():
        raise ValueError(f"Y must be ({n},) labels in {{+1, -1}}, got shape {Y.shape}")
    if p0.shape[1] != K.shape[2] or v0.shape != (p0.shape[0], d) or p0.shape[0] == 0:
        raise ValueError(f"p0 must be (B, {K.shape[2]}) and v0 (B, {d}) with B >= 1, got {p0.shape}, {v0.shape}")
    record = _check_record(record, steps)
    R, B = len(record), p0.shape[0]
    out_p, out_v = np.empty((R, B, K.shape[-1])), np.empty((R, B, d))
    q, v = p0.copy(), v0.copy()
    for k0, k1 in _chunks(steps, B * n * T * (K.shape[-1] + 2 * d), chunk, callback):
        kernels.run_joint(
            X, Y, K, q, v, k0, k1, lr, lr_v, LOSS_IDS[loss], record, int(np.searchsorted(record, k0)), out_p, out_v
        )
    if record[-1] == steps:
        out_p[-1], out_v[-1] = q, v
    return out_p, out_v


MODES = {"gd": 0, "normalized": 1, "polyak": 2}


def run(
    K,
    gamma,
    mask,
    p0,
    steps: int,
    lr: float,
    method: str,
    loss: str,
    record,
    *,
    mirror_q: float = 2.0,
    chunk: int | None = None,
    callback=None,
) -> np.ndarray:
    """Run the kernel on flat batches.

    Parameters
    ----------
    K : ``(B, n, T, m)``; gamma : ``(B, n, T)``; mask : bool ``(B, n, T)``; p0 : ``(B, m)``.
    method : ``"gd"``, ``"normalized"`` or ``"polyak"`` (:func:`mmtoken.attention.train.train_p`).
    mirror_q : the potential ``(1/q)||p||_q^q`` of mirror descent; 2 (the default) is gradient descent.
    record : strictly increasing step indices in ``0..steps`` to record.
    chunk : steps per kernel call (default from :data:`CHUNK_WORK`); the result does not depend on it, bit for bit.
    callback : called as ``callback(done)`` after each chunk (progress bars); a ``KeyboardInterrupt`` raised
        between chunks stops the run.

    Returns
    -------
    ``(len(record), B, m)`` recorded iterates.
    """
    from mmtoken.attention import fastpath_kernels as kernels  # numba: imported on first use

    steps, lr, chunk = _check_common(steps, lr, loss, chunk)
    if method not in MODES:
        raise ValueError(f"method must be one of {sorted(MODES)}, got {method!r}")
    mirror_q = validate.positive(mirror_q, "mirror_q")
    if not mirror_q > 1:
        raise ValueError(f"mirror_q must be > 1 (the potential (1/q)||p||_q^q), got {mirror_q!r}")
    K, gamma, p0 = _float_array(K, "K", 4), _float_array(gamma, "gamma", 3), _float_array(p0, "p0", 2)
    mask = np.ascontiguousarray(np.asarray(mask, dtype=np.bool_))
    B, n, T, m = K.shape
    if gamma.shape != (B, n, T) or mask.shape != (B, n, T) or p0.shape != (B, m):
        raise ValueError(
            f"gamma and mask must be {(B, n, T)} and p0 {(B, m)} for K {K.shape}, got "
            f"{gamma.shape}, {mask.shape}, {p0.shape}"
        )
    if not mask.any(-1).all():
        raise ValueError("mask leaves an input with no real token")
    record = _check_record(record, steps)
    out = np.empty((len(record), B, m))
    euclid = mirror_q == 2.0
    q = p0.copy() if euclid else mirror_map(p0, mirror_q)  # the dual variable theta
    work = B * n * T * m * (2 if method == "polyak" else 1)
    for k0, k1 in _chunks(steps, work, chunk, callback):
        r0 = int(np.searchsorted(record, k0))
        kernels.run(K, gamma, mask, q, k0, k1, lr, MODES[method], float(mirror_q), LOSS_IDS[loss], record, r0, out)
    if record[-1] == steps:
        out[-1] = q if euclid else inverse_mirror_map(q, mirror_q)
    return out
