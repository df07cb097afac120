"""Toy ViT pieces shared by the tests of the ViT modules (vit, vit_train, vit_runs, vit_cache,
chapters.ch09_vit_sparsity): a small model configuration, images whose class is the position of one bright patch,
a tiny stored experiment, and the bit-for-bit comparison of two runs."""

from __future__ import annotations

import numpy as np
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


def _same_array(a: np.ndarray | None, b: np.ndarray | None, what: str) -> None:
    assert (a is None) == (b is None), what
    if a is not None:
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), f"{what} differs"


def assert_same_run(a: vit_cache.Result, b: vit_cache.Result) -> None:
    """``a`` and ``b`` hold the same numbers, bit for bit (their timings and where they were read from aside)."""
    assert a.experiment == b.experiment and a.classes == b.classes
    assert a.log.keys() == b.log.keys()
    for k in a.log:
        _same_array(a.log[k], b.log[k], f"log[{k!r}]")
    for k in ("epoch_end", "val_loss", "val_acc", "test_mean_map", "probe_attention", "probe_images", "probe_labels"):
        _same_array(getattr(a, k), getattr(b, k), k)
    _same_array(a.probe_fg, b.probe_fg, "probe_fg")
    assert repr(a.test) == repr(b.test)  # floats by their repr: bit for bit
    assert (a.normalizer.mean.tolist(), a.normalizer.std.tolist()) == (
        b.normalizer.mean.tolist(),
        b.normalizer.std.tolist(),
    )


def assert_same_checkpoints(a: vit_cache.Result, b: vit_cache.Result) -> None:
    """The stored models of ``a`` and ``b`` are the same at every mapped epoch, bit for bit."""
    for e in a.experiment.epochs_mapped:
        sa, sb = vit_cache.checkpoint(a, e).state_dict(), vit_cache.checkpoint(b, e).state_dict()
        assert sa.keys() == sb.keys()
        for k in sa:
            _same_array(sa[k].numpy(), sb[k].numpy(), f"epoch {e} {k}")
