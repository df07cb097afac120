"""The claims and the measured numbers as text, the same on any machine: what a chapter prints
(:func:`bound`, :func:`above`, :func:`on_grid`, its closing :func:`chapter_claims`) and what the claims
appendix prints and stores (:func:`summary_line`, :func:`claims_text`, :func:`ledger_payload`, which
:mod:`mmtoken.book.html_tables` renders). Nothing here computes a result.
"""

from __future__ import annotations

__all__ = [
    "row_dict",
    "status",
    "plural",
    "summary_line",
    "bound",
    "above",
    "on_grid",
    "sci",
    "power_of_ten",
    "spaced",
    "numbers",
    "portable",
    "measured_items",
    "ledger_payload",
    "rows_from_payload",
    "claims_text",
    "OUTPUT_WIDTH",
    "claims_block",
    "RECORDED",
    "NOT_RECORDED",
    "chapter_claims",
]

import dataclasses
import json
import math
from collections.abc import Iterable
from typing import Any

from mmtoken.book.ledger import Result, clipped, run_one
from mmtoken.book.ledger import status as ledger_status


def row_dict(r: Result | dict) -> dict:
    """A claim's result as the dict the ledger renders (:meth:`mmtoken.book.ledger.Result.to_dict`, or a copy of the dict)."""
    return r.to_dict() if isinstance(r, Result) else dict(r)


def status(r: Result | dict) -> str:
    """``pass``, ``known miss``, ``data missing`` or ``FAIL`` (:func:`mmtoken.book.ledger.status`)."""
    return ledger_status(row_dict(r))


def plural(n: int, one: str, many: str | None = None) -> str:
    """``1 claim``, ``2 claims``; ``plural(2, "known miss", "known misses")``."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def summary_line(results: Iterable[Result | dict], scale: str | None = None) -> str:
    """Two short lines, e.g. ``35 claims at quick scale: 34 passed, 1 known miss, 0 failed.``
    and ``20 theorems, 10 observations, 5 consistency checks.``"""
    rows = [row_dict(r) for r in results]
    st = [status(r) for r in rows]
    kinds = [r["kind"] for r in rows]
    where = f" at {scale} scale" if scale else ""
    absent = f"\n{st.count('data missing')} not run: their data are missing." if "data missing" in st else ""
    if "not yet computed" in st:
        absent += f"\n{st.count('not yet computed')} not yet computed: `python -m mmtoken claims` computes them."
    return (
        f"{plural(len(rows), 'claim')}{where}: {st.count('pass')} passed, "
        f"{plural(st.count('known miss'), 'known miss', 'known misses')}, {st.count('FAIL')} failed.{absent}\n"
        f"{plural(kinds.count('theorem'), 'theorem')}, {plural(kinds.count('observation'), 'observation')}, "
        f"{plural(kinds.count('consistency'), 'consistency check')}."
    )


def bound(label: str, value: float, below: float) -> str:
    """An identity's residual stated as a bound, the same text on any machine (a stored output never prints
    the raw residual: its digits move with the BLAS and the CPU); a NaN residual prints ``False``.
    ``bound("||KQ^T - W||", 5.6e-16, 1e-12)`` gives ``"||KQ^T - W|| < 1e-12: True"``."""
    return f"{label} < {below:g}: {bool(float(value) < below)}"  # 1e-12, 0.9


def above(x: float, floor: float, spec: str = ".1e") -> str:
    """``x`` formatted with ``spec``, or ``"< floor"`` when its magnitude is below ``floor``: a table cell of a
    column whose last rows reach machine precision (a loss excess ``2.9e-14`` here, ``0.0`` elsewhere).
    ``above(2.9e-14, 1e-12)`` gives ``"< 1e-12"``, ``above(2.1e-05, 1e-12)`` gives ``"2.1e-05"``."""
    if not floor > 0:
        raise ValueError(f"floor must be positive, got {floor!r}")
    return f"< {floor:.0e}" if abs(float(x)) < floor else format(float(x), spec)


def sci(x: float) -> str:
    """``x`` to one significant digit in scientific notation, as a claim's text writes a tolerance: ``1e-6``
    (Python's own ``f"{1e-6:g}"`` is ``1e-06``)."""
    mantissa, exponent = f"{x:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def power_of_ten(k: int) -> str:
    """A step count as a claim's text writes it: ``10^6``, or ``2 * 10^4`` for a digit times a power of ten."""
    e = len(str(k)) - 1
    m, rest = divmod(k, 10**e)
    if k <= 0 or rest:
        raise ValueError(f"{k} is not a digit times a power of ten")
    return f"10^{e}" if m == 1 else f"{m} * 10^{e}"


def spaced(k: int) -> str:
    """A count with thin thousands, as a claim's text writes it: ``20 000``."""
    return f"{k:,}".replace(",", " ")


def numbers(xs: Iterable[float], sep: str = ", ", brackets: str = "()") -> str:
    """Numbers as a claim's text writes them, each with ``:g``: ``(-1, 0, 1)``; ``sep=","`` gives ``(0,-1)``,
    ``brackets="{}"`` a set, ``brackets=""`` a bare list ``0.05, 0.1, 0.5``."""
    if len(brackets) not in (0, 2):
        raise ValueError(f"brackets must be empty or an opening and a closing character, got {brackets!r}")
    inner = sep.join(f"{x:g}" for x in xs)
    return f"{brackets[:1]}{inner}{brackets[1:]}"


def on_grid(x: float, step: float) -> str:
    """``x`` rounded to the nearest multiple of ``step``, printed with the decimals ``step`` has, for a result
    whose last digits move across machines (a trained model's accuracy; ``step`` coarser than the measured
    spread: CONTRIBUTING, "Stored outputs that hold on any machine"). ``on_grid(0.8497, 0.01)`` gives
    ``"0.85"``; a NaN or infinite ``x`` prints as ``"nan"``, ``"inf"``."""
    if not step > 0:
        raise ValueError(f"step must be positive, got {step!r}")
    if not math.isfinite(x):  # a run that diverged (chapter 9's collapsed control can end in NaN)
        return str(float(x))
    decimals = len(f"{step:.10f}".rstrip("0").split(".")[1])
    return f"{round(float(x) / step) * step:.{decimals}f}"


# How the ledger prints a measured float, so that the text holds on any machine (CONTRIBUTING,
# "Stored outputs that hold on any machine"): a magnitude below MACHINE_PRECISION is rounding error of
# float64 sums (an identity's residual; 0.0 here is 3e-16 elsewhere) and prints as that bound; a small
# value above it (a solver's tolerance, a first-order remainder) keeps SMALL_DIGITS significant digits,
# the ones a change of BLAS or CPU kernel leaves; anything larger keeps DIGITS (ledger.jsonable's 6).
MACHINE_PRECISION = 1e-10
SMALL = 1e-3
SMALL_DIGITS = 2
DIGITS = 6


def portable(v: Any) -> Any:
    """A measured value as the ledger shows it, floats rounded as above (below ``MACHINE_PRECISION``, zero
    included, the string ``"< 1e-10"``), dicts and lists element by element, anything else unchanged.
    :func:`ledger_payload` stores this form, so the page and the notebook print the same text."""
    if isinstance(v, float):
        if not math.isfinite(v):
            return v
        if abs(v) < MACHINE_PRECISION:
            return f"< {MACHINE_PRECISION:.0e}"
        return float(f"{v:.{SMALL_DIGITS if abs(v) < SMALL else DIGITS}g}")
    if isinstance(v, dict):
        return {k: portable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [portable(x) for x in v]
    return v


def _number(v: Any) -> str:
    v = portable(v)
    if isinstance(v, float):
        text = f"{v:.{DIGITS}g}"
        return text + ".0" if text.lstrip("-").isdigit() else text  # 1.0, not 1: a float
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_number(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_number(x) for x in v) + "]"
    return str(v)


def measured_items(r: Result | dict) -> list[str]:
    """The measured value as short lines (``key = value``), or the error."""
    d = row_dict(r)
    if d.get("error"):
        return [f"error: {d['error']}"]
    if d.get("missing"):
        return [f"not run: {d['missing']}"]
    if d.get("pending"):
        return [d["pending"]]
    m = d.get("measured")
    if isinstance(m, dict):
        return [f"{k} = {_number(v)}" for k, v in m.items()]
    return [_number(m)]


def ledger_payload(results: Iterable[Result]) -> str:
    """What the ledger page shows, as JSON text ``{"rows": [...]}`` (no timings: nbval compares it).

    Text, not a JSON output: a notebook's glued (undisplayed) outputs must be strings.
    The ``claims-ledger`` directive reads it back with :func:`rows_from_payload`.
    """
    keep = [f.name for f in dataclasses.fields(Result) if f.name not in ("seconds", "pending")]
    rows = []
    for r in results:
        d = row_dict(r)
        row = {k: d.get(k) for k in keep} | ({"pending": d["pending"]} if d.get("pending") else {})
        row["measured"] = portable(row["measured"])  # the digits that hold on any machine
        rows.append(row)
    return json.dumps({"rows": rows})  # keys in their order


def rows_from_payload(text: str) -> list[dict]:
    """The rows of :func:`ledger_payload`, from its text or from the ``repr`` a notebook stores of it."""
    import ast

    text = text.strip()
    if text[:1] in "'\"(":  # the text/plain repr of a str
        text = ast.literal_eval(text)
    rows = json.loads(text).get("rows")
    if not isinstance(rows, list):
        raise ValueError("ledger payload: no list of rows")
    return rows


def claims_text(results: Iterable[Result | dict]) -> str:
    """Plain text: one line per claim with status and its whole measured value (no timings).

    Never clipped: nbval compares it, chapters 9 and 12 with a tolerance, and a line clipped at a fixed
    width would cut a different number where a wider one comes first (``8.0`` on one CPU, ``10.0`` on another).
    """
    return "\n".join(f"{status(r):10s} {row_dict(r)['id']:28s} {'; '.join(measured_items(r))}" for r in results)


OUTPUT_WIDTH = 72
"""Characters of a printed line that fit the book's column at 1280 px (tests/test_output_width.py)."""


def claims_block(results: Iterable[Result | dict], width: int = OUTPUT_WIDTH) -> str:
    """Claims as text that fits ``width`` columns: per claim a head line, the measured
    values and the threshold, each wrapped under a six-space indent (no timings)."""
    import textwrap

    def wrapped(text: str) -> list[str]:
        return textwrap.wrap(
            text, width, initial_indent=" " * 6, subsequent_indent=" " * 8, break_on_hyphens=False
        ) or [" " * 6]

    out: list[str] = []
    for r in results:
        d = row_dict(r)
        out.append(clipped(f"{status(d):10s} {d['id']} ({d['kind']})", width))
        for item in measured_items(d):
            out += wrapped(item)
        out += wrapped(f"threshold: {d['threshold']}")
        if d.get("known_miss"):
            out += wrapped(f"known miss: {d['known_miss']}")
    return "\n".join(out)


RECORDED = "(recorded in the ledger: a run of the book itself)"
NOT_RECORDED = "(not recorded: a reader's session; the book's own runs record)"
"""The last line of a chapter's claims: whether they went into the ledger (:func:`mmtoken.book.records.recordable`).
Stored outputs hold :data:`RECORDED`; nbval's sanitizer (``tests/nbval_sanitize.cfg``) reads both as one."""


def chapter_claims(only: list[str], width: int = OUTPUT_WIDTH) -> str:
    """Evaluate the claims whose ids start with a prefix of ``only`` and return :func:`claims_block` of
    them: the closing "The claims" section of a chapter, and whether they were recorded (:data:`RECORDED`,
    :data:`NOT_RECORDED`). In the book's own runs each result is recorded (:func:`mmtoken.book.ledger.run_one`)
    for the claims appendix, the tests and the command line, and so is each claim's check of its competitor
    (:func:`mmtoken.book.competitors.run_all`), which reuses the runs the claims just made; in a reader's session
    (an edit, a changed constant, or simply not one of the book's runs) nothing is."""
    from mmtoken.book import competitors, records
    from mmtoken.book.ledger import select

    claims = select(only)
    if not claims:
        raise ValueError(f"no registered claim starts with {only!r} (import the chapter's module first)")
    results = [run_one(c) for c in claims]
    competitors.run_all(only)
    kept = all(records.recordable(c.func) for c in claims)
    return claims_block(results, width) + "\n" + (RECORDED if kept else NOT_RECORDED)
