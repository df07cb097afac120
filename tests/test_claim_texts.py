"""A claim's statement and threshold are generated from the values its check uses (issue 24, item 4).

Prose and code cannot drift when every number in a claim's ``statement`` and ``threshold`` is interpolated
from the constant or setting the check reads (``f"correlation >= {MIN_CORR}"``, ``MIN_CORR`` used by the
check). This reads every ``@claim(...)`` of the generated chapter modules (the chapters' export cells) and
fails on a number written into the literal text of either field. Numbers that are not values stay literal:
references (``Fig. 1``, ``Theorem 2``, ``Thm 5``, ``issue 25``), dates (when a threshold was set), the
constants of a formula (``1 - corr``, ``T - 1``, ``1/L_p``, ``P/2``, ``||p||^2``, ``2 r^2``, ``log 2``), and
what the theorems fix rather than the book: the origin they start from (``p = 0``, ``W(0) = 0``), a limit
(``tends to 1``), a sign condition (``> 0``), the SVM's unit margin (``margin 1``), the first step of a range
whose end is interpolated (``steps 1-{EARLY}``).
The loop-registered claims of chapter 12 (``data_claim``) are read as well.
A second test checks the checker: a literal threshold is found, an interpolated one is not.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTER_MODULES = sorted((ROOT / "mmtoken" / "chapters").glob("*.py"))
FIELDS = ("statement", "threshold")
CLAIM_CALLS = ("claim", "data_claim")  # ledger.claim, and chapter 12's registration of its per-data-set claims

# what a number may be part of and still be literal text (see the module docstring)
NOT_A_VALUE = re.compile(
    r"(?:\b(?:Figs?\.|Figures?|Theorems?|Thms?\.?|Lemmas?|Propositions?|Corollary|Assumptions?|Sections?|Eq\.|equations?"
    r"|issues?|chapters?|Tables?|Parts?|Appendix|Definitions?|Remarks?|arXiv|paper [A-C]'s (?:Fig\.|Theorem))"
    r"\s*\(?\d+(?:\.\d+)*(?:\s*(?:,|and|-|to)\s*\d+(?:\.\d+)*)*\)?)"  # a reference, or several
    r"|\b20\d\d-\d\d-\d\d\b"  # a date: when a threshold was set
    r"|(?<![\w.])1\s*-\s*(?=[A-Za-z|(])"  # 1 - corr, 1 - max attention, 1 - (...)
    r"|(?<=[A-Za-z)])\s*-\s*1\b(?!\.?\d)"  # T - 1
    r"|(?<![\w.])\d\s*(?=[a-z]\^\d)"  # the 2 of 2 r^2
    r"|^\^\d+\b"  # a power right after an interpolated value: {c}^2
    r"|(?<=[A-Za-z)] )=\s*0\b(?!\.?\d)|\bfrom 0\b(?!\.?\d)|\(E\^0, 0\)"  # the origin: p = 0, W(0) = 0, from 0
    r"|(?<=[A-Za-z])\(0\)"  # the start of an iterate: W(0), p(0)
    r"|\btends? to [01]\b(?!\.?\d)"  # a limit
    r"|[<>]\s*0\b(?!\.?\d)"  # a sign condition
    r"|\bmargin 1\b(?!\.?\d)"  # the SVM's unit margin
    r"|(?<![\w.])1\s*-$"  # the first step of a range whose end is interpolated
    r"|(?<![\w.])1/(?=[A-Za-z(|])"  # 1/L_p, 1/margin
    r"|(?<=[\w)|])/\d+\b"  # P/2, R/2
    r"|(?<=[A-Za-z)|])\^\d+(?!\.?\d)"  # ||p||^2, x^2, E^1_s (not 10^6: a value)
    r"|\blog\s*2\b"  # log 2 = the loss at p = 0
)
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?:\^\d+)?")


def literal_text(node: ast.AST) -> list[str]:
    """The literal parts of a string expression: a constant, an f-string's text, a concatenation's pieces."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value for v in node.values if isinstance(v, ast.Constant)]
    if isinstance(node, ast.BinOp):
        return literal_text(node.left) + literal_text(node.right)
    return []


def literal_numbers(source: str) -> list[tuple[str, str, list[str]]]:
    """``(claim id, field, numbers)`` for every number written into a claim's statement or threshold."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in CLAIM_CALLS):
            continue
        first = node.args[0] if node.args else None
        cid = first.value if isinstance(first, ast.Constant) else ast.unparse(first) if first else "?"
        for kw in node.keywords:
            if kw.arg in FIELDS:
                numbers = [n for part in literal_text(kw.value) for n in NUMBER.findall(NOT_A_VALUE.sub(" ", part))]
                if numbers:
                    found.append((cid, kw.arg, numbers))
    return found


@pytest.mark.parametrize("module", CHAPTER_MODULES, ids=lambda p: p.stem)
def test_claim_texts_write_no_value_by_hand(module):
    found = literal_numbers(module.read_text())
    assert not found, f"{module.stem}: numbers written by hand into claim texts (interpolate them):\n" + "\n".join(
        f"  {cid} {field}: {nums}" for cid, field, nums in found
    )


def test_the_check_finds_a_literal_threshold_and_passes_an_interpolated_one():
    literal = 'claim("X.y", statement="GD converges (Theorem 2).", threshold="corr >= 0.999 at 10^6 steps")'
    interpolated = 'claim("X.y", statement=f"GD converges (Theorem 2).", threshold=f"corr >= {MIN} at {STEPS}")'
    assert literal_numbers(literal) == [("X.y", "threshold", ["0.999", "10^6"])]
    assert literal_numbers(interpolated) == []
    # references, dates and formula constants are not values
    words = (
        'claim("X.y", statement="Fig. 1, Thm 5, issue 25 (set 2026-12-01): 1 - corr, max(T - 1, n), 1/L_p, P/2, '
        '||p||^2, c^2/(2 r^2), log 2, from p = 0, W(0) = 0, tends to 1, weights > 0, margin 1", threshold="")'
    )
    assert literal_numbers(words) == []
    # but a value beside them is still found
    assert literal_numbers(words.replace('threshold=""', 'threshold="tends to 1 within 0.99 from p = 0.5"')) == [
        ("X.y", "threshold", ["0.99", "0.5"])
    ]
