"""Issue 24: a reader sees the computation. Every theory chapter is in the book's form, and at least half
of its main-text code cells show set-up or algorithm (``scripts/cell_counts.py`` says what counts, and
prints the table for every chapter)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import cell_counts  # noqa: E402

CHAPTERS = {md.stem: md for md in cell_counts.chapters()}
THEORY = [stem for stem, md in CHAPTERS.items() if cell_counts.is_theory(md)]


@pytest.mark.parametrize("stem", THEORY)
def test_half_the_cells_of_a_converted_theory_chapter_show_the_experiment(stem):
    c = cell_counts.count(CHAPTERS[stem])
    assert c.converted, f"{stem} is not in the book's form (no #| default_exp cell)"
    assert c.share >= 0.5, f"{stem}: {c.setup} of {c.total} main-text code cells show set-up or algorithm"


HEAVY = ["09_vit_sparsity", "12_real_reviews"]
"""The chapters on real data: not theory chapters, in the form all the same (their training runs are package
primitives the cells call)."""


@pytest.mark.parametrize("stem", HEAVY)
def test_the_real_data_chapters_are_in_the_form(stem):
    c = cell_counts.count(CHAPTERS[stem])
    assert c.converted, f"{stem} is not in the book's form (no #| default_exp cell)"
    assert c.share >= 0.5, f"{stem}: {c.setup} of {c.total} main-text code cells show set-up or algorithm"


def test_the_tour_is_a_theory_chapter():
    assert "tour" in THEORY and "02_global" in THEORY and "your_instance" not in THEORY


APPENDICES = [ROOT / "book" / "appendix" / f"{name}.md" for name in ("saturation", "your_instance")]


@pytest.mark.parametrize("md", APPENDICES, ids=lambda p: p.stem)
def test_half_the_cells_of_a_converted_appendix_show_the_experiment(md):
    """The appendices with an experiment (the saturation trap, your own instance) are in the form too."""
    c = cell_counts.count(md)
    assert c.converted, f"{md.stem} is not in the book's form (no #| default_exp cell)"
    assert c.share >= 0.5, f"{md.stem}: {c.setup} of {c.total} main-text code cells show set-up or algorithm"


def test_what_counts():
    mods = cell_counts.primitive_modules(
        __import__("ast").parse("from mmtoken.attention import svm, train\nfrom mmtoken.book import report")
    )
    assert mods == {"train", "svm"}  # report is the book's, not the library's
    assert cell_counts.shows_setup("h = train.train_p(problem, p0, steps=10)", mods)
    assert not cell_counts.shows_setup("fig = train.plot_paths(h)", mods)  # a figure
    assert not cell_counts.shows_setup("r = gc.run()", mods)  # an opaque chapter module
    assert not cell_counts.shows_setup("print(report.chapter_claims(['A']))", mods)
    assert cell_counts.shows_setup("#| export\n@dataclass(frozen=True)\nclass Settings:\n    lr: float = 0.1", mods)
    assert cell_counts.shows_setup("r = run(Settings(lr=0.5))", mods)
    assert not cell_counts.shows_setup("r = run(Settings())", mods)  # the defaults show no setting
