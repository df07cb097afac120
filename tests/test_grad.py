"""The saturation-safe gradient against autograd, and its behaviour under saturation."""

import math

import numpy as np
import pytest
import torch

from mmtoken.attention import geometry, grad, instances, losses
from mmtoken.attention.model import AttentionProblem


def _random_problem(batch=(4,), n=3, T=5, m=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    K = torch.randn(*batch, n, T, m, generator=g, dtype=torch.float64)
    gamma = torch.randn(*batch, n, T, generator=g, dtype=torch.float64)
    p = torch.randn(*batch, m, generator=g, dtype=torch.float64)
    return AttentionProblem(K, gamma), p


@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
def test_grad_matches_autograd(loss):
    problem, p = _random_problem()
    a = grad.grad_p(problem, p, loss).value()
    b = grad.autograd_grad(problem, p, loss)
    assert torch.allclose(a, b, rtol=1e-10, atol=1e-14)


def test_grad_broadcasts_starts_against_instances():
    problem, _ = _random_problem(batch=(6,))
    p = torch.randn(3, 1, 3, dtype=torch.float64)  # 3 starts x 6 instances
    g = grad.grad_p(problem, p)
    assert g.direction.shape == (3, 6, 3) and g.log_norm.shape == (3, 6)
    ref = grad.autograd_grad(problem, p.expand(3, 6, 3).clone())
    assert torch.allclose(g.value(), ref, rtol=1e-10, atol=1e-14)


def test_margin_is_convex_combination_of_scores():
    problem, p = _random_problem()
    sat = grad.saturation(problem, p)
    assert torch.allclose(sat.probs.sum(-1), torch.ones(4, 3, dtype=torch.float64))
    assert bool((sat.u <= problem.gamma.max(-1).values + 1e-12).all())
    assert bool((sat.u >= problem.gamma.min(-1).values - 1e-12).all())


def test_direction_survives_where_the_gradient_underflows():
    """At ||p|| = 1e4 every weight underflows float64; the direction must not."""
    inst = instances.fig1("global")
    gmm = inst.gmm().x
    p = torch.as_tensor(1e4 * gmm / np.linalg.norm(gmm))
    g = grad.grad_p(inst.problem(), p)
    assert torch.isfinite(g.log_norm).all() and g.log_norm.item() < math.log(1e-300)
    assert torch.all(g.value() == 0)  # the gradient itself underflows
    assert abs(g.direction.norm().item() - 1) < 1e-12  # its direction does not
    # Near the GMM, -grad points along the active constraint's key difference k_0 - k_2.
    d = inst.K[0, 0] - inst.K[0, 2]
    assert geometry.correlation(-g.direction.numpy(), d) > 0.999


def test_naive_float64_gradient_is_exactly_zero_when_saturated():
    inst = instances.fig1("global")
    p = torch.tensor([-100.0, 1000.0], dtype=torch.float64)
    assert torch.all(grad.autograd_grad(inst.problem(), p) == 0)
    assert grad.grad_p(inst.problem(), p).direction.norm().item() == pytest.approx(1.0)


def test_loss_parts_sum_to_loss():
    problem, p = _random_problem()
    base, excess = grad.loss_parts(problem, p)
    assert torch.allclose(base + excess, grad.loss_value(problem, p), rtol=1e-12)


@pytest.mark.parametrize("name", ["logistic", "exponential", "correlation"])
def test_loss_derivatives(name):
    loss = losses.get_loss(name)
    u = torch.linspace(-5, 5, 11, dtype=torch.float64, requires_grad=True)
    (d,) = torch.autograd.grad(loss.value(u).sum(), u)
    assert torch.allclose(loss.deriv(u), d, rtol=1e-12)
    assert bool((loss.deriv(u) < 0).all())
    assert torch.allclose(loss.log_neg_deriv(u), torch.log(-loss.deriv(u)), rtol=1e-12)
    g, h = torch.tensor([0.3, 2.0], dtype=torch.float64), torch.tensor([-1e-3, 0.5], dtype=torch.float64)
    assert torch.allclose(loss.excess(g, h), loss.value(g + h) - loss.value(g), rtol=1e-10)


def test_losses_stable_at_large_margins():
    u = torch.tensor([1e3, 1e4], dtype=torch.float64)
    assert torch.isfinite(losses.logistic.value(-u)).all()
    assert torch.isfinite(losses.logistic.log_neg_deriv(u)).all()
    assert losses.logistic.log_neg_deriv(u)[1].item() == pytest.approx(-1e4)
    # excess keeps digits that l(g + h) - l(g) loses
    g, h = torch.tensor([1.0], dtype=torch.float64), torch.tensor([-1e-20], dtype=torch.float64)
    assert losses.logistic.excess(g, h).item() == pytest.approx(1e-20 * torch.sigmoid(-g).item(), rel=1e-10)


def test_unknown_loss_is_named():
    with pytest.raises(ValueError, match="unknown loss 'hinge'"):
        losses.get_loss("hinge")
