"""The book's pages (mmtoken.book.pages), the claims as text (mmtoken.book.report), and the ledger and the
benchmark tables as HTML (mmtoken.book.html_tables)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from mmtoken.book import html_tables, pages, report, scale_runs
from mmtoken.book.ledger import Result

ROOT = Path(__file__).resolve().parent.parent


def result(cid, chapter, passed=True, kind="theorem", measured=None, known_miss=None, error=None):
    return Result(
        cid,
        f"statement of {cid}",
        "Theorem 1 (paper A)",
        kind,
        chapter,
        "corr >= 0.999",
        {"corr": 0.9999987654, "steps": 1000} if measured is None else measured,
        passed,
        1.25,
        "",
        known_miss,
        error,
    )


@pytest.fixture
def mini(tmp_path):
    """A two-part book with an appendix, chapters marking their claims with the role."""
    (tmp_path / "book" / "part1").mkdir(parents=True)
    (tmp_path / "book" / "appendix").mkdir(parents=True)
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nparts:\n"
        "  - caption: Start\n    chapters:\n      - file: book/tour\n"
        "  - caption: Part I\n    numbered: true\n    chapters:\n      - file: book/part1/01_a\n"
        "      - file: book/part1/02_b\n"
        "  - caption: Part II\n    numbered: true\n    chapters:\n      - file: book/part1/03_c\n"
        "  - caption: Appendix\n    numbered: 1\n    style: alphaupper\n    chapters:\n      - file: book/appendix/sat\n"
        "      - file: book/appendix/claims\n  - caption: Back\n    chapters:\n      - file: book/references\n"
    )
    pages = {
        "book/intro": "# Intro\n",
        "book/tour": "# A tour\n\n```{code-cell} ipython3\n# not a heading\n```\n",
        "book/part1/01_a": "---\nfront: matter\n---\n\n```python\n# fenced, not a heading\n```\n(x)=\n# First chapter\n"
        "What we check ({claim}`A.a.one`).\n",
        "book/part1/02_b": "# Second chapter\n\nSee {claim}`A.a.one` and {claim}`A.b.two`.\n",
        "book/part1/03_c": "# Third chapter\n",
        "book/appendix/sat": "# The trap\n{claim}`A.sat.x`\n",
        "book/appendix/claims": "# Ledger\n",
        "book/references": "# References\n",
    }
    for doc, text in pages.items():
        (tmp_path / f"{doc}.md").write_text(text)
    return tmp_path


def test_book_order_numbers_chapters_and_letters_appendices(mini):
    order = pages.book_order(mini)
    assert [(p.doc, p.label, p.heading) for p in order] == [
        ("book/intro", None, "Intro"),
        ("book/tour", None, "A tour"),
        ("book/part1/01_a", "1", "1. First chapter"),
        ("book/part1/02_b", "2", "2. Second chapter"),
        ("book/part1/03_c", "3", "3. Third chapter"),
        ("book/appendix/sat", "A", "A. The trap"),
        ("book/appendix/claims", "B", "B. Ledger"),
        ("book/references", None, "References"),
    ]


def testalpha_label():
    assert [pages.alpha_label(n) for n in (1, 2, 26, 27, 52, 53)] == ["A", "B", "Z", "AA", "AZ", "BA"]


def test_real_book_order_matches_toc():
    order = pages.book_order(ROOT)
    assert order[0].doc == "book/intro"
    labels = [p.label for p in order if p.part.startswith("Part")]
    assert labels == [str(i) for i in range(1, len(labels) + 1)], "chapters are numbered on across parts"
    assert next(p for p in order if p.doc == "book/appendix/claims").label is not None
    assert all(p.title and not p.title.startswith("#") for p in order)


def test_statement_places_in_book_order(mini):
    assert pages.statement_places(mini) == {
        "A.a.one": ["book/part1/01_a", "book/part1/02_b"],
        "A.b.two": ["book/part1/02_b"],
        "A.sat.x": ["book/appendix/sat"],
    }


def test_relative_url():
    assert pages.relative_url("book/appendix/claims", "book/part1/02_global") == "../part1/02_global.html"
    assert pages.relative_url("book/appendix/claims", "book/tour") == "../tour.html"
    assert pages.relative_url("book/appendix/claims", "book/appendix/saturation") == "saturation.html"
    assert pages.relative_url("book/intro", "book/part2/10_x") == "part2/10_x.html"


def test_plurals_and_summary():
    assert report.plural(1, "claim") == "1 claim" and report.plural(2, "claim") == "2 claims"
    assert report.plural(1, "known miss", "known misses") == "1 known miss"
    assert report.plural(0, "known miss", "known misses") == "0 known misses"
    rs = [
        result("A.a.one", "01_a"),
        result("A.b.two", "02_b", passed=False, kind="observation", known_miss="why"),
        result("A.b.three", "02_b", passed=False, kind="consistency"),
    ]
    assert report.summary_line(rs, scale="quick") == (
        "3 claims at quick scale: 1 passed, 1 known miss, 1 failed.\n1 theorem, 1 observation, 1 consistency check."
    )
    assert report.summary_line(rs[:1]).startswith("1 claim: 1 passed, 0 known misses, 0 failed.\n1 theorem, 0 ")
    assert max(len(line) for line in report.summary_line(rs * 40, scale="quick").splitlines()) <= 80


def test_measured_items_and_text():
    r = result("A.a.one", "01_a")
    assert report.measured_items(r) == ["corr = 0.999999", "steps = 1000"]
    assert report.measured_items(result("x.y", "", measured=0.5)) == ["0.5"]
    assert report.measured_items(result("x.y", "", passed=False, error="ValueError: bad")) == ["error: ValueError: bad"]
    line = report.claims_text([r])
    assert line.startswith("pass       A.a.one") and "corr = 0.999999; steps = 1000" in line
    assert "1.25" not in line, "no timings in what nbval compares"


def test_payload_is_json_without_timings():
    payload = report.ledger_payload([result("A.a.one", "01_a")])
    rows = report.rows_from_payload(payload)
    assert "seconds" not in rows[0] and rows[0]["id"] == "A.a.one"
    assert report.rows_from_payload(repr(payload)) == rows, "read back from the repr a notebook stores"
    with pytest.raises(ValueError):
        report.rows_from_payload('{"no": "rows"}')
    assert report.status(rows[0]) == "pass"


def test_groups_in_book_order_with_titles(mini):
    rs = [result("A.sat.x", "sat"), result("A.b.two", "02_b"), result("A.a.one", "01_a"), result("z.none", "nowhere")]
    groups = html_tables.ledger_groups(report.rows_from_payload(report.ledger_payload(rs)), mini)
    assert [(g.title, g.anchor) for g in groups] == [
        ("1. First chapter", "ledger-01_a"),
        ("2. Second chapter", "ledger-02_b"),
        ("A. The trap", "ledger-sat"),
        ("Claims of no chapter", "ledger-other"),
    ]


class _Rows(HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows, self.links, self.heads = [], [], []
        self._th = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and a.get("id"):
            self.rows.append(a["id"])
        if tag == "a":
            self.links.append((self.rows[-1] if self.rows else None, a.get("class"), a.get("href")))
        self._th = tag == "th"

    def handle_data(self, data):
        if self._th:
            self.heads.append(data)
            self._th = False


def test_group_html_anchors_and_links_back(mini):
    rs = [
        result("A.a.one", "02_b"),
        result("A.b.two", "02_b", passed=False, kind="observation", known_miss="why"),
        result("A.c.none", "02_b", passed=False),
    ]
    places = pages.statement_places(mini)
    group = html_tables.ledger_groups(report.rows_from_payload(report.ledger_payload(rs)), mini)[0]
    html = html_tables.group_html(group, "book/appendix/claims", places)
    p = _Rows()
    p.feed(html)
    assert p.rows == ["claim-A.a.one", "claim-A.b.two", "claim-A.c.none"]
    assert p.heads == ["status", "paper scale", "claim", "what it checks", "measured / threshold"]
    assert ("claim-A.a.one", "claim-back", "../part1/02_b.html#stmt-A.a.one") in p.links, (
        "a claim stated in its own chapter links there, even if an earlier page also marks it"
    )
    assert ("claim-A.b.two", "claim-back", "../part1/02_b.html#stmt-A.b.two") in p.links
    assert ("claim-A.c.none", "claim-chapter", "../part1/02_b.html") in p.links, "unmarked: the chapter page"
    assert html.index("ledger-badge-pass") < html.index("<code"), "status is the first column"
    assert "known miss: why" in html and "ledger-badge-fail" in html
    assert "threshold: corr &gt;= 0.999" in html


def paper_runs(folder: Path) -> Path:
    """A results folder whose paper-scale file holds a finished chapter (01_a) and a stopped one (02_b)."""
    meta = {"date": "2026-01-02", "commit": "abc1234", "cores": 2}
    runs = {
        "quick": {"part1/01_a": {"status": "finished", "wall_s": 1.0, "cpu_s": 1.0, "claims": {}, "meta": meta}},
        "paper": {
            "part1/01_a": {
                "status": "finished",
                "wall_s": 30.0,
                "cpu_s": 50.0,
                "claims": {"A.a.one": "pass", "A.a.two": "FAIL", "A.a.miss": "known miss"},
                "meta": meta,
            },
            "part1/02_b": {
                "status": "timeout",
                "wall_s": 901.3,
                "cpu_s": None,
                "limit_s": 900.0,
                "meta": dict(meta, commit="def5678", date="2026-01-03"),
            },
        },
    }
    folder.mkdir(exist_ok=True)
    (folder / f"{scale_runs.FILE}.json").write_text(json.dumps(runs))
    return folder


def paper_cells(html: str) -> dict[str, str]:
    """Row id -> the text of its paper-scale cell (tags dropped)."""
    cells = re.findall(r'<tr id="([^"]+)"[^>]*>.*?<td class="ledger-paper">(.*?)</td>', html)
    # the verdict is the cell's first span; the mark of a difference, a second one
    return {
        rid: re.match(r"<span[^>]*>([^<]+)</span>", c)[1] + (" ≠" if "ledger-differs" in c else "") for rid, c in cells
    }


def test_each_row_shows_its_paper_scale_verdict_beside_its_status(mini, tmp_path):
    rs = [
        result("A.a.one", "01_a"),
        result("A.a.two", "01_a"),  # passes here, failed at paper scale: marked
        result("A.a.miss", "01_a", passed=False, kind="observation", known_miss="why"),  # the same at both
        result("A.a.new", "01_a"),  # a claim the paper run did not print (added since)
        result("A.b.two", "02_b"),  # its chapter was stopped at the limit
        result("A.sat.x", "sat"),  # its chapter was not run at paper scale
        result("z.none", "nowhere"),
    ]
    rows = report.rows_from_payload(report.ledger_payload(rs))
    groups = html_tables.ledger_groups(rows, mini, paper_runs(tmp_path / "results"))
    html = "".join(html_tables.group_html(g, "book/appendix/claims", {}) for g in groups)
    assert paper_cells(html) == {
        "claim-A.a.one": "pass",
        "claim-A.a.two": "FAIL ≠",
        "claim-A.a.miss": "known miss",
        "claim-A.a.new": "not measured (not printed)",
        "claim-A.b.two": "not measured (stopped at 900 s)",
        "claim-A.sat.x": "not measured (not in the paper-scale runs)",
        "claim-z.none": "not measured (no chapter)",
    }
    assert html.count("ledger-differs") == 1 and scale_runs.DIFFERS in html
    assert html.index('<td class="ledger-status">') < html.index('<td class="ledger-paper">') < html.index("<code")
    # each chapter's table says when and at which commit its paper run was made (they differ by chapter)
    assert [g.paper.line() for g in groups] == [
        "Paper scale: measured 2026-01-02 at commit abc1234",
        "Paper scale: not measured, stopped at its 900 s limit (2026-01-03 at commit def5678)",
        "Paper scale: not measured (not in the paper-scale runs)",
        "Paper scale: not measured (no chapter)",
    ]
    assert all(f'<p class="ledger-paper-run">{g.paper.line()}</p>' in html for g in groups)


def test_a_chapter_left_out_of_the_paper_runs_says_why():
    runs = {"paper": {"part1/08_random": {"status": "error", "wall_s": 3.0, "cpu_s": 3.0, "claims": {"a.b": "FAIL"}}}}
    gpu = scale_runs.chapter_run(runs, "book/part1/09_vit_sparsity")
    assert gpu.verdict("A.vit.learns") == "not measured (needs a GPU at paper scale)"
    failed = scale_runs.chapter_run(runs, "book/part1/08_random")
    assert (failed.verdict("a.b"), failed.verdict("c.d")) == ("FAIL", "not measured (the run failed)")
    assert failed.line() == "Paper scale: the run failed (date and commit not recorded)"
    assert failed.differs("a.b", "pass") and not failed.differs("a.b", "FAIL")
    assert not failed.differs("c.d", "pass"), "no verdict, nothing to compare"
    assert not failed.differs("a.b", "data missing"), "no status to compare with"
    assert scale_runs.chapter_run(None, "book/tour").verdict("x") == "not measured (not in the paper-scale runs)"
    assert html_tables.row_html(result("x.y", "tour").to_dict(), None, None).count("not measured") == 1


def test_claims_html_has_one_heading_per_group(mini):
    html = html_tables.claims_html([result("A.a.one", "01_a"), result("A.sat.x", "sat")], root=mini)
    assert re.findall(r"<h2 id=\"([^\"]+)\">([^<]+)</h2>", html) == [
        ("ledger-01_a", "1. First chapter"),
        ("ledger-sat", "A. The trap"),
    ]


def test_page_title_ignores_code(tmp_path):
    f = tmp_path / "p.md"
    f.write_text("````markdown\n# not this\n```{code-cell}\n# nor this\n```\n````\n\n# This one\n")
    assert pages.page_title(f) == "This one"


def test_benchmark_tables(tmp_path):
    (tmp_path / "figures.json").write_text(
        json.dumps(
            {
                "meta": {
                    "date": "2026-01-02",
                    "cpu": "Some CPU",
                    "cores": 2,
                    "torch": "2.0",
                    "threads": 2,
                    "steps": 1000,
                },
                "rows": [
                    {
                        "figure": "fig1",
                        "batched_compiled_s": 0.0018,
                        "batched_torch_s": 0.1726,
                        "per_start_public_s": 1.801,
                        "speedup": 1027.5,
                        "speedup_torch": 10.4,
                    }
                ],
            }
        )
    )
    (tmp_path / "random.json").write_text(
        json.dumps(
            {
                "scale": "quick",
                "d": 8,
                "steps": 300,
                "torch_threads": 2,
                "torch code": {
                    "batched_inst_per_s": 1299.8,
                    "loop_inst_per_s": 17.4,
                    "speedup": 74.6,
                    "max_abs_diff": 1.6e-14,
                    "sweep_instances": 1200,
                    "sweep_wall_s": 11.2,
                    "sweep_cpu_s": 21.9,
                },
            }
        )
    )
    (tmp_path / "book.json").write_text(
        json.dumps({"chapters": {"book/part1/02_global.ipynb": 6.0, "book/tour.ipynb": 7.2}, "total_s": 13.2})
    )
    tables = html_tables.benchmark_tables(tmp_path, ROOT)
    caption, frame = tables["figures"]
    assert caption.startswith("measured 2026-01-02 on Some CPU (2 cores)") and "1000 steps" in caption
    assert all("(" in c or c.startswith(("speed-up", "published")) for c in frame.columns), "units in headers"
    assert frame.iloc[0]["compiled kernel, batched (ms)"] == 1.8 and frame.iloc[0]["speed-up: kernel"] == "1028x"
    caption, frame = tables["random"]
    assert "machine not recorded" in caption and "d = 8" in caption
    assert list(frame.columns) == ["measure", "torch code"]
    assert frame.set_index("measure").loc["batched (instances/s)", "torch code"] == "1,300"
    caption, frame = tables["book"]
    assert list(frame["page"]) == [
        "A quick tour: one figure, end to end",
        "2. Global convergence to the max-margin token",
        "whole book",
    ]
    html = html_tables.table_html(caption, frame)
    assert "{" not in html and "bench-meta" in html, "no raw JSON on the page"


def test_paper_scale_table(tmp_path):
    meta = {"date": "2026-01-02", "cpu": "Some CPU", "cores": 2, "commit": "abc1234"}
    runs = {
        "quick": {"tour": {"status": "finished", "wall_s": 9.0, "cpu_s": 14.6, "meta": meta}},
        "paper": {
            "tour": {"status": "finished", "wall_s": 33.2, "cpu_s": 50.4, "claims": {"a.b": "pass"}, "meta": meta},
            "part1/08_random": {"status": "timeout", "wall_s": 601.7, "cpu_s": None, "limit_s": 600, "meta": meta},
            "part1/04_inputs": {
                "status": "error",
                "wall_s": 8.0,
                "cpu_s": 9.0,
                "claims": {"c.d": "FAIL", "e.f": "known miss", "g.h": "pass"},
                "meta": meta,
            },
        },
    }
    (tmp_path / "paper_scale.json").write_text(json.dumps(runs))
    caption, frame = html_tables.benchmark_tables(tmp_path, ROOT)["paper_scale"]
    assert caption.startswith("measured 2026-01-02 on Some CPU (2 cores)") and "commit abc1234" in caption
    rows = frame.set_index("chapter")
    assert list(rows.index) == [  # book order, under the titles the reader sees
        "A quick tour: one figure, end to end",
        "4. Many inputs, sparsity and the step size",
        "8. Random instances",
    ]
    tour = rows.iloc[0]
    assert (tour["quick: CPU (s)"], tour["paper: wall (s)"], tour["paper: claims"]) == ("15", "33", "1 pass")
    stopped = frame[frame["chapter"].str.startswith("8")].iloc[0]
    assert stopped["paper: wall (s)"] == "> 602 (stopped)", "a stopped run's wall is a lower bound"
    assert stopped["paper: CPU (s)"] == "not measured (stopped)", "its CPU was not measured"
    assert stopped["quick: CPU (s)"] == "not measured" and stopped["paper: claims"] == "not reached"
    failed = frame[frame["chapter"].str.startswith("4")].iloc[0]
    assert failed["paper: wall (s)"] == "failed"
    assert failed["paper: claims"] == "1 pass, 1 known miss; c.d: FAIL", "a verdict other than pass is named"
    runs["paper"]["tour"]["meta"] = dict(meta, date="2026-01-05", commit="def5678")  # a run on a later day
    (tmp_path / "paper_scale.json").write_text(json.dumps(runs))
    caption, _ = html_tables.benchmark_tables(tmp_path, ROOT)["paper_scale"]
    assert caption.startswith("measured 2026-01-02 to 2026-01-05 on Some CPU") and "abc1234, def5678" in caption


def test_real_benchmark_results_are_dated():
    tables = html_tables.benchmark_tables(ROOT / "benchmarks" / "results", ROOT)
    assert set(tables) == {"figures", "random", "book", "whole_process", "paper_scale"}
    for name, (caption, _frame) in tables.items():
        assert caption.startswith("measured 20"), f"{name}: {caption}"


def test_measured_values_print_to_the_digits_that_hold_on_any_machine():
    r = result(
        "x.y", "", measured={"gap": 3.2e-16, "zero": 0.0, "neg": -6.4e-17, "tol": 2.80102e-08, "corr": 0.9999971}
    )
    assert report.measured_items(r) == [
        "gap = < 1e-10",
        "zero = < 1e-10",
        "neg = < 1e-10",
        "tol = 2.8e-08",
        "corr = 0.999997",
    ]
    other = result(
        "x.y", "", measured={"gap": 7.4e-16, "zero": 1.2e-16, "neg": 0.0, "tol": 2.80407e-08, "corr": 0.9999968}
    )
    assert report.measured_items(other) == report.measured_items(r)  # another machine's low digits
    assert report.measured_items(result("x.y", "", measured=[1, True, None, float("inf")])) == ["[1, True, None, inf]"]
    # the page reads the payload: it holds the same portable form, so the notebook and the page agree
    row = report.rows_from_payload(report.ledger_payload([r]))[0]
    assert row["measured"] == {"gap": "< 1e-10", "zero": "< 1e-10", "neg": "< 1e-10", "tol": 2.8e-08, "corr": 0.999997}
    assert report.measured_items(row) == report.measured_items(r)


def test_above_prints_a_bound_below_the_floor():
    assert report.above(2.9e-14, 1e-12) == report.above(0.0, 1e-12) == "< 1e-12"
    assert report.above(2.1e-05, 1e-12) == "2.1e-05"
    assert report.above(0.25, 1e-12, ".3f") == "0.250"
    with pytest.raises(ValueError, match="floor"):
        report.above(1.0, 0.0)


def test_bound_prints_its_bound_plainly():
    assert report.bound("max corr", 0.65, 0.9) == "max corr < 0.9: True"
    assert report.bound("gap", 2e-15, 1e-9) == "gap < 1e-09: True"


def test_bound_states_the_residual_not_its_digits():
    assert report.bound("||KQ^T - W||", 5.6e-16, 1e-12) == "||KQ^T - W|| < 1e-12: True"
    assert report.bound("r", 7.8e-16, 1e-12) == report.bound("r", 5.6e-16, 1e-12)  # machine-independent
    assert report.bound("r", 2e-12, 1e-12).endswith("False")
    assert report.bound("r", float("nan"), 1e-12).endswith("False")


def test_on_grid_rounds_to_multiples_of_the_step():
    assert report.on_grid(0.8497, 0.01) == report.on_grid(0.8509, 0.01) == "0.85"
    assert report.on_grid(0.8509, 0.005) == "0.850"
    assert report.on_grid(0.37, 0.25) == "0.25"
    assert report.on_grid(1234.0, 100) == "1200"
    with pytest.raises(ValueError, match="step"):
        report.on_grid(1.0, 0)


def test_claim_text_numbers_are_written_as_the_claims_write_them():
    assert (report.sci(1e-6), report.sci(2e-3)) == ("1e-6", "2e-3")  # Python's own: 1e-06, 0.002
    assert (report.power_of_ten(10**6), report.power_of_ten(20_000)) == ("10^6", "2 * 10^4")
    assert report.spaced(20_000) == "20 000"
    assert report.numbers([-1, 0, 0.9]) == "(-1, 0, 0.9)"
    assert report.numbers([0, -1], ",") == "(0,-1)"
    assert report.numbers([0.5, 0.05], brackets="{}") == "{0.5, 0.05}"
    assert report.numbers([0.05, 0.1], brackets="") == "0.05, 0.1"
    for bad in (0, 25, 110):
        with pytest.raises(ValueError, match="power of ten"):
            report.power_of_ten(bad)
    with pytest.raises(ValueError, match="brackets"):
        report.numbers([1], brackets="(")


def test_on_grid_prints_a_diverged_value_as_it_is():
    assert report.on_grid(float("nan"), 0.5) == "nan" and report.on_grid(float("-inf"), 0.01) == "-inf"
    assert report.on_grid(16.3, 0.5) == "16.5"
