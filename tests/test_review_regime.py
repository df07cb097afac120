"""mmtoken.review_regime: the control data drawn from paper B's data model."""

from __future__ import annotations

import numpy as np
import pytest
from toy_reviews import TINY, toy_dataset

from mmtoken import review_regime, review_runs

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
