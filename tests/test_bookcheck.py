"""The browser check itself, on tiny hand-made pages: each check fails on a broken page and passes on a fixed one.

The page checks need Chromium (``scripts/setup.sh`` installs it); the claim-link
checks read HTML files only.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import bookcheck
import matplotlib.pyplot as plt
import pytest

ROOT = Path(__file__).resolve().parent.parent
CSS = (ROOT / "_static" / "mmtoken.css").as_uri()
# the two rules of pydata-sphinx-theme that lay out a numbered equation (the book's CSS adds to them)
THEME_MATH = (
    "div.math{align-items:center;display:flex;max-width:100%;overflow:hidden;"
    "flex-direction:row-reverse;gap:.5em}div.math mjx-container{flex-grow:1;overflow:auto}"
    "mjx-container{display:block}mjx-math{display:inline-block;height:1.2em}"
)


def page(tmp: Path, name: str, body: str, head: str = "") -> Path:
    path = tmp / f"{name}.html"
    path.write_text(
        f"<!doctype html><html><head><title>{name}</title>{head}"
        f"<style>body{{margin:0}} article.bd-article{{width:600px;padding:0 20px}}</style></head>"
        f"<body><article class='bd-article'>{body}</article></body></html>"
    )
    return path


@pytest.fixture(scope="module")
def driver():
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        if os.environ.get("CI"):
            pytest.fail("chromium / chromedriver not installed")
        pytest.skip("chromium / chromedriver not installed (scripts/setup.sh installs them)")
    pytest.importorskip("selenium")
    d = bookcheck.new_driver()
    yield d
    d.quit()


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("pages")


def check(driver, path: Path) -> bookcheck.PageReport:
    return bookcheck.check_page(driver, path)


def test_sideways_output(driver, tmp):
    broken = page(tmp, "out_broken", "<div class='cell_output'><pre>" + "x = 1.0, " * 150 + "</pre></div>")
    fixed = page(tmp, "out_fixed", "<div class='cell_output'><pre>x = 1.0\ny = 2.0</pre></div>")
    assert any(s.startswith("output: x = 1.0") for s in check(driver, broken).sideways)
    assert check(driver, fixed).sideways == []


def test_sideways_output_that_wraps_is_fine(driver, tmp):
    wrapped = page(
        tmp,
        "out_wrapped",
        "<div class='cell tag_wrap-output'><div class='cell_output'><pre>" + "x = 1.0, " * 150 + "</pre></div></div>",
        f"<link rel='stylesheet' href='{CSS}'>",
    )
    assert check(driver, wrapped).sideways == []


def test_sideways_equation_and_table(driver, tmp):
    eq = "<div class='math'><mjx-container jax='CHTML' display='true'><mjx-math style='width:{}px'>x</mjx-math></mjx-container></div>"
    table = "<div style='overflow-x:auto'><table style='width:{}px'><tr><th>a</th></tr></table></div>"
    broken = page(tmp, "wide_broken", eq.format(900) + table.format(1200), f"<style>{THEME_MATH}</style>")
    fixed = page(tmp, "wide_fixed", eq.format(300) + table.format(400), f"<style>{THEME_MATH}</style>")
    kinds = sorted(s.split(":")[0] for s in check(driver, broken).sideways)
    assert kinds == ["equation", "table"]
    assert check(driver, fixed).sideways == []


def test_page_wider_than_a_phone(driver, tmp):
    fluid = "<style>article.bd-article{width:auto !important}</style>"
    broken = page(
        tmp, "phone_broken", "<p>text</p><div class='sticks' style='width:560px;height:10px'>wide</div>", fluid
    )
    fixed = page(
        tmp,
        "phone_fixed",
        "<div style='overflow-x:auto;max-width:100%'>"
        "<div style='width:560px;height:10px'>wide, scrolls in its own box</div></div>",
        fluid,
    )
    rep = check(driver, broken)
    assert rep.page_too_wide and "div.sticks" in rep.page_too_wide[0]
    assert check(driver, fixed).page_too_wide == []


def test_equation_number_overlap(driver, tmp):
    eq = (
        "<div class='math'><span class='eqno' style='{}'>(1.1)</span><mjx-container jax='CHTML' display='true'>"
        "<mjx-math style='width:800px'>x</mjx-math></mjx-container></div>"
    )
    broken = page(
        tmp,
        "eqno_broken",
        eq.format("position:absolute;left:300px"),
        "<style>div.math{position:relative}mjx-container{display:block}"
        "mjx-math{display:inline-block;height:1.2em}</style>",
    )
    fixed = page(tmp, "eqno_fixed", eq.format(""), f"<style>{THEME_MATH}</style><link rel='stylesheet' href='{CSS}'>")
    assert check(driver, broken).eqno_overlap
    rep = check(driver, fixed)
    assert rep.eqno_overlap == []
    assert rep.sideways, "the wide equation still needs scrolling (inside its own box)"


def _png(path: Path, pixels: int) -> Path:
    fig = plt.figure(figsize=(pixels / 100, pixels / 200), dpi=100)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def test_soft_figures(driver, tmp):
    _png(tmp / "one.png", 200)
    _png(tmp / "two.png", 400)
    broken = page(tmp, "fig_broken", "<figure><img src='one.png' width='200'></figure>")
    fixed = page(tmp, "fig_fixed", "<figure><img src='two.png' width='200'></figure>")
    rep = check(driver, broken)
    assert len(rep.soft_figures) == 1 and "1.00x" in rep.soft_figures[0]
    rep = check(driver, fixed)
    assert rep.soft_figures == [] and rep.figures == 1


def test_broken_image(driver, tmp):
    rep = check(driver, page(tmp, "img_missing", "<img src='missing.png' width='50' height='50'>"))
    assert rep.broken_images


def test_console_errors(driver, tmp):
    broken = page(tmp, "js_broken", "<script>const THEBE_JS_URL = 1;</script><script>const THEBE_JS_URL = 2;</script>")
    fixed = page(tmp, "js_fixed", "<script>const THEBE_JS_URL = 1;</script>")
    assert any("already been declared" in c for c in check(driver, broken).console)
    assert check(driver, fixed).console == []


# --- claim links: HTML files only -------------------------------------------------------------

LEDGER = "<table><tr id='claim-A.x.y'><td><code>A.x.y</code>{back}</td></tr></table>"
CHAPTER = "<p>{target}<a class='reference internal claim-ref' href='{href}'><code>A.x.y</code></a></p><p>{extra}</p>"


def book(tmp: Path, back: str, href: str, target: str = "<span id='stmt-A.x.y'></span>", extra: str = "") -> Path:
    root = tmp / f"book{len(list(tmp.iterdir()))}"
    (root / "book" / "appendix").mkdir(parents=True)
    (root / "book" / "part1").mkdir(parents=True)
    (root / "book" / "appendix" / "claims.html").write_text(LEDGER.format(back=back))
    (root / "book" / "part1" / "ch.html").write_text(CHAPTER.format(target=target, href=href, extra=extra))
    return root


def problems(root: Path) -> dict:
    pages = [root / "book" / "part1" / "ch.html", root / "book" / "appendix" / "claims.html"]
    return bookcheck.claim_link_problems(root, pages)


GOOD_BACK = "<a class='claim-back' href='../part1/ch.html#stmt-A.x.y'>stated here</a>"
GOOD_HREF = "../appendix/claims.html#claim-A.x.y"


def test_claim_links_both_ways(tmp_path):
    assert problems(book(tmp_path, GOOD_BACK, GOOD_HREF)) == {}


def test_claim_link_to_a_missing_anchor(tmp_path):
    out = problems(book(tmp_path, GOOD_BACK, "../appendix/claims.html#claim-A.x.z"))
    assert "does not reach an anchor of the ledger" in out["book/part1/ch.html"][0]


def test_claim_id_not_linked(tmp_path):
    out = problems(book(tmp_path, GOOD_BACK, GOOD_HREF, extra="as <code>A.x.y</code> shows"))
    assert out["book/part1/ch.html"] == ["claim `A.x.y` is not linked to the ledger"]


def test_ledger_row_without_way_back(tmp_path):
    out = problems(book(tmp_path, "", GOOD_HREF))
    assert out["book/appendix/claims.html"] == ["row A.x.y: no link back to where a chapter states it"]
    out = problems(book(tmp_path, GOOD_BACK, GOOD_HREF, target=""))
    assert "does not reach an anchor" in out["book/appendix/claims.html"][0]
