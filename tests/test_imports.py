"""Import costs: what ``import mmtoken`` and the figures command load, and the theme written
out from seaborn's (so that the theme does not import seaborn)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest
from cycler import cycler

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("seaborn", "scipy.stats", "cvxpy", "numba")


def _loaded_after(code: str) -> set[str]:
    probe = code + f"\nimport sys, json; print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, MPLBACKEND="Agg")
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_mmtoken_loads_no_heavy_library():
    assert _loaded_after("import mmtoken, mmtoken.config, mmtoken.book.ledger, mmtoken.book.plotting") == set()


def test_the_tour_and_a_theory_chapter_load_neither_seaborn_nor_numba_on_import():
    loaded = _loaded_after(
        "import mmtoken.book.plotting as p; p.set_theme(); p.colors(3); "
        "import mmtoken.attention.train, mmtoken.attention.fastpath, mmtoken.chapters.ch02_global"
    )
    assert not loaded & {"seaborn", "scipy.stats", "numba"}


def test_theme_is_seaborns_whitegrid_notebook_theme():
    sns = pytest.importorskip("seaborn")
    from mmtoken.book import plotting

    assert plotting.SEABORN_WHITEGRID == {k: v for k, v in sns.axes_style("whitegrid").items() if k != "image.cmap"}
    assert plotting.SEABORN_NOTEBOOK == dict(sns.plotting_context("notebook"))
    with matplotlib.rc_context():
        # the call plotting.set_theme made before the theme was written out
        sns.set_theme(
            context="notebook",
            style="whitegrid",
            palette=plotting.PALETTE,
            rc={
                "figure.figsize": (6.0, 4.0),
                "figure.dpi": 100,
                "savefig.dpi": 200,
                "legend.frameon": False,
                **plotting.FONT_SIZES,
                "axes.prop_cycle": cycler(color=plotting.PALETTE) + cycler(linestyle=plotting.LINESTYLES),
                "lines.linewidth": 1.6,
                "lines.markersize": 5,
            },
        )
        theirs = {k: matplotlib.rcParams[k] for k in plotting.theme_rc()}
    with matplotlib.rc_context():
        plotting.set_theme(retina=False)
        ours = {k: matplotlib.rcParams[k] for k in plotting.theme_rc()}
    assert ours == theirs
    assert plotting.colors(9) == [tuple(c) for c in sns.color_palette(plotting.PALETTE, 9)]
