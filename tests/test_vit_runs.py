"""mmtoken.vision.vit_runs: the split and the log points, a stored run at tiny scale (training, reading back,
checkpoints), its key and the training code it covers, retraining, and runs trained in worker processes (the same
numbers bit for bit, a worker's failure raised with its traceback, its warnings repeated)."""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from dataclasses import replace

import numpy as np
import pytest
import torch
from toy_vit import TINY, assert_same_checkpoints, assert_same_run, small, tiny_arrays

from mmtoken import config, workers
from mmtoken.book import fingerprint, resultcache
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
    with pytest.raises(ValueError, match="retrain"):
        runs.run_experiments([TINY], retrain="yes")
    with pytest.raises(ValueError, match="workers"):
        runs.run_experiments([TINY], workers=0)
    with pytest.raises(ValueError, match="exps"):
        runs.run_experiments(["quick"])
    with pytest.raises(TypeError, match="on_damage"):  # gone: the store decides (damaged: warned and retrained)
        runs.run_experiments([TINY], on_damage="raise")


# --------------------------------------------------------------------------- a stored run at tiny scale


def test_experiment_is_stored_and_read_back(tiny_data, monkeypatch):
    looks = []
    real = vit.attention_statistics
    monkeypatch.setattr(vit, "attention_statistics", lambda *a, **k: looks.append(len(a[1])) or real(*a, **k))
    r = runs.run_experiment(TINY)
    assert looks == [64], "the test split is looked at once, whole, after training"
    monkeypatch.setattr(vit, "attention_statistics", real)  # (a rebound function is other code: another result)
    # 128 training images = 4 steps per epoch: every step in the first epoch, then every half epoch
    assert r.log["step"].tolist() == [0, 1, 2, 3, 4, 6, 8] and r.log["entropy"].shape == (7, 2)
    assert r.log["ov"].shape == (7, 2) and r.log["eff_mean"].shape == (7, 2)
    assert r.epoch_end.tolist() == [0, 4, 6] and r.val_acc.shape == (3,)
    assert r.probe_attention.shape == (2, 2, 16, 4)
    np.testing.assert_allclose(r.probe_attention.sum(-1), 1, atol=4 * 2.0**-11)  # stored at float16: 4 roundings
    assert r.probe_fg.shape == (16, 4) and r.probe_fg.any()
    # the probe comes from the validation split, not from the test split
    x_train = tiny_arrays()["train"][0].numpy()
    _, va = runs.split_indices(160, 32, 0)
    np.testing.assert_array_equal(r.probe_images, x_train[va[:16]])
    assert r.log["entropy"][0, -1] == pytest.approx(math.log(4), abs=0.05)
    assert r.test["acc"] >= 0 and len(r.test["layers"]) == 2 and r.test_mean_map.shape == (2, 4)

    r = runs.run_experiment(TINY)  # stored by today's code
    saved = []
    monkeypatch.setattr(resultcache, "save", lambda *a, **k: saved.append(a[1]))
    again = runs.run_experiment(TINY)
    assert saved == [], "a stored run is read, not trained"
    assert_same_run(r, again)
    assert again.digest == r.digest and again.entry == r.entry
    # the checkpoint reproduces the stored maps
    model = vit_cache.checkpoint(r, 2)
    _, attns = model(r.normalizer(torch.as_tensor(r.probe_images)), return_attention=True)
    np.testing.assert_allclose(
        vit.cls_patch_attention(attns[-1]).mean(1).detach().numpy(),
        r.probe_attention[1, -1],
        atol=2.0**-11,  # float16 storage
    )
    s = vs.seed_summary(r)
    assert s["n_patches"] == 4 and s["qk_growth"] > 0 and 1 <= s["eff_image"] <= 4 + 1e-9
    assert 1 <= s["eff_mean"] <= 4 + 1e-9 and 0 < s["uniform"] < 1 and s["seed"] == 0
    assert s["qk_growth"] == pytest.approx(r.log["qk"][-1, -1] / r.log["qk"][0, -1])


def test_a_run_without_the_test_split(tiny_data):
    r = runs.run_experiment(replace(TINY, test=False))
    assert r.test is None and r.test_mean_map is None and "test_mean_map" not in vit_cache.expected_arrays(r.experiment)
    with pytest.raises(ValueError, match="test split"):
        vs.seed_summary(r)


def test_retrain_replaces_the_file_with_the_same_numbers(tiny_data):
    r = runs.run_experiment(TINY)
    before = r.entry.path.stat().st_ino, vit_cache.checkpoints_path(TINY).stat().st_ino
    again = runs.run_experiments([TINY, TINY], retrain=True)  # one run asked twice: trained once
    assert r.entry.path.stat().st_ino != before[0] and vit_cache.checkpoints_path(TINY).stat().st_ino != before[1]
    assert again[0].digest == again[1].digest
    assert_same_run(r, again[0])
    assert_same_checkpoints(r, again[0])


def test_the_key_follows_config_and_data_the_fingerprint_code_too(tiny_data):
    raw = runs.load_raw("fashion-mnist")
    other = replace(raw, fingerprint="0" * 64)
    e = runs.entry(TINY, raw)
    assert e == runs.entry(TINY, raw) and e.title == "vit/fashion-mnist/seed0"
    assert runs.entry(TINY.with_seed(1), raw).path != e.path
    assert runs.entry(replace(TINY, model=replace(TINY.model, width=32)), raw).path != e.path
    assert runs.entry(replace(TINY, n_probe=8), raw).path != e.path
    assert runs.entry(TINY, other).path == e.path and runs.entry(TINY, other).fp != e.fp  # new data: replaced
    other_code = resultcache.entry("vit", e.name, config=TINY, code=[runs.split_indices], data=raw.fingerprint)
    assert other_code.path == e.path and other_code.fp != e.fp  # other code: replaced in place


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


def test_the_fingerprint_covers_every_mmtoken_function_training_calls():
    """A run's code fingerprint is the closure of :func:`train_into` (:mod:`mmtoken.book.fingerprint`): every
    ``mmtoken`` function it calls is in it, but the store's (which keeps results, computes none)."""
    closure = set(fingerprint.index().closure(fingerprint.roots_of(runs.train_into)))
    called = {f for f in _called(runs.train_into) if getattr(f, "__module__", "").startswith("mmtoken")}
    assert {vit_train.train, vit.attention_statistics, vit.probe_statistics, runs.split_indices} <= called
    assert {config.deterministic, config.seed_everything, runs.log_points} <= called
    uncovered = [f for f in called if (f.__module__, f.__qualname__.split(".")[0]) not in closure]
    assert not uncovered, f"train_into calls {uncovered}, which its fingerprint does not cover"
    assert ("mmtoken.vision.vit_cache", "store_checkpoints") not in closure  # storing is not computing
    covered = {m for m, _ in closure}
    assert {"mmtoken.vision.vit", "mmtoken.vision.vit_train", "mmtoken.vision.vit_cache"} <= covered
    assert ("mmtoken.vision.vit_cache", "LOG_KEYS") in closure and ("mmtoken.vision.vit_cache", "Experiment") in closure
    assert not covered & fingerprint.OUTSIDE  # the store, the downloads: never part of a run's key


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
    assert r.entry.name == "cifar-10/seed0"
    fig = vs.plot_attention_maps(r, n_examples=3)
    rows = len(vs.example_indices(r, 3))
    assert rows >= 1 and len(fig.axes) == rows * 3 and all(ax.images for ax in fig.axes)  # image + 2 stored epochs
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_wrong_image_shape_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path))
    x = np.zeros((64, 1, 28, 28), np.uint8)
    monkeypatch.setattr(runs.image_data, "load_images", lambda name, split: (x, np.zeros(64, np.int64)))
    with pytest.raises(ValueError, match="the model expects"):
        runs.run_experiment(TINY)
    assert not list(tmp_path.rglob("*.npz")), "nothing is stored"


# --------------------------------------------------------------------------- runs in worker processes


@pytest.mark.slow
def test_training_is_bit_identical_in_worker_processes(tiny_data, monkeypatch, capsys):
    """Two seeds trained in two spawned workers give the numbers and checkpoints they give in this process, bit for
    bit; a damaged file among them is trained again, and the worker's warning reaches this process."""
    exps = [TINY, TINY.with_seed(1)]
    serial = runs.run_experiments(exps, workers=1)
    serial[0].entry.path.write_bytes(b"damaged")
    serial[1].entry.path.unlink()
    ckpts = {e: vit_cache.checkpoint(r, 2).state_dict() for e, r in zip(exps, serial)}
    for e in exps:
        vit_cache.checkpoints_path(e).unlink()
    monkeypatch.setenv("MMTOKEN_PROGRESS", "on")
    with pytest.warns(RuntimeWarning, match="ignoring a stored result.*seed0"):
        parallel = runs.run_experiments(exps, workers=2)
    assert "ViT runs" in capsys.readouterr().err  # a bar over the finished runs
    for e, a, b in zip(exps, serial, parallel):
        assert a.entry == b.entry
        assert_same_run(a, b)
        for k, v in vit_cache.checkpoint(b, 2).state_dict().items():
            assert v.numpy().tobytes() == ckpts[e][k].numpy().tobytes(), k


@pytest.mark.slow
def test_a_failing_worker_raises_with_its_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path))
    x = np.zeros((64, 1, 28, 28), np.uint8)
    monkeypatch.setattr(runs.image_data, "load_images", lambda name, split: (x, np.zeros(64, np.int64)))
    with pytest.raises(workers.WorkerError, match="the model expects") as info:
        runs.run_experiments([TINY, TINY.with_seed(1)], workers=2)
    assert "in the worker" in str(info.value) and "train_into" in str(info.value)
    assert not list(tmp_path.rglob("*.npz"))
