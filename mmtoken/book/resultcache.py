"""A results cache that knows what it holds.

A computed result (named arrays and a JSON-able note) is stored as one ``.npz`` file whose header
records its **name** (e.g. ``real_reviews/imdb/seed10``: a file copied over another's path is recognised
as the wrong result), its **fingerprint** (a digest of the code that computed it, its configuration and
its input data: :func:`fingerprint`) and the **shape and dtype** of every array. :func:`load_or_compute`
returns the stored result only if all three match, else recomputes it and replaces the file atomically.
Nothing is unpickled (``allow_pickle=False``).

It is the package's one: the claims ledger (:func:`mmtoken.book.ledger.recorded`), the experiments
(:func:`experiment_result`) and the real-review runs (:mod:`mmtoken.embeddings.review_seeds` and its
siblings) store their results here, keyed by the code their computation calls
(:mod:`mmtoken.book.fingerprint`: definitions, not modules; never plotting, caching or download code), so a
change in an unrelated chapter or in a figure leaves a result valid. A result that is a folder of files (the
ViT runs of chapter 9, :mod:`mmtoken.vision.vit_runs`) is a *folder result*: built in a temporary folder,
closed by a manifest (:func:`write_manifest`), moved into place in one rename (:func:`commit_folder`) under
its key (:func:`folder_key`), and read back only after :func:`check_folder`.

Two processes that ask for the same missing result (two pytest-xdist workers, a notebook kernel and a
test) do not both compute it: :func:`load_or_compute` holds a file lock per result (:func:`locked`).
"""

from __future__ import annotations

__all__ = [
    "FORMAT",
    "HEADER",
    "STALE_SECONDS",
    "CacheError",
    "StaleResult",
    "fingerprint",
    "save",
    "load",
    "MANIFEST",
    "folder_key",
    "write_manifest",
    "read_json",
    "check_folder",
    "check_file",
    "commit_folder",
    "sweep",
    "locked",
    "load_or_compute",
    "stored",
    "save_record",
    "read_record",
    "record_once",
    "settings_name",
    "experiment_result",
]

import hashlib
import io
import json
import os
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from mmtoken.datasets.download import DataFolderError, atomic_write_bytes, sha256_file

FORMAT = 1
HEADER = "__header__"
STALE_SECONDS = 600.0
"""A temporary file older than this is a leftover of an interrupted write (a live write takes seconds)."""
Stored = tuple[dict[str, np.ndarray], dict]
"""A result as :func:`save` stores it: named arrays and a JSON-able note."""


class CacheError(RuntimeError):
    """A cache file is damaged or holds something other than what was asked for."""


class StaleResult(CacheError):
    """A well-formed result of the asked name, computed by other code, configuration or data: the normal
    state of a result after its code has been edited (replaced without a warning)."""


def fingerprint(code: str, config: dict, data: str) -> str:
    """Digest of a code fingerprint, a JSON-able configuration and a data fingerprint."""
    payload = json.dumps({"code": code, "config": config, "data": data, "format": FORMAT}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def save(path: str | os.PathLike, name: str, fp: str, arrays: dict[str, np.ndarray], meta: dict) -> None:
    """Write ``arrays`` and ``meta`` under ``name`` and fingerprint ``fp``, atomically."""
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    for k, v in arrays.items():
        if k == HEADER or v.dtype == object:
            raise ValueError(f"array {k!r} cannot be cached (reserved name or object dtype)")
    header = {
        "format": FORMAT,
        "name": name,
        "fingerprint": fp,
        "meta": meta,
        "shapes": {k: list(v.shape) for k, v in arrays.items()},
        "dtypes": {k: v.dtype.str for k, v in arrays.items()},
    }
    buf = io.BytesIO()
    np.savez_compressed(buf, **{HEADER: np.array(json.dumps(header))}, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def load(path: str | os.PathLike, name: str, fp: str, expect: dict[str, tuple] | None = None) -> Stored:
    """Read a result written by :func:`save`; raise :class:`CacheError` unless it is ``name`` at ``fp``.

    ``expect`` maps array names to required shapes (``None`` for a free
    dimension); every listed array must be present with that shape.
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(str(z[HEADER]))
            arrays = {k: z[k] for k in z.files if k != HEADER}
    except Exception as exc:  # truncated zip, missing header, bad JSON, pickled content
        raise CacheError(f"{path} is damaged ({type(exc).__name__}: {exc})") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CacheError(f"{path} has an unknown format")
    if header.get("name") != name:
        raise CacheError(f"{path} holds {header.get('name')!r}, not {name!r}")
    if header.get("fingerprint") != fp:
        raise StaleResult(f"{path} was computed by other code, configuration or data than asked for")
    shapes, dtypes = header.get("shapes", {}), header.get("dtypes", {})
    if set(shapes) != set(arrays):
        raise CacheError(f"{path} lacks arrays {sorted(set(shapes) - set(arrays))} or has unlisted ones")
    for k, v in arrays.items():
        if list(v.shape) != shapes[k] or v.dtype.str != dtypes.get(k):
            raise CacheError(
                f"{path}: array {k!r} has shape {v.shape} / dtype {v.dtype}, "
                f"recorded {tuple(shapes[k])} / {dtypes.get(k)}"
            )
    for k, shape in (expect or {}).items():
        if k not in arrays:
            raise CacheError(f"{path} lacks the array {k!r}")
        got = arrays[k].shape
        if len(got) != len(shape) or any(s is not None and s != g for s, g in zip(shape, got)):
            raise CacheError(f"{path}: array {k!r} has shape {got}, expected {shape}")
    return arrays, header.get("meta", {})


# --------------------------------------------------------------------------- results that are folders
MANIFEST = "manifest.json"


def folder_key(name: str, version: int, fp: dict[str, str]) -> str:
    """The folder name of a folder result: 16 hex digits of the digest of its name, version and fingerprint."""
    blob = json.dumps({"name": name, "version": version, **fp}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def write_manifest(folder: str | os.PathLike, name: str, version: int, fp: dict[str, str]) -> dict:
    """Write ``manifest.json`` into ``folder`` (last): the result's name, version, key (the folder's
    final name, see :func:`commit_folder`), fingerprint and the SHA-256 and size of every file in it."""
    folder = Path(folder)
    files = {p.name: {"sha256": sha256_file(p), "bytes": p.stat().st_size} for p in sorted(folder.iterdir())}
    manifest = {"name": name, "version": version, "key": folder_key(name, version, fp), "fingerprint": fp}
    manifest["files"] = files
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def read_json(path: str | os.PathLike) -> dict:
    """A JSON object from ``path``; :class:`CacheError` (the reason, naming the file) otherwise."""
    path = Path(path)
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError:
        raise CacheError(f"{path.name} is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CacheError(f"{path.name} is not readable JSON ({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise CacheError(f"{path.name} does not hold a JSON object")
    return value


def check_folder(
    path: str | os.PathLike, name: str, version: int, fp: dict[str, str] | None = None, need: tuple[str, ...] = ()
) -> dict:
    """The manifest of folder result ``path``, checked: its name, version, key (the folder was not
    renamed), fingerprint (when ``fp`` is given), the files ``need`` listed, every listed file present
    with its recorded size and SHA-256. Raises :class:`CacheError` with the reason otherwise."""
    path = Path(path)
    manifest = read_json(path / MANIFEST)
    if manifest.get("name") != name:
        raise CacheError(f"its manifest names {manifest.get('name')!r}, not {name!r}")
    if manifest.get("version") != version:
        raise CacheError(f"it is cache version {manifest.get('version')!r}, this code reads {version}")
    if manifest.get("key") != path.name:
        raise CacheError(f"its manifest is for key {manifest.get('key')!r}: the folder was copied or renamed")
    if fp is not None and manifest.get("fingerprint") != dict(fp):
        got = manifest.get("fingerprint") if isinstance(manifest.get("fingerprint"), dict) else {}
        parts = [k for k in sorted(set(got) | set(fp)) if got.get(k) != fp.get(k)]
        raise CacheError(f"it was made from another {', '.join(parts) or 'fingerprint'}")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise CacheError("its manifest lists no files")
    if set(need) - set(files):
        raise CacheError(f"its manifest lacks {sorted(set(need) - set(files))}")
    for file, rec in files.items():
        f = path / file
        if not f.is_file():
            raise CacheError(f"{file} is missing")
        if not isinstance(rec, dict) or f.stat().st_size != rec.get("bytes") or sha256_file(f) != rec.get("sha256"):
            raise CacheError(f"{file} does not match its recorded size and SHA-256 (truncated or altered)")
    return manifest


def check_file(path: str | os.PathLike, file: str) -> Path:
    """``path / file``, checked against the size and SHA-256 its folder's manifest records."""
    path = Path(path)
    rec = read_json(path / MANIFEST).get("files", {}).get(file)
    f = path / file
    if not f.is_file() or not isinstance(rec, dict) or sha256_file(f) != rec.get("sha256"):
        raise CacheError(f"{file} is missing or does not match its recorded SHA-256")
    return f


def commit_folder(tmp: str | os.PathLike, target: str | os.PathLike) -> None:
    """Move the finished folder ``tmp`` (its manifest written) to ``target`` in one rename, replacing a folder
    there; if another process put a complete result there first (the rename fails), that one is kept."""
    import shutil

    tmp, target = Path(tmp), Path(target)
    shutil.rmtree(target, ignore_errors=True)
    try:
        os.replace(tmp, target)
    except OSError:
        if not (target / MANIFEST).is_file():
            raise


def sweep(folder: str | os.PathLike, older_than: float = STALE_SECONDS) -> list[Path]:
    """Delete ``*.tmp`` / ``*.part`` files in ``folder`` older than ``older_than`` seconds; return them."""
    folder = Path(folder)
    now, gone = time.time(), []
    if not folder.is_dir():
        return gone
    for pattern in ("*.tmp", "*.part"):
        for f in folder.glob(pattern):
            try:
                if f.is_file() and now - f.stat().st_mtime > older_than:
                    f.unlink()
                    gone.append(f)
            except FileNotFoundError:  # removed meanwhile by another process
                pass
    return gone


@contextmanager
def locked(path: str | os.PathLike, timeout: float = -1) -> Iterator[None]:
    """Hold the lock of result ``path`` (the file ``.locks/<name>.lock`` next to it, created with its folders)
    while the block runs; another process asking for it waits (``timeout`` seconds; -1: as long as it
    takes). The empty lock file stays; the lock is released when the block ends or the process dies."""
    from filelock import FileLock  # a dependency of torch

    path = Path(path)
    folder = path.parent / ".locks"
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / (path.name + ".lock")), timeout=timeout):
        yield


def load_or_compute(
    path: str | os.PathLike, name: str, fp: str, compute: Callable[[], Stored], expect: dict[str, tuple] | None = None
) -> Stored:
    """The cached result ``name`` at ``fp`` from ``path``, or ``compute()`` it and store it there.

    A damaged file, or one holding another result, is reported (``RuntimeWarning`` naming the file and the
    reason) and replaced; a stale one (:class:`StaleResult`) silently, since editing the code makes every
    result it touches stale. While it computes, it holds the lock of ``path`` (:func:`locked`): a second
    process asking for the same result waits and then reads it.
    """
    path = Path(path)
    sweep(path.parent)
    if path.is_file():
        try:
            return load(path, name, fp, expect)
        except CacheError:
            pass  # reported below, under the lock (another process may be replacing it right now)
    with locked(path):
        if path.is_file():
            try:
                return load(path, name, fp, expect)
            except StaleResult:
                pass
            except CacheError as exc:
                warnings.warn(
                    f"ignoring the results cache: {exc}; recomputing {name} and replacing the file",
                    RuntimeWarning,
                    stacklevel=2,
                )
        arrays, meta = compute()
        save(path, name, fp, arrays, meta)
        return load(path, name, fp, expect)


def stored(path: str | os.PathLike, name: str, fp: str) -> bool:
    """Whether :func:`load` of ``name`` at ``fp`` from ``path`` would succeed (absent, damaged, other code: no)."""
    try:
        load(path, name, fp)
    except CacheError:
        return False
    return True


def save_record(path: str | os.PathLike, name: str, fp: str, meta: dict, what: str) -> None:
    """:func:`save` of a record (``meta``, no arrays); where the data folder cannot be written a ``RuntimeWarning``
    says that ``what`` was not recorded, and the result stands (the claims' and the competitors' records)."""
    try:
        save(path, name, fp, {}, meta)  # atomic: readers see the old record or the new one
    except (OSError, DataFolderError) as exc:
        warnings.warn(f"{what} not recorded ({exc})", RuntimeWarning, stacklevel=3)


def read_record(path: str | os.PathLike, name: str, fp: str, key: str) -> dict | None:
    """Entry ``key`` of the record at ``path``, or ``None`` where there is none for ``name`` at ``fp`` (absent,
    damaged, or of other code: each means the result is not yet known)."""
    if not Path(path).is_file():
        return None
    try:
        value = load(path, name, fp)[1][key]
    except (CacheError, KeyError):
        return None
    return value if isinstance(value, dict) else None


def record_once(path: str | os.PathLike, read: Callable[[], object], compute: Callable[[], object]):
    """``read()``'s record, else ``compute()`` (which records it) while holding the lock of ``path``, after one more
    ``read()``: another process computing the same record is waited for. Where no lock can be taken (a
    read-only data folder) ``compute()`` runs unlocked."""
    value = read()
    if value is not None:
        return value
    try:
        with locked(path):
            return read() or compute()
    except OSError:
        return compute()


def settings_name(name: str, settings) -> str:
    """``name`` for a chapter's default settings (``type(settings)()``), else ``name`` with a digest of
    ``settings``: a reader's other settings get a file of their own, and the defaults' result stays."""
    if settings == type(settings)():
        return name
    return f"{name}-{hashlib.sha256(repr(settings).encode()).hexdigest()[:8]}"


def experiment_result(
    module: str, name: str, config: dict, compute: Callable[[], Stored], expect: dict[str, tuple] | None = None
) -> Stored:
    """Result ``name`` of the experiment module ``module`` (``"mmtoken.chapters.ch02_global"``), from the
    results cache or computed now (:func:`load_or_compute`), as ``data/results/<x>/<name>.npz``.

    Keyed by the code ``compute`` calls (:func:`mmtoken.book.fingerprint.of`) and ``config``: put the scale
    and every input there (and the scale in ``name`` too where the inputs differ by scale, so that both
    scales keep their file).
    """
    from mmtoken.chapters import home_of
    from mmtoken.config import data_dir
    from mmtoken.book.fingerprint import of as code_of

    home = home_of(compute)
    if home is not None:  # run in a chapter's notebook: the generated module's file, or one of its own
        module = home.module or "notebook"
        if home.changed is not None:
            name = f"{name}-{home.changed[:8]}"
    short = module.rpartition(".")[2]

    fp = fingerprint(code_of(compute), config, "")  # the computation's code only (not plotting, caching)
    path = data_dir() / "results" / short / f"{name}.npz"
    # Only the cache's own reads and writes are guarded: an error raised inside ``compute``
    # (a DatasetMissing is a FileNotFoundError) propagates unchanged, and a result that was
    # computed is handed out even when it cannot be stored (full disk, file-size limit).
    state: dict = {}

    def tracked():
        state["started"] = True
        state["result"] = compute()
        return state["result"]

    try:
        return load_or_compute(path, f"{short}/{name}", fp, tracked, expect)
    except (OSError, DataFolderError) as exc:
        if state.get("started") and "result" not in state:  # raised by compute itself: not the cache's business
            raise
        warnings.warn(f"results cache not used for {short}/{name} ({exc})", RuntimeWarning, stacklevel=2)
        if "result" in state:  # computed; storing it (or reading it back) failed: keep it in memory
            arrays, meta = state["result"]
            return {k: np.asarray(v) for k, v in arrays.items()}, meta
    return compute()  # the cache could not be read or locked: compute, keep nothing
