"""A compiled CPU kernel for the ``p``-dynamics of small problems.

The published configurations are tiny (a few tokens in the plane), so on a
CPU every torch operation costs far more in dispatch than in arithmetic. This
module runs the same saturation-safe normalized (or plain) gradient descent
as :func:`mmtoken.grad.grad_p`, step for step, as one compiled loop per batch
element (numba). :func:`mmtoken.train.train_p` uses it on the CPU when numba
is installed; on a GPU, or with ``MMTOKEN_FASTPATH=off``, the torch code runs.
The two implementations are checked against each other in the tests.
"""
from __future__ import annotations

import math
import os

import numpy as np

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
    def _run(K, gamma, mask, p0, steps, lr, normalized, loss_id, record, out):
        """GD for every batch element; ``out[r, b]`` is ``p`` at step ``record[r]``."""
        B, n, T, m = K.shape
        for b in range(B):
            q = p0[b].copy()
            logw = np.empty((n, T))
            sgn = np.empty((n, T))
            top = np.empty(n, dtype=np.int64)
            G = np.empty(m)
            r = 0
            for k in range(steps + 1):
                if r < record.shape[0] and record[r] == k:
                    out[r, b] = q
                    r += 1
                if k == steps:
                    break
                log_norm = _gradient(K[b], gamma[b], mask[b], q, loss_id, logw, sgn, top, G)
                if log_norm == -np.inf:
                    continue
                scale = lr if normalized else lr * math.exp(log_norm)
                for j in range(m):
                    q[j] -= scale * G[j]

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
    def _run_joint(X, Y, K, p0, v0, steps, lr, lr_v, loss_id, record, out_p, out_v):
        """Joint normalized GD of ``(v, p)`` for every batch element of the starts."""
        n, T, d = X.shape
        m = K.shape[2]
        mask = np.ones((n, T), dtype=np.bool_)
        for b in range(p0.shape[0]):
            q = p0[b].copy()
            v = v0[b].copy()
            gamma = np.empty((n, T))
            logw = np.empty((n, T))
            sgn = np.empty((n, T))
            top = np.empty(n, dtype=np.int64)
            Gp = np.empty(m)
            Gv = np.empty(d)
            r = 0
            for k in range(steps + 1):
                if r < record.shape[0] and record[r] == k:
                    out_p[r, b] = q
                    out_v[r, b] = v
                    r += 1
                if k == steps:
                    break
                for i in range(n):
                    for t in range(T):
                        g = 0.0
                        for j in range(d):
                            g += X[i, t, j] * v[j]
                        gamma[i, t] = Y[i] * g
                log_norm = _gradient(K, gamma, mask, q, loss_id, logw, sgn, top, Gp)
                _head_direction(X, Y, K, gamma, q, loss_id, Gv)
                if log_norm > -np.inf:
                    for j in range(m):
                        q[j] -= lr * Gp[j]
                for j in range(d):
                    v[j] -= lr_v * Gv[j]


def run_joint(X, Y, K, p0, v0, steps: int, lr: float, lr_v: float, loss: str, record) -> tuple[np.ndarray, np.ndarray]:
    """Joint normalized GD through the kernel: ``X (n, T, d)``, ``K (n, T, m)``, starts ``p0 (B, m)``, ``v0 (B, d)``.

    Returns the recorded ``p (R, B, m)`` and ``v (R, B, d)``.
    """
    R, B = len(record), p0.shape[0]
    out_p, out_v = np.empty((R, B, K.shape[-1])), np.empty((R, B, X.shape[-1]))
    _run_joint(np.ascontiguousarray(X), np.ascontiguousarray(Y, dtype=float), np.ascontiguousarray(K),
               np.ascontiguousarray(p0), np.ascontiguousarray(v0), int(steps), float(lr), float(lr_v),
               LOSS_IDS[loss], np.asarray(record, dtype=np.int64), out_p, out_v)
    return out_p, out_v


def run(K: np.ndarray, gamma: np.ndarray, mask: np.ndarray, p0: np.ndarray, steps: int, lr: float,
        normalized: bool, loss: str, record: np.ndarray) -> np.ndarray:
    """Run the kernel on flat batches.

    Parameters
    ----------
    K : ``(B, n, T, m)``; gamma : ``(B, n, T)``; mask : bool ``(B, n, T)``; p0 : ``(B, m)``.
    record : increasing step indices to record.

    Returns
    -------
    ``(len(record), B, m)`` recorded iterates.
    """
    out = np.empty((len(record), K.shape[0], K.shape[-1]))
    _run(np.ascontiguousarray(K), np.ascontiguousarray(gamma), np.ascontiguousarray(mask),
         np.ascontiguousarray(p0), int(steps), float(lr), bool(normalized), LOSS_IDS[loss],
         np.asarray(record, dtype=np.int64), out)
    return out
