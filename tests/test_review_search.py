"""mmtoken.embeddings.review_search: the coordinate search on the validation split."""

from __future__ import annotations

import pytest
from toy_reviews import TINY, toy_dataset

from mmtoken.embeddings import review_search

pytestmark = pytest.mark.usefixtures("review_data_dir")


def test_search_chooses_the_best_validation_trial(monkeypatch):
    ds = toy_dataset()
    monkeypatch.setitem(review_search.MAX_EPOCHS, "toy", 3)
    grid = dict(
        review_search.GRID,
        lr=(0.01, 0.1),
        init_std=(0.1,),
        d=(16,),
        warmup=(0,),
        min_count={"toy": (2,)},
        max_len={"toy": (24,)},
        lr_v=(0.03,),
        lr_uniform=(0.1,),
        bow_C=(0.1, 1.0),
    )
    monkeypatch.setattr(review_search, "GRID", grid)
    chosen, records = review_search.search(TINY, ds)
    lr_trials = {r["value"]: r for r in records if r["factor"] == "lr"}
    best = max(lr_trials.values(), key=lambda r: r["best"])
    assert chosen.lr == best["value"] and chosen.epochs == best["best_epoch"]
    assert all(len(r["val_accuracy"]) == 3 for r in records if r["run"] != "bow")
    bows = {r["value"]: r["best"] for r in records if r["factor"] == "bow_C"}
    assert chosen.bow_C == max(bows, key=lambda c: (bows[c], -list(bows).index(c)))


def test_the_search_is_keyed_by_its_start_grid_and_data(monkeypatch):
    """``search_result`` names the search ``<data set>/search``, keyed by its start, the grid, the epochs tried, the
    validation split and seed, and the code of :func:`search`; a changed grid is another result."""
    ds = toy_dataset()
    key = review_search.search_result("rt", ds)
    assert key.name == "rt/search" and key.code == (review_search.search,) and key.data == ds.fingerprint
    assert key.config["start"] == review_search.START["rt"] and key.config["grid"] == review_search.GRID
    monkeypatch.setattr(review_search, "GRID", dict(review_search.GRID, bow_C=(1.0,)))
    assert review_search.search_result("rt", ds).config != key.config
    with pytest.raises(ValueError, match="dataset"):
        review_search.search_result("sst2", ds)
    with pytest.raises(ValueError, match="dataset"):
        review_search.cached_search("sst2")
