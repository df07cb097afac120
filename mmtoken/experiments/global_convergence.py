"""Chapter 2 (``book/part1/02_global``): global convergence (paper A, Theorems 1-2, Fig. 1 global).

* the ATT-SVM of the Fig. 1 (global) instance, solved (the GMM);
* plain GD ``p <- p - eta grad L`` with ``eta = 1`` below ``1/L_p`` (the
  algorithm of Theorem 2; :mod:`mmtoken.smoothness` bounds ``L_p``), six
  starts, 10^6 steps through the compiled kernel, recorded ~90 times per decade;
* normalized GD (step 0.1, the published algorithm, an extension beyond the
  theorem) from the six published starts, all batched: the published 1000
  steps, then continued far beyond them (10 000 steps quick, 200 000 paper)
  with the saturation-safe gradient;
* the regularization path ``pbar(R) = argmin_{||p|| <= R} L(p)`` on a grid
  of radii, solved on the sphere by :func:`mmtoken.train.regularization_path`;
* the stationary counterexample: keys ``(-1, 0, 1)``, scores ``(1, 0, 0.9)``
  (unequal non-optimal scores, outside Theorem 2), whose loss has a finite
  stationary point from which plain GD goes to either end.
"""

from __future__ import annotations

__all__ = [
    "planar_reg_path",
    "CHAPTER",
    "LR",
    "PUBLISHED_STEPS",
    "PLAIN_LR",
    "PLAIN_STEPS",
    "SC_KEYS",
    "SC_GAMMA",
    "SC_GAMMA_EQUAL",
    "SC_OFFSET",
    "SC_STEPS",
    "SELECTED",
    "PublishedRun",
    "LongRun",
    "RegPath",
    "GlobalResult",
    "published",
    "long_run",
    "reg_path",
    "PlainRun",
    "plain_gd",
    "decade_summary",
    "Smoothness",
    "smoothness_of",
    "plain_run",
    "StationaryCounterexample",
    "stationary_counterexample",
    "run",
    "plot_paths_published",
    "starts_legend",
    "plot_convergence",
    "plot_norm",
    "plot_plain",
    "plot_stationary",
    "FIGURES",
]

import functools
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch
from scipy.optimize import brentq

from .. import config, geometry, grad, instances, resultcache, smoothness, svm, train
from ..ledger import Measured, claim
from ..long_paths import (
    PLAIN_LR,
    PLAIN_STEPS,
    PlainRun,
    Smoothness,
    decade_summary,
    plain_gd,
    planar_reg_path,
    plot_plain,
    smoothness_of,
    starts_legend,
)
from ..model import AttentionProblem
from ..plotting import colors, plot_curves, plot_paths, subplots

CHAPTER = "02_global"
LR = 0.1
PUBLISHED_STEPS = 1000

# the stationary counterexample: one input, keys on a line, unequal non-optimal scores
SC_KEYS = np.array([[[-1.0], [0.0], [1.0]]])
SC_GAMMA = np.array([[1.0, 0.0, 0.9]])
SC_GAMMA_EQUAL = np.array([[1.0, 0.9, 0.9]])
"""The same keys with equal non-optimal scores (Theorem 2's hypothesis): no stationary point."""
SC_OFFSET = 1e-6
"""Starts ``p* -/+ SC_OFFSET``: "just left" and "just right" of the stationary point."""
SC_STEPS = 100_000
SELECTED = 0.99
"""A run "ends selecting token t" when its final softmax puts at least this probability on ``t``."""


@dataclass
class PublishedRun:
    """The published 1000 normalized steps (recorded every step)."""

    steps: np.ndarray  # (S,)
    p: np.ndarray  # (S, starts, 2)
    corr: np.ndarray  # (S, starts) correlation with the GMM
    norm: np.ndarray  # (S, starts)


@dataclass
class LongRun:
    """The continuation from step 1000 on (recorded sparsely)."""

    steps: np.ndarray
    p: np.ndarray
    corr: np.ndarray
    norm: np.ndarray


@dataclass
class RegPath:
    radii: np.ndarray  # (nR,)
    p: np.ndarray  # (nR, 2) best start per radius
    corr: np.ndarray  # (nR,) correlation of p(R)/R with the GMM
    on_sphere: np.ndarray  # (nR,) | ||p(R)|| - R |


@dataclass
class GlobalResult:
    keys: np.ndarray  # (1, T, 2)
    gamma: np.ndarray  # (1, T)
    gmm: np.ndarray  # (2,)
    svm: svm.SVMSolution
    published: PublishedRun
    long: LongRun
    reg: RegPath

    @property
    def starts(self) -> np.ndarray:
        return self.published.p[0]


def published(scale: str | None = None) -> PublishedRun:
    """The published run: Fig. 1 (global), six starts batched, 1000 normalized steps of size 0.1
    (the same at both scales; from the results cache when computed before)."""
    return _published()


def _compute_published() -> tuple[dict[str, np.ndarray], dict]:
    inst = instances.fig1("global")
    gmm = inst.gmm().x
    with torch.inference_mode():
        h = train.train_p(inst.problem(), inst.starts, steps=PUBLISHED_STEPS, lr=LR, record_every=1, record_probs=False)
    ps = h.p.numpy()
    return {
        "steps": np.asarray(h.steps),
        "p": ps,
        "corr": geometry.correlation(ps, gmm),
        "norm": h.norm.numpy(),
        "gmm": np.asarray(gmm),
    }, {}


@functools.lru_cache(maxsize=None)
def _published_arrays() -> dict[str, np.ndarray]:
    arrays, _ = resultcache.experiment_result(
        __name__, "published", {"steps": PUBLISHED_STEPS, "lr": LR}, _compute_published
    )
    return arrays


@functools.lru_cache(maxsize=None)
def _published() -> PublishedRun:
    a = _published_arrays()
    return PublishedRun(a["steps"], a["p"], a["corr"], a["norm"])


def long_run(scale: str | None = None) -> LongRun:
    """Continue the published run to 10 000 (quick) or 200 000 (paper) steps."""
    return _long(scale or config.scale())


@functools.lru_cache(maxsize=None)
def _long(scale: str) -> LongRun:
    total = config.pick(quick=10_000, paper=200_000, which=scale)
    every = config.pick(quick=100, paper=1000, which=scale)
    inst = instances.fig1("global")
    gmm = inst.gmm().x
    pub = _published()
    with torch.inference_mode():
        h = train.train_p(
            inst.problem(), pub.p[-1], steps=total - PUBLISHED_STEPS, lr=LR, record_every=every, record_probs=False
        )
    ps = h.p.numpy()
    return LongRun(h.steps + PUBLISHED_STEPS, ps, geometry.correlation(ps, gmm), h.norm.numpy())


def reg_path(scale: str | None = None) -> RegPath:
    """``argmin_{||p|| <= R} L(p)`` for radii ``10^0 .. 10^2`` (9 radii quick, 17 paper).

    The grid stops at ``R = 100``: there ``1 - corr`` is already ~1e-9 and at
    larger radii it sits at float64 rounding (1e-16), where "increasing" is
    no longer measurable; beyond ``R ~ 700`` the excess loss ``e^{-R margin}``
    underflows and the sphere search cannot compare points at all.
    """
    return _reg(scale or config.scale())


@functools.lru_cache(maxsize=None)
def _reg(scale: str) -> RegPath:
    radii = np.logspace(0.0, 2.0, config.pick(quick=9, paper=17, which=scale))
    inst = instances.fig1("global")
    best = planar_reg_path(inst.problem(), radii, iters=config.pick(quick=300, paper=1000, which=scale))
    gmm = inst.gmm().x
    return RegPath(radii, best, geometry.correlation(best, gmm), np.abs(np.linalg.norm(best, axis=-1) - radii))


# ---------------------------------------------------------------- plain GD (Theorem 2's algorithm)


@functools.lru_cache(maxsize=None)
def plain_run() -> PlainRun:
    """Plain GD (step 1) from the six Fig. 1 (global) starts, 10^6 steps."""
    inst = instances.fig1("global")
    return plain_gd(inst.problem(), inst.starts)


# ---------------------------------------------------------------- the stationary counterexample
@dataclass
class StationaryCounterexample:
    """Keys ``(-1, 0, 1)``, scores ``(1, 0, 0.9)``: a finite stationary point and two limits."""

    keys: np.ndarray  # (1, 3, 1)
    gamma: np.ndarray  # (1, 3)
    p_star: float  # root of L'(p)
    grad_star: float  # L'(p_star)
    curvature: float  # L''(p_star) (< 0: a maximum)
    bound: float  # smoothness bound of L (step condition)
    reports: list  # geometry.classify of each token
    run: PlainRun  # plain GD from p_star - offset, p_star + offset
    final_probs: np.ndarray  # (2, 3) softmax at the last step
    grid: np.ndarray  # (G,) values of p for the plot
    loss: np.ndarray  # (G,) L(p), unequal scores
    loss_equal: np.ndarray  # (G,) L(p), equal non-optimal scores

    @property
    def selected(self) -> list:
        """Token selected at the end by each run (``None`` if no token reaches probability ``SELECTED``)."""
        return [int(np.argmax(s)) if s.max() >= SELECTED else None for s in self.final_probs]


def _derivative(problem: AttentionProblem, p: float) -> float:
    """``L'(p)`` for a one-dimensional ``p`` (saturation-safe gradient)."""
    return float(grad.grad_p(problem, torch.tensor([p], dtype=torch.float64)).value()[0])


@functools.lru_cache(maxsize=None)
def stationary_counterexample() -> StationaryCounterexample:
    """Root-find the stationary point, classify the tokens, run plain GD from both sides of it."""
    problem = AttentionProblem(SC_KEYS, SC_GAMMA)
    grid = np.linspace(-6.0, 6.0, 241)
    dL = np.array([_derivative(problem, x) for x in grid])
    flips = np.flatnonzero(np.sign(dL[:-1]) != np.sign(dL[1:]))
    if len(flips) != 1:
        raise RuntimeError(f"expected one sign change of L' on [-6, 6], found {len(flips)}")
    a, b = grid[flips[0]], grid[flips[0] + 1]
    p_star = brentq(lambda x: _derivative(problem, x), a, b, xtol=1e-15, rtol=1e-15)
    curv = float(smoothness.hessian(problem, np.array([p_star]))[0, 0])
    bound = smoothness.smoothness_bound(SC_KEYS, SC_GAMMA)
    reports = [geometry.classify(SC_KEYS, SC_GAMMA, [t]) for t in range(3)]
    starts = np.array([[p_star - SC_OFFSET], [p_star + SC_OFFSET]])
    r = plain_gd(problem, starts, steps=SC_STEPS)
    probs = grad.saturation(problem, torch.as_tensor(r.p[-1])).probs.numpy()[:, 0]
    P = torch.as_tensor(grid[:, None])
    loss = grad.loss_value(problem, P).numpy()
    loss_eq = grad.loss_value(AttentionProblem(SC_KEYS, SC_GAMMA_EQUAL), P).numpy()
    return StationaryCounterexample(
        SC_KEYS,
        SC_GAMMA,
        float(p_star),
        _derivative(problem, p_star),
        curv,
        bound,
        reports,
        r,
        probs,
        grid,
        loss,
        loss_eq,
    )


def run(scale: str | None = None) -> GlobalResult:
    """The whole chapter: SVM, published run, long run, regularization path."""
    scale = scale or config.scale()
    inst = instances.fig1("global")
    sol = inst.gmm()
    return GlobalResult(inst.K, inst.gamma, sol.x, sol, _published(), _long(scale), _reg(scale))


# ---------------------------------------------------------------- claims
E2 = np.array([0.0, 1.0])
"""The competitor of chapter 2's claims: the e2 axis (correlation 0.990 with the GMM, the nearest natural wrong
direction: where the optimal key (-0.1, 1) mostly points)."""


def _final_corr_check(ref) -> Measured:
    r = long_run()
    final = geometry.correlation(r.p[-1], ref)
    return Measured({"steps": int(r.steps[-1]), "min_corr": float(final.min())}, bool(final.min() >= 0.99999))


@claim(
    "A.global.gd",
    chapter=CHAPTER,
    kind="observation",
    competitor="the e2 axis (correlation 0.990 with the GMM)",
    against=lambda: _final_corr_check(E2),
    checks="Theorem 2 (paper A) extended to normalized GD, the published algorithm (the theorem is about plain GD: "
    "A.global.plain_gd); Fig. 1 (global)",
    statement="Normalized GD (step 0.1, logistic loss), the published algorithm, from all six published Fig. 1 "
    "(global) starts converges in direction to the GMM.",
    threshold="all six starts reach correlation >= 0.99999 with the GMM",
)
def _claim_gd() -> Measured:
    r = long_run()
    m = _final_corr_check(instances.fig1("global").gmm().x)
    m.value["min_norm"] = float(r.norm[-1].min())
    return m


@claim(
    "A.global.reg_path",
    chapter=CHAPTER,
    checks="Theorem 1 (paper A); Fig. 1 (global)",
    statement="The regularization path p(R)/R of the Fig. 1 (global) instance turns toward the GMM "
    "direction as R grows.",
    threshold="correlation with the GMM increases with R over the grid and is >= 0.999 at the largest R",
    competitor="the e2 axis (correlation 0.990 with the GMM)",
    against=lambda: _reg_check(E2),
)
def _claim_reg() -> Measured:
    return _reg_check(instances.fig1("global").gmm().x)


def _reg_check(ref) -> Measured:
    r = reg_path()
    corr = geometry.correlation(r.p, ref)
    inc = bool(np.all(np.diff(corr) > 0))
    return Measured(
        {
            "radii": [float(r.radii[0]), float(r.radii[-1])],
            "corr_first": float(corr[0]),
            "corr_last": float(corr[-1]),
            "increasing": inc,
            "min_step": float(np.diff(corr).min()),
        },
        bool(inc and corr[-1] >= 0.999),
    )


@claim(
    "A.global.plain_gd",
    chapter=CHAPTER,
    checks="Theorem 2 (paper A): plain GD with step eta <= 1/L_p (L_p: the book's own smoothness bound, "
    "mmtoken.smoothness, not the paper's constant); Fig. 1 (global)",
    statement="Plain GD p <- p - eta grad L(p) (saturation-safe gradient, eta = 1 below 1/L_p for this instance) "
    "from the six Fig. 1 (global) starts, 10^6 steps, converges in direction to the GMM, not to the e2 axis, "
    "while ||p|| grows logarithmically.",
    threshold="min correlation with the GMM >= 0.97 at 10^6 steps and rising over the last decade of steps (every "
    "start); at every start 1 - corr with the GMM <= half of 1 - corr with the e2 axis (the competitor; issue "
    "25's criterion, fixed before this check ran); ||p|| increase over the last decade within 25% of the "
    "increase over the decade before",
    competitor="the e2 axis (correlation 0.990 with the GMM, above the 0.97 bar)",
    against=lambda: _plain_gd_check(E2, instances.fig1("global").gmm().x),
)
def _claim_plain_gd() -> Measured:
    return _plain_gd_check(instances.fig1("global").gmm().x, E2)


def _plain_gd_check(ref, rival) -> Measured:
    """The claim's check of plain GD's direction: toward ``ref`` and not toward ``rival``."""
    inst = instances.fig1("global")
    sm = smoothness_of(inst)
    r = plain_run()
    d = decade_summary(r, ref)
    gap_ref = 1 - d["corr"]
    gap_rival = 1 - geometry.correlation(r.p[r.at(d["steps"])], rival)
    apart = bool(np.all(gap_ref <= 0.5 * gap_rival))
    ok = sm.step_ok and d["corr"].min() >= 0.97 and d["rising"] and d["log_growth"] and apart
    return Measured(
        {
            "steps": d["steps"],
            "lr": r.lr,
            "L_bound": sm.bound,
            "min_corr": float(d["corr"].min()),
            "min_corr_decade_before": float(d["corr_decade_before"].min()),
            "rising": d["rising"],
            "max_gap_ratio_vs_competitor": round(float((gap_ref / gap_rival).max()), 2),
            "closer_than_competitor": apart,
            "inc_last": [float(x) for x in d["inc_last"]],
            "inc_prev": [float(x) for x in d["inc_prev"]],
            "log_growth": d["log_growth"],
        },
        bool(ok),
    )


@claim(
    "A.global.stationary_counterexample",
    chapter=CHAPTER,
    kind="observation",  # the book's own counterexample, not a theorem's guarantee
    competitor="the same keys with equal non-optimal scores (1, 0.9, 0.9), Theorem 2's hypothesis: no finite "
    "stationary point, every start selects token 0",
    against=lambda: _stationary_sign_changes(SC_GAMMA_EQUAL),
    checks="the equal-score hypothesis of Theorem 2 (paper A) is needed: a counterexample without it",
    statement="For one input with keys (-1, 0, 1) and scores (1, 0, 0.9) the loss has a finite stationary point p*; "
    "plain GD started just right of it ends selecting token 2 (classified locally optimal), just left "
    "of it selecting token 0.",
    threshold=f"root-finder: |L'(p*)| <= 1e-12 and |p*| <= 10; plain GD (eta = {PLAIN_LR}, {SC_STEPS} steps) from "
    f"p* + {SC_OFFSET:g} ends with softmax >= {SELECTED} on token 2, which geometry.classify calls locally "
    f"optimal; from p* - {SC_OFFSET:g} with softmax >= {SELECTED} on token 0",
)
def _claim_stationary() -> Measured:
    c = stationary_counterexample()
    left, right = c.selected
    ok = (
        abs(c.grad_star) <= 1e-12
        and abs(c.p_star) <= 10
        and c.run.lr <= 1.0 / c.bound
        and right == 2
        and c.reports[2].locally_optimal
        and left == 0
    )
    return Measured(
        {
            "p_star": c.p_star,
            "grad_at_p_star": c.grad_star,
            "curvature": c.curvature,
            "selected_from_right": right,
            "selected_from_left": left,
            "token2_locally_optimal": c.reports[2].locally_optimal,
            "final_probs_right": c.final_probs[1].round(6).tolist(),
            "final_probs_left": c.final_probs[0].round(6).tolist(),
        },
        bool(ok),
    )


def _stationary_sign_changes(gamma) -> Measured:
    """The first step of the claim's check (a finite stationary point: one sign change of ``L'`` on [-6, 6])
    for the scores ``gamma``."""
    problem = AttentionProblem(SC_KEYS, gamma)
    grid = np.linspace(-6.0, 6.0, 241)
    dL = np.array([_derivative(problem, x) for x in grid])
    flips = int(np.count_nonzero(np.sign(dL[:-1]) != np.sign(dL[1:])))
    return Measured({"sign_changes_of_L_prime": flips, "max_L_prime": float(dL.max())}, flips == 1)


# ---------------------------------------------------------------- plots
def plot_paths_published(r: GlobalResult | None = None, first: int = 200, ax=None):
    """Paths of the first ``first`` steps with the GMM ray and the keys (needs only the published
    run: without ``r`` nothing else of the chapter is computed)."""
    if r is None:
        pub, gmm, keys = published(), _published_arrays()["gmm"], instances.fig1("global").K
    else:
        pub, gmm, keys = r.published, r.gmm, r.keys
    keep = pub.steps <= first
    fig = plot_paths(pub.p[keep], directions={"GMM direction": gmm}, tokens=keys, ax=ax)
    starts_legend(fig.axes[0] if ax is None else ax, pub.p.shape[1])
    return fig


def plot_convergence(r: GlobalResult | None = None, ax=None):
    """``1 - corr`` with the GMM against ``||p||``: GD iterates (six starts) and the regularization path."""
    r = r or run()
    fig, ax = (ax.figure, ax) if ax is not None else plt.subplots()
    cs = colors(3)
    norm = np.concatenate([r.published.norm[1:], r.long.norm[1:]])
    corr = np.concatenate([r.published.corr[1:], r.long.corr[1:]])
    for j in range(norm.shape[1]):
        ax.plot(
            norm[:, j],
            np.maximum(1 - corr[:, j], 1e-16),
            color=cs[0],
            ls="-",
            lw=1.0,
            alpha=0.8,
            label="normalized gd, six starts" if j == 0 else None,
        )
    ax.plot(r.reg.radii, np.maximum(1 - r.reg.corr, 1e-16), "s--", color=cs[1], ms=5, label="regularization path")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"$\|p\|$ (gd) or $r$ (regularization path)")
    ax.set_ylabel("1 - correlation with gmm")
    ax.legend(loc="best")
    return fig


def plot_norm(r: GlobalResult | None = None, ax=None):
    """``||p(k)||`` against the step, published run and continuation."""
    r = r or run()
    steps = np.concatenate([r.published.steps, r.long.steps[1:]])
    norm = np.concatenate([r.published.norm, r.long.norm[1:]])
    fig = plot_curves(
        steps,
        {"normalized gd, six starts": norm, "0.1 k": LR * steps},
        xlabel="iteration k",
        ylabel=r"$\|p(k)\|$",
        logx=True,
        logy=True,
        styles={"0.1 k": ":"},
        ax=ax,
    )
    return fig


def plot_stationary(c: StationaryCounterexample | None = None, axes=None):
    """The counterexample: ``L(p)`` with its stationary point (left), plain GD from both sides of it (right)."""
    c = c or stationary_counterexample()
    if axes is None:
        fig, axes = subplots(2, titles=["loss", "plain gd"])
    fig = axes[0].figure
    cs = colors(3)
    axes[0].plot(c.grid, c.loss, color=cs[0], lw=1.8, label="scores (1, 0, 0.9)")
    axes[0].plot(c.grid, c.loss_equal, color=cs[1], lw=1.8, ls="--", label="scores (1, 0.9, 0.9)")
    L_star = float(np.interp(c.p_star, c.grid, c.loss))
    axes[0].plot([c.p_star], [L_star], "o", color="k", ms=5, label=f"p* = {c.p_star:.3f}")
    axes[0].set_xlabel("p")
    axes[0].set_ylabel("loss L(p)")
    lo, hi = axes[0].get_ylim()
    axes[0].set_ylim(lo, hi + 0.45 * (hi - lo))  # room above the curves for the legend
    axes[0].legend(loc="upper right")
    keep = c.run.steps > 0
    for j, (name, col, ls) in enumerate((("start p* - 1e-6", cs[2], "-."), ("start p* + 1e-6", cs[0], "-"))):
        axes[1].plot(c.run.steps[keep], c.run.p[keep, j, 0], color=col, lw=1.8, ls=ls, label=name)
    axes[1].axhline(c.p_star, color="0.5", lw=1, ls=":")
    axes[1].set_xscale("log")
    axes[1].set_xlabel("iteration k")
    axes[1].set_ylabel("p(k)")
    axes[1].legend(loc="best")
    return fig


FIGURES = {
    "fig-global-plain": lambda: plot_plain(plain_run(), instances.fig1("global").gmm().x),
    "fig-global-stationary": lambda: plot_stationary(),
    "fig-global-paths": lambda: plot_paths_published(),
    "fig-global-convergence": lambda: plot_convergence(),
    "fig-global-norm": lambda: plot_norm(),
}
