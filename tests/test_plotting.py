"""The book's plotting theme: sizes for the column, colour-blind-safe styles, retina output, panel titles."""

from __future__ import annotations

import matplotlib.colors as mcolors
import matplotlib.pyplot as plt
import numpy as np
import pytest

from mmtoken.book import plotting

CSS_PX_PER_PT = 100 / 72  # at figure.dpi = 100, a figure shown at its own width


@pytest.fixture(autouse=True)
def theme():
    plotting.set_theme(retina=False)


def test_theme_keeps_the_figure_repr_nbval_compares():
    fig = plt.figure()
    assert repr(fig) == "<Figure size 600x400 with 0 Axes>"


def test_theme_cycles_colour_and_dash_together():
    cycle = plt.rcParams["axes.prop_cycle"].by_key()
    assert cycle["color"][:4] == plotting.PALETTE[:4]
    assert len(set(map(str, cycle["linestyle"]))) == len(cycle["linestyle"]) == len(cycle["color"])
    fig, ax = plt.subplots()
    lines = [ax.plot([0, 1], [k, k])[0] for k in range(4)]
    assert len({(l.get_color(), str(l.get_linestyle())) for l in lines}) == 4
    assert len({l.get_linestyle() for l in lines}) == 4, "series differ by dash, not only by colour"


def _lab(color):
    r, g, b = mcolors.to_rgb(color)
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    x, y, z = (
        np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
        @ lin
        / np.array([0.9505, 1.0, 1.089])
    )
    f = lambda t: t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116
    return np.array([116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))])


def test_first_colours_are_far_apart():
    """Any two of the first four colours differ clearly (CIELAB distance), unlike orange and vermillion."""
    first = plotting.colors(4)
    d = min(np.linalg.norm(_lab(a) - _lab(b)) for i, a in enumerate(first) for b in first[i + 1 :])
    assert d > 30, d
    assert np.linalg.norm(_lab("#E69F00") - _lab("#D55E00")) < 35, "the pair the order keeps apart"
    assert plotting.colors(10)[8] == plotting.colors(1)[0], "colors cycles past the palette"


def test_style_pairs_colour_dash_and_marker():
    a, b = plotting.style(0, marker=True), plotting.style(1, marker=True, markevery=10)
    assert a["color"] != b["color"] and a["linestyle"] != b["linestyle"] and a["marker"] != b["marker"]
    assert b["markevery"] == 10
    with pytest.raises(ValueError, match="k must be"):
        plotting.style(-1)


@pytest.mark.parametrize("ncols", [1, 2, 3, 4])
def test_figures_fit_the_column_so_labels_keep_their_size(ncols):
    w, h = plotting.figsize(ncols)
    assert w <= plotting.COLUMN_WIDTH and h > 0
    fig, axes = plotting.subplots(ncols)
    assert fig.get_size_inches()[0] <= plotting.COLUMN_WIDTH
    shown = min(1.0, plotting.COLUMN_WIDTH / fig.get_size_inches()[0])  # shrink factor in the column
    smallest = min(plotting.FONT_SIZES.values())
    assert smallest * CSS_PX_PER_PT * shown >= 12, "no label below 12 px on screen"


def test_figsize_rejects_bad_input():
    for bad in ({"ncols": 0}, {"nrows": 1.5}, {"aspect": -1}, {"width": 10}):
        with pytest.raises(ValueError):
            plotting.figsize(**bad)


def test_panel_titles():
    fig, axes = plotting.two_panels(["tight", "loose"])
    assert [ax.get_title(loc="left") for ax in axes] == ["(a) tight", "(b) loose"]
    fig, axes = plotting.subplots(2, 2)
    plotting.panel_titles(axes, list("wxyz"), letters=False)
    assert [ax.get_title(loc="left") for ax in axes.ravel()] == list("wxyz")
    with pytest.raises(ValueError, match="3 titles for 2 panels"):
        plotting.panel_titles(plotting.two_panels()[1], ["a", "b", "c"])


def test_three_panels_shape():
    fig, axes = plotting.three_panels(["a", "b", "c"])
    assert len(axes) == 3 and fig.get_size_inches()[0] == pytest.approx(plotting.COLUMN_WIDTH)


def test_plot_paths_draws_directions_with_different_dashes():
    paths = np.cumsum(np.random.default_rng(0).normal(size=(20, 3, 2)), axis=0)
    fig = plotting.plot_paths(paths, directions={"GMM": [1, 0], "LMM": [0, 1]}, labels=list("abc"))
    ax = fig.axes[0]
    by_label = {l.get_label(): l for l in ax.get_lines()}
    assert by_label["GMM"].get_color() != by_label["LMM"].get_color()
    assert len({str(ls) for _grey, ls in plotting.DIRECTION_STYLES}) == len(plotting.DIRECTION_STYLES)
    assert len({str(by_label[k].get_linestyle()) for k in "abc"}) == 3


def test_retina_in_a_notebook(monkeypatch):
    calls = []
    import IPython
    import matplotlib_inline.backend_inline as inline

    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(inline, "set_matplotlib_formats", lambda *f: calls.append(f))
    plotting.set_theme()
    assert calls == [("retina",)]
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    plotting.set_theme()
    assert calls == [("retina",)], "outside IPython nothing changes"
