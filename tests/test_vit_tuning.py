"""Chapter 9's choice of recipe (mmtoken.chapters.ch09_vit_sparsity): the validation record, the rule that chooses
the recipe, the guards of tune."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mmtoken.chapters import ch09_vit_sparsity as vs


def test_the_recipe_is_the_one_the_validation_record_chooses():
    """The default settings are the rule's choice from the record, and the record matches the candidates' current
    configurations."""
    cands = vs.tuning_candidates()
    seeds = set()
    for row in vs.TUNING_RECORD:
        assert row["seed"] in vs.DEV_SEEDS and row["seed"] not in vs.HELD_OUT_SEEDS
        exp = cands[row["label"]].with_seed(row["seed"])
        assert not exp.test, "tuning never looks at the test split"
        assert vs.config_digest(exp) == row["config"], f"{row['label']}: the candidate changed since it was tuned"
        assert len(row["val_acc"]) == exp.train.epochs + 1
        seeds.add(row["seed"])
    assert seeds == set(vs.TUNING_SEEDS) and set(cands) == {r["label"] for r in vs.TUNING_RECORD}
    chosen = vs.choose()
    assert replace(cands[chosen], test=True).with_seed(vs.HELD_OUT_SEEDS[0]) == vs.experiment(vs.Settings())
    table = vs.tuning_table()
    assert table.loc[chosen, "cpu_seconds"] <= vs.CPU_BUDGET
    within = table[table["cpu_seconds"] <= vs.CPU_BUDGET]
    assert table.loc[chosen, "worst"] == within["worst"].max()


def test_choose_needs_a_candidate_within_budget():
    rows = [
        {"label": "a", "seed": 0, "val_acc": [0.1, 0.9], "cpu_seconds": 500.0},
        {"label": "b", "seed": 0, "val_acc": [0.1, 0.8], "cpu_seconds": 100.0},
        {"label": "b", "seed": 1, "val_acc": [0.1, 0.7], "cpu_seconds": 110.0},
        {"label": "c", "seed": 0, "val_acc": [0.1, 0.75], "cpu_seconds": 100.0},
        {"label": "c", "seed": 1, "val_acc": [0.1, 0.74], "cpu_seconds": 100.0},
    ]
    assert vs.choose(rows, budget=200) == "c"  # best worst seed within budget
    assert vs.choose(rows, budget=1000) == "c"  # "a" was trained on one seed only: no worst seed
    assert vs.choose(rows + [{**rows[0], "seed": 1}], budget=1000) == "a"
    with pytest.raises(ValueError, match="budget"):
        vs.choose(rows, budget=10)


def test_tune_refuses_held_out_seeds_and_unknown_labels():
    with pytest.raises(ValueError, match="held-out"):
        vs.tune(["lr 1e-3"], seeds=[0, 13])
    with pytest.raises(ValueError, match="held-out"):
        vs.tune(["lr 1e-3"], seeds=[10])  # the 9-epoch recipe's held-out seeds stay out of tuning too
    with pytest.raises(ValueError, match="TUNING_GRID"):
        vs.tune(["lr 42"])


def test_run_cost_counts_what_a_run_does(tiny_data):
    """run_cost's counts are those of a real run of the same experiment (its log points, its epoch-end
    evaluations, its last step), and its prediction is the counts times the timed pieces."""
    from toy_vit import TINY

    from mmtoken.vision import vit_runs

    cost = vs.run_cost(TINY, steps=2, repeats=1)
    r = vit_runs.run_experiment(TINY)
    assert cost["logs"] == len(r.log["step"]) and cost["evals"] == len(r.val_acc)
    assert cost["steps"] == r.log["step"][-1]
    parts = cost["steps"] * cost["step_ms"] / 1e3 + cost["logs"] * cost["log_s"] + cost["evals"] * cost["eval_s"]
    assert cost["cpu_seconds"] == pytest.approx(parts) and cost["cpu_seconds"] > 0
    with pytest.raises(ValueError, match="steps"):
        vs.run_cost(TINY, steps=1000, repeats=1)
    with pytest.raises(ValueError, match="repeats"):
        vs.run_cost(TINY, steps=1, repeats=0)
