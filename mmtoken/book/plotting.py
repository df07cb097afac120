"""One theme and the figure types the book repeats.

Figures carry no titles (the book gives captions); axis labels are lowercase; panels of a multi-panel
figure are titled with :func:`panel_titles`. Every plotting function takes an optional ``ax`` and returns
the figure. At ``figure.dpi`` = 100 a figure ``w`` inches wide is shown ``100 w`` CSS pixels wide, up to
the book's text column (:data:`COLUMN_WIDTH`), so a 10-point label is about 14 px on screen; wider
figures are shrunk to the column, their labels with them, so multi-panel figures are built with
:func:`subplots`, which fits the column. In a notebook, :func:`set_theme` renders figures as "retina"
PNGs (twice their pixel size), sharp on high-density screens.
"""

from __future__ import annotations

__all__ = [
    "OKABE_ITO",
    "PALETTE",
    "LINESTYLES",
    "MARKERS",
    "DIRECTION_STYLES",
    "COLUMN_WIDTH",
    "FONT_SIZES",
    "SEABORN_WHITEGRID",
    "SEABORN_NOTEBOOK",
    "theme_rc",
    "set_theme",
    "colors",
    "style",
    "figsize",
    "subplots",
    "one_panel",
    "two_panels",
    "three_panels",
    "panel_titles",
    "plot_paths",
    "start_label",
    "plot_curves",
    "attention_heatmap",
    "token_scatter",
    "save",
    "use_headless",
]

from collections.abc import Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from cycler import cycler
from matplotlib.colors import to_rgb

OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#000000", "#F0E442")
"""Okabe and Ito's colour-blind-safe palette, ordered so that any first k colours are far apart
(orange and vermillion, which look alike to many readers, are 2nd and 6th)."""

PALETTE = list(OKABE_ITO)
"""The book's palette (the theme's colour cycle)."""

LINESTYLES = ("-", "--", ":", "-.", (0, (5, 1.5, 1, 1.5, 1, 1.5)), (0, (1, 1)), (0, (8, 2)), (0, (3, 1, 1, 1)))
"""Line styles paired with :data:`PALETTE`: the k-th series differs in colour *and* dash."""

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
"""Markers paired with :data:`PALETTE` (see :func:`style`)."""

DIRECTION_STYLES = (("0.1", "--"), ("0.45", (0, (1, 1.5))), ("0.3", "-."), ("0.6", (0, (6, 2))))
"""(grey, dash) of reference directions (GMM, LMM, ...) in :func:`plot_paths`: each its own dash."""

COLUMN_WIDTH = 6.7
"""Width (inches) of the book's text column at ``figure.dpi`` = 100, on a 1280 px screen."""

FONT_SIZES = {
    "font.size": 10,
    "axes.labelsize": 10,
    "axes.titlesize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "legend.title_fontsize": 9,
}
"""Points; 10 pt is about 14 CSS px for a figure shown at its own width."""


SEABORN_WHITEGRID = {
    "figure.facecolor": "white",
    "axes.labelcolor": ".15",
    "xtick.direction": "out",
    "ytick.direction": "out",
    "xtick.color": ".15",
    "ytick.color": ".15",
    "axes.axisbelow": True,
    "grid.linestyle": "-",
    "text.color": ".15",
    "font.family": ["sans-serif"],
    "font.sans-serif": ["Arial", "DejaVu Sans", "Liberation Sans", "Bitstream Vera Sans", "sans-serif"],
    "lines.solid_capstyle": "round",
    "patch.edgecolor": "w",
    "patch.force_edgecolor": True,
    "xtick.top": False,
    "ytick.right": False,
    "axes.grid": True,
    "axes.facecolor": "white",
    "axes.edgecolor": ".8",
    "grid.color": ".8",
    "axes.spines.left": True,
    "axes.spines.bottom": True,
    "axes.spines.right": True,
    "axes.spines.top": True,
    "xtick.bottom": False,
    "ytick.left": False,
}
"""seaborn's ``whitegrid`` style (``seaborn.axes_style("whitegrid")``) without its default
colormap: written out so that the theme does not import seaborn (and scipy.stats, about a
second); tests/test_plotting.py checks it against seaborn. Images in the book name their colormap."""

SEABORN_NOTEBOOK = {
    "axes.linewidth": 1.25,
    "grid.linewidth": 1,
    "lines.linewidth": 1.5,
    "lines.markersize": 6,
    "patch.linewidth": 1,
    "xtick.major.width": 1.25,
    "ytick.major.width": 1.25,
    "xtick.minor.width": 1,
    "ytick.minor.width": 1,
    "xtick.major.size": 6,
    "ytick.major.size": 6,
    "xtick.minor.size": 4,
    "ytick.minor.size": 4,
    "font.size": 12,
    "axes.labelsize": 12,
    "axes.titlesize": 12,
    "xtick.labelsize": 11,
    "ytick.labelsize": 11,
    "legend.fontsize": 11,
    "legend.title_fontsize": 12,
}
"""seaborn's ``notebook`` context (``seaborn.plotting_context("notebook")``), checked likewise."""


def theme_rc() -> dict:
    """The rcParams :func:`set_theme` sets: seaborn's whitegrid style and notebook context, then the book's own."""
    return {
        **SEABORN_WHITEGRID,
        **SEABORN_NOTEBOOK,
        "figure.figsize": (6.0, 4.0),
        "figure.dpi": 100,
        "savefig.dpi": 200,
        "legend.frameon": False,
        **FONT_SIZES,
        "axes.prop_cycle": cycler(color=PALETTE) + cycler(linestyle=LINESTYLES),
        "lines.linewidth": 1.6,
        "lines.markersize": 5,
    }


def set_theme(retina: bool = True) -> None:
    """The book's one theme (call once per notebook): :func:`theme_rc`, and retina PNGs in a notebook.

    ``figure.figsize`` and ``figure.dpi`` are unchanged, so the text form of a figure
    (``<Figure size 600x400 ...>``, which nbval compares) is too.
    """
    matplotlib.rcParams.update(theme_rc())  # what seaborn.set_theme(...) sets, without importing seaborn
    if not retina:
        return
    try:  # ask IPython's inline backend for pixel-doubled PNGs (nothing to ask outside IPython)
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return
    if get_ipython() is not None:
        set_matplotlib_formats("retina")


def colors(k: int) -> list:
    """The first ``k`` colours of :data:`PALETTE` (cycling past its end), as RGB tuples."""
    return [to_rgb(PALETTE[i % len(PALETTE)]) for i in range(k)]


def style(k: int, *, marker: bool = False, markevery=None) -> dict:
    """Keyword arguments that draw series ``k`` distinguishably: colour, line style and (optionally) marker.

    ``ax.plot(x, y, **plotting.style(2, marker=True, markevery=50))``.
    """
    if not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"style: k must be a non-negative integer, got {k!r}")
    out = {"color": PALETTE[k % len(PALETTE)], "linestyle": LINESTYLES[k % len(LINESTYLES)]}
    if marker:
        out["marker"] = MARKERS[k % len(MARKERS)]
        if markevery is not None:
            out["markevery"] = markevery
    return out


def figsize(
    ncols: int = 1, nrows: int = 1, *, aspect: float | None = None, width: float | None = None
) -> tuple[float, float]:
    """Size (inches) of a figure of ``nrows`` x ``ncols`` panels that fits the text column.

    One panel: 6 in wide (600 px); two or more: the column width (:data:`COLUMN_WIDTH`).
    ``aspect`` is a panel's height over its width (default 2/3 for one panel, 0.8 for two,
    0.9 for three or more); the height adds room for labels and titles.
    """
    for name, v in (("ncols", ncols), ("nrows", nrows)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"figsize: {name} must be a positive integer, got {v!r}")
    if aspect is not None and not aspect > 0:
        raise ValueError(f"figsize: aspect must be positive, got {aspect!r}")
    if width is not None and not 0 < width <= COLUMN_WIDTH:
        raise ValueError(f"figsize: width must be in (0, {COLUMN_WIDTH}] inches (the column), got {width!r}")
    w = width or (6.0 if ncols == 1 else COLUMN_WIDTH)
    aspect = aspect or {1: 2 / 3, 2: 0.8}.get(ncols, 0.9)
    panel = (w - 0.55 * ncols) / ncols  # room for each panel's y labels
    return (round(w, 2), round(nrows * (panel * aspect + 0.65), 2))


def subplots(
    ncols: int = 1,
    nrows: int = 1,
    *,
    titles: Sequence[str] | None = None,
    aspect: float | None = None,
    width: float | None = None,
    **kwargs,
):
    """``plt.subplots`` at :func:`figsize`, with a constrained layout and optional panel titles.

    Returns ``(fig, axes)``, ``axes`` squeezed as ``plt.subplots`` does; other keyword arguments go to it.
    """
    kwargs.setdefault("layout", "constrained")
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize(ncols, nrows, aspect=aspect, width=width), **kwargs)
    if titles is not None:
        panel_titles(axes, titles)
    return fig, axes


def one_panel(**kwargs):
    """A single-panel figure: ``fig, ax = plotting.one_panel()``."""
    return subplots(1, 1, **kwargs)


def two_panels(titles: Sequence[str] | None = None, **kwargs):
    """Two panels side by side, across the column: ``fig, (a, b) = plotting.two_panels(["tight", "loose"])``."""
    return subplots(2, 1, titles=titles, **kwargs)


def three_panels(titles: Sequence[str] | None = None, **kwargs):
    """Three panels side by side, across the column."""
    return subplots(3, 1, titles=titles, **kwargs)


def panel_titles(axes, titles: Sequence[str], *, letters: bool = True, loc: str = "left") -> list:
    """Title each panel: ``(a) tight``, ``(b) loose`` (``letters=False``: the titles alone).

    ``axes`` is an Axes, a sequence or an array of them (filled row by row); the
    number of titles must match. Returns the title texts.
    """
    flat = list(np.ravel(np.asarray(axes, dtype=object)))
    titles = list(titles)
    if len(titles) != len(flat):
        raise ValueError(f"panel_titles: {len(titles)} titles for {len(flat)} panels")
    labels = [f"({chr(ord('a') + i)}) {t}" if letters else str(t) for i, t in enumerate(titles)]
    return [ax.set_title(label, loc=loc, fontsize=FONT_SIZES["axes.titlesize"]) for ax, label in zip(flat, labels)]


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
    for j in range(paths.shape[1]):
        st = style(j)
        ax.plot(paths[:, j, 0], paths[:, j, 1], lw=1.6, label=None if labels is None else labels[j], **st)
        ax.plot(paths[0, j, 0], paths[0, j, 1], "o", color=st["color"], ms=4)
    lim = np.abs(paths).max() * 1.05 if arrow_len is None else arrow_len
    for k, (name, q) in enumerate((directions or {}).items()):
        q = np.asarray(q, float)
        q = q / np.linalg.norm(q) * lim
        color, ls = DIRECTION_STYLES[k % len(DIRECTION_STYLES)]
        ax.plot([0, q[0]], [0, q[1]], ls=ls, lw=1.3, color=color, label=name)
    if tokens is not None:
        for i, keys in enumerate(np.asarray(tokens)):
            ax.scatter(
                *keys.T, marker=MARKERS[i % len(MARKERS)], s=40, facecolors="none", edgecolors="k", lw=1, zorder=3
            )
    ax.set_xlabel("$p_1$")
    ax.set_ylabel("$p_2$")
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(loc="best")
    return fig


def start_label(start) -> str:
    """Legend label of a start point, e.g. ``start (0, -1.5)``."""
    return "start (" + ", ".join(f"{float(x):g}" for x in np.round(np.asarray(start, float), 3) + 0.0) + ")"


def plot_curves(x, ys: dict, *, xlabel: str, ylabel: str, ax=None, logx=False, logy=False, styles=None):
    """Several curves against a common x; ``ys`` maps label -> ``(S,)`` or ``(S, k)`` (drawn thin)."""
    fig, ax = _ax(ax)
    for k, (name, y) in enumerate(ys.items()):
        y = np.asarray(y)
        st = style(k)
        fmt = (styles or {}).get(name)  # an explicit format string wins over the dash
        lead, kw = ((fmt,), {"color": st["color"]}) if fmt else ((), st)
        if y.ndim == 1:
            ax.plot(x, y, *lead, label=name, lw=1.8, **kw)
        else:
            for j in range(y.shape[1]):
                ax.plot(x, y[:, j], *lead, lw=1.0, alpha=0.8, label=name if j == 0 else None, **kw)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.legend(loc="best")
    return fig


def attention_heatmap(weights, *, row_labels=None, col_labels=None, ax=None, cmap="rocket_r", cbar=True):
    """Heatmap of attention weights ``(rows, cols)`` (e.g. sequences x tokens, or a patch grid)."""
    import seaborn as sns  # imported when used (it brings scipy.stats)

    fig, ax = _ax(ax)
    xticks, yticks = (False if labels is None else labels for labels in (col_labels, row_labels))
    sns.heatmap(np.asarray(weights), ax=ax, cmap=cmap, vmin=0, cbar=cbar, xticklabels=xticks, yticklabels=yticks)
    return fig


def token_scatter(x, y, *, xlabel: str, ylabel: str, hue=None, size=None, ax=None, alpha=0.5):
    """Scatter of per-token statistics (e.g. ``E_s^T v`` against ``alpha_s``)."""
    import seaborn as sns

    fig, ax = _ax(ax)
    sns.scatterplot(
        x=np.asarray(x),
        y=np.asarray(y),
        hue=hue,
        size=size,
        ax=ax,
        s=12 if size is None else None,
        alpha=alpha,
        edgecolor=None,
        legend=hue is not None,
    )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return fig


def save(fig, path_stem: str) -> list[str]:
    """Write ``fig`` as ``<path_stem>.png`` and ``.pdf``; return the paths.

    Each file is written through a temporary file and a rename (a symbolic link at the path is replaced,
    an interrupted write leaves the old file); :class:`mmtoken.datasets.download.DataFolderError` when
    the folder cannot be written.
    """
    import io

    from mmtoken.datasets.download import atomic_write_bytes

    out = []
    for ext in ("png", "pdf"):
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, bbox_inches="tight")
        atomic_write_bytes(f"{path_stem}.{ext}", buf.getvalue())
        out.append(f"{path_stem}.{ext}")
    return out


def use_headless() -> None:
    """Switch to the Agg backend (figures CLI, tests)."""
    matplotlib.use("Agg", force=True)
