"""The recorded competitor verdicts (mmtoken.book.competitors): recorded beside the claims, read back only for
today's code and scale, never for a test's own check; a crashing check rejects nothing."""

from pathlib import Path

import pytest

from mmtoken import config
from mmtoken.book import competitors, ledger, records, report, resultcache
from mmtoken.chapters import load_all

CID = "A.inputs.published_draw"  # a cheap Part I claim with a competitor check


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("MMTOKEN_RECORD", "1")  # as the book's own runs do (tests/test_records.py: only they record)
    return tmp_path / "data"


def test_a_verdict_is_recorded_and_read_back_for_its_scale(data):
    load_all()
    c = ledger.REGISTRY[CID]
    with config.use_scale("quick"):
        assert competitors.read_record(c) is None
        assert competitors.recorded(c, compute_missing=False) is None
        v = competitors.recorded(c)  # evaluated and recorded
        assert v.rejected and v.id == CID and v.competitor == c.competitor
        assert competitors.read_record(c) == v
    with config.use_scale("paper"):  # another scale: another record
        assert competitors.read_record(c) is None
    path, name, fp = records.record_key(c, competitors.VERDICT, "quick")
    assert Path(path).is_file() and name == f"competitors/quick/{CID}"
    resultcache.save(path, name, "0" * 64, {}, {"verdict": v.__dict__})  # other code: not read
    with config.use_scale("quick"):
        assert competitors.read_record(c) is None


def test_chapter_claims_records_the_claims_and_their_competitors(data):
    load_all()
    with config.use_scale("quick"):
        report.chapter_claims(["A.inputs"])
        for c in ledger.select(["A.inputs"]):
            assert ledger.recorded_result(c) is not None, c.id
            if c.against is not None:
                assert competitors.read_record(c).rejected, c.id


def _register(cid, against):
    ledger.claim(cid, statement="s", checks="c", threshold="t", chapter="tour", competitor="w", against=against)(
        lambda: ledger.Measured(1.0, True)
    )
    return ledger.REGISTRY[cid]


def test_a_crash_rejects_nothing_and_outside_checks_are_not_recorded(data):
    def crash():
        raise RuntimeError("boom")

    try:
        v = competitors.recorded(_register("test.crash", crash))
        assert not v.passed and "boom" in v.error and not v.rejected
        w = competitors.recorded(_register("test.fails", lambda: ledger.Measured(0.5, False)))
        assert w.rejected and w.measured == 0.5
        assert not (data / "results").exists()  # a test's checks: evaluated, never recorded
    finally:
        for cid in ("test.crash", "test.fails"):
            ledger.REGISTRY.pop(cid, None)


def test_a_claim_without_a_competitor_check_is_named():
    c = ledger.Claim("test.none", "s", "c", "theorem", "t", "tour", lambda: ledger.Measured(1, True))
    with pytest.raises(ValueError, match="test.none"):
        competitors.evaluate(c)
    with pytest.raises(ValueError, match="test.none"):
        records.record_key(c, competitors.VERDICT)
