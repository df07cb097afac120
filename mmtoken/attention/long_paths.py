"""Long runs of paper A's theorem algorithms, shared by the chapters of Part I.

Plain GD (Theorems 2-3's algorithm) for 10^6 steps and more (:func:`plain_gd`, :func:`decade_summary`), its step
condition (:func:`smoothness_of`), Theorem 1's regularization path of a planar problem (:func:`planar_reg_path`)
with a certificate of its global minimiser for two-token inputs (:func:`planar_certificate`) and how the
chapters draw them (:func:`plot_plain`, :func:`starts_legend`).
"""

from __future__ import annotations

__all__ = [
    "PLAIN_LR",
    "PLAIN_STEPS",
    "PlainRun",
    "plain_gd",
    "decade_summary",
    "margin_one",
    "increment_error",
    "Smoothness",
    "smoothness_of",
    "planar_reg_path",
    "CERT_CELLS",
    "planar_certificate",
    "planar_reduction",
    "plot_plain",
    "starts_legend",
]

from dataclasses import dataclass

import numpy as np
import torch

from mmtoken.attention import geometry, grad, instances, smoothness, train
from mmtoken.attention.model import AttentionProblem
from mmtoken.book.plotting import style, subplots

PLAIN_LR = 1.0
"""Plain GD step: below ``1/L_p`` for every instance of chapters 2-3 (see :mod:`mmtoken.attention.smoothness`)."""
PLAIN_STEPS = 1_000_000
"""Plain GD steps of the theorem claims of chapters 2-3 (at both scales: the claims name 10^6)."""


@dataclass
class PlainRun:
    """Plain GD ``p <- p - eta grad L(p)`` from a batch of starts, recorded ~90 times per decade of steps."""

    steps: np.ndarray  # (S,) recorded steps, 0 .. total
    p: np.ndarray  # (S, starts, m)
    norm: np.ndarray  # (S, starts)
    lr: float

    def at(self, k: int) -> int:
        """Row of step ``k`` in the record."""
        hit = np.flatnonzero(self.steps == k)
        if not len(hit):
            raise ValueError(f"step {k} was not recorded")
        return int(hit[0])


def plain_gd(problem: AttentionProblem, starts, steps: int = PLAIN_STEPS, lr: float = PLAIN_LR) -> PlainRun:
    """Plain GD with the saturation-safe gradient (compiled kernel through :func:`mmtoken.attention.train.train_p`).

    The run is cut at the powers of ten (GD is memoryless: restarting from the last iterate continues the same
    trajectory) and each decade recorded about 90 times.
    """
    edges = [0] + [10**j for j in range(2, 19) if 10**j < steps] + [steps]
    p = np.asarray(starts, float)
    rows_s, rows_p = [], []
    with torch.inference_mode():
        for a, b in zip(edges[:-1], edges[1:]):
            every = max(1, a // 10) if a else 1
            h = train.train_p(problem, p, steps=b - a, lr=lr, method="gd", record_every=every, record_probs=False)
            keep = slice(0 if a == 0 else 1, None)  # the first row repeats the last of the decade before
            rows_s.append(h.steps[keep] + a)
            rows_p.append(h.p.numpy()[keep])
            p = h.p.numpy()[-1]
    P = np.concatenate(rows_p)
    return PlainRun(np.concatenate(rows_s), P, np.linalg.norm(P, axis=-1), lr)


LOG_GROWTH_TOL = 0.25
""":func:`decade_summary`'s bound on the change of ``||p||``'s growth from one decade of steps to the next, as a
fraction of the earlier decade's (``||p||`` grows like ``log k``: equal increases per decade)."""


def decade_summary(r: PlainRun, ref, growth_tol: float = LOG_GROWTH_TOL) -> dict:
    """Correlation with ``ref`` at the last three powers of ten and the growth of ``||p||`` per decade.

    ``rising``: the correlation of every start increased over the last decade; ``log_growth``: for every start the
    increase of ``||p||`` over the last decade is within ``growth_tol`` (a fraction) of the one before.
    """
    k = int(r.steps[-1])
    i3, i2, i1 = r.at(k), r.at(k // 10), r.at(k // 100)
    corr = geometry.correlation(r.p, ref)
    inc_last = r.norm[i3] - r.norm[i2]
    inc_prev = r.norm[i2] - r.norm[i1]
    return {
        "steps": k,
        "corr": corr[i3],
        "corr_decade_before": corr[i2],
        "rising": bool(np.all(corr[i3] > corr[i2])),
        "inc_last": inc_last,
        "inc_prev": inc_prev,
        "log_growth": bool(np.all(np.abs(inc_last - inc_prev) <= growth_tol * inc_prev)),
    }


def margin_one(K, opt, direction) -> np.ndarray:
    """``direction`` scaled so that its smallest ATT-SVM(``opt``) margin ``(k_{i opt_i} - k_{it})^T p`` is one.

    Plain GD heading to a direction grows along this vector by its length times ``ln 10`` per decade of steps
    (``p(k) ~ margin_one(d) log k``); for the GMM direction it is ``p^mm`` itself, the shortest such vector.
    ``K``: ``(n, T, m)`` keys; ``opt``: ``(n,)`` the selected tokens."""
    K, opt, d = np.asarray(K, float), np.asarray(opt), np.asarray(direction, float)
    rows = np.arange(len(K))
    m = np.einsum("itm,m->it", K[rows, opt][:, None, :] - K, d)
    others = np.ones(m.shape, bool)
    others[rows, opt] = False
    low = m[others].min()
    if low <= 0:
        raise ValueError(
            f"direction {d.tolist()} does not select the tokens {opt.tolist()} (smallest margin {low:.3g})"
        )
    return d / low


def increment_error(r: PlainRun, pred) -> np.ndarray:
    """Per start, ``||(p(k) - p(k/10)) - ln(10) pred|| / (ln(10) ||pred||)`` over the last decade of steps ``k/10 .. k``.

    If ``p(k) = pred log k + (a bounded term that converges)``, as for plain GD heading to ``pred``'s direction
    with ``pred`` :func:`margin_one` of it, this tends to zero; it tests the growth rate and the direction together.
    """
    k = int(r.steps[-1])
    inc = r.p[r.at(k)] - r.p[r.at(k // 10)]
    pred = np.asarray(pred, float)
    return np.linalg.norm(inc - np.log(10) * pred, axis=-1) / (np.log(10) * np.linalg.norm(pred))


@dataclass
class Smoothness:
    """The step condition ``eta <= 1/L_p`` for one instance."""

    bound: float  # analytic bound on sup ||hess L|| (mmtoken.attention.smoothness)
    grid_max: float  # largest ||hess L|| met on the grid [-box, box]^2
    grid_argmax: np.ndarray
    box: float
    lr: float

    @property
    def step_ok(self) -> bool:
        return self.lr <= 1.0 / self.bound


def smoothness_of(inst: instances.Instance, lr: float = PLAIN_LR, box: float = 15.0) -> Smoothness:
    """Bound ``L_p`` for an instance and measure the Hessian norm on a planar grid."""
    bound = smoothness.smoothness_bound(inst.K, inst.gamma)
    gmax, where = smoothness.hessian_norm_max(inst.problem(), box)
    return Smoothness(bound, gmax, where, box, lr)


def planar_reg_path(problem: AttentionProblem, radii, iters: int, loss: str = "logistic") -> np.ndarray:
    """``argmin_{||p|| <= R} L(p)`` for each radius of a planar problem (one instance), ``(nR, 2)``: the best of 12
    start directions on the circle (:func:`mmtoken.attention.train.regularization_path`)."""
    angles = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    w0 = np.stack([np.cos(angles), np.sin(angles)], -1)  # 12 start directions
    with torch.inference_mode():
        pts = train.regularization_path(problem, radii, w0, loss=loss, iters=iters)
        return train.best_of_starts(problem, pts, loss=loss).numpy()


CERT_CELLS = 2**14
""":func:`planar_certificate`'s sectors of the disk (angular width ``2 pi / CERT_CELLS``) ..."""
CERT_RINGS = 64
"""... and its rings (radial width ``R / CERT_RINGS``): the disk is cut into ``CERT_CELLS * CERT_RINGS`` cells."""
CERT_TOL = 1e-9
"""Slack of :func:`planar_certificate`'s comparisons, in ``log(L - L*)`` (a relative ``1e-9`` of the excess)."""


def planar_certificate(
    problem: AttentionProblem,
    p,
    loss: str = "logistic",
    cells: int = CERT_CELLS,
    rings: int = CERT_RINGS,
    radius: float | None = None,
) -> float:
    """How far from ``p``'s direction the minimiser of ``L`` over the disk ``||x|| <= radius`` can lie: an angle.

    For a planar problem (one instance, ``m = 2``) of two-token inputs with a unique optimal token: input ``i``'s
    loss depends on ``x`` only through its margin ``delta_i = d_i^T x`` (``d_i = k_i,opt - k_i,other``), and
    decreases in it. The disk (``radius``, default ``||p||``; ``p`` must lie in it) is cut into ``rings`` rings of
    ``cells`` sectors; on a cell ``r q(theta)``, ``r`` in ``[r_lo, r_hi]``, ``delta_i`` is at most
    ``r_hi M_i`` if ``M_i = max_theta d_i^T q(theta) >= 0``, else ``r_lo M_i`` (exact: a cosine's maximum on an
    interval), so ``L - L*`` is at least its value at those margins, formed in log space
    (:func:`mmtoken.attention.grad.log_excess`, input by input). Every cell whose lower bound exceeds
    ``log(L(p) - L*)`` (by :data:`CERT_TOL`) holds no point as good as ``p``; returned is the largest angle
    between ``p`` and a cell that remains, a bound on the angle between ``p`` and the global minimiser (which
    lies in one of them). Exhaustive: no start, no descent.
    """
    if not isinstance(problem, AttentionProblem):
        raise ValueError(f"problem must be an AttentionProblem, got {type(problem).__name__}")
    K = problem.K.numpy()
    if K.ndim != 3 or K.shape[1:] != (2, 2) or problem.mask is not None:
        raise ValueError(f"a planar problem of two-token inputs, one instance, no mask: K (n, 2, 2), got {K.shape}")
    gamma_t = problem.gamma.expand(K.shape[:2])
    gamma = gamma_t.numpy()
    if bool((gamma[:, 0] == gamma[:, 1]).any()):
        raise ValueError("every input needs a unique optimal token (its two scores differ)")
    p = np.asarray(p, float)
    R = float(np.linalg.norm(p)) if radius is None else float(radius)
    if not np.linalg.norm(p) <= R * (1 + 1e-12):
        raise ValueError(f"p (norm {np.linalg.norm(p):g}) must lie in the disk of radius {R:g}")
    f_star = float(grad.log_excess(problem, torch.as_tensor(p), loss))
    rows = np.arange(len(K))
    opt = gamma.argmax(-1)
    D = K[rows, opt] - K[rows, 1 - opt]  # (n, 2): delta_i = D_i^T x
    edges = np.linspace(-np.pi, np.pi, cells + 1)
    lo, hi = edges[:-1], edges[1:]
    r_edges = R * np.linspace(0.0, 1.0, rings + 1)
    r_lo, r_hi = r_edges[:-1, None], r_edges[1:, None]  # (rings, 1)
    wrap = lambda a: (a + np.pi) % (2 * np.pi) - np.pi
    bound = []
    for i, d in enumerate(D):
        size, phi = float(np.linalg.norm(d)), float(np.arctan2(d[1], d[0]))
        inside = wrap(phi - lo) % (2 * np.pi) <= hi - lo  # the cosine peaks inside the sector
        top = np.where(inside, size, size * np.maximum(np.cos(lo - phi), np.cos(hi - phi)))  # (cells,)
        delta = np.where(top >= 0, r_hi * top, r_lo * top)  # (rings, cells): input i's largest margin on a cell
        one = AttentionProblem(problem.K[i : i + 1], gamma_t[i : i + 1])
        x = torch.as_tensor(delta[..., None] * d / max(size, 1e-300) ** 2)  # a point with that margin
        bound.append(grad.log_excess(one, x, loss).numpy())
    lower = np.logaddexp.reduce(np.stack(bound), axis=0) - np.log(len(K))  # (rings, cells): bounds of log(L - L*)
    keep = (lower <= f_star + CERT_TOL).any(0)  # (cells,): a sector with a cell that may hold the minimiser
    theta_p = float(np.arctan2(p[1], p[0]))
    far = np.maximum(np.abs(wrap(lo[keep] - theta_p)), np.abs(wrap(hi[keep] - theta_p)))
    return float(far.max()) if keep.any() else 0.0


def planar_reduction(problem: AttentionProblem) -> tuple[AttentionProblem, np.ndarray]:
    """A problem of two-token inputs (one instance) whose margin directions ``D_i = k_i0 - k_i1`` span a plane:
    the planar problem with the same loss, and ``B (m, 2)``, orthonormal columns spanning the ``D_i``.

    ``L(x) = L_planar(B^T x)`` for every ``x (m,)`` (the loss sees ``x`` only through ``D_i^T x``), and ``x -> B^T x``
    maps the ball ``||x|| <= R`` onto the disk of radius ``R``: minimisers, norms and angles within the plane carry
    over, so :func:`planar_certificate` of the planar problem certifies the ``m``-dimensional one.
    """
    K = problem.K.numpy()
    if K.ndim != 3 or K.shape[1] != 2 or problem.mask is not None:
        raise ValueError(f"two-token inputs, one instance, no mask: K (n, 2, m), got {K.shape}")
    D = K[:, 0] - K[:, 1]  # (n, m)
    U, S, _ = np.linalg.svd(D.T, full_matrices=False)
    if len(S) < 2 or S[1] <= 1e-12 * S[0] or (len(S) > 2 and S[2] > 1e-12 * S[0]):
        raise ValueError(f"the margin directions must span a plane, singular values {S.tolist()}")
    B = U[:, :2]
    planar = AttentionProblem(torch.as_tensor(K @ B), problem.gamma.expand(K.shape[:2]).clone())
    return planar, B


# ---------------------------------------------------------------- figures
def starts_legend(ax, count: int, what: str = "starts") -> None:
    """One legend entry for a bundle of paths drawn one colour each (not one entry per start)."""
    ax.plot([], [], color="0.35", lw=1.6, label=f"{count} {what} (dot: start)")
    ax.legend(loc="best")


def plot_plain(r: PlainRun, ref, axes=None, groups: dict | None = None):
    """Plain GD: ``1 - corr`` with ``ref`` (panel "direction") and ``||p||`` (panel "norm") against the step.

    ``groups`` maps a legend label to the indices of the starts drawn as one bundle
    (one colour and one legend entry per bundle); default: all starts, one bundle.
    """
    if axes is None:
        fig, axes = subplots(2, titles=["direction", "norm"])
    fig = axes[0].figure
    keep = r.steps > 0
    corr = geometry.correlation(r.p, ref)
    S = r.p.shape[1]
    groups = groups or {f"{S} starts": list(range(S))}
    for g, (name, idx) in enumerate(groups.items()):
        st = style(g)
        for k, j in enumerate(idx):
            lab = name if k == 0 else None
            axes[0].plot(r.steps[keep], np.maximum(1 - corr[keep, j], 1e-16), lw=1.2, label=lab, **st)
            axes[1].plot(r.steps[keep], r.norm[keep, j], lw=1.2, label=lab, **st)
    for ax, ylabel in zip(axes, ["1 - correlation with the limit", r"$\|p(k)\|$"]):
        ax.set_xscale("log")
        ax.set_xlabel("iteration k")
        ax.set_ylabel(ylabel)
    axes[0].set_yscale("log")
    axes[1].legend(loc="best")
    return fig
