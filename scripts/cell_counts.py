"""Count, per chapter, the main-text code cells that show an experiment's set-up or algorithm.

Issue 24 asks that a reader *see* the computation: at least half of each theory chapter's
main-text code cells (hidden cells and exercise solutions excluded) show set-up or algorithm.
A code cell counts as **set-up or algorithm** when it

* is exported (``#| export``) and defines something (a ``def``, a ``class``, an assignment):
  the chapter's settings, its ``run`` and the functions it is built from; or
* calls a package primitive with its arguments: ``module.function(arg, ...)`` with at least
  one argument, ``module`` bound by ``from mmtoken import module`` (or ``import mmtoken.module``)
  and one of the library's modules (not the book's: :data:`BOOK_MODULES`), the function not a
  plot; or
* calls the chapter's own function with settings written out (``run(Settings(lr=0.5))``).

Every other cell is **other**: a call of an opaque chapter module (``gc.run()``), a figure,
a print of something computed elsewhere.

Usage: ``python scripts/cell_counts.py [chapters...]`` prints the table (default: every chapter);
``tests/test_cell_counts.py`` asserts the share for the chapters in the book's form.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[1]
BOOK_MODULES = frozenset({"book", "config", "chapters"})  # the book's own: mmtoken.book.*, not the library
"""Modules of the book, not of the library: calling them shows no experiment."""
THEORY = ("tour", "01", "02", "03", "04", "05", "06", "07", "08", "10", "11", "13", "14", "15")
"""The theory chapters issue 24's "at least half" applies to: the tour (``book/tour.md``, no number) and the
numbered ones, by number (:func:`is_theory`)."""


@dataclass
class Count:
    chapter: str
    setup: int
    other: int
    converted: bool  # in the book's form: the chapter names its generated module (#| default_exp)

    @property
    def total(self) -> int:
        return self.setup + self.other

    @property
    def share(self) -> float:
        return self.setup / self.total if self.total else 0.0


def main_cells(md: Path) -> list[str]:
    """Sources of the main-text code cells of chapter ``md``: not tagged ``remove-cell`` (the
    install cell, the export's ``#| default_exp``), not inside an exercise solution."""
    nb = jupytext.read(md)
    out, in_solution = [], False
    for c in nb.cells:
        if c.cell_type == "markdown":
            text = c.source
            start, end = text.rfind("{solution-start}"), text.rfind("{solution-end}")
            if start >= 0 or end >= 0:
                in_solution = start > end
            continue
        if c.cell_type != "code" or in_solution or "remove-cell" in c.metadata.get("tags", []):
            continue
        out.append(c.source)
    return out


def primitive_modules(tree: ast.AST) -> set[str]:
    """Names bound to library modules of ``mmtoken`` by the imports in ``tree``."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "mmtoken":
            out |= {a.asname or a.name for a in node.names if a.name not in BOOK_MODULES}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mmtoken."):
            top = node.module.split(".")[1]
            if top not in BOOK_MODULES:
                out |= {a.asname or a.name for a in node.names}  # from mmtoken.attention import svm
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "mmtoken" and len(parts) >= 2 and parts[1] not in BOOK_MODULES and a.asname:
                    out.add(a.asname)
    return out


def shows_setup(source: str, modules: set[str]) -> bool:
    """Whether a code cell shows set-up or algorithm (see the module docstring)."""
    try:
        tree = ast.parse("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))
    except SyntaxError:
        return False
    exported = any(line.strip() == "#| export" for line in source.splitlines())
    if exported and any(isinstance(s, (ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)) for s in tree.body):
        return True
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not (node.args or node.keywords):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in modules:
            if not f.attr.startswith("plot"):
                return True
        if any(
            isinstance(a, ast.Call) and getattr(a.func, "id", "") == "Settings" and (a.args or a.keywords)
            for a in node.args
        ):
            return True
    return False


def count(md: Path) -> Count:
    cells = main_cells(md)
    modules: set[str] = set()
    setup = 0
    for src in cells:
        try:
            modules |= primitive_modules(ast.parse(src))
        except SyntaxError:
            pass
        setup += shows_setup(src, modules)
    converted = "#| default_exp" in md.read_text(encoding="utf-8")
    return Count(md.stem, setup, len(cells) - setup, converted)


def is_theory(md: Path) -> bool:
    """Whether chapter ``md`` is one of :data:`THEORY` (``tour.md``, ``02_global.md``, ...)."""
    return md.stem.split("_")[0] in THEORY


def chapters() -> list[Path]:
    """The tour, the numbered chapters and the "your own instance" appendix, in book order."""
    book = ROOT / "book"
    return [book / "tour.md", *sorted(book.glob("part*/[0-9][0-9]_*.md")), book / "appendix" / "your_instance.md"]


def table(counts: list[Count]) -> str:
    lines = [f"{'chapter':<20} {'set-up':>6} {'other':>6} {'share':>6}  form", "-" * 48]
    for c in counts:
        form = "chapter" if c.converted else "not in the form"
        lines.append(f"{c.chapter:<20} {c.setup:>6} {c.other:>6} {c.share:>6.0%}  {form}")
    s, t = sum(c.setup for c in counts), sum(c.total for c in counts)
    lines.append(f"{'all':<20} {s:>6} {t - s:>6} {s / t:>6.0%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in argv] or chapters()
    print(table([count(p) for p in paths]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
