"""mmtoken.embeddings.review_runs and mmtoken.embeddings.review_seeds: the validation split, the prepared data, one seed of every run
at tiny scale, and each seed's result in the one store: its key (the setup with the types of its values, the data, the
code the training calls, not plotting nor caching), stale and damaged files, a file copied over another's."""

from __future__ import annotations

import dataclasses
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from toy_reviews import NEG, NEUTRAL, POS, QUICK, TINY, toy_dataset

from mmtoken.book import fingerprint, resultcache
from mmtoken.datasets import corpus, text
from mmtoken.embeddings import review_runs, review_seeds

pytestmark = pytest.mark.usefixtures("review_data_dir")


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


def entry_of(key: review_runs.ResultKey) -> resultcache.Entry:
    """Where the store keeps ``key``'s result, and the fingerprint its file must carry."""
    return resultcache.entry(review_runs.OWNER, key.name, config=key.config, code=key.code, data=key.data)


def test_a_seed_has_one_key_for_computing_and_checking():
    """``seed_result`` names the result ``<data set>/seed<k>`` under the owner ``real_reviews``, keyed by the code
    that trains it (run_seed and prepare, not the caching around them); ``cached_seed`` stores it there and
    ``stored()`` then says so; a second call reads it back, bit for bit."""
    ds = toy_dataset()
    key = review_seeds.seed_result(QUICK, ds, 10)
    assert key.name == "toy/seed10" and key.code == (review_seeds.run_seed, review_runs.prepare)
    assert key.config == {"setup": QUICK, "seed": 10} and key.data == ds.fingerprint
    e = entry_of(key)
    assert e.path.parent == resultcache.results_dir() / "real_reviews" / "toy" and e.path.name.startswith("seed10-")
    assert not key.stored() and not e.path.exists()
    arrays, meta = review_seeds.cached_seed(QUICK, ds, 10)
    assert key.stored() and e.path.is_file() and not review_seeds.seed_result(QUICK, ds, 11).stored()
    assert resultcache.read_header(e.path)[0]["fingerprint"] == e.fp
    again, meta_again = review_seeds.cached_seed(QUICK, ds, 10)
    assert meta_again == meta and all(np.array_equal(again[k], arrays[k]) for k in arrays)
    profile = review_seeds.profile_result(QUICK, ds)
    assert profile.name == "toy/profile" and profile.code == (review_seeds.profile, review_runs.prepare)
    assert review_seeds.cached_profile(QUICK, ds) == review_seeds.profile(QUICK, ds, review_runs.prepare(QUICK, ds))
    assert profile.stored() and entry_of(profile).path != e.path


def test_two_setups_that_differ_by_a_type_are_two_results():
    """``bow_C=1`` and ``bow_C=1.0`` compare equal, yet they are two settings: two files, two fingerprints; so are
    two seeds, two data sets and two results of one setup."""
    ds, other = toy_dataset(), toy_dataset(seed=1)
    as_int = dataclasses.replace(QUICK, bow_C=1)
    assert as_int == QUICK  # what a memo keyed on equality would confuse
    keys = [
        review_seeds.seed_result(QUICK, ds, 10),
        review_seeds.seed_result(as_int, ds, 10),
        review_seeds.seed_result(QUICK, ds, 11),
        review_seeds.seed_result(QUICK, other, 10),
        review_seeds.profile_result(QUICK, ds),
    ]
    entries = [entry_of(k) for k in keys]
    assert len({e.path for e in entries[:3]} | {entries[4].path}) == 4 and entries[3].path == entries[0].path
    assert len({e.fp for e in entries}) == len(entries)  # the other data set: same file, another fingerprint


def test_a_stale_result_is_recomputed_and_a_damaged_one_refused_with_a_warning():
    """A file of the right name computed by other code (another fingerprint) is replaced without a word; a damaged
    one is reported (``RuntimeWarning``) and recomputed; both give back the very numbers first computed."""
    ds = toy_dataset()
    key = review_seeds.seed_result(QUICK, ds, 10)
    e = entry_of(key)
    arrays, meta = review_seeds.cached_seed(QUICK, ds, 10)

    stale = dict(meta, joint=dict(meta["joint"], accuracy=-1.0))
    resultcache.save(e.path, e.title, "0" * 64, arrays, stale)  # as if trained by other code
    assert not key.stored()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again, meta_again = review_seeds.cached_seed(QUICK, ds, 10)
    assert key.stored() and meta_again["joint"] == meta["joint"]
    assert all(np.array_equal(again[k], arrays[k]) for k in arrays)

    e.path.write_bytes(e.path.read_bytes()[:200])  # truncated
    assert not key.stored()
    with pytest.warns(RuntimeWarning, match="damaged"):
        again, meta_again = review_seeds.cached_seed(QUICK, ds, 10)
    assert key.stored() and meta_again["joint"] == meta["joint"]
    assert all(np.array_equal(again[k], arrays[k]) for k in arrays)


def test_seed_cache_recomputes_a_copied_result(monkeypatch):
    """Copying one data set's seed result over another's path yields a recomputation, not the wrong data."""
    s_a, s_b = QUICK, dataclasses.replace(QUICK, dataset="toyb")
    ds_a, ds_b = toy_dataset(name="toy"), toy_dataset(seed=1, name="toyb")
    monkeypatch.setattr(text, "load", lambda name, download=True: {"toy": ds_a, "toyb": ds_b}[name])
    review_seeds.cached_seed(s_a, ds_a, 10)
    arrays_b, meta_b = review_seeds.cached_seed(s_b, ds_b, 10)
    pa, pb = (entry_of(review_seeds.seed_result(s, ds, 10)).path for s, ds in ((s_a, ds_a), (s_b, ds_b)))
    shutil.copyfile(pa, pb)
    with pytest.warns(RuntimeWarning, match="holds 'real_reviews/toy/seed10'"):
        again, meta = review_seeds.cached_seed(s_b, ds_b, 10)
    assert meta["joint"]["accuracy"] == meta_b["joint"]["accuracy"]
    assert np.array_equal(again["logits/joint"], arrays_b["logits/joint"])


def test_a_result_of_the_wrong_shape_is_refused():
    """A seed's per-token arrays must have one entry per vocabulary word (``expect``): one of another length, under
    the right name and fingerprint, is reported and recomputed."""
    ds = toy_dataset()
    e = entry_of(review_seeds.seed_result(QUICK, ds, 10))
    arrays, meta = review_seeds.cached_seed(QUICK, ds, 10)
    resultcache.save(e.path, e.title, e.fp, dict(arrays, **{"logits/joint": arrays["logits/joint"][:-1]}), meta)
    with pytest.warns(RuntimeWarning, match="logits/joint"):
        again, _ = review_seeds.cached_seed(QUICK, ds, 10)
    assert again["logits/joint"].shape == arrays["logits/joint"].shape


def test_each_run_trains_what_run_settings_names():
    """Every run trains exactly the parameters its settings name, for the epochs its Setup field holds."""
    s = dataclasses.replace(TINY, epochs=1, epochs_v=2, epochs_uniform=3)
    data = review_runs.prepare(s, toy_dataset())
    v, _, E0 = review_runs.init(s, data.V, 0)
    start = {"E": E0, "p": torch.zeros_like(v, dtype=E0.dtype), "v": v.to(E0.dtype)}
    trained = {}
    for run in review_runs.RUNS:
        names, lr, epochs = review_runs.run_settings(s, run)
        params, hist = review_runs.train_model(s, data, v, E0, run, 0)
        assert len(hist.loss) == epochs
        trained[run] = tuple(n for n in ("E", "p", "v") if not torch.equal(getattr(params, n), start[n]))
        assert trained[run] == names, run
    assert trained == {"joint": ("E", "p"), "joint_v": ("E", "p", "v"), "uniform": ("E",), "uniform_tuned": ("E",)}
    assert [review_runs.run_settings(s, r).epochs for r in review_runs.RUNS] == [1, 2, 1, 3]
    assert review_runs.run_settings(s, "uniform").lr == s.lr and review_runs.run_settings(s, "uniform_tuned").lr == 0.1
    with pytest.raises(ValueError, match="run must be one of"):
        review_runs.run_settings(s, "bow")


def test_a_seed_runs_only_code_inside_its_key():
    """Every package function that a seed's runs and the profile call (found by profiling them, the tokenizer
    included) is a definition their key's code covers (:attr:`mmtoken.embeddings.review_runs.ResultKey.code`)."""
    s = QUICK
    ds = toy_dataset()
    package = str(Path(fingerprint.__file__).resolve().parents[1])
    index = fingerprint.index()

    def caller(frame):
        """The nearest frame of the package's code below ``frame``, or ``None``."""
        frame = frame.f_back
        while frame is not None and not frame.f_globals.get("__name__", "").startswith("mmtoken"):
            frame = frame.f_back
        return frame

    def outside(frame) -> bool:
        """Code of a module left out of every key, or called by it (the key's own computation, the store's
        paths, the downloader), not the computation; the function handed to the store (``compute``) is."""
        if frame.f_globals.get("__name__", "") in fingerprint.OUTSIDE:
            return True
        up = caller(frame)
        if up is None:
            return False
        if up.f_globals.get("__name__", "") in fingerprint.OUTSIDE and "<locals>" in frame.f_code.co_qualname:
            return False  # a computation, called back by the store
        return outside(up)

    for key, call in (
        (review_seeds.seed_result(s, ds, 10), lambda: review_seeds.run_seed(s, review_runs.prepare(s, ds), 10)),
        (review_seeds.profile_result(s, ds), lambda: review_seeds.profile(s, ds, review_runs.prepare(s, ds))),
    ):
        called: set[tuple[str, str]] = set()

        def profile(frame, event, arg, called=called):
            if event == "call":
                module = frame.f_globals.get("__name__", "")
                in_source = frame.f_code.co_filename.startswith(package)  # not dataclass-made code
                if in_source and module.startswith("mmtoken.") and not outside(frame):
                    called.add((module, frame.f_code.co_qualname.split(".")[0]))

        shutil.rmtree(resultcache.results_dir(), ignore_errors=True)  # the tokenizer runs too, not its stored result
        sys.setprofile(profile)
        try:
            call()
        finally:
            sys.setprofile(None)
        closure = set(index.closure([r for f in key.code for r in fingerprint.roots_of(f)]))
        called = {(m, n) for m, n in called if n not in ("<module>", "<lambda>", "<genexpr>", "<listcomp>")}
        assert {
            ("mmtoken.datasets.tokenize", "tokenize_dataset"),
            ("mmtoken.embeddings.review_runs", "prepare"),
        } <= called
        assert called <= closure, sorted(called - closure)
        assert not {m for m, _ in closure} & {"mmtoken.book.resultcache", "mmtoken.chapters.ch12_real_reviews"}
        if key.name.endswith("seed10"):  # the training itself ran under the profile
            assert {
                ("mmtoken.embeddings.review_model", "fit"),
                ("mmtoken.embeddings.review_phase_two", "phase_two"),
            } <= called
        else:  # the profile trains no attention model
            assert ("mmtoken.embeddings.review_model", "fit") not in closure
