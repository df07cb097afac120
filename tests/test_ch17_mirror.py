"""Mirror descent and the l_q Att-SVM (chapter 17, mmtoken.chapters.ch17_mirror)."""

import numpy as np
import pytest

from mmtoken import config
from mmtoken.attention import instances
from mmtoken.book import ledger
from mmtoken.chapters import ch17_mirror as md


def test_lq_classify_local_global_and_infeasible():
    loc = instances.fig1("local")
    for q in (1.5, 3.0):
        c1 = md.lq_classify(loc.K, loc.gamma, [1], q)
        assert c1["feasible"] and c1["local"] and not c1["global"]
        c0 = md.lq_classify(loc.K, loc.gamma, [0], q)
        assert c0["feasible"] and c0["local"] and c0["global"]
    K = np.array([[[-1.0], [0.0], [1.0]]])
    bad = md.lq_classify(K, np.array([[0.0, 1.0, 0.0]]), [1], 1.5)
    assert not bad["feasible"] and not bad["local"] and bad["global"]


def test_lq_classify_rejects_a_support_row_that_scores_higher():
    """Token 0 of Fig. 1's keys: its l_1.5 support row is token 2's; give token 2 the top score."""
    K = instances.fig1("global").K
    c = md.lq_classify(K, np.array([[0.5, 0.0, 1.0]]), [0], 1.5)
    assert c["feasible"] and c["support"] == [(0, 2)] and not c["local"]
    # a non-support row scoring higher does not matter
    c = md.lq_classify(K, np.array([[0.5, 1.0, 0.0]]), [0], 1.5)
    assert c["local"] and not c["global"]


def test_slope_of_a_power_law():
    k = np.arange(100, 20_001, 100)
    err = np.stack([3.0 / k, 5.0 * k**-2.0], -1)
    np.testing.assert_allclose(md.slope(k, err, 1000), [-1.0, -2.0])


def test_instances_of_the_theorem_and_the_draws():
    D = md.theorem_instances((10, 11, 12))
    assert D["K"].shape == (3, 1, 4, 4)
    assert (D["gamma"][:, 0, 1:] == 0).all() and (D["gamma"][:, 0, 0] == 1).all()
    np.testing.assert_array_equal(D["K"][1], instances.random_instances(1, 1, 4, 4, 11)["K"][0])
    s = md.Settings(seeds=(10, 11), per_seed=3)
    d = md.draws(s)
    assert d["K"].shape == (6, 3, 4, 4) and d["gamma"].shape == (6, 3, 4)
    assert not set(md.Settings().seeds) & set(range(5))  # judged seeds are not the trial's
    assert not set(md.Settings().theorem_seeds) & set(range(5))


def fake_random(q, lq_final, l2_final, kept=12):
    R, I = 3, kept
    steps = np.array([0, md.RATE_FROM, md.Settings().steps])
    corr = lambda end: np.stack([np.full(I, 0.5), np.full(I, 0.9), np.full(I, end)])
    on = np.ones(I, bool)
    return md.RandomRun(
        q, I, steps, on, on, on, on, np.full(I, 0.98), on, corr(lq_final), corr(l2_final), corr(0.95)[:R]
    )


def fake_result(runs: dict) -> "md.Result":
    return md.Result(md.Settings(qs=tuple(runs)), runs)


def test_direction_check_rejects_the_euclidean_svm():
    res = fake_result({1.5: fake_random(1.5, 0.99999, 0.98), 3.0: fake_random(3.0, 0.999, 0.98)})
    assert md.direction_check("lq", res).passed
    assert not md.direction_check("l2", res).passed
    few = fake_result({1.5: fake_random(1.5, 0.99999, 0.98, kept=md.MIN_KEPT - 1), 3.0: res.runs[3.0]})
    assert not md.direction_check("lq", few).passed
    close = fake_result({1.5: fake_random(1.5, 0.99999, 0.9999), 3.0: res.runs[3.0]})
    assert not md.direction_check("lq", close).passed  # no lead over the Euclidean SVM


def test_rate_check_rejects_a_flat_curve():
    res = fake_result({q: fake_random(q, 0.9999, 0.98) for q in (1.5, 3.0)})
    assert md.rate_check("normalized", res).passed  # 0.1 -> 1e-4 over 1000 -> 16000: slope < -2
    assert not md.rate_check("plain", res).passed  # 0.1 -> 0.05: slope -0.25


def fake_theorem(end_lq, end_l2):
    steps = np.array([0, 100_000, 1_000_000])
    c = lambda end: np.stack([np.zeros(4), np.full(4, 0.9), np.asarray(end, float)])
    return md.TheoremRun(1.5, steps, c(end_lq), c(end_l2), np.ones(4, bool), np.ones(4, bool), True)


def test_theorem_check_needs_hypotheses_and_rising_correlation():
    good = {1.5: fake_theorem([0.99] * 4, [0.9, 0.85, 0.9, 0.89])}
    assert md.theorem_check("lq", good).passed
    assert not md.theorem_check("l2", good).passed
    bad = fake_theorem([0.99] * 4, [0.9] * 4)
    bad.descent[2] = False
    assert not md.theorem_check("lq", {1.5: bad}).passed


def test_plane_directions_differ_and_fig1_check_rejects_the_euclidean_direction():
    pl = md.plane(md.Settings(steps=4000))
    u = dict(zip(pl.qs, pl.svm))
    assert np.degrees(np.arccos(u[1.5] @ u[3.0])) > md.FIG1_ANGLE
    np.testing.assert_allclose(u[1.0], [0.0, 1.0], atol=1e-6)  # the l_1 vertex
    assert not md.fig1_check("l2", pl).passed


D_MD = [c for c in ledger.select(["D.md"])]


def test_every_claim_names_a_competitor():
    assert len(D_MD) == 4
    for c in D_MD:
        assert c.competitor.strip() and callable(c.against), c.id
    assert {c.id: c.kind for c in D_MD}["D.md.theorem"] == "theorem"


@pytest.mark.slow
@pytest.mark.parametrize("c", D_MD, ids=[c.id for c in D_MD])
def test_competitor_fails_the_claims_check(c):
    with config.use_scale("quick"):
        m = c.against()
    assert isinstance(m, ledger.Measured), c.id
    assert not m.passed, f"{c.id}: the competitor ({c.competitor}) passes the claim's check: {m.value}"
