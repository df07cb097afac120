"""Rendering results for the book's pages: the claims ledger and the benchmark tables.

Nothing here computes a result; it only lays out what :mod:`mmtoken.ledger` and the
benchmark scripts measured.

The ledger is grouped by chapter, in book order, under the chapter's title as the reader
sees it ("2. Global convergence to the max-margin token"): the order comes from
``_toc.yml``, the title from the chapter's first heading, the number from its place in
the numbered parts (the appendix part is lettered: ``style: alphaupper`` in ``_toc.yml``).
Each row carries the anchor ``claim-<id>`` (stable: the claim id itself) and links back
to the place its chapter states the claim, which a chapter marks with the role
``{claim}`<id>``` (see ``CONTRIBUTING.md``).
"""

from __future__ import annotations

__all__ = [
    "BOOK_DATA",
    "book_index",
    "benchmark_results",
    "ROOT",
    "BOOK",
    "LEDGER_DOC",
    "CLAIM_ANCHOR",
    "STATEMENT_ANCHOR",
    "CLAIM_ROLE",
    "KIND_LABELS",
    "Page",
    "page_title",
    "alpha_label",
    "book_order",
    "statement_places",
    "relative_url",
    "status",
    "plural",
    "summary_line",
    "bound",
    "on_grid",
    "measured_items",
    "ledger_payload",
    "rows_from_payload",
    "Group",
    "ledger_groups",
    "row_html",
    "TABLE_HEAD",
    "group_html",
    "claims_html",
    "claims_text",
    "OUTPUT_WIDTH",
    "claims_block",
    "chapter_claims",
    "benchmark_tables",
    "table_html",
    "above",
    "portable",
]

import dataclasses
import html
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .ledger import Result
from .ledger import status as ledger_status

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
LEDGER_DOC = "book/appendix/claims"
CLAIM_ANCHOR = "claim-"  # ledger row:            claims.html#claim-A.global.gd
STATEMENT_ANCHOR = "stmt-"  # statement in a chapter: 02_global.html#stmt-A.global.gd
CLAIM_ROLE = re.compile(r"\{claim\}`([^`]+)`")
KIND_LABELS = {"theorem": "theorem", "observation": "observation", "consistency": "consistency"}


# --- the book's order and titles ------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """One page of the book as the reader sees it in the sidebar."""

    doc: str  # document name, e.g. "book/part1/02_global"
    title: str  # first heading of the page
    label: str | None  # "2" for a numbered chapter, "A" for a lettered appendix, None otherwise
    part: str  # caption of its part in _toc.yml

    @property
    def stem(self) -> str:
        return self.doc.rsplit("/", 1)[-1]

    @property
    def heading(self) -> str:
        """Title with its number, as in the sidebar: ``2. Global convergence ...``."""
        return f"{self.label}. {self.title}" if self.label else self.title


def page_title(path: Path) -> str:
    """First level-1 heading of a MyST page, outside code cells and fences (markup kept as text)."""
    fence = None
    for line in path.read_text(encoding="utf-8").splitlines():
        s = line.strip()
        m = re.match(r"^(`{3,}|~{3,})", s)
        if m:
            if fence is None:
                fence = m.group(1)[0] * len(m.group(1))
            elif s.startswith(fence) and s.strip(fence[0]) == "":
                fence = None
            continue
        if fence is None and re.match(r"^# \S", line):
            return line[2:].strip()
    return path.stem


def alpha_label(n: int) -> str:
    """1 -> A, 26 -> Z, 27 -> AA (as sphinx-external-toc letters a part with ``style: alphaupper``)."""
    out = ""
    while n > 0:
        n, r = divmod(n - 1, 26)
        out = chr(ord("A") + r) + out
    return out


BOOK_DATA = Path(__file__).resolve().parent / "book_data"
"""What reader notebooks need from the repository, shipped with the package (a wheel has no
``_toc.yml``, chapters or ``benchmarks/``): ``book_index.json`` (:func:`book_index`) and
``benchmarks/*.json``. Written by ``python scripts/project_meta.py apply``, checked by its ``check``."""


def book_index(root: Path = ROOT) -> dict:
    """The book's pages in order and the claims' places: ``{"pages": [...], "places": {...}}``.

    Read from the checkout's ``_toc.yml`` and chapters when ``root`` is one, else from the copy
    shipped with the package (``BOOK_DATA / "book_index.json"``).
    """
    if (root / "_toc.yml").is_file():
        return {"pages": [dataclasses.asdict(p) for p in book_order(root)], "places": statement_places(root)}
    shipped = BOOK_DATA / "book_index.json"
    if not shipped.is_file():
        raise FileNotFoundError(f"no _toc.yml in {root} and no {shipped}: this mmtoken install is incomplete")
    return json.loads(shipped.read_text(encoding="utf-8"))


def benchmark_results(root: Path = ROOT) -> Path:
    """The folder of benchmark results: the checkout's ``benchmarks/results``, else the package's copy."""
    here = root / "benchmarks" / "results"
    return here if here.is_dir() else BOOK_DATA / "benchmarks"


def book_order(root: Path = ROOT) -> list[Page]:
    """Every page of ``_toc.yml`` in reading order, with its number or letter.

    As Jupyter Book numbers them: chapters of ``numbered`` parts are numbered on
    from one part to the next; a numbered part with ``style: alphaupper`` (the
    appendix) is lettered A, B, ... on its own count; other pages get no label.
    Outside a checkout (an installed wheel), the order shipped with the package.
    """
    if not (root / "_toc.yml").is_file():
        return [Page(**p) for p in book_index(root)["pages"]]
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    pages: list[Page] = []

    def add(doc: str, label: str | None, part: str) -> None:
        src = root / f"{doc}.md"
        pages.append(Page(doc, page_title(src) if src.is_file() else Path(doc).name, label, part))

    add(toc["root"], None, "")
    counts: dict[str, int] = {}
    for part in toc.get("parts", []):
        caption = part.get("caption", "")
        style = part.get("style", "numerical")
        style = style[0] if isinstance(style, list) else style
        if part.get("restart_numbering"):
            counts[style] = 0
        for entry in part.get("chapters", []):
            if "file" not in entry:
                continue
            label = None
            if part.get("numbered"):
                counts[style] = counts.get(style, 0) + 1
                n = counts[style]
                label = {"alphaupper": alpha_label(n), "alphalower": alpha_label(n).lower()}.get(style, str(n))
            add(entry["file"], label, caption)
    return pages


def statement_places(root: Path = ROOT) -> dict[str, list[str]]:
    """``claim id -> [document, ...]`` of the pages that mark it with ``{claim}`id```, in book order
    (outside a checkout, the places shipped with the package)."""
    if not (root / "_toc.yml").is_file():
        return book_index(root)["places"]
    places: dict[str, list[str]] = {}
    for page in book_order(root):
        src = root / f"{page.doc}.md"
        if not src.is_file():
            continue
        for cid in CLAIM_ROLE.findall(src.read_text(encoding="utf-8")):
            docs = places.setdefault(cid.strip(), [])
            if page.doc not in docs:
                docs.append(page.doc)
    return places


def relative_url(from_doc: str, to_doc: str) -> str:
    """Link from the HTML page of ``from_doc`` to that of ``to_doc`` (both document names)."""
    src, dst = Path(from_doc).parent.parts, Path(to_doc).parts
    common = 0
    while common < min(len(src), len(dst) - 1) and src[common] == dst[common]:
        common += 1
    return "/".join([".."] * (len(src) - common) + list(dst[common:])) + ".html"


# --- the ledger -----------------------------------------------------------------------------


def _row(r: Result | dict) -> dict:
    return r.to_dict() if isinstance(r, Result) else dict(r)


def status(r: Result | dict) -> str:
    """``pass``, ``known miss``, ``data missing`` or ``FAIL`` (:func:`mmtoken.ledger.status`)."""
    return ledger_status(_row(r))


def plural(n: int, one: str, many: str | None = None) -> str:
    """``1 claim``, ``2 claims``; ``plural(2, "known miss", "known misses")``."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def summary_line(results: Iterable[Result | dict], scale: str | None = None) -> str:
    """Two short lines, e.g. ``35 claims at quick scale: 34 passed, 1 known miss, 0 failed.``
    and ``20 theorems, 10 observations, 5 consistency checks.``"""
    rows = [_row(r) for r in results]
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
    """An identity's residual stated as a bound, the same text on any machine.

    ``bound("||KQ^T - W||", 5.6e-16, 1e-12)`` gives ``"||KQ^T - W|| < 1e-12: True"``;
    a stored output never prints the raw residual (its digits move with the BLAS
    and the CPU). A NaN residual prints ``False``.
    """
    return f"{label} < {below:g}: {bool(float(value) < below)}"  # 1e-12, 0.9


def above(x: float, floor: float, spec: str = ".1e") -> str:
    """``x`` formatted with ``spec``, or ``"< floor"`` when its magnitude is below ``floor``: a table cell.

    For a column whose last rows reach machine precision (a loss excess that is
    ``2.9e-14`` here and ``0.0`` on another machine): ``above(2.9e-14, 1e-12)`` gives
    ``"< 1e-12"``, ``above(2.1e-05, 1e-12)`` gives ``"2.1e-05"``.
    """
    if not floor > 0:
        raise ValueError(f"floor must be positive, got {floor!r}")
    return f"< {floor:.0e}" if abs(float(x)) < floor else format(float(x), spec)


def on_grid(x: float, step: float) -> str:
    """``x`` rounded to the nearest multiple of ``step``, printed with the decimals ``step`` has.

    For a result whose last digits move across numeric environments (a trained
    model's accuracy): ``step`` is chosen coarser than the spread measured across
    environments (CONTRIBUTING, "Stored outputs that hold on any machine").
    ``on_grid(0.8497, 0.01)`` gives ``"0.85"``.
    """
    if not step > 0:
        raise ValueError(f"step must be positive, got {step!r}")
    decimals = len(f"{step:.10f}".rstrip("0").split(".")[1])
    return f"{round(float(x) / step) * step:.{decimals}f}"


# How the ledger prints a measured float, so that the text holds on any machine (CONTRIBUTING,
# "Stored outputs that hold on any machine"): a magnitude below MACHINE_PRECISION is rounding error of
# float64 sums (an identity's residual; 0.0 here is 3e-16 elsewhere) and prints as that bound; a small
# value above it (a solver's tolerance, a first-order remainder) keeps SMALL_DIGITS significant digits,
# the ones a change of BLAS or CPU kernel leaves; anything larger keeps DIGITS (ledger._jsonable's 6).
MACHINE_PRECISION = 1e-10
SMALL = 1e-3
SMALL_DIGITS = 2
DIGITS = 6


def portable(v: Any) -> Any:
    """A measured value as the ledger shows it: floats rounded to the digits that hold on any machine.

    Floats of magnitude below ``MACHINE_PRECISION`` (zero included) become the string
    ``"< 1e-10"`` (a bound on the magnitude); those below ``SMALL`` keep ``SMALL_DIGITS``
    significant digits, the rest ``DIGITS``. Dicts and lists are converted element by
    element; other values are returned unchanged. :func:`ledger_payload` stores this form,
    so the page and the notebook print the same text.
    """
    if isinstance(v, bool) or v is None:
        return v
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
    if isinstance(v, bool) or v is None:
        return str(v)
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
    d = _row(r)
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
    keep = (
        "id",
        "statement",
        "checks",
        "kind",
        "chapter",
        "threshold",
        "measured",
        "passed",
        "details",
        "known_miss",
        "error",
        "missing",
    )
    rows = []
    for r in results:
        d = _row(r)
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


@dataclass(frozen=True)
class Group:
    """The ledger rows of one chapter."""

    page: Page | None
    anchor: str
    title: str
    rows: tuple


def ledger_groups(results: Iterable[Result | dict], root: Path = ROOT) -> list[Group]:
    """Rows grouped by chapter, in book order; claims of no page of the book come last."""
    order = book_order(root)
    rows: dict[str, list[dict]] = {}
    for r in results:
        d = _row(r)
        rows.setdefault(d.get("chapter") or "", []).append(d)
    groups = []
    for p in order:
        if p.stem in rows:
            groups.append(Group(p, f"ledger-{p.stem}", p.heading, tuple(rows.pop(p.stem))))
    rest = [d for k in sorted(rows) for d in rows[k]]
    if rest:
        groups.append(Group(None, "ledger-other", "Claims of no chapter", tuple(rest)))
    return groups


def _code(text: str) -> str:
    """Code span that may wrap after a dot or an underscore (``A.global.`` / ``reg_`` / ``path``)."""
    body = re.sub(r"([._])", r"\1<wbr>", html.escape(text))
    return f'<code class="docutils literal notranslate">{body}</code>'


def row_html(d: dict, back: str | None, chapter_url: str | None) -> str:
    """One ledger row: status | claim, kind and link back | what it checks | measured vs threshold."""
    st = status(d)
    cls = {"pass": "pass", "known miss": "miss", "data missing": "miss", "not yet computed": "miss", "FAIL": "fail"}[st]
    if back:
        where = f'<a class="claim-back" href="{html.escape(back)}" title="where the chapter states it">stated here</a>'
    elif chapter_url:
        where = f'<a class="claim-chapter" href="{html.escape(chapter_url)}">its chapter</a>'
    else:
        where = ""
    claim = (
        f'{_code(d["id"])}<span class="ledger-kind ledger-kind-{html.escape(d["kind"])}">'
        f"{html.escape(KIND_LABELS.get(d['kind'], d['kind']))}</span>"
        + (f'<span class="ledger-where">{where}</span>' if where else "")
    )
    checks = f'{html.escape(d["statement"])}<span class="ledger-sub">checks: {html.escape(d["checks"])}</span>'
    measured = "<br>".join(html.escape(x) for x in measured_items(d))
    result = (
        f'<span class="ledger-measured">{measured}</span>'
        f'<span class="ledger-sub">threshold: {html.escape(d["threshold"])}</span>'
    )
    if d.get("known_miss"):
        result += f'<span class="ledger-sub ledger-note">known miss: {html.escape(d["known_miss"])}</span>'
    return (
        f'<tr id="{CLAIM_ANCHOR}{html.escape(d["id"])}" class="ledger-{cls}">'
        f'<td class="ledger-status"><span class="ledger-badge ledger-badge-{cls}">{st}</span></td>'
        f'<td class="ledger-claim">{claim}</td><td class="ledger-checks">{checks}</td>'
        f'<td class="ledger-result">{result}</td></tr>'
    )


TABLE_HEAD = (
    '<table class="ledger"><colgroup><col class="ledger-col-status"><col class="ledger-col-claim">'
    '<col class="ledger-col-checks"><col class="ledger-col-result"></colgroup>'
    "<thead><tr><th>status</th><th>claim</th><th>what it checks</th><th>measured / threshold</th>"
    "</tr></thead><tbody>"
)


def group_html(group: Group, from_doc: str = LEDGER_DOC, places: dict[str, list[str]] | None = None) -> str:
    """The table of one group, with links relative to the page of ``from_doc``."""
    places = statement_places() if places is None else places
    out = [TABLE_HEAD]
    for d in group.rows:
        docs = places.get(d["id"], [])
        own = group.page.doc if group.page else None
        target = own if own in docs else (docs[0] if docs else None)
        back = f"{relative_url(from_doc, target)}#{STATEMENT_ANCHOR}{d['id']}" if target else None
        chapter = relative_url(from_doc, own) if own else None
        out.append(row_html(d, back, chapter))
    out.append("</tbody></table>")
    return "".join(out)


def claims_html(results: Iterable[Result | dict], from_doc: str = LEDGER_DOC, root: Path = ROOT) -> str:
    """The whole ledger as one HTML fragment (one ``<h2>`` and table per chapter).

    The book renders the same tables under real headings with the ``claims-ledger``
    directive (``book/_ext/claims.py``); this is for a notebook opened outside the book.
    """
    places = statement_places(root)
    parts = []
    for g in ledger_groups(results, root):
        parts.append(f'<h2 id="{g.anchor}">{html.escape(g.title)}</h2>')
        parts.append(group_html(g, from_doc, places))
    return '<div class="ledger-wrap">' + "".join(parts) + "</div>"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def claims_text(results: Iterable[Result | dict]) -> str:
    """Plain text: one line per claim with status and measured value (no timings)."""
    return "\n".join(f"{status(r):10s} {_row(r)['id']:28s} {_clip('; '.join(measured_items(r)), 90)}" for r in results)


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
        d = _row(r)
        out.append(_clip(f"{status(d):10s} {d['id']} ({d['kind']})", width))
        for item in measured_items(d):
            out += wrapped(item)
        out += wrapped(f"threshold: {d['threshold']}")
        if d.get("known_miss"):
            out += wrapped(f"known miss: {d['known_miss']}")
    return "\n".join(out)


def chapter_claims(only: list[str], width: int = OUTPUT_WIDTH) -> str:
    """Evaluate the claims whose ids start with a prefix of ``only`` and return
    :func:`claims_block` of them: the closing "The claims" section of a chapter.

    A chapter that has already run its experiments in the same kernel reuses them
    (each experiment module caches its ``run()``). Each result is recorded in the
    results cache (:func:`mmtoken.ledger.run_one`), where the claims appendix,
    the tests and the command line read it back (:func:`mmtoken.ledger.recorded`).
    """
    from .ledger import run_claims

    results = run_claims(only)
    if not results:
        raise ValueError(f"no registered claim starts with {only!r} (import the chapter's module first)")
    return claims_block(results, width)


# --- benchmarks -----------------------------------------------------------------------------


def _meta_line(meta: dict | None, fallback: str) -> str:
    """``measured 2026-11-29 on <cpu> (2 cores); torch 2.13.0; torch threads 2; Python 3.11.7``."""
    if not meta:
        return fallback
    when = f"measured {meta['date']}" if meta.get("date") else "date not recorded"
    machine = meta.get("cpu") or meta.get("machine")
    if machine:
        when += f" on {machine}" + (f" ({meta['cores']} cores)" if meta.get("cores") else "")
    bits = [when]
    for key, label in (("torch", "torch"), ("threads", "torch threads"), ("python", "Python")):
        if meta.get(key) is not None:
            bits.append(f"{label} {meta[key]}")
    if meta.get("note"):
        bits.append(meta["note"])
    return "; ".join(bits)


def benchmark_tables(results_dir: Path, root: Path = ROOT) -> dict[str, tuple[str, Any]]:
    """``name -> (caption, DataFrame)`` for each benchmark file in ``results_dir``.

    Headers carry units; each caption says when and on what machine the numbers were
    measured (the ``meta`` block the benchmark scripts write).
    """
    import pandas as pd

    out: dict[str, tuple[str, Any]] = {}
    f = results_dir / "figures.json"
    if f.is_file():
        data = json.loads(f.read_text())
        rows = [
            {
                "published figure (paper A)": r["figure"],
                "compiled kernel, batched (ms)": round(1000 * r["batched_compiled_s"], 1),
                "torch, batched (ms)": round(1000 * r["batched_torch_s"], 1),
                "public-style loop (s)": round(r["per_start_public_s"], 2),
                "speed-up: kernel": f"{r['speedup']:.0f}x",
                "speed-up: torch": f"{r['speedup_torch']:.1f}x",
            }
            for r in data["rows"]
        ]
        meta = data.get("meta", {})
        out["figures"] = (
            _meta_line(meta, "machine not recorded") + (f"; {meta['steps']} steps" if meta.get("steps") else ""),
            pd.DataFrame(rows),
        )
    f = results_dir / "whole_process.json"
    if f.is_file():
        data = json.loads(f.read_text())
        pub = data["rows"].get("public-style script", {}).get("cpu_s_median")
        rows = [
            {
                "process": name,
                "CPU (s), median": r["cpu_s_median"],
                "CPU (s), min": r["cpu_s_min"],
                "public-style / this": f"{pub / r['cpu_s_median']:.1f}x" if pub and name.startswith("mmtoken") else "",
            }
            for name, r in data["rows"].items()
        ]
        meta = data.get("meta", {})
        out["whole_process"] = (
            _meta_line(meta, "machine not recorded") + (f"; {meta['repeat']} runs each" if meta.get("repeat") else ""),
            pd.DataFrame(rows),
        )
    f = results_dir / "random.json"
    if f.is_file():
        data = json.loads(f.read_text())
        measures = {
            "batched (instances/s)": lambda r: f"{r['batched_inst_per_s']:,.0f}",
            "one at a time (instances/s)": lambda r: f"{r['loop_inst_per_s']:,.0f}",
            "speed-up": lambda r: f"{r['speedup']:.1f}x",
            "max |difference| of the iterates": lambda r: f"{r['max_abs_diff']:.1e}",
            "sweep: instances": lambda r: f"{r['sweep_instances']}",
            "sweep: wall time (s)": lambda r: f"{r['sweep_wall_s']:.1f}",
            "sweep: CPU time (s)": lambda r: f"{r['sweep_cpu_s']:.1f}",
        }
        trainers = {name: r for name, r in data.items() if isinstance(r, dict) and "batched_inst_per_s" in r}
        # one column per trainer (two), one row per measure: fits the column
        rows = [{"measure": m, **{name: f(r) for name, r in trainers.items()}} for m, f in measures.items()]
        cfg = f"scale {data.get('scale')}, d = {data.get('d')}, {data.get('steps')} steps"
        out["random"] = (_meta_line(data.get("meta"), "machine not recorded") + f"; {cfg}", pd.DataFrame(rows))
    f = results_dir / "book.json"
    if f.is_file():
        data = json.loads(f.read_text())
        chapters = {(nb[: -len(".ipynb")] if nb.endswith(".ipynb") else nb): s for nb, s in data["chapters"].items()}
        rows = [
            {"page": p.heading, "execution (s)": chapters.pop(p.doc)} for p in book_order(root) if p.doc in chapters
        ]
        rows += [{"page": doc, "execution (s)": s} for doc, s in chapters.items()]
        rows.append({"page": "whole book", "execution (s)": data["total_s"]})
        out["book"] = (_meta_line(data.get("meta"), "machine not recorded"), pd.DataFrame(rows))
    return out


def table_html(caption: str, frame) -> str:
    """A benchmark table with its caption (what, when, where), as HTML."""
    body = frame.to_html(index=False, classes="table bench-table", border=0, escape=True)
    return f'<div class="bench-wrap"><p class="bench-meta">{html.escape(caption)}</p>{body}</div>'
