"""Model shapes, softmax invariants and bad inputs."""

import numpy as np
import pytest
import torch

from mmtoken.attention import model
from mmtoken.attention.model import AttentionProblem


def test_shapes_and_softmax_rows():
    X = torch.randn(2, 3, 4, 5, dtype=torch.float64)  # 2 instances, n=3, T=4, d=5
    W = torch.randn(5, 2, dtype=torch.float64)
    v = torch.randn(5, dtype=torch.float64)
    Y = torch.tensor([[1.0, -1.0, 1.0]] * 2, dtype=torch.float64)
    K = model.keys(X, W)
    assert K.shape == (2, 3, 4, 2)
    p = torch.randn(2, 2, dtype=torch.float64)
    s = model.softmax_probs(K, p)
    assert s.shape == (2, 3, 4)
    assert torch.allclose(s.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    gamma = model.scores(X, Y, v)
    f = model.output(X, v, K, p)
    assert torch.allclose(Y * f, (s * gamma).sum(-1))  # u = Y f = sum_t s_t gamma_t


def test_padding_gets_zero_attention():
    K = torch.randn(2, 4, 3, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    s = model.softmax_probs(K, torch.randn(3, dtype=torch.float64), mask)
    assert torch.all(s[0, 2:] == 0) and torch.allclose(s.sum(-1), torch.ones(2, dtype=torch.float64))


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="NaN"):
        AttentionProblem(np.full((1, 2, 2), np.nan), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="gamma has shape"):
        AttentionProblem(np.zeros((1, 3, 2)), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="at least two tokens"):
        AttentionProblem(np.zeros((1, 1, 2)), np.zeros((1, 1)))
    with pytest.raises(ValueError, match=r"\+1 or -1"):
        AttentionProblem.from_data(np.zeros((1, 2, 3)), [0.5], np.ones(3))
    with pytest.raises(ValueError, match="only padding"):
        AttentionProblem(np.zeros((1, 2, 2)), np.zeros((1, 2)), mask=np.zeros((1, 2), bool))
    with pytest.raises(ValueError, match="keys have dimension 3 but p has 2"):
        model.logits(torch.zeros(1, 2, 3), torch.zeros(2))
