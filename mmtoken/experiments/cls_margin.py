"""Chapter 11 (paper B): with ``E = E^1`` fixed, gradient flow on the <cls> embedding maximizes the margin.

The ``p`` phase is the paper-A problem with keys ``K_it = E^1_{x_it}``, scores
``gamma_it = y_i E^1_{x_it}^T v`` and a padding mask
(:func:`mmtoken.embedding.cls_problem`). We train ``p`` from ``0`` by
normalized GD with the saturation-safe gradient and compare with the
ATT-SVM of the important-token selection.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import torch

from .. import config, embedding, geometry, svm, synthetic
from ..ledger import Measured, claim
from ..plotting import colors, token_scatter
from ..tokens import TokenStats, token_stats
from .one_step import ETA, data, head, init

CHAPTER = "11_cls_margin"
SIGMA0 = 0.5       # initialisation scale of E^0 (||E_s^0|| ~ SIGMA0)
LR = 0.05          # normalized-GD step while ||p|| is small
REL_LR = 0.005     # then a step of REL_LR * ||p|| (refreshed every STAGE steps)
STAGE = 50
ANNEAL = 0.1       # last ANNEAL_FRAC of the steps: relative step REL_LR * ANNEAL (smaller zig-zag)
ANNEAL_FRAC = 0.2


@dataclass
class ClsResult:
    steps: np.ndarray          # (S,)
    norm: np.ndarray           # (S,) ||p||
    corr: np.ndarray           # (S,) correlation of p with p_mm
    min_attn: np.ndarray       # (S,) min over sequences of the attention on the important token
    min_margin: np.ndarray     # (S,) min_{i, t != important} (k_i* - k_it)^T p / ||p||
    p_mm: np.ndarray           # (d,) ATT-SVM solution for the important-token selection
    svm_margin: float          # 1 / ||p_mm||
    kkt: float                 # largest KKT residual of the SVM
    important_is_optimal: bool  # the important token has the top score in every sequence
    n_support: int             # active constraints at p_mm
    logits: np.ndarray         # (V,) final p^T E_s / ||p||
    values: np.ndarray         # (V,) E_s^T v
    stats: TokenStats
    kind: np.ndarray
    attn_final: np.ndarray     # (n, T) final attention
    tokens: np.ndarray         # (n, T)
    important: np.ndarray      # (n,)
    alignment: float           # corr(E^1 v, alpha) at this initialisation


def run(scale: str | None = None) -> ClsResult:
    return _run(scale or config.scale())


@functools.lru_cache(maxsize=None)
def _run(scale: str) -> ClsResult:
    steps = config.pick(quick=2500, paper=20000, which=scale)
    ds = data(scale)
    v = head()
    E0 = init(ds.vocab_size, [SIGMA0], 1)[0, 0]
    E1 = embedding.one_step(E0, v, ds.tokens, ds.labels, ETA, ds.mask)
    problem = embedding.cls_problem(E1, v, ds.tokens, ds.labels, ds.mask)
    important = ds.important.numpy()
    is_opt = bool((problem.optimal_tokens().cpu().numpy() == important).all())
    mask = ds.mask.numpy()
    K = problem.K.cpu().numpy()
    sol = svm.att_svm(K, important, mask=mask)
    tail = int(steps * ANNEAL_FRAC)
    h = embedding.train_cls(E1, v, ds.tokens, ds.labels, ds.mask, steps=steps - tail, lr=LR, rel_lr=REL_LR,
                            stage=STAGE, record_every=50)
    h2 = embedding.train_cls(E1, v, ds.tokens, ds.labels, ds.mask, steps=tail, lr=LR, rel_lr=REL_LR * ANNEAL,
                             stage=STAGE, record_every=50, p0=h.p[-1])
    step_rec = np.concatenate([h.steps, h2.steps[1:] + steps - tail])
    P = torch.cat([h.p, h2.p[1:]]).numpy()
    probs = torch.cat([h.probs, h2.probs[1:]])
    rows = np.arange(ds.n)
    min_attn = probs[:, rows, ds.important].min(-1).values.numpy()
    # normalized margins of every constraint (padding and the important token excluded)
    z = np.einsum("ntm,sm->snt", K, P)
    gap = z[:, rows, important][..., None] - z
    gap[:, rows, important] = np.inf
    gap[:, ~mask] = np.inf
    with np.errstate(invalid="ignore", divide="ignore"):
        min_margin = gap.reshape(len(P), -1).min(-1) / np.linalg.norm(P, axis=-1)
    m_svm = geometry.margins(K, important, sol.x)
    n_support = int((np.abs(m_svm[mask] - 1) <= 1e-6).sum())
    stats = token_stats(ds.tokens.numpy(), ds.labels.numpy().astype(int), ds.vocab_size, pad_id=synthetic.PAD_ID)
    occ = stats.count > 0
    Ev = (E1 @ v).numpy()
    pf = P[-1]
    return ClsResult(step_rec, np.linalg.norm(P, axis=-1), geometry.correlation(P, sol.x), min_attn, min_margin,
                     sol.x, sol.margin, max(sol.kkt_residuals().values()), is_opt, n_support,
                     E1.numpy() @ pf / np.linalg.norm(pf), Ev, stats, ds.kind, probs[-1].numpy(),
                     ds.tokens.numpy(), important, float(geometry.correlation(Ev[occ], stats.alpha[occ])))


# ------------------------------------------------------------------ figures
def plot_convergence(r: ClsResult | None = None):
    """Against the step: ``1 - corr(p, p_mm)``, ``1 - min attention on the important token`` and the
    gap between the SVM margin and the normalized minimum margin of ``p``."""
    r = r or run()
    fig, ax = plt.subplots()
    c = colors(3)
    k = r.steps > 0
    ax.plot(r.steps[k], 1 - r.corr[k], color=c[0], label=r"1 - corr$(p, p^{mm})$")
    ax.plot(r.steps[k], 1 - r.min_attn[k], color=c[1], label="1 - min attention on the important token")
    gap = r.svm_margin - r.min_margin[k]
    ax.plot(r.steps[k], np.where(gap > 0, gap, np.nan) / r.svm_margin, color=c[2],
            label="(svm margin - min margin) / svm margin")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("distance to the limit")
    ax.legend(loc="best", fontsize=8)
    return fig


def plot_logits(r: ClsResult | None = None, ax=None):
    """Final attention logit ``p^T E_s / ||p||`` of each token against its posterior difference ``Delta_s``."""
    r = r or run()
    keep = r.stats.count > 0
    return token_scatter(r.stats.delta[keep], r.logits[keep], hue=r.kind[keep], ax=ax, alpha=0.8,
                         xlabel=r"posterior difference $\Delta_s$",
                         ylabel=r"attention logit $p^\top E_s / \Vert p\Vert$")


def plot_attention(r: ClsResult | None = None, rows: int = 12):
    """Final attention of the first ``rows`` sequences (rows) over their positions (columns)."""
    r = r or run()
    fig, ax = plt.subplots(figsize=(5.0, 3.6))
    from ..plotting import attention_heatmap

    attention_heatmap(r.attn_final[:rows], ax=ax, col_labels=list(range(r.attn_final.shape[1])))
    ax.scatter(r.important[:rows] + 0.5, np.arange(rows) + 0.5, marker="o", s=30, facecolors="none",
               edgecolors="0.6", lw=1)
    ax.set_xlabel("position")
    ax.set_ylabel("sequence")
    return fig


FIGURES = {"fig-cls-convergence": lambda: plot_convergence(), "fig-cls-logits": lambda: plot_logits(),
           "fig-cls-attention": lambda: plot_attention()}


# ------------------------------------------------------------------ claims
@claim("B.cls.selection", chapter=CHAPTER, checks="gradient flow on p selects the important tokens (paper B)",
       statement="With E = E^1 fixed, normalized GD on p from 0 puts all attention on the important token of every sequence.",
       threshold="min over sequences of the attention on the important token >= 0.999 at the end")
def _claim_selection() -> Measured:
    r = run()
    value = float(r.min_attn[-1])
    return Measured(value, value >= 0.999, f"{int(r.steps[-1])} steps, ||p|| = {r.norm[-1]:.1f}")


@claim("B.cls.direction", chapter=CHAPTER, checks="p converges in direction to the ATT-SVM with embeddings as keys (paper B)",
       statement="p/||p|| converges to the max-margin direction of the important-token selection (cvxpy ATT-SVM).",
       threshold="correlation of p with p_mm >= 0.9999 at the end")
def _claim_direction() -> Measured:
    r = run()
    value = float(r.corr[-1])
    return Measured(value, value >= 0.9999, f"{int(r.steps[-1])} steps, ||p|| / ||p_mm|| = {r.norm[-1] * r.svm_margin:.1f}")
