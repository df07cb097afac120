"""Where data comes from, how it is verified and where it is cached.

Every reader in :mod:`mmtoken.datasets` follows the same rules:

* files are verified by SHA-256 before use; a mismatch raises :class:`DatasetError`
  naming the file, the expected and the found digest;
* caches are written atomically (temporary file, then rename): a failure never
  leaves a truncated cache nor overwrites a good one;
* a dataset that is not on disk and cannot be fetched raises :class:`DatasetMissing`
  with instructions; no other dataset is substituted;
* downloads have a connection timeout *and* an overall deadline;
* leftovers of interrupted writes (``*.part``, ``*.tmp``) older than
  :data:`STALE_SECONDS` are swept by the next fetch;
* a folder that cannot be written raises :class:`DataFolderError` naming it;
* where each cached file came from is recorded next to it (:func:`record_origin`),
  so a chapter says the same source on every later run that reads the cache.
"""

from __future__ import annotations

__all__ = [
    "DOWNLOAD_DEADLINE",
    "ORIGIN_FILE",
    "LINE_WIDTH",
    "STALE_SECONDS",
    "DatasetError",
    "DatasetMissing",
    "DataFolderError",
    "cache_dir",
    "sweep_partial",
    "sha256_file",
    "verify_sha256",
    "atomic_write_bytes",
    "download_file",
    "url_host",
    "fit_line",
    "read_origins",
    "record_origin",
    "download_verified",
    "read_bounded",
]

import contextlib
import hashlib
import http.client
import json
import numbers
import os
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from mmtoken.config import data_dir
from mmtoken.validate import count, positive

DOWNLOAD_DEADLINE = 4 * 3600.0
"""Seconds a whole download may take (the connection timeout bounds each wait separately)."""
ORIGIN_FILE = "source.json"
"""Name of the record, in a cache folder, of where each cached file came from."""
LINE_WIDTH = 72
"""Most characters a one-line source statement (:func:`fit_line`) may take: the book's output column."""
STALE_SECONDS = 3600.0
"""A ``*.part`` / ``*.tmp`` file untouched this long is a leftover of an interrupted write."""


class DatasetError(RuntimeError):
    """A data file exists but is wrong: checksum, truncation, format."""


class DatasetMissing(FileNotFoundError):
    """A dataset is not available here; the message says how to get it."""


class DataFolderError(DatasetError):
    """The data folder (or a file in it) cannot be written; the message names it."""


def cache_dir(name: str) -> Path:
    """``data/<name>/``, not created: the writers (:func:`atomic_write_bytes`, :func:`download_file`) create folders."""
    path = data_dir() / name
    if path.exists() and not path.is_dir():
        raise DataFolderError(f"the data folder {path} is a file; remove it or point MMTOKEN_DATA elsewhere")
    return path


def sweep_partial(folder: str | os.PathLike, max_age: float = STALE_SECONDS, recursive: bool = False) -> list[Path]:
    """Delete the ``*.part`` / ``*.tmp`` files in ``folder`` untouched for ``max_age`` seconds; return their paths.

    A live write keeps touching its file, so it is not swept.
    """
    if isinstance(max_age, bool) or not isinstance(max_age, numbers.Real) or not max_age >= 0:
        raise ValueError(f"max_age must be a number of seconds >= 0, got {max_age!r}")
    folder = Path(folder)
    if not folder.is_dir():
        return []
    now, removed = time.time(), []
    for pattern in ("*.part", "*.tmp"):
        for path in folder.rglob(pattern) if recursive else folder.glob(pattern):
            with contextlib.suppress(OSError):  # gone meanwhile, or not ours to delete: leave it
                if path.is_file() and now - path.stat().st_mtime >= max_age:
                    path.unlink()
                    removed.append(path)
    return removed


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def verify_sha256(path: str | os.PathLike, expected: str | None, *, md5: str | None = None) -> None:
    """Raise :class:`DatasetError` unless ``path`` has SHA-256 ``expected`` and MD5 ``md5`` (checked first).

    A digest given as ``None`` is not checked; a missing file raises :class:`DatasetMissing`.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetMissing(f"{path} does not exist")
    wanted = {kind: want for kind, want in (("md5", md5), ("sha256", expected)) if want is not None}
    hashes = {kind: hashlib.new(kind) for kind in wanted}
    with open(path, "rb") as fh:
        while hashes and (block := fh.read(1 << 20)):
            for h in hashes.values():
                h.update(block)
    for kind, want in wanted.items():
        if (found := hashes[kind].hexdigest()) != want:
            raise DatasetError(
                f"checksum mismatch for {path}: expected {kind} {want}, found {found}. "
                "The file is corrupt or truncated; delete it and fetch it again."
            )


def _temp_beside(path: Path, suffix: str) -> tuple[int, str]:
    """A new temporary file beside ``path`` (folder created if needed); :class:`DataFolderError` if it cannot be."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=suffix)
    except OSError as exc:
        raise DataFolderError(
            f"cannot write {path} ({exc.strerror or exc}); make {path.parent} writable or "
            "point MMTOKEN_DATA at a writable folder"
        ) from None


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename; :class:`DataFolderError` if it cannot be."""
    path = Path(path)
    fd, tmp = _temp_beside(path, ".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; caches are ordinary readable files
        os.replace(tmp, path)
    except OSError as exc:  # full disk (ENOSPC), file-size limit (EFBIG), quota, a folder in the way
        raise DataFolderError(
            f"cannot write {path} ({exc.strerror or exc}); free space in {path.parent} or "
            "point MMTOKEN_DATA at another folder"
        ) from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class _Watch:
    """The sockets of one download; :meth:`expire` shuts them down (from a timer thread).

    A per-read timeout does not bound a server that trickles one byte at a time, headers
    included; shutting the socket down does: the read in progress returns or fails at once.
    """

    def __init__(self):
        self.socks: list = []
        self.expired = False
        self.lock = threading.Lock()

    def add(self, sock) -> None:
        with self.lock:
            self.socks.append(sock)
            if self.expired:
                self._shut(sock)

    def expire(self) -> None:
        with self.lock:
            self.expired = True
            for sock in self.socks:
                self._shut(sock)

    @staticmethod
    def _shut(sock) -> None:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)


def _opener(watch: _Watch) -> urllib.request.OpenerDirector:
    """An opener whose connections register their sockets with ``watch`` (http and https)."""

    def watched(base):
        class Connection(base):
            def connect(self):
                super().connect()
                watch.add(self.sock)

        return Connection

    class HTTP(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(watched(http.client.HTTPConnection), req)

    class HTTPS(urllib.request.HTTPSHandler):
        def https_open(self, req):
            kw = {"context": self._context}
            if hasattr(self, "_check_hostname"):  # Python < 3.12
                kw["check_hostname"] = self._check_hostname
            return self.do_open(watched(http.client.HTTPSConnection), req, **kw)

    return urllib.request.build_opener(HTTP, HTTPS)


def _content_length(resp) -> int | None:
    """The announced body size, or None (absent, malformed, a chunked body, not an HTTP response)."""
    headers = getattr(resp, "headers", None)  # None: a file: URL, a stand-in
    if headers is None or "chunked" in (headers.get("Transfer-Encoding") or "").lower():
        return None
    try:
        n = int(headers.get("Content-Length"))
    except (TypeError, ValueError):  # absent, malformed
        return None
    return n if n >= 0 else None


def download_file(
    url: str,
    dest: str | os.PathLike,
    *,
    check: Callable[[Path], None] | None = None,
    timeout: float = 30.0,
    deadline: float = DOWNLOAD_DEADLINE,
    missing_note: str = "",
) -> Path:
    """Download ``url`` to ``dest`` through a ``*.part`` file; ``check(part)`` before the rename.

    Parameters
    ----------
    timeout : seconds any single wait for the server may take (connection, each read).
    deadline : seconds the whole download may take, headers included (the connection
        is then shut down, so a server trickling headers or body is cut off).
    check : raises (e.g. :class:`DatasetError` on a checksum mismatch) to refuse the bytes.
        A body shorter than its ``Content-Length`` is refused in any case.
    missing_note : appended to the :class:`DatasetMissing` message.

    Raises
    ------
    DatasetMissing when the address cannot be reached, a wait times out, the deadline
    passes or the body is cut short; whatever ``check`` raises. ``dest`` is then untouched.
    """
    timeout, deadline = positive(timeout, "timeout"), positive(deadline, "deadline")
    dest = Path(dest)
    fd, tmp = _temp_beside(dest, ".part")
    start = time.monotonic()
    received = 0
    watch = _Watch()
    timer = threading.Timer(deadline, watch.expire)
    timer.daemon = True
    timer.start()

    def late() -> DatasetMissing:
        return DatasetMissing(
            f"cannot download {url}: it did not finish within the deadline of "
            f"{deadline:.0f} s ({received:,} bytes received); try again later or "
            f"download it by hand. {missing_note}".rstrip()
        )

    try:
        with os.fdopen(fd, "wb") as fh:
            try:
                with _opener(watch).open(url, timeout=min(timeout, deadline)) as resp:
                    expected = _content_length(resp)
                    read = getattr(resp, "read1", resp.read)
                    while block := read(1 << 16):
                        fh.write(block)
                        received += len(block)
                        if watch.expired or time.monotonic() - start > deadline:
                            raise late()
                if watch.expired:  # the shutdown ended the body early: not a complete file
                    raise late()
                if expected is not None and received != expected:
                    raise DatasetMissing(
                        f"cannot download {url}: the body was cut short ({received:,} of the "
                        f"{expected:,} bytes announced); try again later. {missing_note}".rstrip()
                    )
            except DatasetMissing:
                raise
            except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
                if watch.expired:
                    raise late() from None
                raise DatasetMissing(f"cannot download {url}: {exc}. {missing_note}".rstrip()) from exc
        if check is not None:
            check(Path(tmp))
        os.replace(tmp, dest)
    finally:
        timer.cancel()
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def read_bounded(path: str | os.PathLike, limit: int | None, gz: bool = False, chunk: int = 1 << 20) -> bytes:
    """The bytes of ``path`` (decompressed, streamed, if ``gz``), at most ``limit + 1`` of them (``None``: all).

    A gzip bomb (or any oversized file) then costs ``limit + 1`` bytes of memory and fails its
    checksum. Raises :class:`OSError`, :class:`EOFError` or :class:`gzip.BadGzipFile` as :mod:`gzip` does.
    """
    import gzip

    left = float("inf") if limit is None else int(limit) + 1
    parts = []
    with gzip.open(path, "rb") if gz else open(path, "rb") as fh:
        while left > 0 and (block := fh.read(min(chunk, left))):
            parts.append(block)
            left -= len(block)
    return b"".join(parts)


def url_host(url: str) -> str:
    """``host[:port]`` of ``url`` (what a source statement names; the path adds nothing a reader needs)."""
    return urllib.parse.urlsplit(url).netloc or url


def fit_line(line: str, width: int = LINE_WIDTH) -> str:
    """``line`` cut to ``width`` characters, ending in ``...`` when cut (a long host name must not wrap the line)."""
    width = count(width, "width", minimum=4)
    if not isinstance(line, str):
        raise ValueError(f"line must be a string, got {type(line).__name__}")
    return line if len(line) <= width else line[: width - 3] + "..."


def read_origins(folder: str | os.PathLike) -> dict[str, dict]:
    """The origin record of a cache folder: ``{file name: {"origin": str, "url": str | None}}``.

    An unreadable record is an empty one: it never vouches for the files (their checksums do).
    """
    path = Path(folder) / ORIGIN_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict) and isinstance(v.get("origin"), str)}


def record_origin(folder: str | os.PathLike, files: dict[str, str], url: str | None = None) -> None:
    """Record (atomically) that ``files`` in ``folder`` came from where they say.

    Parameters
    ----------
    folder : the cache folder holding the files.
    files : file name -> a short phrase, e.g. ``"Debian package dataset-fashion-mnist"``.
    url : the address the bytes were downloaded from, when they were.
    """
    if not files:
        return
    record = read_origins(folder)
    for name, origin in files.items():
        record[name] = {"origin": origin, "url": url}
    atomic_write_bytes(Path(folder) / ORIGIN_FILE, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())


def download_verified(
    url: str, dest: str | os.PathLike, sha256: str, timeout: float = 30.0, deadline: float | None = None
) -> Path:
    """:func:`download_file` refusing bytes whose SHA-256 is not ``sha256`` (:class:`DatasetError`, ``dest`` untouched).

    ``deadline`` is :data:`DOWNLOAD_DEADLINE` by default.
    """
    deadline = DOWNLOAD_DEADLINE if deadline is None else deadline
    return download_file(url, dest, check=lambda part: verify_sha256(part, sha256), timeout=timeout, deadline=deadline)
