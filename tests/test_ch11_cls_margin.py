"""Chapter 11's experiment code (mmtoken.chapters.ch11_cls_margin): normalized GD on p (one table, several
tables with their budgets), the joint gradient and joint GD on (E, p), the budget rule."""

import numpy as np
import pytest
import torch
from toy_embedding import toy_batch

from mmtoken.attention import grad
from mmtoken.chapters import ch11_cls_margin as cm
from mmtoken.embeddings import embedding, synthetic


def test_train_cls_records_and_staged_steps():
    data, E, v = toy_batch()
    h = cm.train_cls(E, v, data.tokens, data.labels, data.mask, steps=30, lr=0.1, rel_lr=0.01, stage=7, record_every=5)
    assert list(h.steps) == [0, 5, 10, 15, 20, 25, 30]
    assert h.p.shape == (7, E.shape[1]) and h.probs.shape == (7, 40, 6)
    steps = np.diff(h.p.numpy(), axis=0)
    assert np.all(np.linalg.norm(steps, axis=1) <= 5 * max(0.1, 0.01 * float(h.norm.max())) + 1e-12)


def test_train_cls_batch_matches_separate_runs_and_respects_budgets():
    from mmtoken.attention import train

    data, E, v = toy_batch()
    Eb = torch.stack([E, 0.3 * E])
    budgets = [40, 100]
    hs = cm.train_cls_batch(
        Eb, v, data.tokens, data.labels, data.mask, budgets=budgets, lr=0.1, record_every=20, chunk=2
    )
    for k, h in enumerate(hs):
        assert list(h.steps) == list(range(0, budgets[k] + 1, 20))  # never past its budget
        problem = embedding.cls_problem(Eb[k], v, data.tokens, data.labels, data.mask)
        ref = train.train_p(
            problem, torch.zeros(E.shape[1], dtype=torch.float64), steps=budgets[k], lr=0.1, record_every=20
        )
        assert torch.allclose(h.p, ref.p, rtol=0, atol=1e-12)
        assert torch.allclose(h.probs, ref.probs, rtol=0, atol=1e-12)
        # normalized steps: ||p|| grows by at most lr per step
        assert np.all(np.diff(h.norm.numpy()) <= 20 * 0.1 + 1e-12)


def test_train_cls_batch_bad_inputs():
    data, E, v = toy_batch()
    Eb = torch.stack([E, E])
    with pytest.raises(ValueError, match="multiples of record_every"):
        cm.train_cls_batch(Eb, v, data.tokens, data.labels, data.mask, budgets=[30, 40], lr=0.1, record_every=20)
    with pytest.raises(ValueError, match="budgets must have shape"):
        cm.train_cls_batch(Eb, v, data.tokens, data.labels, data.mask, budgets=[40], lr=0.1, record_every=20)
    with pytest.raises(ValueError, match=r"\(S, V, d\)"):
        cm.train_cls_batch(E, v, data.tokens, data.labels, data.mask, budgets=[40], lr=0.1, record_every=20)
    with pytest.raises(ValueError, match="lr"):
        cm.train_cls_batch(Eb, v, data.tokens, data.labels, data.mask, budgets=[40, 40], lr=0.0, record_every=20)


def test_joint_gradient_matches_autograd():
    data, E, v = toy_batch()
    p = 0.7 * torch.randn(E.shape[1], dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    gE, gp, L = cm.joint_gradient(E, p, v, data.tokens, data.labels, data.mask)
    with torch.enable_grad():
        Ea, pa = E.clone().requires_grad_(True), p.clone().requires_grad_(True)
        La = embedding.logistic_loss(Ea, pa, v, data.tokens, data.labels, data.mask)
        ga_E, ga_p = torch.autograd.grad(La, (Ea, pa))
    assert torch.allclose(gE, ga_E, rtol=1e-10, atol=1e-15) and torch.allclose(gp, ga_p, rtol=1e-10, atol=1e-15)
    assert abs(float(L - La.detach())) < 1e-14
    assert torch.all(gE[synthetic.PAD_ID] == 0)  # padding never moves


def test_joint_gradient_under_saturation_agrees_with_the_stable_p_gradient():
    # d >= V, one step on E, then the p phase until the softmax saturates (the numerical trap)
    data = synthetic.generate(60, 6, n_pos=2, n_neg=2, n_neutral=20, min_len=3, seed=0)
    g = torch.Generator().manual_seed(0)
    E0 = 0.5 * torch.randn(data.vocab_size, 32, generator=g, dtype=torch.float64) / 32**0.5
    v = torch.randn(32, generator=g, dtype=torch.float64)
    v = v / v.norm()
    E = embedding.one_step(E0, v, data.tokens, data.labels, 30.0, data.mask)
    h = cm.train_cls(
        E, v, data.tokens, data.labels, data.mask, steps=600, lr=0.5, rel_lr=0.02, record_every=600, record_probs=False
    )
    p = h.p[-1]
    problem = embedding.cls_problem(E, v, data.tokens, data.labels, data.mask)
    ref = grad.grad_p(problem, p).value()
    _, gp, _ = cm.joint_gradient(E, p, v, data.tokens, data.labels, data.mask)
    with torch.enable_grad():
        q = p.clone().requires_grad_(True)
        (naive,) = torch.autograd.grad(embedding.logistic_loss(E, q, v, data.tokens, data.labels, data.mask), q)
    assert float((naive - ref).norm() / ref.norm()) > 1e-6  # we are in the trap: plain autograd loses digits
    assert float((gp - ref).norm() / ref.norm()) < 1e-10  # the joint gradient does not


def test_first_joint_step_is_the_one_step_and_batching():
    data, E, v = toy_batch(scale=0.05)
    Eb = torch.stack([E, 2 * E])
    h = cm.joint_gd(Eb, v, data.tokens, data.labels, data.mask, steps=3, lr=5.0)
    assert h.E.shape == (4, 2, *E.shape) and h.p.shape == (4, 2, E.shape[1]) and h.loss.shape == (4, 2)
    assert torch.allclose(h.E[1], embedding.one_step(Eb, v, data.tokens, data.labels, 5.0, data.mask), atol=1e-15)
    single = cm.joint_gd(Eb[1], v, data.tokens, data.labels, data.mask, steps=3, lr=5.0)
    assert torch.allclose(single.E[-1], h.E[-1, 1], atol=1e-14) and torch.allclose(single.p[-1], h.p[-1, 1], atol=1e-14)
    small = cm.joint_gd(E, v, data.tokens, data.labels, data.mask, steps=20, lr=0.5, record_every=5)
    assert np.all(np.diff(small.loss.numpy()) < 0)  # a small step decreases the loss
    with pytest.raises(ValueError, match="lr > 0"):
        cm.joint_gd(E, v, data.tokens, data.labels, data.mask, steps=3, lr=-1.0)


def test_budget_rule():
    s = cm.Settings()
    for margin in (0.0045, 0.022, 0.225):
        K = cm.budget(margin)
        assert K % (10 * s.record) == 0
        assert K * s.lr * margin >= s.kappa  # reaches r = kappa at full speed
        assert (K - 10 * s.record) * s.lr * margin < s.kappa  # the smallest such
    # proportional to 1/margin up to the rounding
    assert abs(cm.budget(0.01) - 10 * cm.budget(0.1)) <= 10 * 10 * s.record
    with pytest.raises(ValueError, match="positive"):
        cm.budget(0.0)
