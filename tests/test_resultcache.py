"""The one store (mmtoken.book.resultcache): one file name keyed by the configuration's values with their types,
one lock, results read from the data folder or the carried trained runs, every kind of damage refused, nothing
created by importing, and a computation that fails or cannot be stored handled without hiding it.
"""

import dataclasses
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
import zipfile
from pathlib import Path

import numpy as np
import pytest

from mmtoken.book import resultcache

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("MMTOKEN_TRAINED", str(tmp_path / "trained"))
    return tmp_path / "data"


def _entry():
    return {"a": np.arange(6.0).reshape(2, 3), "b": np.array([1, 2], dtype=np.int32)}, {"note": "x", "n": 2}


@dataclasses.dataclass(frozen=True)
class Settings:
    steps: int = 1000
    lr: float = 0.1


# --------------------------------------------------------------------------- one file name, typed keys
def test_the_key_covers_each_value_with_its_type():
    keys = {
        resultcache.key("published", c)
        for c in (
            Settings(),
            Settings(steps=1000.0),  # equal to Settings() by ==, another setting for the store
            Settings(steps=True),
            Settings(lr=0.1000000001),
            {"steps": 1000, "lr": 0.1},
            [1000, 0.1],
            (1000, 0.1),
            np.arange(3),
            np.arange(3.0),
        )
    }
    assert len(keys) == 9
    assert Settings(steps=1000.0) == Settings()  # why a key by == (or by repr) is not enough
    assert resultcache.key("published", Settings()) == resultcache.key("published", Settings())
    assert resultcache.key("published", {"a": 1, "b": 2}) == resultcache.key("published", {"b": 2, "a": 1})


def test_an_unkeyable_configuration_is_refused_by_type():
    with pytest.raises(TypeError, match="cannot be keyed on a object"):
        resultcache.key("x", {"a": object()})


def test_two_settings_equal_by_value_keep_two_files(data):
    calls = []

    def compute(s):
        calls.append(s)
        return {"steps": np.array(float(s.steps))}, {"type": type(s.steps).__name__}

    for s in (Settings(), Settings(steps=1000.0), Settings(), Settings(steps=1000.0)):
        _, meta = resultcache.cached("demo", "published", lambda s=s: compute(s), config=s, code=[compute])
        assert meta["type"] == type(s.steps).__name__
    assert len(calls) == 2  # each computed once; neither replaced the other
    assert len(list((data / "results" / "demo").glob("published-*.npz"))) == 2


def test_names_are_words_and_paths_live_under_results(data):
    p = resultcache.path_of("real_reviews", "imdb/seed10", {"seed": 10})
    assert p.parent == data / "results" / "real_reviews" / "imdb" and p.name.startswith("seed10-")
    for bad in ("", "a b", "../x", "x/", "a/../b"):
        with pytest.raises(ValueError, match="name"):
            resultcache.path_of("demo", bad, {})
    with pytest.raises(ValueError, match="owner"):
        resultcache.path_of("../up", "x", {})


# --------------------------------------------------------------------------- one computation per result
def _slow_compute(data_dir, counter):
    os.environ["MMTOKEN_DATA"] = str(data_dir)

    def compute():
        with open(counter, "a") as fh:
            fh.write("computed\n")
        time.sleep(1.0)
        return {"a": np.arange(3.0)}, {"by": os.getpid()}

    arrays, meta = resultcache.cached("demo", "slow", compute, config={}, code=[_slow_compute])
    return float(arrays["a"].sum())


def test_two_processes_asking_for_one_missing_result_compute_it_once(tmp_path):
    counter = tmp_path / "count.txt"
    with mp.get_context("spawn").Pool(2) as pool:
        sums = pool.starmap(_slow_compute, [(tmp_path / "d", counter), (tmp_path / "d", counter)])
    assert sums == [3.0, 3.0]
    assert counter.read_text().count("computed") == 1


def test_lock_files_live_apart_from_results(tmp_path):
    with resultcache.locked(tmp_path / "x.npz"):
        pass
    assert (tmp_path / ".locks" / "x.npz.lock").exists() and not (tmp_path / "x.npz").exists()


def test_a_result_records_how_it_was_made(data):
    resultcache.cached("demo", "made", _entry, config={})
    (path,) = (data / "results" / "demo").glob("made-*.npz")
    header, _ = resultcache.read_header(path)
    made = header["made"]
    assert made["cpu_seconds"] >= 0 and made["wall_seconds"] >= 0 and made["date"] == time.strftime("%Y-%m-%d")
    assert "cores" in made["machine"] and made["roots"] == [["test_resultcache", "_entry"]]


# --------------------------------------------------------------------------- carried trained runs
def test_a_carried_result_is_read_and_the_data_folder_is_left_alone(data, tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return _entry()

    e = resultcache.entry("vit", "run", config={"seed": 1}, code=[compute])
    assert e.carried is not None and e.carried.is_relative_to(tmp_path / "trained")
    resultcache.save(e.carried, e.title, e.fp, *_entry())  # as `make trained` leaves it
    arrays, meta = resultcache.cached("vit", "run", compute, config={"seed": 1})
    assert calls == [] and meta["note"] == "x" and not e.path.exists()
    assert resultcache.stored("vit", "run", config={"seed": 1}, code=[compute])
    resultcache.save(e.carried, e.title, "0" * 64, *_entry())  # trained by other code: not used
    assert not resultcache.stored("vit", "run", config={"seed": 1}, code=[compute])
    resultcache.cached("vit", "run", compute, config={"seed": 1})
    assert calls == [1] and e.path.is_file()  # computed and stored in the data folder


def test_no_carried_runs_when_switched_off(monkeypatch, data):
    monkeypatch.setenv("MMTOKEN_TRAINED", "none")
    assert resultcache.entry("vit", "run", config={}, code=[_entry]).carried is None


# --------------------------------------------------------------------------- damage
def test_cache_roundtrip_and_each_kind_of_damage(data):
    calls = []

    def compute():
        calls.append(1)
        return _entry()

    def get(expect=None):
        return resultcache.cached("real_reviews", "imdb/seed10", compute, config={"seed": 10}, expect=expect)

    arrays, meta = get({"a": (2, None)})
    assert len(calls) == 1 and meta == {"note": "x", "n": 2} and np.array_equal(arrays["a"], _entry()[0]["a"])
    get()
    assert len(calls) == 1  # read back, not recomputed
    e = resultcache.entry("real_reviews", "imdb/seed10", config={"seed": 10}, code=[compute])

    def damaged(make):
        make()
        with pytest.warns(RuntimeWarning, match="recomputing"):
            get({"a": (2, 3)})
        resultcache.load(e.path, e.title, e.fp)  # replaced by a good file

    other = resultcache.path_of("real_reviews", "rt/seed10", {"seed": 10})
    resultcache.save(other, "real_reviews/rt/seed10", e.fp, *_entry())
    damaged(lambda: shutil.copyfile(other, e.path))  # another data set's result copied over it
    # other code, configuration or data: stale, replaced without a warning (the normal state after an edit)
    resultcache.save(e.path, e.title, "fp0", *_entry())
    with pytest.raises(resultcache.StaleResult):
        resultcache.load(e.path, e.title, e.fp)
    n = len(calls)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        get()
    assert len(calls) == n + 1
    damaged(lambda: e.path.write_bytes(e.path.read_bytes()[:200]))  # truncated
    damaged(lambda: e.path.write_bytes(b"not a zip file at all"))  # garbage
    damaged(lambda: resultcache.save(e.path, e.title, e.fp, {"a": np.zeros((5, 3))}, {}))  # another shape
    damaged(lambda: np.savez(e.path, a=np.zeros(3)))  # no header

    def missing_array():  # the header lists an array the file does not hold
        resultcache.save(e.path, e.title, e.fp, *_entry())
        with zipfile.ZipFile(e.path) as zin:
            items = {n: zin.read(n) for n in zin.namelist() if n != "b.npy"}
        with zipfile.ZipFile(e.path, "w") as zout:
            for n, blob in items.items():
                zout.writestr(n, blob)

    damaged(missing_array)

    def pickled():  # an object array cannot be read without unpickling: refused
        header = {"format": resultcache.FORMAT, "name": e.title, "fingerprint": e.fp, "meta": {}}
        header |= {"shapes": {"a": [1]}, "dtypes": {"a": "|O"}}
        buf = io.BytesIO()
        np.savez(buf, __header__=np.array(json.dumps(header)), a=np.array([object()], dtype=object))
        e.path.write_bytes(buf.getvalue())

    damaged(pickled)
    assert len(calls) == 2 + 7
    with pytest.raises(ValueError, match="object"):
        resultcache.save(e.path, "n", "f", {"a": np.array([object()], dtype=object)}, {})


def test_the_store_sweeps_leftover_temporary_files(data):
    from mmtoken.datasets.download import STALE_SECONDS

    folder = data / "results" / "demo"
    folder.mkdir(parents=True)
    old, fresh, young = folder / "x.npz.abc.tmp", folder / "y.npz.part", folder / "z.npz.def.tmp"
    for f in (old, fresh, young):
        f.write_bytes(b"partial")
    stale = time.time() - 2 * STALE_SECONDS
    os.utime(old, (stale, stale))
    os.utime(fresh, (stale, stale))
    resultcache.cached("demo", "r", _entry, config={})
    assert not old.exists() and not fresh.exists() and young.exists()  # a write in progress is left alone


# --------------------------------------------------------------------------- no side effects on import
def test_importing_every_module_creates_no_folder(tmp_path):
    where = tmp_path / "nothing-here"
    code = (
        "import pkgutil, importlib, mmtoken\n"
        "for m in pkgutil.walk_packages(mmtoken.__path__, 'mmtoken.'):\n"
        "    if m.name != 'mmtoken.__main__':\n"
        "        importlib.import_module(m.name)\n"
        "from mmtoken import config\nfrom mmtoken.book import ledger, records, resultcache\n"
        "config.data_dir(); resultcache.path_of('vit', 'x', {}); records.records_dir(ledger.RESULT, 'quick')\n"
        "from mmtoken.chapters import ch12_real_reviews  # noqa: F401\n"
        "assert 'B.yelp.accuracy' in ledger.REGISTRY\n"
    )
    env = dict(os.environ, MMTOKEN_DATA=str(where), MPLBACKEND="Agg")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert not where.exists()


# --------------------------------------------------------------------------- guard the cache, not the computation
def test_a_read_only_data_folder_still_gives_results(data, monkeypatch):
    def refuse(*a, **k):  # root ignores permission bits: refuse as the OS would
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(resultcache, "locked", refuse)
    with pytest.warns(RuntimeWarning, match="results cache not used"):
        arrays, _ = resultcache.cached("demo", "t", lambda: ({"a": np.ones(2)}, {}), config={})
    assert arrays["a"].sum() == 2.0


def test_an_error_inside_compute_propagates_unchanged_and_computes_once(data):
    from mmtoken.datasets.download import DatasetMissing

    calls = []

    def compute():
        calls.append(1)
        raise DatasetMissing("the dataset is not here")

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no misleading "cache not used" warning either
        with pytest.raises(DatasetMissing, match="not here"):
            resultcache.cached("demo", "t", compute, config={})
    assert calls == [1]


class _Full(io.RawIOBase):
    def __init__(self, err):
        self.err = err

    def writable(self):
        return True

    def write(self, b):
        raise OSError(self.err, os.strerror(self.err))


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EFBIG])
def test_a_full_disk_keeps_the_finished_result(data, monkeypatch, err):
    from mmtoken.datasets import download

    calls = []

    def compute():
        calls.append(1)
        return {"a": np.arange(3.0)}, {"note": 1}

    real = os.fdopen
    monkeypatch.setattr(download.os, "fdopen", lambda fd, mode="r", *a, **k: (os.close(fd), _Full(err))[1])
    with pytest.warns(RuntimeWarning, match="results cache not used"):
        arrays, meta = resultcache.cached("demo", "t", compute, config={})
    monkeypatch.setattr(download.os, "fdopen", real)
    assert calls == [1] and arrays["a"].tolist() == [0.0, 1.0, 2.0] and meta == {"note": 1}
    assert not list(data.rglob("*.npz")) and not list(data.rglob("*.tmp"))


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EFBIG])
def test_atomic_write_bytes_raises_the_documented_error(tmp_path, monkeypatch, err):
    from mmtoken.datasets import download

    monkeypatch.setattr(download.os, "fdopen", lambda fd, mode="r", *a, **k: (os.close(fd), _Full(err))[1])
    with pytest.raises(download.DataFolderError, match=f"cannot write .*x.bin .{os.strerror(err)}"):
        download.atomic_write_bytes(tmp_path / "x.bin", b"data")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- one writer
WRITERS = {
    "mmtoken/book/resultcache.py": "the one store: every computed result and record",
    "mmtoken/datasets/download.py": "the downloaded files themselves and where they came from (source.json)",
    "mmtoken/datasets/fashion_mnist.py": "the downloaded idx files, through download.atomic_write_bytes",
    "mmtoken/book/plotting.py": "figures, to the folder `mmtoken figures --out` names (not the data folder)",
    "mmtoken/book/trained.py": "book/trained (make trained), copies of the store's own files",
}
WRITE = r"np\.savez|json\.dump\(|torch\.save|\.write_text\(|\.write_bytes\(|open\([^)]*['\"][wax]b?\+?['\"]"
WRITE += r"|atomic_write_bytes\(|os\.fdopen|\.tofile\(|pickle\.dump"


def test_only_the_store_writes_result_files():
    """Issue 42: every result reaches disk through mmtoken.book.resultcache; the few other writers write what is not a
    result (downloads, figures, the carried copies), each listed with why."""
    import re

    pattern = re.compile(WRITE)
    found = {}
    for path in sorted((ROOT / "mmtoken").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        hits = [n for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line.split("#")[0])]
        if hits:
            found[rel] = hits
    assert set(found) <= set(WRITERS), {k: v for k, v in found.items() if k not in WRITERS}
    assert "mmtoken/book/resultcache.py" in found  # the pattern does see a writer
