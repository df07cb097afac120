import os
import sys

import matplotlib
import pytest

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


_GUARDED = ("MMTOKEN_DATA", "MMTOKEN_SCALE")
_AT_START = {k: os.environ.get(k) for k in _GUARDED}


@pytest.fixture(autouse=True)
def _environment_unchanged():
    """After every test, MMTOKEN_DATA and MMTOKEN_SCALE are what the session started with: a fixture of any scope
    that changes them must undo it before its tests run (a leaked data folder once made a notebook run later on
    the same worker read an empty results cache); and every registered claim is still the one it was."""
    ledger = sys.modules.get("mmtoken.book.ledger")
    before = {k: c.func for k, c in ledger.REGISTRY.items()} if ledger else {}
    yield
    now = {k: os.environ.get(k) for k in _GUARDED}
    assert now == _AT_START, f"the environment was left changed: {_AT_START} -> {now}"
    # a claim replaced in the registry (say by running a chapter's cells in a namespace) would be judged, by the
    # next test on this worker, with code that is not the chapter's
    replaced = sorted(k for k, f in before.items() if k in ledger.REGISTRY and ledger.REGISTRY[k].func is not f)
    assert not replaced, f"the claims registry was left changed: {replaced}"


# Fixtures that the tests of more than one module use. They import the package (and torch) only when a test asks
# for them, so that collecting the other tests stays fast; their toy data live in toy_reviews.py and toy_vit.py.


# --------------------------------------------------------------------------- chapter 12: reviews
@pytest.fixture
def review_data_dir(tmp_path, monkeypatch):
    """Each test of chapter 12's modules gets its own empty data/ folder, and torch runs on one thread."""
    import torch

    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """One seed of every run on the toy review data, and the seed-free profile (computed once: review_seeds and
    chapters.ch12_real_reviews are both tested on it)."""
    import torch
    from toy_reviews import TINY, toy_dataset

    from mmtoken.embeddings import review_runs, review_seeds

    mp = pytest.MonkeyPatch()
    mp.setenv("MMTOKEN_DATA", str(tmp_path_factory.mktemp("data")))
    torch.set_num_threads(1)
    try:
        ds = toy_dataset()
        data = review_runs.prepare(TINY, ds)
        arrays, metrics = review_seeds.run_seed(TINY, data, 10)
        computed = ds, data, arrays, metrics, review_seeds.profile(TINY, ds, data)
    finally:
        # Undone before the tests run, not at the session's end: a session fixture's environment otherwise
        # leaks into every later test of its worker (a notebook run there read an empty results cache).
        mp.undo()
    yield computed


# --------------------------------------------------------------------------- chapter 9: the ViT
@pytest.fixture
def tiny_data(tmp_path, monkeypatch):
    """An empty data/ folder, and the toy ViT images served in place of Fashion-MNIST."""
    import numpy as np
    from toy_vit import tiny_arrays

    from mmtoken.vision import vit_runs as runs

    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path))
    data = tiny_arrays()
    calls = []

    def fake(name, split):
        assert name == "fashion-mnist"
        calls.append(split)
        x, y = data[split]
        return x.numpy(), y.numpy().astype(np.int64)

    monkeypatch.setattr(runs.image_data, "load_images", fake)
    return tmp_path
