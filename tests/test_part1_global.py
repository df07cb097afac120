"""Invariants behind chapters 1, 2 and the saturation appendix (fast)."""
import numpy as np
import pytest
import torch

from mmtoken import grad, instances, public_code, train
from mmtoken.experiments import global_convergence, saturation, w_equals_p


def test_w_run_matches_p_run_and_gradient_is_rank_one():
    inst = instances.fig1("global")
    pr = w_equals_p._pair("t", inst, instances.PLANE, steps=30, lr=1.0, seed=0)
    assert pr.logits_W.shape == pr.logits_p.shape == (31, 6, 3)
    assert pr.max_logit_gap < 1e-12
    assert pr.sv_ratio.max() < 1e-12
    assert pr.perp_drift < 1e-12
    # W(0) pbar = p(0): the start is honoured
    np.testing.assert_allclose(pr.W0 @ pr.pbar, inst.starts, atol=1e-14)


def test_w_run_detects_a_wrong_start():
    """Two independent computations: a W(0) that does not map to p(0) must show a gap."""
    inst = instances.fig1("global")
    K = torch.as_tensor(inst.K, dtype=torch.float64)
    gamma = torch.as_tensor(inst.gamma, dtype=torch.float64)
    pbar = torch.tensor([1.0, 0.0], dtype=torch.float64)
    W0 = torch.zeros(6, 2, 2, dtype=torch.float64)                # W(0) pbar = 0, not the starts
    zW, _, _ = w_equals_p._w_run(K, gamma, W0, pbar, steps=5, lr=1.0)
    h = train.train_p(inst.problem(), inst.starts, steps=5, lr=1.0, method="gd", record_probs=False)
    zp = torch.einsum("ntm,ksm->ksnt", K, h.p)[:, :, 0]
    assert (zW - zp).abs().max() > 0.1


def test_gmm_of_fig1_global_closed_form():
    """Only token 2 is active: p = (k0 - k2)/||k0 - k2||^2 = (-0.1, 1)/1.01; token 1 keeps slack."""
    sol = global_convergence.gmm_of(instances.fig1("global"))
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
    gmm = global_convergence.gmm_of(inst).x
    c = (best @ gmm) / (np.linalg.norm(best, axis=-1) * np.linalg.norm(gmm))
    assert c[1] > c[0]


def test_naive_differences_round_to_zero_but_stable_ones_do_not():
    inst = instances.fig1("global")
    pr = inst.problem()
    P = torch.tensor([[[-10.0, 100.0]]], dtype=torch.float64)      # deep in saturation
    s32, f32 = saturation._naive(pr, P, torch.float32)
    s64, f64 = saturation._naive(pr, P, torch.float64)
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


def test_pair_rejects_mismatched_keymap():
    with pytest.raises(ValueError):
        w_equals_p._pair("bad", instances.fig1("global"), np.eye(2), steps=1, lr=1.0, seed=0)
