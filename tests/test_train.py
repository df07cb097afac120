"""Training loops: norm growth, history, agreement between batched and single runs, reg. path, joint."""

import warnings

import numpy as np
import pytest
import torch

from mmtoken.attention import geometry, grad, instances, joint, svm, train
from mmtoken.attention.model import AttentionProblem


def test_normalized_gd_history_and_norm_growth():
    inst = instances.fig1("global")
    h = train.train_p(inst.problem(), inst.starts, steps=300, lr=0.1, record_every=50)
    assert list(h.steps) == [0, 50, 100, 150, 200, 250, 300]
    assert h.p.shape == (7, 6, 2) and h.probs.shape == (7, 6, 1, 3)
    assert torch.allclose(h.probs.sum(-1), torch.ones(7, 6, 1, dtype=torch.float64))
    # each normalized step moves p by exactly lr, so ||p|| grows by at most lr per step
    assert bool((h.norm[-1] <= h.norm[0] + 300 * 0.1 + 1e-9).all())
    assert bool((h.norm[-1] > 20).all())
    assert bool((h.loss[-1] < h.loss[0]).all())


def test_batched_equals_one_by_one():
    inst = instances.fig1("local")
    batched = train.train_p(inst.problem(), inst.starts, steps=200, record_every=200).final_p
    for j, start in enumerate(inst.starts):
        single = train.train_p(inst.problem(), start, steps=200, record_every=200).final_p
        assert torch.allclose(batched[j], single, atol=1e-12)


def test_plain_gd_step_is_the_gradient():
    problem = AttentionProblem(torch.randn(2, 3, 2, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64))
    p0 = torch.zeros(2, dtype=torch.float64)
    from mmtoken.attention.grad import autograd_grad

    h = train.train_p(problem, p0, steps=1, lr=0.5, method="gd")
    assert torch.allclose(h.final_p, p0 - 0.5 * autograd_grad(problem, p0), atol=1e-14)


def test_bad_arguments():
    inst = instances.fig1("global")
    with pytest.raises(ValueError, match="method"):
        train.train_p(inst.problem(), inst.starts, steps=1, method="adam")
    with pytest.raises(ValueError, match="steps"):
        train.train_p(inst.problem(), inst.starts, steps=-1)
    with pytest.raises(ValueError, match="NaN"):
        train.train_p(inst.problem(), [[np.nan, 0.0]], steps=1)


def test_regularization_path_approaches_gmm():
    inst = instances.fig1("global")
    gmm = svm.att_svm(inst.K, [0]).x
    radii = [1.0, 4.0, 16.0]
    pts = train.regularization_path(inst.problem(), radii, inst.starts[:3] + [0.3, 0.0], iters=200)
    best = train.best_of_starts(inst.problem(), pts)
    np.testing.assert_allclose(best.norm(dim=-1).numpy(), radii, rtol=1e-10)
    corr = geometry.correlation(best.numpy(), gmm)
    assert np.all(np.diff(corr) > 0) and corr[-1] > 0.99


def test_joint_training_selects_and_separates():
    inst = instances.fig3("tight")
    h = joint.train_joint(inst.X, inst.Y, inst.extra["v0"], inst.starts[0], steps=300, lr=0.1, record_every=100)
    assert h.v.shape == (4, 2) and h.p.shape == (4, 2)
    assert float(h.extra["output_prob"][-1].min()) > 0.9
    sel = h.probs[-1][np.arange(3), [1, 1, 1]]
    assert float(sel.min()) > 0.9


@pytest.mark.parametrize("method", ["normalized", "gd"])
@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
def test_compiled_kernel_matches_torch(method, loss, monkeypatch):
    """The numba kernel and the torch code are two implementations of the same steps."""
    from mmtoken.attention import fastpath

    if not fastpath.available():
        pytest.skip("numba not installed")
    g = torch.Generator().manual_seed(3)
    problem = AttentionProblem(
        torch.randn(4, 2, 5, 3, generator=g, dtype=torch.float64),
        torch.randn(4, 2, 5, generator=g, dtype=torch.float64),
        mask=torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool),
    )
    p0 = torch.randn(3, 1, 3, generator=g, dtype=torch.float64)  # 3 starts x 4 instances
    fast = train.train_p(problem, p0, steps=400, lr=0.2, method=method, loss=loss, record_every=100)
    monkeypatch.setenv("MMTOKEN_FASTPATH", "off")
    slow = train.train_p(problem, p0, steps=400, lr=0.2, method=method, loss=loss, record_every=100)
    assert fast.p.shape == slow.p.shape == (5, 3, 4, 3)
    assert torch.allclose(fast.p, slow.p, atol=1e-10, rtol=0)
    assert torch.allclose(fast.loss, slow.loss, atol=1e-12)
    assert torch.allclose(fast.probs, slow.probs, atol=1e-10)
    assert torch.all(fast.probs[..., 3:][:, :, :, 0] == 0)  # padding gets no attention


def test_compiled_joint_matches_torch(monkeypatch):
    from mmtoken.attention import fastpath

    if not fastpath.available():
        pytest.skip("numba not installed")
    inst = instances.fig3("loose")
    starts = np.array([[0.0, -1.0], [0.5, 0.5]])
    fast = joint.train_joint(inst.X, inst.Y, inst.extra["v0"], starts, steps=300, lr=0.1, record_every=100)
    monkeypatch.setenv("MMTOKEN_FASTPATH", "off")
    slow = joint.train_joint(inst.X, inst.Y, inst.extra["v0"], starts, steps=300, lr=0.1, record_every=100)
    assert fast.p.shape == slow.p.shape == (4, 2, 2) and fast.v.shape == slow.v.shape
    assert torch.allclose(fast.p, slow.p, atol=1e-10) and torch.allclose(fast.v, slow.v, atol=1e-10)
    assert torch.allclose(fast.extra["output_prob"], slow.extra["output_prob"], atol=1e-10)
    assert torch.allclose(fast.probs, slow.probs, atol=1e-10)


def test_regularization_path_survives_underflow():
    """At R = 1000 the excess loss underflows float64; the log-space comparison keeps the path on course."""
    inst = instances.fig1("global")
    gmm = svm.att_svm(inst.K, [0]).x
    radii = [100.0, 1000.0, 3000.0]
    pts = train.regularization_path(inst.problem(), radii, inst.starts[:2] + [0.3, 0.0], iters=300)
    corr = geometry.correlation(train.best_of_starts(inst.problem(), pts).numpy(), gmm)
    assert corr[-1] > 0.99999 and corr[1] > 0.9999


def test_best_of_starts_breaks_underflowed_ties_in_log_space():
    """At R = 10^4 the excess of every start underflows to 0 (issue 43): compared by base + excess alone the
    starts tie and the first is kept, here the worse one; the log-space comparison keeps the better."""
    pr = instances.fig4(100).problem()
    R = 1e4
    worse, better = (np.sqrt(R**2 - x**2) for x in (30.0, 47.0))
    pts = torch.tensor([[[worse, -30.0], [better, -47.0]]])  # (nR = 1, starts = 2, m = 2)
    base, excess = grad.loss_parts(pr, pts, "logistic")
    assert bool((excess == 0).all()) and bool(base[0, 0] == base[0, 1])  # the linear comparison sees a tie
    le = grad.log_excess(pr, pts, "logistic")[0]
    assert float(le[1]) < float(le[0]) - 10  # the second start is e^-10 and more below the first
    best = train.best_of_starts(pr, pts, loss="logistic").numpy()
    assert np.allclose(best, [[better, -47.0]])
    # the same points, the better first: kept too (no tie remains to break)
    assert np.allclose(train.best_of_starts(pr, pts.flip(1), loss="logistic").numpy(), [[better, -47.0]])


# ----------------------------------------------------------------------------- validated arguments (issue 14, items 2-3)
@pytest.mark.parametrize("bad", [0, -0.1, np.nan, np.inf, "0.1", True, 1j])
def test_step_sizes_are_validated(bad):
    """lr = 0 was a silent no-op, a negative lr ascent, NaN a table of NaN that still said 'feasible'."""
    inst = instances.fig1("global")
    with pytest.raises(ValueError, match="lr"):
        train.train_p(inst.problem(), inst.starts, steps=3, lr=bad)
    f3 = instances.fig3("tight")
    with pytest.raises(ValueError, match="lr"):
        joint.train_joint(f3.X, f3.Y, f3.extra["v0"], f3.starts[0], steps=3, lr=bad)
    with pytest.raises(ValueError, match="lr_v"):
        joint.train_joint(f3.X, f3.Y, f3.extra["v0"], f3.starts[0], steps=3, lr=0.1, lr_v=bad)


@pytest.mark.parametrize("theta0", [0, -0.3, np.nan, np.inf, 4.0])
def test_regularization_path_angle_is_validated(theta0):
    inst = instances.fig1("global")
    with pytest.raises(ValueError, match="theta0"):
        train.regularization_path(inst.problem(), [1.0], inst.starts, iters=2, theta0=theta0)


def test_counts_and_starts_are_validated():
    inst = instances.fig1("global")
    pr = inst.problem()
    for kw, name in (
        ({"steps": 2.5}, "steps"),
        ({"steps": "10"}, "steps"),
        ({"steps": 3, "record_every": 0}, "record_every"),
        ({"steps": 3, "record_every": 1.5}, "record_every"),
    ):
        with pytest.raises(ValueError, match=name):
            train.train_p(pr, inst.starts, **kw)
    with pytest.raises(ValueError, match="p0"):
        train.train_p(pr, np.zeros((0, 2)), steps=3)
    with pytest.raises(ValueError, match="p0"):
        train.train_p(pr, np.zeros((2, 3)), steps=3)
    for kw, name in (({"iters": 0}, "iters"), ({"iters": 2.5}, "iters")):
        with pytest.raises(ValueError, match=name):
            train.regularization_path(pr, [1.0], inst.starts, **kw)
    for w0 in (np.zeros((0, 2)), np.zeros((1, 2)), np.ones((1, 3)), np.ones(2)):
        with pytest.raises(ValueError, match="w0"):
            train.regularization_path(pr, [1.0], w0, iters=2)
    for radii in ([], [0.0], [-1.0], [[1.0]], [np.nan]):
        with pytest.raises(ValueError, match="radii"):
            train.regularization_path(pr, radii, inst.starts, iters=2)
    assert train.train_p(pr, inst.starts, steps=1e2, record_every=50.0).steps.tolist() == [0, 50, 100]


def test_train_joint_checks_labels_and_y_before_the_kernel():
    """Labels {1, 0, 1} were accepted; a short Y was read out of bounds by the compiled kernel."""
    inst = instances.fig3("tight")
    for Y, match in (
        ([1, 0, 1], "labels Y"),
        ([1, -1], r"Y must have shape \(3,\)"),
        ([[1, -1, 1]], "Y must"),
        ([1, -1, np.nan], "Y contains NaN"),
    ):
        with pytest.raises(ValueError, match=match):
            joint.train_joint(inst.X, Y, inst.extra["v0"], inst.starts[0], steps=5)
    with pytest.raises(ValueError, match="W must"):
        joint.train_joint(inst.X, inst.Y, inst.extra["v0"], inst.starts[0], steps=5, W=np.eye(3))
    from mmtoken.attention import fastpath

    with pytest.raises(ValueError, match="Y must"):
        fastpath.run_joint(
            np.asarray(inst.X),
            np.ones(2),
            np.asarray(inst.X),
            np.zeros((1, 2)),
            np.zeros((1, 2)),
            5,
            0.1,
            0.1,
            "logistic",
            np.array([0, 5]),
        )


# ----------------------------------------------------------------------------- long runs (item 5)
def test_default_history_is_bounded_and_unchanged_for_short_runs():
    inst = instances.fig1("global")
    short = train.train_p(inst.problem(), inst.starts[:1], steps=30, record_probs=False)
    assert short.steps.tolist() == list(range(31))  # every step, as before
    long = train.train_p(inst.problem(), inst.starts[:1], steps=5 * train.MAX_RECORDS + 3, record_probs=False)
    assert len(long.steps) <= train.MAX_RECORDS + 2 and long.steps[-1] == 5 * train.MAX_RECORDS + 3
    assert np.all(np.diff(long.steps) <= 6)


def test_huge_explicit_history_warns(monkeypatch):
    inst = instances.fig1("global")
    monkeypatch.setattr(train, "HISTORY_WARN_BYTES", 10_000)
    with pytest.warns(UserWarning, match="record_every"):
        train.train_p(inst.problem(), inst.starts, steps=200, record_every=1)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="record_every"):  # refused before any memory is taken
        train.train_p(inst.problem(), inst.starts, steps=10**9, record_every=1)


@pytest.mark.parametrize("chunk", [1, 7, 64, None])
def test_chunked_kernel_is_bit_identical_to_one_call(chunk):
    from mmtoken.attention import fastpath

    if not fastpath.available():
        pytest.skip("numba not installed")
    g = np.random.default_rng(4)
    K, gamma = g.normal(size=(3, 2, 4, 3)), g.normal(size=(3, 2, 4))
    mask = np.ones((3, 2, 4), bool)
    mask[0, 1, 3] = False
    p0 = g.normal(size=(3, 3))
    record = np.array([0, 1, 10, 63, 64, 65, 200, 299])
    one = fastpath.run(K, gamma, mask, p0, 299, 0.3, "normalized", "logistic", record, chunk=299)
    assert np.array_equal(
        fastpath.run(K, gamma, mask, p0, 299, 0.3, "normalized", "logistic", record, chunk=chunk), one
    )
    X = g.normal(size=(3, 4, 2))
    Y = np.array([1.0, -1.0, 1.0])
    a = fastpath.run_joint(X, Y, X, p0[:, :2], p0[:, 1:], 299, 0.1, 0.05, "logistic", record, chunk=299)
    b = fastpath.run_joint(X, Y, X, p0[:, :2], p0[:, 1:], 299, 0.1, 0.05, "logistic", record, chunk=chunk)
    assert all(np.array_equal(u, w) for u, w in zip(a, b))


def test_compiled_run_honours_ctrl_c_and_reports_progress():
    """A SIGINT used to be ignored until the whole compiled run ended (a 1e9-step run ran on)."""
    import _thread
    import signal
    import threading
    import time

    from mmtoken.attention import fastpath

    if not fastpath.available():
        pytest.skip("numba not installed")
    inst = instances.fig1("global")
    seen = []
    train.train_p(inst.problem(), inst.starts, steps=1000, progress=False)  # compiled and warm
    fastpath.run(
        np.asarray(inst.K)[None],
        np.asarray(inst.gamma)[None],
        np.ones((1, 1, 3), bool),
        np.zeros((1, 2)),
        100,
        0.1,
        "normalized",
        "logistic",
        np.array([0, 100]),
        chunk=30,
        callback=seen.append,
    )
    assert seen == [30, 60, 90, 100]
    # Python's own Ctrl-C handler for the duration: a pytest-xdist worker ignores SIGINT, and then
    # interrupt_main() does nothing and the 1e9-step run would go on for hours
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    # the same call, short, first, so that the interrupt cannot land while numba compiles this
    # specialization (on a fresh, loaded machine compiling can outlast the timer; one CI rehearsal hung here)
    train.train_p(inst.problem(), inst.starts, steps=10, record_every=10**9, record_probs=False, progress=False)
    timer = threading.Timer(0.5, _thread.interrupt_main)
    try:
        start = time.monotonic()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            train.train_p(
                inst.problem(), inst.starts, steps=10**9, record_every=10**9, record_probs=False, progress=False
            )
        assert time.monotonic() - start < 5.0
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)


def test_progress_bar_is_tqdm_auto_and_off_in_tests(monkeypatch):
    import tqdm.auto

    from mmtoken import config

    bar = config.progress_bar(total=3, enabled=True)
    assert isinstance(bar, tqdm.auto.tqdm)  # a widget in Jupyter, text on a terminal
    bar.close()
    assert config.progress_bar(total=3, enabled=False).disable
    monkeypatch.setenv("MMTOKEN_PROGRESS", "off")
    assert not config.progress_enabled(10**12)
    monkeypatch.setenv("MMTOKEN_PROGRESS", "sometimes")
    with pytest.raises(ValueError, match="MMTOKEN_PROGRESS"):
        config.progress_enabled(1)


def test_auto_progress_shows_in_a_jupyter_kernel_for_long_runs(monkeypatch):
    import sys
    import types

    from mmtoken import config

    class ZMQInteractiveShell:  # what a Jupyter kernel's get_ipython() returns
        pass

    monkeypatch.setenv("MMTOKEN_PROGRESS", "auto")
    monkeypatch.setattr(config, "on_terminal", lambda: False)
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: ZMQInteractiveShell()))
    assert config.progress_enabled(10**7) and not config.progress_enabled(10)
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    assert not config.progress_enabled(10**7)  # a plain script without a terminal stays silent


def test_accept_keeps_only_what_lowered_the_loss():
    """The one monotone line search: candidate and grown angle where ok, current and halved angle elsewhere."""
    current, candidate = torch.zeros(3, 2), torch.ones(3, 2)
    ok = torch.tensor([True, False, True])
    theta = torch.tensor([0.2, 0.2, 0.9])
    w, th = train.accept(ok, candidate, current, theta)
    assert w.tolist() == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]
    assert torch.allclose(th, torch.tensor([0.3, 0.1, 1.0]), atol=1e-7)  # 0.9 * 1.5 is capped at 1 radian


@pytest.mark.parametrize("method", ["normalized", "gd"])
def test_a_custom_loss_is_honoured_by_train_p(method):
    """A loss that only *bears* a built-in's name is another function: it takes the torch path, and its
    iterates are those of the loss it really is (here the exponential loss, run on the compiled kernel),
    not the built-in's whose name it bears (issue 24, defect 1: the kernel dispatched by name)."""
    import dataclasses

    from mmtoken.attention import losses

    named_logistic = dataclasses.replace(losses.exponential, name="logistic")
    from mmtoken.attention import fastpath

    assert not fastpath.runs_loss(named_logistic) and fastpath.runs_loss(losses.logistic)
    g = np.random.default_rng(0)  # several inputs: with one, a normalized step does not depend on the loss
    problem = AttentionProblem(g.normal(size=(4, 3, 2)), g.normal(size=(4, 3)))
    starts = g.normal(size=(3, 2))
    run = lambda loss: train.train_p(problem, starts, steps=200, lr=0.1, method=method, loss=loss).p
    custom, exponential, logistic = run(named_logistic), run("exponential"), run("logistic")
    assert torch.allclose(custom, exponential, atol=1e-10)
    assert not torch.allclose(custom, logistic, atol=1e-3)


def test_a_custom_loss_is_honoured_by_train_joint():
    """The same for joint training of ``(v, p)``, the other compiled kernel."""
    import dataclasses

    from mmtoken.attention import losses

    named_logistic = dataclasses.replace(losses.exponential, name="logistic")
    inst = instances.fig3("loose")
    starts = np.array([[0.0, -1.0], [0.5, 0.5]])

    def run(loss):
        h = joint.train_joint(inst.X, inst.Y, inst.extra["v0"], starts, steps=300, lr=0.1, loss=loss)
        return torch.cat([h.p, h.v], -1)

    custom, exponential, logistic = run(named_logistic), run("exponential"), run("logistic")
    assert torch.allclose(custom, exponential, atol=1e-10)
    assert not torch.allclose(custom, logistic, atol=1e-3)


def test_polyak_warns_when_a_run_leaves_the_floats():
    """Fig. 1 (local) from (0, -1.5) goes to the locally optimal token: L - L* (of the global tokens) stays
    bounded away from 0 while the gradient vanishes, so the Polyak step explodes; the run says so."""
    inst = instances.fig1("local")
    with pytest.warns(RuntimeWarning, match="1 of 2 runs left the floating-point range.*Polyak"):
        h = train.train_p(inst.problem(), [[0.0, 1.0], [0.0, -1.5]], steps=3000, lr=1.0, method="polyak")
    assert torch.isfinite(h.p[-1, 0]).all() and not torch.isfinite(h.p[-1, 1]).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        train.train_p(inst.problem(), [[0.0, 1.0]], steps=3000, lr=1.0, method="polyak")


# --------------------------------------------------------------------------- the recorder of hand-written loops
def test_recorder_keeps_the_trainers_steps_and_stops_after_the_last():
    """The recorded steps are :func:`train.record_steps`' (every ``record_every``-th and the last), ``keep`` is
    offered every state once and says when the loop ends: ``steps`` updates, none after the last state."""
    from mmtoken.attention.recorder import Recorder

    for steps, every in ((10, 3), (9, 3), (0, 5), (7, None), (4, 1)):
        rec, x, updates = Recorder(steps, every), torch.zeros(2), 0
        while rec.keep(x=x):
            x = x + 1.0
            updates += 1
        assert updates == steps and list(rec.steps) == sorted(train.record_steps(steps, every))
        assert rec["x"].shape == (len(rec.steps), 2) and torch.equal(
            rec["x"][:, 0], torch.as_tensor(rec.steps, dtype=x.dtype)
        )
        with pytest.raises(RuntimeError, match="after the last"):
            rec.keep(x=x)


def test_recorder_matches_the_trainer_bit_for_bit(monkeypatch):
    """Normalized GD written with a recorder is the trainer's torch loop: the same iterates at the same steps."""
    from mmtoken.attention import grad
    from mmtoken.attention.recorder import Recorder

    monkeypatch.setenv("MMTOKEN_FASTPATH", "off")  # the torch loop (the compiled kernel agrees to rounding only)

    inst = instances.fig1("global")
    problem, p = inst.problem(), torch.as_tensor(inst.starts)
    with torch.inference_mode():
        rec = Recorder(50, 7)
        while rec.keep(p=p):
            p = p - 0.1 * grad.grad_p(problem, p).direction
        h = train.train_p(problem, inst.starts, steps=50, lr=0.1, record_every=7, record_probs=False)
    assert list(rec.steps) == list(h.steps) and torch.equal(rec["p"], h.p)


def test_recorder_copies_what_it_keeps_and_stacks_arrays_too():
    from mmtoken.attention.recorder import Recorder

    rec, a, t = Recorder(2, 1), np.zeros(3), torch.zeros(3)
    while rec.keep(a=a, t=t):
        a += 1.0  # in place: the kept copies must not follow
        t += 1.0
    assert isinstance(rec["a"], np.ndarray) and rec["a"][:, 0].tolist() == [0.0, 1.0, 2.0]
    assert isinstance(rec["t"], torch.Tensor) and rec["t"][:, 0].tolist() == [0.0, 1.0, 2.0]
    assert rec.names == ("a", "t") and "3 of 3 records" in repr(rec)


@pytest.mark.parametrize(
    "steps, every, match", [(-1, 1, "steps"), (2.5, 1, "steps"), (3, 0, "record_every"), (3, 1.5, "record_every")]
)
def test_recorder_names_a_bad_count(steps, every, match):
    from mmtoken.attention.recorder import Recorder

    with pytest.raises(ValueError, match=match):
        Recorder(steps, every)


def test_recorder_refuses_other_values_midway_and_unknown_names():
    from mmtoken.attention.recorder import Recorder

    rec = Recorder(3, 1)
    with pytest.raises(ValueError, match="needs the values"):
        rec.keep()
    rec.keep(W=torch.zeros(1))
    with pytest.raises(ValueError, match=r"given \['V'\] at step 1, the record holds \['W'\]"):
        rec.keep(V=torch.zeros(1))
    with pytest.raises(KeyError, match="no value 'V'"):
        rec["V"]
    with pytest.raises(ValueError, match="numeric"):
        Recorder(1, 1).keep(W="text")
    with pytest.raises(KeyError, match="no value 'W'"):
        Recorder(2, 1)["W"]  # before the first keep
