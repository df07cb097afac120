"""The competitor of each claim: its check applied to the nearest wrong answer, evaluated and recorded beside it.

Every claim names the nearest wrong answer its threshold must reject (``competitor=``) and a function applying
the claim's own check to it (``against=``, :func:`mmtoken.book.ledger.claim`). A chapter evaluates the
competitors when it evaluates its claims (:func:`mmtoken.book.report.chapter_claims`): they reuse the runs the
claims just made (memoised in the kernel), so they cost almost nothing there. Each :class:`Verdict` is recorded
in the results cache (``data/results/competitors/<scale>/<id>.npz``) under a fingerprint of the code of
``against`` (:mod:`mmtoken.book.fingerprint`, followed transitively), the claim's texts and the scale, so the
tests (``tests/test_competitors*.py``) read it instead of computing a chapter's runs again in another process.
"""

from __future__ import annotations

__all__ = ["Verdict", "evaluate", "record_key", "records_dir", "record", "read_record", "recorded", "run_all"]

import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mmtoken.book.ledger import Claim, data_missing, jsonable, recordable, select


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


def records_dir(scale: str) -> Path:
    """Where the recorded verdicts of ``scale`` live (not created until something is recorded)."""
    from mmtoken.config import data_dir

    return data_dir() / "results" / "competitors" / scale


def record_key(c: Claim, scale: str | None = None) -> tuple[str, str, str]:
    """(path, name, fingerprint) of the verdict of claim ``c`` at ``scale`` (default: the current one); the
    fingerprint covers the code of ``c.against`` and of :func:`evaluate`, the claim's texts and the scale."""
    from mmtoken import config
    from mmtoken.book import fingerprint, resultcache

    if c.against is None:
        raise ValueError(f"claim {c.id} has no against= function (no competitor check)")
    scale = scale or config.scale()
    if scale not in config.SCALES:
        raise ValueError(f"scale must be one of {config.SCALES}, got {scale!r}")
    text = {k: getattr(c, k) for k in ("id", "checks", "kind", "threshold", "chapter", "competitor")}
    code = fingerprint.index().digest(fingerprint.roots_of(c.against) + [(__name__, "evaluate")])
    fp = resultcache.fingerprint(code, {"competitor": text, "scale": scale}, "")
    return str(records_dir(scale) / f"{c.id}.npz"), f"competitors/{scale}/{c.id}", fp


def record(c: Claim, v: Verdict) -> None:
    """Store ``v``, the verdict of claim ``c`` at the current scale; not when its data are missing (that depends
    on the disk, not on the code), nor for a check defined outside the package (a test's, a reader's edit)."""
    if not v.missing and recordable(c.against):
        from mmtoken.book.resultcache import save_record

        save_record(*record_key(c), {"verdict": asdict(v)}, f"claim {c.id}: competitor verdict")


def read_record(c: Claim, scale: str | None = None) -> Verdict | None:
    """The recorded verdict of claim ``c`` at ``scale``, or ``None`` if none is valid for today's code."""
    from mmtoken.book import resultcache

    meta = resultcache.read_record(*record_key(c, scale), "verdict")
    try:
        return Verdict(**meta) if meta is not None else None
    except TypeError:  # a record of another layout
        return None


def recorded(c: Claim, compute_missing: bool = True) -> Verdict | None:
    """The verdict of claim ``c``, read from its record; evaluated now and recorded when there is none and
    ``compute_missing`` (another process evaluating it is waited for), else ``None``."""
    v = read_record(c)
    if v is not None or not compute_missing:
        return v
    if not recordable(c.against):  # a test's or a reader's check: evaluated, no record nor lock file
        return evaluate(c)
    from mmtoken.book.resultcache import record_once

    def compute() -> Verdict:
        v = evaluate(c)
        record(c, v)
        return v

    return record_once(record_key(c)[0], lambda: read_record(c), compute)


def run_all(only: list[str]) -> list[Verdict]:
    """Evaluate and record the verdict of every selected claim that has a competitor check."""
    out = []
    for c in select(only):
        if c.against is not None:
            v = evaluate(c)
            record(c, v)
            out.append(v)
    return out
