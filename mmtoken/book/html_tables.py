"""The book's tables as HTML: the claims ledger and the benchmark tables (nothing here computes a result).

The ledger is grouped by chapter, in book order, under the chapter's title as the reader sees it
(:mod:`mmtoken.book.pages`). Each row carries the anchor ``claim-<id>`` and links back to the place its
chapter states the claim, marked with the role ``{claim}`<id>``` (see ``CONTRIBUTING.md``). The book
renders the rows the claims appendix stores (:func:`mmtoken.book.report.ledger_payload`) with the
``claims-ledger`` directive (``book/_ext/claims.py``). Beside each claim's status a row shows its verdict at
paper scale, as ``benchmarks/paper_scale.py`` measured it (:mod:`mmtoken.book.scale_runs`), and each chapter's
table says when and at which commit that run was made.
"""

from __future__ import annotations

__all__ = [
    "LEDGER_DOC",
    "CLAIM_ANCHOR",
    "STATEMENT_ANCHOR",
    "KIND_LABELS",
    "Group",
    "ledger_groups",
    "paper_html",
    "row_html",
    "TABLE_HEAD",
    "group_html",
    "claims_html",
    "benchmark_results",
    "benchmark_file",
    "benchmark_tables",
    "table_html",
]

import html
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmtoken.book.ledger import Result
from mmtoken.book.pages import BOOK_DATA, ROOT, Page, book_order, relative_url, statement_places
from mmtoken.book.report import measured_items, row_dict, status
from mmtoken.book.scale_runs import DIFFERS, ChapterRun, chapter_run, stopped
from mmtoken.book.scale_runs import FILE as SCALE_FILE

LEDGER_DOC = "book/appendix/claims"
CLAIM_ANCHOR = "claim-"  # ledger row:            claims.html#claim-A.global.gd
STATEMENT_ANCHOR = "stmt-"  # statement in a chapter: 02_global.html#stmt-A.global.gd
KIND_LABELS = {"theorem": "theorem", "observation": "observation", "consistency": "consistency"}


# --- the ledger -----------------------------------------------------------------------------


_NO_RUN = ChapterRun("", None)  # a row rendered outside a chapter's group: not measured at paper scale


@dataclass(frozen=True)
class Group:
    """The ledger rows of one chapter, and the chapter's run at paper scale."""

    page: Page | None
    anchor: str
    title: str
    rows: tuple
    paper: ChapterRun = _NO_RUN


def ledger_groups(results: Iterable[Result | dict], root: Path = ROOT, results_dir: Path | None = None) -> list[Group]:
    """Rows grouped by chapter, in book order; claims of no page of the book come last.

    Each group carries its chapter's paper-scale run from the benchmark results in ``results_dir``
    (default :func:`benchmark_results` of ``root``): a measurement stored with the repository, read, never
    recomputed.
    """
    runs = benchmark_file(benchmark_results(root) if results_dir is None else results_dir, SCALE_FILE)
    rows: dict[str, list[dict]] = {}
    for r in results:
        d = row_dict(r)
        rows.setdefault(d.get("chapter") or "", []).append(d)
    groups = [
        Group(p, f"ledger-{p.stem}", p.heading, tuple(rows.pop(p.stem)), chapter_run(runs, p.doc))
        for p in book_order(root)
        if p.stem in rows
    ]
    rest = [d for k in sorted(rows) for d in rows[k]]
    if rest:
        groups.append(Group(None, "ledger-other", "Claims of no chapter", tuple(rest), chapter_run(runs, None)))
    return groups


def _code(text: str) -> str:
    """Code span that may wrap after a dot or an underscore (``A.global.`` / ``reg_`` / ``path``)."""
    body = re.sub(r"([._])", r"\1<wbr>", html.escape(text))
    return f'<code class="docutils literal notranslate">{body}</code>'


_BADGE = {"pass": "pass", "known miss": "miss", "data missing": "miss", "not yet computed": "miss", "FAIL": "fail"}


def paper_html(d: dict, paper: ChapterRun, st: str) -> str:
    """The paper-scale cell of a row: the verdict as a badge (or why there is none), marked where it differs
    from the row's status ``st``."""
    verdict = paper.verdict(d["id"])
    cell = (
        f'<span class="ledger-badge ledger-badge-{_BADGE[verdict]}">{html.escape(verdict)}</span>'
        if verdict in _BADGE
        else f'<span class="ledger-sub">{html.escape(verdict)}</span>'
    )
    if paper.differs(d["id"], st):
        cell += f'<span class="ledger-differs" title="differs from the status column">{html.escape(DIFFERS)}</span>'
    return cell


def row_html(d: dict, back: str | None, chapter_url: str | None, paper: ChapterRun | None = None) -> str:
    """One ledger row: status | paper scale | claim, kind and link back | what it checks | measured vs threshold.
    Without ``paper`` (the chapter's run at paper scale) the paper-scale cell says it was not measured."""
    st = status(d)
    cls = _BADGE[st]
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
        f'<td class="ledger-paper">{paper_html(d, paper or _NO_RUN, st)}</td>'
        f'<td class="ledger-claim">{claim}</td><td class="ledger-checks">{checks}</td>'
        f'<td class="ledger-result">{result}</td></tr>'
    )


TABLE_HEAD = (
    '<table class="ledger"><colgroup><col class="ledger-col-status"><col class="ledger-col-paper">'
    '<col class="ledger-col-claim"><col class="ledger-col-checks"><col class="ledger-col-result"></colgroup>'
    "<thead><tr><th>status</th><th>paper scale</th><th>claim</th><th>what it checks</th><th>measured / threshold</th>"
    "</tr></thead><tbody>"
)


def group_html(group: Group, from_doc: str = LEDGER_DOC, places: dict[str, list[str]] | None = None) -> str:
    """The table of one group, with links relative to the page of ``from_doc``, under the line that dates the
    chapter's paper-scale run."""
    places = statement_places() if places is None else places
    out = [f'<p class="ledger-paper-run">{html.escape(group.paper.line())}</p>', TABLE_HEAD]
    for d in group.rows:
        docs = places.get(d["id"], [])
        own = group.page.doc if group.page else None
        target = own if own in docs else (docs[0] if docs else None)
        back = f"{relative_url(from_doc, target)}#{STATEMENT_ANCHOR}{d['id']}" if target else None
        chapter = relative_url(from_doc, own) if own else None
        out.append(row_html(d, back, chapter, group.paper))
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


# --- benchmarks -----------------------------------------------------------------------------


def benchmark_results(root: Path = ROOT) -> Path:
    """The folder of benchmark results: the checkout's ``benchmarks/results``, else the package's copy."""
    here = root / "benchmarks" / "results"
    return here if here.is_dir() else BOOK_DATA / "benchmarks"


def benchmark_file(results_dir: Path, name: str) -> dict | None:
    """The contents of the benchmark results file ``<results_dir>/<name>.json``, or None where there is none."""
    f = results_dir / f"{name}.json"
    return json.loads(f.read_text()) if f.is_file() else None


def _meta_line(meta: dict | None) -> str:
    """``measured 2026-11-29 on <cpu> (2 cores); torch 2.13.0; torch threads 2; Python 3.11.7``."""
    if not meta:
        return "machine not recorded"
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
    if (data := benchmark_file(results_dir, "figures")) is not None:
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
        steps = f"; {meta['steps']} steps" if meta.get("steps") else ""
        out["figures"] = (_meta_line(meta) + steps, pd.DataFrame(rows))
    if (data := benchmark_file(results_dir, "whole_process")) is not None:
        meta = data.get("meta", {})
        base = data["rows"].get(meta.get("baseline", ""), {}).get("cpu_s_median")
        floor = next((r["cpu_s_median"] for k, r in data["rows"].items() if k.startswith("floor")), None)
        rows = [
            {
                "process": name,
                "CPU (s), median": r["cpu_s_median"],
                "CPU (s), min": r["cpu_s_min"],
                f"{meta.get('baseline', 'baseline')} / this": f"{base / r['cpu_s_median']:.1f}x"
                if base and name.startswith("mmtoken")
                else "",
                "this / floor": f"{r['cpu_s_median'] / floor:.1f}x" if floor and name.startswith("mmtoken") else "",
            }
            for name, r in data["rows"].items()
        ]
        runs = f"; {meta['repeat']} runs each" if meta.get("repeat") else ""
        out["whole_process"] = (_meta_line(meta) + runs, pd.DataFrame(rows))
    if (data := benchmark_file(results_dir, "random")) is not None:
        measures = {
            "batched (instances/s)": lambda r: f"{r['batched_inst_per_s']:,.0f}",
            "one at a time (instances/s)": lambda r: f"{r['loop_inst_per_s']:,.0f}",
            "speed-up": lambda r: f"{r['speedup']:.1f}x",
            # a bound, as every identity the book prints: the digits below it are the machine's, not the method's
            "max |difference| of the iterates": lambda r: f"< 1e-12: {r['max_abs_diff'] < 1e-12}",
            "sweep: instances": lambda r: f"{r['sweep_instances']}",
            "sweep: wall time (s)": lambda r: f"{r['sweep_wall_s']:.1f}",
            "sweep: CPU time (s)": lambda r: f"{r['sweep_cpu_s']:.1f}",
        }
        trainers = {name: r for name, r in data.items() if isinstance(r, dict) and "batched_inst_per_s" in r}
        # one column per trainer (two), one row per measure: fits the column
        rows = [{"measure": m, **{name: f(r) for name, r in trainers.items()}} for m, f in measures.items()]
        cfg = f"scale {data.get('scale')}, d = {data.get('d')}, {data.get('steps')} steps"
        out["random"] = (_meta_line(data.get("meta")) + f"; {cfg}", pd.DataFrame(rows))
    if (data := benchmark_file(results_dir, "book")) is not None:
        chapters = {nb.removesuffix(".ipynb"): s for nb, s in data["chapters"].items()}
        rows = [
            {"page": p.heading, "execution (s)": chapters.pop(p.doc)} for p in book_order(root) if p.doc in chapters
        ]
        rows += [{"page": doc, "execution (s)": s} for doc, s in chapters.items()]
        rows.append({"page": "whole book", "execution (s)": data["total_s"]})
        out["book"] = (_meta_line(data.get("meta")), pd.DataFrame(rows))
    if (data := benchmark_file(results_dir, SCALE_FILE)) is not None:
        out["paper_scale"] = _scale_table(data, root)
    return out


def _time_cell(row: dict | None, key: str) -> str:
    """A measured time, a lower bound where the run was stopped, or why there is none."""
    if row is None:
        return "not measured"
    if stopped(row):  # stopped at the script's limit: the wall is a lower bound, the CPU unknown
        return "not measured (stopped)" if row.get(key) is None else f"> {row[key]:.0f} (stopped)"
    if row["status"] == "error":
        return "failed"
    return f"{row[key]:.0f}"


def _claims_cell(row: dict | None) -> str:
    """``12 pass, 1 known miss`` and the ids of any other verdict, from the run's printed claims."""
    if row is None or not row.get("claims"):
        return "" if row is None or row["status"] == "finished" else "not reached"
    verdicts = row["claims"].values()
    text = ", ".join(f"{sum(v == k for v in verdicts)} {k}" for k in ("pass", "known miss") if k in verdicts)
    other = sorted(f"{i}: {v}" for i, v in row["claims"].items() if v not in ("pass", "known miss"))
    return "; ".join([text, *other]) if text else "; ".join(other)


def _scale_table(data: dict, root: Path) -> tuple[str, Any]:
    """``benchmarks/paper_scale.py``'s runs: each chapter at both scales, from an empty data folder."""
    import pandas as pd

    quick, paper = data.get("quick", {}), data.get("paper", {})
    titles = {p.doc.removeprefix("book/"): p.heading for p in book_order(root)}
    rows = [
        {
            "chapter": titles.get(name, name),
            "quick: CPU (s)": _time_cell(quick.get(name), "cpu_s"),
            "paper: wall (s)": _time_cell(paper.get(name), "wall_s"),
            "paper: CPU (s)": _time_cell(paper.get(name), "cpu_s"),
            "paper: claims": _claims_cell(paper.get(name)),
        }
        for name in sorted(set(quick) | set(paper), key=lambda n: list(titles).index(n) if n in titles else 1e9)
    ]
    metas = [r["meta"] for runs in (quick, paper) for r in runs.values() if "meta" in r]
    commits = sorted({m.get("commit", "?") for m in metas})
    dates = sorted({m["date"] for m in metas if m.get("date")})
    last = dict(metas[-1]) if metas else None
    if last and len(dates) > 1:  # the runs span several days: say so, not the last run's date alone
        last["date"] = f"{dates[0]} to {dates[-1]}"
    caption = _meta_line(last) + f"; commit {', '.join(commits)}; empty data folder each"
    return caption, pd.DataFrame(rows)


def table_html(caption: str, frame) -> str:
    """A benchmark table with its caption (what, when, where), as HTML."""
    body = frame.to_html(index=False, classes="table bench-table", border=0, escape=True)
    return f'<div class="bench-wrap"><p class="bench-meta">{html.escape(caption)}</p>{body}</div>'
