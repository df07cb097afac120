"""The book's pages as the reader sees them: their order, numbers and titles, and where each claim is stated.

The order comes from ``_toc.yml``, the title from the page's first heading, the number
from its place in the numbered parts (the appendix part is lettered: ``style: alphaupper``
in ``_toc.yml``), as Jupyter Book numbers them in the sidebar. A chapter marks the place
it states a claim with the role ``{claim}`<id>``` (see ``CONTRIBUTING.md``); the claims
ledger (:mod:`mmtoken.book.html_tables`) links back there. Outside a checkout (an installed
wheel) the same index is read from the copy shipped with the package (:data:`BOOK_DATA`).
"""

from __future__ import annotations

__all__ = [
    "ROOT",
    "BOOK_DATA",
    "CLAIM_ROLE",
    "Page",
    "page_title",
    "alpha_label",
    "book_index",
    "book_order",
    "statement_places",
    "relative_url",
]

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLAIM_ROLE = re.compile(r"\{claim\}`([^`]+)`")


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
        if m := re.match(r"^(`{3,}|~{3,})", s):
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


BOOK_DATA = Path(__file__).resolve().parents[1] / "book_data"
"""What reader notebooks need from the repository, shipped with the package (a wheel has no
``_toc.yml``, chapters or ``benchmarks/``): ``book_index.json`` (:func:`book_index`) and
``benchmarks/*.json``. Written by ``python scripts/project_meta.py apply``, checked by its ``check``."""


def book_index(root: Path = ROOT) -> dict:
    """The book's pages in order and the claims' places: ``{"pages": [...], "places": {...}}``, from the
    checkout at ``root``, else from the copy shipped with the package (``BOOK_DATA / "book_index.json"``)."""
    if (root / "_toc.yml").is_file():
        return {"pages": [dataclasses.asdict(p) for p in book_order(root)], "places": statement_places(root)}
    shipped = BOOK_DATA / "book_index.json"
    if not shipped.is_file():
        raise FileNotFoundError(f"no _toc.yml in {root} and no {shipped}: this mmtoken install is incomplete")
    return json.loads(shipped.read_text(encoding="utf-8"))


def book_order(root: Path = ROOT) -> list[Page]:
    """Every page of ``_toc.yml`` in reading order, with its number or letter as Jupyter Book gives them
    (numbered on across ``numbered`` parts, lettered in an ``alphaupper`` one); outside a checkout, the
    order shipped with the package."""
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
