"""The claims ledger: every numerical statement of the book as a check in code.

This module knows nothing about attention. Experiment modules register
claims with :func:`claim`; :func:`run_claims` runs them and times them.

A claim function returns a :class:`Measured`: the value it measured and
whether it meets the threshold that was written down before measuring.
``kind`` is one of

``"theorem"``
    what a result guarantees under its stated hypotheses, checked with the
    algorithm the theorem is about; must pass;
``"observation"``
    what a (real-data) experiment shows; judged on the worst of held-out
    seeds; a miss may be listed in :data:`KNOWN_MISSES` with its evidence,
    never by moving the threshold;
``"consistency"``
    an identity the code must satisfy (a closed form against an independent
    computation of the same quantity); must pass, but is not evidence for a
    paper's result.
"""
from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

KINDS = ("theorem", "observation", "consistency")


@dataclass
class Measured:
    """What a claim function returns."""

    value: Any
    passed: bool
    details: str = ""


@dataclass
class Claim:
    id: str
    statement: str
    checks: str
    kind: str
    threshold: str
    chapter: str
    func: Callable[[], Measured] = field(repr=False)


@dataclass
class Result:
    id: str
    statement: str
    checks: str
    kind: str
    chapter: str
    threshold: str
    measured: Any
    passed: bool
    seconds: float
    details: str = ""
    known_miss: str | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


REGISTRY: dict[str, Claim] = {}

KNOWN_MISSES: dict[str, str] = {}
"""Observation claims that miss their threshold, with the evidence (id -> text)."""


def claim(id: str, *, statement: str, checks: str, threshold: str,
          kind: str = "theorem", chapter: str = "") -> Callable:
    """Register the decorated zero-argument function as claim ``id``."""
    if kind not in KINDS:
        raise ValueError(f"claim {id}: kind {kind!r} is not one of {KINDS}")

    def register(func: Callable[[], Measured]) -> Callable[[], Measured]:
        if id in REGISTRY and REGISTRY[id].func.__qualname__ != func.__qualname__:
            raise ValueError(f"claim id {id!r} is registered twice")
        REGISTRY[id] = Claim(id, statement, checks, kind, threshold, chapter, func)
        return func

    return register


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return value


def run_one(c: Claim) -> Result:
    start = time.perf_counter()
    try:
        m = c.func()
        measured, passed, details, error = _jsonable(m.value), bool(m.passed), m.details, None
    except Exception as exc:  # a crashing claim is a failing claim, with the reason
        measured, passed, details = None, False, ""
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    seconds = time.perf_counter() - start
    return Result(c.id, c.statement, c.checks, c.kind, c.chapter, c.threshold,
                  measured, passed, round(seconds, 2), details,
                  KNOWN_MISSES.get(c.id) if not passed else None, error)


def select(only: list[str] | None = None) -> list[Claim]:
    """Registered claims whose id starts with one of the prefixes in ``only``."""
    claims = sorted(REGISTRY.values(), key=lambda c: c.id)
    if only:
        claims = [c for c in claims if any(c.id == o or c.id.startswith(o.rstrip(".") + ".") for o in only)]
    return claims


def run_claims(only: list[str] | None = None) -> list[Result]:
    """Run the selected claims in id order."""
    return [run_one(c) for c in select(only)]


def acceptable(r: Result) -> bool:
    """Passed, or an observation listed as a known miss."""
    return r.passed or (r.kind == "observation" and r.known_miss is not None)


def format_table(results: list[Result]) -> str:
    """A plain-text table of results."""
    rows = [("id", "kind", "measured", "threshold", "status", "s")]
    for r in results:
        status = "pass" if r.passed else ("known miss" if r.known_miss else "FAIL")
        measured = r.error or _short(r.measured)
        rows.append((r.id, r.kind, measured, r.threshold, status, f"{r.seconds:.1f}"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _short(value: Any, width: int = 60) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 3] + "..."
