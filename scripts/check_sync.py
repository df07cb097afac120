"""Check that each chapter's .md (the source) and its paired .ipynb (the executed reference) agree.

A chapter is a MyST notebook (a ``.md`` with a jupytext header) paired with a ``.ipynb`` of the same
stem. They are in sync when the notebook exists and holds the same cells, in the same order, with the
same type and source as jupytext reads from the ``.md``; outputs and metadata are not compared (the
``.ipynb`` carries the outputs nbval checks). Fix a mismatch with
``jupytext --to ipynb --update book/<part>/<file>.md`` and re-execute the notebook.

Usage: ``python scripts/check_sync.py [files...]`` (default: every chapter under ``book/``); exit status 1
and one line per problem when something is out of sync. Run by ``tests/test_sync.py`` and pre-commit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parents[1]


def chapters(root: Path = ROOT) -> list[Path]:
    """Every ``.md`` under ``root/book`` that is a jupytext notebook, sorted."""
    return sorted(p for p in (root / "book").rglob("*.md") if is_notebook(p))


def is_notebook(md: Path) -> bool:
    """Whether ``md`` starts with a YAML header naming jupytext."""
    text = md.read_text(encoding="utf-8")
    if not text.startswith("---"):
        return False
    end = text.find("\n---", 3)
    return end > 0 and "jupytext:" in text[:end]


def cells(nb) -> list[tuple[str, str]]:
    """``(cell_type, source)`` of every cell, sources stripped of trailing blank lines."""
    return [(c.cell_type, c.source.rstrip()) for c in nb.cells]


def problems(md: Path) -> list[str]:
    """What is out of sync between ``md`` and its paired ``.ipynb`` (empty when they agree)."""
    ipynb = md.with_suffix(".ipynb")
    if not ipynb.exists():
        return [f"{md}: no paired notebook {ipynb.name}"]
    want = cells(jupytext.read(md))
    have = cells(nbformat.read(ipynb, as_version=4))
    if len(want) != len(have):
        return [f"{md}: {len(want)} cells in the .md, {len(have)} in {ipynb.name}"]
    out = []
    for i, (w, h) in enumerate(zip(want, have)):
        if w != h:
            first = (w[1].splitlines() or [""])[0][:60]
            out.append(f"{md}: cell {i} ({w[0]}, starting {first!r}) differs in {ipynb.name}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    files = [Path(a).with_suffix(".md") for a in args] if args else chapters()
    found = [line for md in files if md.exists() and is_notebook(md) for line in problems(md)]
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
