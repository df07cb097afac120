"""Rates of plain GD, normalized GD and the Polyak step (chapter 16, mmtoken.chapters.ch16_rates)."""

import numpy as np
import pytest
import torch

from mmtoken import config
from mmtoken.attention import instances
from mmtoken.attention.model import AttentionProblem
from mmtoken.book import ledger
from mmtoken.chapters import ch16_rates as rt

SMALL = rt.Settings(ngd_steps=2000, ps_steps=2000, plain_steps=10_000, every=10)


@pytest.fixture(scope="module")
def small():
    with config.deterministic():
        return {"global": rt.fig1_case("global", SMALL), "local": rt.fig1_case("local", SMALL)}


def test_one_minus_corr_closed_form_and_tiny_angles():
    for theta in (1.0, 1e-3, 1e-7):
        a, b = np.array([1.0, 0.0]), np.array([np.cos(theta), np.sin(theta)]) * 7.0
        exact = 2 * np.sin(theta / 2) ** 2
        assert abs(rt.one_minus_corr(a, b) - exact) <= 1e-12 * exact
    assert abs(rt.one_minus_corr(np.array([1.0, 2.0]), np.array([2.0, 4.0]))) < 1e-30


def test_log_mass_matches_softmax_and_survives_underflow():
    K = np.array([[[[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]]])  # (1, 1, 3, 2)
    gamma = np.array([[[1.0, 0.0, 0.0]]])
    problem = AttentionProblem(K, gamma)
    P = np.array([[[0.3, -0.2]], [[2.0, 1.0]]])  # (S=2, 1, 2)
    logits = np.einsum("tm,sbm->sbt", K[0, 0], P)
    s = np.exp(logits - logits.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    np.testing.assert_allclose(rt.log_mass(problem, P, np.zeros((1, 1), int)), np.log(1 - s[..., 0]), rtol=1e-12)
    far = np.array([[[2000.0, -1000.0]]])  # mass e^-2000 + e^-3000: underflows, its log does not
    np.testing.assert_allclose(rt.log_mass(problem, far, np.zeros((1, 1), int)), -2000.0, rtol=1e-12)


def test_slope_is_exact_on_lines():
    x = np.arange(10.0)
    y = np.stack([3 * x + 1, -0.5 * x], -1)
    np.testing.assert_allclose(rt.slope(x, y), [3.0, -0.5])


def test_equal_scores_setting():
    K, gamma = rt.equal_scores((0, 1, 2), T=4, d=4, low=0.0)
    assert K.shape == (3, 1, 4, 4) and gamma.shape == (3, 1, 4)
    np.testing.assert_array_equal(np.sort(gamma, -1)[..., -1], 1.0)
    np.testing.assert_array_equal(np.sort(gamma, -1)[..., :-1], 0.0)
    r = instances.random_instances(1, 1, 4, 4, seed=1)
    assert gamma[1, 0].argmax() == r["gamma"][0, 0].argmax()
    np.testing.assert_array_equal(K[1], r["K"][0])


def test_rates_on_fig1_short_runs(small):
    c = small["global"]
    nmm = np.linalg.norm(instances.fig1("global").gmm().x)
    ngd, ps, plain = (c.rates[m].measures() for m in ("ngd", "ps", "plain"))
    np.testing.assert_allclose(c.rates["ngd"].p_norm_mm, nmm, rtol=1e-6)
    np.testing.assert_allclose(ngd["growth_k"], SMALL.ngd_lr / nmm, rtol=1e-3)  # ||p|| = eta k
    np.testing.assert_allclose(ngd["mass_ratio"], 1.0, rtol=1e-4)
    np.testing.assert_allclose(ps["growth_k"], 1.0, rtol=1e-4)  # one support token: the step is ||p^mm||
    np.testing.assert_allclose(ps["mass_semilog"], -1.0, rtol=1e-4)
    assert (ngd["dir_slope"] < -1.9).all() and (plain["dir_slope"] > -1.0).all()  # short run: still far from -2
    assert (np.abs(plain["mass_loglog"] + 1) < 0.5).all()  # 1/k, still settling after 10^4 steps


def test_checks_pass_the_method_and_reject_the_competitor(small):
    c = small["global"]
    assert rt.direction_check(c.rates["ngd"]).passed
    assert not rt.direction_check(c.rates["plain"]).passed
    assert rt.sparsify_check(c.rates["ngd"]).passed
    assert not rt.sparsify_check(c.rates["plain"]).passed
    assert rt.polyak_check(c.rates["ps"]).passed
    assert not rt.polyak_check(c.rates["ngd"]).passed
    assert not rt.plain_log_check(c.rates["ngd"], c.inv_smoothness).passed
    assert not rt.plain_log_check(c.rates["plain"], np.array([0.1])).passed  # a step above 1/L_p fails


def test_local_check_and_its_competitor(small):
    c = small["local"]
    m = rt.local_check(c.rates["ngd"], c.rates["ps"])
    assert m.passed, m.value
    assert m.value["starts to the local token"] == 2 and m.value["PS non-finite from those"] == 2
    assert not rt.local_check(rt.against_global(c.rates["ngd"]), c.rates["ps"]).passed
    # PS marked finite everywhere (a wrong record) fails the iff
    fake = rt.Rates(**{**c.rates["ps"].__dict__, "finite": np.ones_like(c.rates["ps"].finite)})
    assert not rt.local_check(c.rates["ngd"], fake).passed


def test_w_instances_are_chapter_13s_draws():
    a = rt.w_instances(range(3), (4, 4, 6))
    data = rt.tfsvm.random_instances(3, 4, 4, 6, seed=0)
    b = rt.tfsvm.w_problem(data["X"], data["Y"], data["v"], data["Z"])
    np.testing.assert_array_equal(a.K.numpy(), b.K.numpy())
    np.testing.assert_array_equal(a.gamma.numpy(), b.gamma.numpy())


def test_w_check_passes_ngd_and_rejects_plain_gd_by_the_margin():
    """D.rate.w_ngd on one W instance: NGD passes, plain GD (10^5 steps) fails and is rejected by the margin."""
    s = rt.Settings(ngd_steps=2000, ps_steps=2000, every=10, w_plain_steps=100_000)
    with config.deterministic():
        c = rt.w_case("W", (0,), s, methods=("plain", "ngd"))
    ngd, plain = rt.w_check(c.rates["ngd"]), rt.w_against(c.rates["plain"])
    assert ngd.passed, ngd.value
    assert rt.w_against(c.rates["ngd"]).passed  # NGD itself is not rejected
    assert not plain.passed, plain.value
    assert plain.value["steepest run above the bar by"] >= rt.W_PLAIN_MARGIN
    # a competitor that fails the bar, but by less than the margin, is not counted as rejected
    q = c.rates["plain"]
    k = q.steps.astype(float)
    close = np.where(k > 0, k, 1.0) ** (-rt.NGD_SLOPE + rt.W_PLAIN_MARGIN / 2)
    fake = rt.Rates(**{**q.__dict__, "omc": np.broadcast_to(close[:, None, None], q.omc.shape).copy()})
    m = rt.w_against(fake)
    assert not rt.w_check(fake).passed and m.passed, m.value


def test_claims_registered_with_competitors():
    ids = {c.id: c for c in ledger.select(["D.rate"])}
    assert set(ids) == {
        "D.rate.ngd_direction",
        "D.rate.sparsify",
        "D.rate.polyak",
        "D.rate.plain_log",
        "D.rate.local",
        "D.rate.w_ngd",
    }
    for c in ids.values():
        assert c.kind == "observation" and c.competitor.strip() and callable(c.against)
    assert ids["D.rate.polyak"].known_miss


@pytest.mark.slow
def test_competitors_fail_at_quick_scale():
    with config.use_scale("quick"), torch.inference_mode():
        for c in ledger.select(["D.rate"]):
            m = c.against()
            assert not m.passed, (c.id, m.value)
