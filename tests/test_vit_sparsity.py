"""mmtoken.chapters.ch09_vit_sparsity (chapter 9's generated module): the verdicts, the [CLS] logits and their
bound, the plots of a tiny study, the held-out seeds and the controls, the settings that name the stored runs,
``run(s=None)``, and the chapter's results computed from checkpoints, stored so that the carried runs suffice."""

from __future__ import annotations

import math
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
from toy_vit import TINY, small

from mmtoken.book import resultcache
from mmtoken.chapters import ch09_vit_sparsity as vs
from mmtoken.vision import vit, vit_cache, vit_train
from mmtoken.vision import vit_runs as runs


def test_verdicts_exclude_collapse_and_compare_like_with_like():
    collapsed = {
        "collapsed": True,
        "qk_growth": 80.0,
        "ov_growth": 2.0,
        "eff_image": 1.5,
        "eff_mean": 6.0,
        "n_patches": 49,
    }
    assert not vs.norm_verdict(collapsed) and not vs.sparsity_verdict(collapsed)
    assert not vs.averaged_verdict(collapsed)
    ok = {**collapsed, "collapsed": False}
    assert vs.norm_verdict(ok) and vs.sparsity_verdict(ok) and vs.averaged_verdict(ok)
    assert not vs.norm_verdict({**ok, "qk_growth": 4.9})
    assert not vs.norm_verdict({**ok, "ov_growth": 80 / 2.9})  # the value-output product, not W_V alone
    assert vs.norm_verdict({**ok, "v_growth": 80.0})  # W_V alone no longer decides
    assert not vs.sparsity_verdict({**ok, "eff_image": 24.6})
    assert vs.sparsity_verdict({**ok, "eff_image": 24.5})
    assert not vs.averaged_verdict({**ok, "eff_mean": 24.6})
    assert vs.averaged_verdict({**ok, "eff_mean": 24.5, "eff_image": 40.0})  # reads the averaged map only


def test_collapse_gate_is_not_the_accuracy_claim():
    # a seed three images short of the accuracy bar still counts for the other claims
    row = {
        "test_acc": 0.8497,
        "collapsed": 0.8497 < vs.COLLAPSE_VAL,
        "qk_growth": 16.0,
        "ov_growth": 5.0,
        "eff_image": 20.0,
        "eff_mean": 30.0,
        "n_patches": 49,
    }
    assert not vs.learns_check({10: row}).passed
    assert vs.norm_check({10: row}).passed and vs.sparse_check({10: row}).passed
    assert not vs.sparse_check({10: row}, "eff_mean").passed
    # the collapsed control (validation accuracy 0.53) fails the gate
    assert 0.53 < vs.COLLAPSE_VAL < vs.ACCURACY


def test_mean_of_exp_entropy_can_exceed_the_averaged_maps():
    """The chapter's counterexample: half the images one-hot, half uniform over P = 49 patches."""
    import numpy as np

    P = 49
    maps = np.vstack([np.eye(P)[0], np.full(P, 1 / P)])
    per_image = vit.effective_patches(maps).mean()
    averaged = float(vit.effective_patches(maps.mean(0)))
    assert per_image == pytest.approx(25.0)
    assert averaged == pytest.approx(13.3, abs=0.05)
    # Jensen: exp(mean entropy) (the geometric mean of e^H) never exceeds the averaged map's e^H
    assert np.exp(np.log(vit.effective_patches(maps)).mean()) <= averaged


def test_cls_logits_and_spread_bound():
    """The chapter's [CLS] logits give the last block's attention; their spread obeys the lemma's bound."""
    torch.manual_seed(2)
    cfg = small(heads=2, init_std=0.5)
    model = vit.ViT(cfg)
    with torch.no_grad():
        model.blocks[-1].ln1.weight.mul_(1.7)
        model.blocks[-1].ln1.bias.normal_()
    x = torch.randn(6, 1, 8, 8)
    _, attns = model(x, return_attention=True)
    z = vs.cls_logits(model, x)
    torch.testing.assert_close(z.softmax(-1), vit.cls_patch_attention(attns[-1]))
    spread = z.max(-1).values - z.min(-1).values
    assert (spread <= vs.logit_spread_bound(model)).all()
    # entropy drop is at most the spread
    assert (math.log(cfg.n_patches) - vit.entropy(z.softmax(-1)) <= spread + 1e-6).all()


def test_plots_draw_from_a_tiny_study(tiny_data):
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    r0, r1, s0, c0 = runs.run_experiments(
        [
            TINY,
            TINY.with_seed(1),
            replace(TINY, train=replace(TINY.train, lr=5e-4)),
            replace(TINY, test=False, train=replace(TINY.train, lr=5e-2, epochs=1), map_epochs=None),
        ],
        workers=1,
    )
    study = vs.Study(seeds={0: r0, 1: r1}, smaller_lr={0: s0}, collapse={0: c0})
    v = vs.validation_summary(c0)
    assert v["val_acc"] == c0.val_acc[-1] and v["eff_image"] == c0.log["eff"][-1, -1]
    table = vs.seed_table(study.seeds)
    assert list(table.index) == [0, 1] and {"test_acc", "qk_growth", "v_growth", "eff_mean"} <= set(table)
    # the claims' checks run on real summaries: the gate reads validation accuracy, the growth the ov product
    rows = {s: vs.seed_summary(r) for s, r in study.seeds.items()}
    assert all(row["collapsed"] == (r.val_acc[-1] < vs.COLLAPSE_VAL) for row, r in zip(rows.values(), (r0, r1)))
    assert v["collapsed"] == (c0.val_acc[-1] < vs.COLLAPSE_VAL)
    for check in (vs.learns_check, vs.norm_check, vs.sparse_check):
        m = check(rows)
        assert isinstance(m.passed, bool) and m.value
    # recorded on the growth grid (judged on the raw values)
    raw = min(row["qk_growth"] / row["ov_growth"] for row in rows.values())
    assert vs.norm_check(rows).value["min qk/ov growth"] == float(vs.shown(raw, "growth"))
    assert abs(vs.norm_check(rows).value["min qk/ov growth"] - raw) <= vs.GRID["growth"] / 2 + 1e-12
    for fig in (
        vs.plot_training(study),
        vs.plot_attention_maps(r0),
        vs.plot_norms(study),
        vs.plot_sparsity(study),
        vs.plot_where(study),
    ):
        drawn = [ax for ax in fig.axes if ax.get_visible()]
        assert drawn and all(ax.has_data() for ax in drawn), fig  # every visible panel shows something
        plt.close(fig)
    assert set(vs.FIGURES) == {"fig-vit-training", "fig-vit-maps", "fig-vit-norms", "fig-vit-sparsity", "fig-vit-where"}


# The recipe of the chapter's stored runs, written out: their keys are these configurations (with the code and the
# data in the fingerprint), so a change of a default would retrain every run (and is caught here).
QUICK = vit_cache.Experiment(
    dataset="fashion-mnist",
    model=vit.ViTConfig(image_size=28, channels=1, patch=4, width=48, depth=2, heads=1, mlp_ratio=2, init_std=0.02),
    train=vit_train.TrainConfig(
        epochs=12, batch_size=128, lr=1e-3, weight_decay=0.0, warmup=0.1, grad_clip=1.0, seed=13, threads=1
    ),
)
PAPER = vit_cache.Experiment(
    dataset="cifar-10",
    model=vit.ViTConfig(image_size=32, channels=3, patch=2, width=384, depth=6, heads=6, mlp_ratio=2, init_std=0.02),
    train=vit_train.TrainConfig(
        epochs=100,
        batch_size=256,
        lr=3e-3,
        weight_decay=0.0,
        warmup=0.05,
        grad_clip=1.0,
        augment=True,
        seed=13,
        threads=None,
    ),
    n_validation=5000,
    logs_per_epoch=2,
    logs_first_epoch=16,
    map_epochs=(0, 1, 2, 5, 10, 25, 50, 100),
    foreground=None,
)


def _path(exp):
    return resultcache.path_of(vit_cache.OWNER, vit_cache.run_name(exp), exp)


def test_the_default_settings_are_the_recipe_of_the_stored_runs():
    assert vs.experiment(vs.Settings()) == QUICK and vs.settings("quick") == vs.Settings()
    assert vs.experiment(vs.settings("paper")) == PAPER
    assert _path(vs.experiment()) == _path(QUICK) and _path(QUICK).name.startswith("seed13-")


def test_a_setting_changes_the_run_and_its_key_not_the_chapters():
    one = vs.experiment(vs.Settings(epochs=1))
    assert one.train.epochs == 1 and one != QUICK and _path(one) != _path(QUICK)
    few = vs.experiment(vs.Settings(n_validation=40_000))
    assert few.n_validation == 40_000 and _path(few) != _path(QUICK)
    assert vs.experiment(vs.Settings(), seed=11) == QUICK.with_seed(11)
    assert not vs.experiment(vs.Settings(), test=False).test
    with pytest.raises(ValueError, match="Settings.dataset"):
        vs.experiment(vs.Settings(dataset="mnist"))


def test_the_study_is_judged_on_held_out_seeds_and_the_controls_never_see_test_data():
    groups = vs.controls(vs.settings("quick"))
    assert [e.train.seed for e in groups["seeds"]] == list(vs.HELD_OUT_SEEDS) == [13, 14, 15]
    assert all(e.test for e in groups["seeds"]) and groups["seeds"][0] == QUICK
    (small,) = groups["smaller_lr"]
    assert small.train.lr == pytest.approx(QUICK.train.lr / vs.Settings().smaller_lr)
    assert small == replace(QUICK, train=replace(QUICK.train, lr=small.train.lr))
    (broken,) = groups["collapse"]
    assert not broken.test and broken.train.seed in vs.DEV_SEEDS and broken.train.epochs == 1
    assert broken.train.lr == pytest.approx(20 * QUICK.train.lr) and broken.train.grad_clip is None
    assert broken.train.warmup == 0.0 and broken.map_epochs is None
    assert not set(vs.DEV_SEEDS) & set(vs.HELD_OUT_SEEDS)
    assert not set(vs.EARLIER_SEEDS) & (set(vs.HELD_OUT_SEEDS) | set(vs.DEV_SEEDS))  # fresh seeds, never reused
    paper = vs.controls(vs.settings("paper"))
    assert {e.dataset for g in paper.values() for e in g} == {"cifar-10"} and paper["seeds"][0] == PAPER
    assert paper["collapse"][0].map_epochs is None  # one epoch: the paper's map epochs would not fit


def test_the_study_is_memoised_on_its_settings_and_none_is_the_current_scale(monkeypatch):
    """``run(s)`` trains (or loads) each settings' runs once; other settings are another study; ``run()`` is
    ``run(settings())`` at the scale of the moment (the settings below are the tests' own, so that no later reader
    of the memo meets the fake runs)."""
    asked = []

    class Fake:
        def __init__(self, exp):
            self.experiment = exp

    def fake(exps):
        asked.append(list(exps))
        return [Fake(e) for e in asked[-1]]

    monkeypatch.setattr(vs.vit_runs, "run_experiments", fake)
    mine = vs.Settings(epochs=2, smaller_lr=7.0)
    a, b = vs.run(mine), vs.run(mine)
    c = vs.run(replace(mine, epochs=3))
    assert a is b and c is not a and len(asked) == 2
    assert list(a.seeds) == list(vs.HELD_OUT_SEEDS) and a.seeds[13].experiment.train.epochs == 2
    assert list(a.collapse) == [vs.Settings().collapse_seed]
    monkeypatch.setattr(vs, "settings", lambda scale=None: replace(mine, epochs=4))
    assert vs.run().seeds[13].experiment.train.epochs == 4 and vs.run(None) is vs.run()
    with pytest.raises(ValueError, match="Settings"):
        vs.run({"epochs": 2})


def test_train_accuracy_and_spread_check_are_stored_so_the_carried_runs_suffice(
    tiny_data, tmp_path_factory, monkeypatch
):
    """Both read checkpoints once, then their stored results: with the carried runs (no checkpoints) and the
    chapter's carried results the chapter needs no checkpoint; a retrained run (another digest) is computed again."""
    trained = tmp_path_factory.mktemp("trained")
    monkeypatch.setenv("MMTOKEN_TRAINED", str(trained))
    r = runs.run_experiment(TINY)
    acc, sc = vs.train_accuracy(r, n=64), vs.spread_check(r)
    assert 0 <= acc <= 1 and sc["holds"].all() and sc["bound"].shape == (2,) and sc["holds"].dtype == bool
    model = vit_cache.checkpoint(r, 2)  # the same numbers as computed directly
    x, y = tiny_arrays_train()
    idx = runs.split_indices(len(x), TINY.n_validation, TINY.split_seed)[0][:64]
    assert acc == vit_train.evaluate(model, torch.as_tensor(x[idx]), torch.as_tensor(y[idx]), r.normalizer)[1]
    results = tiny_data / "results"
    stored = sorted(p.relative_to(results) for p in (results / vs.CHAPTER).rglob("*.npz"))
    assert [p.parts[1] for p in stored] == ["spread_check", "train_accuracy"]
    # carry the run and the chapter's results (never the checkpoints), then start from an empty data folder
    for p in [r.entry.path.relative_to(results), *stored]:
        (trained / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(results / p, trained / p)
    shutil.rmtree(results)
    carried = runs.run_experiment(TINY)
    with pytest.raises(resultcache.CacheError, match="carried runs hold none"):
        vit_cache.checkpoint(carried, 2)
    assert vs.train_accuracy(carried, n=64) == acc
    again = vs.spread_check(carried)
    assert all(np.array_equal(again[k], sc[k]) for k in sc) and not list(results.rglob("*-checkpoints-*"))
    with pytest.raises(resultcache.CacheError, match="carried runs hold none"):  # other arguments: computed
        vs.train_accuracy(carried, n=32)
    retrained = runs.run_experiment(TINY, retrain=True)  # in the data folder now, with its checkpoints
    assert retrained.digest != carried.digest and vs.train_accuracy(retrained, n=32) >= 0
    with pytest.raises(ValueError, match="n"):
        vs.train_accuracy(retrained, n=0)
    with pytest.raises(ValueError, match="layer"):
        vs.spread_check(retrained, layer=1.0)


def tiny_arrays_train():
    from toy_vit import tiny_arrays

    x, y = tiny_arrays()["train"]
    return x.numpy(), y.numpy().astype(np.int64)
