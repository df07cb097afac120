"""Stored outputs that hold on any machine: no raw machine-precision value in any stored notebook output.

A residual of an identity (``3.6e-16`` here, ``3.2e-16`` or ``0.0`` on another CPU or BLAS) is printed
as a bound (``report.bound``: ``"residual < 1e-12: True"``), a table cell that reaches machine
precision as ``report.above``'s ``"< 1e-12"``, and a measured value of the ledger through
``report.portable``. This scans every stored output under ``book/`` for a number in scientific notation
of magnitude below ``1e-11`` that is not stated as a bound (``< 1e-12``). The few values that small
that are results (computed to relative precision, not rounding error) or inputs are listed in
``ALLOWED`` with their reason. CONTRIBUTING, "Stored outputs that hold on any machine".
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)

# a number in scientific notation with exponent -12 or below, not preceded by "<" or "to" (a bound) or a word
TINY = re.compile(r"(?<![\w.<])(?<!< )(?<!<= )(?<!to )-?\d(?:\.\d+)?e-(?:1[2-9]|[2-9]\d|\d{3,})(?![\d])")

# (notebook, regex of a whole output line, why the small numbers on it hold on any machine)
ALLOWED = [
    (
        "book/appendix/saturation.ipynb",
        r"\s*\d+\s+[\d.]+\s+\d\.\d\de-\d\d\s+.*",
        "1 - s_top of the stable (log-sum-exp) softmax: a value computed to relative precision, printed at 3 digits",
    ),
    (
        "book/part3/13_w_vs_kq.ipynb",
        r"\s+(1e-12|2e-16)\s+.*",
        "the penalty lambda of the run (1e-12, ch13_w_vs_kq.PENALTY = 2.2e-16), an input",
    ),
]


def text_outputs(nb: dict):
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        for out in cell.get("outputs", []):
            if "text" in out:
                yield i, "".join(out["text"])
            for mime in ("text/plain", "text/html", "text/markdown", "text/latex"):
                if mime in out.get("data", {}):
                    text = "".join(out["data"][mime])
                    yield i, html.unescape(text) if mime == "text/html" else text  # "&lt; 1e-12" is a bound


def raw_tiny_values(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    allowed = [re.compile(rx) for nb, rx, _ in ALLOWED if nb == rel]
    found = []
    for i, text in text_outputs(json.loads(path.read_text(encoding="utf-8"))):
        for line in text.splitlines():
            if TINY.search(line) and not any(rx.fullmatch(line) for rx in allowed):
                found.append(f"{rel} cell {i}: {line.strip()[:100]}")
    return found


def test_the_scan_flags_raw_residuals_and_passes_bounds():
    flagged = ["max_sv_ratio = 3.60204e-16", "||KQ^T - W|| = 5.6e-16", "logistic = 7.0473e-15", "gap 2.9e-14 x"]
    for line in flagged:
        assert TINY.search(line), line
    for line in [
        "||KQ^T - W|| < 1e-12: True",
        "gap = < 1e-10",
        "excess  < 1e-12",
        "1 - corr 4.9e-05",
        "x1e-13",
        "||p|| = R to 1e-14",
    ]:
        assert not TINY.search(line), line


def test_every_allowance_still_matches_a_line():
    for nb, rx, why in ALLOWED:
        lines = [
            line
            for _, text in text_outputs(json.loads((ROOT / nb).read_text(encoding="utf-8")))
            for line in text.splitlines()
        ]
        assert any(re.fullmatch(rx, line) and TINY.search(line) for line in lines), f"stale allowance: {nb} ({why})"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_stored_output_prints_a_raw_machine_precision_value(path):
    found = raw_tiny_values(path)
    assert not found, "print these as report.bound / report.above (or report.portable):\n" + "\n".join(found)
