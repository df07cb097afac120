"""Training the small ViT of :mod:`mmtoken.vision.vit`: the schedule, augmentation, normalisation, the loop.

:func:`train` runs AdamW with a linear warm-up and a cosine decay to 0
(:func:`lr_factor`), optional random crops and flips (:func:`augment`) and
gradient clipping, on ``uint8`` images normalised with the training set's
per-channel statistics (:class:`Normalizer`), with a pinned torch thread count
(:func:`pinned_threads`); a callback sees the running loss at chosen steps.
:func:`evaluate` measures loss and accuracy.
"""

from __future__ import annotations

__all__ = ["TrainConfig", "pinned_threads", "lr_factor", "augment", "Normalizer", "evaluate", "train"]

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from mmtoken.vision import vit


@dataclass(frozen=True)
class TrainConfig:
    """How the ViT is trained.

    Attributes
    ----------
    epochs : passes over the training set.
    batch_size : images per step (the last, smaller batch of an epoch is dropped).
    lr : peak learning rate of AdamW.
    weight_decay : AdamW's decoupled weight decay (0: nothing pulls the norms back).
    betas : AdamW's moment coefficients.
    warmup : fraction of all steps spent ramping the learning rate linearly
        from 0; then a cosine decay to 0.
    grad_clip : clip the global gradient norm to this (``None``: no clipping).
    augment : random crops (padding 4) and horizontal flips, for CIFAR-10.
    seed : seeds initialisation, data order and augmentation.
    threads : torch intra-op threads during training (``1`` makes the run
        bit-for-bit the same on every machine with the same CPU kernels,
        whatever its core count); ``None`` keeps torch's setting.
    """

    epochs: int = 3
    batch_size: int = 128
    lr: float = 1e-2
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    warmup: float = 0.05
    grad_clip: float | None = None
    augment: bool = False
    seed: int = 0
    threads: int | None = 1

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name} must be a positive integer, got {value!r}")
        for name, ok, need in (
            ("lr", lambda v: 0 < v < math.inf, "a finite number > 0"),
            ("weight_decay", lambda v: 0 <= v < math.inf, "a finite number >= 0"),
            ("warmup", lambda v: 0 <= v < 1, "in [0, 1)"),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
                raise ValueError(f"TrainConfig.{name} must be {need}, got {value!r}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"TrainConfig.betas must be two numbers in [0, 1), got {self.betas!r}")
        if self.grad_clip is not None and not 0 < self.grad_clip < math.inf:
            raise ValueError(f"TrainConfig.grad_clip must be None or a finite number > 0, got {self.grad_clip!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"TrainConfig.seed must be a non-negative integer, got {self.seed!r}")
        if self.threads is not None and (
            isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1
        ):
            raise ValueError(f"TrainConfig.threads must be None or a positive integer, got {self.threads!r}")


@contextmanager
def pinned_threads(threads: int | None) -> Iterator[None]:
    """Run the body with ``threads`` torch intra-op threads (``None``: leave torch's setting).

    One thread makes every reduction run in the same order whatever the
    machine's core count, so results are bit-identical across machines with
    the same CPU kernels; the previous setting is restored afterwards.
    """
    old = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def lr_factor(step: int, total: int, warmup: float) -> float:
    """Multiplier of the peak learning rate at ``step`` of ``total``: linear warm-up, then cosine to 0."""
    n_warm = max(1, round(warmup * total)) if warmup > 0 else 0
    if step < n_warm:
        return (step + 1) / n_warm
    progress = (step - n_warm) / max(1, total - n_warm)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def augment(images: torch.Tensor, generator: torch.Generator, pad: int = 4) -> torch.Tensor:
    """Random crop after zero padding by ``pad`` and random horizontal flip, per image.

    ``images`` ``(B, C, H, W)``; the random numbers come from ``generator`` (on the CPU).
    """
    b, _, h, w = images.shape
    padded = nn.functional.pad(images, (pad, pad, pad, pad))
    dy = torch.randint(0, 2 * pad + 1, (b,), generator=generator).to(images.device)
    dx = torch.randint(0, 2 * pad + 1, (b,), generator=generator).to(images.device)
    flip = (torch.rand(b, generator=generator) < 0.5).to(images.device)
    rows = (dy[:, None] + torch.arange(h, device=images.device))[:, None, :, None]
    cols = dx[:, None] + torch.arange(w, device=images.device)
    cols = torch.where(flip[:, None], cols.flip(-1), cols)[:, None, None, :]
    idx_b = torch.arange(b, device=images.device)[:, None, None, None]
    idx_c = torch.arange(images.shape[1], device=images.device)[None, :, None, None]
    return padded[idx_b, idx_c, rows, cols]


class Normalizer:
    """Turn ``uint8`` images into float32 with per-channel mean 0 / std 1 of the training set.

    ``mean`` and ``std`` are per-channel statistics of ``x / 255``.
    """

    def __init__(self, mean: list[float], std: list[float]) -> None:
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)

    @classmethod
    def fit(cls, images: torch.Tensor, chunk: int = 8192) -> Normalizer:
        """Per-channel mean and (unbiased) standard deviation of ``images / 255``, ``(N, C, H, W)``.

        Accumulated in float64 over chunks of ``chunk`` images, so memory stays small.
        """
        if images.ndim != 4 or images.shape[0] == 0:
            raise ValueError(f"expected a non-empty batch of images (N, C, H, W), got {tuple(images.shape)}")
        s1 = torch.zeros(images.shape[1], dtype=torch.float64)
        s2 = torch.zeros_like(s1)
        for i in range(0, images.shape[0], chunk):
            x = images[i : i + chunk].double().cpu() / 255.0
            s1 += x.sum((0, 2, 3))
            s2 += x.square().sum((0, 2, 3))
        n = images.shape[0] * images.shape[2] * images.shape[3]
        mean = s1 / n
        var = (s2 - n * mean.square()) / (n - 1)
        return cls([float(v) for v in mean], [float(v) for v in var.clamp_min(0).sqrt()])

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        x = images.float() / 255.0
        return (x - self.mean.to(x.device)) / self.std.to(x.device)


@torch.no_grad()
def evaluate(
    model: vit.ViT, images: torch.Tensor, labels: torch.Tensor, normalize: Normalizer, batch_size: int = 1000
) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of ``model`` on ``uint8`` images ``(N, C, H, W)`` and labels ``(N,)``."""
    was_training = model.training
    model.eval()
    loss, correct = 0.0, 0
    for i in range(0, len(images), batch_size):
        logits = model(normalize(images[i : i + batch_size]))
        y = labels[i : i + batch_size]
        loss += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
        correct += int((logits.argmax(-1) == y).sum())
    model.train(was_training)
    return loss / len(images), correct / len(images)


def train(
    model: vit.ViT,
    images: torch.Tensor,
    labels: torch.Tensor,
    config: TrainConfig,
    normalize: Normalizer,
    *,
    log_points: list[int] | None = None,
    on_log=None,
) -> None:
    """Train ``model`` in place with AdamW, warm-up and cosine decay.

    Parameters
    ----------
    model : the network, already on the device of ``images``.
    images : ``uint8`` ``(N, C, H, W)`` training images; labels ``int64`` ``(N,)``.
    config : the schedule (see :class:`TrainConfig`); its seed fixes the data order.
    normalize : the map from ``uint8`` images to network inputs.
    log_points : step counts (0 = before training) after which ``on_log`` is called.
    on_log : ``on_log(step, epoch, mean_train_loss_since_last_log)``.
    """
    if images.shape[0] != labels.shape[0]:
        raise ValueError(f"{images.shape[0]} images but {labels.shape[0]} labels")
    steps_per_epoch = images.shape[0] // config.batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"batch size {config.batch_size} exceeds the {images.shape[0]} training images")
    total = steps_per_epoch * config.epochs
    logs = set(log_points or [])
    gen = torch.Generator().manual_seed(config.seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total, config.warmup))
    with pinned_threads(config.threads):
        model.train()
        if on_log and 0 in logs:
            on_log(0, 0.0, float("nan"))
        step, running, count = 0, 0.0, 0
        for _epoch in range(config.epochs):
            order = torch.randperm(images.shape[0], generator=gen).to(images.device)
            for b in range(steps_per_epoch):
                idx = order[b * config.batch_size : (b + 1) * config.batch_size]
                x = images[idx]
                if config.augment:
                    x = augment(x, gen)
                loss = nn.functional.cross_entropy(model(normalize(x)), labels[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if config.grad_clip is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                opt.step()
                sched.step()
                step += 1
                running += loss.item()
                count += 1
                if on_log and step in logs:
                    on_log(step, step / steps_per_epoch, running / count)
                    model.train()
                    running, count = 0.0, 0
