"""The competitor of each claim: its check applied to the nearest wrong answer, evaluated and recorded beside it.

Every claim names the nearest wrong answer its threshold must reject (``competitor=``) and a function applying
the claim's own check to it (``against=``, :func:`mmtoken.book.ledger.claim`). A chapter evaluates the
competitors when it evaluates its claims (:func:`mmtoken.book.report.chapter_claims`): they reuse the runs the
claims just made (memoised in the kernel), so they cost almost nothing there. In the book's own runs each
:class:`Verdict` is recorded beside the claim's result (:data:`VERDICT`, :mod:`mmtoken.book.records`:
``data/results/competitors/<scale>/``) under a fingerprint of the code of ``against``
(:mod:`mmtoken.book.fingerprint`, followed transitively), the claim's texts and the scale, so the tests
(``tests/test_competitors*.py``) read it instead of computing a chapter's runs again in another process.
"""

from __future__ import annotations

__all__ = ["Verdict", "evaluate", "VERDICT", "read_record", "recorded", "run_all"]

import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any

from mmtoken.book import records
from mmtoken.book.ledger import Claim, data_missing, jsonable, select
from mmtoken.book.records import Kind


@dataclass
class Verdict:
    """Claim ``id``'s check applied to its competitor: what it measured and whether it ``passed`` (it must not).

    ``error``: the check crashed (a crash rejects nothing); ``missing``: the input data are absent."""

    id: str
    competitor: str
    measured: Any
    passed: bool
    seconds: float
    error: str | None = None
    missing: str | None = None

    @property
    def rejected(self) -> bool:
        """The check ran and did not pass for the competitor: what the claim's threshold must do."""
        return not self.passed and self.error is None and self.missing is None


def evaluate(c: Claim) -> Verdict:
    """Apply claim ``c``'s check to its competitor now (``c.against()``), without reading or writing a record."""
    if c.against is None:
        raise ValueError(f"claim {c.id} has no against= function (no competitor check)")
    if why := c.missing():
        return Verdict(c.id, c.competitor, None, False, 0.0, missing=why)
    start = time.perf_counter()
    try:
        m = c.against()
        measured, passed, error = m.value, bool(m.passed), None
    except Exception as exc:
        if why := data_missing(exc):
            return Verdict(c.id, c.competitor, None, False, 0.0, missing=why)
        measured, passed = None, False
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return Verdict(c.id, c.competitor, jsonable(measured), passed, round(time.perf_counter() - start, 2), error)


VERDICT = Kind(
    "competitors",
    "verdict",
    "against",
    (__name__, "evaluate"),
    ("id", "checks", "kind", "threshold", "chapter", "competitor"),
)
"""The record of a claim's competitor check (:mod:`mmtoken.book.records`)."""


def read_record(c: Claim, scale: str | None = None) -> Verdict | None:
    """The recorded verdict of claim ``c`` at ``scale``, or ``None`` if none is valid for today's code."""
    meta = records.read_record(c, VERDICT, scale)
    try:
        return Verdict(**meta) if meta is not None else None
    except TypeError:  # a record of another layout
        return None


def recorded(c: Claim, compute_missing: bool = True) -> Verdict | None:
    """The verdict of claim ``c``, read from its record; evaluated now (and recorded, in the book's own runs) when
    there is none and ``compute_missing`` (another process evaluating it is waited for), else ``None``."""
    v = read_record(c)
    if v is not None or not compute_missing:
        return v
    if not records.recordable(c.against):  # a reader's session or a test's check: evaluated, no record nor lock
        return evaluate(c)
    from mmtoken.book.resultcache import record_once

    def compute() -> Verdict:
        v = evaluate(c)
        records.record(c, VERDICT, asdict(v))
        return v

    return record_once(records.record_key(c, VERDICT)[0], lambda: read_record(c), compute)


def run_all(only: list[str]) -> list[Verdict]:
    """Evaluate and record the verdict of every selected claim that has a competitor check."""
    out = []
    for c in select(only):
        if c.against is not None:
            v = evaluate(c)
            records.record(c, VERDICT, asdict(v))
            out.append(v)
    return out
