"""What reader notebooks read from the repository ships with the package (``mmtoken/book_data``).

A wheel has no ``_toc.yml``, chapters or ``benchmarks/results``: the claims appendix
(``html_tables.claims_html``: the book's order and where each claim is stated) and the
benchmarks appendix read the copies in ``mmtoken.book.pages.BOOK_DATA`` instead, which
``python scripts/project_meta.py apply package-data`` writes and its ``check`` (a test in
``tests/test_publish_meta.py``) keeps equal to the repository's.
"""

from __future__ import annotations

import json
from pathlib import Path

from mmtoken.book import html_tables, pages

ROOT = Path(__file__).resolve().parent.parent


def test_the_shipped_index_is_the_checkouts(tmp_path):
    shipped = pages.book_index(tmp_path)  # no _toc.yml there: the package's copy
    assert shipped == json.loads(json.dumps(pages.book_index(ROOT)))
    assert [p.doc for p in pages.book_order(tmp_path)] == [p.doc for p in pages.book_order(ROOT)]
    assert pages.statement_places(tmp_path) == pages.statement_places(ROOT)
    assert any(p.label == "A" for p in pages.book_order(tmp_path)), "the appendix letters ship too"


def test_benchmark_results_fall_back_to_the_package(tmp_path):
    assert html_tables.benchmark_results(ROOT) == ROOT / "benchmarks" / "results"
    assert html_tables.benchmark_results(tmp_path) == pages.BOOK_DATA / "benchmarks"
    here = html_tables.benchmark_tables(ROOT / "benchmarks" / "results")
    shipped = html_tables.benchmark_tables(html_tables.benchmark_results(tmp_path))
    assert here.keys() == shipped.keys() and here
    for name in here:
        assert here[name][0] == shipped[name][0] and here[name][1].equals(shipped[name][1])


def test_outside_a_checkout_pyyaml_is_not_needed(tmp_path, monkeypatch):
    """pyyaml is not a runtime dependency: the claims appendix's order and places come without it."""
    import sys

    want_order, want_places = pages.book_order(ROOT), pages.statement_places(ROOT)
    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` raises ImportError
    assert pages.book_order(tmp_path) == want_order
    assert pages.statement_places(tmp_path) == want_places


def test_a_missing_index_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(pages, "BOOK_DATA", tmp_path / "none")
    try:
        pages.book_index(tmp_path)
    except FileNotFoundError as err:
        assert "incomplete" in str(err)
    else:
        raise AssertionError("no index and no _toc.yml must raise")
