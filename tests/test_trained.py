"""The trained runs that travel with the repository (mmtoken.book.trained, book/trained/): carried as the store's own
files, read while their code is today's, and a test that fails, saying what to run, once it is not (issue 42)."""

import json
from pathlib import Path

import numpy as np
import pytest

from mmtoken import config
from mmtoken.book import resultcache, trained

ROOT = Path(__file__).resolve().parent.parent


def test_the_carried_runs_are_todays_and_small_enough():
    """Fails when a change to chapter 9's or 12's training code (or what the chapters compute from the runs) was not
    followed by `make trained`: CI then trains them again, and this says how to carry the new ones."""
    target = ROOT / "book" / "trained"
    assert (target / trained.MANIFEST).is_file(), "book/trained has no manifest: run `make trained`"
    problems = trained.check(target)
    assert not problems, "\n".join(problems)
    manifest = json.loads((target / trained.MANIFEST).read_text())
    owners = {e["file"].split("/")[0] for e in manifest["files"]}
    assert owners == set(trained.owners()), f"carried owners {sorted(owners)}, expected {trained.owners()}"
    assert manifest["bytes"] <= trained.MAX_BYTES
    assert not any("checkpoints" in e["file"] for e in manifest["files"])


def _compute():
    return {"a": np.arange(4.0)}, {"n": 4}


def _result(monkeypatch, root: Path, owner: str, name: str) -> None:
    """A result of ``_compute`` stored under ``root`` (a data folder), as the store leaves it."""
    monkeypatch.setenv("MMTOKEN_DATA", str(root))
    resultcache.cached(owner, name, _compute, config={"name": name})


def test_carry_then_check_and_each_way_the_check_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_TRAINED", "none")
    _result(monkeypatch, tmp_path / "data", "vit", "run1")
    _result(monkeypatch, tmp_path / "data", "real_reviews", "imdb/seed10")
    (tmp_path / "data" / "results" / "vit" / "run1-checkpoints-0.npz").write_bytes(b"not carried")
    target = tmp_path / "trained"
    manifest = trained.carry(tmp_path / "data" / "results", target, ("vit", "real_reviews"))
    assert sorted(e["name"] for e in manifest["files"]) == ["real_reviews/imdb/seed10", "vit/run1"]
    assert trained.check(target) == []
    e = manifest["files"][0]
    assert e["roots"] == [["test_trained", "_compute"]] and e["bytes"] > 0 and "cores" in e["machine"]

    # the store reads a carried run without computing it or writing the data folder
    monkeypatch.setenv("MMTOKEN_TRAINED", str(target))
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "empty"))
    arrays, meta = resultcache.cached(
        "vit", "run1", lambda: pytest.fail("computed"), config={"name": "run1"}, code=[_compute]
    )
    assert meta == {"n": 4} and not (tmp_path / "empty").exists()

    stale = json.loads((target / trained.MANIFEST).read_text())
    stale["files"][0]["code"] = "0" * 64  # trained by code that has changed since
    (target / trained.MANIFEST).write_text(json.dumps(stale))
    (problem,) = trained.check(target)
    assert "has changed since" in problem and "make trained" in problem
    trained.carry(tmp_path / "data" / "results", target, ("vit", "real_reviews"))
    (target / "vit" / "extra.npz").write_bytes(b"x")
    assert any("not in the manifest" in p for p in trained.check(target))
    (target / "vit" / "extra.npz").unlink()
    next((target / "real_reviews").rglob("*.npz")).write_bytes(b"altered")
    assert any("not the file the manifest lists" in p for p in trained.check(target))
    (target / trained.MANIFEST).unlink()
    assert "cannot be read" in trained.check(target)[0]


def test_carrying_too_much_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_TRAINED", "none")
    _result(monkeypatch, tmp_path / "data", "vit", "run1")
    monkeypatch.setattr(trained, "MAX_BYTES", 10)
    with pytest.raises(ValueError, match="more than 10"):
        trained.carry(tmp_path / "data" / "results", tmp_path / "trained", ("vit",))
    assert not (tmp_path / "trained").exists()


def test_the_trained_runs_are_found_in_a_checkout_and_can_be_switched_off(monkeypatch):
    monkeypatch.delenv("MMTOKEN_TRAINED", raising=False)
    assert config.trained_dir() == ROOT / "book" / "trained"
    monkeypatch.setenv("MMTOKEN_TRAINED", "none")
    assert config.trained_dir() is None


def test_the_claims_appendix_says_when_the_book_was_last_reproduced(tmp_path, monkeypatch):
    from mmtoken.book import html_tables

    monkeypatch.setattr(html_tables, "benchmark_results", lambda: tmp_path)
    assert "has not passed yet" in trained.last_reproduced()
    record = {
        "date": "2026-12-07",
        "commit": "abc1234",
        "machine": "a CPU, 2 cores",
        "seconds": 3000,
        "notebooks": 22,
        "carried_runs": 30,
    }
    (tmp_path / trained.REPRODUCED).write_text(json.dumps(record))
    text = trained.last_reproduced()
    assert "2026-12-07" in text and "abc1234" in text and "50 minutes" in text
    assert max(len(line) for line in text.splitlines()) <= 72
