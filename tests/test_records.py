"""The ledger's records (mmtoken.book.records) come only from the book's own runs of its unmodified code.

Issue 42, item 1: a reader who changes a chapter module's constant, or rebinds a name in a notebook cell of their
own (a constant, a function, ``Settings``, a ``functools.partial``, an import), sees their claims evaluated and
marked "not recorded", and nothing reaches the ledger; ``python -m mmtoken claims`` afterwards reads the book's
verdict, the same as ``--recompute``. The switch is explicit (``MMTOKEN_RECORD=1``, set by ``make`` and by the
command line), never inferred, and an unmodified notebook under it still records (a clean ``make nbval``).
"""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmtoken import chapters, config
from mmtoken.book import competitors, fingerprint, ledger, records, report

ROOT = Path(__file__).resolve().parent.parent
TOUR = "mmtoken.chapters.ch00_tour"
CID = "core.grad_autograd"  # the tour's cheapest claim; its threshold is the module constant GRAD_REL_TOL


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("MMTOKEN_RECORD", raising=False)
    return tmp_path / "data"


def load_all():
    """The chapters whose claims these tests use (importing registers their claims)."""
    import importlib

    for module in (TOUR, "mmtoken.chapters.ch04_inputs"):
        importlib.import_module(module)


def _records(data: Path) -> list[str]:
    return sorted(p.name.split("-")[0] for p in (data / "results").rglob("*.npz"))


def test_nothing_is_recorded_outside_the_books_runs(data, monkeypatch):
    load_all()
    c = ledger.REGISTRY[CID]
    with config.use_scale("quick"):
        assert ledger.run_one(c).passed and _records(data) == []  # evaluated, not recorded
        assert ledger.recorded([CID])[0].passed and _records(data) == []
        monkeypatch.setenv("MMTOKEN_RECORD", "1")
        r = ledger.run_one(c)
        assert _records(data) == [CID] and ledger.recorded_result(c) == r
        assert ledger.recorded([CID], compute_missing=False) == [r]
    with config.use_scale("paper"):  # another scale: another record
        assert ledger.recorded_result(c) is None
    path, name, _ = ledger.record_key(c, "quick")
    assert Path(path).is_file() and name == f"claims/quick/{CID}"


def test_the_switch_takes_one_and_nothing_else(monkeypatch):
    for value, on in (("1", True), ("", False), ("0", False)):
        monkeypatch.setenv("MMTOKEN_RECORD", value)
        assert config.recording() is on
    monkeypatch.setenv("MMTOKEN_RECORD", "yes")
    with pytest.raises(config.ConfigError, match="MMTOKEN_RECORD"):
        config.recording()
    monkeypatch.delenv("MMTOKEN_RECORD")
    with config.recording_run():
        assert config.recording() and os.environ["MMTOKEN_RECORD"] == "1"
    assert not config.recording() and "MMTOKEN_RECORD" not in os.environ


def test_a_damaged_or_foreign_record_counts_as_missing(data, monkeypatch):
    from mmtoken.book import resultcache

    monkeypatch.setenv("MMTOKEN_RECORD", "1")
    load_all()
    c = ledger.REGISTRY[CID]
    with config.use_scale("quick"):
        r = ledger.run_one(c)
        path, name, fp = ledger.record_key(c)
        Path(path).write_bytes(Path(path).read_bytes()[:40])  # truncated
        assert ledger.recorded_result(c) is None
        resultcache.save(path, name, "0" * 64, {}, {"result": r.to_dict()})  # other code
        assert ledger.recorded_result(c) is None
        resultcache.save(path, "claims/quick/core.att_svm_kkt", fp, {}, {"result": r.to_dict()})  # other claim
        assert ledger.recorded_result(c) is None
        again = ledger.recorded([CID])[0]  # evaluated and recorded again
        assert again.passed and ledger.recorded_result(c) == again


def test_claims_defined_outside_the_package_are_not_recorded(data, monkeypatch):
    monkeypatch.setenv("MMTOKEN_RECORD", "1")

    @ledger.claim("test.outside", statement="s", checks="c", threshold="t", chapter="tour")
    def _outside():
        return ledger.Measured(1.0, True)

    try:
        ledger.run_claims(["test.outside"])
        assert not (data / "results").exists()
    finally:
        del ledger.REGISTRY["test.outside"]


# --------------------------------------------------------------------------- a reader's session, end to end
def _python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)


def test_a_readers_tweak_records_nothing_and_the_command_line_reads_the_books_verdict(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MMTOKEN_RECORD"}
    env |= {"MMTOKEN_DATA": str(tmp_path / "data"), "MPLBACKEND": "Agg"}
    tweak = (
        "from mmtoken.chapters import ch00_tour as ch\nfrom mmtoken.book import report\n"
        "ch.GRAD_REL_TOL = 0.0\n"
        f"print(report.chapter_claims([{CID!r}]))\n"
    )
    for switch in ({}, {"MMTOKEN_RECORD": "1"}):  # a reader's session; even one that sets the switch
        out = _python(tweak, env | switch)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.startswith("FAIL") and report.NOT_RECORDED in out.stdout, out.stdout
        assert not (tmp_path / "data" / "results").exists(), "a reader's tweak reached the ledger"
    cli = [sys.executable, "-m", "mmtoken", "claims", "--only", CID, "--json"]
    read = subprocess.run(cli, env=env, cwd=ROOT, capture_output=True, text=True)
    assert read.returncode == 0, read.stderr[-2000:]
    again = subprocess.run(cli + ["--recompute"], env=env, cwd=ROOT, capture_output=True, text=True)
    first, second = json.loads(read.stdout)[0], json.loads(again.stdout)[0]
    assert first["passed"] and (first["passed"], first["measured"]) == (second["passed"], second["measured"])
    assert _records(tmp_path / "data") == [CID]  # the command line is one of the book's own runs


# --------------------------------------------------------------------------- a notebook's own cells
def _notebook(module: str, extra: str = "") -> dict:
    """A namespace as a kernel leaves it after running the chapter's exported cells, each compiled on its own as
    IPython compiles a cell, then ``extra`` as a cell of the reader's own."""
    ns: dict = {"__name__": "__main__"}
    registry = dict(ledger.REGISTRY)
    try:
        for k, text in enumerate(chapters.exported_cells(module) + ([extra] if extra else [])):
            exec(compile(text, f"<cell {k}>", "exec", dont_inherit=True), ns)
    finally:  # the cells' @claim lines registered the namespace's claims over the module's: undo that
        ledger.REGISTRY.clear()
        ledger.REGISTRY.update(registry)
    return ns


REBINDINGS = {  # what a reader's cell rebinds -> (the cell, the claim function whose closure reaches it)
    "a constant": ("GRAD_REL_TOL = 0.0", "_claim_grad"),
    "a function": ("def _claim_grad():\n    return ledger.Measured({}, True)", "_claim_grad"),
    "a helper the claim calls": ("def grad_check(*a, **k):\n    return {'logistic': 0.0}", "_claim_grad"),
    "Settings": ("Settings = type('Settings', (), {})", "_claim_stable"),
    "a functools.partial": ("import functools\ngrad_check = functools.partial(grad_check, batch=2)", "_claim_grad"),
    "an import": ("import types\ngrad = types.SimpleNamespace()", "_claim_grad"),
}


def test_an_unmodified_notebook_is_its_module():
    import importlib

    ns = _notebook(TOUR)
    module = importlib.import_module(TOUR)
    assert fingerprint.roots_of(ns["_claim_grad"]) == [(TOUR, "_claim_grad")]
    assert fingerprint.changes(ns["_claim_grad"]) is None and fingerprint.is_book_code(ns["_claim_grad"])
    assert fingerprint.of(ns["run"]) == fingerprint.of(module.run)


@pytest.mark.parametrize("what", sorted(REBINDINGS))
def test_a_cell_of_the_readers_own_makes_the_notebook_the_readers(what, monkeypatch):
    monkeypatch.setenv("MMTOKEN_RECORD", "1")
    cell, name = REBINDINGS[what]
    assert records.recordable(_notebook(TOUR)[name])  # the unmodified notebook, in a book's run: recorded
    claim_fn = _notebook(TOUR, cell)[name]
    assert not records.recordable(claim_fn), f"{what} rebound in a cell, and the claim still counts as the book's"
    assert fingerprint.changes(claim_fn) is not None


def test_a_readers_session_evaluates_and_marks_its_claims(data, monkeypatch):
    load_all()
    monkeypatch.setenv("MMTOKEN_RECORD", "1")
    c = ledger.REGISTRY[CID]
    ns = _notebook(TOUR, REBINDINGS["a constant"][0])
    monkeypatch.setitem(ledger.REGISTRY, CID, dataclasses.replace(c, func=ns["_claim_grad"]))
    with config.use_scale("quick"):
        text = report.chapter_claims([CID])
    assert text.startswith("FAIL") and text.endswith(report.NOT_RECORDED)
    assert _records(data) == []
    monkeypatch.setitem(ledger.REGISTRY, CID, c)  # the book's own claim, in the book's own run
    with config.use_scale("quick"):
        assert report.chapter_claims([CID]).endswith(report.RECORDED)
    assert _records(data) == [CID]


def test_competitor_verdicts_follow_the_same_rule(data, monkeypatch):
    load_all()
    cid = "A.inputs.published_draw"  # a cheap Part I claim with a competitor check
    c = ledger.REGISTRY[cid]
    with config.use_scale("quick"):
        v = competitors.recorded(c)
        assert v.rejected and _records(data) == []  # evaluated, not recorded
        monkeypatch.setenv("MMTOKEN_RECORD", "1")
        assert competitors.recorded(c) == v and _records(data) == [cid]
        assert competitors.read_record(c) == v


@pytest.mark.slow
def test_a_clean_nbval_still_records(tmp_path):
    notebook = ROOT / "book" / "part2" / "10_one_step.ipynb"
    env = {k: v for k, v in os.environ.items() if k != "MMTOKEN_RECORD"}
    env |= {"MMTOKEN_DATA": str(tmp_path / "data"), "MMTOKEN_RECORD": "1", "MMTOKEN_PROGRESS": "off"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval", str(notebook)]
    cmd += ["--nbval-sanitize-with", str(ROOT / "tests" / "nbval_sanitize.cfg")]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:]
    load_all()
    ours = [c.id for c in ledger.REGISTRY.values() if c.chapter == "10_one_step"]
    assert ours and set(ours) <= set(_records(tmp_path / "data"))
