"""Training the head and the attention together (paper A, Theorems 5-6, Fig. 3).

The published Fig. 3 configurations (``n = 3`` inputs of ``T = 2`` tokens,
``W = I``): ``v`` and ``p`` trained simultaneously by normalized GD (each
gradient normalized on its own, step 0.1, logistic loss) from ``p0 = (0, -1)``,
``v0 = (-1, 0)``. In the *tight* case every selected token is a support vector
of the head SVM and ``p -> p^mm``; in the *loose* case the third input is not,
and ``p`` goes to the relaxed ATT-SVM instead.

The chapter ``book/part1/05_joint.md`` shows these runs.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from .. import config, geometry, instances, svm, train
from ..ledger import Measured, claim
from ..plotting import colors, plot_curves, plot_paths

CHAPTER = "05_joint"
CASES = ("tight", "loose")


@dataclass
class JointRun:
    """One joint run of Fig. 3 and the three SVMs of its final selection."""

    case: str
    X: np.ndarray            # (n, T, d) tokens (= keys, W = I)
    Y: np.ndarray            # (n,)
    steps: np.ndarray        # (S,)
    p: np.ndarray            # (S, 2)
    v: np.ndarray            # (S, 2)
    probs: np.ndarray        # (S, n, T) softmax probabilities
    output_prob: np.ndarray  # (S, n) sigma(Y_i f(X_i))
    alpha: np.ndarray        # (n,) final selection
    v_mm: np.ndarray
    support: list            # head-SVM support vectors (inputs)
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
class JointResult:
    tight: JointRun
    loose: JointRun

    def __getitem__(self, case: str) -> JointRun:
        return getattr(self, case)


def run(scale: str | None = None) -> JointResult:
    """Both cases of Fig. 3, memoised per scale."""
    return _run(scale or config.scale())


def joint_run(case: str, steps: int, every: int = 1) -> JointRun:
    """Train ``(v, p)`` jointly on ``instances.fig3(case)`` and solve the three SVMs of the final selection."""
    inst = instances.fig3(case)
    with torch.inference_mode():
        h = train.train_joint(inst.X, inst.Y, inst.extra["v0"], inst.starts[0], steps=steps, lr=0.1,
                              record_every=every)
    p, v = h.p.numpy(), h.v.numpy()
    alpha = geometry.selection(inst.K, p[-1])
    head = svm.head_svm(inst.X, inst.Y, alpha)
    support = svm.head_support(head)
    p_mm = svm.att_svm(inst.K, alpha).x
    p_relax = svm.relaxed_att_svm(inst.K, alpha, support).x
    return JointRun(case, inst.X, inst.Y, h.steps, p, v, h.probs.numpy(), h.extra["output_prob"].numpy(),
                    alpha, head.x, support, p_mm, p_relax)


@functools.lru_cache(maxsize=None)
def _run(scale: str) -> JointResult:
    steps = config.pick(quick=1000, paper=10_000, which=scale)
    every = config.pick(quick=1, paper=10, which=scale)
    return JointResult(*(joint_run(c, steps, every) for c in CASES))


# ---------------------------------------------------------------- claims
def _final(r: JointRun) -> dict:
    return {"corr_v_vmm": float(r.corr_v[-1]), "corr_p_pmm": float(r.corr_p_mm[-1]),
            "corr_p_relax": float(r.corr_p_relax[-1]), "steps": int(r.steps[-1])}


@claim("A.joint.tight", chapter=CHAPTER, checks="paper A, Theorem 5; Fig. 3 (tight)",
       statement="In the tight configuration (every selected token a head support vector) joint normalized GD "
                 "sends v to the head-SVM direction v_mm and p to the ATT-SVM direction p_mm.",
       threshold="corr(v, v_mm) >= 0.999 and corr(p, p_mm) >= 0.999")
def _claim_tight() -> Measured:
    r = run().tight
    m = _final(r)
    return Measured(m, m["corr_v_vmm"] >= 0.999 and m["corr_p_pmm"] >= 0.999)


@claim("A.joint.loose", chapter=CHAPTER, checks="paper A, Theorem 6; Fig. 3 (loose)",
       statement="In the loose configuration (third input not a head support vector) p goes to the relaxed "
                 "ATT-SVM direction p_relax, which differs from p_mm, and v still goes to v_mm.",
       threshold="corr(p, p_relax) >= 0.999 and corr(p, p_mm) < 0.99")
def _claim_loose() -> Measured:
    r = run().loose
    m = _final(r)
    m["support"] = list(r.support)
    return Measured(m, m["corr_p_relax"] >= 0.999 and m["corr_p_pmm"] < 0.99)


@claim("A.joint.probabilities", chapter=CHAPTER, checks="paper A, Fig. 3(c)",
       statement="In both configurations the averaged softmax probability of the selected tokens and the "
                 "averaged logistic output probability sigma(Y f(X)) both tend to 1.",
       threshold="both >= 0.99 at the end, in both cases")
def _claim_probs() -> Measured:
    res = run()
    m = {c: {"selected_prob": float(res[c].selected_prob[-1]), "output_prob": float(res[c].mean_output_prob[-1])}
         for c in CASES}
    return Measured(m, all(min(d.values()) >= 0.99 for d in m.values()))


# ---------------------------------------------------------------- figures
def plot_paths_case(r: JointRun, first: int = 200, ax=None):
    """Paths of ``p`` and ``v`` (first ``first`` steps) with ``p_mm``, ``p_relax`` and ``v_mm`` rays."""
    keep = r.steps <= first
    paths = np.stack([r.p[keep], r.v[keep]], axis=1)
    dirs = {"$p^{mm}$": r.p_mm, "$v^{mm}$": r.v_mm}
    if not np.allclose(geometry.correlation(r.p_mm, r.p_relax), 1.0):
        dirs["$p^{relax}$"] = r.p_relax
    fig = plot_paths(paths, directions=dirs, labels=["$p$", "$v$"], ax=ax)
    ax = fig.axes[0] if ax is None else ax
    cs = colors(4)
    for i, x in enumerate(r.X[:, 1]):
        ax.scatter(*x, marker="o" if r.Y[i] > 0 else "x", color=cs[i % 4] if r.Y[i] > 0 else "k", s=45, zorder=4)
        ax.annotate(f"$x_{i + 1}$", x, textcoords="offset points", xytext=(5, 4), fontsize=9)
    ax.set_xlabel("first coordinate")
    ax.set_ylabel("second coordinate")
    return fig


def plot_both_paths(res: JointResult | None = None, first: int = 200):
    """Side by side: the tight and the loose case."""
    import matplotlib.pyplot as plt

    res = res or run()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    for ax, c in zip(axes, CASES):
        plot_paths_case(res[c], first, ax=ax)
    fig.tight_layout()
    return fig


def plot_correlations(res: JointResult | None = None):
    """``1 - correlation`` of ``v`` with ``v_mm`` and of ``p`` with ``p_mm`` and ``p_relax``."""
    import matplotlib.pyplot as plt

    res = res or run()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, c in zip(axes, CASES):
        r = res[c]
        s = r.steps[1:]
        gap = lambda c: np.clip(1 - c[1:], 1e-16, None)
        plot_curves(s, {"v vs $v^{mm}$": gap(r.corr_v), "p vs $p^{mm}$": gap(r.corr_p_mm),
                        "p vs $p^{relax}$": gap(r.corr_p_relax)},
                    xlabel=f"iteration ({c})", ylabel="1 - correlation", logx=True, logy=True, ax=ax,
                    styles={"p vs $p^{relax}$": "--"})
    fig.tight_layout()
    return fig


def plot_probabilities(res: JointResult | None = None, first: int = 200):
    """Fig. 3(c): selected-token softmax probability and logistic output probability, both cases."""
    res = res or run()
    r0 = res.tight
    keep = r0.steps <= first
    ys = {}
    for c in CASES:
        r = res[c]
        ys[f"softmax prob. of selected tokens ({c})"] = r.selected_prob[keep]
        ys[f"output prob. $\\sigma(Yf)$ ({c})"] = r.mean_output_prob[keep]
    styles = {k: ("-" if "tight" in k else "--") for k in ys}
    return plot_curves(r0.steps[keep], ys, xlabel="iteration", ylabel="probability", styles=styles)


FIGURES = {"fig-joint-paths": lambda: plot_both_paths(), "fig-joint-corr": lambda: plot_correlations(),
           "fig-joint-probs": lambda: plot_probabilities()}
