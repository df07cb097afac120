"""The claims ledger: every numerical statement of the book as a check in code.

Experiment modules register claims with :func:`claim`; :func:`run_claims` runs them. In the book's own runs
(``make nbval``, the builds under ``make``, ``python -m mmtoken claims``: :func:`mmtoken.config.recording`, a
switch they set) every evaluation of the book's unmodified code is **recorded** in the one store
(``data/results/claims/<scale>/``, :func:`record`) under a fingerprint of the code the claim's computation
depends on (:mod:`mmtoken.book.fingerprint`) and of the scale; anywhere else (a reader's session, a test) claims
are evaluated and shown, and nothing is recorded. A chapter evaluates
its own claims (:func:`mmtoken.book.report.chapter_claims`); the claims appendix, the tests and
``python -m mmtoken claims`` read them back with :func:`recorded`, which evaluates only what is missing or
stale. A claim whose input data are not on disk (``requires=``: Yelp, never downloaded for you) reports
**data missing**, neither a pass nor a failure, with how to get the data.

A claim function returns a :class:`Measured`: the value it measured and whether it meets the threshold
written down before measuring. ``kind`` is one of

``"theorem"``
    what a result guarantees under its stated hypotheses, checked with the algorithm the theorem is
    about; must pass;
``"observation"``
    what an experiment shows beyond the theorems, which no theorem guarantees: an algorithm the theorems do
    not cover (e.g. normalized GD), real data, optima that are not certified (the best of a multi-start
    search), or a heuristic rate; judged on the worst of held-out seeds or instances (its bars set on trial
    seeds or instances before the judged ones run; on real data every choice made on a validation split); a
    miss may be declared with ``known_miss=`` (its evidence, written after measuring), never by moving the
    threshold (the claims appendix, ``book/appendix/claims.md``, gives the same definition);
``"consistency"``
    an identity the code must satisfy (a closed form against an independent computation of the same
    quantity); must pass, but is not evidence for a paper's result.
"""

from __future__ import annotations

__all__ = [
    "KINDS",
    "Measured",
    "Claim",
    "Result",
    "STATUSES",
    "status",
    "REGISTRY",
    "claim",
    "known_misses",
    "evaluate",
    "run_one",
    "clipped",
    "RESULT",
    "record",
    "record_key",
    "recorded_result",
    "recorded",
    "select",
    "run_claims",
    "acceptable",
    "format_table",
    "TABLE_CELL",
    "one_line",
    "data_missing",
    "compute_command",
    "pending_result",
    "jsonable",
]

import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

from mmtoken.book import records
from mmtoken.book.records import Kind

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
    known_miss: str | None = None
    requires: Callable[[], str | None] | None = field(default=None, repr=False)
    competitor: str = ""
    against: Callable[[], Measured] | None = field(default=None, repr=False)

    def missing(self) -> str | None:
        """Why the claim's input data are absent (how to get them), or ``None`` when they are here."""
        return self.requires() if self.requires is not None else None


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
    missing: str | None = None  # the input data are absent: neither passed nor failed
    pending: str | None = None  # not yet computed (no valid record): the command that computes it

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def status(self) -> str:
        """``pass``, ``known miss``, ``data missing``, ``not yet computed`` or ``FAIL``."""
        return status(self.to_dict())


STATUSES = ("pass", "known miss", "data missing", "not yet computed", "FAIL")


def status(row: dict) -> str:
    """The status of a result given as a dict (:meth:`Result.to_dict` or a recorded row)."""
    if row.get("missing"):
        return "data missing"
    if row.get("pending"):
        return "not yet computed"
    return "pass" if row["passed"] else ("known miss" if row.get("known_miss") else "FAIL")


REGISTRY: dict[str, Claim] = {}


def claim(
    id: str,
    *,
    statement: str,
    checks: str,
    threshold: str,
    kind: str = "theorem",
    chapter: str = "",
    known_miss: str | None = None,
    requires: Callable[[], str | None] | None = None,
    competitor: str = "",
    against: Callable[[], Measured] | None = None,
) -> Callable:
    """Register the decorated zero-argument function as claim ``id``.

    ``known_miss``: for an observation that misses its threshold, the evidence (what was measured and why),
    shown with the result when it misses. ``requires``: a function returning ``None`` when the claim's input
    data are on disk, else how to get them (the claim is then *data missing*, not run). ``competitor``: the
    nearest wrong answer the threshold must reject (another SVM, another selection, a collapsed model), in
    words; ``against``: a zero-argument function applying the claim's own check to it, which must return a
    :class:`Measured` that does *not* pass (``tests/test_competitors*.py`` asserts it).
    """
    if kind not in KINDS:
        raise ValueError(f"claim {id}: kind {kind!r} is not one of {KINDS}")
    if known_miss is not None and (kind != "observation" or not str(known_miss).strip()):
        raise ValueError(f"claim {id}: known_miss must be a non-empty text, and only on an observation claim")
    if requires is not None and not callable(requires):
        raise ValueError(f"claim {id}: requires must be a function returning None or a message")
    if against is not None and (not callable(against) or not competitor.strip()):
        raise ValueError(f"claim {id}: against must be a function, given with the competitor it checks")

    def register(func: Callable[[], Measured]) -> Callable[[], Measured]:
        if id in REGISTRY and REGISTRY[id].func.__qualname__ != func.__qualname__:
            raise ValueError(f"claim id {id!r} is registered twice")
        REGISTRY[id] = Claim(
            id, statement, checks, kind, threshold, chapter, func, known_miss, requires, competitor, against
        )
        return func

    return register


def known_misses() -> dict[str, str]:
    """Registered claims declared as known misses: id -> evidence."""
    return {c.id: c.known_miss for c in REGISTRY.values() if c.known_miss}


def jsonable(value: Any) -> Any:
    """``value`` as JSON can hold it (NumPy scalars as Python ones), floats to six significant digits."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return value


def _result(c: Claim, *outcome) -> Result:
    """The result of claim ``c``: its registered text, then ``outcome`` (the fields from ``measured`` on)."""
    return Result(c.id, c.statement, c.checks, c.kind, c.chapter, c.threshold, *outcome)


def _missing_result(c: Claim, why: str) -> Result:
    return _result(c, None, False, 0.0, "", None, None, why)


def data_missing(exc: BaseException) -> str | None:
    """The message of the :class:`~mmtoken.datasets.download.DatasetMissing` that ``exc`` is or was
    raised from (its ``__cause__`` / ``__context__`` chain), else ``None``."""
    from mmtoken.datasets.download import DatasetMissing

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, DatasetMissing):
            return str(exc) or type(exc).__name__
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def evaluate(c: Claim) -> Result:
    """Run claim ``c`` now, without reading or writing the record.

    A claim whose data are absent (``requires=``), or whose function fails for want of them
    (:func:`data_missing`: a loader offline, a file not downloaded), is *data missing*: never a failure.
    """
    if why := c.missing():
        return _missing_result(c, why)
    start = time.perf_counter()
    try:
        m = c.func()
        measured, passed, details, error = jsonable(m.value), bool(m.passed), m.details, None
    except Exception as exc:  # a crashing claim is a failing claim, with the reason
        if why := data_missing(exc):  # no data here (offline, not downloaded): neither passed nor failed
            return _missing_result(c, why)
        measured, passed, details = None, False, ""
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    seconds = time.perf_counter() - start
    return _result(c, measured, passed, round(seconds, 2), details, c.known_miss if not passed else None, error)


# --------------------------------------------------------------------------- recorded results


RESULT = Kind(
    "claims",
    "result",
    "func",
    (__name__, "evaluate"),
    ("id", "statement", "checks", "kind", "threshold", "chapter", "known_miss", "competitor"),
)
"""A claim's result (:func:`evaluate`); :data:`mmtoken.book.competitors.VERDICT` is its competitor's verdict."""


def record(c: Claim, r: Result) -> None:
    """Record ``r``, claim ``c``'s result (:func:`mmtoken.book.records.record`: in the book's own runs only)."""
    records.record(c, RESULT, r.to_dict())


def record_key(c: Claim, scale: str | None = None) -> tuple[str, str, str]:
    """(path, name, fingerprint) of claim ``c``'s result record (:func:`mmtoken.book.records.record_key`)."""
    return records.record_key(c, RESULT, scale)


def recorded_result(c: Claim, scale: str | None = None) -> Result | None:
    """The recorded result of claim ``c`` at ``scale``, or ``None`` if there is none valid for today's code; a
    failure recorded for want of data (older code recorded those) counts as none: the claim is evaluated again."""
    meta = records.read_record(c, RESULT, scale)
    try:
        r = Result(**meta) if meta is not None else None
    except TypeError:  # a record of another layout
        return None
    return None if r is None or r.missing or r.pending or (not r.passed and "DatasetMissing" in (r.error or "")) else r


def run_one(c: Claim) -> Result:
    """Run claim ``c`` and record its result (:func:`record`, in the book's own runs only)."""
    r = evaluate(c)
    record(c, r)
    return r


def compute_command(c: Claim) -> str:
    """The command that evaluates and records claim ``c``."""
    return f"python -m mmtoken claims --only {c.id}"


def pending_result(c: Claim) -> Result:
    """Claim ``c`` without a valid record, shown as *not yet computed* with :func:`compute_command`."""
    return replace(_missing_result(c, None), pending=f"not yet computed: `{compute_command(c)}`")


def recorded(only: list[str] | None = None, compute_missing: bool = True, pending: bool = False) -> list[Result]:
    """The selected claims' results, in id order, read from their records.

    A claim with no valid record (never evaluated at this scale, or by other code) is evaluated now and
    recorded when ``compute_missing``, else shown as *not yet computed* (:func:`pending_result`) when
    ``pending``, else left out; one whose input data are absent is *data missing*. The claims appendix
    reads with ``compute_missing=False, pending=True``: it never computes.
    """
    out = []
    for c in select(only):
        if why := c.missing():
            out.append(_missing_result(c, why))
            continue
        r = recorded_result(c)
        if r is None and compute_missing and not records.recordable(c.func):  # evaluated, no record nor lock
            r = evaluate(c)
        elif r is None and compute_missing:
            from mmtoken.book.resultcache import record_once

            r = record_once(record_key(c)[0], partial(recorded_result, c), partial(run_one, c))
        if r is None and pending:
            r = pending_result(c)
        if r is not None:
            out.append(r)
    return out


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
    """Passed, an observation declared as a known miss, or a claim whose data are missing."""
    return r.passed or bool(r.missing) or (r.kind == "observation" and r.known_miss is not None)


TABLE_CELL = 60
"""Most characters of a text cell of :func:`format_table` (the measured value, or why there is none, and the
threshold): each row is one line; ``python -m mmtoken claims --json`` holds the full texts."""


def one_line(value: Any, width: int = TABLE_CELL) -> str:
    """``str(value)`` on one line (every run of white space, new lines included, one space), :func:`clipped`."""
    return clipped(" ".join(str(value).split()), width)


def format_table(results: list[Result]) -> str:
    """A plain-text table of results, one line per result (cells cut at :data:`TABLE_CELL` characters)."""
    rows = [("id", "kind", "measured", "threshold", "status", "s")]
    for r in results:
        measured = r.error or r.missing or r.pending or r.measured
        rows.append((r.id, r.kind, one_line(measured), one_line(r.threshold), r.status, f"{r.seconds:.1f}"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if any(v.endswith("...") for row in rows[1:] for v in row[2:4]):
        lines.append(f"(cells cut at {TABLE_CELL} characters end in '...': `--json` prints them in full)")
    return "\n".join(lines)


def clipped(value: Any, width: int = 60) -> str:
    """``str(value)``, cut to ``width`` characters with a trailing ``...`` when longer."""
    text = str(value)
    return text if len(text) <= width else text[: width - 3] + "..."
