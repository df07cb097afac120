"""The one store: every result that reaches the data folder goes through here.

A result is named arrays and a JSON-able note, stored as one ``.npz`` file (:func:`save`, nothing pickled) whose
header records its **name** (``real_reviews/imdb/seed10``: a file copied over another's path is recognised), its
**fingerprint** (a digest of the code that computed it, its configuration with the types of its values, and its
input data: :func:`fingerprint`), the **shape and dtype** of every array and how it was made (CPU and wall seconds,
machine, date). :func:`load` returns it only if all of that matches.

One file name: ``<data>/results/<owner>/<name>-<key>.npz`` (:func:`path_of`), ``owner`` the chapter or topic
that computes it (``02_global``, ``real_reviews``, ``vit``, ``text``), ``key`` 16 hex digits of the name and
the configuration's values *with their types* (:func:`canonical`: ``1000`` and ``1000.0`` are two settings and
two files). The code is in the header, not the name, so an edit replaces a result in place.

One call computes or reads a result: :func:`cached` (:func:`stored` says whether it would read one). It reads
the data folder, then the trained runs that travel with the repository (:func:`mmtoken.config.trained_dir`,
``book/trained/``: chapters 9 and 12, :mod:`mmtoken.book.trained`), and
computes only when neither holds the result for today's code. While it computes it holds one lock per result
(:func:`locked`), so two processes (two pytest-xdist workers, a kernel and a test) never compute it twice; the
file is replaced atomically, and leftovers of interrupted writes are swept by the one sweeper
(:func:`mmtoken.datasets.download.sweep_partial`).

The claims ledger's records (claim results and competitor verdicts) are results without arrays
(:func:`write_record`, :func:`read_record`, :func:`record_once`), written only by the book's own runs
(:func:`mmtoken.config.recording`). Every failure to trust a file is a :class:`CacheError`.
"""

from __future__ import annotations

__all__ = [
    "FORMAT",
    "HEADER",
    "CacheError",
    "StaleResult",
    "Stored",
    "canonical",
    "key",
    "fingerprint",
    "results_dir",
    "path_of",
    "machine",
    "save",
    "read_header",
    "load",
    "locked",
    "Entry",
    "entry",
    "cached",
    "stored",
    "write_record",
    "read_record",
    "record_once",
]

import dataclasses
import hashlib
import io
import json
import math
import os
import platform
import re
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np

from mmtoken.config import data_dir, recording, trained_dir
from mmtoken.datasets.download import DataFolderError, atomic_write_bytes, sweep_partial

FORMAT = 2
HEADER = "__header__"
Stored = tuple[dict[str, np.ndarray], dict]
"""A result as :func:`save` stores it: named arrays and a JSON-able note."""
_NAME = re.compile(r"^[A-Za-z0-9_.+-]+$")


class CacheError(RuntimeError):
    """A stored result cannot be trusted: damaged, of another result, or (:class:`StaleResult`) of other code."""


class StaleResult(CacheError):
    """A well-formed result of the asked name, computed by other code, configuration or data: the normal state of a
    result after its code has been edited (replaced without a warning)."""


# --------------------------------------------------------------------------- keys
def canonical(value: object) -> object:
    """``value`` as JSON that keeps its types: ``1000`` and ``1000.0``, ``(1, 2)`` and ``[1, 2]``, ``True`` and ``1``
    give different texts. Dataclasses by class name and fields, arrays by dtype, shape and the SHA-256 of their
    bytes; anything else is refused (``TypeError`` naming its type), never keyed by a ``repr`` that may change."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, (int, np.integer)) and not isinstance(value, np.bool_):
        return {"int": int(value)}
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return {"float": repr(v) if math.isfinite(v) else str(v)}
    if isinstance(value, np.bool_):
        return {"bool": bool(value)}
    if isinstance(value, (tuple, list)):
        return {type(value).__name__: [canonical(v) for v in value]}
    if isinstance(value, Mapping):
        return {"dict": [[canonical(k), canonical(v)] for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"dataclass": type(value).__qualname__, "fields": fields}
    if isinstance(value, np.ndarray):
        a = np.ascontiguousarray(value)
        return {"ndarray": [a.dtype.str, list(a.shape), hashlib.sha256(a.tobytes()).hexdigest()]}
    if hasattr(value, "detach") and hasattr(value, "numpy"):  # a torch tensor, without importing torch
        return canonical(value.detach().cpu().numpy())
    if isinstance(value, os.PathLike):
        return {"path": os.fspath(value)}
    raise TypeError(f"a result cannot be keyed on a {type(value).__qualname__} ({value!r:.60}): give its values")


def key(name: str, config: object) -> str:
    """16 hex digits naming the file of result ``name`` under configuration ``config`` (:func:`canonical`)."""
    blob = json.dumps({"name": name, "config": canonical(config), "format": FORMAT}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def fingerprint(code: str, config: object, data: str) -> str:
    """Digest of a code fingerprint (:func:`mmtoken.book.fingerprint.of`), a configuration (:func:`canonical`)
    and a data fingerprint: what a result's header must match."""
    blob = json.dumps({"code": code, "config": canonical(config), "data": data, "format": FORMAT}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def results_dir() -> Path:
    """``<data>/results``: where computed results live (not created until something is stored)."""
    return data_dir() / "results"


def path_of(owner: str, name: str, config: object, root: Path | None = None) -> Path:
    """``<root>/<owner>/<name>-<key>.npz`` (``root``: :func:`results_dir`): the one file name of every result."""
    for what, text in (("owner", owner), ("name", name)):
        parts = text.split("/")
        if not text or any(not _NAME.match(p) or p in (".", "..") for p in parts):
            raise ValueError(f"a result's {what} must be words of [A-Za-z0-9_.+-] joined by '/', got {text!r}")
    return (root if root is not None else results_dir()) / owner / f"{name}-{key(name, config)}.npz"


# --------------------------------------------------------------------------- one file
def machine() -> str:
    """The CPU model and core count: where a result was made."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def save(
    path: str | os.PathLike, name: str, fp: str, arrays: Mapping[str, object], meta: dict, made: dict | None = None
) -> None:
    """Write ``arrays`` and ``meta`` under ``name`` and fingerprint ``fp`` to ``path``, atomically; ``made``: how it
    was made (seconds, the code's roots), added to the header with the machine and the date."""
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    for k, v in arrays.items():
        if k == HEADER or v.dtype == object:
            raise ValueError(f"array {k!r} cannot be stored (reserved name or object dtype)")
    header = {
        "format": FORMAT,
        "name": name,
        "fingerprint": fp,
        "meta": meta,
        "shapes": {k: list(v.shape) for k, v in arrays.items()},
        "dtypes": {k: v.dtype.str for k, v in arrays.items()},
        "made": {**(made or {}), "machine": machine(), "date": time.strftime("%Y-%m-%d")},
    }
    buf = io.BytesIO()
    np.savez_compressed(buf, **{HEADER: np.array(json.dumps(header))}, **arrays)
    atomic_write_bytes(path, buf.getvalue())


def read_header(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """The header and arrays of a file written by :func:`save`, whatever result it holds; :class:`CacheError` if it
    is damaged or of another format."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(str(z[HEADER]))
            arrays = {k: z[k] for k in z.files if k != HEADER}
    except Exception as exc:  # truncated zip, missing header, bad JSON, pickled content
        raise CacheError(f"{path} is damaged ({type(exc).__name__}: {exc})") from exc
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CacheError(f"{path} has an unknown format")
    return header, arrays


def load(path: str | os.PathLike, name: str, fp: str | None, expect: Mapping[str, tuple] | None = None) -> Stored:
    """Read a result written by :func:`save`; raise :class:`CacheError` unless it is ``name`` at ``fp`` (``None``:
    any fingerprint). ``expect`` maps array names to required shapes (``None`` for a free dimension)."""
    path = Path(path)
    header, arrays = read_header(path)
    if header.get("name") != name:
        raise CacheError(f"{path} holds {header.get('name')!r}, not {name!r}")
    if fp is not None and header.get("fingerprint") != fp:
        raise StaleResult(f"{path} was computed by other code, configuration or data than asked for")
    shapes, dtypes = header.get("shapes", {}), header.get("dtypes", {})
    if set(shapes) != set(arrays):
        raise CacheError(f"{path} lacks arrays {sorted(set(shapes) - set(arrays))} or has unlisted ones")
    for k, v in arrays.items():
        if list(v.shape) != shapes[k] or v.dtype.str != dtypes.get(k):
            raise CacheError(f"{path}: array {k!r} has shape {v.shape} / dtype {v.dtype}, recorded {shapes[k]}")
    for k, shape in (expect or {}).items():
        got = arrays[k].shape if k in arrays else None
        if got is None or len(got) != len(shape) or any(s is not None and s != g for s, g in zip(shape, got)):
            raise CacheError(f"{path}: array {k!r} has shape {got}, expected {tuple(shape)}")
    return arrays, header.get("meta", {})


@contextmanager
def locked(path: str | os.PathLike, timeout: float = -1) -> Iterator[None]:
    """Hold the lock of result ``path`` (``.locks/<file>.lock`` beside it) while the block runs; another process
    asking for it waits (``timeout`` seconds; -1: as long as it takes). Released when the block ends or the
    process dies; the empty lock file stays."""
    from filelock import FileLock

    path = Path(path)
    folder = path.parent / ".locks"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataFolderError(
            f"cannot lock {path} ({exc.strerror or exc}); point MMTOKEN_DATA at a writable folder"
        ) from None
    with FileLock(str(folder / (path.name + ".lock")), timeout=timeout):
        yield


# --------------------------------------------------------------------------- the one call
@dataclasses.dataclass(frozen=True)
class Entry:
    """Where result ``name`` of ``owner`` lives and what it must match: ``path`` in the data folder, ``carried``
    (its copy among the trained runs, or ``None``), ``fp`` (:func:`fingerprint`) and ``roots`` (where its code
    starts, for :func:`check_carried`)."""

    owner: str
    name: str
    path: Path
    carried: Path | None
    fp: str
    roots: tuple[tuple[str, str], ...]

    @property
    def title(self) -> str:
        return f"{self.owner}/{self.name}"


def entry(owner: str, name: str, *, config: object, code: Sequence[Callable], data: str = "") -> Entry:
    """The :class:`Entry` of result ``name`` of ``owner`` computed by ``code`` (functions whose code it runs,
    :func:`mmtoken.book.fingerprint.of`) under ``config`` on data with fingerprint ``data``."""
    from mmtoken.book import fingerprint as fpr

    if not code or not all(callable(f) for f in code):
        raise ValueError(f"code must be the functions result {owner}/{name} runs, got {code!r}")
    trained = trained_dir()
    return Entry(
        owner,
        name,
        path_of(owner, name, config),
        path_of(owner, name, config, trained) if trained is not None else None,
        fingerprint(fpr.of(*code), config, data),
        tuple(r for f in code for r in fpr.roots_of(f)),
    )


def _read(e: Entry, expect: Mapping[str, tuple] | None, warn: bool) -> Stored | None:
    """Result ``e`` from the data folder, else from the trained runs; ``None`` where neither holds it for today's
    code. A damaged file, or one holding another result, is reported (``warn``) and treated as absent."""
    for path in (e.path, e.carried):
        if path is None or not path.is_file():
            continue
        try:
            return load(path, e.title, e.fp, expect)
        except StaleResult:
            pass
        except CacheError as exc:
            if warn:
                warnings.warn(f"ignoring a stored result: {exc}; recomputing {e.title}", RuntimeWarning, stacklevel=4)
    return None


def cached(
    owner: str,
    name: str,
    compute: Callable[[], Stored],
    *,
    config: object,
    code: Sequence[Callable] | None = None,
    data: str = "",
    expect: Mapping[str, tuple] | None = None,
    recompute: bool = False,
) -> Stored:
    """Result ``name`` of ``owner``: read (the data folder, then the trained runs) or ``compute()`` d now and stored.

    Parameters
    ----------
    owner, name : the chapter or topic that computes it and the result's name (:func:`path_of`).
    compute : returns ``(arrays, meta)``: named arrays and a JSON-able dict.
    config : every setting and input that decides the result (a dataclass, dict, numbers, arrays): it names the
        file with the types of its values (:func:`key`) and enters the fingerprint.
    code : the functions whose code computes it (default ``[compute]``); their code, followed through every
        ``mmtoken`` definition they reach (:mod:`mmtoken.book.fingerprint`), keys it.
    data : a fingerprint of the input data (a dataset's digest), ``""`` for none.
    expect : array name -> required shape (``None`` for a free dimension), checked on read.
    recompute : compute and store it even where a valid result is stored (the data folder's file is replaced).

    An error raised by ``compute`` propagates unchanged. A result computed but not storable (a read-only or full data
    folder) is returned with a ``RuntimeWarning``; where no lock can be taken it is computed unlocked.
    """
    e = entry(owner, name, config=config, code=code or [compute], data=data)
    sweep_partial(e.path.parent)
    if not recompute and (hit := _read(e, expect, warn=False)) is not None:
        return hit
    with ExitStack() as held:
        try:
            held.enter_context(locked(e.path))
        except (OSError, DataFolderError) as exc:  # a read-only data folder: compute, keep nothing
            warnings.warn(f"results cache not used for {e.title} ({exc})", RuntimeWarning, stacklevel=2)
            return _unstored(compute())
        if not recompute and (hit := _read(e, expect, warn=True)) is not None:  # computed meanwhile by another process
            return hit
        cpu, wall = time.process_time(), time.perf_counter()
        result = compute()
        made = {
            "cpu_seconds": round(time.process_time() - cpu, 2),
            "wall_seconds": round(time.perf_counter() - wall, 2),
        }
        try:
            save(e.path, e.title, e.fp, *result, made | {"roots": [list(r) for r in e.roots]})
            return load(e.path, e.title, e.fp, expect)
        except (OSError, DataFolderError) as exc:  # full disk, file-size limit: the result stands, unstored
            warnings.warn(f"results cache not used for {e.title} ({exc})", RuntimeWarning, stacklevel=2)
            return _unstored(result)


def _unstored(result: Stored) -> Stored:
    arrays, meta = result
    return {k: np.asarray(v) for k, v in arrays.items()}, meta


def stored(owner: str, name: str, *, config: object, code: Sequence[Callable], data: str = "") -> bool:
    """Whether :func:`cached` of the same arguments would read its result (nothing is computed)."""
    return _read(entry(owner, name, config=config, code=code, data=data), None, warn=False) is not None


# --------------------------------------------------------------------------- the ledger's records
def write_record(path: str | os.PathLike, name: str, fp: str, meta: dict, what: str) -> None:
    """:func:`save` of a record (``meta``, no arrays) when this process is one of the book's own runs
    (:func:`mmtoken.config.recording`); where the data folder cannot be written a ``RuntimeWarning`` says that
    ``what`` was not recorded, and the result stands."""
    if not recording():
        return
    try:
        save(path, name, fp, {}, meta)  # atomic: readers see the old record or the new one
    except (OSError, DataFolderError) as exc:
        warnings.warn(f"{what} not recorded ({exc})", RuntimeWarning, stacklevel=3)


def read_record(path: str | os.PathLike, name: str, fp: str, entry_key: str) -> dict | None:
    """Entry ``entry_key`` of the record at ``path``, or ``None`` where there is none for ``name`` at ``fp`` (absent,
    damaged, or of other code: each means the result is not yet known)."""
    if not Path(path).is_file():
        return None
    try:
        value = load(path, name, fp)[1][entry_key]
    except (CacheError, KeyError):
        return None
    return value if isinstance(value, dict) else None


def record_once(path: str | os.PathLike, read: Callable[[], object], compute: Callable[[], object]):
    """``read()``'s record, else ``compute()`` (which records it) while holding the lock of ``path``, after one more
    ``read()``: another process computing the same record is waited for. Where no lock can be taken (a read-only
    data folder), ``compute()`` runs unlocked. Callers call it only where ``compute()`` records."""
    value = read()
    if value is not None:
        return value
    try:
        with locked(path):
            return read() or compute()
    except (OSError, DataFolderError):
        return compute()
