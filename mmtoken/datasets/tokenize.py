"""Word tokenization, vocabulary and padding for the review sets, cached.

The rule, stated once: ``<br />`` line breaks are replaced by spaces, the text is lower-cased, and the
words are the runs matched by ``[a-z0-9']+``. The vocabulary holds the words seen at least ``min_count``
times in the **training** split, ordered by decreasing count (ties alphabetically); id 0 is padding. Words
outside the vocabulary are dropped (paper B's model has no unknown-word token); each sequence keeps its
first ``max_len`` remaining words and is padded with 0 to ``max_len``.

The result is cached in ``data/text/tok/<dataset>-<key>.npz``, keyed by the dataset's fingerprint and the
configuration, and used only if the name, fingerprint, configuration and shapes it records match;
otherwise it is rebuilt with a warning.
"""

from __future__ import annotations

__all__ = ["PAD", "PAD_ID", "TokenizerConfig", "words", "TokenizedCorpus", "build_vocab", "encode", "tokenize_dataset"]

import hashlib
import io
import json
import re
import warnings
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mmtoken.book.resultcache import sweep
from mmtoken.datasets.download import DatasetError, atomic_write_bytes, cache_dir
from mmtoken.datasets.text import TextDataset

PAD = "<pad>"
PAD_ID = 0
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)


@dataclass(frozen=True)
class TokenizerConfig:
    """How texts become padded id sequences."""

    min_count: int = 10
    max_len: int = 512
    pattern: str = r"[a-z0-9']+"
    lowercase: bool = True
    strip_br: bool = True

    def key(self, fingerprint: str) -> str:
        payload = json.dumps({"config": asdict(self), "data": fingerprint, "version": 1}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


def words(text: str, config: TokenizerConfig = TokenizerConfig()) -> list[str]:
    """The words of ``text`` under ``config`` (before the vocabulary filter)."""
    if config.strip_br:
        text = _BR.sub(" ", text)
    if config.lowercase:
        text = text.lower()
    return re.findall(config.pattern, text)


@dataclass
class TokenizedCorpus:
    """Padded id sequences of a :class:`~mmtoken.datasets.text.TextDataset`.

    Attributes
    ----------
    vocab : list of ``V`` words, ``vocab[0] == "<pad>"``.
    tokens : int32 ``(N, max_len)``, 0 at padding.
    lengths : int32 ``(N,)``, number of real tokens (0 if every word was dropped).
    full_lengths : int32 ``(N,)``, in-vocabulary words before truncation.
    labels : int8 ``(N,)`` of ``+1`` / ``-1``; split : int8 ``(N,)``, 0 train / 1 test.
    config : the :class:`TokenizerConfig`; name : the dataset's name.
    """

    name: str
    vocab: list[str]
    tokens: np.ndarray
    lengths: np.ndarray
    full_lengths: np.ndarray
    labels: np.ndarray
    split: np.ndarray
    config: TokenizerConfig

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def mask(self) -> np.ndarray:
        return self.tokens != PAD_ID

    def part(self, which: str, nonempty: bool = True) -> np.ndarray:
        """Row indices of the ``"train"`` or ``"test"`` split (only sequences with a token if ``nonempty``)."""
        if which not in ("train", "test"):
            raise ValueError(f"split {which!r} is not 'train' or 'test'")
        keep = self.split == (0 if which == "train" else 1)
        if nonempty:
            keep &= self.lengths > 0
        return np.flatnonzero(keep)

    def decode(self, row: int) -> list[str]:
        return [self.vocab[i] for i in self.tokens[row, : self.lengths[row]]]


def build_vocab(texts: list[list[str]], min_count: int) -> list[str]:
    """``<pad>`` followed by the words seen at least ``min_count`` times, most frequent first."""
    if min_count < 1:
        raise ValueError(f"min_count must be at least 1, got {min_count}")
    counts = Counter(w for ws in texts for w in ws)
    kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    return [PAD] + kept


def encode(texts: list[list[str]], vocab: list[str], max_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ids padded to ``max_len`` (first ``max_len`` in-vocabulary words), lengths, full lengths."""
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}")
    index = {w: i for i, w in enumerate(vocab) if i != PAD_ID}
    tokens = np.zeros((len(texts), max_len), dtype=np.int32)
    lengths = np.zeros(len(texts), dtype=np.int32)
    full = np.zeros(len(texts), dtype=np.int32)
    for r, ws in enumerate(texts):
        ids = [index[w] for w in ws if w in index]
        full[r] = len(ids)
        ids = ids[:max_len]
        tokens[r, : len(ids)] = ids
        lengths[r] = len(ids)
    return tokens, lengths, full


def tokenize_dataset(
    ds: TextDataset, config: TokenizerConfig = TokenizerConfig(), cache: bool = True
) -> TokenizedCorpus:
    """Tokenize ``ds`` under ``config``, from the cache when it exists."""
    path = cache_dir("text/tok") / f"{ds.name}-{config.key(ds.fingerprint)}.npz"
    if cache:
        sweep(path.parent)  # temporary files of interrupted writes
    if cache and path.is_file():
        try:
            return _read(path, ds, config)
        except DatasetError as exc:  # a damaged cache is rebuilt and replaced atomically
            warnings.warn(f"{exc}; rebuilding it", RuntimeWarning, stacklevel=2)
    split_words = [words(t, config) for t in ds.texts]
    train = [split_words[i] for i in ds.train_index]
    vocab = build_vocab(train, config.min_count)
    tokens, lengths, full = encode(split_words, vocab, config.max_len)
    corpus = TokenizedCorpus(ds.name, vocab, tokens, lengths, full, ds.labels.copy(), ds.split.copy(), config)
    if cache:
        buf = io.BytesIO()
        np.savez_compressed(
            buf,
            tokens=tokens,
            lengths=lengths,
            full_lengths=full,
            vocab=np.array("\n".join(vocab)),
            meta=np.array(json.dumps({"name": ds.name, "config": asdict(config), "data": ds.fingerprint})),
        )
        atomic_write_bytes(path, buf.getvalue())
    return corpus


def _read(path: Path, ds: TextDataset, config: TokenizerConfig) -> TokenizedCorpus:
    try:
        with np.load(path, allow_pickle=False) as z:
            tokens, lengths, full = z["tokens"], z["lengths"], z["full_lengths"]
            vocab = str(z["vocab"]).split("\n")
            meta = json.loads(str(z["meta"]))
    except Exception as exc:
        raise DatasetError(f"token cache {path} is damaged: {exc}") from exc
    if (
        meta.get("name") != ds.name
        or meta.get("data") != ds.fingerprint
        or meta.get("config") != asdict(config)
        or tokens.shape != (len(ds), config.max_len)
        or lengths.shape != (len(ds),)
        or full.shape != (len(ds),)
        or vocab[0] != PAD
        or (tokens.size and tokens.max() >= len(vocab))
    ):
        raise DatasetError(f"token cache {path} does not match its dataset ({ds.name}) and configuration")
    return TokenizedCorpus(ds.name, vocab, tokens, lengths, full, ds.labels.copy(), ds.split.copy(), config)
