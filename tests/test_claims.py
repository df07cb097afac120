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
