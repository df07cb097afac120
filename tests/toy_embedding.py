"""A toy labelled batch for paper B's model, shared by the tests of embedding and of chapters 10 and 11
(chapters.ch10_one_step, chapters.ch11_cls_margin)."""

from __future__ import annotations

import torch

from mmtoken.embeddings import synthetic


def toy_batch(seed=0, d=6, scale=0.3, min_len=3):
    """40 sequences of padded length 6 (2 positive, 2 negative, 8 neutral tokens), a Gaussian table
    ``E (V, d)`` with entries of size ``scale`` and a Gaussian head ``v (d,)``: ``(data, E, v)``."""
    data = synthetic.generate(40, 6, n_pos=2, n_neg=2, n_neutral=8, min_len=min_len, seed=seed)
    g = torch.Generator().manual_seed(seed)
    E = scale * torch.randn(data.vocab_size, d, generator=g, dtype=torch.float64)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    return data, E, v
