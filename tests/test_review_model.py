"""mmtoken.embeddings.review_model: the gather model, collapsed rows, length batches, the one step, Adam fits, evaluation,
the bag-of-words baseline."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mmtoken.embeddings import corpus_stats, embedding, review_model

pytestmark = pytest.mark.usefixtures("review_data_dir")


def random_batch(V=20, d=5, B=4, T=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    E = torch.randn(V, d, generator=g, dtype=torch.float64)
    p = torch.randn(d, generator=g, dtype=torch.float64)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    tokens = torch.randint(1, 6, (B, T), generator=g)  # few ids: many repeats within a row
    lengths = torch.tensor([7, 3, 1, 5])
    tokens[torch.arange(T)[None, :] >= lengths[:, None]] = 0
    return E, p, v, tokens


def test_gather_trick_and_collapsed_rows_match_the_model():
    E, p, v, tokens = random_batch()
    mask = tokens != 0
    f, s = review_model.outputs(E @ p, E @ v, tokens)
    assert torch.allclose(f, embedding.forward(E, p, v, tokens, mask), atol=1e-12)
    assert torch.allclose(s, embedding.attention(E, p, tokens, mask), atol=1e-12)
    ids, counts = review_model.collapse(tokens.numpy())
    f2, s2 = review_model.outputs(E @ p, E @ v, torch.as_tensor(ids, dtype=torch.long), torch.as_tensor(counts))
    assert torch.allclose(f2, f, atol=1e-12)
    # the attention of a distinct token is the total over its occurrences
    for i in range(4):
        for j in np.flatnonzero(ids[i]):
            assert np.isclose(float(s2[i, j]), float(s[i][tokens[i] == int(ids[i, j])].sum()))


def test_collapse_counts_every_token_once():
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 6, size=(50, 12))
    ids, counts = review_model.collapse(tokens)
    for row, i, c in zip(tokens, ids, counts):
        real = row[row != 0]
        u, k = np.unique(real, return_counts=True)
        assert sorted(zip(i[c > 0], c[c > 0])) == sorted(zip(u, k))
        assert (i[c == 0] == 0).all()


def test_length_batches_cover_each_row_once():
    lengths = np.random.default_rng(0).integers(1, 50, size=1000)
    batches = review_model.length_batches(lengths, 32, torch.Generator().manual_seed(0), pool=5)
    rows = torch.cat(batches).numpy()
    assert sorted(rows) == list(range(1000)) and max(len(b) for b in batches) <= 32
    # batches group similar lengths: the spread inside a batch is far below the overall spread
    assert np.mean([np.ptp(lengths[b.numpy()]) for b in batches]) < 0.5 * np.ptp(lengths)
    with pytest.raises(ValueError, match="batch"):
        review_model.length_batches(lengths, 0, torch.Generator())


def test_one_step_is_the_closed_form():
    """At p = 0: E^1_s - E^0_s = eta (1/n) sum_i y_i sigma(-y_i f_i) n_s(X_i)/T_i v, and ~ (eta/2) alpha_s v."""
    E, _, v, tokens = random_batch(V=12)
    E = 1e-6 * E
    y = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    p0 = torch.zeros_like(v)
    data = review_model.Chunks.build(tokens.numpy(), y.numpy(), size=3, dtype=torch.float64)
    new, eta = review_model.one_step_E(review_model.Params(E, p0, v), data)
    f0 = embedding.forward(E, p0, v, tokens, tokens != 0).numpy()
    coef = review_model.one_step_closed_form(tokens.numpy(), y.numpy(), f0, E.shape[0])
    assert torch.allclose(new.E - E, eta * torch.as_tensor(coef)[:, None] * v[None, :], atol=1e-13)
    assert np.isclose(float((new.E - E).norm(dim=1).max()), 1.0)  # eta: the largest row moves by one
    st = corpus_stats.token_stats(tokens.numpy(), y.numpy().astype(int), E.shape[0], pad_id=0)
    assert np.allclose(((new.E - E) @ v).numpy(), eta / 2 * st.alpha * float(v @ v), rtol=1e-4, atol=1e-9)
    assert np.allclose(review_model.predict(review_model.Params(E, p0, v), data), f0, atol=1e-15)


def test_fit_trains_only_the_named_parameters_and_warms_up():
    E, p, v, tokens = random_batch()
    y = torch.tensor([1.0, -1.0, 1.0, -1.0])
    params = review_model.Params(E.float(), torch.zeros(5), v.float())
    E0, v0 = params.E.clone(), params.v.clone()
    hist = review_model.fit(params, tokens, y, train=("p",), epochs=3, lr=0.1, batch=2, seed=0)
    assert len(hist.loss) == 3 and torch.equal(params.E, E0) and torch.equal(params.v, v0)
    assert float(params.p.norm()) > 0
    # Adam's first step moves each coordinate by the step size; a warm-up of two epochs of one batch each
    # halves the first step
    for warmup, size in ((0, 0.1), (2, 0.05)):
        one = review_model.Params(E.float(), torch.zeros(5), v.float())
        review_model.fit(one, tokens, y, train=("p",), epochs=1, lr=0.1, batch=4, seed=0, warmup=warmup)
        assert float(one.p.abs().max()) == pytest.approx(size, rel=1e-4)
    with pytest.raises(ValueError, match="train"):
        review_model.fit(params, tokens, y, train=("q",), epochs=1, lr=0.1, batch=2, seed=0)


def test_fit_shows_a_bar_over_batches_only_when_asked(monkeypatch, capsys):
    E, p, v, tokens = random_batch()
    y = torch.tensor([1.0, -1.0, 1.0, -1.0])
    for mode, shown in (("on", True), ("off", False)):
        monkeypatch.setenv("MMTOKEN_PROGRESS", mode)
        params = review_model.Params(E.float(), torch.zeros(5), v.float())
        review_model.fit(params, tokens, y, train=("p",), epochs=3, lr=0.1, batch=2, seed=0)
        err = capsys.readouterr().err
        assert ("fit p" in err and "/6 " in err) == shown, err  # a bar over 3 epochs of 2 batches


def test_evaluate_counts_empty_reviews_as_errors_and_measures_selection():
    # two sequences of four tokens; token 1 is "top"; attention logits make it take half the mass
    E = torch.tensor([[0.0], [float(np.log(3.0))], [0.0], [0.0]])
    params = review_model.Params(E, torch.ones(1), torch.ones(1))
    data = review_model.Chunks.build(np.array([[1, 2, 3, 2], [1, 2, 0, 0]]), np.array([1, 1]))
    top = torch.tensor([False, True, False, False])
    m = review_model.evaluate(params, data, 0, top)
    mass, share = (3 / 6 + 3 / 4) / 2, (1 / 4 + 1 / 2) / 2
    assert np.isclose(m["top_mass"], mass) and np.isclose(m["top_share"], share)
    assert np.isclose(m["selection"], mass / share) and m["accuracy"] == 1.0
    assert review_model.evaluate(params, data, 2)["accuracy"] == 0.5  # two empty reviews: two errors
    with pytest.raises(ValueError, match="without any token"):
        review_model.Chunks.build(np.array([[0, 0]]), np.array([1]))


def test_bag_of_words_counts_empty_reviews_as_errors():
    tokens = np.array([[1, 1, 2, 0], [3, 0, 0, 0]])
    X = review_model.presence(tokens, 5).toarray()
    assert X.tolist() == [[0, 1, 1, 0, 0], [0, 0, 0, 1, 0]]
    rng = np.random.default_rng(0)
    toks = rng.integers(1, 10, size=(80, 6))
    y = np.where(np.isin(toks, [1, 2]).sum(1) > np.isin(toks, [3, 4]).sum(1), 1, -1)
    empty = np.vstack([toks, np.zeros((20, 6), dtype=int)])
    r = review_model.bow_logistic(
        toks, y, {"same": (toks, y), "with_empty": (empty, np.r_[y, np.ones(20)])}, 10, C=10.0
    )
    assert r["train_accuracy"] >= 0.9 and r["w"][1] > 0 > r["w"][3]
    assert r["accuracy"]["with_empty"] == pytest.approx(r["accuracy"]["same"] * 80 / 100)
