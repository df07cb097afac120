"""One seaborn theme and the figure types the book repeats.

Figures carry no titles (the book gives captions); axis labels are lowercase.
Every function takes an optional ``ax`` and returns the figure.
"""
from __future__ import annotations

import matplotlib

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

PALETTE = "colorblind"


def set_theme() -> None:
    """The book's one theme (call once per notebook)."""
    sns.set_theme(context="notebook", style="whitegrid", palette=PALETTE,
                  rc={"figure.figsize": (6.0, 4.0), "figure.dpi": 100, "savefig.dpi": 150,
                      "axes.titlesize": 11, "legend.frameon": False})


def colors(k: int) -> list:
    return sns.color_palette(PALETTE, k)


def _ax(ax, figsize=None):
    if ax is None:
        fig, ax = plt.subplots(figsize=figsize)
    return ax.figure, ax


def plot_paths(paths, *, directions=None, tokens=None, labels=None, ax=None, arrow_len: float | None = None):
    """Iterates of ``p`` in the plane with reference directions and the keys.

    Parameters
    ----------
    paths : ``(S, starts, 2)`` recorded iterates.
    directions : dict name -> ``(2,)`` directions drawn as rays from the origin (e.g. GMM, LMM).
    tokens : ``(n, T, 2)`` keys, drawn as markers (one marker per input).
    labels : legend labels for the starts.
    """
    fig, ax = _ax(ax, (5.5, 5.0))
    paths = np.asarray(paths)
    cs = colors(paths.shape[1])
    for j in range(paths.shape[1]):
        ax.plot(paths[:, j, 0], paths[:, j, 1], color=cs[j], lw=1.6,
                label=None if labels is None else labels[j])
        ax.plot(paths[0, j, 0], paths[0, j, 1], "o", color=cs[j], ms=4)
    lim = np.abs(paths).max() * 1.05 if arrow_len is None else arrow_len
    for k, (name, q) in enumerate((directions or {}).items()):
        q = np.asarray(q, float)
        q = q / np.linalg.norm(q) * lim
        ax.plot([0, q[0]], [0, q[1]], ls="--", lw=1.2, color="0.2" if k == 0 else "0.55", label=name)
    if tokens is not None:
        markers = "os^Dv<>"
        for i, keys in enumerate(np.asarray(tokens)):
            ax.scatter(keys[:, 0], keys[:, 1], marker=markers[i % len(markers)], s=40,
                       facecolors="none", edgecolors="k", lw=1, zorder=3)
    ax.set_xlabel("$p_1$")
    ax.set_ylabel("$p_2$")
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(loc="best", fontsize=8)
    return fig


def start_label(start) -> str:
    """Legend label of a start point, e.g. ``start (0, -1.5)``."""
    return "start (" + ", ".join(f"{float(x):g}" for x in np.round(np.asarray(start, float), 3) + 0.0) + ")"


def plot_curves(x, ys: dict, *, xlabel: str, ylabel: str, ax=None, logx=False, logy=False, styles=None):
    """Several curves against a common x; ``ys`` maps label -> ``(S,)`` or ``(S, k)`` (drawn thin)."""
    fig, ax = _ax(ax)
    for k, (name, y) in enumerate(ys.items()):
        y = np.asarray(y)
        c = colors(len(ys))[k]
        style = (styles or {}).get(name, "-")
        if y.ndim == 1:
            ax.plot(x, y, style, color=c, label=name, lw=1.8)
        else:
            for j in range(y.shape[1]):
                ax.plot(x, y[:, j], style, color=c, lw=1.0, alpha=0.8, label=name if j == 0 else None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.legend(loc="best", fontsize=8)
    return fig




def attention_heatmap(weights, *, row_labels=None, col_labels=None, ax=None, cmap="rocket_r", cbar=True):
    """Heatmap of attention weights ``(rows, cols)`` (e.g. sequences x tokens, or a patch grid)."""
    fig, ax = _ax(ax)
    sns.heatmap(np.asarray(weights), ax=ax, cmap=cmap, vmin=0, cbar=cbar,
                xticklabels=col_labels if col_labels is not None else False,
                yticklabels=row_labels if row_labels is not None else False)
    return fig


def token_scatter(x, y, *, xlabel: str, ylabel: str, hue=None, size=None, ax=None, alpha=0.5):
    """Scatter of per-token statistics (e.g. ``E_s^T v`` against ``alpha_s``)."""
    fig, ax = _ax(ax)
    sns.scatterplot(x=np.asarray(x), y=np.asarray(y), hue=hue, size=size, ax=ax, s=12 if size is None else None,
                    alpha=alpha, edgecolor=None, legend=hue is not None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return fig


def save(fig, path_stem: str) -> list[str]:
    """Write ``fig`` as ``<path_stem>.png`` and ``.pdf``; return the paths."""
    out = []
    for ext in ("png", "pdf"):
        fig.savefig(f"{path_stem}.{ext}", bbox_inches="tight")
        out.append(f"{path_stem}.{ext}")
    return out


def use_headless() -> None:
    """Switch to the Agg backend (figures CLI, tests)."""
    matplotlib.use("Agg", force=True)
