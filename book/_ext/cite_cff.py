"""The "cite this book" page, rendered from ``CITATION.cff`` at build time.

``CITATION.cff`` is itself generated from ``pyproject.toml`` by
``scripts/project_meta.py``, so the version and addresses on the page are the
release's. The directive ``{citation-cff}`` writes a plain-text citation and
BibTeX entries: one for the book and its package, one for each reference listed
in the file (the two papers the book teaches).
"""
from __future__ import annotations

from pathlib import Path

import yaml
from docutils import nodes
from sphinx.util.docutils import SphinxDirective

CFF = "CITATION.cff"


def _authors(people: list[dict]) -> list[str]:
    names = []
    for p in people:
        if "name" in p:  # an entity
            names.append(p["name"])
        else:
            names.append(f"{p['family-names']}, {p['given-names']}")
    return names


def _key(entry: dict) -> str:
    first = entry["authors"][0]
    stem = first.get("family-names") or first.get("name", "anon").split()[-1]
    word = next((w for w in entry["title"].lower().split() if len(w) > 3), "work")
    return "".join(ch for ch in f"{stem}{entry.get('year', '')}{word}".lower() if ch.isalnum())


def bibtex(cff: dict) -> list[str]:
    """BibTeX entries: the book (``@software``), then each reference of the file."""
    book = (
        "@software{mmtoken,\n"
        f"  title   = {{{cff['title']}}},\n"
        f"  author  = {{{' and '.join('{' + a + '}' for a in _authors(cff['authors']))}}},\n"
        f"  version = {{{cff['version']}}},\n"
        f"  url     = {{{cff['url']}}},\n"
        f"  note    = {{Source code: {cff['repository-code']}}}\n"
        "}"
    )
    out = [book]
    for ref in cff.get("references", []):
        kind = "inproceedings" if ref.get("type") == "conference-paper" else "misc"
        fields = [
            ("title", ref["title"]),
            ("author", " and ".join(_authors(ref["authors"]))),
            ("booktitle" if kind == "inproceedings" else "howpublished", ref.get("collection-title", "")),
            ("year", str(ref.get("year", ""))),
        ]
        note = ", ".join(i["value"] for i in ref.get("identifiers", []))
        if note:
            fields.append(("note", note))
        body = ",\n".join(f"  {k:<9}= {{{v}}}" for k, v in fields if v)
        out.append(f"@{kind}{{{_key(ref)},\n{body}\n}}")
    return out


def plain(cff: dict) -> str:
    authors = ", ".join(_authors(cff["authors"]))
    return f"{authors}. {cff['title']} (version {cff['version']}). {cff['url']} (source code: {cff['repository-code']})."


class CitationCff(SphinxDirective):
    """``{citation-cff}``: how to cite the book, from the repository's ``CITATION.cff``."""

    has_content = False

    def run(self):
        path = Path(self.env.srcdir) / CFF
        self.env.note_dependency(str(path))
        cff = yaml.safe_load(path.read_text())
        for key in ("title", "version", "authors", "url", "repository-code"):
            if key not in cff:
                raise self.error(f"{CFF} has no {key!r}")
        para = nodes.paragraph()
        para += nodes.Text(plain(cff).split(cff["url"])[0])
        para += nodes.reference(cff["url"], cff["url"], refuri=cff["url"])
        para += nodes.Text(" (source code: ")
        para += nodes.reference(cff["repository-code"], cff["repository-code"], refuri=cff["repository-code"])
        para += nodes.Text(").")
        entries = "\n\n".join(bibtex(cff))
        block = nodes.literal_block(entries, entries, language="bibtex")
        return [para, block]


def setup(app):
    app.add_directive("citation-cff", CitationCff)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
