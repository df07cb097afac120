"""Each chapter's .md and its paired .ipynb hold the same cells (scripts/check_sync.py)."""

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_sync", ROOT / "scripts" / "check_sync.py")
check_sync = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_sync)

CHAPTERS = check_sync.chapters()


def test_every_notebook_has_its_chapter():
    notebooks = sorted(p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    assert notebooks and [p.with_suffix(".md") for p in notebooks] == CHAPTERS


@pytest.mark.parametrize("md", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_md_and_ipynb_in_sync(md):
    assert check_sync.problems(md) == []


def test_a_changed_cell_and_a_missing_notebook_are_reported(tmp_path):
    md = ROOT / "book" / "part1" / "01_model.md"
    copy = tmp_path / md.name
    shutil.copy(md, copy)
    assert check_sync.problems(copy) == [f"{copy}: no paired notebook 01_model.ipynb"]
    shutil.copy(md.with_suffix(".ipynb"), copy.with_suffix(".ipynb"))
    assert check_sync.problems(copy) == []
    text = copy.read_text(encoding="utf-8")
    i = text.index("```{code-cell}")
    j = text.index("\n", text.index("\n", i) + 1)  # after the first code line of the first code cell
    copy.write_text(text[:j] + "\nx_added_here = 1" + text[j:], encoding="utf-8")
    found = check_sync.problems(copy)
    assert len(found) == 1 and "differs" in found[0]
    assert check_sync.main([str(copy)]) == 1
