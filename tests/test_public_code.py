"""The replica of the public code (mmtoken.attention.public_code) and the trap built on it (tour, saturation appendix)."""

import numpy as np
import pytest
import torch
from torch import nn

from mmtoken.attention import instances, public_code, train
from mmtoken.chapters import ch00_tour as tour


class _OnePrompt(nn.Module):
    """One prompt, written out as a plain single-start module (the shape the public notebooks use)."""

    def __init__(self, d, weight, v, p0):
        super().__init__()
        self.query = nn.Linear(d, d, bias=False)
        self.key = nn.Linear(d, d, bias=False)
        self.query.weight.data = weight.clone()
        self.key.weight.data = weight.clone()
        self.w = nn.Parameter(v.clone())
        self.prompt = nn.Parameter(p0.clone())

    def forward(self, X):
        q = self.query(self.prompt.unsqueeze(0).expand(X.size(0), 1, -1))  # (n, 1, d)
        a = torch.softmax(q @ self.key(X).transpose(-2, -1), dim=-1)  # (n, 1, T)
        return (a @ X)[:, 0] @ self.w


def _loop_one_start(X, Y, v, p0, weight, steps, eps):
    m = _OnePrompt(X.shape[-1], weight, v, p0)
    opt = torch.optim.SGD([m.prompt], lr=0.1)
    out = [m.prompt.detach().clone()]
    for _ in range(steps):
        opt.zero_grad()
        torch.log(1 + torch.exp(-Y * m(X))).mean().backward()
        m.prompt.grad /= m.prompt.grad.norm() + eps
        opt.step()
        out.append(m.prompt.detach().clone())
    return torch.stack(out)


def test_batched_replica_equals_one_module_per_start_bit_for_bit():
    inst = instances.fig1("global")
    steps = 250  # past saturation in float32 (||p|| ~ 15)
    h = public_code.run_instance(inst, steps=steps)
    X = torch.tensor(inst.X, dtype=torch.float32)
    weight = torch.tensor(public_code.token_space_weight(inst.W), dtype=torch.float32)
    for j, s in enumerate(inst.starts):
        ref = _loop_one_start(
            X,
            torch.tensor([1.0]),
            torch.tensor([0.0, 0.0, 1.0]),
            torch.tensor([s[0], s[1], 0.0], dtype=torch.float32),
            weight,
            steps,
            public_code.EPS_FIG1,
        )
        assert torch.equal(ref[:, :2].double(), h.p[:, j])


def test_normalization_is_g_over_norm_plus_eps():
    inst = instances.fig1("global")
    h = public_code.run_instance(inst, steps=400, dtype=torch.float64)
    step = (h.p[1:] - h.p[:-1]).norm(dim=-1)  # (steps, starts)
    g = h.extra["grad_norm"][:-1]
    expected = 0.1 * g / (g + public_code.EPS_FIG1)
    assert torch.allclose(step, expected, rtol=1e-9, atol=1e-15)
    assert float(step[-1].max()) < 0.05  # ||g|| << 1e-9: the run freezes
    assert bool(torch.isnan(h.extra["grad_norm"][-1]).all())


def test_float64_replica_agrees_with_the_stable_trainer_before_saturation():
    inst = instances.fig1("global")
    rep = public_code.run_instance(inst, steps=60, dtype=torch.float64, eps=0.0)
    with torch.inference_mode():
        st = train.train_p(inst.problem(), inst.starts, steps=60, lr=0.1, record_every=1, record_probs=False)
    assert torch.allclose(rep.p, st.p, atol=1e-10)


def test_replica_leaves_threads_and_rng_as_they_were():
    threads = torch.get_num_threads()
    state = torch.random.get_rng_state()
    public_code.run_instance(instances.fig1("global"), steps=2)
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.random.get_rng_state(), state)


def test_replica_rejects_bad_input():
    X = np.zeros((1, 3, 3))
    with pytest.raises(ValueError, match="starts"):
        public_code.public_normalized_gd(X, np.ones(1), np.ones(3), np.zeros((2, 2)), steps=1)
    with pytest.raises(ValueError, match="v must"):
        public_code.public_normalized_gd(X, np.ones(1), np.ones(2), np.zeros((2, 3)), steps=1)
    with pytest.raises(ValueError, match="eps"):
        public_code.public_normalized_gd(X, np.ones(1), np.ones(3), np.zeros((2, 3)), steps=1, eps=-1.0)
    with pytest.raises(ValueError, match="orthonormal"):
        public_code.token_space_weight(2 * np.eye(3)[:, :2])


def test_picture_departure_is_measured_from_the_paths():
    r = tour.published_picture(tour.Settings(steps=200))
    first = r.first_departure(0.05)
    gap = r.gap
    for j, k in enumerate(first):
        assert k > 0 and gap[k, j] > 0.05 and np.all(gap[:k, j] <= 0.05)


def test_long_public_runs_show_a_progress_bar_only_when_asked(capsys):
    """The tour's trap runs the public loop for 10 500 steps (~19 s): a bar in Jupyter, none in tests."""
    from mmtoken import config

    inst = instances.fig1("global")
    try:
        config.set_progress("on")
        public_code.run_instance(inst, steps=3)
        assert "public code" in capsys.readouterr().err
        config.set_progress("off")
        public_code.run_instance(inst, steps=3)
        assert capsys.readouterr().err == ""
    finally:
        config.reset()
