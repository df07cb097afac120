"""mmtoken.vision.vit_cache: the experiment configuration; a run in the one store, refused when damaged, swapped or
garbled (then trained again, with a warning) and replaced silently when stale; its checkpoints beside it, read
without pickle, and a clear error where they are not stored (the carried runs hold none)."""

from __future__ import annotations

import shutil
import warnings
from dataclasses import replace

import numpy as np
import pytest
from toy_vit import TINY, assert_same_checkpoints, assert_same_run

from mmtoken.book import resultcache
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


def test_a_run_is_one_result_of_the_store(tiny_data):
    r = runs.run_experiment(TINY)
    e = r.entry
    assert e.owner == vit_cache.OWNER == "vit" and e.name == vit_cache.run_name(TINY) == "fashion-mnist/seed0"
    assert e.path == resultcache.path_of("vit", "fashion-mnist/seed0", TINY) and e.path.is_file()
    assert e.path.parent == tiny_data / "results" / "vit" / "fashion-mnist"
    arrays, meta = resultcache.load(e.path, e.title, e.fp, vit_cache.expected_arrays(TINY))
    assert set(arrays) == {"probe_attention", "probe_images", "probe_labels", "probe_fg", "test_mean_map"}
    assert {"experiment", "log", "val_acc", "test", "normalizer", "classes"} <= set(meta)
    ckpt = vit_cache.checkpoints_path(TINY)
    assert ckpt.parent == e.path.parent and ckpt.name.startswith("seed0-checkpoints-")
    names = resultcache.load(ckpt, "vit/fashion-mnist/seed0-checkpoints", e.fp)[0]
    assert {k.split(".")[0] for k in names} == {"epoch000", "epoch002"}  # the mapped epochs, as NumPy arrays
    with pytest.raises(ValueError, match="Experiment"):
        vit_cache.run_name("quick")


# --------------------------------------------------------------------------- a damaged, swapped or garbled run


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garbage(path):
    path.write_bytes(b"this is not what it should be" * 10)


def _forge(r, edit):
    """Rewrite ``r``'s file with the right name and fingerprint but ``edit``ed content (what the header cannot
    vouch for)."""
    arrays, meta = resultcache.load(r.entry.path, r.entry.title, r.entry.fp)
    edit(arrays, meta)
    resultcache.save(r.entry.path, r.entry.title, r.entry.fp, arrays, meta)


def _trim(arrays, meta):
    arrays["probe_attention"] = arrays["probe_attention"][..., :-1]


def _drop(arrays, meta):
    del arrays["probe_fg"]


DAMAGE = {
    "truncated file": (_truncate, "damaged"),
    "garbage file": (_garbage, "damaged"),
    "an array of the wrong shape": (lambda p, r: _forge(r, _trim), "probe_attention"),
    "a missing array": (lambda p, r: _forge(r, _drop), "probe_fg"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_run_is_refused_then_trained_again_with_a_warning(tiny_data, case):
    damage, match = DAMAGE[case]
    good = runs.run_experiment(TINY)
    path = good.entry.path
    data = runs.load_raw("fashion-mnist").fingerprint
    assert resultcache.stored("vit", good.entry.name, config=TINY, code=[runs.train_into], data=data)
    damage(path) if damage in (_truncate, _garbage) else damage(path, good)
    with pytest.raises(resultcache.CacheError, match=match):  # the store refuses it
        resultcache.load(path, good.entry.title, good.entry.fp, vit_cache.expected_arrays(TINY))
    if damage in (_truncate, _garbage):  # what the header vouches for is checked by every read
        assert not resultcache.stored("vit", good.entry.name, config=TINY, code=[runs.train_into], data=data)
    with pytest.warns(RuntimeWarning, match="ignoring a stored result"):
        again = runs.run_experiment(TINY)
    assert again.entry.path == path
    assert_same_run(good, again)
    assert_same_checkpoints(good, again)


def test_a_swapped_run_is_refused(tiny_data):
    a, b = runs.run_experiments([TINY, TINY.with_seed(1)], workers=1)
    shutil.copy(b.entry.path, a.entry.path)  # seed 1's run under seed 0's name
    with pytest.raises(resultcache.CacheError, match="holds 'vit/fashion-mnist/seed1'"):
        resultcache.load(a.entry.path, a.entry.title, a.entry.fp)
    with pytest.warns(RuntimeWarning, match="ignoring a stored result"):
        again = runs.run_experiment(TINY)
    assert again.seed == 0
    assert_same_run(a, again)


def test_a_stale_run_is_replaced_in_place_without_a_warning(tiny_data):
    good = runs.run_experiment(TINY)
    arrays, meta = resultcache.load(good.entry.path, good.entry.title, None)
    resultcache.save(good.entry.path, good.entry.title, "0" * 64, arrays, meta)  # as an edit of the code leaves it
    with pytest.raises(resultcache.StaleResult):
        resultcache.load(good.entry.path, good.entry.title, good.entry.fp)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = runs.run_experiment(TINY)
    assert again.entry.path == good.entry.path and resultcache.load(again.entry.path, again.entry.title, again.entry.fp)
    assert_same_run(good, again)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda a, m: m.pop("log"), "lacks or garbles"),
        (lambda a, m: m["log"]["qk"].pop(), r"log\['qk'\]"),
        (lambda a, m: m.update(test=None), "test statistics"),
        (lambda a, m: m["val_acc"].append(0.5), "val_acc"),
    ],
)
def test_a_garbled_note_is_an_error_that_says_how_to_retrain(tiny_data, edit, match):
    good = runs.run_experiment(TINY)
    _forge(good, edit)
    with pytest.raises(resultcache.CacheError, match=match) as info:
        runs.run_experiment(TINY)
    assert "retrain=True" in str(info.value) and good.entry.title in str(info.value)
    assert_same_run(good, runs.run_experiment(TINY, retrain=True))


# --------------------------------------------------------------------------- checkpoints


def test_a_missing_checkpoint_is_a_clear_error(tiny_data):
    r = runs.run_experiment(TINY)
    vit_cache.checkpoints_path(TINY).unlink()
    with pytest.raises(resultcache.CacheError, match="carried runs hold none") as info:
        vit_cache.checkpoint(r, 2)
    assert "retrain=True" in str(info.value)
    with pytest.raises(ValueError, match="no checkpoint for epoch 1"):
        vit_cache.checkpoint(r, 1)
    again = runs.run_experiment(TINY, retrain=True)
    assert_same_run(r, again)
    assert vit_cache.checkpoint(again, 2).training is False


def test_damaged_or_foreign_checkpoints_are_errors(tiny_data):
    r = runs.run_experiment(TINY)
    path = vit_cache.checkpoints_path(TINY)
    arrays, meta = resultcache.load(path, "vit/fashion-mnist/seed0-checkpoints", r.entry.fp)
    resultcache.save(path, "vit/fashion-mnist/seed0-checkpoints", "0" * 64, arrays, meta)
    with pytest.raises(resultcache.CacheError, match="another training"):
        vit_cache.checkpoint(r, 0)
    resultcache.save(path, "vit/fashion-mnist/seed0-checkpoints", r.entry.fp, {"epoch000.x": np.zeros(3)}, meta)
    with pytest.raises(resultcache.CacheError, match="no checkpoint of this model at epoch 0"):
        vit_cache.checkpoint(r, 0)
    _garbage(path)
    with pytest.raises(resultcache.CacheError, match="damaged"):
        vit_cache.checkpoint(r, 0)
    with pytest.raises(ValueError, match="states"):
        vit_cache.store_checkpoints(TINY, r.entry.fp, {0: {}})


def test_a_carried_run_is_read_without_training_and_holds_no_checkpoints(tiny_data, tmp_path_factory, monkeypatch):
    trained = tmp_path_factory.mktemp("trained")
    monkeypatch.setenv("MMTOKEN_TRAINED", str(trained))
    r = runs.run_experiment(TINY)
    carried = r.entry.carried
    assert carried == trained / r.entry.path.relative_to(tiny_data / "results")
    carried.parent.mkdir(parents=True)
    shutil.copy(r.entry.path, carried)
    shutil.rmtree(tiny_data / "results")  # a fresh clone: the carried runs only
    saved = []
    monkeypatch.setattr(resultcache, "save", lambda *a, **k: saved.append(a[1]))
    again = runs.run_experiment(TINY)
    assert saved == [] and not again.entry.path.exists(), "a carried run is read, not trained"
    assert_same_run(r, again)
    assert again.digest == r.digest  # the same file: results computed from it are the same results
    with pytest.raises(resultcache.CacheError, match="carried runs hold none"):
        vit_cache.checkpoint(again, 2)
