"""Rendering the claims ledger for the book (HTML with links back to chapters, and text)."""
from __future__ import annotations

import html
from pathlib import Path

from .ledger import Result, _short

BOOK = Path(__file__).resolve().parent.parent / "book"


def chapter_link(chapter: str, from_dir: str = "appendix") -> str | None:
    """Relative HTML link from ``book/<from_dir>/`` to the page of ``chapter`` (a file stem)."""
    hits = sorted(BOOK.rglob(f"{chapter}.md")) if chapter else []
    if not hits:
        return None
    rel = hits[0].relative_to(BOOK).with_suffix(".html")
    return ("../" * len(Path(from_dir).parts)) + rel.as_posix()


def _status(r: Result) -> str:
    return "pass" if r.passed else ("known miss" if r.known_miss else "FAIL")


def _value(r: Result) -> str:
    if r.error:
        return f"error: {r.error}"
    if isinstance(r.measured, dict):
        return "; ".join(f"{k} = {v}" for k, v in r.measured.items())
    return str(r.measured)


def claims_html(results: list[Result]) -> str:
    """One table per chapter: claim, what it checks, measured, threshold, status."""
    out = []
    by_chapter: dict[str, list[Result]] = {}
    for r in results:
        by_chapter.setdefault(r.chapter or "(package)", []).append(r)
    for chapter, rows in by_chapter.items():
        link = chapter_link(chapter)
        head = f'<a href="{link}">{html.escape(chapter)}</a>' if link else html.escape(chapter)
        out.append(f"<h4>{head}</h4>")
        out.append('<table class="table"><thead><tr><th>claim</th><th>kind</th><th>checks</th>'
                   "<th>statement</th><th>measured</th><th>threshold</th><th>status</th></tr></thead><tbody>")
        for r in rows:
            color = {"pass": "#1a7f37", "known miss": "#9a6700"}.get(_status(r), "#cf222e")
            note = f"<br><small>{html.escape(r.known_miss)}</small>" if r.known_miss else ""
            out.append(
                f"<tr><td><code>{html.escape(r.id)}</code></td><td>{r.kind}</td><td>{html.escape(r.checks)}</td>"
                f"<td>{html.escape(r.statement)}</td><td>{html.escape(_value(r))}</td>"
                f"<td>{html.escape(r.threshold)}</td>"
                f'<td style="color:{color};font-weight:bold">{_status(r)}{note}</td></tr>')
        out.append("</tbody></table>")
    return "\n".join(out)


def claims_text(results: list[Result]) -> str:
    """Plain text: one line per claim with status and measured value (no timings)."""
    lines = []
    for r in results:
        lines.append(f"{_status(r):10s} {r.id:28s} {_short(_value(r), 90)}")
    return "\n".join(lines)
