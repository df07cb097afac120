"""Training loops: norm growth, history, agreement between batched and single runs, reg. path, joint."""
import numpy as np
import pytest
import torch

from mmtoken import geometry, instances, svm, train
from mmtoken.model import AttentionProblem


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
    from mmtoken.grad import autograd_grad
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
    h = train.train_joint(inst.X, inst.Y, inst.extra["v0"], inst.starts[0], steps=300, lr=0.1, record_every=100)
    assert h.v.shape == (4, 2) and h.p.shape == (4, 2)
    assert float(h.extra["output_prob"][-1].min()) > 0.9
    sel = h.probs[-1][np.arange(3), [1, 1, 1]]
    assert float(sel.min()) > 0.9


@pytest.mark.parametrize("method", ["normalized", "gd"])
@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
def test_compiled_kernel_matches_torch(method, loss, monkeypatch):
    """The numba kernel and the torch code are two implementations of the same steps."""
    from mmtoken import fastpath
    if not fastpath.available():
        pytest.skip("numba not installed")
    g = torch.Generator().manual_seed(3)
    problem = AttentionProblem(torch.randn(4, 2, 5, 3, generator=g, dtype=torch.float64),
                               torch.randn(4, 2, 5, generator=g, dtype=torch.float64),
                               mask=torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool))
    p0 = torch.randn(3, 1, 3, generator=g, dtype=torch.float64)       # 3 starts x 4 instances
    fast = train.train_p(problem, p0, steps=400, lr=0.2, method=method, loss=loss, record_every=100)
    monkeypatch.setenv("MMTOKEN_FASTPATH", "off")
    slow = train.train_p(problem, p0, steps=400, lr=0.2, method=method, loss=loss, record_every=100)
    assert fast.p.shape == slow.p.shape == (5, 3, 4, 3)
    assert torch.allclose(fast.p, slow.p, atol=1e-10, rtol=0)
    assert torch.allclose(fast.loss, slow.loss, atol=1e-12)
    assert torch.allclose(fast.probs, slow.probs, atol=1e-10)
    assert torch.all(fast.probs[..., 3:][:, :, :, 0] == 0)                # padding gets no attention


def test_compiled_joint_matches_torch(monkeypatch):
    from mmtoken import fastpath
    if not fastpath.available():
        pytest.skip("numba not installed")
    inst = instances.fig3("loose")
    starts = np.array([[0.0, -1.0], [0.5, 0.5]])
    fast = train.train_joint(inst.X, inst.Y, inst.extra["v0"], starts, steps=300, lr=0.1, record_every=100)
    monkeypatch.setenv("MMTOKEN_FASTPATH", "off")
    slow = train.train_joint(inst.X, inst.Y, inst.extra["v0"], starts, steps=300, lr=0.1, record_every=100)
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
