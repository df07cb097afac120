"""Chapter 10 (paper B): one gradient step on the embeddings aligns them with ``v`` by signed frequency.

At ``p = 0`` the attention is uniform, so the first gradient step on ``E``
has the closed form (:func:`mmtoken.embedding.one_step`)
``E_s^1 = E_s^0 + (eta/N) sum_i y_i sigma(-y_i f^0(X_i)) n_s(X_i)/T_i v``;
at small initialisation ``sigma(.) ~ 1/2`` and ``E_s^1 v ~ (eta/2) alpha_s ||v||^2``,
with an error bounded by ``|E_s^0 v| + (eta/4N) sum_i |f^0(X_i)| n_s(X_i)/T_i ||v||^2``.
We check the closed form against autograd, the bound at every scale, and
sweep the initialisation scale. Both claims are *consistency* checks: they
follow from the derivation and can only fail if the code disagrees with it.
"""

from __future__ import annotations

__all__ = [
    "CHAPTER",
    "DATA",
    "D",
    "ETA",
    "data",
    "head",
    "init",
    "OneStepResult",
    "run",
    "plot_alignment",
    "plot_scale",
    "FIGURES",
]

import functools
from dataclasses import dataclass

import numpy as np
import torch

from .. import config, embedding, geometry, synthetic
from ..corpus_stats import TokenStats, token_stats
from ..ledger import Measured, claim
from ..plotting import colors, subplots, token_scatter

CHAPTER = "10_one_step"

# The data model and the step (shared with chapter 11, which imports these).
DATA = dict(T=8, n_pos=2, n_neg=2, n_neutral=40, min_len=5, seed=0)
D = 64  # embedding dimension (>= V = 45: embeddings in general position)
ETA = 30.0  # step size of the one step on E


def data(scale: str | None = None) -> synthetic.SyntheticData:
    """The synthetic corpus: ``N`` = 200 (quick) / 2000 (paper) sequences."""
    scale = scale or config.scale()
    return synthetic.generate(config.pick(quick=200, paper=2000, which=scale), **DATA)


def head(d: int = D, seed: int = 1) -> torch.Tensor:
    """The fixed output vector ``v``: a seeded random unit vector."""
    g = torch.Generator().manual_seed(seed)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    return v / v.norm()


def init(V: int, scales, seeds: int, d: int = D, seed: int = 2) -> torch.Tensor:
    """``E^0`` with i.i.d. ``N(0, sigma0^2/d)`` entries (so ``||E_s^0|| ~ sigma0``): ``(seeds, len(scales), V, d)``."""
    g = torch.Generator().manual_seed(seed)
    Z = torch.randn(seeds, 1, V, d, generator=g, dtype=torch.float64)
    return Z * torch.as_tensor(np.asarray(scales, float))[None, :, None, None] / np.sqrt(d)


@dataclass
class OneStepResult:
    scales: np.ndarray  # (S,) initialisation scales sigma0
    corr: np.ndarray  # (seeds, S) cosine of (E_s^1 v)_s with (alpha_s)_s over occurring tokens
    closed_vs_autograd: np.ndarray  # (S,) relative error of the closed form against autograd (seed 0)
    half_gap: np.ndarray  # (seeds, S) relative distance of E^1 v from the sigma = 1/2 line (eta/2) alpha
    bound_ratio: np.ndarray  # (seeds, S) max over occurring tokens of |E^1 v - (eta/2) alpha ||v||^2| / bound
    bound_rel: np.ndarray  # (seeds, S) max over occurring tokens of bound / ((eta/2) max_s |alpha_s| ||v||^2)
    Ev: np.ndarray  # (S, V) E_s^1 v for seed 0
    stats: TokenStats
    kind: np.ndarray  # (V,)
    occurs: np.ndarray  # (V,) bool
    eta: float
    n: int
    V: int


def run(scale: str | None = None) -> OneStepResult:
    return _run(scale or config.scale())


@functools.lru_cache(maxsize=None)
def _run(scale: str) -> OneStepResult:
    ds = data(scale)
    v = head()
    scales = np.logspace(-3, 1, 13)
    seeds = config.pick(quick=8, paper=64, which=scale)
    stats = token_stats(ds.tokens.numpy(), ds.labels.numpy().astype(int), ds.vocab_size, pad_id=synthetic.PAD_ID)
    occurs = stats.count > 0
    E0 = init(ds.vocab_size, scales, seeds)
    with torch.inference_mode():
        E1 = embedding.one_step(E0, v, ds.tokens, ds.labels, ETA, ds.mask)  # all seeds and scales at once
    Ev = (E1 @ v).numpy()  # (seeds, S, V)
    alpha = stats.alpha
    corr = geometry.correlation(Ev[..., occurs], alpha[occurs])
    line = ETA / 2 * alpha * float(v @ v)
    half_gap = np.linalg.norm(Ev[..., occurs] - line[occurs], axis=-1) / np.linalg.norm(line[occurs])
    bound = _error_bound(E0, v, ds)  # (seeds, S, V)
    err = np.abs(Ev - line)
    bound_ratio = (err[..., occurs] / bound[..., occurs]).max(-1)
    bound_rel = bound[..., occurs].max(-1) / np.abs(line[occurs]).max()
    # the independent computation: autograd through embedding.forward, seed 0, every scale
    err = []
    for j in range(len(scales)):
        a = E1[0, j]
        b = embedding.one_step_autograd(E0[0, j], v, ds.tokens, ds.labels, ETA, ds.mask)
        err.append(float((a - b).norm() / (b - E0[0, j]).norm()))
    return OneStepResult(
        scales,
        corr,
        np.array(err),
        half_gap,
        bound_ratio,
        bound_rel,
        Ev[0],
        stats,
        ds.kind,
        occurs,
        ETA,
        ds.n,
        ds.vocab_size,
    )


def _error_bound(E0: torch.Tensor, v: torch.Tensor, ds: synthetic.SyntheticData) -> np.ndarray:
    """Bound on ``|E_s^1 v - (eta/2) alpha_s ||v||^2|``, ``(..., V)``, from ``|sigma(x) - 1/2| <= |x|/4``:
    ``|E_s^0 v| + (eta / 4N) sum_i |f^0(X_i)| C_is ||v||^2`` with ``C = frequencies(tokens)``."""
    C = embedding.frequencies(ds.tokens, ds.vocab_size, ds.mask, E0.dtype)  # (N, V)
    f0 = (E0 @ v) @ C.T  # (..., N)
    b = (E0 @ v).abs() + ETA / (4 * ds.n) * (f0.abs() @ C) * float(v @ v)
    return b.numpy()


# ------------------------------------------------------------------ figures
def plot_alignment(r: OneStepResult | None = None, scale_index: int = 0, ax=None):
    """``E_s^1 v`` against ``alpha_s`` at one initialisation scale, with the line ``(eta/2) alpha``."""
    r = r or run()
    keep = r.occurs
    fig = token_scatter(
        r.stats.alpha[keep],
        r.Ev[scale_index, keep],
        hue=r.kind[keep],
        ax=ax,
        alpha=0.8,
        xlabel=r"signed frequency $\alpha_s$",
        ylabel=r"$E_s^{1\top} v$",
    )
    ax = fig.axes[0]
    x = np.linspace(r.stats.alpha[keep].min(), r.stats.alpha[keep].max(), 2)
    ax.plot(x, r.eta / 2 * x, "--", color="0.3", lw=1, label=r"$(\eta/2)\,\alpha_s$")
    ax.legend(loc="upper left")
    return fig


def plot_scale(r: OneStepResult | None = None):
    """Against the initialisation scale (median and range over seeds): the correlation of ``E^1 v``
    with ``alpha`` (panel "correlation") and the relative distance of ``E^1 v`` from the line
    ``(eta/2) alpha`` (panel "distance to the line")."""
    r = r or run()
    fig, (a1, a2) = subplots(2, titles=["correlation", "distance to the line"])
    c = colors(2)
    for ax, y, label, k in (
        (a1, r.corr, r"corr$(E^1 v, \alpha)$", 0),
        (a2, r.half_gap, r"relative distance to $(\eta/2)\alpha$", 1),
    ):
        ax.plot(r.scales, np.median(y, 0), "o-", color=c[k], ms=3)
        ax.fill_between(r.scales, y.min(0), y.max(0), color=c[k], alpha=0.25, lw=0)
        ax.set_xscale("log")
        ax.set_xlabel(r"initialisation scale $\sigma_0$")
        ax.set_ylabel(label)
    a2.set_yscale("log")
    return fig


FIGURES = {"fig-one-step-alignment": lambda: plot_alignment(), "fig-one-step-scale": lambda: plot_scale()}


# ------------------------------------------------------------------ claims
@claim(
    "B.one_step.closed_form",
    kind="consistency",
    chapter=CHAPTER,
    checks="closed form of the one step on E (paper B)",
    statement="The first gradient step on E at p = 0 equals the closed form with the exact sigma(-y f^0) factors "
    "(closed form against autograd through the model: an identity the code must satisfy).",
    threshold="relative error <= 1e-9 (float64), at every initialisation scale",
)
def _claim_closed_form() -> Measured:
    r = run()
    worst = float(r.closed_vs_autograd.max())
    return Measured(worst, worst <= 1e-9, f"{len(r.scales)} scales, N = {r.n}")


@claim(
    "B.one_step.alignment",
    kind="consistency",
    chapter=CHAPTER,
    checks="alignment of E^1 v with alpha_s (paper B)",
    statement="At small initialisation, E_s^1 v lies on a line through the origin in alpha_s (a consequence of the "
    "closed form; it can only fail if the two frequency counters disagree).",
    threshold="correlation (cosine over the vocabulary) >= 0.99, worst seed at sigma0 = 1e-3",
)
def _claim_alignment() -> Measured:
    r = run()
    worst = float(r.corr[:, 0].min())
    return Measured(worst, worst >= 0.99, f"sigma0 = {r.scales[0]:g}, {r.corr.shape[0]} seeds")
