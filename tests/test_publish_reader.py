"""Reader notebooks (Colab, Binder, download) and the buttons that open them.

Two halves:

- the conversion (``book/_ext/reader_notebooks.Converter``) on small MyST inputs,
  with a stand-in resolver: no Sphinx, no build;
- the built book (``make test`` builds it first; ``_build/html``): every chapter has a
  reader notebook with no MyST syntax left and the release's install cell, every
  launch button opens a reader notebook at the single configured address, the site
  has its sitemap, Open Graph tags and cite page, and two reader notebooks execute.
"""

from __future__ import annotations

import html
import os
import re
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
READER = HTML / "notebooks"
IN_CI = bool(os.environ.get("CI"))

sys.path.insert(0, str(ROOT / "book" / "_ext"))
sys.path.insert(0, str(ROOT / "scripts"))
import bookcheck  # noqa: E402  (tests/, on the path as for test_browser)
import project_meta as pm  # noqa: E402
import reader_notebooks as rn  # noqa: E402

META = pm.load(ROOT)

# MyST that a notebook would show raw: roles, directive fences, targets, directive options
MYST_LEFTOVERS = [
    (re.compile(r"\{[a-z][\w:+-]*\}`"), "a role"),
    (re.compile(r"^\s*(`{3,}|:{3,})\s*\{", re.M), "a directive fence"),
    (re.compile(r"^\([^()\s]+\)=\s*$", re.M), "a (label)= target"),
    (re.compile(r"^:(label|class|name|tags|nonumber|dropdown|width|align):", re.M), "a directive option"),
    (re.compile(r"\{prf:|\{include\}|\{eq\}|\{doc\}|\{cite|\{ref\}|\{numref\}|\{code-cell\}"), "MyST syntax"),
    (re.compile(r"\$\$\s*\([^()\s]+\)"), "an equation label"),
]


def myst_leftovers(text: str) -> list[str]:
    return [f"{why}: {m.group(0)!r}" for rx, why in MYST_LEFTOVERS for m in rx.finditer(text)]


# --------------------------------------------------------------------------- conversion, no Sphinx

NUMBERS = {("eq", "eq-a"): "2.1", ("fig", "fig-a"): "2.3", ("prf", "thm-a"): "2.2", ("exercise", "ex-a"): "2.4"}


def fake_resolve(role, target, text):
    return f"[{text or role + ':' + target}](https://site/{target})"


def converter(**kw):
    return rn.Converter(
        resolve=fake_resolve,
        number=lambda k, l: NUMBERS.get((k, l)),
        read_include=lambda p: ":::{admonition} Included\n:class: tip\nSnippet $\\R$.\n:::\n",
        install_source="# install",
        macros={"R": "\\mathbb{R}"},
        **kw,
    )


def md(text: str) -> str:
    out = converter().markdown(text)
    assert not myst_leftovers(out), (myst_leftovers(out), out)
    return out


def test_roles_become_links_and_code_spans_stay():
    # (the leftover check is deliberately blunt and would flag `{eq}` even in a code span)
    out = converter().markdown("See {eq}`eq-a`, {ref}`the model <chap-model>` and `{eq}` literally; {cite:t}`key`.")
    assert "[eq:eq-a](https://site/eq-a)" in out
    assert "[the model](https://site/chap-model)" in out
    assert "`{eq}`" in out  # inline code is not a role
    assert "[cite:t:key](https://site/key)" in out


def test_claim_role_and_ledger_directive_link_to_the_ledger():
    out = converter().markdown("Checked by {claim}`A.global.gd`.\n\n```{claims-ledger} claims-ledger\n```\n")
    assert "[claim:A.global.gd](https://site/A.global.gd)" in out
    assert "[its ledger page](https://site/)" in out and "html_tables.claims_html(results)" in out
    assert not myst_leftovers(out)


def test_labelled_math_gets_the_books_number_and_an_anchor():
    out = md("Text\n\n$$\nx = y\n$$ (eq-a)\n\nmore $\\R^d$.")
    assert '<a id="equation-eq-a"></a>' in out and "\\tag{2.1}" in out
    assert "\\mathbb{R}^d" in out and "\\R" not in out


def test_theorem_proof_exercise_solution_admonition_include():
    src = """(sec-x)=
## Theory

```{prf:theorem} Global convergence
:label: thm-a

Under $A$, the limit holds.
```

```{prf:proof}
Idea.
```

```{exercise}
:label: ex-a

Try it.
```

````{solution} ex-a
:class: dropdown

Worked:

```python
print(1)
```
````

```{include} ../_snippets/gpu.md
```
"""
    out = md(src)
    assert '<a id="sec-x"></a>' in out
    assert "> **Theorem 2.2** (Global convergence)" in out and "> Under $A$, the limit holds." in out
    assert "> **Proof.** Idea. ∎" in out
    assert "> **Exercise 2.4**" in out
    assert "<details>\n<summary><b>Solution to Exercise 2.4</b></summary>" in out
    assert "```python\nprint(1)\n```" in out  # a plain code block inside a directive survives
    assert "> **Included**" in out and "\\mathbb{R}" in out


def test_gated_solution_and_unknown_syntax():
    out = md("````{solution-start} ex-a\n:class: dropdown\n````\n\nText.")
    assert out.startswith("**Solution to Exercise 2.4**")
    with pytest.raises(rn.ReaderError, match="directive"):
        converter().markdown("```{glue:figure} x\n```")
    with pytest.raises(rn.ReaderError, match="role"):
        converter().markdown("a {sub-ref}`x` b")
    with pytest.raises(rn.ReaderError, match="unclosed"):
        converter().markdown("```{note}\nnever closed")


def test_notebook_cells_install_hidden_cells_and_captions():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Title"),
        nbformat.v4.new_code_cell(
            'try:\n    import mmtoken\nexcept ImportError:\n    %pip install -q "mmtoken"',
            metadata={"tags": ["remove-cell"]},
        ),
        nbformat.v4.new_code_cell("setup()", metadata={"tags": ["remove-cell"]}),
        nbformat.v4.new_code_cell(
            "plot()", metadata={"mystnb": {"figure": {"caption": "Paths, see {eq}`eq-a`.", "name": "fig-a"}}}
        ),
        nbformat.v4.new_code_cell("x", metadata={"tags": ["hide-output", "nbval-ignore-output"]}),
    ]
    out = converter(header="From the book.").convert(nb, is_install_cell=lambda s: pm.is_install_cell(s, META))
    nbformat.validate(out)
    kinds = [(c.cell_type, c.source.splitlines()[0]) for c in out.cells]
    assert kinds[0] == ("markdown", "From the book.")
    install = out.cells[2]
    assert install.source == "# install" and install.metadata["jupyter"] == {"outputs_hidden": True}
    assert out.cells[3].source == "setup()" and out.cells[3].metadata["jupyter"] == {"source_hidden": True}
    assert out.cells[5].cell_type == "markdown" and out.cells[5].source.endswith(
        "**Figure 2.3.** Paths, see [eq:eq-a](https://site/eq-a)."
    )
    assert out.cells[6].metadata == {"jupyter": {"outputs_hidden": True}, "tags": ["hide-output"]}
    assert all("mystnb" not in c.metadata for c in out.cells)


# --------------------------------------------------------------------------- the built book


def _need_build():
    if not (HTML / "index.html").is_file() or not READER.is_dir():
        why = f"no built book with reader notebooks at {HTML}: run `make build` (make test builds first)"
        if IN_CI:
            pytest.fail(why)
        pytest.skip(why)


def chapter_docnames() -> list[str]:
    """Docnames in ``_toc.yml`` order whose source is a MyST notebook (gets launch buttons)."""
    return [f for f in bookcheck.toc_files(ROOT) if (ROOT / f"{f}.md").read_text().startswith("---\njupytext:")]


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.meta = [], {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
        if tag == "meta" and a.get("property"):
            self.meta[a["property"]] = a.get("content")


def _page(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text())
    return p


def test_every_chapter_has_a_reader_notebook_without_myst():
    _need_build()
    docs = chapter_docnames()
    assert docs
    found = sorted(p.relative_to(READER).as_posix() for p in READER.rglob("*.ipynb"))
    assert found == sorted(rn.reader_path(d) for d in docs)
    problems = {}
    for d in docs:
        nb = nbformat.read(READER / rn.reader_path(d), as_version=4)
        nbformat.validate(nb)
        bad = [x for c in nb.cells if c.cell_type == "markdown" for x in myst_leftovers(c.source)]
        bad += [f"cell metadata {k}" for c in nb.cells for k in c.metadata if k in ("mystnb", "myst")]
        if bad:
            problems[d] = bad
    assert not problems, problems
    ledger = nbformat.read(READER / rn.reader_path("book/appendix/claims"), as_version=4)
    assert any("book/appendix/claims.html)" in c.source for c in ledger.cells if c.cell_type == "markdown")


def test_reader_install_cell_is_the_release():
    _need_build()
    for d in chapter_docnames():
        nb = nbformat.read(READER / rn.reader_path(d), as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        extras = pm.chapter_extras((ROOT / f"{d}.md").read_text(), META)
        assert code[0].source == pm.install_cell(META, extras), d
        assert code[0].metadata["jupyter"]["outputs_hidden"] is True
        assert not code[0].metadata["jupyter"].get("source_hidden"), "the install cell is visible"
        assert sum(pm.is_install_cell(c.source, META) for c in code) == 1, d


def test_every_launch_url_uses_the_configured_address_and_opens_a_reader_notebook():
    _need_build()
    docs = set(chapter_docnames())
    launch = re.compile(r"^https://(colab\.research\.google\.com|mybinder\.org)/")
    seen = {}
    for page in HTML.rglob("*.html"):
        if READER in page.parents:
            continue
        docname = page.relative_to(HTML).with_suffix("").as_posix()
        urls = [h for h in _page(page).hrefs if launch.match(h)]
        if urls:
            seen[docname] = urls
        for url in urls:
            want = {META.colab_url(rn.reader_path(docname)), META.binder_url(rn.reader_path(docname))}
            assert url in want, (docname, url)
    assert set(seen) == docs, f"pages with launch buttons {sorted(set(seen) ^ docs)} differ from the chapters"
    for d, urls in seen.items():
        assert set(urls) == {META.colab_url(rn.reader_path(d)), META.binder_url(rn.reader_path(d))}, d
        assert (READER / rn.reader_path(d)).is_file()
        # the .ipynb download is the reader notebook too
        page = _page(HTML / f"{d}.html")
        ipynb = [h for h in page.hrefs if h.endswith(".ipynb") and not launch.match(h)]
        assert ipynb and all(
            (HTML / d).parent.joinpath(h).resolve() == (READER / rn.reader_path(d)).resolve() for h in ipynb
        ), (d, ipynb)


def test_site_metadata_sitemap_and_cite_page():
    _need_build()
    sitemap = (HTML / "sitemap.xml").read_text()
    locs = re.findall(r"<loc>([^<]+)</loc>", sitemap)
    assert locs and all(u.startswith(META.site) for u in locs)
    assert f"{META.site}book/appendix/cite.html" in locs
    page = (
        _page(HTML / "book" / "part1" / "01_model.html")
        if (HTML / "book/part1/01_model.html").exists()
        else _page(HTML / "book" / "intro.html")
    )
    assert page.meta["og:url"].startswith(META.site)
    assert page.meta["og:image"] == f"{META.site}_static/logo.png"
    assert (HTML / "_static" / "logo.png").is_file()
    cite = html.unescape(re.sub(r"<[^>]+>", "", (HTML / "book" / "appendix" / "cite.html").read_text()))
    assert f"version = {{{META.version}}}" in cite and META.repository in cite and META.site in cite


def _smallest_two() -> list[str]:
    """Two small chapters to execute: the first two numbered chapters of the table of contents."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    numbered = [
        e["file"]
        for part in toc.get("parts", [])
        if part.get("numbered")
        for e in part.get("chapters", [])
        if "file" in e
    ]
    docs = [d for d in numbered if d in chapter_docnames()]
    return docs[:2]


@pytest.mark.slow
@pytest.mark.parametrize("index", [0, 1])
def test_two_reader_notebooks_execute(index, tmp_path):
    """A reader notebook runs top to bottom at quick scale (install cell included: mmtoken is present)."""
    _need_build()
    from nbclient import NotebookClient

    docs = _smallest_two()
    assert len(docs) == 2, docs
    doc = docs[index]
    nb = nbformat.read(READER / rn.reader_path(doc), as_version=4)
    t = time.process_time()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert sum(1 for c in nb.cells if c.cell_type == "code" and c.get("outputs")) > 1
    print(f"{doc}: executed in {time.process_time() - t:.1f} s CPU (client side)")


def test_reader_header_has_the_colab_badge_and_the_release():
    head = rn.reader_header(
        META, "book/part1/02_global", "2 Global", "The book", META.site + "book/part1/02_global.html"
    )
    assert f"[![Open In Colab]({rn.COLAB_BADGE})]({META.colab_url('part1/02_global.ipynb')})" in head
    assert f"mmtoken {META.version}" in head


def test_gpu_chapters_are_those_with_the_gpu_note():
    gpu = sorted(p.stem for p in (ROOT / "book").rglob("*.md") if rn.needs_gpu(p.read_text()))
    assert {"08_random", "09_vit_sparsity", "12_real_reviews"} <= set(gpu), gpu
    assert not rn.needs_gpu((ROOT / "book" / "part1" / "02_global.md").read_text())
    assert rn.GPU_METADATA["accelerator"] == "GPU"


def test_reader_text_makes_sense_in_a_notebook():
    """No "rocket icon" (a notebook has none), no repository paths a notebook cannot open."""
    for p in sorted((ROOT / "book").rglob("*.md")):
        if "_build" in p.parts:
            continue
        text = p.read_text()
        if not (text.startswith("---\njupytext:") or p.parent.name == "_snippets"):
            continue
        assert "rocket icon" not in text, p
        assert not re.search(r"`scripts/[\w/]+\.py`", text), f"{p}: a scripts/ path in a reader notebook's text"


def test_release_zip_holds_every_reader_notebook_and_binder(tmp_path):
    import zipfile

    import reader_branch

    html = tmp_path / "html"
    for rel in ("tour.ipynb", "part1/02_global.ipynb"):
        (html / rn.OUT / rel).parent.mkdir(parents=True, exist_ok=True)
        (html / rn.OUT / rel).write_text("{}")
    out = tmp_path / "reader"
    reader_branch.assemble(html, out)
    target = tmp_path / META.zip_name
    names = reader_branch.write_zip(out, target)
    with zipfile.ZipFile(target) as z:
        assert sorted(z.namelist()) == names
    assert {"tour.ipynb", "part1/02_global.ipynb", "README.md", "binder/postBuild"} <= set(names)
    assert META.zip_name == f"mmtoken-notebooks-{META.version}.zip"
