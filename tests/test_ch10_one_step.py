"""Chapter 10's experiment code (mmtoken.chapters.ch10_one_step): the one step by autograd, the independent check
of the closed form."""

import pytest
import torch
from toy_embedding import toy_batch

from mmtoken.chapters.ch10_one_step import one_step_autograd
from mmtoken.embeddings import embedding, synthetic


@pytest.mark.parametrize("scale", [1e-3, 0.3, 3.0])
def test_one_step_matches_autograd(scale):
    data, E, v = toy_batch(scale=scale)
    a = embedding.one_step(E, v, data.tokens, data.labels, 7.0, data.mask)
    b = one_step_autograd(E, v, data.tokens, data.labels, 7.0, data.mask)
    assert float((a - b).norm() / (b - E).norm()) < 1e-12
    # only the v direction moves, and the padding row never moves
    delta = a - E
    assert torch.allclose(delta - (delta @ v)[:, None] * v / (v @ v), torch.zeros_like(delta), atol=1e-14)
    assert torch.all(delta[synthetic.PAD_ID] == 0)
