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
]

import hashlib
import http.client
import json
import os
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ..config import data_dir

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
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class _Deadline(Exception):
    pass


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
    deadline : seconds the whole download may take; a server that keeps sending a few
        bytes a second is cut off after about ``deadline`` (plus at most one ``timeout``).
    check : raises (e.g. :class:`DatasetError` on a checksum mismatch) to refuse the bytes.
    missing_note : appended to the :class:`DatasetMissing` message.

    Raises
    ------
    DatasetMissing when the address cannot be reached, a wait times out or the
    deadline passes; whatever ``check`` raises. ``dest`` is left as it was in every case.
    """
    if not (timeout > 0 and deadline > 0):
        raise ValueError(f"timeout and deadline must be positive, got {timeout}, {deadline}")
    dest = Path(dest)
    fd, tmp = _temp_beside(dest, ".part")
    start = time.monotonic()
    received = 0
    try:
        with os.fdopen(fd, "wb") as fh:
            try:
                with urllib.request.urlopen(url, timeout=min(timeout, deadline)) as resp:
                    read = getattr(resp, "read1", resp.read)
                    while True:
                        if time.monotonic() - start > deadline:
                            raise _Deadline()
                        block = read(1 << 16)
                        if not block:
                            break
                        fh.write(block)
                        received += len(block)
            except _Deadline:
                raise DatasetMissing(
                    f"cannot download {url}: it did not finish within the deadline of "
                    f"{deadline:.0f} s ({received:,} bytes received); try again later or "
                    f"download it by hand. {missing_note}".rstrip()
                ) from None
            except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
                raise DatasetMissing(f"cannot download {url}: {exc}. {missing_note}".rstrip()) from exc
        if check is not None:
            check(Path(tmp))
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def url_host(url: str) -> str:
    """``host[:port]`` of ``url`` (what a source statement names; the path adds nothing a reader needs)."""
    return urllib.parse.urlsplit(url).netloc or url


def fit_line(line: str, width: int = LINE_WIDTH) -> str:
    """``line`` cut to ``width`` characters, ending in ``...`` when cut.

    Source statements are printed in chapters whose output column is
    :data:`LINE_WIDTH` wide; a long host name must not wrap the line.
    """
    if width < 4:
        raise ValueError(f"width must be at least 4, got {width}")
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
