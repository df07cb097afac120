"""mmtoken.embeddings.review_phase_two: the saturation-safe logit gradient, phase two on the data model, selection
conflicts, the optimal and attended tokens."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from toy_reviews import TINY, toy_dataset

from mmtoken.attention import grad
from mmtoken.embeddings import embedding, review_model, review_phase_two, review_runs, review_seeds

pytestmark = pytest.mark.usefixtures("review_data_dir")


@pytest.mark.parametrize("scale", [0.5, 40.0])
def test_logit_gradient_is_grad_p_of_the_cls_problem(scale):
    """The gathered, saturation-safe gradient equals mmtoken.attention.grad.grad_p on the materialised keys E_{x_it},
    unsaturated and deep in saturation (where plain autograd loses the direction)."""
    V, d = 9, 12
    g = torch.Generator().manual_seed(3)
    E = torch.randn(V, d, generator=g, dtype=torch.float64)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    p = scale * torch.randn(d, generator=g, dtype=torch.float64)
    tokens = torch.randint(1, V, (30, 6), generator=g)
    tokens[::3, 4:] = 0
    y = torch.where(torch.arange(30) % 2 == 0, 1.0, -1.0).double()
    data = review_model.Chunks.build(tokens.numpy(), y.numpy(), size=7, dtype=torch.float64)
    ga, log_scale, loss, _ = review_phase_two.logit_gradient(E @ p, E @ v, data)
    gp = E.T @ ga
    problem = embedding.cls_problem(E, v, tokens, y, tokens != 0)
    ref = grad.grad_p(problem, p)
    assert torch.allclose(gp / gp.norm(), ref.direction, atol=1e-10)
    assert np.isclose(log_scale + float(torch.log(gp.norm())), float(ref.log_norm), atol=1e-9)
    assert np.isclose(loss, float(grad.loss_value(problem, p)), rtol=1e-12)


def test_phase_two_descends_and_selects_on_the_data_model():
    """With d >= |V| and sequences from the data model, phase two ends on the important token of every review."""
    ds = toy_dataset(n_train=200, n_test=60)
    s = dataclasses.replace(TINY, d=64, small_std=0.1, p2_steps=300)
    data = review_runs.prepare(s, ds)
    top = torch.as_tensor(review_model.top_decile(data.stats.count, data.stats.delta, 1))
    v, E_small, _ = review_runs.init(s, data.V, 10)
    m, arrays = review_seeds.two_phase(s, data, v, E_small, top, conflicts=True)
    h, tp = m["phase_two"], m["two_phase"]
    assert all(b <= a for a, b in zip(h["loss"], h["loss"][1:]))  # monotone: rejected steps are not taken
    assert tp["attends_optimal"] == 1.0 and tp["accuracy"] >= 0.95 and tp["attended_conflicts"]["feasible"]
    assert tp["unsaturated"] < 1e-6 and tp["p_norm"] > 10
    assert m["one_step"]["closed_form_error"] < 1e-12
    with pytest.raises(ValueError, match="steps"):
        review_phase_two.phase_two(torch.eye(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64), None, steps=0)


def test_phase_two_records_its_stopping_step_in_every_history():
    """A run that stops on the loss-change rule between two recorded steps ends every history at that step, with
    the values of the returned ``p`` (before, only ``steps`` gained the entry)."""
    g = torch.Generator().manual_seed(5)
    E = torch.randn(9, 12, generator=g, dtype=torch.float64)
    v = torch.randn(12, generator=g, dtype=torch.float64)
    tokens = torch.randint(1, 9, (30, 6), generator=g)
    y = torch.where(torch.arange(30) % 2 == 0, 1.0, -1.0).double()
    data = review_model.Chunks.build(tokens.numpy(), y.numpy(), size=7, dtype=torch.float64)
    ph = review_phase_two.phase_two(E, v, data, steps=500, tol=1e-2, window=3, record_every=7)
    assert ph.stop == "converged" and ph.steps[-1] % 7 != 0  # stopped between two records: the case at stake
    n = len(ph.steps)
    assert all(len(h) == n for h in (ph.loss, ph.p_norm, ph.step_size, ph.grad_log_norm, ph.unsaturated))
    assert np.isclose(ph.p_norm[-1], float(ph.p.norm()), rtol=1e-12)
    assert np.isclose(ph.loss[-1], review_phase_two.logit_gradient(E @ ph.p, E @ v, data)[2], rtol=1e-12)


def test_selection_conflicts_find_cycles():
    # review 0 chooses 1 over 2, review 1 chooses 2 over 1: a two-cycle; review 2 chooses 3 over 4: fine
    tokens = np.array([[1, 2, 0], [2, 1, 1], [3, 4, 0]])
    r = review_phase_two.selection_conflicts(tokens, np.array([1, 2, 3]), 5)
    assert not r["feasible"] and r["two_cycles"] == 1 and r["example"] == (1, 2)
    assert r["example_counts"] == (1, 1) and np.isclose(r["conflicted"], 2 / 3) and r["largest"] == 2
    ok = review_phase_two.selection_conflicts(tokens, np.array([1, 1, 3]), 5)
    assert ok["feasible"] and ok["two_cycles"] == 0 and ok["conflicted"] == 0
    # a longer cycle without any two-cycle: 1 > 2, 2 > 3, 3 > 1
    cyc = review_phase_two.selection_conflicts(np.array([[1, 2], [2, 3], [3, 1]]), np.array([1, 2, 3]), 4)
    assert not cyc["feasible"] and cyc["two_cycles"] == 0 and cyc["largest"] == 3


def test_top_tokens_optimal_and_attended():
    tokens = np.array([[1, 2, 3], [1, 2, 0]])
    data = review_model.Chunks.build(tokens, np.array([1, -1]), dtype=torch.float64)
    b = torch.tensor([0.0, 0.5, -2.0, 0.1], dtype=torch.float64)
    assert review_phase_two.top_tokens(b, data, labels=True).tolist() == [1, 2]  # y_i b_s largest
    assert review_phase_two.top_tokens(b, data).tolist() == [1, 1]
