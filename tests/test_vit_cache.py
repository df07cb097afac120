"""mmtoken.vision.vit_cache: the experiment configuration, and every kind of damage to a cache folder (reported, then
rebuilt), checkpoints read safely, swapped and stale folders, leftovers of interrupted writes."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch
from toy_vit import TINY

from mmtoken.datasets.download import sha256_file
from mmtoken.vision import vit_cache
from mmtoken.vision import vit_runs as runs


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
    with pytest.raises(vit_cache.CacheError, match=match) as info:
        runs.run_experiment(TINY, on_damage="raise")
    assert str(good.path) in str(info.value) and "retrain=True" in str(info.value)
    with pytest.warns(UserWarning, match="Rebuilding"):
        rebuilt = runs.run_experiment(TINY)
    assert rebuilt.path == good.path
    for k in good.log:
        np.testing.assert_array_equal(good.log[k], rebuilt.log[k])
    assert rebuilt.test == good.test
    vit_cache.checkpoint(rebuilt, 2)


def test_garbage_checkpoint_never_gets_torch_advice(tiny_data, monkeypatch):
    r = runs.run_experiment(TINY)
    _garbage(r.path, "ckpt_epoch002.pt")
    with pytest.raises(vit_cache.CacheError, match="does not match its recorded SHA-256"):
        vit_cache.checkpoint(r, 2)
    _rewrite_manifest(r.path)
    with pytest.raises(vit_cache.CacheError, match="not a checkpoint of this model") as info:
        vit_cache.checkpoint(r, 2)
    assert "weights_only" not in str(info.value)
    seen = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: seen.append(k.get("weights_only")) or real_load(*a, **k))
    vit_cache.checkpoint(runs.run_experiment(TINY, retrain=True), 0)
    assert seen == [True]


def test_swapped_cache_is_detected(tiny_data):
    a, b = runs.run_experiments([TINY, TINY.with_seed(1)], workers=1)
    shutil.rmtree(b.path)
    shutil.copytree(a.path, b.path)  # seed 0's run under seed 1's name
    with pytest.raises(vit_cache.CacheError, match="copied or renamed"):
        runs.run_experiment(TINY.with_seed(1), on_damage="raise")
    with pytest.warns(UserWarning, match="Rebuilding"):
        again = runs.run_experiment(TINY.with_seed(1))
    assert again.seed == 1 and not np.array_equal(again.log["qk"], a.log["qk"])


def test_stale_fingerprint_and_foreign_cache(tiny_data):
    r = runs.run_experiment(TINY)
    fp = json.loads((r.path / "manifest.json").read_text())["fingerprint"]
    with pytest.raises(vit_cache.CacheError, match="another code"):
        vit_cache.load(r.path, TINY, {**fp, "code": "0" * 64})
    with pytest.raises(vit_cache.CacheError, match="another data"):
        vit_cache.load(r.path, TINY, {**fp, "data": "0" * 64})
    m = json.loads((r.path / "manifest.json").read_text())
    (r.path / "manifest.json").write_text(json.dumps({**m, "name": "real_reviews"}))
    with pytest.raises(vit_cache.CacheError, match="names 'real_reviews'"):
        vit_cache.load(r.path)
    (r.path / "manifest.json").write_text(json.dumps({**m, "version": 1}))
    with pytest.raises(vit_cache.CacheError, match="cache version 1"):
        vit_cache.load(r.path)
    with pytest.raises(vit_cache.CacheMissing):
        vit_cache.load(r.path.parent / "0123456789abcdef")


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
    removed = vit_cache.sweep_leftovers(root)
    assert sorted(p.name for p in removed) == sorted(
        [dead.name, "arrays.npz.part", "x.tmp", "ckpt_epoch000.pt.part", "a.tmp"]
    )
    assert alive.is_dir() and not dead.exists()
    assert runs.run_experiment(TINY).path == r.path  # the run itself is untouched
    shutil.rmtree(alive)
