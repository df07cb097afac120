"""Training the head and the attention together (paper A, Theorems 5-6, Fig. 3).

The published Fig. 3 configurations (``n = 3`` inputs of ``T = 2`` tokens,
``W = I``). The selection and the three SVMs are fixed first, from the
definitions (:func:`mmtoken.joint_path.joint_reference`: the selection with the
largest head-SVM margin). Then

* the theorems' own object, the joint regularization path
  ``min L(v, p) s.t. ||v|| <= R_v, ||p|| <= R_p`` (:mod:`mmtoken.joint_path`), on a grid
  with ``R_v = R_p`` for both cases, and a sweep over ``rho = R_v / R_p`` on the loose
  case against the predicted limit direction;
* the published runs, an extension beyond the theorems: ``v`` and ``p`` trained
  simultaneously by normalized GD (each gradient normalized on its own, step 0.1,
  logistic loss) from ``p0 = (0, -1)``, ``v0 = (-1, 0)``.

In the *tight* case every selected token is a support vector of the head SVM and
``p -> p^mm``; in the *loose* case the third input is not, and ``p`` goes to the
relaxed ATT-SVM instead (for ``rho >= 1``; toward ``p^mm`` as ``rho -> 0``).

The chapter ``book/part1/05_joint.md`` shows these runs.
"""

from __future__ import annotations

__all__ = [
    "CHAPTER",
    "CASES",
    "JointRun",
    "PathResult",
    "SweepResult",
    "JointResult",
    "run",
    "start_pairs",
    "reg_path",
    "rho_sweep",
    "reference",
    "joint_run",
    "RHOS",
    "SWEEP_RADII",
    "plot_paths_case",
    "plot_both_paths",
    "plot_correlations",
    "plot_probabilities",
    "plot_reg_path",
    "plot_sweep",
    "FIGURES",
]

import functools
from dataclasses import dataclass

import numpy as np
import torch

from .. import config, geometry, instances, joint_path, train
from ..ledger import Measured, claim
from ..plotting import colors, plot_curves, style, two_panels

CHAPTER = "05_joint"
CASES = ("tight", "loose")


@dataclass
class JointRun:
    """One joint normalized-GD run of Fig. 3 and the three SVMs of the selection fixed in advance."""

    case: str
    X: np.ndarray  # (n, T, d) tokens (= keys, W = I)
    Y: np.ndarray  # (n,)
    steps: np.ndarray  # (S,)
    p: np.ndarray  # (S, 2)
    v: np.ndarray  # (S, 2)
    probs: np.ndarray  # (S, n, T) softmax probabilities
    output_prob: np.ndarray  # (S, n) sigma(Y_i f(X_i))
    alpha: np.ndarray  # (n,) selection fixed from the definition (largest head-SVM margin)
    gd_alpha: np.ndarray  # (n,) the selection GD ends with (checked to equal alpha)
    v_mm: np.ndarray
    support: list  # head-SVM support vectors (inputs)
    p_mm: np.ndarray
    p_relax: np.ndarray

    @property
    def corr_v(self) -> np.ndarray:
        return geometry.correlation(self.v, self.v_mm)

    @property
    def corr_p_mm(self) -> np.ndarray:
        return geometry.correlation(self.p, self.p_mm)

    @property
    def corr_p_relax(self) -> np.ndarray:
        return geometry.correlation(self.p, self.p_relax)

    @property
    def selected_prob(self) -> np.ndarray:
        """``(S,)`` softmax probability of the selected tokens, averaged over inputs."""
        return self.probs[:, np.arange(len(self.alpha)), self.alpha].mean(-1)

    @property
    def mean_output_prob(self) -> np.ndarray:
        """``(S,)`` logistic output probability ``sigma(Y_i f(X_i))`` averaged over inputs."""
        return self.output_prob.mean(-1)


@dataclass
class PathResult:
    """The joint regularization path of one case on the diagonal ``R_v = R_p = R``."""

    case: str
    radii: np.ndarray  # (nR,)
    v: np.ndarray  # (nR, d) best start per radius
    p: np.ndarray  # (nR, m)
    alpha: np.ndarray  # (nR, n) selection of each point
    radial_ok: np.ndarray  # (nR,) both ridge constraints active (growing either norm lowers the loss)
    ref: joint_path.JointReference

    @property
    def corr_v(self) -> np.ndarray:
        return geometry.correlation(self.v, self.ref.v_mm)

    @property
    def corr_p_mm(self) -> np.ndarray:
        return geometry.correlation(self.p, self.ref.p_mm)

    @property
    def corr_p_relax(self) -> np.ndarray:
        return geometry.correlation(self.p, self.ref.p_relax)


@dataclass
class SweepResult:
    """The loose case's path at ``R_v = rho R_p`` for a sweep of ``rho``, against the predicted limit."""

    rho: np.ndarray  # (k,)
    radii_p: np.ndarray  # (r,) the values of R_p
    p: np.ndarray  # (r, k, m) best start per (R_p, rho)
    v: np.ndarray  # (r, k, d)
    limit: np.ndarray  # (k, m) predicted limit direction per rho
    ref: joint_path.JointReference

    @property
    def corr_limit(self) -> np.ndarray:
        """``(r, k)`` correlation of the path with the predicted limit."""
        return geometry.correlation(self.p, self.limit[None])


@dataclass
class JointResult:
    tight: JointRun
    loose: JointRun
    paths: dict  # case -> PathResult
    sweep: SweepResult

    def __getitem__(self, case: str) -> JointRun:
        return getattr(self, case)


def run(scale: str | None = None) -> JointResult:
    """Both cases of Fig. 3 (GD and regularization path) and the rho sweep, memoised per scale."""
    return _run(scale or config.scale())


def start_pairs(d: int = 2, k: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """``k * k`` paired start directions ``(a0, b0)`` for ``v`` and ``p``: every pair of ``k`` angles."""
    if d != 2:
        raise ValueError("the Fig. 3 instances are planar")
    ang = 0.3 + np.arange(k) * (2 * np.pi / k)
    U = np.stack([np.cos(ang), np.sin(ang)], -1)
    return np.repeat(U, k, 0), np.tile(U, (k, 1))


def reg_path(case: str, radii_v, radii_p, iters: int) -> tuple[np.ndarray, np.ndarray]:
    """Best-of-starts solutions ``(v, p)`` of the joint problem on ``instances.fig3(case)`` for paired radii."""
    inst = instances.fig3(case)
    a0, b0 = start_pairs()
    V, P = joint_path.joint_regularization_path(inst.X, inst.Y, radii_v, radii_p, a0, b0, W=inst.W, iters=iters)
    v, p = joint_path.best_of_starts(inst.X, inst.Y, V, P, W=inst.W)
    return v, p


def _path(case: str, radii: np.ndarray, iters: int) -> PathResult:
    inst = instances.fig3(case)
    v, p = reg_path(case, radii, radii, iters)
    sv, sp = joint_path.radial_slopes(inst.X, inst.Y, v, p, W=inst.W)
    return PathResult(
        case,
        radii,
        v.numpy(),
        p.numpy(),
        geometry.selection(inst.K, p.numpy()),
        ((sv < 0) & (sp < 0)).numpy(),
        reference(case),
    )


def rho_sweep(rho, radii_p, iters: int) -> SweepResult:
    """The loose case at ``R_v = rho R_p`` for every ``rho`` and every ``R_p``, all pairs in one batch."""
    inst = instances.fig3("loose")
    ref = reference("loose")
    rho = np.asarray(rho, dtype=float)
    Rp = np.asarray(radii_p, dtype=float)
    v, p = reg_path("loose", np.outer(Rp, rho).ravel(), np.repeat(Rp, len(rho)), iters)
    limit = np.stack([joint_path.limit_direction(inst.K, ref.alpha, ref.support, ref.excess, r) for r in rho])
    shape = (len(Rp), len(rho), -1)
    return SweepResult(rho, Rp, p.numpy().reshape(shape), v.numpy().reshape(shape), limit, ref)


@functools.lru_cache(maxsize=None)
def reference(case: str) -> joint_path.JointReference:
    """The selection and SVMs of ``instances.fig3(case)``, from the definitions (before any training)."""
    inst = instances.fig3(case)
    return joint_path.joint_reference(inst.X, inst.Y, inst.W)


def joint_run(case: str, steps: int, every: int = 1) -> JointRun:
    """Train ``(v, p)`` jointly on ``instances.fig3(case)`` by normalized GD; compare with :func:`reference`."""
    inst = instances.fig3(case)
    ref = reference(case)
    with torch.inference_mode():
        h = train.train_joint(inst.X, inst.Y, inst.extra["v0"], inst.starts[0], steps=steps, lr=0.1, record_every=every)
    p, v = h.p.numpy(), h.v.numpy()
    return JointRun(
        case,
        inst.X,
        inst.Y,
        h.steps,
        p,
        v,
        h.probs.numpy(),
        h.extra["output_prob"].numpy(),
        ref.alpha,
        geometry.selection(inst.K, p[-1]),
        ref.v_mm,
        ref.support,
        ref.p_mm,
        ref.p_relax,
    )


@functools.lru_cache(maxsize=None)
def _run(scale: str) -> JointResult:
    steps = config.pick(quick=1000, paper=10_000, which=scale)
    every = config.pick(quick=1, paper=10, which=scale)
    iters = config.pick(quick=600, paper=2000, which=scale)
    radii = np.geomspace(
        1.0, config.pick(quick=64.0, paper=256.0, which=scale), config.pick(quick=7, paper=9, which=scale)
    )
    paths = {c: _path(c, radii, iters) for c in CASES}
    sweep = rho_sweep(RHOS, SWEEP_RADII, iters)
    return JointResult(*(joint_run(c, steps, every) for c in CASES), paths, sweep)


RHOS = np.geomspace(1 / 16, 4, 13)
"""The ratios ``R_v / R_p`` of the sweep."""
SWEEP_RADII = (32.0, 128.0)
"""``R_p`` of the sweep: with ``R_v <= 512`` the loss (about ``e^{-R_v}``) and its excess (about
``e^{-R_v - R_p}``) stay inside the float64 range, so every comparison is resolved."""


# ---------------------------------------------------------------- claims
def _final(r: JointRun, alpha: np.ndarray | None = None) -> dict:
    """The final state of a run, its selection compared with ``alpha`` (default: the one fixed in advance)."""
    alpha = r.alpha if alpha is None else alpha
    return {
        "corr_v_vmm": float(r.corr_v[-1]),
        "corr_p_pmm": float(r.corr_p_mm[-1]),
        "corr_p_relax": float(r.corr_p_relax[-1]),
        "steps": int(r.steps[-1]),
        "alpha": alpha.tolist(),
        "gd_selects_alpha": bool(np.array_equal(r.gd_alpha, alpha)),
    }


@claim(
    "A.joint.reg_path",
    chapter=CHAPTER,
    competitor="Theorem 5's answer where Theorem 6 holds: p_mm, the unrelaxed ATT-SVM, in the loose case",
    against=lambda: _reg_path_check(loose_target="corr_p_pmm"),
    checks="paper A, Theorems 5 and 6 (joint regularization path); Fig. 3",
    statement="The joint regularization path argmin L(v, p) s.t. ||v|| <= R_v, ||p|| <= R_p (logistic loss, "
    "selection fixed in advance as the largest head-SVM margin), computed with the saturation-safe "
    "comparisons on a grid with R_v = R_p, goes to (v_mm, p_mm) in the tight case (Thm 5) and to "
    "(v_mm, p_relax) in the loose case (Thm 6).",
    threshold="at the largest radii: tight corr(v, v_mm) >= 0.99 and corr(p, p_mm) >= 0.99; loose "
    "corr(v, v_mm) >= 0.99 and corr(p, p_relax) >= 0.99 (the points keep the fixed selection "
    "and lie on both spheres)",
)
def _claim_reg_path() -> Measured:
    return _reg_path_check(loose_target="corr_p_relax")


def _reg_path_check(loose_target: str) -> Measured:
    res = run()
    m, ok = {}, True
    for case, target in (("tight", "corr_p_pmm"), ("loose", loose_target)):
        r = res.paths[case]
        valid = bool(np.all(r.alpha[-1] == r.ref.alpha) and r.radial_ok[-1])
        m[case] = {
            "R": float(r.radii[-1]),
            "corr_v_vmm": float(r.corr_v[-1]),
            "corr_p_pmm": float(r.corr_p_mm[-1]),
            "corr_p_relax": float(r.corr_p_relax[-1]),
            "valid": valid,
        }
        ok &= valid and m[case]["corr_v_vmm"] >= 0.99 and m[case][target] >= 0.99
    sw = res.sweep
    m["sweep_min_corr_with_limit_at_largest_Rp"] = float(sw.corr_limit[-1].min())
    return Measured(m, bool(ok))


@claim(
    "A.joint.tight",
    chapter=CHAPTER,
    kind="observation",  # joint normalized GD, beyond Theorem 5's regularization path
    competitor="the other selection (the zero token (0, 0) of every input)",
    against=lambda: _tight_check(other=True),
    checks="paper A, Fig. 3 (tight): joint normalized GD, an extension beyond Thm 5 (a regularization path)",
    statement="In the tight configuration (every selected token a head support vector) joint normalized GD "
    "selects the tokens fixed in advance and sends v to the head-SVM direction v_mm and p to the "
    "ATT-SVM direction p_mm.",
    threshold="GD's final selection = the selection fixed in advance; corr(v, v_mm) >= 0.999 and "
    "corr(p, p_mm) >= 0.999",
)
def _claim_tight() -> Measured:
    return _tight_check(other=False)


def _tight_check(other: bool) -> Measured:
    r = run().tight
    m = _final(r, 1 - r.alpha if other else None)  # T = 2: the other token of each input
    return Measured(m, m["gd_selects_alpha"] and m["corr_v_vmm"] >= 0.999 and m["corr_p_pmm"] >= 0.999)


@claim(
    "A.joint.loose",
    chapter=CHAPTER,
    kind="observation",  # joint normalized GD, beyond Theorem 6's regularization path
    competitor="p_mm, the unrelaxed ATT-SVM (correlation about 0.98 with p_relax)",
    against=lambda: _loose_check(swap=True),
    checks="paper A, Fig. 3 (loose): joint normalized GD, an extension beyond Thm 6 (a regularization path)",
    statement="In the loose configuration (third input not a head support vector) joint normalized GD selects "
    "the tokens fixed in advance, p goes to the relaxed ATT-SVM direction p_relax, which differs "
    "from p_mm, and v goes to v_mm.",
    threshold="GD's final selection = the selection fixed in advance; corr(p, p_relax) >= 0.999 and "
    "corr(p, p_mm) < 0.99; corr(v, v_mm) >= 0.999",
)
def _claim_loose() -> Measured:
    return _loose_check(swap=False)


def _loose_check(swap: bool) -> Measured:
    r = run().loose
    m = _final(r)
    m["support"] = list(r.support)
    hit, miss = ("corr_p_pmm", "corr_p_relax") if swap else ("corr_p_relax", "corr_p_pmm")
    return Measured(m, m["gd_selects_alpha"] and m[hit] >= 0.999 and m[miss] < 0.99 and m["corr_v_vmm"] >= 0.999)


@claim(
    "A.joint.probabilities",
    chapter=CHAPTER,
    kind="observation",  # joint normalized GD, beyond Theorems 5-6
    competitor="the untrained model (step 0: uniform attention, output probability near 1/2)",
    against=lambda: _probs_check(step=0),
    checks="paper A, Fig. 3(c): joint normalized GD, an extension beyond Thms 5-6",
    statement="In both configurations the averaged softmax probability of the selected tokens and the "
    "averaged logistic output probability sigma(Y f(X)) both tend to 1.",
    threshold="both >= 0.99 at the end, in both cases",
)
def _claim_probs() -> Measured:
    return _probs_check(step=-1)


def _probs_check(step: int) -> Measured:
    res = run()
    m = {
        c: {"selected_prob": float(res[c].selected_prob[step]), "output_prob": float(res[c].mean_output_prob[step])}
        for c in CASES
    }
    return Measured(m, all(min(d.values()) >= 0.99 for d in m.values()))


# ---------------------------------------------------------------- figures
#: how each reference direction is drawn: (colour, dash); every direction its own dash
_RAYS = {"$p^{mm}$": ("0.1", ":"), "$p^{relax}$": ("0.1", "-."), "$v^{mm}$": ("0.55", "-")}


def _label_tokens(ax, X: np.ndarray, Y: np.ndarray) -> None:
    """Mark the non-zero tokens (circles ``Y = 1``, crosses ``Y = -1``) and name them without overlap:
    the leftmost token's name goes to its left, the others' to their right, each with a leader line."""
    xs = X[:, 1]
    left = int(np.argmin(xs[:, 0]))
    cs = colors(4)
    for i, x in enumerate(xs):
        ax.scatter(*x, marker="o" if Y[i] > 0 else "x", color=cs[i % 4] if Y[i] > 0 else "k", s=40, zorder=4)
        dx = -22 if i == left else 14
        dy = 12 if Y[i] > 0 else -14
        ax.annotate(
            f"$x_{i + 1}$",
            x,
            textcoords="offset points",
            xytext=(dx, dy),
            fontsize=9,
            ha="right" if i == left else "left",
            va="center",
            arrowprops={"arrowstyle": "-", "lw": 0.6, "color": "0.3", "shrinkA": 0, "shrinkB": 3},
        )


def plot_paths_case(r: JointRun, first: int = 200, ax=None):
    """Paths of ``p`` and ``v`` (first ``first`` steps) with the ``p_mm``, ``p_relax`` (loose case) and
    ``v_mm`` rays; the paths in colour, the rays in grey, each ray its own dash."""
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(5.5, 5.0), layout="constrained")
    keep = r.steps <= first
    for k, (name, q) in enumerate((("$p$", r.p[keep]), ("$v$", r.v[keep]))):
        st = style(k)
        ax.plot(q[:, 0], q[:, 1], lw=1.8, label=name, **st)
        ax.plot(q[0, 0], q[0, 1], "o", color=st["color"], ms=4)
    dirs = {"$p^{mm}$": r.p_mm, "$v^{mm}$": r.v_mm}
    if not np.allclose(geometry.correlation(r.p_mm, r.p_relax), 1.0):
        dirs["$p^{relax}$"] = r.p_relax
    lim = max(np.abs(r.p[keep]).max(), np.abs(r.v[keep]).max()) * 1.05
    for name, q in dirs.items():
        q = np.asarray(q, float) / np.linalg.norm(q) * lim
        color, ls = _RAYS[name]
        ax.plot([0, q[0]], [0, q[1]], ls=ls, lw=1.3, color=color, label=name)
    _label_tokens(ax, r.X, r.Y)
    ax.set_xlabel("first coordinate")
    ax.set_ylabel("second coordinate")
    ax.set_aspect("equal", adjustable="datalim")
    return ax.figure


def _legend_below(fig, ax, ncol: int) -> None:
    """One legend for all panels, under them (off the data)."""
    handles, labels = ax.get_legend_handles_labels()
    for a in fig.axes:
        if a.get_legend() is not None:
            a.get_legend().remove()
    fig.legend(handles, labels, loc="outside lower center", ncol=ncol)


def plot_both_paths(res: JointResult | None = None, first: int = 200):
    """Side by side: the tight and the loose case (panel titles), one legend below."""
    res = res or run()
    fig, axes = two_panels(["tight", "loose"], aspect=1.0)
    for ax, c in zip(axes, CASES):
        plot_paths_case(res[c], first, ax=ax)
    _legend_below(fig, axes[1], 5)
    return fig


def _gap_curves(x, r, ax, xlabel: str) -> None:
    """``1 - correlation`` of ``v`` with ``v_mm`` and of ``p`` with ``p_mm`` and ``p_relax`` on one panel;
    three colours and three dashes (``p_mm`` and ``p_relax`` coincide in the tight case: the dotted
    curve then runs over the dashed one)."""
    gap = lambda c: np.clip(1 - c, 1e-16, None)
    plot_curves(
        x,
        {"$v$ vs $v^{mm}$": gap(r["v"]), "$p$ vs $p^{mm}$": gap(r["p_mm"]), "$p$ vs $p^{relax}$": gap(r["p_relax"])},
        xlabel=xlabel,
        ylabel="1 - correlation",
        logx=True,
        logy=True,
        ax=ax,
    )


def plot_correlations(res: JointResult | None = None):
    """``1 - correlation`` of ``v`` with ``v_mm`` and of ``p`` with ``p_mm`` and ``p_relax``, per case."""
    res = res or run()
    fig, axes = two_panels(["tight", "loose"], sharey=True)
    for ax, c in zip(axes, CASES):
        r = res[c]
        _gap_curves(
            r.steps[1:], {"v": r.corr_v[1:], "p_mm": r.corr_p_mm[1:], "p_relax": r.corr_p_relax[1:]}, ax, "iteration"
        )
    axes[1].set_ylabel("")
    _legend_below(fig, axes[0], 3)
    return fig


def plot_probabilities(res: JointResult | None = None, first: int = 200):
    """Paper A, Fig. 3(c): selected-token softmax probability and logistic output probability, both cases;
    colour and marker tell the quantity, the dash the case."""
    import matplotlib.pyplot as plt

    res = res or run()
    fig, ax = plt.subplots(figsize=(6.0, 4.0), layout="constrained")
    for c, ls in zip(CASES, ("-", "--")):
        r = res[c]
        keep = r.steps <= first
        for k, (name, y) in enumerate(
            (("selected tokens", r.selected_prob), ("output $\\sigma(Yf)$", r.mean_output_prob))
        ):
            st = style(k, marker=True, markevery=max(1, keep.sum() // 8))
            st["linestyle"] = ls
            ax.plot(r.steps[keep], y[keep], lw=1.6, ms=4, label=f"{name}, {c}", **st)
    ax.set_xlabel("iteration")
    ax.set_ylabel("probability")
    ax.legend(loc="lower right")  # the curves are near 1 there: the corner is empty
    return fig


def plot_reg_path(res: JointResult | None = None):
    """Two panels (tight, loose): ``1 - correlation`` of the joint regularization path with ``v_mm``, ``p_mm``
    and ``p_relax`` against the common radius ``R = R_v = R_p``."""
    res = res or run()
    fig, axes = two_panels(["tight", "loose"], sharey=True)
    for ax, c in zip(axes, CASES):
        r = res.paths[c]
        _gap_curves(r.radii, {"v": r.corr_v, "p_mm": r.corr_p_mm, "p_relax": r.corr_p_relax}, ax, "radius $R_v = R_p$")
    axes[1].set_ylabel("")
    _legend_below(fig, axes[0], 3)
    return fig


def _angle(q: np.ndarray) -> np.ndarray:
    """Angle of planar directions in degrees."""
    return np.degrees(np.arctan2(q[..., 1], q[..., 0]))


def plot_sweep(res: JointResult | None = None, fine: int = 60):
    """The loose case: angle of ``p`` on the path at ``R_v = rho R_p`` against ``rho`` (markers, one per ``R_p``),
    the predicted limit (line) and the angles of ``p_mm`` and ``p_relax`` (grey, named on the line)."""
    import matplotlib.pyplot as plt

    res = res or run()
    sw = res.sweep
    inst = instances.fig3("loose")
    rho = np.geomspace(sw.rho[0], sw.rho[-1], fine)
    lim = np.stack([joint_path.limit_direction(inst.K, sw.ref.alpha, sw.ref.support, sw.ref.excess, r) for r in rho])
    fig, ax = plt.subplots(figsize=(6.0, 4.0), layout="constrained")
    cs = colors(len(sw.radii_p) + 1)
    ax.plot(rho, _angle(lim), "-", color=cs[-1], lw=1.8, label="predicted limit")
    for j, Rp in enumerate(sw.radii_p):
        ax.plot(sw.rho, _angle(sw.p[j]), "os^D"[j % 4], color=cs[j], ms=5, label=f"path, $R_p$ = {Rp:g}")
    # the names sit where no marker is: p_mm under its line at the right, p_relax over its line at the left
    for name, q, x, off, ha, va in (
        ("$p^{mm}$", sw.ref.p_mm, 1, (-4, -4), "right", "top"),
        ("$p^{relax}$", sw.ref.p_relax, 0, (4, 4), "left", "bottom"),
    ):
        color, ls = _RAYS[name]
        ax.axhline(_angle(q), color=color, ls=ls, lw=1.0)
        ax.annotate(
            name,
            (x, _angle(q)),
            xycoords=("axes fraction", "data"),
            xytext=off,
            textcoords="offset points",
            ha=ha,
            va=va,
            fontsize=9,
        )
    ax.set_xscale("log")
    ax.set_xlabel(r"$\rho = R_v / R_p$")
    ax.set_ylabel("angle of $p$ (degrees)")
    ax.legend(loc="center left")
    return fig


FIGURES = {
    "fig-joint-paths": lambda: plot_both_paths(),
    "fig-joint-corr": lambda: plot_correlations(),
    "fig-joint-probs": lambda: plot_probabilities(),
    "fig-joint-regpath": lambda: plot_reg_path(),
    "fig-joint-rho": lambda: plot_sweep(),
}
