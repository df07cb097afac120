"""The synthetic data model of paper B: one important token per sequence, seeded, padded."""

import numpy as np
import pytest
import torch

from mmtoken.embeddings import synthetic
from mmtoken.embeddings.corpus_stats import token_stats


def test_structure_and_shapes():
    d = synthetic.generate(60, 7, n_pos=3, n_neg=2, n_neutral=10, min_len=3, seed=4)
    assert d.tokens.shape == d.mask.shape == (60, 7) and d.labels.shape == (60,)
    assert d.vocab_size == 1 + 3 + 2 + 10
    assert torch.all(d.tokens[~d.mask] == synthetic.PAD_ID) and torch.all(d.tokens[d.mask] != synthetic.PAD_ID)
    lengths = d.mask.sum(1)
    assert lengths.min() >= 3 and lengths.max() <= 7
    assert torch.all(d.mask[torch.arange(60), d.important])  # important token is a real token
    kinds = d.kind[d.tokens.numpy()]
    # exactly one important token per sequence, of the label's kind; the rest neutral
    pos, neg = (kinds == "positive").sum(1), (kinds == "negative").sum(1)
    y = d.labels.numpy()
    assert np.all(pos == (y > 0)) and np.all(neg == (y < 0))
    assert np.all(
        np.where(y > 0, d.kind[d.important_ids.numpy()] == "positive", d.kind[d.important_ids.numpy()] == "negative")
    )
    assert (y > 0).sum() == 30  # balanced


def test_seeded_and_posteriors():
    a = synthetic.generate(50, 6, seed=1)
    b = synthetic.generate(50, 6, seed=1)
    c = synthetic.generate(50, 6, seed=2)
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)
    st = token_stats(a.tokens.numpy(), a.labels.numpy().astype(int), a.vocab_size, pad_id=synthetic.PAD_ID)
    assert np.all(st.delta[a.ids("positive")][st.count[a.ids("positive")] > 0] == 1)
    assert np.all(st.delta[a.ids("negative")][st.count[a.ids("negative")] > 0] == -1)
    big = synthetic.generate(2000, 6, seed=1)  # neutral: same law in both classes
    st = token_stats(big.tokens.numpy(), big.labels.numpy().astype(int), big.vocab_size, pad_id=synthetic.PAD_ID)
    assert np.all(np.abs(st.delta[big.ids("neutral")]) < 0.3)


def test_bad_parameters():
    with pytest.raises(ValueError, match="min_len"):
        synthetic.generate(10, 5, min_len=6)
    with pytest.raises(ValueError, match="class empty"):
        synthetic.generate(10, 5, pos_frac=0.0)
    with pytest.raises(ValueError, match="at least one token"):
        synthetic.generate(10, 5, n_neg=0)
    with pytest.raises(ValueError, match="unknown token kind"):
        synthetic.generate(10, 5).ids("bogus")
