"""Chapter 12's computation at tiny scale: the gather trick, the one step on E, training, metrics, claims."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch

from mmtoken import embedding, ledger, reviews
from mmtoken.datasets import text
from mmtoken.experiments import real_reviews as rr
from mmtoken.tokens import token_stats

POS, NEG = ["great", "superb", "moving"], ["awful", "dull", "boring"]
NEUTRAL = [f"w{k}" for k in range(30)]


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    torch.set_num_threads(1)


def toy_dataset(n_train=240, n_test=120, seed=0) -> text.TextDataset:
    """Reviews of 8-16 neutral words and one or two words of their polarity (the paper's data model)."""
    rng = np.random.default_rng(seed)
    texts, labels, split = [], [], []
    for k in range(n_train + n_test):
        y = 1 if k % 2 == 0 else -1
        words = list(rng.choice(NEUTRAL, rng.integers(8, 17)))
        for _ in range(rng.integers(1, 3)):
            words.insert(rng.integers(0, len(words) + 1), rng.choice(POS if y > 0 else NEG))
        texts.append(" ".join(words))
        labels.append(y)
        split.append(0 if k < n_train else 1)
    return text.make_dataset("toy", texts, labels, split, {"source": "test"})


TINY = rr.Setup("toy", min_count=1, max_len=24, d=16, batch=32, epochs=25, lr=0.03, init_std=0.1,
                p_epochs=5, p_lr=0.05, bow_iters=50, init_sweep=(1e-2,), scan=(-3.0, 0.0, 3.0))


@pytest.fixture(scope="module")
def tiny_result(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("MMTOKEN_DATA", str(tmp_path_factory.mktemp("data")))
    torch.set_num_threads(1)
    try:
        yield rr.compute(TINY, toy_dataset())
    finally:
        mp.undo()


def random_batch(V=20, d=5, B=4, T=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    E = torch.randn(V, d, generator=g, dtype=torch.float64)
    p = torch.randn(d, generator=g, dtype=torch.float64)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    tokens = torch.randint(1, V, (B, T), generator=g)
    lengths = torch.tensor([7, 3, 1, 5])
    tokens[torch.arange(T)[None, :] >= lengths[:, None]] = 0
    return E, p, v, tokens


def test_gather_trick_matches_the_model():
    E, p, v, tokens = random_batch()
    f, s = rr.outputs(E @ p, E @ v, tokens)
    mask = tokens != 0
    assert torch.allclose(f, embedding.forward(E, p, v, tokens, mask), atol=1e-12)
    assert torch.allclose(s, embedding.attention(E, p, tokens, mask), atol=1e-12)
    assert (s[~mask] == 0).all() and torch.allclose(s.sum(-1), torch.ones(4, dtype=torch.float64))


def test_one_step_is_the_closed_form():
    """At p = 0: E^1_s = E^0_s + eta (1/n) sum_i y_i sigma(-y_i f_i) n_s(X_i)/T_i v, and ~ E^0 + (eta/2) alpha_s v."""
    E, _, v, tokens = random_batch(B=4)
    E = 1e-6 * E
    y = torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    p0 = torch.zeros_like(v)
    new, eta = rr.one_step_E(rr.Params(E, p0, v), tokens, y)
    f0 = embedding.forward(E, p0, v, tokens, tokens != 0)
    T = (tokens != 0).sum(-1)
    counts = torch.zeros(4, E.shape[0], dtype=torch.float64)
    for i in range(4):
        counts[i] = torch.bincount(tokens[i][tokens[i] != 0], minlength=E.shape[0])
    coef = (y * torch.sigmoid(-y * f0) / T) @ counts / 4
    assert torch.allclose(new.E - E, eta * coef[:, None] * v[None, :], atol=1e-12)
    assert np.isclose(float((new.E - E).norm(dim=1).max()), 1.0)  # eta: the largest row moves by one
    st = token_stats(tokens.numpy(), y.numpy().astype(int), E.shape[0], pad_id=0)
    assert np.allclose(((new.E - E) @ v).numpy(), eta / 2 * st.alpha * float(v @ v), rtol=1e-4, atol=1e-9)


def test_fit_trains_only_the_named_parameters():
    E, p, v, tokens = random_batch()
    y = torch.tensor([1.0, -1.0, 1.0, -1.0])
    params = rr.Params(E.float(), torch.zeros(5), v.float())
    E0, v0 = params.E.clone(), params.v.clone()
    hist = rr.fit(params, tokens, y, train=("p",), epochs=3, lr=0.1, batch=2, seed=0)
    assert len(hist) == 3 and torch.equal(params.E, E0) and torch.equal(params.v, v0)
    assert float(params.p.norm()) > 0


def test_evaluate_selection_ratio():
    # two sequences of four tokens; token 1 is "top"; attention logits make it take half the mass
    E = torch.tensor([[0.0], [float(np.log(3.0))], [0.0], [0.0]])
    params = rr.Params(E, torch.ones(1), torch.ones(1))
    tokens = torch.tensor([[1, 2, 3, 2], [1, 2, 0, 0]])
    top = torch.tensor([False, True, False, False])
    m = rr.evaluate(params, tokens, torch.tensor([1.0, 1.0]), top)
    mass = (3 / 6 + 3 / 4) / 2
    share = (1 / 4 + 1 / 2) / 2
    assert np.isclose(m["top_mass"], mass) and np.isclose(m["top_share"], share)
    assert np.isclose(m["selection"], mass / share)


def test_presence_and_bag_of_words():
    tokens = np.array([[1, 1, 2, 0], [3, 0, 0, 0]])
    X = reviews.presence(tokens, 5).toarray()
    assert X.tolist() == [[0, 1, 1, 0, 0], [0, 0, 0, 1, 0]]
    rng = np.random.default_rng(0)
    toks = rng.integers(1, 10, size=(80, 6))
    y = np.where(np.isin(toks, [1, 2]).sum(1) > np.isin(toks, [3, 4]).sum(1), 1, -1)
    r = rr.bow_logistic(toks, y, toks, y, 10, C=10.0, iters=100)
    assert r["train_accuracy"] >= 0.9 and r["w"][1] > 0 > r["w"][3]


def test_top_decile():
    class S:
        count = np.array([0, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 5])
        delta = np.array([np.nan, .9, -.95, .1, 0, .2, -.1, .3, -.3, .05, .4, 1.0])
    top = rr.top_decile(S)
    assert top.tolist() == [False, False, True] + [False] * 9  # the rare token (count 5) is excluded


def test_tiny_run_shows_the_picture(tiny_result):
    r = tiny_result
    m = r.metrics
    assert m["one_step"]["align_20"] > 0.99  # one step: E v is a function of alpha
    assert m["one_step"]["rel_err_first_order"] < 1e-3
    assert m["joint"]["accuracy"] >= 0.95  # the polar words decide the label
    # joint training: both polarities get high attention (U shape), uniform attention has none
    assert m["joint"]["ushape_20"] > 0.5 and np.isnan(m["uniform"]["ushape_20"])
    assert m["joint"]["selection"] > 3
    polar = [r.vocab.index(w) for w in POS + NEG]
    neutral = [r.vocab.index(w) for w in NEUTRAL]
    assert r.logits["joint"][polar].min() > np.median(r.logits["joint"][neutral])
    assert set(m) >= {"one_step", "two_phase", "joint", "joint_v", "uniform", "uniform_fast", "bow", "scan"}
    assert len(m["scan"]["accuracy"]) == 3
    assert len(r.examples) == 0 or all(len(ex["words"]) == len(ex["attention"]) for ex in r.examples)


def test_result_cache_roundtrip(tiny_result, tmp_path):
    path = tmp_path / "r.npz"
    rr._save(tiny_result, path)
    back = rr._load(path)
    assert back.setup == tiny_result.setup and back.vocab == tiny_result.vocab
    assert back.metrics["joint"]["accuracy"] == tiny_result.metrics["joint"]["accuracy"]
    for k in tiny_result.logits:
        assert np.array_equal(back.logits[k], tiny_result.logits[k])
    assert rr._key(TINY, "a") != rr._key(TINY, "b")
    assert rr._key(TINY, "a") != rr._key(rr.Setup("toy", min_count=2, max_len=24), "a")


def test_tables_and_plots(tiny_result):
    res = rr.Result({"toy": tiny_result}, {})
    table = rr.summary_table(res)
    assert {"test acc", "spearman(Ev, alpha)"} <= set(table.columns)
    tokens = rr.attended_tokens(tiny_result, k=3, min_count=1)
    assert len(tokens) == 3
    for fig in (rr.plot_alignment(res), rr.plot_ushape(res), rr.plot_accuracy(res), rr.plot_scan(res)):
        assert fig.axes
    if tiny_result.examples:
        assert rr.plot_attention(res, "toy").axes
    import matplotlib.pyplot as plt
    plt.close("all")


def test_setups_and_unknown_dataset():
    assert rr.setup("imdb", "quick").min_count == 10 and rr.setup("imdb", "quick").max_len == 512
    assert rr.setup("rt", "quick").max_len == 64
    assert rr.setup("yelp", "quick").max_train == 50_000
    with pytest.raises(ValueError):
        rr.setup("sst2")


def test_claims_registered():
    ids = set(ledger.REGISTRY)
    for ds in ("imdb", "rt"):
        for what in ("accuracy", "alignment", "u_shape", "selection"):
            c = ledger.REGISTRY[f"B.{ds}.{what}"]
            assert c.kind == "observation" and c.chapter == "12_real_reviews"
    assert ("B.yelp.accuracy" in ids) == rr.YELP_REGISTERED
    assert set(rr.FIGURES) >= {"fig-real-alignment", "fig-real-ushape", "fig-real-attention-imdb",
                               "fig-real-accuracy"}
