"""Claims in the book: the ``{claim}`` role in chapters and the ``claims-ledger`` directive.

In a chapter, ``{claim}`A.global.gd``` (MyST) renders the claim id as a link to its
row of the ledger (``claims.html#claim-A.global.gd``); its first use on a page is also
the anchor ``stmt-A.global.gd`` that the ledger row links back to. Mark the place where
the chapter says what the claim checks (the "What we check" note of a theorem box).

On the ledger page, ``claims-ledger`` renders the rows that the page's notebook glued
under the given key (``glue(key, report.ledger_payload(results), display=False)``)
as one section per chapter, in book order, under the chapter's title: real headings, so
each group is in the page's contents sidebar. Beside each claim's status a column shows its
verdict at paper scale, read from the measurement ``make scale-times`` stored with the repository
(``benchmarks/results/paper_scale.json``, :mod:`mmtoken.book.scale_runs`); the directive recomputes
nothing. The tables come from
:mod:`mmtoken.book.html_tables`; the builders that show no HTML (the PDF) get the same
tables as Markdown from :mod:`mmtoken.book.text_tables`, parsed into real tables.

An id used with the role but absent from the ledger is a warning (an error under ``-W``).
"""
from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

CLAIM_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)+")
CLAIM_ANCHOR = "claim-"
STATEMENT_ANCHOR = "stmt-"


class claim_ref(nodes.Inline, nodes.TextElement):
    """A claim id in a chapter; becomes a link to the ledger once the builder is known."""


def _uses(env: BuildEnvironment) -> dict[str, list[tuple[str, int]]]:
    if not hasattr(env, "mmtoken_claim_uses"):
        env.mmtoken_claim_uses = {}
    return env.mmtoken_claim_uses


def claim_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    cid = text.strip()
    if not CLAIM_ID.fullmatch(cid):
        msg = inliner.reporter.error(f"{{claim}}: {cid!r} is not a claim id (like A.global.gd)", line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    document = inliner.document
    env = document.settings.env
    out: list[nodes.Node] = []
    target = STATEMENT_ANCHOR + cid
    if target not in document.ids:               # the first use on the page is the anchor
        anchor = nodes.inline("", "", ids=[target], classes=["claim-target"])
        document.ids[target] = anchor
        out.append(anchor)
    ref = claim_ref(rawtext, "", claim_id=cid)
    ref += nodes.literal(cid, cid)
    out.append(ref)
    _uses(env).setdefault(env.docname, []).append((cid, lineno))
    return out, []


def resolve_claim_refs(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    ledger = app.config.claims_ledger_doc
    for node in list(doctree.findall(claim_ref)):
        cid = node["claim_id"]
        uri = "" if docname == ledger else app.builder.get_relative_uri(docname, ledger)
        ref = nodes.reference("", "", internal=True, refuri=f"{uri}#{CLAIM_ANCHOR}{cid}",
                              reftitle=f"claim {cid} in the ledger", classes=["claim-ref"])
        ref += node.children
        node.replace_self(ref)


class ClaimsLedger(SphinxDirective):
    """``claims-ledger <glue key>``: the ledger as one section per chapter."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        from mmtoken.book import html_tables, pages, report, scale_runs, text_tables  # the package renders them
        from myst_nb.ext.glue.utils import RetrievalError, retrieve_glue_data

        key = self.arguments[0]
        try:
            data = retrieve_glue_data(self.state.document, key).data
        except RetrievalError as exc:
            logger.warning(f"claims-ledger: {exc}", location=self.get_location())
            return [nodes.paragraph(text="The ledger was not computed in this build.")]
        try:
            rows = report.rows_from_payload(data.get("text/plain", ""))
        except (ValueError, SyntaxError) as exc:
            logger.warning(f"claims-ledger: glue key {key!r} holds no ledger rows ({exc})",
                           location=self.get_location())
            return []
        self.env.mmtoken_claim_ids = {r["id"] for r in rows}
        root = Path(self.env.srcdir)
        places = pages.statement_places(root)
        for p in sorted(root.glob("book/**/*.md")):         # the back links depend on these pages
            self.env.note_dependency(str(p))
        # and so does the paper-scale column: a new measurement rebuilds the page
        self.env.note_dependency(str(html_tables.benchmark_results(root) / f"{scale_runs.FILE}.json"))
        out: list[nodes.Node] = []
        for group in html_tables.ledger_groups(rows, root):
            section = nodes.section(ids=[group.anchor], names=[nodes.fully_normalize_name(group.title)])
            section += nodes.title(group.title, group.title)
            section += nodes.raw("", '<div class="ledger-wrap">' + html_tables.group_html(group, self.env.docname, places)
                                 + "</div>", format="html")
            # every other builder (the PDF's LaTeX) drops raw HTML: the same table as Markdown, parsed into a table
            text = addnodes.only(expr="not html")
            text += self.parse_text_to_nodes(text_tables.group_markdown(group))
            for table in text.findall(nodes.table):  # may break across pages; columns as wide as the web page's
                table["classes"] += ["longtable", "colwidths-given"]
                for spec, width in zip(table.findall(nodes.colspec), (10, 12, 20, 34, 24)):
                    spec["colwidth"] = width
            section += text
            self.state.document.note_implicit_target(section, section)
            out.append(section)
        return out


def check_claim_ids(app: Sphinx, env: BuildEnvironment) -> None:
    known = getattr(env, "mmtoken_claim_ids", None)
    if known is None:
        return
    for docname, uses in sorted(_uses(env).items()):
        for cid, line in uses:
            if cid not in known:
                logger.warning(f"{{claim}}: unknown claim id {cid!r} (not in the ledger)",
                               location=(docname, line))


def purge(app: Sphinx, env: BuildEnvironment, docname: str) -> None:
    _uses(env).pop(docname, None)
    if docname == app.config.claims_ledger_doc and hasattr(env, "mmtoken_claim_ids"):
        del env.mmtoken_claim_ids


def merge(app: Sphinx, env: BuildEnvironment, docnames: set[str], other: BuildEnvironment) -> None:
    _uses(env).update({d: u for d, u in _uses(other).items() if d in docnames})
    if hasattr(other, "mmtoken_claim_ids"):
        env.mmtoken_claim_ids = other.mmtoken_claim_ids


def setup(app: Sphinx) -> dict:
    app.add_config_value("claims_ledger_doc", "book/appendix/claims", "env")
    app.add_node(claim_ref)
    app.add_role("claim", claim_role)
    app.add_directive("claims-ledger", ClaimsLedger)
    app.connect("doctree-resolved", resolve_claim_refs)
    app.connect("env-check-consistency", check_claim_ids)
    app.connect("env-purge-doc", purge)
    app.connect("env-merge-info", merge)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
