"""Token statistics of a labelled corpus (paper B), shared by the synthetic and real-data chapters.

Sequences are integer arrays of shape ``(N, T)`` with a padding id whose
positions count nowhere; labels are ``+1`` / ``-1``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TokenStats:
    """Per-token statistics over a vocabulary of size ``V`` (arrays of shape ``(V,)``).

    Attributes
    ----------
    count : total occurrences of each token.
    count_pos, count_neg : occurrences in positive / negative sequences.
    alpha : average signed frequency ``alpha_s = (1/N) sum_i y_i n_s(X_i) / T_i``.
    delta : posterior difference ``P(y=+1|s) - P(y=-1|s)`` estimated from
        occurrences, ``(count_pos - count_neg) / count``, with classes
        reweighted to equal size; ``nan`` where ``count == 0``.
    """

    count: np.ndarray
    count_pos: np.ndarray
    count_neg: np.ndarray
    alpha: np.ndarray
    delta: np.ndarray


def token_stats(tokens: np.ndarray, labels: np.ndarray, vocab_size: int,
                pad_id: int | None = None) -> TokenStats:
    """Count tokens, signed frequencies and posterior differences.

    Parameters
    ----------
    tokens : int array ``(N, T)``.
    labels : array ``(N,)`` of ``+1`` / ``-1``.
    vocab_size : ``V``; every id must lie in ``[0, V)``.
    pad_id : id of padding, ignored everywhere (``T_i`` counts real tokens).
    """
    tokens = np.asarray(tokens)
    labels = np.asarray(labels)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must have shape (N, T), got {tokens.shape}")
    if labels.shape != (tokens.shape[0],):
        raise ValueError(f"labels must have shape ({tokens.shape[0]},), got {labels.shape}")
    if not np.all(np.isin(labels, (-1, 1))):
        raise ValueError("labels must be +1 or -1")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size}), got [{tokens.min()}, {tokens.max()}]")
    valid = np.ones_like(tokens, dtype=bool) if pad_id is None else tokens != pad_id
    lengths = valid.sum(axis=1)
    if np.any(lengths == 0):
        raise ValueError("a sequence holds only padding")
    n = tokens.shape[0]
    rows = np.repeat(np.arange(n), tokens.shape[1])[valid.ravel()]
    ids = tokens.ravel()[valid.ravel()]
    y = labels[rows]
    count = np.bincount(ids, minlength=vocab_size).astype(float)
    count_pos = np.bincount(ids, weights=(y > 0).astype(float), minlength=vocab_size)
    count_neg = count - count_pos
    alpha = np.bincount(ids, weights=y / lengths[rows], minlength=vocab_size) / n
    # Class-balanced posterior: a token's occurrences in each class divided by the class size.
    n_pos, n_neg = max((labels > 0).sum(), 1), max((labels < 0).sum(), 1)
    rate_pos, rate_neg = count_pos / n_pos, count_neg / n_neg
    with np.errstate(invalid="ignore", divide="ignore"):
        delta = np.where(count > 0, (rate_pos - rate_neg) / (rate_pos + rate_neg), np.nan)
    if pad_id is not None and pad_id < vocab_size:
        delta[pad_id] = np.nan
    return TokenStats(count, count_pos, count_neg, alpha, delta)
