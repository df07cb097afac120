"""Synthetic data from paper B's data model: one important token per sequence.

Ids: ``0`` pad, ``1..n_pos`` *completely positive* (only in positive sequences), then ``n_neg`` completely
negative, then ``n_neutral`` neutral tokens; ``V = 1 + n_pos + n_neg + n_neutral``. A sequence of label ``y`` has a
length ``L`` uniform in ``[min_len, T]``, one important token of its label's kind at a uniform position and ``L - 1``
uniform neutral tokens, then padding; ``round(n * pos_frac)`` sequences are positive, in random order.
"""

from __future__ import annotations

__all__ = ["PAD_ID", "SyntheticData", "generate"]

from dataclasses import dataclass

import numpy as np
import torch

PAD_ID = 0


@dataclass
class SyntheticData:
    """A seeded sample of the data model.

    Attributes
    ----------
    tokens : int64 ``(n, T)``, ``PAD_ID`` at padding.
    labels : float64 ``(n,)`` in ``{+1, -1}``.
    mask : bool ``(n, T)``, True at real tokens.
    important : int64 ``(n,)`` position of the important token in each sequence.
    vocab_size : ``V`` (padding included).
    kind : ``(V,)`` array of ``"pad"``, ``"positive"``, ``"negative"``, ``"neutral"``.
    params : the generator's arguments.
    """

    tokens: torch.Tensor
    labels: torch.Tensor
    mask: torch.Tensor
    important: torch.Tensor
    vocab_size: int
    kind: np.ndarray
    params: dict

    @property
    def n(self) -> int:
        return self.tokens.shape[0]

    @property
    def T(self) -> int:
        return self.tokens.shape[1]

    @property
    def important_ids(self) -> torch.Tensor:
        """Token id of the important token of each sequence, ``(n,)``."""
        return self.tokens.gather(1, self.important[:, None]).squeeze(1)

    def ids(self, kind: str) -> np.ndarray:
        """Token ids of one kind (``"positive"``, ``"negative"``, ``"neutral"``, ``"pad"``)."""
        if kind not in ("pad", "positive", "negative", "neutral"):
            raise ValueError(f"unknown token kind {kind!r}")
        return np.flatnonzero(self.kind == kind)


def generate(
    n: int = 200,
    T: int = 8,
    *,
    n_pos: int = 4,
    n_neg: int = 4,
    n_neutral: int = 40,
    min_len: int | None = None,
    pos_frac: float = 0.5,
    seed: int = 0,
) -> SyntheticData:
    """Draw ``n`` sequences of the data model (see the module docstring).

    Parameters
    ----------
    n, T : number of sequences, padded length.
    n_pos, n_neg, n_neutral : vocabulary sizes of the three kinds.
    min_len : shortest sequence (default ``T``: no padding); at least 2.
    pos_frac : fraction of positive sequences (both classes must occur).
    seed : seed of the NumPy generator.
    """
    min_len = T if min_len is None else min_len
    if n < 2 or T < 2:
        raise ValueError(f"need n >= 2 sequences of length T >= 2, got n={n}, T={T}")
    if not 2 <= min_len <= T:
        raise ValueError(f"min_len must lie in [2, T={T}], got {min_len}")
    if n_pos < 1 or n_neg < 1 or n_neutral < 1:
        raise ValueError(f"each token kind needs at least one token, got {n_pos}, {n_neg}, {n_neutral}")
    n_plus = int(round(n * pos_frac))
    if not 0 < n_plus < n:
        raise ValueError(f"pos_frac={pos_frac} leaves a class empty for n={n}")
    rng = np.random.default_rng(seed)
    V = 1 + n_pos + n_neg + n_neutral
    pos_ids = np.arange(1, 1 + n_pos)
    neg_ids = np.arange(1 + n_pos, 1 + n_pos + n_neg)
    neu_ids = np.arange(1 + n_pos + n_neg, V)
    labels = np.where(rng.permutation(n) < n_plus, 1.0, -1.0)
    lengths = rng.integers(min_len, T + 1, size=n)
    tokens = rng.choice(neu_ids, size=(n, T))
    mask = np.arange(T)[None, :] < lengths[:, None]
    tokens[~mask] = PAD_ID
    important = (rng.random(n) * lengths).astype(np.int64)
    imp_tok = np.where(labels > 0, rng.choice(pos_ids, size=n), rng.choice(neg_ids, size=n))
    tokens[np.arange(n), important] = imp_tok
    kind = np.array(["pad"] + ["positive"] * n_pos + ["negative"] * n_neg + ["neutral"] * n_neutral)
    params = dict(
        n=n, T=T, n_pos=n_pos, n_neg=n_neg, n_neutral=n_neutral, min_len=min_len, pos_frac=pos_frac, seed=seed
    )
    return SyntheticData(
        torch.as_tensor(tokens, dtype=torch.int64),
        torch.as_tensor(labels, dtype=torch.float64),
        torch.as_tensor(mask),
        torch.as_tensor(important),
        V,
        kind,
        params,
    )
