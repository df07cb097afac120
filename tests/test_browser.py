"""The built book as a reader sees it, in headless Chromium: nothing clipped, sharp figures, no console error.

Runs after the build (``make test`` builds first), one browser session for every page
(``tests/bookcheck.py`` holds the checks; ``tests/test_bookcheck.py`` shows each one
failing on a broken page and passing on a fixed one). Needs Debian's ``chromium`` and
``chromium-driver`` (installed by ``scripts/setup.sh``) and selenium. In CI a missing
browser or build is a failure, elsewhere a skip.

On every page of ``_toc.yml``:

- at 1280 px no display equation, printed output or table needs sideways scrolling;
- at 390 px no page is wider than the screen (scrolling inside an equation's or a
  table's own box is fine there);
- no equation number overlaps its equation;
- every figure image has a natural width of at least twice its displayed width;
- no console error;
- every claim id a chapter mentions links to its anchor on the ledger page, and each
  ledger row links back to where a chapter states it;
- one numbering: no figure, table, equation or theorem number is used on two pages,
  and appendices number theirs with their letter.
"""

from __future__ import annotations

import os
import re
import shutil
from collections import defaultdict
from pathlib import Path
from urllib.parse import unquote, urlparse

import bookcheck
import pytest

from mmtoken.book.pages import book_order

pytestmark = pytest.mark.slow  # needs the built book and a browser: `make slow` / `make test`

ROOT = Path(__file__).resolve().parent.parent
HTML_DIR = Path(os.environ.get("MMTOKEN_BOOK_HTML", ROOT / "_build" / "html"))  # another build: set this
IN_CI = bool(os.environ.get("CI"))


def _need(condition: bool, why: str) -> None:
    if not condition:
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="module")
def pages() -> list[Path]:
    _need(HTML_DIR.is_dir(), f"no built book at {HTML_DIR}: run `make build` first")
    return bookcheck.toc_pages(HTML_DIR)


@pytest.fixture(scope="module")
def seen(pages) -> list[bookcheck.PageReport]:
    """Every page, visited once at 1280 px and once at 390 px, in one browser session."""
    _need(
        shutil.which("chromium") is not None and shutil.which("chromedriver") is not None,
        "chromium / chromedriver not installed (scripts/setup.sh installs them)",
    )
    pytest.importorskip("selenium") if not IN_CI else __import__("selenium")
    return bookcheck.check_pages(pages, HTML_DIR)


def _by_page(reports, field: str) -> list[str]:
    return [f"{r.page}: {x}" for r in reports for x in getattr(r, field)]


def test_every_chapter_was_built(pages):
    missing = [str(p.relative_to(HTML_DIR)) for p in pages if not p.is_file()]
    assert not missing, f"pages in _toc.yml without HTML: {missing}"


def test_internal_links_resolve(pages):
    broken = []
    cache: dict[Path, set] = {}
    for page in (p for p in pages if p.is_file()):  # missing pages fail the test above
        for link in (x["href"] for x in bookcheck.parse_html(page).links):
            url = urlparse(link)
            if url.scheme or link.startswith(("mailto:", "//")):
                continue
            target = page if not url.path else (page.parent / unquote(url.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(HTML_DIR)} -> {link}")
                continue
            if url.fragment and target.suffix == ".html":
                ids = cache.setdefault(target, bookcheck.parse_html(target).ids)
                if unquote(url.fragment) not in ids:
                    broken.append(f"{page.relative_to(HTML_DIR)} -> {link} (no such anchor)")
    assert not broken, "broken internal links:\n" + "\n".join(sorted(set(broken)))


def test_pages_load_and_figures_decode(seen):
    problems = [f"{r.page}: {r.load}" for r in seen if r.load] + _by_page(seen, "broken_images")
    assert not problems, "\n".join(problems)
    assert sum(r.figures for r in seen) > 0, "no figure found in the built book"


def test_nothing_needs_sideways_scrolling_at_1280(seen):
    problems = _by_page(seen, "sideways")
    assert not problems, (
        f"{len(problems)} equations, outputs or tables need sideways scrolling at "
        f"{bookcheck.WIDE} px (break the equation, format the output to fit, reshape "
        "the table):\n" + "\n".join(problems)
    )


def test_no_page_wider_than_a_phone(seen):
    problems = _by_page(seen, "page_too_wide")
    assert not problems, f"pages wider than a {bookcheck.NARROW} px screen:\n" + "\n".join(problems)


def test_equation_numbers_clear_of_their_equations(seen):
    problems = _by_page(seen, "eqno_overlap")
    assert not problems, "\n".join(problems)


def test_figures_sharp_on_high_density_screens(seen):
    problems = _by_page(seen, "soft_figures")
    assert not problems, (
        f"{len(problems)} figures with a natural width under twice their displayed width "
        "(plotting.set_theme() renders retina PNGs):\n" + "\n".join(problems)
    )


def test_no_console_errors(seen):
    problems = _by_page(seen, "console")
    assert not problems, f"{len(problems)} console errors:\n" + "\n".join(problems)


def test_claim_ids_link_to_the_ledger_and_back(pages):
    problems = bookcheck.claim_link_problems(HTML_DIR, pages)
    lines = [f"{page}: {p}" for page, ps in problems.items() for p in ps]
    assert not lines, (
        "claim ids must link to the ledger and back (mark them with {claim}`id`, "
        "see CONTRIBUTING.md):\n" + "\n".join(lines)
    )


NUMBER = re.compile(r'<span class="caption-number">\s*([^<]*?)\s*</span>|<span class="eqno">\s*(\([^<]*?\))')
SECNUM = re.compile(r'<h1><span class="section-number">\s*([^<]*?)\.?\s*</span>')


def test_one_numbering(pages):
    """No number is used on two pages; each appendix numbers with its letter, as the ledger titles it."""
    where: dict[str, set] = defaultdict(set)
    problems = []
    labels = {f"{p.doc}.html": p.label for p in book_order(ROOT)}
    for page in (p for p in pages if p.is_file()):
        name = str(page.relative_to(HTML_DIR))
        text = page.read_text(encoding="utf-8")
        found = [a or b for a, b in NUMBER.findall(text)]
        for label in found:
            where[label].add(name)
        h1 = SECNUM.search(text)
        letter = labels.get(name)
        if letter and letter.isalpha():
            if not h1 or h1.group(1) != letter:
                problems.append(f"{name}: title not numbered {letter} (as mmtoken.book.pages.book_order letters it)")
            stray = [x for x in found if not re.search(rf"\b{letter}\.\d", x)]
            if stray:
                problems.append(f"{name}: numbers without the letter {letter}: {stray}")
    problems += [f"{label} is used on {sorted(names)}" for label, names in sorted(where.items()) if len(names) > 1]
    assert not problems, "\n".join(problems)
