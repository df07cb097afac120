"""Image readers: Fashion-MNIST idx files and the CIFAR-10 python archive, on fixtures and bad files."""

from __future__ import annotations

import gzip
import io
import pickle
import shutil
import struct
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from mmtoken.datasets import cifar10, fashion_mnist, images
from mmtoken.datasets.download import DatasetError, DatasetMissing

FIX = Path(__file__).parent / "fixtures" / "images"

# SHA-256 of the decompressed fixture idx files (tests/fixtures/make_image_fixtures.py)
FIXTURE_FASHION = {
    "train": {
        "images": {
            "file": "train-images-idx3-ubyte",
            "shape": (6, 28, 28),
            "sha256": "b4209e137a4a62f752100531db3e44fd7fc730c765a16f09b7514e1d5d4209f5",
        },
        "labels": {
            "file": "train-labels-idx1-ubyte",
            "shape": (6,),
            "sha256": "a58c8c1f59c305303732e873ef682e4c5b69b095a749787d4b643d9d10769a7f",
        },
    },
    "test": {
        "images": {
            "file": "t10k-images-idx3-ubyte",
            "shape": (4, 28, 28),
            "sha256": "22095aa6a792eba27f892cbd1098f6ceb51ad8cfe5597bfad326fbfcaf48e19c",
        },
        "labels": {
            "file": "t10k-labels-idx1-ubyte",
            "shape": (4,),
            "sha256": "afd18a13d05418b12a69c1144f36d4878ca5912b3b0d31df46d51a70de62ed6d",
        },
    },
}
FIXTURE_CIFAR = {
    "md5": "8e1def92f0c77cc88d05b732b846e690",
    "sha256": "d4ab906d64be70f76c01f3a3ddc148c1b76a27b2904d1ad8ddbcfd5af54ab724",
}


def idx(arr: np.ndarray, code: int = 0x08) -> bytes:
    return struct.pack(">BBBB", 0, 0, code, arr.ndim) + struct.pack(f">{arr.ndim}i", *arr.shape) + arr.tobytes()


# --------------------------------------------------------------------------- idx parsing


def test_parse_idx_roundtrip():
    a = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    np.testing.assert_array_equal(fashion_mnist.parse_idx(idx(a)), a)
    b = np.arange(6, dtype=">i4").reshape(2, 3)
    out = fashion_mnist.parse_idx(idx(b, 0x0C))
    assert out.dtype == np.dtype("int32") and out.dtype.isnative
    np.testing.assert_array_equal(out, np.arange(6).reshape(2, 3))


@pytest.mark.parametrize(
    "data, match",
    [
        (b"\x01\x00\x08\x01" + struct.pack(">i", 1) + b"\x00", "bad magic"),
        (b"\x00\x00\x07\x01" + struct.pack(">i", 1) + b"\x00", "unknown idx dtype"),
        (b"\x00\x00\x08\x03\x00\x00", "truncated idx header"),
        (b"\x00\x00\x08\x01" + struct.pack(">i", 5) + b"\x00\x01", "truncated or corrupt"),
        (b"\x00\x00\x08\x01" + struct.pack(">i", 1) + b"\x00\x01", "truncated or corrupt"),
    ],
)
def test_parse_idx_rejects_bad_files(data, match):
    with pytest.raises(DatasetError, match=match):
        fashion_mnist.parse_idx(data)


# --------------------------------------------------------------------------- Fashion-MNIST


def test_fashion_fixture_loads_and_caches(tmp_path):
    dest = tmp_path / "cache"
    x, y = fashion_mnist.load_fashion_mnist("train", source=FIX / "fashion", dest=dest, registry=FIXTURE_FASHION)
    assert x.shape == (6, 1, 28, 28) and x.dtype == np.uint8
    assert y.shape == (6,) and y.dtype == np.int64 and y.min() >= 0 and y.max() <= 9
    assert (x[:, :, :4] == 0).all()
    # the cache holds the decompressed idx files and is used without the source
    assert (dest / "train-images-idx3-ubyte").is_file()
    x2, y2 = fashion_mnist.load_fashion_mnist("train", source=tmp_path / "nowhere", dest=dest, registry=FIXTURE_FASHION)
    np.testing.assert_array_equal(x, x2)
    xt, yt = fashion_mnist.load_fashion_mnist("test", source=FIX / "fashion", dest=dest, registry=FIXTURE_FASHION)
    assert xt.shape == (4, 1, 28, 28) and yt.shape == (4,)


def test_fashion_accepts_uncompressed_source(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for f in (FIX / "fashion").glob("*.gz"):
        (src / f.stem).write_bytes(gzip.decompress(f.read_bytes()))
    x, _ = fashion_mnist.load_fashion_mnist("test", source=src, dest=tmp_path / "cache", registry=FIXTURE_FASHION)
    assert x.shape == (4, 1, 28, 28)


def test_fashion_missing_names_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setattr(fashion_mnist, "DEBIAN_FASHION_MNIST_DIR", tmp_path / "no-debian")
    monkeypatch.delenv("MMTOKEN_FASHION_MNIST_DIR", raising=False)
    with pytest.raises(DatasetMissing, match="apt-get install -y dataset-fashion-mnist"):
        fashion_mnist.load_fashion_mnist(
            "train", source=tmp_path / "empty", dest=tmp_path / "cache", registry=FIXTURE_FASHION, download=False
        )


def test_fashion_offline_download_says_it_once_with_the_cache_folder(tmp_path, monkeypatch):
    """No network (an unreachable mirror): one message naming the cache folder, no urllib chain."""
    monkeypatch.setattr(fashion_mnist, "DEBIAN_FASHION_MNIST_DIR", tmp_path / "no-debian")
    monkeypatch.delenv("MMTOKEN_FASHION_MNIST_DIR", raising=False)
    cache = tmp_path / "cache"
    with pytest.raises(DatasetMissing) as err:
        fashion_mnist.load_fashion_mnist(
            "train", dest=cache, registry=FIXTURE_FASHION, mirror="http://127.0.0.1:9/", timeout=5, deadline=10
        )
    message = str(err.value)
    assert f"searched the cache folder {cache}" in message and "apt-get install" in message
    assert err.value.__cause__ is None and err.value.__suppress_context__, "the urllib chain is not shown"


def test_fashion_corrupt_source_is_rejected(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIX / "fashion", src)
    raw = bytearray(gzip.decompress((src / "train-images-idx3-ubyte.gz").read_bytes()))
    raw[100] ^= 0xFF
    (src / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(bytes(raw)))
    with pytest.raises(DatasetError, match="checksum mismatch"):
        fashion_mnist.load_fashion_mnist("train", source=src, dest=tmp_path / "cache", registry=FIXTURE_FASHION)
    assert not (tmp_path / "cache" / "train-images-idx3-ubyte").exists()


def test_fashion_truncated_gzip_is_rejected(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(FIX / "fashion", src)
    data = (src / "train-images-idx3-ubyte.gz").read_bytes()
    (src / "train-images-idx3-ubyte.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match="not a valid gzip file"):
        fashion_mnist.load_fashion_mnist("train", source=src, dest=tmp_path / "cache", registry=FIXTURE_FASHION)


def test_fashion_corrupt_cache_is_rebuilt_from_verified_source(tmp_path, monkeypatch):
    monkeypatch.setattr(fashion_mnist, "DEBIAN_FASHION_MNIST_DIR", tmp_path / "no-debian")
    monkeypatch.delenv("MMTOKEN_FASHION_MNIST_DIR", raising=False)
    dest = tmp_path / "cache"
    x, _ = fashion_mnist.load_fashion_mnist("train", source=FIX / "fashion", dest=dest, registry=FIXTURE_FASHION)
    (dest / "train-images-idx3-ubyte").write_bytes(b"garbage")
    x2, _ = fashion_mnist.load_fashion_mnist("train", source=FIX / "fashion", dest=dest, registry=FIXTURE_FASHION)
    np.testing.assert_array_equal(x, x2)
    # without a source, a corrupt cache is an error, not a silent substitute
    (dest / "train-images-idx3-ubyte").write_bytes(b"garbage")
    with pytest.raises(DatasetError, match="wrong checksum"):
        fashion_mnist.load_fashion_mnist(
            "train", source=tmp_path / "none", dest=dest, registry={"train": FIXTURE_FASHION["train"]}, download=False
        )


def test_fashion_unknown_split():
    with pytest.raises(ValueError, match="unknown split"):
        fashion_mnist.load_fashion_mnist("validation")


def test_fashion_registry_is_complete():
    for split, n in (("train", 60000), ("test", 10000)):
        for part in ("images", "labels"):
            rec = fashion_mnist.FASHION_MNIST[split][part]
            assert rec["shape"][0] == n
            for key in ("sha256", "gz_sha256_debian"):
                assert len(rec[key]) == 64 and int(rec[key], 16) >= 0
            assert len(rec["gz_md5_upstream"]) == 32


@pytest.mark.skipif(
    not all(
        (fashion_mnist.DEBIAN_FASHION_MNIST_DIR / (r["file"] + ".gz")).is_file()
        for parts in fashion_mnist.FASHION_MNIST.values()
        for r in parts.values()
    ),
    reason="the Debian package dataset-fashion-mnist is not installed",
)
def test_debian_package_files_match_registry():
    from mmtoken.datasets.download import sha256_file

    for parts in fashion_mnist.FASHION_MNIST.values():
        for rec in parts.values():
            assert (
                sha256_file(fashion_mnist.DEBIAN_FASHION_MNIST_DIR / (rec["file"] + ".gz")) == rec["gz_sha256_debian"]
            )


# --------------------------------------------------------------------------- CIFAR-10


def test_cifar_fixture_reads():
    out = cifar10.read_cifar10_archive(FIX / "cifar-10-python.tar.gz", **FIXTURE_CIFAR)
    xtr, ytr = out["train"]
    xte, yte = out["test"]
    assert xtr.shape == (10, 3, 32, 32) and xtr.dtype == np.uint8
    assert ytr.shape == (10,) and ytr.dtype == np.int64
    assert xte.shape == (2, 3, 32, 32) and yte.shape == (2,)
    # the row layout of the archive: 1024 red, then green, then blue values, row-major
    with tarfile.open(FIX / "cifar-10-python.tar.gz") as tar:
        d = pickle.loads(tar.extractfile("cifar-10-batches-py/test_batch").read(), encoding="bytes")
    np.testing.assert_array_equal(xte[1, 2].ravel(), d[b"data"][1, 2048:])
    assert list(yte) == d[b"labels"]


def test_cifar_checksum_is_checked_before_unpickling(tmp_path):
    bad = tmp_path / "cifar-10-python.tar.gz"
    data = bytearray((FIX / "cifar-10-python.tar.gz").read_bytes())
    data[-100] ^= 0xFF
    bad.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="checksum mismatch.*md5"):
        cifar10.read_cifar10_archive(bad, **FIXTURE_CIFAR)
    with pytest.raises(DatasetError, match="checksum mismatch for .* sha256"):
        cifar10.read_cifar10_archive(FIX / "cifar-10-python.tar.gz", md5=None, sha256="0" * 64)
    # the published checksums reject the fixture
    with pytest.raises(DatasetError, match=cifar10.CIFAR10["md5"]):
        cifar10.read_cifar10_archive(FIX / "cifar-10-python.tar.gz")


def _archive(tmp_path: Path, members: dict[str, bytes]) -> Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = tmp_path / "a.tar.gz"
    path.write_bytes(buf.getvalue())
    return path


def test_cifar_missing_member_and_bad_layout(tmp_path):
    good = pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [0]}, protocol=2)
    path = _archive(tmp_path, {"cifar-10-batches-py/data_batch_1": good})
    with pytest.raises(DatasetError, match="no member cifar-10-batches-py/data_batch_2"):
        cifar10.read_cifar10_archive(path, md5=None, sha256=None)
    wrong = pickle.dumps({b"data": np.zeros((1, 100), np.uint8), b"labels": [0]}, protocol=2)
    path = _archive(tmp_path, {"cifar-10-batches-py/data_batch_1": wrong})
    with pytest.raises(DatasetError, match="not CIFAR-10 batches"):
        cifar10.read_cifar10_archive(path, md5=None, sha256=None)


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_cifar_unpickler_refuses_code(tmp_path):
    path = _archive(tmp_path, {"cifar-10-batches-py/data_batch_1": pickle.dumps({b"data": _Evil()}, protocol=2)})
    with pytest.raises(DatasetError, match="refusing to load"):
        cifar10.read_cifar10_archive(path, md5=None, sha256=None)


def test_cifar_not_a_tar(tmp_path):
    path = tmp_path / "x.tar.gz"
    path.write_bytes(b"not an archive")
    with pytest.raises(DatasetError, match="not a readable tar.gz"):
        cifar10.read_cifar10_archive(path, md5=None, sha256=None)


def test_cifar_download_offline_raises_missing_with_instructions(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("network is unreachable")

    class Opener:  # download_file's own opener, offline
        open = staticmethod(offline)

    monkeypatch.setattr(urllib.request, "build_opener", lambda *a, **k: Opener())
    dest = tmp_path / "cifar-10-python.tar.gz"
    with pytest.raises(DatasetMissing, match=r"cifar-10-python\.tar\.gz.*c58f30108f718f92721af3b95e74349a"):
        cifar10.download_cifar10(dest)
    assert not dest.exists() and not list(tmp_path.iterdir())


def test_cifar_download_verifies(tmp_path, monkeypatch):
    payload = (FIX / "cifar-10-python.tar.gz").read_bytes()

    class Opener:  # download_file opens through its own opener (its sockets are shut at the deadline)
        def open(self, *a, **k):
            return io.BytesIO(payload)

    monkeypatch.setattr(urllib.request, "build_opener", lambda *a, **k: Opener())
    dest = tmp_path / "c.tar.gz"
    with pytest.raises(DatasetError, match="checksum mismatch"):
        cifar10.download_cifar10(dest)
    assert not dest.exists()
    monkeypatch.setitem(cifar10.CIFAR10, "md5", FIXTURE_CIFAR["md5"])
    monkeypatch.setitem(cifar10.CIFAR10, "sha256", FIXTURE_CIFAR["sha256"])
    assert cifar10.download_cifar10(dest) == dest
    assert dest.read_bytes() == payload


def test_load_cifar10_without_download_says_how(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path))
    with pytest.raises(DatasetMissing, match="www.cs.toronto.edu"):
        cifar10.load_cifar10("train", download=False)


def test_load_images_unknown_name():
    with pytest.raises(ValueError, match="unknown image dataset"):
        images.load_images("mnist", "train")
