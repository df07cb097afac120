"""mmtoken.vision.vit_runs: the split and the log points, the cached experiment at tiny scale (training, reloading,
checkpoints, worker processes), the key and the training code it covers."""

from __future__ import annotations

import ast
import inspect
import json
import math
import shutil
import textwrap
from dataclasses import replace

import numpy as np
import pytest
import torch
from toy_vit import TINY, small, tiny_arrays

from mmtoken import config
from mmtoken.book import resultcache
from mmtoken.chapters import ch09_vit_sparsity as vs
from mmtoken.vision import vit, vit_cache, vit_train
from mmtoken.vision import vit_runs as runs

# --------------------------------------------------------------------------- the split and the log points


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


def test_log_points():
    assert runs.log_points(8, 2, 2, 4) == [0, 2, 4, 6, 8, 12, 16]


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
    real = vit.attention_statistics
    monkeypatch.setattr(vit, "attention_statistics", lambda *a, **k: looks.append(len(a[1])) or real(*a, **k))
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
    model = vit_cache.checkpoint(r, 2)
    _, attns = model(r.normalizer(torch.as_tensor(r.probe_images)), return_attention=True)
    np.testing.assert_allclose(
        vit.cls_patch_attention(attns[-1]).mean(1).detach().numpy(), r.probe_attention[1, -1], atol=1e-5
    )
    sc = vs.spread_check(r)
    assert sc["holds"].all() and sc["bound"].shape == (2,)
    with pytest.raises(ValueError, match="no checkpoint"):
        vit_cache.checkpoint(r, 1)
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
    assert vit_cache.cache_key(fp) == vit_cache.cache_key(runs.fingerprint(TINY, "data0"))
    assert vit_cache.cache_key(fp) != vit_cache.cache_key(runs.fingerprint(TINY.with_seed(1), "data0"))
    assert vit_cache.cache_key(fp) != vit_cache.cache_key(
        runs.fingerprint(replace(TINY, model=replace(TINY.model, width=32)), "data0")
    )
    assert vit_cache.cache_key(fp) != vit_cache.cache_key(runs.fingerprint(TINY, "data1"))
    assert vit_cache.cache_key(fp) != vit_cache.cache_key({**fp, "code": "other"})


def _called(func) -> set:
    """The objects the calls in ``func``'s source name, resolved in its module (a nested callback's calls too)."""
    ns, out = vars(inspect.getmodule(func)), set()

    def resolve(node):
        if isinstance(node, ast.Name):
            return ns.get(node.id)
        if isinstance(node, ast.Attribute):
            return getattr(resolve(node.value), node.attr, None)
        return None

    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(func)))):
        if isinstance(node, ast.Call) and (obj := resolve(node.func)) is not None:
            out.add(obj)
    return out


def test_the_key_covers_every_mmtoken_function_training_calls(monkeypatch):
    """The code fingerprint hashes the modules of TRAINING_MODULES and the functions of TRAINING_CODE: every
    ``mmtoken`` function ``train_into`` calls is in one of them, but the device choice and the folder's writing."""
    not_computing = {config.device, resultcache.write_manifest, resultcache.commit_folder}
    modules = {m.__name__ for m in runs.TRAINING_MODULES}
    called = {f for f in _called(runs.train_into) if getattr(f, "__module__", "").startswith("mmtoken")}
    assert {vit_train.train, vit.attention_statistics, vit.probe_statistics, runs.split_indices} <= called
    uncovered = [f for f in called if f.__module__ not in modules and f not in runs.TRAINING_CODE]
    assert set(uncovered) <= not_computing, f"train_into calls {uncovered}, which the key does not cover"
    assert {"mmtoken.vision.vit", "mmtoken.vision.vit_train"} <= modules
    full = runs.code_fingerprint.__wrapped__()
    monkeypatch.setattr(runs, "TRAINING_CODE", runs.TRAINING_CODE[:-1])
    assert runs.code_fingerprint.__wrapped__() != full


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
    exp = vit_cache.Experiment(
        dataset="cifar-10",
        model=small(channels=3, n_classes=10),
        train=vit_train.TrainConfig(epochs=1, batch_size=16, lr=1e-3, augment=True, grad_clip=1.0, threads=None),
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


def test_wrong_image_shape_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path))
    x = np.zeros((64, 1, 28, 28), np.uint8)
    monkeypatch.setattr(runs.image_data, "load_images", lambda name, split: (x, np.zeros(64, np.int64)))
    with pytest.raises(ValueError, match="the model expects"):
        runs.run_experiment(TINY)
    assert not list((tmp_path / "vit").glob("*"))
