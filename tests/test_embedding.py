"""Paper B's model: padding, the closed-form one step, the p phase as a paper-A problem."""
import numpy as np
import pytest
import torch

from mmtoken import embedding, grad, synthetic


def _setup(seed=0, d=6, scale=0.3, min_len=3):
    data = synthetic.generate(40, 6, n_pos=2, n_neg=2, n_neutral=8, min_len=min_len, seed=seed)
    g = torch.Generator().manual_seed(seed)
    E = scale * torch.randn(data.vocab_size, d, generator=g, dtype=torch.float64)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    return data, E, v


def test_padding_changes_nothing():
    data, E, v = _setup()
    p = torch.randn(E.shape[1], dtype=torch.float64)
    s = embedding.attention(E, p, data.tokens, data.mask)
    assert torch.all(s[~data.mask] == 0) and torch.allclose(s.sum(-1), torch.ones(40, dtype=torch.float64))
    # the same sequences padded with 3 extra columns of a different padding token give the same output
    extra = torch.full((40, 3), 5, dtype=torch.int64)
    tok2 = torch.cat([data.tokens, extra], 1)
    mask2 = torch.cat([data.mask, torch.zeros(40, 3, dtype=torch.bool)], 1)
    f1 = embedding.forward(E, p, v, data.tokens, data.mask)
    f2 = embedding.forward(E, p, v, tok2, mask2)
    assert torch.allclose(f1, f2, rtol=0, atol=1e-14)


def test_frequencies_rows_sum_to_one():
    data, E, v = _setup()
    C = embedding.frequencies(data.tokens, data.vocab_size, data.mask)
    assert C.shape == (40, data.vocab_size)
    assert torch.allclose(C.sum(1), torch.ones(40, dtype=torch.float64))
    assert torch.all(C[:, synthetic.PAD_ID] == 0)


@pytest.mark.parametrize("scale", [1e-3, 0.3, 3.0])
def test_one_step_matches_autograd(scale):
    data, E, v = _setup(scale=scale)
    a = embedding.one_step(E, v, data.tokens, data.labels, 7.0, data.mask)
    b = embedding.one_step_autograd(E, v, data.tokens, data.labels, 7.0, data.mask)
    assert float((a - b).norm() / (b - E).norm()) < 1e-12
    # only the v direction moves, and the padding row never moves
    delta = a - E
    assert torch.allclose(delta - (delta @ v)[:, None] * v / (v @ v), torch.zeros_like(delta), atol=1e-14)
    assert torch.all(delta[synthetic.PAD_ID] == 0)


def test_one_step_batched_over_leading_dims():
    data, E, v = _setup()
    Eb = torch.stack([E, 2 * E, -E])
    out = embedding.one_step(Eb, v, data.tokens, data.labels, 3.0, data.mask)
    assert out.shape == Eb.shape
    for k in range(3):
        assert torch.allclose(out[k], embedding.one_step(Eb[k], v, data.tokens, data.labels, 3.0, data.mask))


def test_small_init_gives_half_alpha_line():
    from mmtoken.tokens import token_stats

    data, E, v = _setup(scale=1e-8)
    E1 = embedding.one_step(E, v, data.tokens, data.labels, 5.0, data.mask)
    st = token_stats(data.tokens.numpy(), data.labels.numpy().astype(int), data.vocab_size, pad_id=0)
    assert np.allclose((E1 @ v).numpy(), 5.0 / 2 * st.alpha * float(v @ v), atol=1e-6)


def test_cls_problem_matches_the_model():
    data, E, v = _setup()
    problem = embedding.cls_problem(E, v, data.tokens, data.labels, data.mask)
    assert problem.K.shape == (40, 6, E.shape[1]) and problem.gamma.shape == (40, 6)
    p = torch.randn(E.shape[1], dtype=torch.float64)
    sat = grad.saturation(problem, p)
    u = data.labels * embedding.forward(E, p, v, data.tokens, data.mask)
    assert torch.allclose(sat.u, u, atol=1e-13)
    # the stable p-gradient equals autograd through the embedding model
    q = p.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(embedding.logistic_loss(E, q, v, data.tokens, data.labels, data.mask), q)
    assert torch.allclose(grad.grad_p(problem, p).value(), g, rtol=1e-10, atol=1e-14)


def test_train_cls_records_and_staged_steps():
    data, E, v = _setup()
    h = embedding.train_cls(E, v, data.tokens, data.labels, data.mask, steps=30, lr=0.1, rel_lr=0.01,
                            stage=7, record_every=5)
    assert list(h.steps) == [0, 5, 10, 15, 20, 25, 30]
    assert h.p.shape == (7, E.shape[1]) and h.probs.shape == (7, 40, 6)
    steps = np.diff(h.p.numpy(), axis=0)
    assert np.all(np.linalg.norm(steps, axis=1) <= 5 * max(0.1, 0.01 * float(h.norm.max())) + 1e-12)


def test_bad_inputs():
    data, E, v = _setup()
    with pytest.raises(ValueError, match="labels"):
        embedding.one_step(E, v, data.tokens, data.labels * 2, 1.0, data.mask)
    with pytest.raises(ValueError, match="only padding"):
        bad = data.mask.clone()
        bad[0] = False
        embedding.cls_problem(E, v, data.tokens, data.labels, bad)
    with pytest.raises(ValueError, match="token ids"):
        embedding.one_step(E[:3], v, data.tokens, data.labels, 1.0, data.mask)
    with pytest.raises(ValueError, match="v"):
        embedding.one_step(E, v[:2], data.tokens, data.labels, 1.0, data.mask)
