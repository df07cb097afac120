"""Invariants behind chapter 2 and the saturation appendix (fast; chapter 1's: ``test_ch01_model.py``)."""

import numpy as np
import pytest
import torch

from mmtoken.attention import grad, instances, long_paths, public_code, smoothness, svm, train
from mmtoken.attention.model import AttentionProblem
from mmtoken.chapters import app_saturation as saturation
from mmtoken.chapters import ch02_global


def test_instance_gmm_fig1_global_closed_form():
    """Only token 2 is active: p = (k0 - k2)/||k0 - k2||^2 = (-0.1, 1)/1.01; token 1 keeps slack."""
    sol = instances.fig1("global").gmm()
    np.testing.assert_allclose(sol.x, np.array([-0.1, 1.0]) / 1.01, atol=1e-7)
    K = instances.fig1("global").K[0]
    assert (K[0] - K[1]) @ sol.x > 1.05


def test_regularization_path_lies_on_sphere_and_improves_with_radius():
    inst = instances.fig1("global")
    pr = inst.problem()
    radii = np.array([1.0, 10.0])
    w0 = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    pts = train.regularization_path(pr, radii, w0, iters=80)
    best = train.best_of_starts(pr, pts).numpy()
    np.testing.assert_allclose(np.linalg.norm(best, axis=-1), radii, rtol=1e-12)
    gmm = inst.gmm().x
    c = (best @ gmm) / (np.linalg.norm(best, axis=-1) * np.linalg.norm(gmm))
    assert c[1] > c[0]


def test_naive_differences_round_to_zero_but_stable_ones_do_not():
    inst = instances.fig1("global")
    pr = inst.problem()
    P = torch.tensor([[[-10.0, 100.0]]], dtype=torch.float64)  # deep in saturation
    s32, f32 = saturation.naive_gap(pr, P, torch.float32)
    s64, f64 = saturation.naive_gap(pr, P, torch.float64)
    assert float(s32) == 0.0 and float(s64) == 0.0
    sat = grad.saturation(pr, P)
    assert float(-sat.u_minus_top[..., 0]) > 0
    # closed form: 1 - s_top = sum of the small probabilities
    z = torch.as_tensor(inst.K[0]) @ P[0, 0]
    small = torch.exp(z[1:] - z[0]).sum()
    assert torch.isclose(sat.log_s[0, 0, 0, 1:].exp().sum(), small / (1 + small), rtol=1e-12)


def test_autograd_run_dtype_argument():
    inst = instances.fig1("global")
    h = public_code.run_instance(inst, steps=3, dtype=torch.float64, record_every=3)
    assert h.p.shape == (2, 6, 2) and h.p.dtype == torch.float64
    step = (h.p[1] - h.p[0]).norm(dim=-1)
    assert torch.all(step <= 0.3 + 1e-12)


# ---------------------------------------------------------------- smoothness (step condition)
def _autograd_loss(K, g):
    return lambda p: torch.nn.functional.softplus(-(torch.softmax(K @ p, -1) * g).sum(-1)).mean()


@pytest.mark.parametrize("case", ["global", "local"])
def test_closed_form_hessian_matches_autograd(case):
    inst = instances.fig1(case)
    K, g = torch.as_tensor(inst.K), torch.as_tensor(inst.gamma)
    P = torch.randn(6, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
    H_auto = torch.stack([torch.func.hessian(_autograd_loss(K, g))(p) for p in P])
    H = smoothness.hessian(inst.problem(), P)
    assert float((H - H_auto).abs().max()) < 1e-13


def test_closed_form_hessian_several_inputs():
    rng = np.random.default_rng(3)
    K, gamma = rng.normal(size=(3, 4, 2)), rng.normal(size=(3, 4))
    P = torch.as_tensor(rng.normal(size=(5, 2)) * 2)
    H_auto = torch.stack([torch.func.hessian(_autograd_loss(torch.as_tensor(K), torch.as_tensor(gamma)))(p) for p in P])
    H = smoothness.hessian(AttentionProblem(K, gamma), P)
    assert float((H - H_auto).abs().max()) < 1e-13


def test_smoothness_bound_dominates_the_hessian():
    rng = np.random.default_rng(4)
    for _ in range(5):
        K, gamma = rng.normal(size=(2, 3, 2)), rng.normal(size=(2, 3))
        bound = smoothness.smoothness_bound(K, gamma)
        top, _ = smoothness.hessian_norm_max(AttentionProblem(K, gamma), 6.0, points=61)
        assert 0 < top <= bound


def test_derivative_bounds_closed_forms():
    d1, d2 = smoothness.derivative_bounds("logistic", -1.0, 2.0)
    assert d1 == pytest.approx(1 / (1 + np.exp(-1.0)))  # sigma(1) at u = -1
    assert d2 == pytest.approx(0.25)  # sigma(0) sigma(0), 0 in the interval
    d1, d2 = smoothness.derivative_bounds("logistic", 0.9, 1.0)
    assert d2 == pytest.approx(np.exp(-0.9) / (1 + np.exp(-0.9)) ** 2)
    assert smoothness.derivative_bounds("correlation", 0.0, 1.0) == (1.0, 0.0)
    with pytest.raises(ValueError, match="lo <= hi"):
        smoothness.derivative_bounds("logistic", 1.0, 0.0)


def test_plain_gd_step_is_below_one_over_L_for_chapters_2_and_3():
    for case in ("global", "local"):
        sm = long_paths.smoothness_of(instances.fig1(case))
        assert sm.step_ok and sm.grid_max <= sm.bound


# ---------------------------------------------------------------- plain GD
def test_compiled_plain_gd_is_plain_gd():
    """train_p(method="gd") through the kernel against p <- p - eta grad L by float64 autograd."""
    inst = instances.fig1("global")
    pr = inst.problem()
    h = train.train_p(pr, inst.starts, steps=200, lr=1.0, method="gd", record_every=200, record_probs=False)
    p = torch.as_tensor(inst.starts)
    for _ in range(200):
        p = p - 1.0 * grad.autograd_grad(pr, p)
    assert float((h.p[-1] - p).abs().max()) < 1e-12


def test_plain_gd_restarts_at_decades_reproduce_one_run():
    inst = instances.fig1("local")
    r = long_paths.plain_gd(inst.problem(), inst.starts, steps=2000)
    h = train.train_p(
        inst.problem(),
        inst.starts,
        steps=2000,
        lr=long_paths.PLAIN_LR,
        method="gd",
        record_every=1000,
        record_probs=False,
    )
    np.testing.assert_allclose(r.p[-1], h.p[-1].numpy(), rtol=0, atol=1e-13)
    assert r.steps[0] == 0 and r.steps[-1] == 2000 and np.all(np.diff(r.steps) > 0)
    for k in (10, 100, 1000):
        assert r.steps[r.at(k)] == k
    with pytest.raises(ValueError, match="not recorded"):
        r.at(1999)


def test_decade_summary_on_known_curves():
    steps = np.array([0, 10, 100, 1000])
    ref = np.array([0.0, 1.0])
    # a path along ref with ||p|| = log10(k): equal increases per decade; correlation 1
    p = np.stack([np.zeros(4), np.log10(np.maximum(steps, 1.0))], -1)[:, None]
    p[0, 0] = (1.0, 0.0)
    s = long_paths.decade_summary(long_paths.PlainRun(steps, p, np.linalg.norm(p, axis=-1), 1.0), ref)
    assert s["log_growth"] and not s["rising"]  # correlation already 1: not rising
    p2 = p.copy()
    p2[-1, 0, 0] = 5.0  # last decade turns away: falls, grows too fast
    s2 = long_paths.decade_summary(long_paths.PlainRun(steps, p2, np.linalg.norm(p2, axis=-1), 1.0), ref)
    assert not s2["rising"] and not s2["log_growth"]


def test_margin_one_scales_a_direction_to_its_smallest_margin():
    """The GMM is its own margin-one vector; e2 on Fig. 1 (global) has margins (1, 1): p_e2 = e2, ||p_e2|| = 1."""
    inst = instances.fig1("global")
    opt = [0]
    gmm = inst.gmm().x
    np.testing.assert_allclose(long_paths.margin_one(inst.K, opt, 3 * gmm), gmm, atol=1e-7)
    np.testing.assert_allclose(long_paths.margin_one(inst.K, opt, [0.0, 2.0]), [0.0, 1.0], atol=1e-15)
    with pytest.raises(ValueError, match="does not select"):
        long_paths.margin_one(inst.K, opt, [0.0, -1.0])


def test_increment_error_is_zero_for_the_predicted_growth_and_sees_another_direction():
    """p(k) = pred log k + c: error 0 against pred; against e2 at margin one, ||pred - e2|| / ||pred||."""
    steps = np.array([0, 10, 100, 1000, 10_000])
    pred = np.array([-0.1, 1.0]) / 1.01
    p = (np.log(np.maximum(steps, 1.0))[:, None] * pred + np.array([0.3, -0.2]))[:, None]
    run = long_paths.PlainRun(steps, p, np.linalg.norm(p, axis=-1), 1.0)
    assert long_paths.increment_error(run, pred)[0] < 1e-12
    e2 = np.array([0.0, 1.0])
    np.testing.assert_allclose(
        long_paths.increment_error(run, e2)[0], np.linalg.norm(pred - e2) / np.linalg.norm(e2), rtol=1e-12
    )


def test_plain_gd_claim_rejects_e2_on_the_increment_alone():
    """A.global.plain_gd's competitor fails on the increment (rate and direction), even with the bars doubled,
    on a synthetic run heading to the GMM at its predicted rate: the direction bar alone would not reject e2."""
    gmm = instances.fig1("global").gmm().x
    e2 = np.array([0.0, 1.0])
    steps = np.array([0, 10, 100, 1000, 10_000])
    p = (np.log(np.maximum(steps, 1.0))[:, None] * gmm)[:, None]
    run = long_paths.PlainRun(steps, p, np.linalg.norm(p, axis=-1), 1.0)
    err_mm, err_e2 = long_paths.increment_error(run, gmm)[0], long_paths.increment_error(run, e2)[0]
    slack = ch02_global.COMPETITOR_SLACK
    assert err_mm <= ch02_global.INC_MAX_ERR and err_mm <= ch02_global.INC_MAX_RATIO * err_e2
    assert err_e2 > slack * ch02_global.INC_MAX_RATIO * err_mm  # the competitor's ratio fails, bars doubled
    assert ch02_global.E2_CORR > ch02_global.PLAIN_MIN_CORR  # while its angle passes the correlation bar


def test_equal_scores_make_p_mm_a_descent_direction():
    """Theorem 2's argument: <grad L(p), p_mm> <= l'(u)(g0 - g')s0(1 - s0) < 0 at every p."""
    rng = np.random.default_rng(5)
    for _ in range(4):
        K = rng.normal(size=(1, 4, 2))
        K[0, 0] = 3 * K[0, 0] / np.linalg.norm(K[0, 0]) + 3.0  # token 0 away from the others: feasible
        gamma = np.array([[1.0, 0.3, 0.3, 0.3]])
        q = svm.att_svm(K, [0]).x
        pr = AttentionProblem(K, gamma)
        P = torch.as_tensor(rng.normal(size=(50, 2)) * 3)
        g = grad.grad_p(pr, P).value().numpy()
        sat = grad.saturation(pr, P)
        s0 = sat.probs.numpy()[:, 0, 0]
        lprime = -1 / (1 + np.exp(sat.u.numpy()[:, 0]))
        assert np.all(g @ q <= lprime * 0.7 * s0 * (1 - s0) + 1e-15)
        assert np.all(g @ q < 0)


def test_stationary_counterexample_against_closed_form():
    """L' = l'(u) u' with l' < 0: p* is the root of u'(p) for u = (e^-p + 0.9 e^p)/(e^-p + 1 + e^p)."""
    from scipy.optimize import brentq

    def du(p):
        a, b, c = np.exp(-p), 1.0, np.exp(p)
        Z = a + b + c
        u = (a + 0.9 * c) / Z
        return (-a + 0.9 * c) / Z - u * (c - a) / Z

    c = ch02_global.stationary_counterexample()
    assert c.p_star == pytest.approx(brentq(du, -1, 1, xtol=1e-15), abs=1e-12)
    assert c.curvature < 0  # a maximum of L
    assert [r.feasible for r in c.reports] == [True, False, True]  # the middle key cannot be separated
    assert c.selected == [0, 2]


# ---------------------------------------------------------------- chapter 2's settings (mmtoken.chapters.ch02_global)
def test_default_settings_are_the_published_ones():
    s = ch02_global.Settings()
    np.testing.assert_array_equal(np.array(s.starts), instances.fig1("global").starts)
    assert ch02_global.settings("quick") == s and s.lr == 0.1 and s.published_steps == 1000
    paper = ch02_global.settings("paper")
    assert (paper.long_steps, paper.long_every, paper.reg_radii, paper.reg_iters) == (200_000, 1000, 17, 1000)
    assert paper.starts == s.starts and paper.plain_steps == 10**6
    with pytest.raises(ValueError, match="scale"):
        ch02_global.settings("huge")


def test_settings_take_any_sequence_of_starts_and_reject_bad_ones():
    given = ch02_global.Settings(starts=[[0, 1], [0, 0.5], [0, 0], [0, -0.5], [0, -1], [0, -1.5]])
    assert given == ch02_global.Settings() and hash(given) == hash(ch02_global.Settings())
    with pytest.raises(ValueError, match="starts"):
        ch02_global.Settings(starts=(1.0, 2.0))
    with pytest.raises(ValueError, match="lr"):
        ch02_global.Settings(lr=0.0)
    with pytest.raises(ValueError, match="published_steps"):
        ch02_global.Settings(long_steps=500)
    with pytest.raises(ValueError, match="scores"):
        ch02_global.CounterSettings(scores=(1.0, 0.0)).arrays()


def test_a_changed_setting_is_cached_under_a_name_of_its_own():
    """The store names the file by the settings' values with their types (issue 42, item 2): another step size is a
    file of its own. The same values typed otherwise (lists, an int step size) are stored as the defaults are
    (issue 44): one file; a float number of steps is refused, not keyed apart."""
    from mmtoken.book import resultcache

    S = ch02_global.Settings
    name = lambda s: resultcache.path_of(ch02_global.CHAPTER, "published", s).name  # noqa: E731
    assert name(S()) == name(S(starts=[list(p) for p in S().starts]))  # the same values: the same file
    assert name(S(lr=1)) == name(S(lr=1.0))
    with pytest.raises(TypeError, match=r"Settings\.published_steps must be an integer"):
        S(published_steps=1000.0)
    assert len({name(S()), name(S(lr=0.5)), name(S(lr=0.2))}) == 3
    assert all(name(s).startswith("published-") for s in (S(), S(lr=0.5)))


def test_run_with_other_settings_uses_them(tmp_path, monkeypatch):
    """Normalized GD adds almost its step to ||p|| once turned: the norm follows the step chosen."""
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    s = ch02_global.Settings(lr=0.5, starts=((3.0, 0.0), (0.0, -3.0)), published_steps=200, long_steps=400, reg_radii=2)
    r = ch02_global.run(s)
    assert r.settings == s and r.published.p.shape == (201, 2, 2) and r.long.steps[-1] == 400
    assert np.all(r.long.norm[-1] <= 3 + 0.5 * 400) and np.all(r.long.norm[-1] >= 0.5 * 400 - 10)
    np.testing.assert_allclose(r.gmm, instances.fig1("global").gmm().x)
    from mmtoken.book import resultcache

    assert resultcache.path_of(ch02_global.CHAPTER, "published", s).is_file()


def test_the_chapters_nnls_gmm_is_the_att_svm():
    """Chapter 2's import-time GMM (NNLS, so that importing the chapter loads no cvxpy) is ATT-SVM's solution."""
    from mmtoken.attention import instances
    from mmtoken.chapters import ch02_global

    np.testing.assert_allclose(ch02_global.GMM, instances.fig1("global").gmm().x, atol=1e-6)
