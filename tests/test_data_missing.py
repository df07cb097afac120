"""Missing data is *data missing*, never a failure, whatever raised it; and the claims
appendix reads records, computing nothing (issue 27.1, issue 30.2)."""

import pytest

from mmtoken import config
from mmtoken.book import html_tables, ledger, records, report, resultcache
from mmtoken.datasets import DatasetMissing

HERE = "mmtoken.chapters.ch00_tour"  # a package module: claims "defined" there are recorded


@pytest.fixture
def data(tmp_path, monkeypatch):
    """An empty data folder, in which the test's claims are recorded as the book's own runs record the book's
    (what is recorded, not who may record, is tested here: tests/test_records.py tests that)."""
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    monkeypatch.setenv(config.RECORD_ENV, "1")
    monkeypatch.setattr(records, "recordable", lambda func: True)
    return tmp_path / "data"


@pytest.fixture
def register():
    made = []

    def make(cid, func, **kw):
        func.__module__, func.__qualname__ = HERE, f"_test_{cid.replace('.', '_')}"
        kw = {"statement": "s", "checks": "c", "threshold": "t", "chapter": "tour", **kw}
        ledger.claim(cid, **kw)(func)
        made.append(cid)
        return ledger.REGISTRY[cid]

    yield make
    for cid in made:
        del ledger.REGISTRY[cid]


def offline():
    raise DatasetMissing("IMDB: not cached and the download failed (offline)")


def test_a_loader_raising_dataset_missing_makes_the_claim_data_missing(data, register):
    def claim():
        offline()

    c = register("test.offline", claim, kind="observation", known_miss="evidence of a run that never happened")
    with config.use_scale("quick"):
        r = ledger.run_one(c)
        assert r.status == "data missing" and "offline" in r.missing and ledger.acceptable(r)
        assert r.known_miss is None and r.error is None  # no evidence attached to a run that did not happen
        assert ledger.recorded_result(c) is None and not (data / "results").exists()  # nothing recorded


def test_dataset_missing_as_the_cause_of_another_error_is_data_missing(data, register):
    def claim():
        try:
            offline()
        except DatasetMissing as exc:
            raise RuntimeError("could not build the corpus") from exc

    def context():
        try:
            offline()
        except DatasetMissing:
            raise ValueError("while handling it")  # noqa: B904 (the implicit chain is what is tested)

    for cid, f in (("test.cause", claim), ("test.context", context)):
        c = register(cid, f)
        with config.use_scale("quick"):
            assert ledger.run_one(c).status == "data missing"
            assert ledger.recorded_result(c) is None


def test_a_crash_for_another_reason_is_still_a_failure(data, register):
    def claim():
        raise FileNotFoundError("a file the code itself should have written")  # not DatasetMissing

    c = register("test.crash_fnf", claim)
    with config.use_scale("quick"):
        r = ledger.run_one(c)
        assert r.status == "FAIL" and "FileNotFoundError" in r.error and not ledger.acceptable(r)
        assert ledger.recorded_result(c) == r  # a real failure is recorded


def test_a_recorded_data_failure_is_never_final(data, register):
    """Older code recorded DatasetMissing as FAIL; with the data back, the claim is evaluated."""
    calls = []

    def claim():
        calls.append(1)
        return ledger.Measured(0.9, True)

    c = register("test.back", claim, kind="observation")
    with config.use_scale("quick"):
        path, name, fp = ledger.record_key(c)
        stale = ledger.evaluate(c)
        stale.passed, stale.measured = False, None
        stale.error = "mmtoken.datasets.download.DatasetMissing: IMDB: not cached (offline)"
        resultcache.save(path, name, fp, {}, {"result": stale.to_dict()})
        assert ledger.recorded_result(c) is None
        (r,) = ledger.recorded(["test.back"])
        assert r.status == "pass" and len(calls) == 2 and ledger.recorded_result(c) == r


def test_the_appendix_reads_records_and_computes_nothing(data, register):
    def never():
        raise AssertionError("the appendix must not compute")

    c = register("test.pending", never)
    with config.use_scale("quick"):
        (r,) = ledger.recorded(["test.pending"], compute_missing=False, pending=True)
        assert r.status == "not yet computed" and "python -m mmtoken claims --only test.pending" in r.pending
        assert ledger.recorded(["test.pending"], compute_missing=False) == []
        assert ledger.recorded_result(c) is None
        ledger.record(c, r)  # a pending row is never recorded
        assert ledger.recorded_result(c) is None
    assert "1 not yet computed: `python -m mmtoken claims` computes them." in report.summary_line([r])
    assert "0 failed" in report.summary_line([r])
    assert report.measured_items(r) == [r.pending]
    assert '"pending"' in report.ledger_payload([r]) and "ledger-miss" in html_tables.row_html(r.to_dict(), None, None)


def test_the_payload_of_computed_results_is_unchanged_by_pending(data, register):
    """A computed row carries no pending key: the stored appendix compares equal."""

    def ok():
        return ledger.Measured(1.0, True)

    c = register("test.done", ok)
    with config.use_scale("quick"):
        ledger.run_one(c)
        (r,) = ledger.recorded(["test.done"], compute_missing=False, pending=True)
    assert r.status == "pass" and '"pending"' not in report.ledger_payload([r])
