"""Chapters 5-8 of part I: joint training, nonlinear heads, losses, random instances."""

import numpy as np
import pytest
import torch

from mmtoken.attention import geometry, grad, instances, losses, random_batch, svm, train
from mmtoken.attention.model import AttentionProblem
from mmtoken.chapters import ch05_joint as joint
from mmtoken.chapters import ch06_nonlinear as nh
from mmtoken.chapters import ch07_losses as loss_shapes
from mmtoken.chapters import ch08_random


# ---------------------------------------------------------------- joint (chapter 5)
def test_fig3_svms_closed_forms():
    r = instances.fig3("loose")
    alpha = np.ones(3, int)
    head = svm.head_svm(r.X, r.Y, alpha)
    assert np.allclose(head.x, [0.0, 1.0], atol=1e-6)
    assert svm.head_support(head) == [0, 1]  # x_3 = (0.5, 1.5) has margin 1.5
    assert np.allclose(svm.att_svm(r.K, alpha).x, [1.25, 0.25], atol=1e-6)
    assert np.allclose(svm.relaxed_att_svm(r.K, alpha, [0, 1]).x, [1.0, 0.0], atol=1e-6)


def test_short_joint_run_separates_the_two_predictions():
    r = joint.joint_run("loose", joint.Settings(steps=300, every=100))
    assert r.alpha.tolist() == [1, 1, 1] and r.gd_alpha.tolist() == [1, 1, 1]
    assert r.corr_p_relax[-1] > 0.999 > r.corr_p_mm[-1]
    assert r.p.shape == (4, 2) and r.probs.shape == (4, 3, 2)


def test_settings_follow_the_scale_and_refuse_an_unknown_one():
    assert joint.settings("quick") == joint.Settings()
    paper = joint.settings("paper")
    assert (paper.steps, paper.every, paper.iters, paper.R_max, paper.n_radii) == (10_000, 10, 2000, 256.0, 9)
    with pytest.raises(ValueError, match="scale"):
        joint.settings("huge")


def test_joint_run_starts_from_the_settings_v0():
    a = joint.joint_run("loose", joint.Settings(steps=50, every=50))
    b = joint.joint_run("loose", joint.Settings(steps=50, every=50, v0=(1.0, 0.0)))
    assert np.allclose(a.v[0], [-1.0, 0.0]) and np.allclose(b.v[0], [1.0, 0.0])
    assert not np.allclose(a.v[-1], b.v[-1])
    with pytest.raises(ValueError, match="k"):
        joint.start_pairs(0)


def test_joint_reference_is_fixed_from_the_head_margins():
    ref = joint.joint_reference(instances.fig3("loose").X, instances.fig3("loose").Y)
    feasible = [a for a, m in ref.margins if m is not None]
    assert feasible == [(1, 1, 1)]  # a zero token has label margin 0
    assert ref.support == [0, 1] and np.allclose(ref.excess, [0.0, 0.0, 0.5])
    assert np.allclose(ref.p_relax, [1.0, 0.0], atol=1e-6) and np.allclose(ref.p_mm, [1.25, 0.25], atol=1e-6)
    tight = joint.joint_reference(instances.fig3("tight").X, instances.fig3("tight").Y)
    assert tight.all_support and np.allclose(tight.p_mm, tight.p_relax, atol=1e-6)


def test_joint_reference_refuses_a_tie():
    X = np.array([[[1.0, 0.0], [1.0, 0.0]], [[-1.0, 0.0], [0.0, 3.0]]])  # input 0: two identical tokens
    with pytest.raises(ValueError, match="more than one selection"):
        joint.joint_reference(X, np.array([1.0, -1.0]))


def test_limit_direction_closed_forms():
    inst = instances.fig3("loose")
    ref = joint.reference("loose")
    lim = lambda rho: joint.limit_direction(inst.K, ref.alpha, ref.support, ref.excess, rho)
    for rho in (1.0, 3.0):  # rho >= rho* = 1: the relaxed SVM
        assert geometry.correlation(lim(rho), ref.p_relax) > 1 - 1e-7
    assert geometry.correlation(lim(0.0), ref.p_mm) > 1 - 1e-7
    b = lim(0.25)  # in between: the active pair of p_mm, input 3 credited with rho * Delta_3
    m = inst.K[:, 1] @ b
    assert np.isclose(m[1], m[2] + 0.25 * 0.5, atol=1e-6) and m[0] > m[1]


@pytest.mark.slow
def test_joint_path_lies_on_both_spheres_and_reaches_the_predictions():
    inst = instances.fig3("loose")
    a0, b0 = joint.start_pairs()
    V, P = joint.joint_regularization_path(inst.X, inst.Y, [2.0, 24.0], [2.0, 24.0], a0, b0, iters=300)
    assert V.shape == (2, 16, 2) and P.shape == (2, 16, 2)
    assert torch.allclose(V.norm(dim=-1), torch.tensor([[2.0], [24.0]], dtype=V.dtype).expand(2, 16))
    assert torch.allclose(P.norm(dim=-1), torch.tensor([[2.0], [24.0]], dtype=P.dtype).expand(2, 16))
    v, p = joint.best_of_starts(inst.X, inst.Y, V, P)
    ref = joint.reference("loose")
    assert geometry.correlation(v[-1].numpy(), ref.v_mm) > 0.999
    assert geometry.correlation(p[-1].numpy(), ref.p_relax) > 0.999
    sv, sp = joint.radial_slopes(inst.X, inst.Y, v, p)
    assert bool((sv < 0).all() and (sp < 0).all())


def test_joint_loss_comparison_resolves_tiny_differences_and_selection_changes():
    inst = instances.fig3("loose")
    X, Y = torch.as_tensor(inst.X), torch.as_tensor(inst.Y)
    loss = losses.get_loss("logistic")
    v = torch.tensor([0.0, 40.0], dtype=torch.float64)
    p_a = 40 * torch.tensor([1.0, 0.0], dtype=torch.float64)
    p_b = 40 * torch.tensor([np.cos(1e-3), np.sin(1e-3)], dtype=torch.float64)  # a tiny rotation toward p_mm
    la, lb = joint.joint_loss(X, Y, X, v, p_a, loss), joint.joint_loss(X, Y, X, v, p_b, loss)
    assert float(la.total) == float(lb.total)  # the direct loss cannot tell them apart ...
    assert bool(la.lower_than(lb)) != bool(lb.lower_than(la))  # ... the split can, consistently
    p_c = 40 * torch.tensor([0.0, -1.0], dtype=torch.float64)  # other selection: compared directly
    lc = joint.joint_loss(X, Y, X, v, p_c, loss)
    assert bool(la.lower_than(lc)) and not bool(lc.lower_than(la))


def test_joint_path_rejects_bad_radii():
    inst = instances.fig3("loose")
    a0, b0 = joint.start_pairs()
    with pytest.raises(ValueError, match="radii"):
        joint.joint_regularization_path(inst.X, inst.Y, [1.0, 2.0], [1.0], a0, b0, iters=1)
    with pytest.raises(ValueError, match="pair up"):
        joint.joint_regularization_path(inst.X, inst.Y, [1.0], [1.0], a0, b0[:3], iters=1)


# ---------------------------------------------------------------- losses (chapter 7)
def test_stacked_loss_matches_each_loss():
    g = torch.Generator().manual_seed(1)
    K = torch.randn(3, 4, 2, 3, 2, generator=g, dtype=torch.float64)
    G = torch.randn(3, 4, 2, 3, generator=g, dtype=torch.float64)
    p = torch.randn(3, 4, 2, generator=g, dtype=torch.float64)
    pr = AttentionProblem(K, G)
    stacked = grad.grad_p(pr, p, loss_shapes.stacked_loss(loss_shapes.LOSS_NAMES)).value()
    for j, name in enumerate(loss_shapes.LOSS_NAMES):
        one = grad.grad_p(AttentionProblem(K[j], G[j]), p[j], name).value()
        assert torch.allclose(stacked[j], one, rtol=1e-12, atol=1e-15)


def test_stacked_loss_refuses_wrong_batch():
    with pytest.raises(ValueError, match="first batch dimension"):
        loss_shapes.stacked_loss(("logistic", "correlation")).value(torch.zeros(3, 2))


def test_losses_settings_defaults_and_scale():
    s = loss_shapes.Settings()
    assert (s.losses, s.C_values, s.p0, s.lr, s.steps) == (
        loss_shapes.LOSS_NAMES,
        loss_shapes.C_VALUES,
        (0, 0),
        0.1,
        1000,
    )
    assert loss_shapes.settings("quick") == s
    assert (loss_shapes.settings("paper").long_steps, loss_shapes.settings("paper").long_every) == (20_000, 100)


def test_a_loss_of_ones_own_reaches_the_chapters_run():
    """A custom Loss passed in the settings changes the iterates; a copy of a built-in under a new name does not."""
    doubled = losses.Loss(
        "doubled logistic",
        value=lambda u: 2 * losses.logistic.value(u),
        deriv=lambda u: 2 * losses.logistic.deriv(u),
        log_neg_deriv=lambda u: np.log(2.0) + losses.logistic.log_neg_deriv(u),
        excess=lambda g, h: 2 * losses.logistic.excess(g, h),
    )
    copy = losses.Loss(
        "my logistic", *(getattr(losses.logistic, f) for f in ("value", "deriv", "log_neg_deriv", "excess"))
    )
    short = dict(C_values=(2, 100), steps=30, long_steps=10, long_every=5)
    base = loss_shapes.run(loss_shapes.Settings(losses=("logistic",), lr=0.1, **short))
    same = loss_shapes.run(loss_shapes.Settings(losses=(copy,), lr=0.1, **short))
    # normalized GD ignores a constant factor of the loss: the doubled loss shows in the gradient at p0
    twice = loss_shapes.run(loss_shapes.Settings(losses=(doubled,), lr=0.1, **short))
    assert same.losses == ("my logistic",) and np.allclose(same.p, base.p, rtol=1e-9, atol=1e-12)
    assert np.allclose(twice.grad0, 2 * base.grad0, rtol=1e-12)
    other = loss_shapes.run(loss_shapes.Settings(losses=("exponential",), **short))
    assert not np.allclose(other.p[-1], base.p[-1])
    with pytest.raises(ValueError, match="unknown loss"):
        loss_shapes.run(loss_shapes.Settings(losses=("hinge",), **short))


@pytest.mark.parametrize("loss", loss_shapes.LOSS_NAMES)
@pytest.mark.parametrize("C", [2.0, 5.0, 100.0])
def test_predicted_side_equals_stable_gradient_at_zero(loss, C):
    inst = instances.fig4(C)
    g = -grad.grad_p(inst.problem(), torch.zeros(2, dtype=torch.float64), loss).value()
    assert loss_shapes.predicted_side(C, loss) == pytest.approx(float(g[1]), rel=1e-10, abs=1e-15)


# ---------------------------------------------------------------- nonlinear head (chapter 6)
def test_excess_risk_equals_direct_difference():
    inst = nh.make_instance()
    risk = nh.ExcessRisk(inst)
    p = torch.tensor([[0.3, -0.2], [1.0, 0.5], [-2.0, 1.0]], dtype=torch.float64)
    K = torch.as_tensor(inst.K)
    s = torch.softmax(torch.einsum("ntm,bm->bnt", K, p), -1).numpy()
    a = np.einsum("bnt,ntq->bnq", s, inst.X)
    direct = losses.logistic.value(torch.as_tensor(inst.Y * inst.head(a))).mean(-1)
    base = losses.logistic.value(torch.as_tensor(inst.Y * inst.head(inst.x_star))).mean(-1)
    assert torch.allclose(risk(p), direct - base, rtol=1e-9, atol=1e-14)
    assert bool((risk(p) > 0).all())


def test_first_order_weights_match_finite_differences():
    inst = nh.make_instance()
    risk = nh.ExcessRisk(inst)
    g = nh.first_order_weights(risk)
    eps = 1e-7
    for i, t in [(0, 2), (1, 3), (2, 1), (3, 2)]:
        s = np.zeros(inst.K.shape[:2])
        for k, o in enumerate(inst.optimal):
            s[k, o[0]] = 1.0
        s[i, t], s[i, inst.optimal[i][0]] = eps, 1 - eps
        fd = float(risk.from_attention(torch.as_tensor(s))) * len(inst.optimal) / eps
        assert fd == pytest.approx(g[i, t], rel=1e-4)
    assert np.isnan(g[0, 0]) and np.nanmin(g) > 0


def test_assumption_d_check_detects_a_violation():
    inst = nh.make_instance()
    d = nh.check_assumption_d(nh.ExcessRisk(inst), pairs=500)
    assert d.holds and d.c > 0 and all(bad == 0 for _, _, bad in d.tested)
    bad = nh.make_instance()
    bad.X[0, 2] = 2.0 * bad.X[0, 0]  # token 2 now carries a *stronger* value: mixing it in helps
    dd = nh.check_assumption_d(nh.ExcessRisk(bad), pairs=500)
    assert dd.g[0, 2] < 0 and not dd.holds and dd.tested == []


def test_from_attention_matches_the_p_form():
    inst = nh.make_instance()
    risk = nh.ExcessRisk(inst)
    p = torch.tensor([[0.3, -0.2], [1.0, 0.5]], dtype=torch.float64)
    s = torch.softmax(torch.einsum("ntm,bm->bnt", torch.as_tensor(inst.K), p), -1)
    assert torch.allclose(risk.from_attention(s), risk(p), rtol=1e-12, atol=1e-15)


def test_att_svm_prime_with_singletons_is_att_svm():
    inst = nh.make_instance()
    inst.optimal = [(o[0],) for o in inst.optimal]
    x, table = nh.att_svm_prime(inst)
    assert len(table) == 1
    assert np.allclose(x, svm.att_svm(inst.K, [o[0] for o in inst.optimal]).x, atol=1e-7)


def test_reg_path_on_sphere_and_bad_radii():
    risk = nh.ExcessRisk(nh.make_instance())
    pts = nh.reg_path(risk, [1.0, 3.0], n_starts=4, iters=20)
    assert pts.shape == (2, 4, 2)
    assert np.allclose(np.linalg.norm(pts, axis=-1), [[1.0] * 4, [3.0] * 4])
    with pytest.raises(ValueError, match="positive"):
        nh.reg_path(risk, [0.0, 1.0])


# ---------------------------------------------------------------- random instances (chapter 8)
def test_padding_does_not_change_training():
    grid = ch08_random.Settings(n=(1, 3), T=(2, 4), d=3, count=3, steps=40, lr=0.2, cross_check=0)
    b = ch08_random.padded_batch(grid, 3)
    assert b["K"].shape == (12, 3, 4, 3) and len(b["meta"]) == 12
    out = random_batch.train_batch(b["K"], b["gamma"], b["mask"], grid.steps, grid.lr)
    loop = random_batch.train_one_by_one(b["K"], b["gamma"], b["mask"], grid.steps, grid.lr)
    assert np.allclose(out["p"], loop, atol=1e-12)
    for j, (n, T, _d, _k) in enumerate(b["meta"]):  # padding: same as training the real instance alone
        pr = AttentionProblem(b["K"][j, :n, :T], b["gamma"][j, :n, :T])
        h = train.train_p(pr, np.zeros(3), steps=grid.steps, lr=grid.lr, record_every=grid.steps, record_probs=False)
        assert np.allclose(h.p[-1].numpy(), out["p"][j], atol=1e-12)


def test_batches_in_workers_are_the_batches_trained_here():
    """train_batches / continue_batches in worker processes give the very bits of train_batch / continue_batch here
    (the chapter's paper scale spreads its batches over the cores), in the order of the batches."""
    grid = ch08_random.Settings(n=(1, 3), T=(2, 4), d=(2, 3, 5), count=2, steps=30, lr=0.2, cross_check=0)
    bs = [ch08_random.padded_batch(grid, d) for d in grid.d]
    here = [random_batch.train_batch(b["K"], b["gamma"], b["mask"], grid.steps, grid.lr) for b in bs]
    there = random_batch.train_batches([(b["K"], b["gamma"], b["mask"]) for b in bs], grid.steps, grid.lr, workers=2)
    assert random_batch.train_batches([], 3, 0.1) == []
    for a, b in zip(here, there):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    one = random_batch.train_batches([(bs[2]["K"], bs[2]["gamma"], bs[2]["mask"])], grid.steps, grid.lr, workers=2)
    assert all(np.array_equal(one[0][k], here[2][k]) for k in here[2])  # one batch, cut into pieces for two workers
    more = [(b["K"], b["gamma"], b["mask"], o["p"]) for b, o in zip(bs, here)]
    ends = random_batch.continue_batches(more, grid.steps, grid.lr, workers=2)
    for (K, g, m, p), e in zip(more, ends):
        assert np.array_equal(e, random_batch.continue_batch(K, g, m, p, grid.steps, grid.lr))
    two = random_batch.train_batch(bs[0]["K"], bs[0]["gamma"], bs[0]["mask"], 2 * grid.steps, grid.lr)
    assert np.array_equal(two["p"], random_batch.continue_batch(*more[0], grid.steps, grid.lr))  # continuing
    with pytest.raises(ValueError, match="workers"):
        random_batch.train_batches([more[0][:3]], 3, 0.1, workers=0)


def test_settings_one_size_is_a_grid_of_one_and_bad_values_are_named():
    s = ch08_random.Settings(d=20)
    assert (
        s.d == (20,)
        and s == ch08_random.Settings(d=[20])
        and s.cells == [(2, 3, 20), (2, 5, 20), (4, 3, 20), (4, 5, 20)]
    )
    assert ch08_random.settings("quick") == ch08_random.Settings()
    assert ch08_random.settings("paper").total == 48_000
    for bad, name in (
        (dict(T=1), "T must be"),
        (dict(d=(4, 4)), "d must be"),
        (dict(lr=0), "lr must be"),
        (dict(count=0), "count must be"),
    ):
        with pytest.raises(ValueError, match=name):
            ch08_random.Settings(**bad)


def test_run_with_changed_settings_describes_every_instance():
    s = ch08_random.Settings(n=2, T=3, d=(3, 5), count=4, steps=30, cross_check=3)
    r = ch08_random.run(s)
    assert len(r.table) == 8 and sorted(set(r.table.d)) == [3, 5] and r.settings is s
    assert r.cross_check_count == 3 and r.cross_check_max_gap < 1e-6
    assert ch08_random.summary(r)["instances"] == 8


def test_divergence_test_finds_the_finite_stationary_point():
    """Issue 25: the quick grid's (n, T, d) = (2, 5, 2) instance 40 saturates but stops at a finite stationary
    point (normalized GD cycles there); (4, 3, 2) instance 40, also of negative gap, diverges."""
    grid = ch08_random.Settings()
    b = ch08_random.padded_batch(grid, 2)
    rows = [b["meta"].index((2, 5, 2, 40)), b["meta"].index((4, 3, 2, 40))]
    out = random_batch.train_batch(b["K"][rows], b["gamma"][rows], b["mask"][rows], grid.steps, grid.lr)
    assert out["diverging"].tolist() == [False, True]
    assert not out["loss_falls"][0] and out["loss_falls"][1] and out["norm_grows"][1]


def test_neighbour_swaps_the_token_of_the_minimum_gap():
    """The neighbouring selection (A.random.score_gap's competitor) replaces alpha_i by the SVM-neighbour of the
    smallest score gap; non-neighbours (slack) are never chosen, whatever their scores."""
    K = np.array([[[1.0, 0.0], [0.0, 1.0], [-3.0, 0.0]]])  # token 2 is far: not an SVM-neighbour of alpha = (0)
    gamma = np.array([[1.0, 0.5, 5.0]])
    alpha = np.array([0])
    x = ch08_random.svm_direction(K, alpha)
    assert np.allclose(x, [0.5, -0.5])  # the constraint of token 1 is active, token 2's has slack
    assert ch08_random.neighbour(K, gamma, alpha, x).tolist() == [1]
    assert ch08_random.svm_direction(np.array([[[0.5, 0.5], [1.0, 1.0], [0.0, 0.0]]]), alpha) is None


def test_continued_runs_judge_selection_and_rate():
    """Continuing a run to twice its steps: converged means the selection kept and 1 - corr with p_mm(alpha)
    falling MIN_FALL-fold; on a small grid GD converges to its own selection and never to the neighbour's."""
    s = ch08_random.Settings(n=2, T=3, d=(8,), count=6, steps=600, cross_check=0)
    c = ch08_random.continued(s)
    sat = ch08_random.run(s).saturated
    assert list(c.index) == list(sat.index) and len(c) > 0
    assert (c.converged == (c.kept & (c.fall >= ch08_random.MIN_FALL))).all()
    assert c.converged.mean() > 0.5 and not c.converged_beta.any()
    assert (c.fall_beta < ch08_random.MIN_FALL).all()


def test_analyse_reports_gap_and_infeasible():
    K = np.array([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
    gamma = np.array([[1.0, 2.0, 0.0]])
    rec = random_batch.analyse(K, gamma, np.array([0]), np.array([1.0, -1.0]))
    # p_mm((0)) = (1, 0)... both constraints x1 >= 1 and x1 - x2 >= 1 give (1, 0): neighbours tokens 1 and 2
    assert rec["feasible"] and not rec["global"]
    assert rec["gap"] == pytest.approx(-1.0)  # token 1 scores 2 > 1
    K2 = np.array([[[0.5, 0.5], [1.0, 1.0], [0.0, 0.0]]])  # token 0 is the midpoint: cannot be selected
    rec2 = random_batch.analyse(K2, gamma, np.array([0]), np.array([1.0, 0.0]))
    assert rec2["feasible"] is False and np.isnan(rec2["corr"])


# ---------------------------------------------------------------- figures (issue 16: fig. 5.3 of the reviewed build)


def test_joint_paths_figure_distinct_rays_and_token_names_without_overlap():
    """Each reference direction has its own dash, and the names of the tokens x_i do not overlap."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    inst = instances.fig3("tight")  # x_1 = (1, 1) and x_3 = (0.5, 1): close together
    S = 3
    t = np.linspace(0, 1, S)[:, None]
    r = joint.JointRun(
        case="loose",
        X=inst.X,
        Y=inst.Y,
        steps=np.arange(S),
        p=t * [[18.0, 4.0]],
        v=t * [[0.3, 20.0]],
        probs=np.full((S, 3, 2), 0.5),
        output_prob=np.full((S, 3), 0.5),
        alpha=np.ones(3, int),
        gd_alpha=np.ones(3, int),
        v_mm=np.array([0.0, 1.0]),
        support=[0, 1],
        p_mm=np.array([1.25, 0.25]),
        p_relax=np.array([1.0, 0.0]),
    )
    from mmtoken.book import plotting

    fig, axes = plotting.two_panels(["tight", "loose"], aspect=1.0)  # the size it is shown at in the book
    ax = axes[0]
    joint.plot_paths_case(r, ax=ax)
    rays = {
        ln.get_label(): (ln.get_color(), str(ln.get_linestyle()))
        for ln in ax.get_lines()
        if ln.get_label() in ("$p^{mm}$", "$p^{relax}$", "$v^{mm}$")
    }
    assert len(rays) == 3 and len({ls for _, ls in rays.values()}) == 3
    fig.canvas.draw()
    boxes = [a.get_window_extent() for a in ax.texts]
    assert len(boxes) == 3
    assert not any(boxes[i].overlaps(boxes[j]) for i in range(3) for j in range(i + 1, 3))
    plt.close(fig)
