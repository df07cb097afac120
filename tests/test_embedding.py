"""Paper B's model: padding, the closed-form one step, the p phase as a paper-A problem."""

import dataclasses

import numpy as np
import pytest
import torch
from toy_embedding import toy_batch

from mmtoken.attention import grad
from mmtoken.embeddings import embedding, synthetic


def test_head_and_init_are_seeded_and_scaled():
    v = embedding.head(64, seed=1)
    assert v.shape == (64,) and v.dtype == torch.float64 and abs(float(v.norm()) - 1) < 1e-15
    assert torch.equal(v, embedding.head(64, seed=1)) and not torch.equal(v, embedding.head(64, seed=2))
    E0 = embedding.init(45, [1e-3, 0.5], 3, d=64, seed=2)
    assert E0.shape == (3, 2, 45, 64) and E0.dtype == torch.float64
    # one draw per seed, rescaled to every scale; rows of norm about sigma0
    assert torch.allclose(E0[:, 1], 500 * E0[:, 0], rtol=1e-12, atol=0)
    assert not torch.equal(E0[0, 0], E0[1, 0])
    assert abs(float(E0[:, 1].norm(dim=-1).mean()) - 0.5) < 0.05
    with pytest.raises(ValueError, match="scales"):
        embedding.init(45, [], 1, d=64, seed=2)
    with pytest.raises(ValueError, match="d must be"):
        embedding.head(0, seed=1)


def test_corpus_draws_the_settings_data_model():
    """The corpus of chapters 10 and 11: the settings' fields passed to ``synthetic.generate``, seed included."""
    from mmtoken.chapters import ch10_one_step, ch11_cls_margin

    s = ch10_one_step.Settings()
    ds = embedding.corpus(s)
    ref = synthetic.generate(
        s.n,
        s.T,
        n_pos=s.n_pos,
        n_neg=s.n_neg,
        n_neutral=s.n_neutral,
        min_len=s.min_len,
        pos_frac=s.pos_frac,
        seed=s.data_seed,
    )
    assert torch.equal(ds.tokens, ref.tokens) and torch.equal(ds.labels, ref.labels) and torch.equal(ds.mask, ref.mask)
    assert int(ds.mask.sum(1).min()) >= s.min_len and ds.n == s.n
    # chapter 11 draws chapter 10's corpus
    assert torch.equal(embedding.corpus(ch11_cls_margin.Settings()).tokens, ds.tokens)
    other = embedding.corpus(dataclasses.replace(s, data_seed=s.data_seed + 1))
    assert not torch.equal(other.tokens, ds.tokens)


def test_corpus_names_the_missing_fields():
    @dataclasses.dataclass(frozen=True)
    class Partial:
        n: int = 20
        T: int = 6

    with pytest.raises(TypeError, match="n_pos.*data_seed"):
        embedding.corpus(Partial())


def test_padding_changes_nothing():
    data, E, v = toy_batch()
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
    data, E, v = toy_batch()
    C = embedding.frequencies(data.tokens, data.vocab_size, data.mask)
    assert C.shape == (40, data.vocab_size)
    assert torch.allclose(C.sum(1), torch.ones(40, dtype=torch.float64))
    assert torch.all(C[:, synthetic.PAD_ID] == 0)


def test_one_step_batched_over_leading_dims():
    data, E, v = toy_batch()
    Eb = torch.stack([E, 2 * E, -E])
    out = embedding.one_step(Eb, v, data.tokens, data.labels, 3.0, data.mask)
    assert out.shape == Eb.shape
    for k in range(3):
        assert torch.allclose(out[k], embedding.one_step(Eb[k], v, data.tokens, data.labels, 3.0, data.mask))


def test_small_init_gives_half_alpha_line():
    from mmtoken.embeddings.corpus_stats import token_stats

    data, E, v = toy_batch(scale=1e-8)
    E1 = embedding.one_step(E, v, data.tokens, data.labels, 5.0, data.mask)
    st = token_stats(data.tokens.numpy(), data.labels.numpy().astype(int), data.vocab_size, pad_id=0)
    assert np.allclose((E1 @ v).numpy(), 5.0 / 2 * st.alpha * float(v @ v), atol=1e-6)


def test_cls_problem_matches_the_model():
    data, E, v = toy_batch()
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


def test_bad_inputs():
    data, E, v = toy_batch()
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


# ---------------------------------------------------------------------------
# Batched p problem, the one-step error bound (chapter 11's trainers: test_ch11_cls_margin.py).


def test_cls_problem_and_attention_batched_over_tables():
    data, E, v = toy_batch()
    Eb = torch.stack([E, 0.5 * E, E.flip(0)])
    pb = embedding.cls_problem(Eb, v, data.tokens, data.labels, data.mask)
    assert pb.K.shape == (3, 40, 6, E.shape[1]) and pb.gamma.shape == (3, 40, 6)
    P = torch.randn(5, 3, E.shape[1], dtype=torch.float64)
    S = embedding.attention(Eb, P, data.tokens, data.mask)
    assert S.shape == (5, 3, 40, 6)
    for k in range(3):
        one = embedding.cls_problem(Eb[k], v, data.tokens, data.labels, data.mask)
        assert torch.equal(pb.K[k], one.K) and torch.equal(pb.gamma[k], one.gamma)
        assert torch.allclose(S[2, k], embedding.attention(Eb[k], P[2, k], data.tokens, data.mask), atol=1e-15)


@pytest.mark.parametrize("scale", [1e-3, 0.5, 5.0])
def test_one_step_error_within_the_bound(scale):
    from mmtoken.embeddings.corpus_stats import token_stats

    data, E, v = toy_batch(scale=scale)
    eta = 7.0
    E1 = embedding.one_step(E, v, data.tokens, data.labels, eta, data.mask)
    st = token_stats(data.tokens.numpy(), data.labels.numpy().astype(int), data.vocab_size, pad_id=0)
    C = embedding.frequencies(data.tokens, data.vocab_size, data.mask)
    f0 = (E @ v) @ C.T
    bound = (E @ v).abs() + eta / (4 * data.n) * (f0.abs() @ C) * float(v @ v)
    err = ((E1 @ v) - eta / 2 * torch.as_tensor(st.alpha) * float(v @ v)).abs()
    assert torch.all(err <= bound + 1e-12)
