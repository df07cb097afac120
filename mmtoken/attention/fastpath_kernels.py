"""The numba kernels of :mod:`mmtoken.attention.fastpath` (compiled on first use, cached on disk).

Imported by :mod:`mmtoken.attention.fastpath` only when a kernel runs, so that importing the package does not
import numba (about a second). The functions take the arrays that module checks; they are not meant to be called
directly.
"""

__all__ = [
    "log_neg_deriv",
    "gradient",
    "log_expm1",
    "log_excess",
    "primal",
    "run",
    "run_joint",
    "run_kq",
]

import math

import numpy as np
from numba import njit


@njit(cache=True)
def log_neg_deriv(u, loss_id):
    if loss_id == 0:  # log sigmoid(-u) = -softplus(u)
        return -(max(u, 0.0) + math.log1p(math.exp(-abs(u))))
    if loss_id == 1:
        return -u
    return 0.0


SAFE_LO, SAFE_HI = 2.0**-500, 2.0**500  # as mmtoken.attention.grad.SAFE_RANGE
EXP_ZERO = -746.0
"""``math.exp(x)`` is exactly ``0.0`` for ``x <= EXP_ZERO`` (``e^-746`` is below half the least subnormal). The
gradient skips such terms: adding ``+0.0`` or ``-0.0`` (``0`` times a finite number) to a sum that starts at ``+0.0``
never changes it, so the skip keeps every bit, and spares the slow underflowing ``exp`` of saturated runs."""


@njit(cache=True)
def unit_inplace(G):
    """Divide ``G`` (any shape) by its 2-norm in place; return ``log ||G||`` (``-inf`` if zero).

    Outside ``[SAFE_LO, SAFE_HI]`` the largest entry divides ``G`` first, so the squares neither overflow nor
    underflow; inside, the plain formula runs unchanged (same bits as before).
    """
    flat = G.reshape(-1)
    a = 0.0
    for j in range(flat.shape[0]):
        a = max(a, abs(flat[j]))
    if a == 0.0 or not math.isfinite(a):
        return -np.inf
    log_a = 0.0
    if a < SAFE_LO or a > SAFE_HI:
        for j in range(flat.shape[0]):
            flat[j] /= a
        log_a = math.log(a)
    norm = 0.0
    for j in range(flat.shape[0]):
        norm += flat[j] * flat[j]
    norm = math.sqrt(norm)
    for j in range(flat.shape[0]):
        flat[j] /= norm
    return math.log(norm) + log_a


@njit(cache=True)
def safe_norm(A):
    """``||A||`` (Frobenius) without overflow or underflow of the squares; ``A`` is not changed."""
    flat = A.reshape(-1)
    a = 0.0
    for j in range(flat.shape[0]):
        a = max(a, abs(flat[j]))
    if a == 0.0 or not math.isfinite(a):
        return a
    if SAFE_LO <= a <= SAFE_HI:
        return math.sqrt((flat * flat).sum())
    s = 0.0
    for j in range(flat.shape[0]):
        s += (flat[j] / a) ** 2
    return a * math.sqrt(s)


@njit(cache=True)
def gradient(K, gamma, mask, q, loss_id, logw, sgn, top, G):
    """Unit gradient direction into ``G``; returns ``log ||grad L||`` (``-inf`` if zero).

    Same formulas as :func:`mmtoken.attention.grad.grad_p`, for one batch element.
    """
    n, T, m = K.shape
    M = -np.inf
    for i in range(n):
        best, zbest = -1, -np.inf
        real = 0
        for t in range(T):
            if mask[i, t]:
                real += 1
                z = 0.0
                for j in range(m):
                    z += K[i, t, j] * q[j]
                if z > zbest:
                    best, zbest = t, z
        top[i] = best
        if real == 1:  # an input of one real token (padding) carries no term: the same G, fewer operations
            for t in range(T):
                logw[i, t] = -np.inf
            continue
        total = 0.0
        for t in range(T):
            logw[i, t] = -np.inf
            if mask[i, t] and t != best:
                d = 0.0
                for j in range(m):
                    d += (K[i, t, j] - K[i, best, j]) * q[j]  # logit gap from key differences
                logw[i, t] = d
                if not d <= EXP_ZERO:  # below, exp is exactly 0 and adds nothing (NaN still goes through)
                    total += math.exp(d)
        lse = math.log1p(total)
        umt = 0.0  # u - gamma_top from small probabilities
        for t in range(T):
            if logw[i, t] > -np.inf:
                logw[i, t] -= lse
                if not logw[i, t] <= EXP_ZERO:
                    umt += math.exp(logw[i, t]) * (gamma[i, t] - gamma[i, best])
        lnd = log_neg_deriv(gamma[i, best] + umt, loss_id)
        for t in range(T):
            if logw[i, t] > -np.inf:
                gap = (gamma[i, t] - gamma[i, best]) - umt
                if gap == 0.0:
                    logw[i, t] = -np.inf
                    continue
                logw[i, t] += lnd + math.log(abs(gap))
                sgn[i, t] = -1.0 if gap > 0 else 1.0  # l' < 0
                if logw[i, t] > M:
                    M = logw[i, t]
    for j in range(m):
        G[j] = 0.0
    if M == -np.inf:
        return -np.inf
    for i in range(n):
        b = top[i]
        for t in range(T):
            if logw[i, t] > -np.inf and not logw[i, t] - M <= EXP_ZERO:
                w = sgn[i, t] * math.exp(logw[i, t] - M)
                for j in range(m):
                    G[j] += w * (K[i, t, j] - K[i, b, j])
    log_norm = unit_inplace(G)
    if log_norm == -np.inf:
        for j in range(m):
            G[j] = 0.0
        return -np.inf
    return M + log_norm - math.log(n)


@njit(cache=True)
def log_expm1(la):
    """``log(e^a - 1)`` from ``la = log a`` (``a >= 0``), without underflow for tiny ``a`` or overflow for large."""
    if la == -np.inf:
        return -np.inf
    if la < -30.0:
        return la + 0.5 * math.exp(la)  # e^a - 1 = a (1 + a/2 + ...)
    a = math.exp(la)
    if a > 30.0:
        return a + math.log1p(-math.exp(-a))
    return math.log(math.expm1(a))


@njit(cache=True)
def log_excess(K, gamma, mask, q, loss_id):
    """``log(L(q) - L*)`` with ``L* = mean_i l(max_t gamma_it)`` (same formulas as
    :func:`mmtoken.attention.grad.log_excess`): the gap ``a_i = gamma*_i - u_i = sum_t s_it (gamma*_i - gamma_it)``
    is a sum of non-negative terms, summed in log space from the log-probabilities."""
    n, T, m = K.shape
    terms = np.full(n, -np.inf)
    z = np.empty(T)
    for i in range(n):
        zmax, gstar = -np.inf, -np.inf
        for t in range(T):
            if mask[i, t]:
                z[t] = 0.0
                for j in range(m):
                    z[t] += K[i, t, j] * q[j]
                zmax = max(zmax, z[t])
                gstar = max(gstar, gamma[i, t])
        total = 0.0
        for t in range(T):
            if mask[i, t]:
                total += math.exp(z[t] - zmax)
        lse = math.log(total)
        la = -np.inf
        for t in range(T):  # log a_i, a running logsumexp of log s_it + log(gamma*_i - gamma_it)
            if mask[i, t] and gamma[i, t] < gstar:
                x = z[t] - zmax - lse + math.log(gstar - gamma[i, t])
                la = x if la == -np.inf else max(la, x) + math.log1p(math.exp(-abs(la - x)))
        if loss_id == 2:  # l(u) = -u: the excess is a itself
            terms[i] = la
            continue
        lx = log_expm1(la)
        if loss_id == 1:  # e^{-(g - a)} - e^{-g} = e^{-g} (e^a - 1)
            terms[i] = -gstar + lx
            continue
        ly = -(max(gstar, 0.0) + math.log1p(math.exp(-abs(gstar)))) + lx  # log sigmoid(-g) + log(e^a - 1)
        terms[i] = ly if ly < -30.0 else math.log(math.log1p(math.exp(ly)))  # log log1p(y)
    M = terms.max()
    if M == -np.inf:
        return -np.inf
    s = 0.0
    for i in range(n):
        s += math.exp(terms[i] - M)
    return M + math.log(s) - math.log(n)


@njit(cache=True)
def primal(theta, mirror):
    """``p = sign(theta) |theta|^(1/(q-1))``, the inverse of the mirror map ``theta = grad psi(p)``."""
    return math.copysign(abs(theta) ** (1.0 / (mirror - 1.0)), theta)


@njit(cache=True)
def run(K, gamma, mask, q, k0, k1, lr, mode, mirror, loss_id, record, r0, out):
    """Advance every batch element's ``q[b]`` (in place) from step ``k0`` to ``k1``.

    ``mode``: 0 plain GD, 1 normalized GD, 2 the Polyak step ``(L - L*) / ||grad L||^2``. With ``mirror = q != 2``
    the state ``q[b]`` is the dual variable ``theta = sign(p)|p|^(q-1)`` of mirror descent (the gradient is taken at
    its primal point, and ``out`` receives primal points); with ``mirror == 2`` it is ``p`` itself.
    ``out[r, b]`` receives the iterate at step ``record[r]`` for the recorded steps in ``[k0, k1)`` (``record[r0]``
    is the first of them); the caller records step ``k1`` of the last chunk. Chunks perform the very same
    floating-point operations as one call.
    """
    B, n, T, m = K.shape
    logw = np.empty((n, T))
    sgn = np.empty((n, T))
    top = np.empty(n, dtype=np.int64)
    G = np.empty(m)
    p = np.empty(m)
    euclid = mirror == 2.0
    for b in range(B):
        r = r0
        for k in range(k0, k1):
            if euclid:
                p[:] = q[b]
            else:
                for j in range(m):
                    p[j] = primal(q[b, j], mirror)
            if r < record.shape[0] and record[r] == k:
                for j in range(m):
                    out[r, b, j] = p[j]
                r += 1
            log_norm = gradient(K[b], gamma[b], mask[b], p, loss_id, logw, sgn, top, G)
            if log_norm == -np.inf:
                continue
            if mode == 1:
                scale = lr
            elif mode == 0:
                scale = lr * math.exp(log_norm)
            else:  # Polyak: (L - L*) / ||g||^2 times g = (L - L*) / ||g|| times the unit direction
                scale = lr * math.exp(log_excess(K[b], gamma[b], mask[b], p, loss_id) - log_norm)
            for j in range(m):
                q[b, j] -= scale * G[j]


@njit(cache=True)
def _head_direction(X, Y, K, gamma, q, loss_id, Gv):
    """Unit direction of ``grad_v L`` into ``Gv`` (same formulas as :func:`mmtoken.attention.joint.grad_v`)."""
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
        lnd[i] = log_neg_deriv(u, loss_id)
    M = lnd.max()
    for j in range(d):
        Gv[j] = 0.0
    for i in range(n):
        w = -math.exp(lnd[i] - M) * Y[i]
        for j in range(d):
            Gv[j] += w * att[i, j]
    if unit_inplace(Gv) == -np.inf:
        for j in range(d):
            Gv[j] = 0.0


@njit(cache=True)
def run_joint(X, Y, K, q, v, k0, k1, lr, lr_v, loss_id, record, r0, out_p, out_v):
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
            log_norm = gradient(K, gamma, mask, q[b], loss_id, logw, sgn, top, Gp)
            _head_direction(X, Y, K, gamma, q[b], loss_id, Gv)
            if log_norm > -np.inf:
                for j in range(m):
                    q[b, j] -= lr * Gp[j]
            for j in range(d):
                v[b, j] -= lr_v * Gv[j]


@njit(cache=True)
def run_kq(Kx, gamma, mask, Kf, Qf, steps, lr, separate, penalty, negligible, record, out_K, out_Q):
    """Normalized GD on ``(K, Q)`` for every batch element, compiled.

    ``Kx (B, n, T, d*d)`` keys, ``gamma (B, n, T)``, ``mask (B, n, T)``; ``Kf, Qf (B, d, m)`` advanced in place;
    ``out_K, out_Q (R, B, d, m)`` receive the iterates at the steps ``record (R,)`` (all ``< steps``; the caller
    records the end). ``penalty`` is the ``lambda`` of ``lambda (||K||^2 + ||Q||^2)`` added to the loss (0: none),
    dropped where ``log(||G|| / 2 lambda) >= negligible``.
    """
    B, n, T, mm = Kx.shape
    d = Kf.shape[1]
    logw = np.empty((n, T))
    sgn = np.empty((n, T))
    top = np.empty(n, dtype=np.int64)
    G = np.empty(mm)
    for b in range(B):
        r = 0
        for k in range(steps):
            if r < record.shape[0] and record[r] == k:
                out_K[r, b] = Kf[b]
                out_Q[r, b] = Qf[b]
                r += 1
            W = Kf[b] @ Qf[b].T
            ln = gradient(Kx[b], gamma[b], mask[b], W.ravel(), 0, logw, sgn, top, G)
            if ln == -np.inf and penalty == 0.0:
                continue
            Gm = G.reshape(d, d)
            gK = Gm @ Qf[b]  # grad_K = G Q (up to the positive factor ||G||)
            gQ = Gm.T @ Kf[b]  # grad_Q = G^T K, taken at the same point
            if penalty > 0.0:
                # ||G|| G^ Q + 2 lambda K, scaled by 1 / (2 lambda): ||G|| may be far below any float
                log_ratio = ln - math.log(2.0 * penalty)
                if ln == -np.inf:  # no loss gradient at all: the penalty alone
                    gK = Kf[b].copy()
                    gQ = Qf[b].copy()
                elif log_ratio < negligible:
                    a = math.exp(log_ratio)
                    gK = a * gK + Kf[b]
                    gQ = a * gQ + Qf[b]
            nK = safe_norm(gK)
            nQ = safe_norm(gQ)
            if not separate:  # one unit step for the pair (K, Q)
                nK = nQ = safe_norm(np.array([nK, nQ]))
            if nK > 0:
                Kf[b] -= (lr / nK) * gK
            if nQ > 0:
                Qf[b] -= (lr / nQ) * gQ
