"""The PDF holds the book's tables: the claims ledger's chapter tables and the benchmark tables.

The LaTeX builder drops raw HTML and, for a displayed object, prints its text/plain when it has no Markdown or
image, so a table shown only as HTML is an empty section or ``<IPython.core.display.HTML object>`` in the PDF.
The unit tests read the stored notebooks and the Markdown of :mod:`mmtoken.book.text_tables` (parsed as MyST
parses it); the slow test builds the LaTeX (``jupyter-book build --builder latex``, from the stored outputs, into
a temporary folder: about a minute) and reads the ``.tex``.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from IPython.core.formatters import format_display_data
from markdown_it import MarkdownIt

from mmtoken.book import html_tables, pages, report, scale_runs, text_tables

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for p in (ROOT / "book").rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
HIDDEN = {"remove-output", "remove-cell"}
OBJECT_REPR = re.compile(r"<[\w.]+ object( at 0x[0-9a-f]+)?>")
SHOWN_BY_LATEX = ("application/pdf", "image/png", "image/jpeg", "text/latex", "text/markdown")
BENCHMARKS = ("figures", "whole_process", "paper_scale", "random", "book")


def parsed_tables(md: str) -> list[list[list[str]]]:
    """The tables of a Markdown text as MyST's parser reads them: rows of cell texts, the header first."""
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    tables, row = [], None
    for i, t in enumerate(tokens):
        if t.type == "table_open":
            tables.append([])
        elif t.type == "tr_open":
            row = []
            tables[-1].append(row)
        elif t.type in ("th_open", "td_open"):
            row.append(tokens[i + 1].content)
    return tables


def stored_ledger_rows() -> list[dict]:
    """The rows the claims appendix glued for the ``claims-ledger`` directive."""
    nb = nbformat.read(ROOT / "book" / "appendix" / "claims.ipynb", as_version=4)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            for mime, text in out.get("data", {}).items():
                if mime.startswith("application/papermill.record/"):
                    return report.rows_from_payload(text)
    raise AssertionError("claims.ipynb glues no ledger")


# --- the Markdown ---------------------------------------------------------------------------


def test_escape_keeps_syntax_literal():
    for text in ("||KQ^T - W|| < 1e-12", "a_b * c_d", "$x$ and {{ s }}", "[link](x) & <b>", "`code` ~x~ \\"):
        (table,) = parsed_tables(text_tables.markdown_table(["h"], [[text_tables.escape(text)]]))
        assert table[1] == [text_tables.escape(text).replace("\\|", "|")]  # one cell: no column rule leaked
        html = MarkdownIt("commonmark").enable("table").render(text_tables.escape(text))
        assert "<em>" not in html and "<code>" not in html and "<a " not in html and "<b>" not in html
    assert text_tables.escape("two\nlines\t here") == "two lines here"


def test_a_row_of_the_wrong_length_is_refused():
    with pytest.raises(ValueError, match="row 0 has 1 cells, the header 2"):
        text_tables.markdown_table(["a", "b"], [["x"]])


def test_every_stored_claim_is_one_row_of_its_chapters_markdown_table():
    rows = stored_ledger_rows()
    seen = []
    for group in html_tables.ledger_groups(rows, ROOT):
        md = text_tables.group_markdown(group)
        (table,) = parsed_tables(md)
        assert table[0] == list(text_tables.LEDGER_HEADER)
        assert all(len(r) == 5 for r in table), group.title
        assert [r[0] for r in table[1:]] == [report.status(d) for d in group.rows]
        for cells, d in zip(table[1:], group.rows):
            assert cells[1].startswith(group.paper.verdict(d["id"])), "the paper-scale verdict beside the status"
            assert f"`{d['id']}`" in cells[2] and d["threshold"].split()[0] in cells[4]
        assert md.startswith(text_tables.escape(group.paper.line())), "the table says when its paper run was made"
        seen += [d["id"] for d in group.rows]
    assert sorted(seen) == sorted(r["id"] for r in rows) and len(rows) > 50


def test_the_markdown_ledger_shows_the_paper_scale_verdicts(tmp_path):
    meta = {"date": "2026-01-02", "commit": "abc1234"}
    runs = {
        "paper": {
            "tour": {"status": "finished", "wall_s": 3.0, "claims": {"a.one": "pass", "a.two": "FAIL"}, "meta": meta},
            "part1/02_global": {"status": "timeout", "wall_s": 601.0, "cpu_s": None, "limit_s": 600, "meta": meta},
        }
    }
    (tmp_path / f"{scale_runs.FILE}.json").write_text(json.dumps(runs))
    rows = [
        {
            "id": cid,
            "statement": "s",
            "checks": "c",
            "kind": "theorem",
            "chapter": chapter,
            "threshold": "t < 1",
            "measured": 0.5,
            "passed": True,
        }
        for cid, chapter in (("a.one", "tour"), ("a.two", "tour"), ("b.one", "02_global"), ("c.one", "09_vit_sparsity"))
    ]
    groups = html_tables.ledger_groups(rows, ROOT, tmp_path)
    tables = [parsed_tables(text_tables.group_markdown(g))[0] for g in groups]
    assert [[r[1] for r in t[1:]] for t in tables] == [
        ["pass", f"FAIL {scale_runs.DIFFERS}"],
        ["not measured (stopped at 600 s)"],
        ["not measured (needs a GPU at paper scale)"],
    ]
    assert text_tables.group_markdown(groups[0]).startswith("Paper scale: measured 2026-01-02 at commit abc1234\n\n")


def test_every_chapter_is_run_at_paper_scale_or_says_why_not():
    """``scale_runs.NOT_RUN`` names the chapters with claims that ``benchmarks/paper_scale.py`` leaves out."""
    script = ast.parse((ROOT / "benchmarks" / "paper_scale.py").read_text(encoding="utf-8"))
    (run,) = [
        ast.literal_eval(n.value)
        for n in script.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "CHAPTERS"
    ]
    docs = {p.stem: p.doc.removeprefix("book/") for p in pages.book_order(ROOT)}
    with_claims = {docs[d["chapter"]] for d in stored_ledger_rows() if d.get("chapter") in docs}
    assert not set(run) & set(scale_runs.NOT_RUN)
    assert with_claims <= set(run) | set(scale_runs.NOT_RUN), with_claims - set(run)
    assert set(scale_runs.NOT_RUN) <= with_claims


def test_a_benchmark_table_displays_as_html_markdown_and_text():
    frame = pd.DataFrame([{"process": "a|b", "CPU (s)": 1.5}, {"process": "c_d", "CPU (s)": 2.0}])
    t = text_tables.Table("measured today on *a* machine", frame)
    shown, _ = format_display_data(t)  # what IPython stores in the notebook: one representation per builder
    assert "<table" in shown["text/html"]
    (table,) = parsed_tables(shown["text/markdown"])
    assert table == [["process", "CPU (s)"], ["a|b", "1.5"], [r"c\_d", "2.0"]]
    assert repr(t).startswith("measured today") and "c_d" in repr(t)


def test_the_benchmark_files_make_their_tables():
    tables = html_tables.benchmark_tables(html_tables.benchmark_results())
    assert set(tables) == set(BENCHMARKS)
    for name, (caption, frame) in tables.items():
        (table,) = parsed_tables(text_tables.Table(caption, frame)._repr_markdown_())
        assert len(table) == len(frame) + 1 and all(len(r) == frame.shape[1] for r in table), name


# --- the stored outputs ---------------------------------------------------------------------


def shown_outputs(nb):
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and not HIDDEN & set(cell.metadata.get("tags", [])):
            for out in cell.get("outputs", []):
                if out.output_type in ("display_data", "execute_result"):
                    yield i, out.data


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_shown_output_is_an_object_repr_in_the_pdf(path):
    """What the LaTeX builder prints for each shown output is a table, a figure or readable text."""
    nb = nbformat.read(path, as_version=4)
    bad = [
        f"cell {i}: {data.get('text/plain', '')[:60]!r}"
        for i, data in shown_outputs(nb)
        if not any(m in data for m in SHOWN_BY_LATEX) and OBJECT_REPR.fullmatch(data.get("text/plain", "").strip())
    ]
    assert not bad, f"{path.name}: shown only as HTML, printed as the object's repr in the PDF: {bad}"


def test_each_benchmark_table_is_stored_as_markdown():
    nb = nbformat.read(ROOT / "book" / "appendix" / "benchmarks.ipynb", as_version=4)
    shown = [data for _, data in shown_outputs(nb) if "text/html" in data]
    assert len(shown) == len(BENCHMARKS)
    for data in shown:
        assert len(parsed_tables(data["text/markdown"])) == 1, data["text/plain"][:60]


# --- the LaTeX build ------------------------------------------------------------------------


def latex_section(tex: str, start: str, end: str) -> str:
    i = tex.index(start)
    j = tex.find(end, i + len(start))
    return tex[i : j if j > 0 else len(tex)]


def tex_text(s: str) -> str:
    """LaTeX's escapes of ``_`` and ``-`` undone, so a claim id can be found in the ``.tex``."""
    return s.replace(r"\_", "_").replace(r"\sphinxhyphen{}", "-")


@pytest.mark.slow
def test_the_latex_build_holds_every_table(tmp_path):
    jb = Path(sys.executable).with_name("jupyter-book")
    if not jb.is_file() and not shutil.which("jupyter-book"):
        pytest.skip("jupyter-book is not installed")
    out = tmp_path / "out"
    env_run = dict(cwd=ROOT, capture_output=True, text=True, timeout=900)
    seed = subprocess.run(
        [sys.executable, "scripts/stored_outputs.py", "seed", "--cache", str(out / "_build" / ".jupyter_cache")],
        **env_run,
    )  # every chapter from its stored outputs (an out-of-sync chapter is an error: nothing executes)
    assert seed.returncode == 0, seed.stderr[-2000:]
    build = subprocess.run(
        [str(jb) if jb.is_file() else "jupyter-book", "build", ".", "--builder", "latex", "--path-output", str(out)],
        **env_run,
    )
    assert build.returncode == 0, (build.stdout + build.stderr)[-3000:]
    assert "Executing notebook" not in build.stdout + build.stderr, "the build executed a chapter"
    tex = (out / "_build" / "latex" / "mmtoken.tex").read_text(encoding="utf-8")
    assert "IPython.core.display" not in tex

    ledger = tex_text(latex_section(tex, r"\chapter{Reproducibility: the claims ledger}", r"\chapter{"))
    rows = stored_ledger_rows()
    groups = html_tables.ledger_groups(rows, ROOT)
    sections = re.split(r"\\section\{", ledger)[1:]
    ours = [s for s in sections if "label{\\detokenize{book/appendix/claims:ledger-" in s]
    assert len(ours) == len(groups)
    for section, group in zip(ours, groups):
        assert r"\begin{longtable}" in section, group.title
        assert "paper scale" in section and group.paper.line() in section, group.title  # the column, its date
        for d in group.rows:
            assert f"\\sphinxupquote{{{d['id']}}}" in section, d["id"]
            assert group.paper.verdict(d["id"]) in section, d["id"]

    bench = latex_section(tex, r"\chapter{Benchmarks}", r"\chapter{")
    assert len(re.findall(r"\\begin\{(tabulary|longtable|tabular)\}", bench)) == len(BENCHMARKS)
    assert "published figure (paper A)" in bench and "execution (s)" in bench and "paper: wall (s)" in bench
