"""A compiled CPU kernel for the ``p``-dynamics of small problems.

The published configurations are tiny (a few tokens in the plane), so on a
CPU every torch operation costs far more in dispatch than in arithmetic. This
module runs the same saturation-safe normalized (or plain) gradient descent
as :func:`mmtoken.grad.grad_p`, step for step, as one compiled loop per batch
element (numba). :func:`mmtoken.train.train_p` uses it on the CPU when numba
is installed; on a GPU, or with ``MMTOKEN_FASTPATH=off``, the torch code runs.
The two implementations are checked against each other in the tests.

Long runs are cut into chunks of steps (one kernel call each, the state
carried over): the result is bit for bit that of one call, while a progress
bar advances and Ctrl-C is honoured between chunks. Every array is checked
(shapes, labels, finiteness) before the kernel reads it.
"""
from __future__ import annotations

import math
import os

import numpy as np

from . import validate

try:
    from numba import njit
except ImportError:  # pragma: no cover - numba is a declared dependency
    njit = None

LOSS_IDS = {"logistic": 0, "exponential": 1, "correlation": 2}


def available() -> bool:
    """Whether the compiled kernel can be used (numba present and not switched off)."""
    return njit is not None and os.environ.get("MMTOKEN_FASTPATH", "on") != "off"


if njit is not None:

    @njit(cache=True)
    def _log_neg_deriv(u, loss_id):
        if loss_id == 0:       # log sigmoid(-u) = -softplus(u)
            return -(max(u, 0.0) + math.log1p(math.exp(-abs(u))))
        if loss_id == 1:
            return -u
        return 0.0

    @njit(cache=True)
    def _gradient(K, gamma, mask, q, loss_id, logw, sgn, top, G):
        """Unit gradient direction into ``G``; returns ``log ||grad L||`` (``-inf`` if zero).

        Same formulas as :func:`mmtoken.grad.grad_p`, for one batch element.
        """
        n, T, m = K.shape
        M = -np.inf
        for i in range(n):
            best, zbest = -1, -np.inf
            for t in range(T):
                if mask[i, t]:
                    z = 0.0
                    for j in range(m):
                        z += K[i, t, j] * q[j]
                    if z > zbest:
                        best, zbest = t, z
            top[i] = best
            total = 0.0
            for t in range(T):
                logw[i, t] = -np.inf
                if mask[i, t] and t != best:
                    d = 0.0
                    for j in range(m):
                        d += (K[i, t, j] - K[i, best, j]) * q[j]   # logit gap from key differences
                    logw[i, t] = d
                    total += math.exp(d)
            lse = math.log1p(total)
            umt = 0.0                                              # u - gamma_top from small probabilities
            for t in range(T):
                if logw[i, t] > -np.inf:
                    logw[i, t] -= lse
                    umt += math.exp(logw[i, t]) * (gamma[i, t] - gamma[i, best])
            lnd = _log_neg_deriv(gamma[i, best] + umt, loss_id)
            for t in range(T):
                if logw[i, t] > -np.inf:
                    gap = (gamma[i, t] - gamma[i, best]) - umt
                    if gap == 0.0:
                        logw[i, t] = -np.inf
                        continue
                    logw[i, t] += lnd + math.log(abs(gap))
                    sgn[i, t] = -1.0 if gap > 0 else 1.0              # l' < 0
                    if logw[i, t] > M:
                        M = logw[i, t]
        for j in range(m):
            G[j] = 0.0
        if M == -np.inf:
            return -np.inf
        for i in range(n):
            b = top[i]
            for t in range(T):
                if logw[i, t] > -np.inf:
                    w = sgn[i, t] * math.exp(logw[i, t] - M)
                    for j in range(m):
                        G[j] += w * (K[i, t, j] - K[i, b, j])
        norm = 0.0
        for j in range(m):
            norm += G[j] * G[j]
        norm = math.sqrt(norm)
        if norm == 0.0:
            return -np.inf
        for j in range(m):
            G[j] /= norm
        return M + math.log(norm) - math.log(n)

    @njit(cache=True)
    def _run(K, gamma, mask, q, k0, k1, lr, normalized, loss_id, record, r0, out):
        """Advance every batch element's ``q[b]`` (in place) from step ``k0`` to ``k1``.

        ``out[r, b]`` receives ``q`` at step ``record[r]`` for the recorded steps in
        ``[k0, k1)`` (``record[r0]`` is the first of them); the caller records step
        ``k1`` of the last chunk. Splitting ``[0, steps)`` into chunks performs the
        very same floating-point operations as one call.
        """
        B, n, T, m = K.shape
        logw = np.empty((n, T))
        sgn = np.empty((n, T))
        top = np.empty(n, dtype=np.int64)
        G = np.empty(m)
        for b in range(B):
            r = r0
            for k in range(k0, k1):
                if r < record.shape[0] and record[r] == k:
                    for j in range(m):
                        out[r, b, j] = q[b, j]
                    r += 1
                log_norm = _gradient(K[b], gamma[b], mask[b], q[b], loss_id, logw, sgn, top, G)
                if log_norm == -np.inf:
                    continue
                scale = lr if normalized else lr * math.exp(log_norm)
                for j in range(m):
                    q[b, j] -= scale * G[j]

    @njit(cache=True)
    def _head_direction(X, Y, K, gamma, q, loss_id, Gv):
        """Unit direction of ``grad_v L`` into ``Gv`` (same formulas as :func:`mmtoken.train.grad_v`)."""
        n, T, d = X.shape
        m = K.shape[2]
        lnd = np.empty(n)
        att = np.zeros((n, d))
        for i in range(n):
            zmax = -np.inf
            z = np.empty(T)
            for t in range(T):
                z[t] = 0.0
                for j in range(m):
                    z[t] += K[i, t, j] * q[j]
                zmax = max(zmax, z[t])
            total = 0.0
            for t in range(T):
                z[t] = math.exp(z[t] - zmax)
                total += z[t]
            u = 0.0
            for t in range(T):
                s = z[t] / total
                u += s * gamma[i, t]
                for j in range(d):
                    att[i, j] += s * X[i, t, j]
            lnd[i] = _log_neg_deriv(u, loss_id)
        M = lnd.max()
        for j in range(d):
            Gv[j] = 0.0
        for i in range(n):
            w = -math.exp(lnd[i] - M) * Y[i]
            for j in range(d):
                Gv[j] += w * att[i, j]
        norm = 0.0
        for j in range(d):
            norm += Gv[j] * Gv[j]
        norm = math.sqrt(norm)
        if norm > 0:
            for j in range(d):
                Gv[j] /= norm

    @njit(cache=True)
    def _run_joint(X, Y, K, q, v, k0, k1, lr, lr_v, loss_id, record, r0, out_p, out_v):
        """Joint normalized GD of ``(v, p)``: advance ``q[b], v[b]`` (in place) from step ``k0`` to ``k1``."""
        n, T, d = X.shape
        m = K.shape[2]
        mask = np.ones((n, T), dtype=np.bool_)
        gamma = np.empty((n, T))
        logw = np.empty((n, T))
        sgn = np.empty((n, T))
        top = np.empty(n, dtype=np.int64)
        Gp = np.empty(m)
        Gv = np.empty(d)
        for b in range(q.shape[0]):
            r = r0
            for k in range(k0, k1):
                if r < record.shape[0] and record[r] == k:
                    for j in range(m):
                        out_p[r, b, j] = q[b, j]
                    for j in range(d):
                        out_v[r, b, j] = v[b, j]
                    r += 1
                for i in range(n):
                    for t in range(T):
                        g = 0.0
                        for j in range(d):
                            g += X[i, t, j] * v[b, j]
                        gamma[i, t] = Y[i] * g
                log_norm = _gradient(K, gamma, mask, q[b], loss_id, logw, sgn, top, Gp)
                _head_direction(X, Y, K, gamma, q[b], loss_id, Gv)
                if log_norm > -np.inf:
                    for j in range(m):
                        q[b, j] -= lr * Gp[j]
                for j in range(d):
                    v[b, j] -= lr_v * Gv[j]


CHUNK_WORK = 4_000_000
"""Elementary updates (batch x inputs x tokens x dimension x steps) per kernel call; a few
hundredths of a second on a laptop core, so a progress bar moves and Ctrl-C is honoured
between calls."""


def _chunks(steps: int, work_per_step: int, chunk: int | None):
    size = chunk if chunk is not None else max(1, CHUNK_WORK // max(work_per_step, 1))
    k = 0
    while k < steps:
        yield k, min(k + size, steps)
        k = min(k + size, steps)


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


def run_joint(X, Y, K, p0, v0, steps: int, lr: float, lr_v: float, loss: str, record, *,
              chunk: int | None = None, callback=None) -> tuple[np.ndarray, np.ndarray]:
    """Joint normalized GD through the kernel: ``X (n, T, d)``, ``Y (n,)`` in ``{+1, -1}``,
    ``K (n, T, m)``, starts ``p0 (B, m)``, ``v0 (B, d)``.

    Every shape is checked before the kernel reads anything. The steps run in
    chunks (``chunk`` steps, default from :data:`CHUNK_WORK`); ``callback(done)``
    is called after each, with the number of steps done.

    Returns the recorded ``p (R, B, m)`` and ``v (R, B, d)``.
    """
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
    for k0, k1 in _chunks(steps, B * n * T * (K.shape[-1] + 2 * d), chunk):
        _run_joint(X, Y, K, q, v, k0, k1, lr, lr_v, LOSS_IDS[loss], record,
                   int(np.searchsorted(record, k0)), out_p, out_v)
        if callback is not None:
            callback(k1)
    if record[-1] == steps:
        out_p[-1], out_v[-1] = q, v
    return out_p, out_v


def run(K: np.ndarray, gamma: np.ndarray, mask: np.ndarray, p0: np.ndarray, steps: int, lr: float,
        normalized: bool, loss: str, record: np.ndarray, *, chunk: int | None = None, callback=None) -> np.ndarray:
    """Run the kernel on flat batches.

    Parameters
    ----------
    K : ``(B, n, T, m)``; gamma : ``(B, n, T)``; mask : bool ``(B, n, T)``; p0 : ``(B, m)``.
    record : strictly increasing step indices in ``0..steps`` to record.
    chunk : steps per kernel call (default from :data:`CHUNK_WORK`); the result does not
        depend on it, bit for bit.
    callback : called as ``callback(done)`` after each chunk (progress bars); a
        ``KeyboardInterrupt`` raised between chunks stops the run.

    Returns
    -------
    ``(len(record), B, m)`` recorded iterates.
    """
    steps, lr, chunk = _check_common(steps, lr, loss, chunk)
    K, gamma, p0 = _float_array(K, "K", 4), _float_array(gamma, "gamma", 3), _float_array(p0, "p0", 2)
    mask = np.ascontiguousarray(np.asarray(mask, dtype=np.bool_))
    B, n, T, m = K.shape
    if gamma.shape != (B, n, T) or mask.shape != (B, n, T) or p0.shape != (B, m):
        raise ValueError(f"gamma and mask must be {(B, n, T)} and p0 {(B, m)} for K {K.shape}, got "
                         f"{gamma.shape}, {mask.shape}, {p0.shape}")
    if not mask.any(-1).all():
        raise ValueError("mask leaves an input with no real token")
    record = _check_record(record, steps)
    out = np.empty((len(record), B, m))
    q = p0.copy()
    for k0, k1 in _chunks(steps, B * n * T * m, chunk):
        _run(K, gamma, mask, q, k0, k1, lr, bool(normalized), LOSS_IDS[loss], record,
             int(np.searchsorted(record, k0)), out)
        if callback is not None:
            callback(k1)
    if record[-1] == steps:
        out[-1] = q
    return out


if njit is not None:
    gradient = _gradient
    """The compiled saturation-safe gradient of one batch element, for kernels in other modules
    (:mod:`mmtoken.tfsvm`): ``gradient(K (n, T, m), gamma (n, T), mask (n, T), q (m,), loss_id,
    logw (n, T), sgn (n, T), top (n,) int64, G (m,))`` writes the unit direction into ``G`` and
    returns ``log ||grad L||`` (``-inf`` where it vanishes); the other arrays are workspace."""
