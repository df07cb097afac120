"""analyze (``mmtoken.chapters.app_your_instance``): your own instance in one call, checked on the Fig. 1 instances whose answers are known."""

import matplotlib

matplotlib.use("Agg", force=True)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from mmtoken.attention import instances  # noqa: E402
from mmtoken.chapters.app_your_instance import Settings, analyze  # noqa: E402


def test_global_case_every_start_reaches_the_gmm():
    """Fig. 1 (global): the one optimal token is 0 and p_mm = (-0.1, 1)/1.01 (closed form); GD finds it."""
    inst = instances.fig1("global")
    a = analyze(inst.X, inst.Y, inst.v, W=inst.W, starts=inst.starts, steps=600, record_every=50)
    assert list(a.table["selection"]) == [(0,)] * len(inst.starts)
    assert a.table["globally optimal"].all() and a.table["feasible"].all()
    assert (a.table["correlation"] > 0.99).all()
    np.testing.assert_allclose(a.reports[0].p_mm, np.array([-0.1, 1.0]) / 1.01, atol=1e-6)
    assert a.history.p.shape == (len(a.history.steps), len(inst.starts), 2)


def test_local_case_tells_local_from_global():
    """Fig. 1 (local): token 1 is locally but not globally optimal; starts near it stay there (Theorem 3)."""
    inst = instances.fig1("local")
    starts = np.array([[0.0, 1.0], [0.0, -1.5]])  # published starts, one in each basin
    a = analyze(inst.X, inst.Y, inst.v, W=inst.W, starts=starts, steps=600, record_every=100)
    rows = {sel: row for sel, row in zip(a.table["selection"], a.table.to_dict("records"))}
    assert set(rows) == {(0,), (1,)}
    assert rows[(0,)]["globally optimal"] and rows[(0,)]["locally optimal"]
    assert rows[(1,)]["locally optimal"] and not rows[(1,)]["globally optimal"]


def test_default_starts_are_seeded_unit_vectors_and_plot_draws():
    inst = instances.fig1("global")
    a = analyze(inst.X, inst.Y, inst.v, W=inst.W, n_starts=3, steps=20, seed=4)
    b = analyze(inst.X, inst.Y, inst.v, W=inst.W, n_starts=3, steps=20, seed=4)
    np.testing.assert_array_equal(a.starts, b.starts)
    np.testing.assert_allclose(np.linalg.norm(a.starts, axis=1), 1.0)
    fig = a.plot()
    assert fig.axes[0].has_data() and len(fig.axes[0].lines) >= 3
    plt.close(fig)


def test_settings_and_keyword_changes_are_one_run():
    """``analyze(X, Y, v, Settings(steps=...))`` and ``analyze(X, Y, v, steps=...)`` train the same way."""
    inst = instances.fig1("global")
    a = analyze(inst.X, inst.Y, inst.v, Settings(steps=30, seed=2), W=inst.W)
    b = analyze(inst.X, inst.Y, inst.v, W=inst.W, steps=30, seed=2)
    assert a.settings == b.settings == Settings(steps=30, seed=2)
    np.testing.assert_array_equal(a.history.p.numpy(), b.history.p.numpy())
    c = analyze(inst.X, inst.Y, inst.v, Settings(steps=30, seed=2), W=inst.W, lr=0.5)  # a change on top of s
    assert c.settings.lr == 0.5 and c.settings.seed == 2
    assert not np.array_equal(a.history.p.numpy(), c.history.p.numpy())
