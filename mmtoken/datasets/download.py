"""Where data comes from, how it is verified and where it is cached.

Every reader in :mod:`mmtoken.datasets` follows the same rules:

* files are verified by SHA-256 before use; a mismatch raises :class:`DatasetError`
  naming the file, the expected and the found digest;
* caches are written atomically (temporary file, then rename): a failure never
  leaves a truncated cache nor overwrites a good one;
* a dataset that is not on disk and cannot be fetched raises :class:`DatasetMissing`
  with instructions; no other dataset is substituted;
* downloads have a connection timeout *and* an overall deadline, and a size bound (the
  registered size): a larger announced or sent body is refused, the reading stops at the bound;
  decompression is bounded the same way (:func:`read_bounded`);
* a download that is not the file (truncated, too long, a web page, a wrong checksum) raises
  :class:`DatasetError` saying so and what to run again; nothing of it is kept;
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
import tempfile
import threading
import time
import urllib.error
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from mmtoken.config import data_dir
from mmtoken.datasets import registered, transfer
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


def verify_sha256(
    path: str | os.PathLike,
    expected: str | None,
    *,
    md5: str | None = None,
    name: str | None = None,
    fix: str | None = None,
) -> None:
    """Raise :class:`DatasetError` unless ``path`` has SHA-256 ``expected`` and MD5 ``md5`` (checked first).

    A digest given as ``None`` is not checked; a missing file raises :class:`DatasetMissing`.
    ``name`` is what the message calls the file and ``fix`` what it says to do: by default the path and
    "delete it and fetch it again", or, for the ``.part`` file of a download being checked, its address
    and that nothing was kept.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetMissing(f"{path} does not exist")
    name, fix = _described(path, name, fix, "The file is corrupt or truncated; delete it and fetch it again.")
    wanted = {kind: want for kind, want in (("md5", md5), ("sha256", expected)) if want is not None}
    hashes = {kind: hashlib.new(kind) for kind in wanted}
    with open(path, "rb") as fh:
        while hashes and (block := fh.read(1 << 20)):
            for h in hashes.values():
                h.update(block)
    for kind, want in wanted.items():
        if (found := hashes[kind].hexdigest()) != want:
            raise DatasetError(f"checksum mismatch for {name}: expected {kind} {want}, found {found}. {fix}")


_CHECKING: dict[str, tuple[str, str]] = {}
"""The ``.part`` file a download's check is reading -> (its address, what to run again): an error names
those, not a file deleted before the reader sees the message."""


def _described(path: str | os.PathLike, name: str | None, fix: str | None, default_fix: str) -> tuple[str, str]:
    """What an error about ``path`` calls it and says to do (``name`` and ``fix`` win when given)."""
    url, again = _CHECKING.get(os.path.abspath(path), (None, ""))
    if url is None:
        return name or str(path), fix or default_fix
    return name or url, fix or f"The download is not the registered file; nothing was kept; {again}."


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


def download_file(
    url: str,
    dest: str | os.PathLike,
    *,
    check: Callable[[Path], None] | None = None,
    timeout: float = 30.0,
    deadline: float = DOWNLOAD_DEADLINE,
    max_bytes: int | None = None,
    missing_note: str = "",
    retry: str = "",
) -> Path:
    """Download ``url`` to ``dest`` through a ``*.part`` file; ``check(part)`` before the rename.

    Parameters
    ----------
    timeout : seconds any single wait for the server may take (connection, each read).
    deadline : seconds the whole download may take, headers included (the connection
        is then shut down, so a server trickling headers or body is cut off).
    check : raises (e.g. :class:`DatasetError` on a checksum mismatch) to refuse the bytes.
    max_bytes : the most bytes the file can have; ``None``: the registered size of a file saved under
        ``dest``'s name (:func:`mmtoken.datasets.registered.size`), no bound if none is registered.
        A server announcing more (``Content-Length``) is refused before the body is read, and the reading
        stops at the first byte past the bound.
    missing_note : appended to the :class:`DatasetMissing` message.
    retry : what to run to download it again, for the :class:`DatasetError` messages; by default what
        :func:`mmtoken.datasets.registered.retry` says for ``dest``'s name.

    Raises
    ------
    DatasetMissing
        the address cannot be reached, a wait times out or the deadline passes.
    DatasetError
        the server's bytes are not the file: more than ``max_bytes`` (announced or sent), fewer
        than announced (a truncated body), a web page where ``check`` refuses the bytes (a captive
        portal), or whatever ``check`` raises. Nothing is kept: ``dest`` is untouched and the
        ``.part`` file deleted.
    """
    timeout, deadline = positive(timeout, "timeout"), positive(deadline, "deadline")
    dest = Path(dest)
    max_bytes = registered.size(dest.name) if max_bytes is None else count(max_bytes, "max_bytes", minimum=1)
    again = retry or registered.retry(dest.name)
    fd, tmp = _temp_beside(dest, ".part")
    start = time.monotonic()
    received, head, kind = 0, b"", ""
    watch = transfer.Watch()
    timer = threading.Timer(deadline, watch.expire)
    timer.daemon = True
    timer.start()

    def late() -> DatasetMissing:
        return DatasetMissing(
            f"cannot download {url}: it did not finish within the deadline of "
            f"{deadline:.0f} s ({received:,} bytes received); try again later or "
            f"download it by hand. {missing_note}".rstrip()
        )

    def refused(why: str) -> DatasetError:
        return DatasetError(f"{url} did not serve the file: {why}. Nothing was kept; {again}.")

    def cut_short(expected: int | None) -> DatasetError:
        got = (
            f"{received:,} of the {expected:,} bytes announced"
            if expected is not None
            else f"{received:,} bytes received"
        )
        return refused(f"the download is incomplete, the body was cut short ({got})")

    try:
        with os.fdopen(fd, "wb") as fh:
            try:
                with transfer.opener(watch).open(url, timeout=min(timeout, deadline)) as resp:
                    expected, kind = transfer.content_length(resp), transfer.content_type(resp)
                    if max_bytes is not None and expected is not None and expected > max_bytes:
                        raise refused(
                            f"it announced {expected:,} bytes (Content-Length), more than the {max_bytes:,} "
                            "the registered file can have; no byte of the body was read"
                        )
                    read = getattr(resp, "read1", resp.read)
                    while block := read(1 << 16):
                        head = head or block[:512]
                        fh.write(block)
                        received += len(block)
                        if max_bytes is not None and received > max_bytes:
                            raise refused(
                                f"it sent more than the {max_bytes:,} bytes the registered file can have; "
                                "the reading stopped there"
                            )
                        if watch.expired or time.monotonic() - start > deadline:
                            raise late()
                if watch.expired:  # the shutdown ended the body early: not a complete file
                    raise late()
                if expected is not None and received != expected:
                    raise cut_short(expected)
            except (DatasetMissing, DatasetError):
                raise
            except http.client.IncompleteRead:  # a chunked body that ends mid-chunk
                if watch.expired:
                    raise late() from None
                raise cut_short(None) from None
            except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
                if watch.expired:
                    raise late() from None
                raise DatasetMissing(f"cannot download {url}: {exc}. {missing_note}".rstrip()) from exc
        portal = (
            "it returned a web page (HTML), as a captive portal or a login page does in the file's place "
            "(open any web page in a browser to pass it)"
        )
        _CHECKING[os.path.abspath(tmp)] = (url, again)
        try:
            if check is not None:
                check(Path(tmp))
            elif transfer.looks_like_html(head, kind):
                raise refused(portal)
        except DatasetError as exc:
            if check is not None and transfer.looks_like_html(head, kind):
                raise refused(portal) from exc
            raise
        os.replace(tmp, dest)
    finally:
        _CHECKING.pop(os.path.abspath(tmp), None)
        timer.cancel()
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def read_bounded(
    path: str | os.PathLike, limit: int | None, gz: bool = False, chunk: int = 1 << 20, *, name: str | None = None
) -> bytes | bytearray:
    """The bytes of ``path`` (decompressed, streamed, if ``gz``): at most ``limit`` of them (``None``: all).

    The content is decompressed ``chunk`` bytes at a time into one buffer of ``limit`` bytes, so a
    gzip bomb (or any oversized file) costs about ``limit + chunk`` bytes of memory before it is refused.
    ``name`` is what the error calls the file (``path``, or a download's address, by default).

    Raises
    ------
    DatasetError
        the content holds more than ``limit`` bytes (the reading stopped at the first byte past it).
    OSError, EOFError, gzip.BadGzipFile
        as :mod:`gzip` raises them (not a gzip file, a truncated one).
    """
    import gzip

    chunk = count(chunk, "chunk", minimum=1)
    with gzip.open(path, "rb") if gz else open(path, "rb") as fh:
        if limit is None:
            return fh.read()
        limit = count(limit, "limit")
        buf, n = bytearray(limit), 0
        with memoryview(buf) as view:
            while n < limit and (k := fh.readinto(view[n : min(n + chunk, limit)])):
                n += k
        if n == limit and fh.read(1):
            del buf
            decompressed = " once decompressed" if gz else ""
            name, fix = _described(path, name, None, "Delete it, or put the published file in its place.")
            raise DatasetError(
                f"{name} holds more than {limit:,} bytes{decompressed}, the most the expected file has: "
                f"it is not that file (the reading stopped there). {fix}"
            )
    del buf[n:]
    return buf


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
    url: str,
    dest: str | os.PathLike,
    sha256: str,
    timeout: float = 30.0,
    deadline: float | None = None,
    *,
    size: int | None = None,
    retry: str = "",
) -> Path:
    """:func:`download_file` refusing bytes whose SHA-256 is not ``sha256`` (:class:`DatasetError`, ``dest`` untouched).

    ``deadline`` is :data:`DOWNLOAD_DEADLINE` by default; ``size`` bounds the download (``max_bytes``: by
    default the registered size of ``dest``'s name); ``retry`` says what to run to download it again.
    """
    deadline = DOWNLOAD_DEADLINE if deadline is None else deadline
    return download_file(
        url,
        dest,
        check=lambda part: verify_sha256(part, sha256),
        timeout=timeout,
        deadline=deadline,
        max_bytes=size,
        retry=retry,
    )
