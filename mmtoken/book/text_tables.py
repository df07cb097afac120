"""The book's tables as Markdown, for the builds that show no HTML (the PDF) and for a notebook's text/markdown output.

The HTML book shows the tables of :mod:`mmtoken.book.html_tables`; the LaTeX builder drops raw HTML, so the same
tables are also written as Markdown (pipe tables) that MyST parses into real tables: the claims ledger's chapter
tables (:func:`group_markdown`, which the ``claims-ledger`` directive of ``book/_ext/claims.py`` renders for every
builder but HTML) and the benchmark tables (:class:`Table`, a displayed object whose output carries HTML, Markdown
and plain text, of which each builder takes the one it shows). Nothing here computes a result.
"""

from __future__ import annotations

__all__ = ["escape", "markdown_table", "group_markdown", "Table"]

import re
from collections.abc import Iterable, Sequence
from typing import Any

from mmtoken.book.html_tables import KIND_LABELS, Group, table_html
from mmtoken.book.report import measured_items, status
from mmtoken.book.scale_runs import DIFFERS

# What Markdown (MyST, with the book's extensions) could read as syntax inside a table cell: a column rule, an
# emphasis, a code span, a link, HTML or an entity, math ($...$), a substitution ({{...}}), a strike-through.
_SYNTAX = re.compile(r"([\\`*_\[\]<>|$~&{}])")


def escape(text: Any) -> str:
    """``text`` as one line of literal Markdown: white space collapsed, syntax characters backslash-escaped.
    ``escape("||KQ^T - W|| < 1e-12")`` gives ``"\\|\\|KQ^T - W\\|\\| \\< 1e-12"``."""
    return _SYNTAX.sub(r"\\\1", " ".join(str(text).split()))


def _code(text: str) -> str:
    """A claim id as an inline code span (an id holds letters, digits, dots and underscores)."""
    return f"`{' '.join(str(text).split())}`"


def markdown_table(header: Sequence[Any], rows: Iterable[Sequence[str]]) -> str:
    """A pipe table: ``header`` escaped, each row's cells taken as Markdown already (escape them with
    :func:`escape`); a row of the wrong length is a ``ValueError``."""
    head = [escape(h) for h in header]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, row in enumerate(rows):
        cells = [" ".join(str(c).split()) for c in row]
        if len(cells) != len(head):
            raise ValueError(f"row {i} has {len(cells)} cells, the header {len(head)}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


LEDGER_HEADER = ("status", "paper scale", "claim", "what it checks", "measured / threshold")


def group_markdown(group: Group) -> str:
    """The ledger table of one chapter as Markdown, under the line that dates its paper-scale run: the columns of
    :func:`mmtoken.book.html_tables.group_html` (status, paper-scale verdict, claim and kind, what it checks,
    measured value against threshold), one line per claim."""
    rows = []
    for d in group.rows:
        st = status(d)
        paper = escape(group.paper.verdict(d["id"]))
        if group.paper.differs(d["id"], st):
            paper += f" {escape(DIFFERS)}"
        claim = f"{_code(d['id'])} ({escape(KIND_LABELS.get(d['kind'], d['kind']))})"
        checks = f"{escape(d['statement'])} *checks:* {escape(d['checks'])}"
        result = "; ".join(escape(x) for x in measured_items(d)) + f"; *threshold:* {escape(d['threshold'])}"
        if d.get("known_miss"):
            result += f"; *known miss:* {escape(d['known_miss'])}"
        rows.append((escape(st), paper, claim, checks, result))
    return f"{escape(group.paper.line())}\n\n{markdown_table(LEDGER_HEADER, rows)}"


class Table:
    """A benchmark table with its caption (what, when, where), displayed as HTML in a browser or notebook and as
    Markdown in the PDF: ``display(Table(*html_tables.benchmark_tables(folder)["figures"]))``.

    Parameters
    ----------
    caption : str
        The line above the table (:func:`mmtoken.book.html_tables.benchmark_tables` writes it).
    frame : pandas.DataFrame
        The table; its index is not shown.
    """

    def __init__(self, caption: str, frame: Any) -> None:
        self.caption = caption
        self.frame = frame

    def _repr_html_(self) -> str:
        return table_html(self.caption, self.frame)

    def _repr_markdown_(self) -> str:
        rows = [[escape(v) for v in r] for r in self.frame.astype(str).itertuples(index=False)]
        return f"{escape(self.caption)}\n\n{markdown_table(list(self.frame.columns), rows)}\n"

    def __repr__(self) -> str:
        return f"{self.caption}\n{self.frame.to_string(index=False)}"
