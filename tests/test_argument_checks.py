"""Function arguments that ran silently wrong are refused by name before any computing (issue 44).

Kinds: a rank outside ``1..d``, a selection of the wrong length, records that do not match their steps, and a
custom loss that borrows a built-in's name where the built-in's formulas would be read.
"""

import dataclasses

import numpy as np
import pytest
import torch

from mmtoken.attention import grad, instances, train
from mmtoken.attention.losses import LOSSES, get_loss
from mmtoken.chapters import ch13_w_vs_kq as ch13
from mmtoken.chapters import ch14_overparam as ch14
from mmtoken.chapters import ch17_mirror as ch17

W = np.random.default_rng(0).normal(size=(4, 4))


@pytest.mark.parametrize("f", [ch13.truncate, ch13.balanced_factors])
@pytest.mark.parametrize(
    "m, words", [(-1, "integer >= 1"), (0, "integer >= 1"), (5, r"rank in 1\.\.d"), (1.5, "integer")]
)
def test_a_rank_outside_one_to_d_is_refused(f, m, words):
    with pytest.raises(ValueError, match=rf"^m must be an? .*{words}"):
        f(W, m)


def test_a_rank_inside_is_the_truncation():
    assert np.linalg.matrix_rank(ch13.truncate(W, 2)) == 2 and ch13.balanced_factors(W, 2).shape == (16,)
    with pytest.raises(ValueError, match="^W must be square"):
        ch13.truncate(np.ones((3, 4)), 1)


@pytest.mark.parametrize("alpha", [[0, 0, 0], [0], [0, 3], [0.5, 1], [True, False]])
def test_a_selection_of_the_wrong_length_or_values_is_refused(alpha):
    K = np.random.default_rng(1).normal(size=(2, 3, 2))
    with pytest.raises(ValueError, match="^alpha must"):
        ch14.selection_feasible(K, alpha)


def test_records_that_do_not_match_their_steps_are_refused():
    steps, err = np.array([1, 10, 100]), np.array([1.0, 0.1, 0.01])
    assert ch17.slope(steps, err, 5) == pytest.approx(-1.0)
    for args, name in (
        ((steps, err[:2], 5), "err"),  # fewer records than steps
        ((steps, err, 100), "start"),  # no later record
        ((steps, err, 0), "start"),
        ((steps[::-1], err, 5), "steps"),
    ):
        with pytest.raises(ValueError, match=f"^{name} must"):
            ch17.slope(*args)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_a_custom_loss_named_like_a_built_in_is_not_read_as_the_built_in(name):
    look_alike = dataclasses.replace(get_loss(name), value=lambda u: 2 * get_loss(name).value(u))
    problem = instances.fig1("global").problem()
    with pytest.raises(ValueError, match="^method 'polyak' needs L - L\\* .*built-in"):
        train.train_p(problem, np.zeros(2), steps=1, method="polyak", loss=look_alike)
    with pytest.raises(ValueError, match="^loss must be one of the built-in losses"):
        grad.log_excess(problem, torch.zeros(2, dtype=torch.float64), look_alike)
    assert torch.isfinite(train.train_p(problem, np.zeros(2), steps=2, method="polyak", loss=name).p[-1]).all()
