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
    assert not set(md.Settings().theorem_seeds) & (set(md.TRIAL_SEEDS) | set(md.DESIGN_SEEDS))


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


def fake_path(err_lq, apart, slack=1.0, kkt=1e-12):
    radii = np.array([10.0, 100.0, 1000.0])
    err_lq = np.asarray(err_lq, float)
    I = len(err_lq)
    grid = lambda end: np.stack([np.full(I, 0.1), np.full(I, 0.01), np.asarray(end, float)])
    apart = np.asarray(apart, float)
    return md.PathRun(
        1.5,
        radii,
        grid(err_lq),
        grid(apart),
        np.full((3, I), slack),
        np.full((3, I), kkt),
        apart,
        np.ones(I, bool),
        True,
    )


def test_path_check_rejects_the_euclidean_svm_and_needs_the_bound():
    n = md.PATH_MIN_APART
    good = {1.5: fake_path([md.PATH_BAR / 10] * n, [md.PATH_APART * 2] * n)}
    assert md.path_check("lq", good).passed
    assert not md.path_check("l2", good).passed  # the Euclidean SVM is PATH_APART away on each
    assert not md.path_check("lq", {1.5: fake_path([md.PATH_BAR * 2] * n, [0.01] * n)}).passed
    assert not md.path_check("lq", {1.5: fake_path([md.PATH_BAR / 10] * n, [0.01] * n, slack=-0.1)}).passed
    assert not md.path_check("lq", {1.5: fake_path([md.PATH_BAR / 10] * n, [0.01] * n, kkt=1e-3)}).passed
    close = {1.5: fake_path([md.PATH_BAR / 10] * n, [md.PATH_APART / 2] * n)}  # SVMs too close to tell apart
    assert not md.path_check("lq", close).passed


def test_psi_path_point_is_on_the_sphere_and_turns_to_the_lq_svm():
    K = md.theorem_instances((0,))["K"][0]
    sol = md.svm_lq.lq_att_svm(K, [0], 1.5)
    x, resid = md.psi_path(sol.D, 1.5, 1000.0)
    assert resid < md.PATH_KKT_TOL
    np.testing.assert_allclose(md.svm_lq.lq_norm(x, 1.5), 1000.0, rtol=1e-9)
    assert 1 - md.geometry.correlation(x, sol.x) < 1e-5
    assert (sol.D @ x).min() >= 1000.0 / sol.norm - np.log(len(sol.D))  # the theorem's margin bound


def fake_theorem(ext_lq, ext_l2, apart):
    steps = np.array([0, 100_000, 1_000_000])
    I = len(ext_lq)
    c = np.stack([np.zeros(I), np.full(I, 0.9), np.full(I, 0.95)])
    on = np.ones(I, bool)
    f = lambda x: np.asarray(x, float)
    return md.TheoremRun(1.5, steps, c, c, on, on.copy(), True, f(ext_lq), f(ext_l2), f(apart))


def test_plain_check_needs_hypotheses_and_a_ratio():
    n = md.MD_MIN_KEPT
    good = fake_theorem([1e-3] * n, [1e-2] * n, [0.02] * n)
    assert md.plain_check("lq", {1.5: good}).passed
    assert not md.plain_check("l2", {1.5: good}).passed
    bad = fake_theorem([1e-3] * n, [1e-2] * n, [0.02] * n)
    bad.descent[0] = False
    assert not md.plain_check("lq", {1.5: bad}).passed
    few = fake_theorem([1e-3] * n, [1e-2] * n, [0.02] * (n - 1) + [md.MD_APART / 2])
    assert not md.plain_check("lq", {1.5: few}).passed
    np.testing.assert_allclose(
        md.extrapolate(np.array([10, 100]), np.array([[[1.0, 0.0]], [[1.0, 0.0]]]), 100), [[1.0, 0.0]]
    )


def test_extrapolate_recovers_a_one_over_log_k_law():
    steps = np.array([1, 10_000, 100_000, 1_000_000])
    u, c = np.array([0.6, 0.8]), np.array([0.8, -0.6])
    P = np.stack([u + c / np.log(max(k, 2)) for k in steps])[:, None]  # (R, 1, 2), not unit: normalised inside
    e = md.extrapolate(steps, P, 1_000_000)
    assert 1 - e[0] @ u < 1e-3 < 1 - md.unit(P[-1, 0]) @ u


def test_plane_directions_differ_and_fig1_check_rejects_the_euclidean_direction():
    pl = md.plane(md.Settings(steps=4000))
    u = dict(zip(pl.qs, pl.svm))
    assert np.degrees(np.arccos(u[1.5] @ u[3.0])) > md.FIG1_ANGLE
    np.testing.assert_allclose(u[1.0], [0.0, 1.0], atol=1e-6)  # the l_1 vertex
    assert not md.fig1_check("l2", pl).passed


D_MD = [c for c in ledger.select(["D.md"])]


def test_every_claim_names_a_competitor():
    assert len(D_MD) == 5
    for c in D_MD:
        assert c.competitor.strip() and callable(c.against), c.id
    kinds = {c.id: c.kind for c in D_MD}
    assert kinds["D.md.theorem"] == "theorem" and kinds["D.md.plain"] == "observation"


@pytest.mark.slow
@pytest.mark.parametrize("c", D_MD, ids=[c.id for c in D_MD])
def test_competitor_fails_the_claims_check(c):
    with config.use_scale("quick"):
        m = c.against()
    assert isinstance(m, ledger.Measured), c.id
    assert not m.passed, f"{c.id}: the competitor ({c.competitor}) passes the claim's check: {m.value}"
