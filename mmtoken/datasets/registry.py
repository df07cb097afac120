"""Where data comes from, how it is verified and where it is cached.

Every reader in :mod:`mmtoken.datasets` follows the same rules:

* files are verified by SHA-256 before use; a mismatch raises
  :class:`DatasetError` naming the file, the expected and the found digest;
* derived caches are written atomically (temporary file, then rename), so a
  failure never leaves a truncated cache and never overwrites a good one;
* a dataset that is not on disk and cannot be fetched raises
  :class:`DatasetMissing` with instructions; no other dataset is substituted.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from ..config import data_dir


class DatasetError(RuntimeError):
    """A data file exists but is wrong: checksum, truncation, format."""


class DatasetMissing(FileNotFoundError):
    """A dataset is not available here; the message says how to get it."""


def cache_dir(name: str) -> Path:
    """``data/<name>/``, created if needed."""
    path = data_dir() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


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


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; caches are ordinary readable files
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
