"""The built book in a real browser: every chapter page loads, every figure decodes, every internal link resolves.

Runs after the build (``make test`` builds first). Needs Debian's ``chromium``
and ``chromium-driver`` (installed by ``scripts/setup.sh``) and selenium. In CI
a missing browser or build is a failure, elsewhere a skip.
"""
from __future__ import annotations

import os
import shutil
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
HTML_DIR = ROOT / "_build" / "html"
IN_CI = bool(os.environ.get("CI"))


def _need(condition: bool, why: str) -> None:
    if not condition:
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)


def toc_pages() -> list[Path]:
    """HTML pages of every file in ``_toc.yml``."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
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
    return [HTML_DIR / f"{f}.html" for f in files]


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.ids, self.imgs = [], set(), []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
        if tag == "img" and a.get("src"):
            self.imgs.append(a["src"])


def _parse(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text(encoding="utf-8"))
    return p


@pytest.fixture(scope="module")
def pages() -> list[Path]:
    _need(HTML_DIR.is_dir(), f"no built book at {HTML_DIR}: run `make build` first")
    return toc_pages()


def test_every_chapter_was_built(pages):
    missing = [str(p.relative_to(HTML_DIR)) for p in pages if not p.is_file()]
    assert not missing, f"pages in _toc.yml without HTML: {missing}"


def test_internal_links_resolve(pages):
    broken = []
    cache: dict[Path, _Links] = {}
    for page in (p for p in pages if p.is_file()):   # missing pages fail the test above
        for href in _parse(page).hrefs:
            url = urlparse(href)
            if url.scheme or href.startswith(("mailto:", "//")):
                continue
            target = page if not url.path else (page.parent / unquote(url.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                broken.append(f"{page.relative_to(HTML_DIR)} -> {href}")
                continue
            if url.fragment and target.suffix == ".html":
                ids = cache.setdefault(target, _parse(target)).ids
                if unquote(url.fragment) not in ids:
                    broken.append(f"{page.relative_to(HTML_DIR)} -> {href} (no such anchor)")
    assert not broken, "broken internal links:\n" + "\n".join(sorted(set(broken)))


def _driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", "--disable-quic", "--allow-file-access-from-files"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"),
                            options=options)


def test_pages_load_and_figures_decode(pages):
    _need(shutil.which("chromium") is not None and shutil.which("chromedriver") is not None,
          "chromium / chromedriver not installed (scripts/setup.sh installs them)")
    pytest.importorskip("selenium") if not IN_CI else __import__("selenium")
    driver = _driver()
    problems, figures = [], 0
    try:
        driver.set_page_load_timeout(60)
        for page in (p for p in pages if p.is_file()):
            driver.get(page.as_uri())
            state = driver.execute_script("return document.readyState")
            title = driver.title
            if state != "complete" or not title:
                problems.append(f"{page.name}: did not load (state={state!r}, title={title!r})")
            imgs = driver.execute_script(
                "return Array.from(document.querySelectorAll('main img, article img'))"
                ".map(i => [i.getAttribute('src'), i.complete, i.naturalWidth, i.naturalHeight]);")
            for src, complete, w, h in imgs:
                figures += 1
                if not complete or w == 0 or h == 0:
                    problems.append(f"{page.name}: image {src} did not decode ({w}x{h})")
    finally:
        driver.quit()
    assert not problems, "\n".join(problems)
    assert figures > 0, "no figure found in the built book"
