"""What a reader of the built book sees, measured in headless Chromium (the browser check).

One browser session visits every page of ``_toc.yml`` twice: at 1280 px (a laptop) and at
390 px (a phone). On each page it records

- ``sideways``: display equations, printed outputs and tables whose content is wider than
  what the reader sees of them at 1280 px (cut at the column edge, or scrolling inside
  their own box); code inputs are recorded apart (``code_sideways``, not asserted);
- ``page_too_wide``: at 390 px, the page itself is wider than the screen (scrolling inside
  an equation's or a table's own box is fine there), with the elements that stick out;
- ``eqno_overlap``: an equation number that overlaps its equation or leaves the column,
  at either width;
- ``soft_figures``: figure images whose natural width is less than twice the width they
  are shown at (1280 px), so they look soft on a high-density screen;
- ``console``: every console error (level SEVERE) the page logs;
- ``broken_images``: images that did not decode.

Claim links are checked on the HTML files themselves (:func:`claim_link_problems`): every
claim id a chapter mentions links to its anchor on the ledger page, and every ledger row
links back to the place its chapter states it.

``tests/test_browser.py`` asserts on all of it; ``tests/test_bookcheck.py`` shows on tiny
hand-made pages that each check fails on a broken page and passes on a fixed one.

From a terminal (the numbers of a build, grouped by page)::

    .venv/bin/python tests/bookcheck.py [_build/html] [--json report.json]
    .venv/bin/python tests/bookcheck.py _build/html --screenshots book/figures/screenshots --suffix after
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import yaml

ROOT = Path(__file__).resolve().parent.parent
LEDGER_PAGE = "book/appendix/claims.html"
WIDE, NARROW = 1280, 390
HEIGHT = 900

# Runs in the page; returns what a reader would see wrong at the current width.
MEASURE_JS = r"""
const col = document.querySelector('article.bd-article') || document.querySelector('article')
          || document.querySelector('main') || document.body;
const vw = document.documentElement.clientWidth;
const px = v => parseFloat(v) || 0;
function contentBox(el) {
  const r = el.getBoundingClientRect(), s = getComputedStyle(el);
  return {left: r.left + px(s.borderLeftWidth) + px(s.paddingLeft),
          right: r.right - px(s.borderRightWidth) - px(s.paddingRight), top: r.top, bottom: r.bottom};
}
function clips(el) { return getComputedStyle(el).overflowX !== 'visible'; }
function viewBox(el) {   // the part of el's content a reader sees without scrolling it
  const r = el.getBoundingClientRect();
  return {left: r.left + el.clientLeft, right: r.left + el.clientLeft + el.clientWidth,
          top: r.top + el.clientTop, bottom: r.top + el.clientTop + el.clientHeight};
}
function limits(el, stop) {   // horizontal window through which el's content is seen
  const c = contentBox(col);
  let left = c.left, right = c.right;
  for (let a = el; a && a !== stop && a !== col && a !== document.body; a = a.parentElement) {
    if (clips(a)) { const v = viewBox(a); left = Math.max(left, v.left); right = Math.min(right, v.right); }
  }
  return {left, right};
}
function extent(el) {
  const r = el.getBoundingClientRect();
  return {left: r.left, right: Math.max(r.right, r.left + el.clientLeft + el.scrollWidth)};
}
function texOf(el) {
  try {
    const items = MathJax.startup.document.getMathItemsWithin(el);
    if (items.length) return items[0].math.replace(/\s+/g, ' ').trim();
  } catch (e) {}
  return (el.textContent || '').replace(/\s+/g, ' ').trim();
}
function short(s, n) { s = (s || '').replace(/\s+/g, ' ').trim(); return s.length > n ? s.slice(0, n - 1) + '…' : s; }
function describe(kind, el) {
  if (kind === 'equation') {
    const m = el.closest('div.math'); const no = m && m.querySelector(':scope > .eqno');
    const label = no ? 'equation ' + no.textContent.replace('#', '').trim() : 'equation';
    return label + ': ' + short(texOf(el.closest('mjx-container') || el), 60);
  }
  if (kind === 'table') {
    const cap = el.querySelector('caption');
    const head = [...el.querySelectorAll('th')].slice(0, 6).map(t => t.textContent.trim()).join(' | ');
    return 'table: ' + short(cap ? cap.textContent : head || el.textContent, 70);
  }
  return kind + ': ' + short((el.textContent || '').split('\n').find(l => l.trim()) || '', 70);
}
function overflowing(kind, selector, target) {
  const out = [];
  for (const el of col.querySelectorAll(selector)) {
    const t = target ? el.querySelector(target) : el;
    if (!t || t.offsetParent === null && getComputedStyle(t).position !== 'fixed') continue;
    const e = extent(t), lim = limits(t, null);
    const over = Math.max(e.right - lim.right, lim.left - e.left);
    if (over > 1) out.push({kind, what: describe(kind, t), width: Math.round(e.right - e.left),
                            shown: Math.round(lim.right - Math.max(lim.left, e.left)), over: Math.round(over)});
  }
  return out;
}
function intersects(a, b, tol) {
  return Math.min(a.right, b.right) - Math.max(a.left, b.left) > tol &&
         Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > tol;
}
function eqnoProblems() {
  const out = [], c = contentBox(col);
  for (const m of col.querySelectorAll('div.math')) {
    const no = m.querySelector(':scope > .eqno'); if (!no || m.offsetParent === null) continue;
    const label = no.textContent.replace('#', '').trim();
    const math = m.querySelector('mjx-math');
    if (!math) { out.push({what: 'equation ' + label + ' was not typeset'}); continue; }
    let mr = math.getBoundingClientRect(); mr = {left: mr.left, right: mr.right, top: mr.top, bottom: mr.bottom};
    for (let a = math.parentElement; a && a !== m.parentElement; a = a.parentElement) {
      if (clips(a)) { const v = viewBox(a);
        mr = {left: Math.max(mr.left, v.left), right: Math.min(mr.right, v.right),
              top: Math.max(mr.top, v.top), bottom: Math.min(mr.bottom, v.bottom)}; }
    }
    const nr = no.getBoundingClientRect();
    if (intersects(nr, mr, 1)) out.push({what: 'equation number ' + label + ' overlaps its equation'});
    else if (nr.right > c.right + 1 || nr.left < c.left - 1)
      out.push({what: 'equation number ' + label + ' is outside the column'});
  }
  return out;
}
function figures() {
  const out = [];
  for (const img of col.querySelectorAll('img')) {
    if (img.offsetParent === null) continue;
    const fig = img.closest('figure'); const num = fig && fig.querySelector('.caption-number');
    const what = (num ? num.textContent.trim() + ' ' : '') + (img.getAttribute('src') || '').split('/').pop().slice(0, 16);
    out.push({what, complete: img.complete, natural: img.naturalWidth, naturalHeight: img.naturalHeight,
              shown: Math.round(img.getBoundingClientRect().width)});
  }
  return out;
}
function sticking() {   // outermost elements that make the page wider than the screen
  const out = [];
  for (const el of document.body.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= vw + 1) continue;
    let ok = true;
    for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
      const s = getComputedStyle(a);
      if (s.position === 'fixed' || clips(a) || a.getBoundingClientRect().right > vw + 1) { ok = false; break; }
    }
    if (!ok || getComputedStyle(el).position === 'fixed') continue;   // hidden boxes still take room
    out.push({what: el.tagName.toLowerCase() + (el.className && typeof el.className === 'string' ? '.' +
              el.className.trim().split(/\s+/).slice(0, 3).join('.') : '') + ': ' + short(el.textContent, 50),
              right: Math.round(r.right)});
  }
  return out.slice(0, 8);
}
return {
  width: vw,
  scrollWidth: document.documentElement.scrollWidth,
  sideways: [].concat(
    overflowing('equation', 'mjx-container[display="true"]', 'mjx-math'),
    overflowing('output', '.cell_output pre, div.output pre, div.output_area pre', null),
    overflowing('table', 'table', null)),
  code: overflowing('code', '.cell_input pre', null),
  eqno: eqnoProblems(),
  figures: figures(),
  sticking: document.documentElement.scrollWidth > vw + 1 ? sticking() : [],
};
"""

WAIT_JS = r"""
const done = arguments[arguments.length - 1];
const fonts = document.fonts ? document.fonts.ready : Promise.resolve();
const mj = (window.MathJax && MathJax.startup && MathJax.startup.promise) ? MathJax.startup.promise : Promise.resolve();
Promise.all([fonts, mj]).then(() => requestAnimationFrame(() => requestAnimationFrame(() => done('ok'))))
  .catch(e => done('error: ' + e));
"""


@dataclass
class PageReport:
    page: str
    sideways: list = field(default_factory=list)  # at 1280 px: equations, outputs, tables
    code_sideways: list = field(default_factory=list)  # at 1280 px: code inputs (not asserted)
    page_too_wide: list = field(default_factory=list)  # at 390 px
    eqno_overlap: list = field(default_factory=list)
    soft_figures: list = field(default_factory=list)
    broken_images: list = field(default_factory=list)
    console: list = field(default_factory=list)
    figures: int = 0
    load: str = ""

    def problems(self) -> int:
        return (
            len(self.sideways)
            + len(self.page_too_wide)
            + len(self.eqno_overlap)
            + len(self.soft_figures)
            + len(self.broken_images)
            + len(self.console)
            + bool(self.load)
        )


def toc_files(root: Path = ROOT) -> list[str]:
    """Document names of ``_toc.yml`` in book order (root first)."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for e in entries or []:
            if "file" in e:
                files.append(e["file"])
            walk(e.get("sections"))
            walk(e.get("chapters"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return files


def toc_pages(html_dir: Path, root: Path = ROOT) -> list[Path]:
    return [html_dir / f"{f}.html" for f in toc_files(root)]


def new_driver():
    """Headless Chromium with the browser log enabled (Debian's chromium + chromedriver)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
        "--allow-file-access-from-files",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    return driver


def set_width(driver, width: int, height: int = HEIGHT) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
    )


def settle(driver) -> str:
    return driver.execute_async_script(WAIT_JS)


def check_page(driver, page: Path, label: str | None = None) -> PageReport:
    """Visit ``page`` at 1280 px then at 390 px and record what a reader sees wrong."""
    rep = PageReport(label or page.name)
    driver.get_log("browser")  # drop what an earlier page left
    set_width(driver, WIDE)
    driver.get(page.as_uri())
    state = driver.execute_script("return document.readyState")
    if state != "complete" or not driver.title:
        rep.load = f"did not load (state={state!r}, title={driver.title!r})"
    waited = settle(driver)
    if waited != "ok":
        rep.load = f"MathJax or fonts did not settle: {waited}"
    wide = driver.execute_script(MEASURE_JS)
    set_width(driver, NARROW)
    settle(driver)
    narrow = driver.execute_script(MEASURE_JS)
    set_width(driver, WIDE)

    rep.sideways = [f"{s['what']} (content {s['width']} px, shown {s['shown']} px)" for s in wide["sideways"]]
    rep.code_sideways = [f"{s['what']} (content {s['width']} px, shown {s['shown']} px)" for s in wide["code"]]
    if narrow["scrollWidth"] > narrow["width"] + 1:
        culprits = "; ".join(f"{s['what']} (to {s['right']} px)" for s in narrow["sticking"]) or "?"
        rep.page_too_wide = [f"page is {narrow['scrollWidth']} px wide on a {narrow['width']} px screen: {culprits}"]
    seen = set()
    for width, m in ((WIDE, wide), (NARROW, narrow)):
        for e in m["eqno"]:
            if e["what"] not in seen:
                seen.add(e["what"])
                rep.eqno_overlap.append(f"{e['what']} at {width} px")
    for f in wide["figures"]:
        rep.figures += 1
        if not f["complete"] or f["natural"] == 0 or f["naturalHeight"] == 0:
            rep.broken_images.append(f"{f['what']}: did not decode")
        elif f["shown"] > 0 and f["natural"] < 2 * f["shown"]:
            rep.soft_figures.append(
                f"{f['what']}: natural {f['natural']} px shown at {f['shown']} px ({f['natural'] / f['shown']:.2f}x)"
            )
    rep.console = [f"{e['message']}" for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    return rep


def check_pages(pages: list[Path], html_dir: Path | None = None, driver=None) -> list[PageReport]:
    """:func:`check_page` over ``pages`` in one browser session."""
    own = driver is None
    driver = driver or new_driver()
    try:
        return [
            check_page(driver, p, str(p.relative_to(html_dir)) if html_dir else p.name) for p in pages if p.is_file()
        ]
    finally:
        if own:
            driver.quit()


# --- claim links, on the HTML files -------------------------------------------------------


class HtmlFacts(HTMLParser):
    """Ids, links (with classes and the claim row they sit in) and code spans of a page."""

    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[dict] = []
        self.codes: list[tuple[str, bool]] = []  # (text, inside a claim link)
        self._a: list[dict | None] = []
        self._code: list[str] | None = None
        self._row: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        classes = (a.get("class") or "").split()
        if tag == "tr":
            self._row = a.get("id")
        if tag == "a":
            link = {"href": a.get("href") or "", "classes": classes, "row": self._row} if a.get("href") else None
            self._a.append(link)
            if link:
                self.links.append(link)
        if tag == "code":
            self._code = []

    def handle_endtag(self, tag):
        if tag == "a" and self._a:
            self._a.pop()
        if tag == "tr":
            self._row = None
        if tag == "code" and self._code is not None:
            inside = any(l and "claim-ref" in l["classes"] for l in self._a)
            self.codes.append(("".join(self._code).strip(), inside))
            self._code = None

    def handle_data(self, data):
        if self._code is not None:
            self._code.append(data)


def parse_html(path: Path) -> HtmlFacts:
    """Ids, links and code spans of an HTML file."""
    p = HtmlFacts()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def _resolve(page: Path, href: str) -> tuple[Path, str]:
    url = urlparse(href)
    target = page if not url.path else (page.parent / unquote(url.path)).resolve()
    return target, unquote(url.fragment)


CLAIM_ANCHOR = "claim-"
STATEMENT_ANCHOR = "stmt-"


def claim_link_problems(html_dir: Path, pages: list[Path], ledger: str = LEDGER_PAGE) -> dict[str, list[str]]:
    """Claim ids in chapters link to the ledger's anchors, and each ledger row links back.

    Returns ``{page: [problem, ...]}`` (pages without problems left out).
    """
    problems: dict[str, list[str]] = {}
    ledger_path = (html_dir / ledger).resolve()
    if not ledger_path.is_file():
        return {ledger: ["no ledger page"]}
    parsed = {p.resolve(): parse_html(p) for p in pages if p.is_file()}
    parsed.setdefault(ledger_path, parse_html(ledger_path))
    led = parsed[ledger_path]
    anchors = {i for i in led.ids if i.startswith(CLAIM_ANCHOR)}
    known = {i[len(CLAIM_ANCHOR) :] for i in anchors}
    name = lambda p: str(p.relative_to(html_dir.resolve())) if p.is_relative_to(html_dir.resolve()) else str(p)
    if not anchors:
        problems.setdefault(ledger, []).append("the ledger page has no claim anchors (ids claim-<id>)")
        known = {text for text, _ in led.codes if re.fullmatch(r"[A-Za-z]+(\.[A-Za-z0-9_]+)+", text)}

    for path, page in parsed.items():
        if path == ledger_path:
            continue
        out = []
        for link in page.links:
            if "claim-ref" not in link["classes"]:
                continue
            target, frag = _resolve(path, link["href"])
            if target != ledger_path or frag not in anchors:
                out.append(f"claim link {link['href']} does not reach an anchor of the ledger")
        for text, inside in page.codes:
            if text in known and not inside:
                out.append(f"claim `{text}` is not linked to the ledger")
        if out:
            problems[name(path)] = sorted(set(out), key=out.index)

    back: dict[str, list[dict]] = {}
    for link in led.links:
        if "claim-back" in link["classes"] and link["row"]:
            back.setdefault(link["row"], []).append(link)
    out = []
    for anchor in sorted(anchors):
        cid = anchor[len(CLAIM_ANCHOR) :]
        links = back.get(anchor, [])
        if not links:
            out.append(f"row {cid}: no link back to where a chapter states it")
        for link in links:
            target, frag = _resolve(ledger_path, link["href"])
            page = parsed.get(target) or (parse_html(target) if target.is_file() else None)
            if page is None or frag not in page.ids:
                out.append(f"row {cid}: link back {link['href']} does not reach an anchor")
    if out:
        problems.setdefault(ledger, []).extend(out)
    return problems


# --- report -------------------------------------------------------------------------------

CATEGORIES = ("sideways", "page_too_wide", "eqno_overlap", "soft_figures", "console", "broken_images")


def summary(reports: list[PageReport], links: dict[str, list[str]]) -> dict:
    totals = {c: sum(len(getattr(r, c)) for r in reports) for c in CATEGORIES}
    totals["code_sideways"] = sum(len(r.code_sideways) for r in reports)
    totals["claim_links"] = sum(len(v) for v in links.values())
    totals["figures"] = sum(r.figures for r in reports)
    totals["pages"] = len(reports)
    return totals


def format_report(reports: list[PageReport], links: dict[str, list[str]]) -> str:
    lines = []
    for r in reports:
        items = [(c, x) for c in CATEGORIES for x in getattr(r, c)] + [
            ("claim_links", x) for x in links.get(r.page, [])
        ]
        if r.load:
            items.insert(0, ("load", r.load))
        if not items:
            continue
        lines.append(f"## {r.page}")
        lines += [f"- [{c}] {x}" for c, x in items]
    lines.append("")
    lines.append("totals: " + json.dumps(summary(reports, links)))
    return "\n".join(lines)


SCREENSHOTS = {  # name -> (page, element to scroll to: CSS selector, or None for the top)
    "chapter02": ("book/part1/02_global.html", "figure"),
    "chapter05": ("book/part1/05_joint.html", "figure"),
    "claims": ("book/appendix/claims.html", "table"),
}


def screenshots(html_dir: Path, out: Path, suffix: str, driver=None) -> list[Path]:
    """Screenshots at 1280 px of three pages, scrolled to their first figure / table."""
    out.mkdir(parents=True, exist_ok=True)
    own = driver is None
    driver = driver or new_driver()
    paths = []
    try:
        set_width(driver, WIDE, 1000)
        for name, (page, selector) in SCREENSHOTS.items():
            driver.get((html_dir / page).as_uri())
            settle(driver)
            if selector:
                driver.execute_script(
                    "const e = document.querySelector('article ' + arguments[0]);"
                    "if (e) { e.scrollIntoView({block: 'start'}); window.scrollBy(0, -120); }",
                    selector,
                )
                time.sleep(0.3)
            path = out / f"{name}-{suffix}.png"
            driver.save_screenshot(str(path))
            paths.append(path)
    finally:
        if own:
            driver.quit()
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("html_dir", nargs="?", default=str(ROOT / "_build" / "html"))
    ap.add_argument("--json", help="write the full report here")
    ap.add_argument("--screenshots", help="write three screenshots into this folder instead")
    ap.add_argument("--suffix", default="after")
    ap.add_argument("--toc-root", default=str(ROOT), help="folder whose _toc.yml lists the pages")
    args = ap.parse_args(argv)
    html_dir = Path(args.html_dir).resolve()
    if args.screenshots:
        for p in screenshots(html_dir, Path(args.screenshots), args.suffix):
            print(p)
        return 0
    pages = toc_pages(html_dir, Path(args.toc_root))
    t0 = time.perf_counter()
    reports = check_pages(pages, html_dir)
    links = claim_link_problems(html_dir, pages)
    print(format_report(reports, links))
    print(f"({time.perf_counter() - t0:.0f} s)")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"pages": [asdict(r) for r in reports], "claim_links": links, "totals": summary(reports, links)},
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
