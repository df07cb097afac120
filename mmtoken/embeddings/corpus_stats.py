"""Token statistics of a labelled corpus (paper B) and the package's Spearman correlations.

Sequences are integer arrays ``(N, T)`` with a padding id whose positions count nowhere; labels are ``+1`` / ``-1``.
"""

from __future__ import annotations

__all__ = [
    "TokenStats",
    "token_stats",
    "spearman",
    "partial_spearman",
    "UShape",
    "u_shape",
    "PolarityMix",
    "polarity_mix",
]

from dataclasses import dataclass

import numpy as np

from mmtoken import validate


@dataclass
class TokenStats:
    """Per-token statistics over a vocabulary of size ``V`` (arrays of shape ``(V,)``).

    Attributes
    ----------
    count : total occurrences of each token.
    count_pos, count_neg : occurrences in positive / negative sequences.
    alpha : average signed frequency ``alpha_s = (1/N) sum_i y_i n_s(X_i) / T_i``.
    delta : posterior difference ``P(y=+1|s) - P(y=-1|s)`` from occurrences, classes reweighted to equal size;
        ``nan`` where ``count == 0``.
    """

    count: np.ndarray
    count_pos: np.ndarray
    count_neg: np.ndarray
    alpha: np.ndarray
    delta: np.ndarray


def token_stats(tokens: np.ndarray, labels: np.ndarray, vocab_size: int, pad_id: int | None = None) -> TokenStats:
    """Count tokens, signed frequencies and posterior differences.

    Parameters
    ----------
    tokens : int array ``(N, T)``.
    labels : array ``(N,)`` of ``+1`` / ``-1``.
    vocab_size : ``V``; every id must lie in ``[0, V)``.
    pad_id : id of padding, ignored everywhere (``T_i`` counts real tokens).
    """
    tokens = validate.numeric(tokens, "tokens")
    labels = validate.numeric(labels, "labels")
    vocab_size = validate.count(vocab_size, "vocab_size", minimum=1)
    if pad_id is not None:
        # a negative id would index from the end (Python's a[-1]) and wipe the last token's statistics
        pad_id = validate.count(pad_id, "pad_id")
    if tokens.ndim != 2:
        raise ValueError(f"tokens must have shape (N, T), got {tokens.shape}")
    if tokens.shape[0] == 0 or tokens.shape[1] == 0:
        raise ValueError(f"tokens must hold at least one sequence of at least one token, got shape {tokens.shape}")
    if tokens.dtype.kind not in "iu":
        if tokens.dtype.kind == "b" or not (tokens == np.round(tokens)).all() or not np.isfinite(tokens).all():
            raise ValueError(f"tokens must hold integer token ids, got dtype {tokens.dtype}")
        tokens = tokens.astype(np.int64)
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


# ----------------------------------------------------------------------------- rank statistics
def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank), as in Spearman's correlation."""
    from scipy.stats import rankdata

    return rankdata(x)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation of ``x`` and ``y`` (``(n,)`` each); ``nan`` when one side is constant."""
    x, y = validate.numeric(x, "x").astype(float), validate.numeric(y, "y").astype(float)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("x and y must be finite (NaN would be ranked as a value)")
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-d arrays of one length, got {x.shape} and {y.shape}")
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(np.corrcoef(_ranks(x), _ranks(y))[0, 1])


def partial_spearman(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> float:
    """Partial Spearman correlation of ``x`` and ``y`` given ``z`` (all ``(n,)``).

    The Pearson partial correlation of the ranks, ``(r_xy - r_xz r_yz) / sqrt((1 - r_xz^2)(1 - r_yz^2))``;
    a monotone transform of ``z`` (e.g. ``log count``) leaves it unchanged.
    """
    x, y, z = (validate.numeric(a, name).astype(float) for a, name in ((x, "x"), (y, "y"), (z, "z")))
    if not all(np.isfinite(a).all() for a in (x, y, z)):
        raise ValueError("x, y and z must be finite (NaN would be ranked as a value)")
    if not (x.shape == y.shape == z.shape) or x.ndim != 1:
        raise ValueError(f"x, y, z must be 1-d arrays of one length, got {x.shape}, {y.shape}, {z.shape}")
    if x.size < 4 or min(np.ptp(x), np.ptp(y), np.ptp(z)) == 0:
        return float("nan")
    r = np.corrcoef(np.stack([_ranks(x), _ranks(y), _ranks(z)]))
    rxy, rxz, ryz = r[0, 1], r[0, 2], r[1, 2]
    denom = (1 - rxz**2) * (1 - ryz**2)
    if denom <= 1e-15:  # x or y is a monotone function of z: nothing is left to correlate
        return float("nan")
    return float((rxy - rxz * ryz) / np.sqrt(denom))


@dataclass
class UShape:
    """How the attention logit of a token depends on its posterior difference ``Delta_s``.

    Over the ``n`` tokens seen at least ``min_count`` times: ``spearman`` = Spearman(logit, |Delta|); ``partial``
    = the same given log count (rare tokens have extreme ``Delta``); ``positive`` / ``negative`` = the same on each
    arm (one arm alone is no U); ``signed`` = Spearman(logit, Delta); ``count`` = Spearman(logit, log count).
    """

    min_count: int
    n: int
    n_positive: int
    n_negative: int
    spearman: float
    partial: float
    positive: float
    negative: float
    signed: float
    count: float

    def as_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def u_shape(logits: np.ndarray, stats: TokenStats, min_count: int = 100) -> UShape:
    """The U-shape statistics of per-token attention logits ``(V,)`` (see :class:`UShape`)."""
    if not isinstance(stats, TokenStats):
        raise ValueError(f"stats must be a TokenStats (token_stats), got {type(stats).__name__}")
    logits = validate.real_array(logits, "logits")
    if logits.shape != stats.count.shape:
        raise ValueError(f"logits must have shape {stats.count.shape}, got {logits.shape}")
    min_count = validate.count(min_count, "min_count", minimum=1)
    keep = (stats.count >= min_count) & np.isfinite(stats.delta)
    a, delta, count = logits[keep], stats.delta[keep], stats.count[keep]
    pos, neg = delta > 0, delta < 0
    return UShape(
        min_count,
        int(keep.sum()),
        int(pos.sum()),
        int(neg.sum()),
        spearman(a, np.abs(delta)),
        partial_spearman(a, np.abs(delta), np.log(count)),
        spearman(a[pos], delta[pos]),
        spearman(a[neg], -delta[neg]),
        spearman(a, delta),
        spearman(a, np.log(count)),
    )


@dataclass
class PolarityMix:
    """How far a corpus is from paper B's data model (one polar token of the label's sign per sequence).

    Over the tokens seen ``min_count`` times: ``exclusive`` / ``polar`` = share with ``|Delta| = 1`` / ``>= threshold``.
    Over the sequences: ``per_sequence`` = mean number of distinct polar tokens; ``both_signs`` / ``against`` /
    ``none`` = share holding polar tokens of both signs / one of the sign opposite to the label / none.
    """

    min_count: int
    threshold: float
    exclusive: float
    polar: float
    per_sequence: float
    both_signs: float
    against: float
    none: float

    def as_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def polarity_mix(
    tokens: np.ndarray,
    labels: np.ndarray,
    stats: TokenStats,
    threshold: float = 0.5,
    min_count: int = 20,
    pad_id: int | None = 0,
) -> PolarityMix:
    """:class:`PolarityMix` of ``tokens (N, T)`` with labels ``(N,)``, from ``stats`` of the training split."""
    if not isinstance(stats, TokenStats):
        raise ValueError(f"stats must be a TokenStats (token_stats), got {type(stats).__name__}")
    tokens, labels = validate.numeric(tokens, "tokens"), validate.numeric(labels, "labels")
    if tokens.ndim != 2 or labels.shape != (tokens.shape[0],):
        raise ValueError(f"tokens must be (N, T) and labels (N,), got {tokens.shape} and {labels.shape}")
    if tokens.shape[0] == 0:
        raise ValueError("tokens must hold at least one sequence")
    if tokens.dtype.kind not in "iu" or (tokens.size and (tokens.min() < 0 or tokens.max() >= len(stats.count))):
        raise ValueError(f"tokens must hold integer ids in [0, {len(stats.count)}) (the vocabulary of stats)")
    if not np.all(np.isin(labels, (-1, 1))):
        raise ValueError("labels must be +1 or -1")
    threshold = validate.positive(threshold, "threshold", maximum=1.0)
    min_count = validate.count(min_count, "min_count")
    if pad_id is not None:
        pad_id = validate.count(pad_id, "pad_id")
        if pad_id >= len(stats.count):
            raise ValueError(f"pad_id must be an id in [0, {len(stats.count)}), got {pad_id}")
    known = (stats.count >= min_count) & np.isfinite(stats.delta)
    delta = np.where(known, np.nan_to_num(stats.delta), 0.0)
    sign = np.where(np.abs(delta) >= threshold, np.sign(delta), 0.0)
    if pad_id is not None:
        sign[pad_id] = 0.0
    # distinct tokens per row: mark each (row, token) once
    rows = np.repeat(np.arange(tokens.shape[0]), tokens.shape[1])
    pairs = np.unique(rows * (len(sign) + 1) + tokens.ravel())
    r, t = pairs // (len(sign) + 1), pairs % (len(sign) + 1)
    pos = np.bincount(r, weights=(sign[t] > 0), minlength=tokens.shape[0])
    neg = np.bincount(r, weights=(sign[t] < 0), minlength=tokens.shape[0])
    against = np.where(labels > 0, neg, pos) > 0
    return PolarityMix(
        min_count,
        threshold,
        float((np.abs(delta[known]) == 1).mean()),
        float((np.abs(delta[known]) >= threshold).mean()),
        float((pos + neg).mean()),
        float(((pos > 0) & (neg > 0)).mean()),
        float(against.mean()),
        float(((pos + neg) == 0).mean()),
    )
