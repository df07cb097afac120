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


def test_jobs_in_processes_compute_what_this_process_computes(tmp_path, monkeypatch):
    """``in_processes`` fills the results cache with what ``review_regime.cached`` computes in this process, bit for
    bit (a run has one thread and its own generators), ``review_regime.stored`` then says so; a job of another kind
    is refused before anything starts."""
    import os

    import numpy as np

    from mmtoken import config
    from mmtoken.embeddings import review_regime

    with pytest.raises(ValueError, match="kind"):
        rr.in_processes([("regime", {}), ("train", {})])
    monkeypatch.delenv("MMTOKEN_DATA")
    texts = config.data_dir() / "text"
    if not (texts / "rt.npz").is_file():
        pytest.skip("rt is not fetched (python -m mmtoken.datasets fetch rt)")

    def data_folder(name):  # an empty results cache beside the fetched reviews
        (tmp_path / name).mkdir()
        (tmp_path / name / "text").symlink_to(texts, target_is_directory=True)
        monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / name))

    data_folder("workers")
    runs = [{"seed": seed, "which": "control", "steps": 3, "small": False} for seed in (10, 11)]
    assert not any(review_regime.stored(**r) for r in runs)
    rr.in_processes([("regime", r) for r in runs], workers=2)
    parallel = (os.cpu_count() or 1) >= 2  # on one core nothing runs in processes: the caller computes
    assert all(review_regime.stored(**r) for r in runs) == parallel
    if not parallel:
        return
    read = review_regime.cached(**runs[0])
    data_folder("here")
    computed = review_regime.cached(**runs[0])
    assert read[0].keys() == computed[0].keys()
    assert all(np.array_equal(read[0][k], computed[0][k]) for k in computed[0])
    assert read[1]["two_phase"] == computed[1]["two_phase"]
