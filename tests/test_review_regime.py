"""mmtoken.embeddings.review_regime: the control data drawn from paper B's data model."""

from __future__ import annotations

import numpy as np
import pytest
from toy_reviews import TINY, toy_dataset

from mmtoken.embeddings import review_regime, review_runs

pytestmark = pytest.mark.usefixtures("review_data_dir")


def test_regime_control_is_drawn_from_the_data_model():
    ds = toy_dataset()
    data = review_runs.prepare(TINY, ds)
    monkey = dict(review_regime.CONTROL, n_pos=3, n_neg=3, T=12)
    old = review_regime.CONTROL
    review_regime.CONTROL = monkey
    try:
        ctl = review_regime.control_data(data, seed=1)
    finally:
        review_regime.CONTROL = old
    assert ctl.V == data.V and ctl.fit.size == data.fit.size and ctl.evaluation.size == data.evaluation.size
    polar = ctl.stats.count[1:7] > 0
    assert np.all(np.abs(ctl.stats.delta[1:7][polar]) == 1)  # completely positive / negative tokens


def test_small_initialisation_is_chapter_11s_scale_with_a_one_over_margin_budget():
    import math

    big, small = review_regime.REGIME, review_regime.SMALL
    # REGIME is a large initialisation: row norm 0.1 sqrt(2048) = 4.5, above chapter 11's sweep
    assert review_regime.ROW_NORM == pytest.approx(0.1 * math.sqrt(2048))
    assert review_regime.ROW_NORM > 0.5
    assert small.small_std * math.sqrt(small.d) == pytest.approx(review_regime.SIGMA0_SMALL)
    # the budget scales as 1 / sigma0 (the margin is proportional to sigma0), rounded up to a multiple of 100
    ratio = review_regime.ROW_NORM / review_regime.SIGMA0_SMALL
    assert big.p2_steps * ratio <= small.p2_steps < big.p2_steps * ratio + 100
    assert small.p2_steps % 100 == 0
    # nothing else changes
    assert {k: v for k, v in vars(small).items() if k not in ("small_std", "p2_steps")} == {
        k: v for k, v in vars(big).items() if k not in ("small_std", "p2_steps")
    }


def test_cached_rejects_an_unknown_run():
    with pytest.raises(ValueError, match="which"):
        review_regime.cached(10, "other", small=True)


def test_each_run_of_the_protocol_has_its_own_name_and_key():
    """``regime_result`` names a run by what it runs on, its initialisation, seed and budget; the control's key covers
    the data model's sizes and the code that draws it, the reviews' does not; ``regime_setup`` is the setup it keys."""
    ds = toy_dataset()
    reviews = review_regime.regime_result(10, ds=ds)
    assert reviews.name == "rt/reviews-regime10" and reviews.data == ds.fingerprint
    assert reviews.config == {"setup": review_regime.REGIME, "seed": 10}
    assert reviews.code == (review_regime.run, review_runs.prepare)
    control = review_regime.regime_result(11, "control", steps=300, small=True, ds=ds)
    assert control.name == "rt/control-small11-300" and control.code[-1] is review_regime.control_data
    assert control.config["control"] == review_regime.CONTROL
    assert control.config["setup"] == review_regime.regime_setup(300, small=True)
    assert review_regime.regime_setup(300, small=True).p2_steps == 300
    assert review_regime.regime_setup(small=True) == review_regime.SMALL
    with pytest.raises(ValueError, match="which"):
        review_regime.regime_result(10, "other", ds=ds)
