"""mmtoken.chapters.ch12_real_reviews (chapter 12's generated module): its tables and plots on a tiny run, its
settings, its claims.

The computation behind it has its own tests: test_review_model.py, test_review_phase_two.py, test_corpus_stats.py,
test_review_runs.py, test_review_search.py, test_review_regime.py; the results cache: test_resultcache.py."""

from __future__ import annotations

import dataclasses

import pytest
from toy_reviews import TINY

from mmtoken.book import ledger
from mmtoken.chapters import ch12_real_reviews as rr
from mmtoken.embeddings import review_model

pytestmark = pytest.mark.usefixtures("review_data_dir")


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
    assert list(rr.by_dataset(res, rr.profile_rows).columns) == ["toy"]
    for rows in (rr.one_step_rows, rr.two_phase_rows, rr.joint_rows, rr.v_trained_rows, rr.data_model_rows):
        assert rows(res.datasets["toy"]) and all(isinstance(k, str) for k in rows(res.datasets["toy"]))
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


def test_settings_and_unknown_dataset():
    s = rr.Settings()
    assert rr.settings("quick") == s and s.setup("imdb") == s.imdb and s.seeds == (10, 11, 12, 13, 14)
    assert s.yelp.max_train == 50_000 and s.yelp.dataset == "yelp"
    assert dataclasses.replace(s.yelp, dataset="imdb", max_train=None, max_test=None) == s.imdb  # IMDB's choices
    paper = rr.settings("paper")
    assert paper.rt.min_count == 1 and paper.rt.max_len == 64 and paper.imdb.max_len == 1024
    assert paper.imdb.d == 2 * s.imdb.d and paper.yelp.max_train is None and hash(paper) == hash(rr.settings("paper"))
    with pytest.raises(ValueError, match="sst2"):
        s.setup("sst2")


def test_run_gathers_the_settings_datasets(monkeypatch):
    """``run(s)`` runs each data set of ``s`` with its setup and seeds; Yelp without its data is listed missing."""
    seen = []
    monkeypatch.setattr(rr, "run_dataset", lambda setup, seeds: seen.append((setup, seeds)) or setup.dataset)
    monkeypatch.setattr(rr.text, "available", lambda name: name != "yelp")
    s = rr.Settings(seeds=(10,))
    res = rr.run(s)
    assert seen == [(s.imdb, (10,)), (s.rt, (10,))]
    assert res.datasets == {"imdb": "imdb", "rt": "rt"} and set(res.missing) == {"yelp"}


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


def test_stop_labels_gradient_norm_and_order_bound():
    import numpy as np

    assert rr.stop_label("converged") == "stopped (loss flat)" and rr.stop_label("budget") == "budget spent"
    assert rr.stop_label("other") == "other"
    m = {"phase_two": {"grad_log_norm": [0.0, np.log(3e-7)], "unsaturated": [0.5, 1e-3, 1e-8], "steps": [0, 5, 10]}}
    assert rr.final_gradient_norm(m) == pytest.approx(3e-7)
    assert rr.order_bound(3e-7) == "< 1e-06" and rr.order_bound(0.5) == "< 1e+00"
    with pytest.raises(ValueError, match="positive"):
        rr.order_bound(0.0)
    assert rr.saturated_at(m) == 10 and rr.saturated_at(m, below=1e-9) is None


def test_run_without_settings_runs_the_books_at_the_current_scale(monkeypatch):
    """``run()`` is ``run(settings())``; ``Settings(datasets=("rt",), rt=...)`` (the "Change it" section) runs
    Rotten Tomatoes alone, with that setup."""
    seen = []
    monkeypatch.setattr(rr, "run_dataset", lambda setup, seeds: seen.append((setup, seeds)) or setup.dataset)
    monkeypatch.setattr(rr.text, "available", lambda name: name != "yelp")
    assert rr.run().datasets == rr.run(rr.settings()).datasets
    half = len(seen) // 2
    assert seen[:half] == seen[half:] == [(rr.settings().imdb, rr.SEEDS), (rr.settings().rt, rr.SEEDS)]
    seen.clear()
    rt = dataclasses.replace(rr.Settings().rt, d=64)
    res = rr.run(rr.Settings(datasets=("rt",), rt=rt))
    assert seen == [(rt, rr.SEEDS)] and list(res.datasets) == ["rt"] and res.missing == {}


def test_a_job_of_an_unknown_kind_is_refused_naming_jobs():
    """Before anything starts, in ``in_processes`` and in the job function itself."""
    from toy_reviews import QUICK

    from mmtoken.embeddings import review_jobs

    with pytest.raises(ValueError, match="jobs: .*'train'"):
        rr.in_processes([("seed", {"setup": QUICK, "seed": 10}), ("train", {})])
    with pytest.raises(ValueError, match="jobs"):
        rr.in_processes([("seed",)])
    with pytest.raises(ValueError, match="jobs"):
        review_jobs.compute_job("train", {})
    assert review_jobs.check_jobs(iter([("search", {"dataset": "rt"})])) == [("search", {"dataset": "rt"})]


def _seed_jobs(path, seeds=(10, 11)):
    from toy_reviews import QUICK

    return [("seed", {"setup": QUICK, "seed": k, "dataset": str(path)}) for k in seeds]


def test_nothing_runs_in_workers_for_a_single_job_or_on_one_core(tmp_path, monkeypatch):
    """The caller computes those itself: ``in_processes`` leaves the store as it was."""
    from toy_reviews import QUICK, toy_corpus_file

    from mmtoken.embeddings import review_seeds

    ds, path = toy_corpus_file(tmp_path)
    rr.in_processes(_seed_jobs(path, (10,)))
    rr.in_processes(_seed_jobs(path), workers=1)
    monkeypatch.setattr(rr.os, "cpu_count", lambda: 1)
    rr.in_processes(_seed_jobs(path))
    assert not any(review_seeds.seed_result(QUICK, ds, k).stored() for k in (10, 11))


@pytest.mark.skipif((__import__("os").cpu_count() or 1) < 2, reason="on one core nothing runs in workers")
def test_jobs_in_workers_compute_what_this_process_computes(tmp_path, monkeypatch):
    """``in_processes`` fills the store with what ``review_seeds.cached_seed`` computes in this process, bit for bit
    (a run has one thread and its own generators): every array, every metric but the CPU seconds."""
    import numpy as np
    from toy_reviews import QUICK, toy_corpus_file

    from mmtoken.embeddings import review_seeds

    ds, path = toy_corpus_file(tmp_path)
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "workers"))
    assert not any(review_seeds.seed_result(QUICK, ds, k).stored() for k in (10, 11))
    rr.in_processes(_seed_jobs(path), workers=2)
    assert all(review_seeds.seed_result(QUICK, ds, k).stored() for k in (10, 11))
    read = {k: review_seeds.cached_seed(QUICK, ds, k) for k in (10, 11)}
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "here"))
    for k in (10, 11):
        arrays, metrics = review_seeds.cached_seed(QUICK, ds, k)
        assert read[k][0].keys() == arrays.keys()
        assert all(np.array_equal(read[k][0][a], arrays[a]) and read[k][0][a].dtype == arrays[a].dtype for a in arrays)
        assert {m for m in metrics if read[k][1][m] != metrics[m]} <= {"cpu_seconds"}


@pytest.mark.skipif((__import__("os").cpu_count() or 1) < 2, reason="on one core nothing runs in workers")
def test_a_failing_job_raises_with_the_workers_traceback(tmp_path):
    """A job that fails in its worker is an error of the call, with the worker's own traceback (nothing is
    recomputed behind the caller's back)."""
    from mmtoken.workers import WorkerError

    with pytest.raises(WorkerError) as info:
        rr.in_processes(_seed_jobs(tmp_path / "nowhere.npz"), workers=2)
    text = str(info.value)
    assert "DatasetMissing" in text and "nowhere.npz" in text
    assert "in the worker:" in text and "review_jobs.py" in text and "Traceback" in text
