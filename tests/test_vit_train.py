"""mmtoken.vision.vit_train, training the small ViT: the schedule, augmentation, normalisation, the loop, its settings."""

from __future__ import annotations

import math

import pytest
import torch
from toy_vit import bright_patch_data, small

from mmtoken.chapters import ch09_vit_sparsity as vs
from mmtoken.vision import vit, vit_train


def test_lr_factor_warmup_then_cosine():
    total = 100
    f = [vit_train.lr_factor(s, total, 0.1) for s in range(total)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert f[10] == pytest.approx(1.0) and all(a >= b for a, b in zip(f[10:], f[11:]))
    assert vit_train.lr_factor(total, total, 0.1) == pytest.approx(0.0)
    assert vit_train.lr_factor(0, total, 0.0) == pytest.approx(1.0)


def test_augment_crops_and_flips():
    x = torch.arange(2 * 3 * 6 * 6, dtype=torch.float32).view(2, 3, 6, 6) + 1
    y = vit_train.augment(x, torch.Generator().manual_seed(0), pad=2)
    assert y.shape == x.shape
    for i in range(2):  # every kept value comes from the same image, channels move together
        vals = set(y[i].unique().tolist()) - {0.0}
        assert vals <= set(x[i].unique().tolist())
    assert torch.equal(vit_train.augment(x, torch.Generator().manual_seed(0), pad=2), y)


def test_normalizer():
    x = torch.randint(0, 256, (50, 3, 4, 4), dtype=torch.uint8)
    n = vit_train.Normalizer.fit(x)
    z = n(x)
    torch.testing.assert_close(z.mean((0, 2, 3)), torch.zeros(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(z.std((0, 2, 3)), torch.ones(3), atol=1e-3, rtol=0)
    chunked = vit_train.Normalizer.fit(x, chunk=7)
    torch.testing.assert_close(chunked.mean, n.mean)
    torch.testing.assert_close(chunked.std, n.std)
    with pytest.raises(ValueError, match="non-empty batch"):
        vit_train.Normalizer.fit(x[:0])


def test_train_is_deterministic_and_learns():
    x, y = bright_patch_data(256)
    cfg = vit_train.TrainConfig(epochs=10, batch_size=32, lr=3e-3, seed=3)
    norm = vit_train.Normalizer.fit(x)
    states, logs = [], []
    for _ in range(2):
        torch.manual_seed(0)
        model = vit.ViT(small())
        calls = []
        vit_train.train(
            model, x, y, cfg, norm, log_points=[0, 8, 80], on_log=lambda s, e, l, calls=calls: calls.append((s, e, l))
        )
        states.append(model.state_dict())
        logs.append(calls)
    for k in states[0]:
        assert torch.equal(states[0][k], states[1][k])
    assert [c[:2] for c in logs[0]] == [(0, 0.0), (8, 1.0), (80, 10.0)]
    loss, acc = vit_train.evaluate(model, x, y, norm)
    assert acc > 0.9 and loss < 0.5


def test_train_bad_input():
    x, y = bright_patch_data(16)
    model = vit.ViT(small())
    norm = vit_train.Normalizer.fit(x)
    with pytest.raises(ValueError, match="exceeds"):
        vit_train.train(model, x, y, vit_train.TrainConfig(batch_size=64), norm)
    with pytest.raises(ValueError, match="labels"):
        vit_train.train(model, x, y[:3], vit_train.TrainConfig(batch_size=4), norm)
    with pytest.raises(ValueError, match="lr"):
        vit_train.TrainConfig(lr=0.0)


def test_paper_model_takes_one_step_on_cifar_shaped_input():
    torch.manual_seed(0)
    exp = vs.experiment(vs.settings("paper"))
    assert (exp.dataset, exp.model.grid, exp.model.channels) == ("cifar-10", 16, 3)
    model = vit.ViT(exp.model)
    x = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    loss = torch.nn.functional.cross_entropy(
        model(vit_train.Normalizer([0.5] * 3, [0.25] * 3)(vit_train.augment(x, torch.Generator()))),
        torch.tensor([1, 2]),
    )
    loss.backward()
    assert math.isfinite(loss.item())


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"epochs": 0}, "epochs"),
        ({"epochs": 2.5}, "epochs"),
        ({"batch_size": -1}, "batch_size"),
        ({"lr": float("nan")}, "lr"),
        ({"lr": float("inf")}, "lr"),
        ({"lr": -1e-3}, "lr"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"warmup": 1.0}, "warmup"),
        ({"warmup": float("nan")}, "warmup"),
        ({"betas": (0.9, 1.0)}, "betas"),
        ({"grad_clip": 0.0}, "grad_clip"),
        ({"grad_clip": float("nan")}, "grad_clip"),
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"threads": 0}, "threads"),
    ],
)
def test_bad_train_config_names_the_argument(kw, match):
    with pytest.raises(ValueError, match=f"TrainConfig.{match}"):
        vit_train.TrainConfig(**kw)


def test_pinned_threads_restores_the_setting():
    before = torch.get_num_threads()
    with vit_train.pinned_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with vit_train.pinned_threads(None):
        assert torch.get_num_threads() == before
