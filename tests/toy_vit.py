"""Toy ViT pieces shared by the tests of the ViT modules (vit, vit_train, vit_runs, vit_cache,
chapters.ch09_vit_sparsity): a small
model configuration, images whose class is the position of one bright patch, and a tiny cached experiment."""

from __future__ import annotations

import torch

from mmtoken.vision import vit, vit_cache, vit_train


def small(**kw) -> vit.ViTConfig:
    base = dict(image_size=8, channels=1, patch=4, width=16, depth=2, heads=2, mlp_ratio=2, n_classes=3)
    return vit.ViTConfig(**{**base, **kw})


def bright_patch_data(n: int, seed: int = 0, size: int = 8, patch: int = 4, classes: int = 3):
    """Images whose class is the position of one bright patch (a task that needs attention)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randint(0, 60, (n, 1, size, size), generator=g, dtype=torch.uint8)
    grid = size // patch
    for i in range(n):
        r, c = divmod(int(y[i]), grid)
        x[i, 0, r * patch : (r + 1) * patch, c * patch : (c + 1) * patch] = 250
    return x, y


TINY = vit_cache.Experiment(
    dataset="fashion-mnist",
    model=small(n_classes=10, heads=1),
    train=vit_train.TrainConfig(epochs=2, batch_size=32, lr=5e-3, seed=0),
    n_validation=32,
    logs_per_epoch=2,
    logs_first_epoch=4,
    n_probe=16,
    map_epochs=(0, 2),
    foreground=0.1,
)


def tiny_arrays():
    return {"train": bright_patch_data(160, seed=0, classes=4), "test": bright_patch_data(64, seed=1, classes=4)}
