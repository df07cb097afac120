"""data/registry.md must agree with the checksums the readers verify; leftovers are swept; unwritable folders named."""

import os
import tempfile
import time
from pathlib import Path

import pytest

from mmtoken.datasets import cifar10, fashion_mnist, sources
from mmtoken.datasets.download import DataFolderError, DatasetError, atomic_write_bytes, sweep_partial

DOC = (Path(__file__).resolve().parent.parent / "data" / "registry.md").read_text()


def test_every_checksum_in_the_code_is_documented():
    digests = [s["sha256"] for s in sources.SOURCES.values() if s.get("sha256")]
    digests += [f["sha256"] for split in fashion_mnist.FASHION_MNIST.values() for f in split.values()]
    digests += [cifar10.CIFAR10["sha256"], cifar10.CIFAR10["md5"]]
    missing = [d for d in digests if d not in DOC]
    assert not missing, f"checksums missing from data/registry.md: {missing}"


def test_sweep_partial_removes_only_stale_leftovers(tmp_path):
    (tmp_path / "sub").mkdir()
    stale = [tmp_path / "a.tgz.x1.part", tmp_path / "sub" / "b.npz.y2.tmp"]
    keep = [tmp_path / "c.tgz.z3.part", tmp_path / "data.npz"]  # a live download; a cache
    for p in stale + keep:
        p.write_bytes(b"x")
    for p in stale + [keep[1]]:
        os.utime(p, (time.time() - 7200, time.time() - 7200))
    assert sweep_partial(tmp_path) == [stale[0]]  # not recursive by default
    assert sorted(sweep_partial(tmp_path, recursive=True)) == [stale[1]]
    assert all(p.exists() for p in keep)
    assert sweep_partial(tmp_path / "nothing-here") == []


def test_atomic_write_into_an_unwritable_folder_names_it(tmp_path, monkeypatch):
    def denied(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    with pytest.raises(DataFolderError, match=r"cannot write .*x\.npz.*MMTOKEN_DATA"):
        atomic_write_bytes(tmp_path / "x.npz", b"data")
    assert issubclass(DataFolderError, DatasetError) and not (tmp_path / "x.npz").exists()
