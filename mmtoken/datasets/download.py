"""Where data comes from, how it is verified and where it is cached.

Every reader in :mod:`mmtoken.datasets` follows the same rules:

* files are verified by SHA-256 before use; a mismatch raises
  :class:`DatasetError` naming the file, the expected and the found digest;
* derived caches are written atomically (temporary file, then rename), so a
  failure never leaves a truncated cache and never overwrites a good one;
* a dataset that is not on disk and cannot be fetched raises
  :class:`DatasetMissing` with instructions; no other dataset is substituted;
* downloads have a connection timeout *and* an overall deadline, so a server
  that trickles bytes cannot hold a fetch forever;
* leftovers of interrupted writes (``*.part``, ``*.tmp``) are swept by the
  next fetch once they are older than :data:`STALE_SECONDS`;
* a folder that cannot be written raises :class:`DataFolderError` naming it;
* where each cached file came from (a system package, a folder, a download)
  is recorded next to it (:func:`record_origin`), so a chapter can say which
  source it used, the same on every later run that reads the cache.
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
    """``data/<name>/``; not created here (asking for a path writes nothing): the writers
    (:func:`atomic_write_bytes`, :func:`download_file`) create the folders of what they write."""
    path = data_dir() / name
    if path.exists() and not path.is_dir():
        raise DataFolderError(f"the data folder {path} is a file; remove it or point MMTOKEN_DATA elsewhere")
    return path


def sweep_partial(folder: str | os.PathLike, max_age: float = STALE_SECONDS, recursive: bool = False) -> list[Path]:
    """Delete ``*.part`` and ``*.tmp`` files in ``folder`` not modified for ``max_age`` seconds.

    They are what an interrupted download or cache write leaves behind (a
    live one keeps touching its file, so it is not swept). Returns the paths removed.
    """
    if isinstance(max_age, bool) or not isinstance(max_age, numbers.Real) or not max_age >= 0:
        raise ValueError(f"max_age must be a number of seconds >= 0, got {max_age!r}")
    folder = Path(folder)
    if not folder.is_dir():
        return []
    now, removed = time.time(), []
    for pattern in ("*.part", "*.tmp"):
        for path in folder.rglob(pattern) if recursive else folder.glob(pattern):
            try:
                if path.is_file() and now - path.stat().st_mtime >= max_age:
                    path.unlink()
                    removed.append(path)
            except OSError:  # gone meanwhile, or not ours to delete: leave it
                continue
    return removed


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def verify_sha256(path: str | os.PathLike, expected: str) -> None:
    """Raise :class:`DatasetError` unless ``path`` has SHA-256 ``expected``."""
    path = Path(path)
    if not path.is_file():
        raise DatasetMissing(f"{path} does not exist")
    found = sha256_file(path)
    if found != expected:
        raise DatasetError(
            f"checksum mismatch for {path}: expected sha256 {expected}, found {found}. "
            "The file is corrupt or truncated; delete it and fetch it again."
        )


def _temp_beside(path: Path, suffix: str) -> tuple[int, str]:
    """A new temporary file in ``path``'s folder (created if needed), to be renamed onto ``path``.

    Raises :class:`DataFolderError` naming ``path`` when the folder cannot be written.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=suffix)
    except OSError as exc:
        raise DataFolderError(
            f"cannot write {path} ({exc.strerror or exc}); make {path.parent} writable or "
            "point MMTOKEN_DATA at a writable folder"
        ) from None


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    Raises :class:`DataFolderError` when the folder cannot be written (``path`` is then untouched).
    """
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


class _Deadline(Exception):
    pass


class _Watch:
    """The sockets of one download; :meth:`expire` shuts them down (from a timer thread).

    A per-read socket timeout does not bound a server that trickles one byte at a
    time, headers included; shutting the socket down at the deadline does: the
    read in progress returns or fails at once, wherever it is.
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
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed
            pass


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
    """The announced body size, or None (absent, malformed, or a chunked body)."""
    headers = getattr(resp, "headers", None)
    if headers is None:  # not an HTTP response (a file: URL, a stand-in)
        return None
    value = headers.get("Content-Length")
    if value is None or "chunked" in (headers.get("Transfer-Encoding") or "").lower():
        return None
    try:
        n = int(value)
    except ValueError:
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
    deadline : seconds the whole download may take, headers included: at the deadline
        the connection is shut down wherever the transfer is, so a server that trickles
        a few bytes a second (of headers or body) is cut off after about ``deadline``.
    check : raises (e.g. :class:`DatasetError` on a checksum mismatch) to refuse the bytes.
        Whatever ``check`` is, a body shorter than its ``Content-Length`` is refused.
    missing_note : appended to the :class:`DatasetMissing` message.

    Raises
    ------
    DatasetMissing when the address cannot be reached, a wait times out, the
    deadline passes or the body is cut short; whatever ``check`` raises. ``dest``
    is left as it was in every case.
    """
    for name, value in (("timeout", timeout), ("deadline", deadline)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (0 < value < float("inf")):
            raise ValueError(f"{name} must be a positive finite number of seconds, got {value!r}")
    dest = Path(dest)
    fd, tmp = _temp_beside(dest, ".part")
    start = time.monotonic()
    received = 0
    watch = _Watch()
    timer = threading.Timer(deadline, watch.expire)
    timer.daemon = True
    timer.start()
    try:
        with os.fdopen(fd, "wb") as fh:
            try:
                with _opener(watch).open(url, timeout=min(timeout, deadline)) as resp:
                    expected = _content_length(resp)
                    read = getattr(resp, "read1", resp.read)
                    while True:
                        if watch.expired or time.monotonic() - start > deadline:
                            raise _Deadline()
                        block = read(1 << 16)
                        if not block:
                            break
                        fh.write(block)
                        received += len(block)
                if watch.expired:  # the shutdown ended the body early: not a complete file
                    raise _Deadline()
                if expected is not None and received != expected:
                    raise DatasetMissing(
                        f"cannot download {url}: the body was cut short ({received:,} of the "
                        f"{expected:,} bytes announced); try again later. {missing_note}".rstrip()
                    )
            except _Deadline:
                raise DatasetMissing(
                    f"cannot download {url}: it did not finish within the deadline of "
                    f"{deadline:.0f} s ({received:,} bytes received); try again later or "
                    f"download it by hand. {missing_note}".rstrip()
                ) from None
            except DatasetMissing:
                raise
            except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
                if watch.expired:
                    raise DatasetMissing(
                        f"cannot download {url}: it did not finish within the deadline of "
                        f"{deadline:.0f} s ({received:,} bytes received); try again later or "
                        f"download it by hand. {missing_note}".rstrip()
                    ) from None
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
    """The bytes of ``path`` (decompressed, streamed, if ``gz``), at most ``limit + 1`` of them.

    A file known to hold ``limit`` bytes is read no further than one byte past that,
    so a gzip bomb (or any oversized file) costs ``limit + 1`` bytes of memory and
    then fails its checksum. ``limit=None`` reads everything. Raises :class:`OSError`,
    :class:`EOFError` or :class:`gzip.BadGzipFile` as :mod:`gzip` does.
    """
    import gzip

    cap = None if limit is None else int(limit) + 1
    parts, size = [], 0
    with gzip.open(path, "rb") if gz else open(path, "rb") as fh:
        while cap is None or size < cap:
            block = fh.read(chunk if cap is None else min(chunk, cap - size))
            if not block:
                break
            parts.append(block)
            size += len(block)
    return b"".join(parts)


def url_host(url: str) -> str:
    """``host[:port]`` of ``url`` (what a source statement names; the path adds nothing a reader needs)."""
    return urllib.parse.urlsplit(url).netloc or url


def fit_line(line: str, width: int = LINE_WIDTH) -> str:
    """``line`` cut to ``width`` characters, ending in ``...`` when cut.

    Source statements are printed in chapters whose output column is
    :data:`LINE_WIDTH` wide; a long host name must not wrap the line.
    """
    if isinstance(width, bool) or not isinstance(width, numbers.Integral) or width < 4:
        raise ValueError(f"width must be an integer of at least 4, got {width!r}")
    if not isinstance(line, str):
        raise ValueError(f"line must be a string, got {type(line).__name__}")
    return line if len(line) <= width else line[: width - 3] + "..."


def read_origins(folder: str | os.PathLike) -> dict[str, dict]:
    """The origin record of a cache folder: ``{file name: {"origin": str, "url": str | None}}``.

    An absent or unreadable record is an empty one: the record only says where
    files came from, it never vouches for them (their checksums do).
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
    """Record that ``files`` (``{file name: origin}``) in ``folder`` came from the stated origin.

    The record is rewritten atomically, so an interrupted write leaves the old one.

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
    """Download ``url`` to ``dest`` through a temporary file; verify before renaming.

    ``timeout`` bounds each wait for the server, ``deadline`` (default
    :data:`mmtoken.datasets.download.DOWNLOAD_DEADLINE`) the whole download.
    Raises :class:`DatasetMissing` when the address cannot be reached, a wait
    times out or the deadline passes, and :class:`DatasetError` when the bytes
    received have the wrong checksum (``dest`` is then left as it was).
    """
    kw = {} if deadline is None else {"deadline": deadline}
    return download_file(url, dest, check=lambda part: verify_sha256(part, sha256), timeout=timeout, **kw)
