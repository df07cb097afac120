"""The results cache shared by the package: locks, recorded claim results,
no folders created by importing or by asking for a path, and every kind of damage to a stored result.
"""

import errno
import io
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from mmtoken import config
from mmtoken.book import ledger, resultcache
from mmtoken.chapters import load_all

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


# --------------------------------------------------------------------------- one computation per result


def _slow_compute(path, counter):
    def compute():
        with open(counter, "a") as fh:
            fh.write("computed\n")
        time.sleep(1.0)
        return {"a": np.arange(3.0)}, {"by": os.getpid()}

    arrays, meta = resultcache.load_or_compute(path, "test/slow", "fp", compute)
    return float(arrays["a"].sum())


def test_two_processes_asking_for_one_missing_result_compute_it_once(tmp_path):
    path, counter = tmp_path / "r" / "slow.npz", tmp_path / "count.txt"
    ctx = mp.get_context("spawn")
    with ctx.Pool(2) as pool:
        sums = pool.starmap(_slow_compute, [(path, counter), (path, counter)])
    assert sums == [3.0, 3.0]
    assert counter.read_text().count("computed") == 1


def test_lock_files_live_apart_from_results(tmp_path):
    with resultcache.locked(tmp_path / "x.npz"):
        pass
    assert (tmp_path / ".locks" / "x.npz.lock").exists() and not (tmp_path / "x.npz").exists()


# --------------------------------------------------------------------------- recorded claim results


def test_a_claim_is_recorded_and_read_back(data):
    load_all()
    c = ledger.REGISTRY["core.grad_autograd"]
    with config.use_scale("quick"):
        assert ledger.read_record(c) is None
        assert ledger.recorded(["core.grad_autograd"], compute_missing=False) == []
        r = ledger.run_one(c)
        back = ledger.read_record(c)
        assert back == r and back.passed
        assert ledger.recorded(["core.grad_autograd"], compute_missing=False) == [r]
    with config.use_scale("paper"):  # another scale: another record
        assert ledger.read_record(c) is None
    path, name, fp = ledger.record_key(c, "quick")
    assert Path(path).is_file() and name == "claims/quick/core.grad_autograd"


def test_a_damaged_or_foreign_record_counts_as_missing(data):
    load_all()
    c = ledger.REGISTRY["core.grad_autograd"]
    with config.use_scale("quick"):
        r = ledger.run_one(c)
        path, name, fp = ledger.record_key(c)
        Path(path).write_bytes(Path(path).read_bytes()[:40])  # truncated
        assert ledger.read_record(c) is None
        resultcache.save(path, name, "0" * 64, {}, {"result": r.to_dict()})  # other code
        assert ledger.read_record(c) is None
        resultcache.save(path, "claims/quick/core.att_svm_kkt", fp, {}, {"result": r.to_dict()})  # other claim
        assert ledger.read_record(c) is None
        again = ledger.recorded(["core.grad_autograd"])[0]  # recomputed and recorded again
        assert again.passed and ledger.read_record(c) == again


def test_claims_defined_outside_the_package_are_not_recorded(data):
    @ledger.claim("test.outside", statement="s", checks="c", threshold="t", chapter="tour")
    def _outside():
        return ledger.Measured(1.0, True)

    try:
        ledger.run_claims(["test.outside"])
        assert not (data / "results").exists()
    finally:
        del ledger.REGISTRY["test.outside"]


def test_data_missing_claims_are_never_recorded(data):
    @ledger.claim(
        "test.absent",
        statement="s",
        checks="c",
        threshold="t",
        chapter="tour",
        kind="observation",
        requires=lambda: "get it with `make data`",
    )
    def _absent():
        raise AssertionError("must not run without its data")

    try:
        (r,) = ledger.recorded(["test.absent"])
        assert r.status == "data missing" and r.missing.startswith("get it") and ledger.acceptable(r)
        assert "data missing" in ledger.format_table([r])
    finally:
        del ledger.REGISTRY["test.absent"]


def test_cli_reads_records_and_recomputes_on_request(data, capsys):
    from mmtoken.__main__ import main

    assert main(["claims", "--only", "core.grad_autograd", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)[0]
    load_all()
    path = ledger.record_key(ledger.REGISTRY["core.grad_autograd"], "quick")[0]
    stamp = os.stat(path).st_mtime_ns
    assert main(["claims", "--only", "core.grad_autograd", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0] == first and os.stat(path).st_mtime_ns == stamp  # read
    time.sleep(0.01)
    assert main(["claims", "--only", "core.grad_autograd", "--recompute"]) == 0
    assert os.stat(path).st_mtime_ns != stamp  # rewritten


# --------------------------------------------------------------------------- no side effects on import


def test_importing_every_module_creates_no_folder(tmp_path):
    where = tmp_path / "nothing-here"
    code = (
        "import pkgutil, importlib, mmtoken\n"
        "for m in pkgutil.walk_packages(mmtoken.__path__, 'mmtoken.'):\n"
        "    if m.name != 'mmtoken.__main__':\n"
        "        importlib.import_module(m.name)\n"
        "from mmtoken import config\nfrom mmtoken.book import ledger\n"
        "from mmtoken.datasets.download import cache_dir\n"
        "config.data_dir(); cache_dir('vit'); ledger.records_dir('quick')\n"
        "from mmtoken.chapters import ch12_real_reviews  # noqa: F401\n"
        "assert 'B.yelp.accuracy' in ledger.REGISTRY\n"
    )
    env = dict(os.environ, MMTOKEN_DATA=str(where), MPLBACKEND="Agg")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert not where.exists()


def test_a_read_only_data_folder_still_gives_results(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    monkeypatch.setenv("MMTOKEN_DATA", str(ro))

    def refuse(*a, **k):  # root ignores permission bits: refuse as the OS would
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(resultcache, "locked", refuse)
    with pytest.warns(RuntimeWarning, match="results cache not used"):
        arrays, _ = resultcache.experiment_result(
            "mmtoken.chapters.ch02_global", "t", {}, lambda: ({"a": np.ones(2)}, {})
        )
    assert arrays["a"].sum() == 2.0
    load_all()
    monkeypatch.setattr(resultcache, "save", refuse)
    with config.use_scale("quick"), pytest.warns(RuntimeWarning, match="not recorded"):
        (r,) = ledger.recorded(["core.grad_autograd"])
    assert r.passed


# ----------------------------------------------------------------------------- results that are folders


def _folder_result(root, fp, name="demo", version=1):
    tmp = root / "work.tmp-1"
    tmp.mkdir(parents=True)
    (tmp / "a.npz").write_bytes(b"abc" * 100)
    (tmp / "history.json").write_text('{"x": 1}')
    manifest = resultcache.write_manifest(tmp, name, version, fp)
    target = root / manifest["key"]
    resultcache.commit_folder(tmp, target)
    return target, manifest


def test_folder_result_round_trip_and_its_checks(tmp_path):
    fp = {"code": "c", "config": "k", "data": "d"}
    target, manifest = _folder_result(tmp_path, fp)
    assert manifest["key"] == resultcache.folder_key("demo", 1, fp) == target.name
    assert set(manifest["files"]) == {"a.npz", "history.json"}
    assert resultcache.check_folder(target, "demo", 1, fp, need=("a.npz",)) == manifest
    assert resultcache.check_file(target, "a.npz") == target / "a.npz"
    for args, reason in [
        (("other", 1, fp), "names 'demo'"),
        (("demo", 2, fp), "cache version 1"),
        (("demo", 1, {**fp, "data": "e"}), "another data"),
        (("demo", 1, fp, ("b.pt",)), "lacks \\['b.pt'\\]"),
    ]:
        with pytest.raises(resultcache.CacheError, match=reason):
            resultcache.check_folder(target, *args)
    (target / "a.npz").write_bytes(b"abc" * 99)  # truncated
    with pytest.raises(resultcache.CacheError, match="a.npz does not match"):
        resultcache.check_folder(target, "demo", 1, fp)
    with pytest.raises(resultcache.CacheError, match="a.npz is missing or does not match"):
        resultcache.check_file(target, "a.npz")
    moved = target.with_name("0123456789abcdef")
    target.rename(moved)
    with pytest.raises(resultcache.CacheError, match="copied or renamed"):
        resultcache.check_folder(moved, "demo", 1, fp)
    (moved / resultcache.MANIFEST).write_text("[1, 2]")
    with pytest.raises(resultcache.CacheError, match="does not hold a JSON object"):
        resultcache.check_folder(moved, "demo", 1, fp)
    (moved / resultcache.MANIFEST).unlink()
    with pytest.raises(resultcache.CacheError, match="manifest.json is missing"):
        resultcache.check_folder(moved, "demo", 1, fp)


def test_commit_folder_replaces_an_old_result(tmp_path):
    fp = {"code": "c"}
    target, _ = _folder_result(tmp_path, fp)
    (target / "stale.txt").write_text("old")
    again, _ = _folder_result(tmp_path, fp)
    assert again == target and not (target / "stale.txt").exists()
    assert not list(tmp_path.glob("*.tmp-*"))


# --------------------------------------------------------------------------- a stored result: damage and leftovers


def _entry():
    return {"a": np.arange(6.0).reshape(2, 3), "b": np.array([1, 2], dtype=np.int32)}, {"note": "x", "n": 2}


def test_cache_roundtrip_and_each_kind_of_damage(tmp_path):
    path = tmp_path / "imdb-seed10-x.npz"
    calls = []

    def compute():
        calls.append(1)
        return _entry()

    arrays, meta = resultcache.load_or_compute(path, "real_reviews/imdb/seed10", "fp1", compute, {"a": (2, None)})
    assert len(calls) == 1 and meta == {"note": "x", "n": 2} and np.array_equal(arrays["a"], _entry()[0]["a"])
    resultcache.load_or_compute(path, "real_reviews/imdb/seed10", "fp1", compute)
    assert len(calls) == 1  # read back, not recomputed

    def damaged(make):
        make()
        with pytest.warns(RuntimeWarning, match="recomputing"):
            resultcache.load_or_compute(path, "real_reviews/imdb/seed10", "fp1", compute, {"a": (2, 3)})
        resultcache.load(path, "real_reviews/imdb/seed10", "fp1")  # replaced by a good file

    other = tmp_path / "rt-seed10-x.npz"
    resultcache.save(other, "real_reviews/rt/seed10", "fp1", *_entry())
    damaged(lambda: shutil.copyfile(other, path))  # another data set's result
    # other code, configuration or data: stale, replaced without a warning (the normal state after an edit)
    resultcache.save(path, "real_reviews/imdb/seed10", "fp0", *_entry())
    with pytest.raises(resultcache.StaleResult):
        resultcache.load(path, "real_reviews/imdb/seed10", "fp1")
    n = len(calls)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resultcache.load_or_compute(path, "real_reviews/imdb/seed10", "fp1", compute)
    assert len(calls) == n + 1
    resultcache.load(path, "real_reviews/imdb/seed10", "fp1")
    damaged(lambda: path.write_bytes(path.read_bytes()[:200]))  # truncated
    damaged(lambda: path.write_bytes(b"not a zip file at all"))  # garbage
    damaged(lambda: resultcache.save(path, "real_reviews/imdb/seed10", "fp1", {"a": np.zeros((5, 3))}, {}))  # shape
    damaged(lambda: np.savez(path, a=np.zeros(3)))  # no header

    def missing_array():  # header lists an array the file does not hold
        resultcache.save(path, "real_reviews/imdb/seed10", "fp1", *_entry())
        import zipfile

        with zipfile.ZipFile(path) as zin:
            items = {n: zin.read(n) for n in zin.namelist() if n != "b.npy"}
        with zipfile.ZipFile(path, "w") as zout:
            for n, data in items.items():
                zout.writestr(n, data)

    damaged(missing_array)

    def pickled():  # an object array cannot be read without unpickling: refused
        import io
        import json

        buf = io.BytesIO()
        np.savez(
            buf,
            __header__=np.array(
                json.dumps(
                    {
                        "format": 1,
                        "name": "real_reviews/imdb/seed10",
                        "fingerprint": "fp1",
                        "meta": {},
                        "shapes": {"a": [1]},
                        "dtypes": {"a": "|O"},
                    }
                )
            ),
            a=np.array([object()], dtype=object),
        )
        path.write_bytes(buf.getvalue())

    damaged(pickled)
    assert len(calls) == 1 + 8
    with pytest.raises(ValueError, match="object"):
        resultcache.save(path, "n", "f", {"a": np.array([object()], dtype=object)}, {})


def test_stored_says_whether_load_would_succeed(tmp_path):
    path = tmp_path / "rt-small10-x.npz"
    name = "real_reviews/rt/reviews-small10"
    assert not resultcache.stored(path, name, "fp1")  # absent
    resultcache.save(path, name, "fp1", *_entry())
    assert resultcache.stored(path, name, "fp1")
    assert not resultcache.stored(path, name, "fp0")  # other code: stale
    assert not resultcache.stored(path, "real_reviews/rt/control-small10", "fp1")  # another result
    path.write_bytes(path.read_bytes()[:40])  # truncated
    assert not resultcache.stored(path, name, "fp1")


def test_cache_sweeps_leftover_temporary_files(tmp_path):
    old, fresh = tmp_path / "x.npz.abc.tmp", tmp_path / "y.npz.part"
    young = tmp_path / "z.npz.def.tmp"
    for f in (old, fresh, young):
        f.write_bytes(b"partial")
    stale = time.time() - 2 * resultcache.STALE_SECONDS
    os.utime(old, (stale, stale))
    os.utime(fresh, (stale, stale))
    resultcache.load_or_compute(tmp_path / "r.npz", "n", "f", _entry)
    assert not old.exists() and not fresh.exists() and young.exists()  # a write in progress is left alone


# ----------------------------------------------------------------------------- issue 28.2: guard the cache, not the computation
def test_an_error_inside_compute_propagates_unchanged_and_computes_once(tmp_path, monkeypatch):
    from mmtoken.datasets.download import DatasetMissing

    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    calls = []

    def compute():
        calls.append(1)
        raise DatasetMissing("the dataset is not here")

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no misleading "cache not used" warning either
        with pytest.raises(DatasetMissing, match="not here"):
            resultcache.experiment_result("mmtoken.chapters.ch02_global", "t", {}, compute)
    assert calls == [1]


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EFBIG])
def test_a_full_disk_keeps_the_finished_result(tmp_path, monkeypatch, err):
    from mmtoken.datasets import download

    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    calls = []

    def compute():
        calls.append(1)
        return {"a": np.arange(3.0)}, {"note": 1}

    class Full(io.RawIOBase):
        def writable(self):
            return True

        def write(self, b):
            raise OSError(err, os.strerror(err))

    real = os.fdopen
    monkeypatch.setattr(download.os, "fdopen", lambda fd, mode="r", *a, **k: (os.close(fd), Full())[1])
    with pytest.warns(RuntimeWarning, match="results cache not used"):
        arrays, meta = resultcache.experiment_result("mmtoken.chapters.ch02_global", "t", {}, compute)
    monkeypatch.setattr(download.os, "fdopen", real)
    assert calls == [1] and arrays["a"].tolist() == [0.0, 1.0, 2.0] and meta == {"note": 1}
    assert not list((tmp_path / "data").rglob("*.npz")) and not list((tmp_path / "data").rglob("*.tmp"))


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EFBIG])
def test_atomic_write_bytes_raises_the_documented_error(tmp_path, monkeypatch, err):
    from mmtoken.datasets import download

    class Full(io.RawIOBase):
        def writable(self):
            return True

        def write(self, b):
            raise OSError(err, os.strerror(err))

    monkeypatch.setattr(download.os, "fdopen", lambda fd, mode="r", *a, **k: (os.close(fd), Full())[1])
    with pytest.raises(download.DataFolderError, match=f"cannot write .*x.bin .{os.strerror(err)}"):
        download.atomic_write_bytes(tmp_path / "x.bin", b"data")
    assert list(tmp_path.iterdir()) == []
