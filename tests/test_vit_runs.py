"""mmtoken.vit_runs: splits and attention statistics, the experiment configuration, the cached experiment at
tiny scale (training, reloading, checkpoints, worker processes) and every kind of damage to its cache."""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
from toy_vit import TINY, bright_patch_data, small, tiny_arrays

from mmtoken import vit
from mmtoken import vit_runs as runs
from mmtoken.chapters import ch09_vit_sparsity as vs
from mmtoken.datasets.download import sha256_file

# --------------------------------------------------------------------------- splits and statistics


def test_split_indices():
    tr, va = runs.split_indices(100, 20, 7)
    assert len(va) == 20 and len(tr) == 80 and not set(tr) & set(va)
    assert sorted(set(tr) | set(va)) == list(range(100))
    assert (np.diff(tr) > 0).all() and (np.diff(va) > 0).all()
    tr2, va2 = runs.split_indices(100, 20, 7)
    np.testing.assert_array_equal(va, va2)
    assert not np.array_equal(va, runs.split_indices(100, 20, 8)[1])
    for bad in (0, 100):
        with pytest.raises(ValueError, match="n_validation"):
            runs.split_indices(100, bad, 0)


def test_effective_patches():
    np.testing.assert_allclose(runs.effective_patches(np.full((2, 8), 1 / 8)), [8, 8])
    np.testing.assert_allclose(runs.effective_patches(np.eye(3)), [1, 1, 1])
    np.testing.assert_allclose(runs.effective_patches([0.5, 0.5, 0, 0]), 2)


def test_attention_statistics_against_a_direct_computation():
    torch.manual_seed(5)
    cfg = small(heads=2, init_std=0.5, n_classes=4)
    model = vit.ViT(cfg)
    x, y = bright_patch_data(37, seed=2, classes=4)
    norm = vit.Normalizer.fit(x)
    fg = runs.foreground_mask(x.numpy(), cfg.patch, 0.5)
    s = runs.attention_statistics(model, x.numpy(), y.numpy(), norm, fg, batch_size=10)  # 4 uneven batches
    logits, attns = model(norm(x), return_attention=True)
    loss, acc = vit.evaluate(model, x, y, norm)
    assert s["loss"] == pytest.approx(loss, rel=1e-5) and s["acc"] == pytest.approx(acc)
    assert len(s["layers"]) == cfg.depth and s["mean_map"].shape == (cfg.depth, cfg.n_patches)
    for layer, att in enumerate(attns):
        a = vit.cls_patch_attention(att.double()).detach().numpy()  # (N, h, P)
        d = s["layers"][layer]
        h = -(a * np.log(a)).sum(-1)
        assert d["entropy"] == pytest.approx(h.mean(), rel=1e-9)
        assert d["eff_image"] == pytest.approx(np.exp(h).mean(), rel=1e-9)
        mean_map = a.mean(0)  # (h, P)
        assert d["eff_mean"] == pytest.approx(np.exp(-(mean_map * np.log(mean_map)).sum(-1)).mean(), rel=1e-9)
        assert d["fg_share"] == pytest.approx((a.mean(1) * fg).sum(-1).mean(), rel=1e-9)
        assert d["uniform"] == pytest.approx(fg.mean())
        assert d["top1_fg"] == pytest.approx(fg[np.arange(37), a.mean(1).argmax(-1)].mean())
        np.testing.assert_allclose(s["mean_map"][layer], mean_map.mean(0), rtol=1e-9)
        # averaging first can only spread the attention: the averaged map is never sparser
        assert d["eff_mean"] >= np.exp(h.mean(0)).min() - 1e-9


def test_uniform_attention_has_all_patches_effective():
    model = vit.ViT(small())
    with torch.no_grad():
        model.blocks[-1].attn.q.weight.zero_()
    x, y = bright_patch_data(12)
    s = runs.attention_statistics(
        model, x.numpy(), y.numpy(), vit.Normalizer.fit(x), runs.foreground_mask(x.numpy(), 4, 0.5)
    )
    d = s["layers"][-1]
    assert d["eff_image"] == pytest.approx(4) and d["eff_mean"] == pytest.approx(4)
    assert d["fg_share"] == pytest.approx(d["uniform"])


def test_log_points():
    assert runs.log_points(8, 2, 2, 4) == [0, 2, 4, 6, 8, 12, 16]


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"dataset": "mnist"}, "dataset"),
        ({"n_validation": 0}, "n_validation"),
        ({"n_probe": 40}, "n_probe"),
        ({"map_epochs": (0, 3)}, "map_epochs"),
        ({"map_epochs": (2, 0)}, "map_epochs"),
        ({"map_epochs": ()}, "map_epochs"),
        ({"foreground": 1.5}, "foreground"),
        ({"split_seed": -1}, "split_seed"),
        ({"test": 1}, "test"),
        ({"logs_per_epoch": 0}, "logs_per_epoch"),
    ],
)
def test_bad_experiment_names_the_argument(kw, match):
    with pytest.raises(ValueError, match=f"Experiment.{match}"):
        replace(TINY, **kw)


def test_run_experiments_bad_arguments(tiny_data):
    with pytest.raises(ValueError, match="on_damage"):
        runs.run_experiments([TINY], on_damage="ignore")
    with pytest.raises(ValueError, match="workers"):
        runs.run_experiments([TINY], workers=0)
    with pytest.raises(ValueError, match="exps"):
        runs.run_experiments(["quick"])


# --------------------------------------------------------------------------- the cached experiment at tiny scale


def test_experiment_caches_and_reloads(tiny_data, monkeypatch):
    looks = []
    real = runs.attention_statistics
    monkeypatch.setattr(runs, "attention_statistics", lambda *a, **k: looks.append(len(a[1])) or real(*a, **k))
    r = runs.run_experiment(TINY)
    assert looks == [64], "the test split is looked at once, whole, after training"
    assert r.path.parent == tiny_data / "vit" and len(r.path.name) == 16
    for f in ("manifest.json", "history.json", "arrays.npz", "ckpt_epoch000.pt", "ckpt_epoch002.pt"):
        assert (r.path / f).is_file()
    manifest = json.loads((r.path / "manifest.json").read_text())
    assert manifest["name"] == "vit_sparsity" and manifest["key"] == r.path.name
    assert set(manifest["fingerprint"]) == {"code", "config", "data"}
    # 128 training images = 4 steps per epoch: every step in the first epoch, then every half epoch
    assert r.log["step"].tolist() == [0, 1, 2, 3, 4, 6, 8] and r.log["entropy"].shape == (7, 2)
    assert r.log["ov"].shape == (7, 2) and r.log["eff_mean"].shape == (7, 2)
    assert r.epoch_end.tolist() == [0, 4, 6] and r.val_acc.shape == (3,)
    assert r.probe_attention.shape == (2, 2, 16, 4)
    np.testing.assert_allclose(r.probe_attention.sum(-1), 1, atol=1e-5)
    assert r.probe_fg.shape == (16, 4) and r.probe_fg.any()
    # the probe comes from the validation split, not from the test split
    x_train = tiny_arrays()["train"][0].numpy()
    _, va = runs.split_indices(160, 32, 0)
    np.testing.assert_array_equal(r.probe_images, x_train[va[:16]])
    assert r.log["entropy"][0, -1] == pytest.approx(math.log(4), abs=0.05)
    assert r.test["acc"] >= 0 and len(r.test["layers"]) == 2 and r.test_mean_map.shape == (2, 4)

    def no_training(*a, **k):
        raise AssertionError("the cached run must not retrain")

    monkeypatch.setattr(runs, "train_into", no_training)
    again = runs.run_experiment(TINY)
    assert again.path == r.path
    for k in r.log:
        np.testing.assert_array_equal(r.log[k], again.log[k])
    np.testing.assert_array_equal(r.probe_attention, again.probe_attention)
    assert again.test == r.test
    # the checkpoint reproduces the stored maps
    model = runs.checkpoint(r, 2)
    _, attns = model(r.normalizer(torch.as_tensor(r.probe_images)), return_attention=True)
    np.testing.assert_allclose(
        vit.cls_patch_attention(attns[-1]).mean(1).detach().numpy(), r.probe_attention[1, -1], atol=1e-5
    )
    sc = vs.spread_check(r)
    assert sc["holds"].all() and sc["bound"].shape == (2,)
    with pytest.raises(ValueError, match="no checkpoint"):
        runs.checkpoint(r, 1)
    s = vs.seed_summary(r)
    assert s["n_patches"] == 4 and s["qk_growth"] > 0 and 1 <= s["eff_image"] <= 4 + 1e-9
    assert 1 <= s["eff_mean"] <= 4 + 1e-9 and 0 < s["uniform"] < 1 and s["seed"] == 0
    assert s["qk_growth"] == pytest.approx(r.log["qk"][-1, -1] / r.log["qk"][0, -1])


def test_a_run_without_the_test_split(tiny_data):
    r = runs.run_experiment(replace(TINY, test=False))
    assert r.test is None and r.test_mean_map is None
    with pytest.raises(ValueError, match="test split"):
        vs.seed_summary(r)


def test_key_changes_with_config_code_and_data():
    fp = runs.fingerprint(TINY, "data0")
    assert runs.cache_key(fp) == runs.cache_key(runs.fingerprint(TINY, "data0"))
    assert runs.cache_key(fp) != runs.cache_key(runs.fingerprint(TINY.with_seed(1), "data0"))
    assert runs.cache_key(fp) != runs.cache_key(
        runs.fingerprint(replace(TINY, model=replace(TINY.model, width=32)), "data0")
    )
    assert runs.cache_key(fp) != runs.cache_key(runs.fingerprint(TINY, "data1"))
    assert runs.cache_key(fp) != runs.cache_key({**fp, "code": "other"})


@pytest.mark.slow
def test_training_is_bit_identical_in_worker_processes(tiny_data, tmp_path):
    """Two seeds trained in two spawned processes give the same files as in this process."""
    exps = [TINY, TINY.with_seed(1)]
    parallel = runs.run_experiments(exps, workers=2)
    serial = []
    for r in parallel:
        shutil.rmtree(r.path)
    serial = runs.run_experiments(exps, workers=1)
    for a, b in zip(parallel, serial):
        assert a.path == b.path
        for k in a.log:
            np.testing.assert_array_equal(a.log[k], b.log[k])
        np.testing.assert_array_equal(a.probe_attention, b.probe_attention)
        assert a.test == b.test


def test_cifar_like_experiment_runs(tmp_path, monkeypatch):
    """The paper-scale code path (3 channels, augmentation, no foreground rule) at tiny size."""
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path))
    g = torch.Generator().manual_seed(0)
    data = {
        s: (
            torch.randint(0, 256, (n, 3, 8, 8), generator=g, dtype=torch.uint8).numpy(),
            torch.randint(0, 10, (n,), generator=g).numpy(),
        )
        for s, n in (("train", 80), ("test", 16))
    }
    monkeypatch.setattr(runs.image_data, "load_images", lambda name, split: data[split])
    exp = runs.Experiment(
        dataset="cifar-10",
        model=small(channels=3, n_classes=10),
        train=vit.TrainConfig(epochs=1, batch_size=16, lr=1e-3, augment=True, grad_clip=1.0, threads=None),
        n_validation=16,
        logs_per_epoch=1,
        logs_first_epoch=2,
        n_probe=8,
        foreground=None,
    )
    r = runs.run_experiment(exp)
    assert r.classes[0] == "airplane" and r.probe_images.shape == (8, 3, 8, 8)
    assert not r.probe_fg.any() and r.log["step"].tolist() == [0, 2, 4]
    assert r.experiment.epochs_mapped == (0, 1) and r.probe_attention.shape[0] == 2
    fig = vs.plot_attention_maps(r, n_examples=3)
    rows = len(vs.example_indices(r, 3))
    assert rows >= 1 and len(fig.axes) == rows * 3 and all(ax.images for ax in fig.axes)  # image + 2 stored epochs
    import matplotlib.pyplot as plt

    plt.close(fig)


@pytest.mark.slow
def test_a_failing_worker_is_reported(tiny_data):
    x = np.zeros((64, 1, 28, 28), np.uint8)
    raw = runs.RawData(
        "fashion-mnist",
        x,
        np.zeros(64, np.int64),
        x[:8],
        np.zeros(8, np.int64),
        runs.data_digest(x, np.zeros(64, np.int64), x[:8], np.zeros(8, np.int64)),
    )
    jobs = [
        (e, raw, tiny_data / "vit" / f"job{i}", runs.fingerprint(e, raw.fingerprint))
        for i, e in enumerate([TINY, TINY.with_seed(1)])
    ]
    with pytest.raises(RuntimeError, match="the model expects"):
        runs.train_in_processes(jobs, workers=2)


# --------------------------------------------------------------------------- damaged caches


def _rewrite_manifest(path):
    """Re-record the checksums, as a forger (or a careless copy) would: only the structural checks remain."""
    m = json.loads((path / "manifest.json").read_text())
    m["files"] = {
        p.name: {"sha256": sha256_file(p), "bytes": p.stat().st_size}
        for p in sorted(path.iterdir())
        if p.name != "manifest.json"
    }
    (path / "manifest.json").write_text(json.dumps(m))


def _truncate(path, name):
    data = (path / name).read_bytes()
    (path / name).write_bytes(data[: len(data) // 2])


def _garbage(path, name):
    (path / name).write_bytes(b"this is not what it should be" * 10)


def _drop_array(path, key):
    with np.load(path / "arrays.npz") as z:
        arrays = {k: z[k] for k in z.files if k != key}
    np.savez_compressed(path / "arrays.npz", **arrays)


def _reshape_array(path, key):
    with np.load(path / "arrays.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays[key] = arrays[key][..., :-1]
    np.savez_compressed(path / "arrays.npz", **arrays)


def _edit_history(path, edit):
    h = json.loads((path / "history.json").read_text())
    edit(h)
    (path / "history.json").write_text(json.dumps(h))


DAMAGE = {
    "truncated history.json": (lambda p: _truncate(p, "history.json"), False, "history.json does not match"),
    "truncated history.json, manifest re-recorded": (
        lambda p: _truncate(p, "history.json"),
        True,
        "history.json is not readable JSON",
    ),
    "missing arrays.npz": (lambda p: (p / "arrays.npz").unlink(), False, "arrays.npz is missing"),
    "corrupt zip": (lambda p: _garbage(p, "arrays.npz"), False, "arrays.npz does not match"),
    "corrupt zip, manifest re-recorded": (lambda p: _garbage(p, "arrays.npz"), True, "arrays.npz cannot be read"),
    "missing array": (lambda p: _drop_array(p, "probe_fg"), True, "lacks probe_fg"),
    "wrong shape": (lambda p: _reshape_array(p, "probe_attention"), True, "probe_attention has shape"),
    "garbage checkpoint": (lambda p: _garbage(p, "ckpt_epoch002.pt"), False, "ckpt_epoch002.pt does not match"),
    "missing checkpoint": (lambda p: (p / "ckpt_epoch000.pt").unlink(), False, "ckpt_epoch000.pt is missing"),
    "missing manifest": (lambda p: (p / "manifest.json").unlink(), False, "manifest.json is missing"),
    "truncated manifest": (lambda p: _truncate(p, "manifest.json"), False, "manifest.json is not readable JSON"),
    "log of the wrong length": (lambda p: _edit_history(p, lambda h: h["log"]["qk"].pop()), True, "log\\['qk'\\]"),
    "test statistics lost": (lambda p: _edit_history(p, lambda h: h.update(test=None)), True, "test statistics"),
    "another configuration": (
        lambda p: _edit_history(p, lambda h: h["experiment"]["train"].update(lr=0.5)),
        True,
        "another configuration",
    ),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_cache_is_reported_then_rebuilt(tiny_data, case):
    damage, forge, match = DAMAGE[case]
    good = runs.run_experiment(TINY)
    damage(good.path)
    if forge:
        _rewrite_manifest(good.path)
    with pytest.raises(runs.CacheError, match=match) as info:
        runs.run_experiment(TINY, on_damage="raise")
    assert str(good.path) in str(info.value) and "retrain=True" in str(info.value)
    with pytest.warns(UserWarning, match="Rebuilding"):
        rebuilt = runs.run_experiment(TINY)
    assert rebuilt.path == good.path
    for k in good.log:
        np.testing.assert_array_equal(good.log[k], rebuilt.log[k])
    assert rebuilt.test == good.test
    runs.checkpoint(rebuilt, 2)


def test_garbage_checkpoint_never_gets_torch_advice(tiny_data, monkeypatch):
    r = runs.run_experiment(TINY)
    _garbage(r.path, "ckpt_epoch002.pt")
    with pytest.raises(runs.CacheError, match="does not match its recorded SHA-256"):
        runs.checkpoint(r, 2)
    _rewrite_manifest(r.path)
    with pytest.raises(runs.CacheError, match="not a checkpoint of this model") as info:
        runs.checkpoint(r, 2)
    assert "weights_only" not in str(info.value)
    seen = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: seen.append(k.get("weights_only")) or real_load(*a, **k))
    runs.checkpoint(runs.run_experiment(TINY, retrain=True), 0)
    assert seen == [True]


def test_swapped_cache_is_detected(tiny_data):
    a, b = runs.run_experiments([TINY, TINY.with_seed(1)], workers=1)
    shutil.rmtree(b.path)
    shutil.copytree(a.path, b.path)  # seed 0's run under seed 1's name
    with pytest.raises(runs.CacheError, match="copied or renamed"):
        runs.run_experiment(TINY.with_seed(1), on_damage="raise")
    with pytest.warns(UserWarning, match="Rebuilding"):
        again = runs.run_experiment(TINY.with_seed(1))
    assert again.seed == 1 and not np.array_equal(again.log["qk"], a.log["qk"])


def test_stale_fingerprint_and_foreign_cache(tiny_data):
    r = runs.run_experiment(TINY)
    fp = json.loads((r.path / "manifest.json").read_text())["fingerprint"]
    with pytest.raises(runs.CacheError, match="another code"):
        runs.load(r.path, TINY, {**fp, "code": "0" * 64})
    with pytest.raises(runs.CacheError, match="another data"):
        runs.load(r.path, TINY, {**fp, "data": "0" * 64})
    m = json.loads((r.path / "manifest.json").read_text())
    (r.path / "manifest.json").write_text(json.dumps({**m, "name": "real_reviews"}))
    with pytest.raises(runs.CacheError, match="names 'real_reviews'"):
        runs.load(r.path)
    (r.path / "manifest.json").write_text(json.dumps({**m, "version": 1}))
    with pytest.raises(runs.CacheError, match="cache version 1"):
        runs.load(r.path)
    with pytest.raises(runs.CacheMissing):
        runs.load(r.path.parent / "0123456789abcdef")


def test_leftovers_are_swept(tiny_data):
    r = runs.run_experiment(TINY)
    root = r.path.parent
    dead = root / f"{r.path.name}.tmp-999999999"
    dead.mkdir()
    (dead / "history.json").write_text("{")
    alive = root / f"{r.path.name}.tmp-{os.getppid()}"
    alive.mkdir()
    for f in (root / "arrays.npz.part", root / "x.tmp", r.path / "ckpt_epoch000.pt.part", r.path / "a.tmp"):
        f.write_bytes(b"partial")
    removed = runs.sweep_leftovers(root)
    assert sorted(p.name for p in removed) == sorted(
        [dead.name, "arrays.npz.part", "x.tmp", "ckpt_epoch000.pt.part", "a.tmp"]
    )
    assert alive.is_dir() and not dead.exists()
    assert runs.run_experiment(TINY).path == r.path  # the run itself is untouched
    shutil.rmtree(alive)


def test_wrong_image_shape_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path))
    x = np.zeros((64, 1, 28, 28), np.uint8)
    monkeypatch.setattr(runs.image_data, "load_images", lambda name, split: (x, np.zeros(64, np.int64)))
    with pytest.raises(ValueError, match="the model expects"):
        runs.run_experiment(TINY)
    assert not list((tmp_path / "vit").glob("*"))
