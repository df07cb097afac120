"""Printed outputs fit the book's column: no stored output line is wider than
``mmtoken.book.report.OUTPUT_WIDTH`` characters (about 688 px of the column at 1280 px).

The browser check (tests/test_browser.py) measures the rendered page; this test
reads the stored notebooks, so it runs in a second and names the cell to fix.
Outputs the page does not show (``remove-output``, ``remove-cell``) and text
that stands in for a rich output (an HTML table, a figure) are not checked.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from mmtoken.book.report import OUTPUT_WIDTH

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
HIDDEN = {"remove-output", "remove-cell"}
RICH = ("text/html", "image/png", "image/svg+xml", "text/latex")


def shown_text(cell) -> list[str]:
    """The text lines a reader sees under a code cell."""
    if HIDDEN & set(cell.metadata.get("tags", [])):
        return []
    lines: list[str] = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            lines += out.text.splitlines()
        elif out.output_type in ("execute_result", "display_data"):
            if not any(k in out.data for k in RICH):
                lines += out.data.get("text/plain", "").splitlines()
        elif out.output_type == "error":
            lines.append(f"error output: {out.ename}")
    return lines


def wide_lines(nb) -> list[str]:
    return [
        f"cell {i}: {len(line)} chars: {line[:60]}..."
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for line in shown_text(cell)
        if len(line) > OUTPUT_WIDTH
    ]


def test_shown_text_skips_hidden_and_rich_outputs():
    cell = nbformat.v4.new_code_cell("x", metadata={"tags": ["remove-output"]})
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * 200)]
    assert shown_text(cell) == []
    cell.metadata = {}
    assert wide_lines(nbformat.v4.new_notebook(cells=[cell]))
    cell.outputs = [
        nbformat.v4.new_output(
            "execute_result", data={"text/html": "<table/>", "text/plain": "y" * 200}, execution_count=1
        )
    ]
    assert shown_text(cell) == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT / "book")))
def test_printed_outputs_fit_the_column(path):
    wide = wide_lines(nbformat.read(path, as_version=4))
    assert not wide, (
        f"{len(wide)} output lines wider than {OUTPUT_WIDTH} characters "
        f"(format them to fit: wrap, tabulate, round):\n" + "\n".join(wide)
    )
