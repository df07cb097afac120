"""How the loss shapes the path (paper A, Fig. 4).

Two inputs of two tokens, ``X_1 = [(0,0,0), (1,1,C)]``, ``X_2 = [(0,0,0), (1,-1,1)]``,
``Y = (1, 1)``, keys = first two coordinates, scores = third: token 1 is
optimal in both inputs and the GMM is ``(1, 0)`` for every ``C``. Normalized
GD (step 0.1, 1000 steps, ``p0 = 0``) with the correlation, logistic and
exponential losses, for ``C in {1..10, 100}``. All 3 x 11 runs are one batch:
the loss is a *stacked* loss whose first batch index picks the loss.

The correlation loss weighs input ``i`` by ``gamma_i`` (its score), the
logistic loss by ``gamma_i sigma(-u_i)``: the first favours the high-scoring
input 1 (the path bends toward ``p_2 > 0``), the second the low-scoring input 2
(``p_2 < 0``). The limit is the same.

The chapter ``book/part1/07_losses.md`` shows these runs.
"""

from __future__ import annotations

__all__ = [
    "CHAPTER",
    "LOSS_NAMES",
    "C_VALUES",
    "EARLY",
    "stacked_loss",
    "problem",
    "predicted_side",
    "LossResult",
    "run",
    "plot_paths_by_loss",
    "plot_side",
    "FIGURES",
]

import functools
from dataclasses import dataclass

import numpy as np
import torch

from .. import config, geometry, grad, instances, losses, svm, train
from ..ledger import Measured, claim
from ..model import AttentionProblem
from ..plotting import LINESTYLES, colors, three_panels

CHAPTER = "07_losses"
LOSS_NAMES = ("correlation", "logistic", "exponential")
C_VALUES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100)
EARLY = 200
"""The transient window: the iterations the published figure plots."""


def stacked_loss(names) -> losses.Loss:
    """One :class:`~mmtoken.losses.Loss` applying ``names[j]`` to batch index ``j`` (the first batch dim)."""
    parts = [losses.get_loss(n) for n in names]

    def each(attr):
        def f(*args):
            if args[0].shape[0] != len(parts):
                raise ValueError(
                    f"the stacked loss needs a first batch dimension of {len(parts)}, got shape {tuple(args[0].shape)}"
                )
            return torch.stack([getattr(l, attr)(*(a[j] for a in args)) for j, l in enumerate(parts)])

        return f

    return losses.Loss("+".join(names), each("value"), each("deriv"), each("log_neg_deriv"), each("excess"))


def problem(C_values=C_VALUES, n_losses: int = len(LOSS_NAMES)) -> AttentionProblem:
    """The Fig. 4 instances, batch ``(n_losses, len(C_values))``."""
    K = np.stack([instances.fig4(C).K for C in C_values])
    G = np.stack([instances.fig4(C).gamma for C in C_values])
    return AttentionProblem(np.repeat(K[None], n_losses, 0), np.repeat(G[None], n_losses, 0))


def predicted_side(C: float, loss: str) -> float:
    """Closed form of ``-grad L(0)`` in the second coordinate, from the gradient weights.

    At ``p = 0`` both softmaxes are uniform, ``u_i = gamma_i / 2`` and
    ``-grad L(0) = (1/n) sum_i |l'(gamma_i/2)| (1/4) gamma_i k_i``
    with ``k_1 = (1, 1)``, ``gamma_1 = C``, ``k_2 = (1, -1)``, ``gamma_2 = 1``.
    Its second coordinate decides on which side of the GMM ``(1, 0)`` the path starts.
    """
    d = losses.get_loss(loss).deriv
    w1 = -float(d(torch.tensor(C / 2.0, dtype=torch.float64))) * C
    w2 = -float(d(torch.tensor(0.5, dtype=torch.float64))) * 1.0
    return (w1 - w2) / 8.0


@dataclass
class LossResult:
    C: np.ndarray  # (nC,)
    losses: tuple
    steps: np.ndarray  # (S,)
    p: np.ndarray  # (S, nL, nC, 2)
    gmm: np.ndarray  # (2,)
    long_steps: np.ndarray  # continuation: (S2,) step indices counted from 0
    long_p: np.ndarray  # (S2, nL, nC, 2)
    grad0: np.ndarray  # (nL, nC, 2) -grad L(0) from the stable gradient

    @property
    def corr(self) -> np.ndarray:
        return geometry.correlation(self.p, self.gmm)

    @property
    def long_corr(self) -> np.ndarray:
        return geometry.correlation(self.long_p, self.gmm)

    def early_side(self) -> np.ndarray:
        """``(nL, nC)`` mean of ``p_2 / ||p||`` over iterations 1..EARLY: signed deviation from the GMM."""
        keep = (self.steps >= 1) & (self.steps <= EARLY)
        q = self.p[keep]
        return (q[..., 1] / np.linalg.norm(q, axis=-1)).mean(0)

    def index(self, loss: str, C: float) -> tuple[int, int]:
        return self.losses.index(loss), int(np.flatnonzero(self.C == C)[0])


def run(scale: str | None = None) -> LossResult:
    return _run(scale or config.scale())


@functools.lru_cache(maxsize=None)
def _run(scale: str) -> LossResult:
    steps = 1000  # the published run
    long_steps = config.pick(quick=1500, paper=20_000, which=scale)
    pr = problem()
    loss = stacked_loss(LOSS_NAMES)
    p0 = torch.zeros(len(LOSS_NAMES), len(C_VALUES), 2, dtype=torch.float64)
    with torch.inference_mode():
        h = train.train_p(pr, p0, steps=steps, lr=0.1, loss=loss, record_every=1, record_probs=False)
        # continuation of the same runs with a larger normalized step (1.0): only ||p|| grows faster
        h2 = train.train_p(
            pr,
            h.p[-1],
            steps=long_steps,
            lr=1.0,
            loss=loss,
            record_every=config.pick(quick=10, paper=100, which=scale),
            record_probs=False,
        )
        g0 = -grad.grad_p(pr, p0 + 0.0, loss).value()
    gmm = svm.att_svm(instances.fig4(1).K, [1, 1]).x
    return LossResult(
        np.array(C_VALUES, float), LOSS_NAMES, h.steps, h.p.numpy(), gmm, h2.steps, h2.p.numpy(), g0.cpu().numpy()
    )


@claim(
    "A.losses.transient",
    chapter=CHAPTER,
    kind="observation",  # measured beyond what a theorem guarantees (see the chapter)
    competitor="the sides swapped: each loss's early path on the side predicted for the other",
    against=lambda: _transient_check(swap=True),
    checks="paper A, Fig. 4 (C = 100)",
    statement="For C = 100 the early paths (iterations 1-200) of the correlation and logistic losses deviate from "
    "the GMM direction on opposite sides, each on the side predicted by the gradient weights at p = 0; "
    "continued, both reach the GMM direction.",
    threshold="opposite signs of the mean p_2/||p|| over iterations 1-200, each matching the predicted sign; "
    "final correlation with the GMM >= 0.999 for both",
)
def _claim_transient() -> Measured:
    return _transient_check(swap=False)


def _transient_check(swap: bool) -> Measured:
    r = run()
    side = r.early_side()
    out, ok = {}, True
    for loss, other in (("correlation", "logistic"), ("logistic", "correlation")):
        j, c = r.index(loss, 100)
        pred = predicted_side(100, other if swap else loss)
        out[loss] = {
            "early_side": float(side[j, c]),
            "predicted_side": float(np.sign(pred)),
            "final_corr": float(r.long_corr[-1, j, c]),
        }
        ok &= bool(np.sign(side[j, c]) == np.sign(pred) != 0 and r.long_corr[-1, j, c] >= 0.999)
    ok &= bool(np.sign(out["correlation"]["early_side"]) == -np.sign(out["logistic"]["early_side"]))
    return Measured(out, ok)


# ---------------------------------------------------------------- figures
def plot_paths_by_loss(r: LossResult | None = None, first: int = EARLY):
    """One titled panel per loss: the paths for every ``C`` (first ``first`` iterations) and the GMM ray;
    one legend under the panels."""
    import seaborn as sns

    r = r or run()
    keep = r.steps <= first
    fig, axes = three_panels(list(r.losses), aspect=1.5, sharex=True, sharey=True)
    cs = sns.color_palette("viridis", len(r.C))  # C is ordered: a sequential palette, dashes cycled
    lim = np.abs(r.p[keep]).max() * 1.05
    for ax, j in zip(axes, range(len(r.losses))):
        for c, C in enumerate(r.C):
            ax.plot(
                r.p[keep, j, c, 0],
                r.p[keep, j, c, 1],
                color=cs[c],
                lw=1.4,
                label=f"C = {C:g}",
                linestyle=LINESTYLES[c % len(LINESTYLES)],
            )
        ax.plot([0, lim], [0, 0], color="0.2", lw=1.0, ls=(0, (1, 1)), label="GMM direction")
        ax.set_xlabel("$p_1$")
        ax.set_aspect("equal", adjustable="box")  # angles as they are; shared axes need "box"
    axes[0].set_ylabel("$p_2$")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=6)
    return fig


def plot_side(r: LossResult | None = None):
    """Mean early deviation ``p_2/||p||`` against ``C`` for each loss, with the predicted sign."""
    import matplotlib.pyplot as plt

    r = r or run()
    side = r.early_side()
    fig, ax = plt.subplots(figsize=(6, 3.8), layout="constrained")
    cs = colors(len(r.losses))
    for j, loss in enumerate(r.losses):
        ax.plot(np.arange(len(r.C)), side[j], color=cs[j], marker="osD"[j % 3], ls=LINESTYLES[j], label=loss)
    ax.axhline(0, color="0.3", lw=0.8)
    ax.set_xticks(np.arange(len(r.C)), [f"{C:g}" for C in r.C])
    ax.set_xlabel("score c of the first input")
    ax.set_ylabel("mean $p_2 / \\|p\\|$, iterations 1-200")
    ax.legend(loc="best")
    return fig


FIGURES = {"fig-losses-paths": lambda: plot_paths_by_loss(), "fig-losses-side": lambda: plot_side()}


# ---------------------------------------------------------------- Theorem 1's own object, for two losses
REG_RADII = np.logspace(0.0, 2.0, 9)
"""Radii of the regularization paths (chapter 2's grid)."""
TILT = np.array([np.cos(np.radians(5.0)), np.sin(np.radians(5.0))])
"""The competitor of ``A.losses.reg_path``: the GMM direction (1, 0) tilted 5 degrees toward the first input's
key, the side the early correlation-loss path bends to (correlation 0.9962 with the GMM)."""


@functools.lru_cache(maxsize=None)
def reg_paths() -> dict[str, np.ndarray]:
    """``argmin_{||p|| <= R} L(p)`` on the C = 100 instance of Fig. 4 for the correlation and logistic losses."""
    from ..long_paths import planar_reg_path

    pr = instances.fig4(100).problem()
    return {loss: planar_reg_path(pr, REG_RADII, iters=300, loss=loss) for loss in ("correlation", "logistic")}


def _reg_check(ref, loss: str) -> Measured:
    i10 = int(np.argmin(np.abs(REG_RADII - 10.0)))
    c = geometry.correlation(reg_paths()[loss], ref)
    out = {"loss": loss, "corr_R10": round(float(c[i10]), 4), "corr_R100": round(float(c[-1]), 4)}
    return Measured(out, bool(c[-1] >= 0.999 and (1 - c[-1]) < (1 - c[i10])))


def _gmm() -> np.ndarray:
    return svm.att_svm(instances.fig4(100).K, [1, 1]).x


REG_THRESHOLD = (
    "correlation with the GMM >= 0.999 at R = 100 and 1 - corr at R = 100 below 1 - corr at R = 10 "
    "(chapter 2's bar for the same theorem, fixed before these paths were computed)"
)


@claim(
    "A.losses.reg_path",
    chapter=CHAPTER,
    checks="paper A, Theorem 1 with its own object, the regularization path, for the correlation loss "
    "(Assumption A); Fig. 4 (C = 100)",
    statement="On the C = 100 instance of Fig. 4 the regularization path of the correlation loss turns to the "
    "GMM direction as R grows.",
    threshold=REG_THRESHOLD,
    competitor="the GMM tilted 5 degrees toward the first input's key (correlation 0.9962 with the GMM)",
    against=lambda: _reg_check(TILT, "correlation"),
)
def _claim_reg_path() -> Measured:
    return _reg_check(_gmm(), "correlation")


@claim(
    "A.losses.reg_path_logistic",
    chapter=CHAPTER,
    kind="observation",  # the limit is Theorem 1's; how soon it is reached at C = 100 is not
    checks="paper A, Theorem 1's regularization path for the logistic loss at the radii we can compute; "
    "Fig. 4 (C = 100)",
    statement="On the C = 100 instance of Fig. 4 the regularization path of the logistic loss is at the GMM "
    "direction by R = 100.",
    threshold=REG_THRESHOLD,
    known_miss="measured (judging run, radii 1-100): correlation 0.707 at R = 10 (the second input's own "
    "direction (1, -1)) and 0.886 at R = 100; a later run beyond the grid gave 0.972, 0.988, 0.993, 0.996, "
    "0.997 at R = 200, 300, 400, 500, 600. Theorem 1 is a limit: the first input's loss weight is about e^-100, so its "
    "margin counts only once e^(-R m) of the second input has fallen to that size; past R ~ 700 the excess "
    "loss underflows and the path cannot be computed. The correlation loss (A.losses.reg_path) has no such "
    "weight and is at 0.9997 by R = 100.",
    competitor="the GMM tilted 5 degrees toward the first input's key (correlation 0.9962 with the GMM)",
    against=lambda: _reg_check(TILT, "logistic"),
)
def _claim_reg_path_logistic() -> Measured:
    return _reg_check(_gmm(), "logistic")
