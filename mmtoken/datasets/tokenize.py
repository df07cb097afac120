"""Word tokenization, vocabulary and padding for the review sets, cached in the one store.

The rule, stated once: ``<br />`` line breaks are replaced by spaces, the text is lower-cased, and the
words are the runs matched by ``[a-z0-9']+``. The vocabulary holds the words seen at least ``min_count``
times in the **training** split, ordered by decreasing count (ties alphabetically); id 0 is padding. Words
outside the vocabulary are dropped (paper B's model has no unknown-word token); each sequence keeps its
first ``max_len`` remaining words and is padded with 0 to ``max_len``.

The result is the store's ``text/<dataset>/tokens`` (:func:`mmtoken.book.resultcache.cached`, file
``<data>/results/text/<dataset>/tokens-<key>.npz`` keyed by the configuration with the types of its values),
used only if its header matches this code, the configuration and the dataset's fingerprint and its arrays have
the shapes the dataset and configuration give; otherwise it is rebuilt (with a warning when it was damaged).
"""

from __future__ import annotations

__all__ = [
    "PAD",
    "PAD_ID",
    "TokenizerConfig",
    "words",
    "TokenizedCorpus",
    "build_vocab",
    "encode",
    "token_entry",
    "tokenize_dataset",
]

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from mmtoken.book import resultcache
from mmtoken.datasets.corpus import OWNER, TextDataset, pack_strings, unpack_strings
from mmtoken.datasets.download import DatasetError

PAD = "<pad>"
PAD_ID = 0
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)


@dataclass(frozen=True)
class TokenizerConfig:
    """How texts become padded id sequences (every field is checked: a value of another type is refused, naming
    the field, so no two configurations that tokenize alike name two files, nor two that differ one)."""

    min_count: int = 10
    max_len: int = 512
    pattern: str = r"[a-z0-9']+"
    lowercase: bool = True
    strip_br: bool = True

    def __post_init__(self):
        for name in ("min_count", "max_len"):
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"TokenizerConfig.{name} must be an integer >= 1, got {v!r}")
        if not isinstance(self.pattern, str):
            raise ValueError(f"TokenizerConfig.pattern must be a regular expression (a string), got {self.pattern!r}")
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ValueError(f"TokenizerConfig.pattern {self.pattern!r} is not a regular expression ({exc})") from None
        for name in ("lowercase", "strip_br"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"TokenizerConfig.{name} must be True or False, got {getattr(self, name)!r}")


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


def token_entry(ds: TextDataset, config: TokenizerConfig = TokenizerConfig()) -> resultcache.Entry:
    """Where the store keeps the tokens of ``ds`` under ``config`` and what its header must match
    (:func:`mmtoken.book.resultcache.entry`; ``.path`` is the file)."""
    return resultcache.entry(OWNER, f"{ds.name}/tokens", config=config, code=[tokenize_dataset], data=ds.fingerprint)


def tokenize_dataset(
    ds: TextDataset, config: TokenizerConfig = TokenizerConfig(), cache: bool = True
) -> TokenizedCorpus:
    """Tokenize ``ds`` under ``config``: read from the store when it holds the result of this code, configuration
    and dataset (:func:`token_entry`), else computed and stored (``cache=False``: computed, nothing stored)."""
    if not isinstance(ds, TextDataset):
        raise ValueError(f"ds must be a TextDataset, got {type(ds).__name__}")
    if not isinstance(config, TokenizerConfig):
        raise ValueError(f"config must be a TokenizerConfig, got {type(config).__name__}")

    def compute() -> resultcache.Stored:
        split_words = [words(t, config) for t in ds.texts]
        vocab = build_vocab([split_words[i] for i in ds.train_index], config.min_count)
        tokens, lengths, full = encode(split_words, vocab, config.max_len)
        blob, offsets = pack_strings(vocab)
        arrays = {"tokens": tokens, "lengths": lengths, "full_lengths": full, "vocab": blob, "vocab_offsets": offsets}
        return arrays, {"dataset": ds.name, "texts": len(ds), "vocab_size": len(vocab)}

    n = len(ds)
    if not cache:
        arrays, _ = compute()
    else:
        arrays, _ = resultcache.cached(
            OWNER,
            f"{ds.name}/tokens",
            compute,
            config=config,
            code=[tokenize_dataset],
            data=ds.fingerprint,
            expect={"tokens": (n, config.max_len), "lengths": (n,), "full_lengths": (n,)},
        )
    vocab = _checked(arrays, ds, config)
    return TokenizedCorpus(
        ds.name,
        vocab,
        arrays["tokens"],
        arrays["lengths"],
        arrays["full_lengths"],
        ds.labels.copy(),
        ds.split.copy(),
        config,
    )


def _checked(arrays: dict[str, np.ndarray], ds: TextDataset, config: TokenizerConfig) -> list[str]:
    """The vocabulary of stored tokens, after checking what the store's header cannot: ids within the vocabulary,
    padding first, lengths within ``max_len``; :class:`DatasetError` saying what to delete otherwise."""
    tokens, lengths, full = arrays["tokens"], arrays["lengths"], arrays["full_lengths"]
    try:
        vocab = unpack_strings(arrays["vocab"], arrays["vocab_offsets"])
    except ValueError as exc:
        vocab, problem = [], str(exc)
    else:
        problem = None
    if problem is None and not (
        vocab
        and vocab[0] == PAD
        and all(a.dtype == np.int32 for a in (tokens, lengths, full))
        and (tokens.size == 0 or (tokens.min() >= 0 and tokens.max() < len(vocab)))
        and ((lengths >= 0) & (lengths <= config.max_len) & (lengths <= full)).all()
    ):
        problem = "its vocabulary, ids or lengths are inconsistent"
    if problem is not None:
        path = token_entry(ds, config).path
        raise DatasetError(
            f"token cache {path} does not match its dataset ({ds.name}) and configuration ({problem}); "
            "delete it and run again (it is rebuilt)"
        )
    return vocab
