"""Chapter 12's computation at tiny scale: the model, the one step, phase two, statistics, the protocol, the cache."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
import warnings

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch

from mmtoken import (
    corpus_stats,
    embedding,
    grad,
    ledger,
    resultcache,
    review_model,
    review_phase_two,
    review_regime,
    review_runs,
    review_search,
)
from mmtoken.datasets import corpus, text, tokenize
from mmtoken.datasets.download import cache_dir
from mmtoken.experiments import real_reviews as rr

POS, NEG = ["great", "superb", "moving"], ["awful", "dull", "boring"]
NEUTRAL = [f"w{k}" for k in range(30)]


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    torch.set_num_threads(1)


def toy_dataset(n_train=240, n_test=120, seed=0, name="toy") -> corpus.TextDataset:
    """Reviews of 8-16 neutral words and one or two words of their polarity (the paper's data model),
    plus one training and one test review made of a word seen nowhere else."""
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
    texts[n_train + 1] = "unseenword"  # a test review without any in-vocabulary word (min_count 2)
    return corpus.make_dataset(name, texts, labels, split, {"source": "test"})


TINY = review_runs.Setup(
    "toy",
    min_count=2,
    max_len=24,
    d=16,
    batch=32,
    lr=0.03,
    epochs=12,
    init_std=0.1,
    lr_v=0.03,
    epochs_v=12,
    lr_uniform=0.1,
    epochs_uniform=12,
    p2_steps=60,
    scan=(-3.0, 0.0, 3.0),
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """One seed of every run on the toy data, and the seed-free profile."""
    mp = pytest.MonkeyPatch()
    mp.setenv("MMTOKEN_DATA", str(tmp_path_factory.mktemp("data")))
    torch.set_num_threads(1)
    try:
        ds = toy_dataset()
        data = review_runs.prepare(TINY, ds)
        arrays, metrics = review_runs.run_seed(TINY, data, 10)
        yield ds, data, arrays, metrics, review_runs.profile(TINY, ds, data)
    finally:
        mp.undo()


def random_batch(V=20, d=5, B=4, T=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    E = torch.randn(V, d, generator=g, dtype=torch.float64)
    p = torch.randn(d, generator=g, dtype=torch.float64)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    tokens = torch.randint(1, 6, (B, T), generator=g)  # few ids: many repeats within a row
    lengths = torch.tensor([7, 3, 1, 5])
    tokens[torch.arange(T)[None, :] >= lengths[:, None]] = 0
    return E, p, v, tokens


# ----------------------------------------------------------------------------- the model
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


# ----------------------------------------------------------------------------- phase two
@pytest.mark.parametrize("scale", [0.5, 40.0])
def test_logit_gradient_is_grad_p_of_the_cls_problem(scale):
    """The gathered, saturation-safe gradient equals mmtoken.grad.grad_p on the materialised keys E_{x_it},
    unsaturated and deep in saturation (where plain autograd loses the direction)."""
    V, d = 9, 12
    g = torch.Generator().manual_seed(3)
    E = torch.randn(V, d, generator=g, dtype=torch.float64)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    p = scale * torch.randn(d, generator=g, dtype=torch.float64)
    tokens = torch.randint(1, V, (30, 6), generator=g)
    tokens[::3, 4:] = 0
    y = torch.where(torch.arange(30) % 2 == 0, 1.0, -1.0).double()
    data = review_model.Chunks.build(tokens.numpy(), y.numpy(), size=7, dtype=torch.float64)
    ga, log_scale, loss, _ = review_phase_two.logit_gradient(E @ p, E @ v, data)
    gp = E.T @ ga
    problem = embedding.cls_problem(E, v, tokens, y, tokens != 0)
    ref = grad.grad_p(problem, p)
    assert torch.allclose(gp / gp.norm(), ref.direction, atol=1e-10)
    assert np.isclose(log_scale + float(torch.log(gp.norm())), float(ref.log_norm), atol=1e-9)
    assert np.isclose(loss, float(grad.loss_value(problem, p)), rtol=1e-12)


def test_phase_two_descends_and_selects_on_the_data_model():
    """With d >= |V| and sequences from the data model, phase two ends on the important token of every review."""
    ds = toy_dataset(n_train=200, n_test=60)
    s = dataclasses.replace(TINY, d=64, small_std=0.1, p2_steps=300)
    data = review_runs.prepare(s, ds)
    top = torch.as_tensor(review_model.top_decile(data.stats.count, data.stats.delta, 1))
    v, E_small, _ = review_runs.init(s, data.V, 10)
    m, arrays = review_runs.two_phase(s, data, v, E_small, top, conflicts=True)
    h, tp = m["phase_two"], m["two_phase"]
    assert all(b <= a for a, b in zip(h["loss"], h["loss"][1:]))  # monotone: rejected steps are not taken
    assert tp["attends_optimal"] == 1.0 and tp["accuracy"] >= 0.95 and tp["attended_conflicts"]["feasible"]
    assert tp["unsaturated"] < 1e-6 and tp["p_norm"] > 10
    assert m["one_step"]["closed_form_error"] < 1e-12
    with pytest.raises(ValueError, match="steps"):
        review_phase_two.phase_two(torch.eye(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64), None, steps=0)


def test_selection_conflicts_find_cycles():
    # review 0 chooses 1 over 2, review 1 chooses 2 over 1: a two-cycle; review 2 chooses 3 over 4: fine
    tokens = np.array([[1, 2, 0], [2, 1, 1], [3, 4, 0]])
    r = review_phase_two.selection_conflicts(tokens, np.array([1, 2, 3]), 5)
    assert not r["feasible"] and r["two_cycles"] == 1 and r["example"] == (1, 2)
    assert r["example_counts"] == (1, 1) and np.isclose(r["conflicted"], 2 / 3) and r["largest"] == 2
    ok = review_phase_two.selection_conflicts(tokens, np.array([1, 1, 3]), 5)
    assert ok["feasible"] and ok["two_cycles"] == 0 and ok["conflicted"] == 0
    # a longer cycle without any two-cycle: 1 > 2, 2 > 3, 3 > 1
    cyc = review_phase_two.selection_conflicts(np.array([[1, 2], [2, 3], [3, 1]]), np.array([1, 2, 3]), 4)
    assert not cyc["feasible"] and cyc["two_cycles"] == 0 and cyc["largest"] == 3


def test_top_tokens_optimal_and_attended():
    tokens = np.array([[1, 2, 3], [1, 2, 0]])
    data = review_model.Chunks.build(tokens, np.array([1, -1]), dtype=torch.float64)
    b = torch.tensor([0.0, 0.5, -2.0, 0.1], dtype=torch.float64)
    assert review_phase_two.top_tokens(b, data, labels=True).tolist() == [1, 2]  # y_i b_s largest
    assert review_phase_two.top_tokens(b, data).tolist() == [1, 1]


# ----------------------------------------------------------------------------- statistics
def test_partial_spearman_agrees_with_residual_ranks():
    rng = np.random.default_rng(0)
    z = rng.normal(size=400)
    x = z + rng.normal(size=400)
    y = z + 0.5 * x + rng.normal(size=400)
    from scipy.stats import rankdata

    rx, ry, rz = rankdata(x), rankdata(y), rankdata(z)
    res = lambda r: r - np.polyval(np.polyfit(rz, r, 1), rz)  # noqa: E731
    expected = np.corrcoef(res(rx), res(ry))[0, 1]
    assert np.isclose(corpus_stats.partial_spearman(x, y, z), expected, atol=1e-12)
    assert np.isclose(corpus_stats.partial_spearman(x, y, np.exp(z)), expected, atol=1e-12)  # monotone in z: unchanged
    assert np.isclose(corpus_stats.spearman(x, y), np.corrcoef(rx, ry)[0, 1])
    assert np.isnan(corpus_stats.spearman(np.ones(5), np.arange(5.0)))
    with pytest.raises(ValueError, match="one length"):
        corpus_stats.partial_spearman(x, y, z[:3])


def _stats(delta, count):
    delta, count = np.asarray(delta, float), np.asarray(count, float)
    return corpus_stats.TokenStats(count, count * (1 + delta) / 2, count * (1 - delta) / 2, delta / 100, delta)


def test_u_shape_separates_a_u_from_one_arm_and_from_frequency():
    rng = np.random.default_rng(0)
    delta = rng.uniform(-1, 1, 500)
    count = rng.integers(100, 10_000, 500).astype(float)
    st = _stats(delta, count)
    u = corpus_stats.u_shape(np.abs(delta) + 0.01 * rng.normal(size=500), st)
    assert u.partial > 0.9 and u.positive > 0.9 and u.negative > 0.9 and abs(u.signed) < 0.2
    one_arm = corpus_stats.u_shape(delta, st)  # attention monotone in Delta: only the positive arm rises
    assert one_arm.positive > 0.9 and one_arm.negative < -0.9
    # |Delta| and the logits both follow the count (rare tokens: extreme Delta, high logits), nothing else
    size = np.clip(1.5 / np.log(count) + 0.01 * rng.normal(size=500), 0.01, 1)
    freq = corpus_stats.u_shape(-np.log(count) + 0.1 * rng.normal(size=500), _stats(np.sign(delta) * size, count))
    assert freq.spearman > 0.5 and abs(freq.partial) < 0.15 and freq.count < -0.9
    assert np.isnan(corpus_stats.partial_spearman(np.arange(9.0), np.arange(9.0) ** 2, np.arange(9.0)))
    few = corpus_stats.u_shape(np.abs(delta), _stats(delta, np.full(500, 50.0)))
    assert few.n == 0 and np.isnan(few.partial)


def test_polarity_mix():
    # tokens: 1 polar positive, 2 polar negative, 3 neutral; reviews: [1,3] (+), [1,2] (-), [3] (+)
    st = _stats([np.nan, 1.0, -0.8, 0.1], [0, 50, 50, 50])
    mix = corpus_stats.polarity_mix(np.array([[1, 3, 3], [1, 2, 0], [3, 0, 0]]), np.array([1, -1, 1]), st)
    assert np.isclose(mix.exclusive, 1 / 3) and np.isclose(mix.polar, 2 / 3)
    assert np.isclose(mix.per_sequence, 1.0) and np.isclose(mix.both_signs, 1 / 3)
    assert np.isclose(mix.against, 1 / 3) and np.isclose(mix.none, 1 / 3)


# ----------------------------------------------------------------------------- the protocol
def test_validation_split_is_stratified_disjoint_and_seeded():
    labels = np.r_[np.ones(60), -np.ones(40)].astype(int)
    rows = np.arange(100)
    fit, val = review_runs.validation_split(labels, rows, 0.2, seed=3)
    assert np.intersect1d(fit, val).size == 0 and np.union1d(fit, val).tolist() == rows.tolist()
    assert (labels[val] > 0).sum() == 12 and (labels[val] < 0).sum() == 8
    assert np.array_equal(val, review_runs.validation_split(labels, rows, 0.2, seed=3)[1])
    with pytest.raises(ValueError, match="fraction"):
        review_runs.validation_split(labels, rows, 1.5)


def test_prepare_counts_empty_reviews():
    ds = toy_dataset()
    data = review_runs.prepare(TINY, ds)
    assert data.n_empty_eval == 1 and data.evaluation.size == 119 and data.fit.size == 240
    val = review_runs.prepare(TINY, ds, part="validation")
    assert val.fit.size == 192 and val.evaluation.size == 48 and np.intersect1d(val.fit, data.evaluation).size == 0
    with pytest.raises(ValueError, match="part"):
        review_runs.prepare(TINY, ds, part="train")


def test_verbatim_overlap():
    ds = corpus.make_dataset("dup", ["a b", "c d", "a b", "e f", "c d"], [1, -1, 1, 1, -1], [0, 0, 1, 1, 1])
    assert review_runs.verbatim_overlap(ds) == 2


def test_tiny_run_shows_the_picture(tiny):
    ds, data, arrays, m, prof = tiny
    assert m["one_step"]["alignment"] > 0.99 and m["one_step"]["closed_form_error"] < 1e-12
    assert m["one_step"]["first_order_error"] < 1e-3
    assert m["joint"]["accuracy"] >= 0.9 and m["joint"]["selection"] > 3
    assert m["joint"]["accuracy"] <= 119 / 120  # the empty test review is an error
    u = m["joint"]["u_shape"]  # 8 tokens seen >= 100 times in the tiny corpus
    assert u["n"] == 8 and u["n_positive"] + u["n_negative"] <= u["n"] and -1 <= u["spearman"] <= 1
    assert m["uniform"]["u_shape"] is None  # p = 0: every logit is zero
    polar = [data.corpus.vocab.index(w) for w in POS + NEG]
    neutral = [data.corpus.vocab.index(w) for w in NEUTRAL]
    assert arrays["logits/joint"][polar].min() > np.median(arrays["logits/joint"][neutral])
    assert set(m) >= {"one_step", "two_phase", "joint", "joint_v", "uniform", "uniform_tuned", "scan", "phase_two"}
    assert len(m["scan"]["loss"]) == 3 and m["two_phase"]["stop"] in ("converged", "budget")
    assert m["examples"] and all(len(ex["words"]) == arrays[f"example/{i}"].size for i, ex in enumerate(m["examples"]))
    assert prof["optimal_conflicts"]["feasible"] and prof["polarity"]["against"] == 0.0
    assert prof["empty_test"] == 1 and prof["bow"]["accuracy"] <= 119 / 120


def test_search_chooses_the_best_validation_trial(monkeypatch):
    ds = toy_dataset()
    monkeypatch.setitem(review_search.MAX_EPOCHS, "toy", 3)
    grid = dict(
        review_search.GRID,
        lr=(0.01, 0.1),
        init_std=(0.1,),
        d=(16,),
        warmup=(0,),
        min_count={"toy": (2,)},
        max_len={"toy": (24,)},
        lr_v=(0.03,),
        lr_uniform=(0.1,),
        bow_C=(0.1, 1.0),
    )
    monkeypatch.setattr(review_search, "GRID", grid)
    chosen, records = review_search.search(TINY, ds)
    lr_trials = {r["value"]: r for r in records if r["factor"] == "lr"}
    best = max(lr_trials.values(), key=lambda r: r["best"])
    assert chosen.lr == best["value"] and chosen.epochs == best["best_epoch"]
    assert all(len(r["val_accuracy"]) == 3 for r in records if r["run"] != "bow")
    bows = {r["value"]: r["best"] for r in records if r["factor"] == "bow_C"}
    assert chosen.bow_C == max(bows, key=lambda c: (bows[c], -list(bows).index(c)))


def test_regime_control_is_drawn_from_the_data_model():
    ds = toy_dataset()
    data = review_runs.prepare(TINY, ds)
    monkey = dict(review_regime.CONTROL, n_pos=3, n_neg=3, T=12)
    old = review_regime.CONTROL
    review_regime.CONTROL = monkey
    try:
        ctl = review_regime.control_data(data, seed=1)
    finally:
        review_regime.CONTROL = old
    assert ctl.V == data.V and ctl.fit.size == data.fit.size and ctl.evaluation.size == data.evaluation.size
    polar = ctl.stats.count[1:7] > 0
    assert np.all(np.abs(ctl.stats.delta[1:7][polar]) == 1)  # completely positive / negative tokens


# ----------------------------------------------------------------------------- the results cache
def _entry():
    return {"a": np.arange(6.0).reshape(2, 3), "b": np.array([1, 2], dtype=np.int32)}, {"note": "x", "n": 2}


def test_cache_roundtrip_and_each_kind_of_damage(tmp_path):
    path = tmp_path / "imdb-seed10-x.npz"
    calls = []

    def compute():
        calls.append(1)
        return _entry()

    arrays, meta = resultcache.load_or_compute(path, "real_reviews/imdb/seed10", "fp1", compute, {"a": (2, None)})
    assert len(calls) == 1 and meta == {"note": "x", "n": 2} and np.array_equal(arrays["a"], _entry()[0]["a"])
    resultcache.load_or_compute(path, "real_reviews/imdb/seed10", "fp1", compute)
    assert len(calls) == 1  # read back, not recomputed

    def damaged(make):
        make()
        with pytest.warns(RuntimeWarning, match="recomputing"):
            resultcache.load_or_compute(path, "real_reviews/imdb/seed10", "fp1", compute, {"a": (2, 3)})
        resultcache.load(path, "real_reviews/imdb/seed10", "fp1")  # replaced by a good file

    other = tmp_path / "rt-seed10-x.npz"
    resultcache.save(other, "real_reviews/rt/seed10", "fp1", *_entry())
    damaged(lambda: shutil.copyfile(other, path))  # another data set's result
    damaged(lambda: resultcache.save(path, "real_reviews/imdb/seed10", "fp0", *_entry()))  # other code/config/data
    damaged(lambda: path.write_bytes(path.read_bytes()[:200]))  # truncated
    damaged(lambda: path.write_bytes(b"not a zip file at all"))  # garbage
    damaged(lambda: resultcache.save(path, "real_reviews/imdb/seed10", "fp1", {"a": np.zeros((5, 3))}, {}))  # shape
    damaged(lambda: np.savez(path, a=np.zeros(3)))  # no header

    def missing_array():  # header lists an array the file does not hold
        resultcache.save(path, "real_reviews/imdb/seed10", "fp1", *_entry())
        import zipfile

        with zipfile.ZipFile(path) as zin:
            items = {n: zin.read(n) for n in zin.namelist() if n != "b.npy"}
        with zipfile.ZipFile(path, "w") as zout:
            for n, data in items.items():
                zout.writestr(n, data)

    damaged(missing_array)

    def pickled():  # an object array cannot be read without unpickling: refused
        import io
        import json

        buf = io.BytesIO()
        np.savez(
            buf,
            __header__=np.array(
                json.dumps(
                    {
                        "format": 1,
                        "name": "real_reviews/imdb/seed10",
                        "fingerprint": "fp1",
                        "meta": {},
                        "shapes": {"a": [1]},
                        "dtypes": {"a": "|O"},
                    }
                )
            ),
            a=np.array([object()], dtype=object),
        )
        path.write_bytes(buf.getvalue())

    damaged(pickled)
    assert len(calls) == 1 + 8
    with pytest.raises(ValueError, match="object"):
        resultcache.save(path, "n", "f", {"a": np.array([object()], dtype=object)}, {})


def test_cache_sweeps_leftover_temporary_files(tmp_path):
    old, fresh = tmp_path / "x.npz.abc.tmp", tmp_path / "y.npz.part"
    young = tmp_path / "z.npz.def.tmp"
    for f in (old, fresh, young):
        f.write_bytes(b"partial")
    stale = time.time() - 2 * resultcache.STALE_SECONDS
    os.utime(old, (stale, stale))
    os.utime(fresh, (stale, stale))
    resultcache.load_or_compute(tmp_path / "r.npz", "n", "f", _entry)
    assert not old.exists() and not fresh.exists() and young.exists()  # a write in progress is left alone


def test_seed_cache_recomputes_a_copied_result(monkeypatch):
    """Copying one data set's seed cache over another's path yields a recomputation, not the wrong data."""
    s_a, s_b = TINY, dataclasses.replace(TINY, dataset="toyb", epochs=1, epochs_v=1, epochs_uniform=1, p2_steps=5)
    s_a = dataclasses.replace(s_a, epochs=1, epochs_v=1, epochs_uniform=1, p2_steps=5)
    ds_a, ds_b = toy_dataset(name="toy"), toy_dataset(seed=1, name="toyb")
    monkeypatch.setattr(text, "load", lambda name, download=True: {"toy": ds_a, "toyb": ds_b}[name])
    review_runs.cached_seed(s_a, ds_a, 10)
    arrays_b, meta_b = review_runs.cached_seed(s_b, ds_b, 10)
    fa = review_runs.cache_fingerprint(s_a, ds_a.fingerprint, {"seed": 10})
    fb = review_runs.cache_fingerprint(s_b, ds_b.fingerprint, {"seed": 10})
    pa, pb = review_runs.result_path("toy", "seed10", fa), review_runs.result_path("toyb", "seed10", fb)
    shutil.copyfile(pa, pb)
    with pytest.warns(RuntimeWarning, match="holds 'real_reviews/toy/seed10'"):
        again, meta = review_runs.cached_seed(s_b, ds_b, 10)
    assert meta["joint"]["accuracy"] == meta_b["joint"]["accuracy"]
    assert np.array_equal(again["logits/joint"], arrays_b["logits/joint"])


# ----------------------------------------------------------------------------- the chapter module
def _fake_result(tiny):
    ds, data, arrays, metrics, prof = tiny
    r = rr.DatasetResult(
        TINY, data.corpus.vocab, data.stats, review_model.top_decile(data.stats.count, data.stats.delta, 20), prof
    )
    for seed in (10, 11):
        r.arrays[seed], r.metrics[seed] = arrays, metrics
    return rr.Result({"toy": r}, {})


def test_tables_and_plots(tiny):
    res = _fake_result(tiny)
    table = rr.baseline_table(res)
    assert len(table) == len(rr.MODELS) and "beats v fixed" in table.columns
    assert rr.span([0.8, 0.8]) == "0.800" and rr.span([0.7, 0.81]) == "0.700 - 0.810"
    assert list(rr.seed_table(res.datasets["toy"]).index) == [10, 11]
    wide = rr.seed_table(res.datasets["toy"])
    narrow = rr.transposed(wide)
    assert list(narrow.columns) == [10, 11] and list(narrow.index) == list(wide.columns)
    assert all(len(x.split(".")[1]) == 3 for x in narrow.loc["acc"])  # every float keeps 3 decimals
    assert list(rr.by_dataset(res, lambda r: {"seeds": len(r.seeds)}).loc["seeds"]) == [2]
    setups, scans = rr.setup_table(res)
    assert list(setups.columns) == ["toy"] and "scan" not in setups.index and "d" in setups.index
    assert scans["toy"] == tuple(res.datasets["toy"].setup.scan)
    assert len(rr.attended_tokens(res.datasets["toy"], k=3, min_count=1)) == 3
    figs = [
        rr.plot_alignment(res, seed=10),
        rr.plot_scan(res, seed=10),
        rr.plot_accuracy(res),
        rr.plot_attention(res, "toy", seed=10),
    ]
    if (
        tiny[3]["joint"]["u_shape"] is not None
        and tiny[3]["two_phase"]["u_shape"] is not None
        and tiny[3]["joint_v"]["u_shape"] is not None
    ):
        figs.append(rr.plot_ushape(res, seed=10))
    reg = rr.Regime(TINY, {10: tiny[2]}, {10: tiny[3]})
    figs.append(rr.plot_regime(reg))
    assert len(rr.regime_table(reg)) == 1 or tiny[3]["two_phase"]["u_shape"] is None
    assert all(f.axes for f in figs)
    import matplotlib.pyplot as plt

    plt.close("all")


def test_setups_and_unknown_dataset():
    assert rr.setup("imdb", "quick") == rr.QUICK["imdb"]
    assert rr.setup("yelp", "quick").max_train == 50_000 and rr.setup("yelp", "quick").d == rr.QUICK["imdb"].d
    assert rr.setup("rt", "paper").min_count == 1
    with pytest.raises(ValueError, match="sst2"):
        rr.setup("sst2")


def test_claims_registered():
    ids = set(ledger.REGISTRY)
    for ds in ("imdb", "rt"):
        for what in ("accuracy", "alignment", "u_shape", "selection"):
            c = ledger.REGISTRY[f"B.{ds}.{what}"]
            assert c.kind == "observation" and c.chapter == "12_real_reviews"
        assert ledger.REGISTRY[f"B.{ds}.one_step_alignment"].kind == "consistency"
    yelp = {c for c in ids if c.startswith("B.yelp.")}
    assert yelp == {f"B.yelp.{w}" for w in ("accuracy", "alignment", "u_shape", "selection", "one_step_alignment")}


def test_yelp_claims_without_data_report_data_missing(monkeypatch):
    """Registered whatever the disk holds; without the data: 'data missing', neither pass nor fail."""
    monkeypatch.setattr(rr.text, "available", lambda name: False)
    r = ledger.recorded(["B.yelp.accuracy"], compute_missing=False)[0]
    assert r.missing and "yelp" in r.missing.lower() and not r.passed
    assert r.status == "data missing" and ledger.acceptable(r) and r.measured is None
    monkeypatch.setattr(rr.text, "available", lambda name: True)
    assert ledger.REGISTRY["B.yelp.accuracy"].missing() is None
    assert set(rr.FIGURES) >= {
        "fig-real-alignment",
        "fig-real-ushape",
        "fig-real-attention-imdb",
        "fig-real-accuracy",
        "fig-real-regime",
        "fig-real-scan",
    }


def test_token_cache_knows_its_dataset(tmp_path):
    """A token cache copied over another data set's path, or damaged, is rebuilt with a warning, never used."""
    cfg = tokenize.TokenizerConfig(min_count=1, max_len=24)
    ds_a, ds_b = toy_dataset(name="toya"), toy_dataset(seed=1, name="toyb")
    a, b = tokenize.tokenize_dataset(ds_a, cfg), tokenize.tokenize_dataset(ds_b, cfg)
    folder = cache_dir("text/tok")
    path_a = folder / f"toya-{cfg.key(ds_a.fingerprint)}.npz"
    path_b = folder / f"toyb-{cfg.key(ds_b.fingerprint)}.npz"
    assert path_a.is_file() and path_b.is_file()
    shutil.copyfile(path_a, path_b)
    with pytest.warns(RuntimeWarning, match="does not match its dataset"):
        again = tokenize.tokenize_dataset(ds_b, cfg)
    assert np.array_equal(again.tokens, b.tokens) and again.vocab == b.vocab
    path_b.write_bytes(path_b.read_bytes()[:100])
    with pytest.warns(RuntimeWarning, match="damaged"):
        assert np.array_equal(tokenize.tokenize_dataset(ds_b, cfg).tokens, b.tokens)
    leftover = folder / "toyb-x.npz.abc.tmp"
    leftover.write_bytes(b"partial")
    stale = time.time() - 2 * resultcache.STALE_SECONDS
    os.utime(leftover, (stale, stale))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a good cache: read without any warning
        assert np.array_equal(tokenize.tokenize_dataset(ds_a, cfg).tokens, a.tokens)
    assert not leftover.exists()
