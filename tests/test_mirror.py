"""The mirror map of ``psi(p) = (1/q)||p||_q^q`` (``mmtoken.attention.mirror``): gradient, inverse, both array types."""

import numpy as np
import pytest
import torch

from mmtoken.attention.mirror import inverse_mirror_map, mirror_map


@pytest.mark.parametrize("q", [1.5, 2.0, 3.0, 7.0])
def test_mirror_map_is_the_gradient_of_the_potential_and_inverts(q):
    p = torch.tensor([-1.7, -0.3, 0.0, 0.4, 2.5], dtype=torch.float64, requires_grad=True)
    ((p.abs() ** q).sum() / q).backward()
    theta = mirror_map(p.detach(), q)
    assert torch.allclose(theta, p.grad, rtol=1e-13, atol=0)
    assert torch.allclose(inverse_mirror_map(theta, q), p.detach(), rtol=1e-13, atol=0)
    x = p.detach().numpy()
    assert isinstance(mirror_map(x, q), np.ndarray)
    np.testing.assert_allclose(mirror_map(x, q), theta.numpy(), rtol=1e-15, atol=0)
    np.testing.assert_allclose(inverse_mirror_map(mirror_map(x, q), q), x, rtol=1e-13, atol=0)


def test_q_two_is_the_identity_and_the_sign_is_kept():
    x = np.array([-3.0, -1e-100, 0.0, 1e-100, 3.0])
    np.testing.assert_array_equal(mirror_map(x, 2.0), x)
    assert (np.sign(mirror_map(x, 3.0)) == np.sign(x)).all()
    assert (np.sign(inverse_mirror_map(x, 1.5)) == np.sign(x)).all()
    assert not np.array_equal(mirror_map(x, 3.0), x)  # the nearest wrong map (the identity) is told apart
