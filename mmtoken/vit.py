"""A small vision transformer with a [CLS] token, and the attention statistics of its last layer.

Architecture (pre-LayerNorm ViT, Dosovitskiy et al. 2021):

* the image ``(C, H, W)`` is cut into ``P = (H/patch) * (W/patch)``
  non-overlapping patches, each flattened and mapped linearly to ``width``;
* a learned [CLS] token is prepended and learned position embeddings added:
  ``T = P + 1`` tokens;
* ``depth`` blocks ``x <- x + Attn(LN(x))``, ``x <- x + MLP(LN(x))`` with
  ``heads`` heads of size ``width / heads`` and an MLP of width
  ``mlp_ratio * width`` (GELU);
* the class logits are a linear map of the final-LayerNormed [CLS] token.

Queries and keys have no bias, so in each head the attention logits are
``LN(x_s)ᵀ W_Q W_Kᵀ LN(x_t) / sqrt(d_head)``: the matrix ``W = W_Q W_Kᵀ``
plays the role of paper A's key-query matrix and the [CLS] query
``W_Qᵀ LN(x_cls)`` the role of its token ``p``. Its norm
(:func:`key_query_norm`) is the quantity the theory says must grow for the
softmax to select tokens.
"""

from __future__ import annotations

__all__ = [
    "ViTConfig",
    "Attention",
    "Block",
    "ViT",
    "patchify",
    "cls_patch_attention",
    "entropy",
    "key_query_norm",
    "WEIGHT_NORMS",
    "weight_norms",
    "TrainConfig",
    "pinned_threads",
    "lr_factor",
    "augment",
    "Normalizer",
    "evaluate",
    "train",
    "cls_logits",
    "logit_spread_bound",
]

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ViTConfig:
    """Size of the model.

    Attributes
    ----------
    image_size : side of the square input images (pixels).
    channels : colour channels (1 for Fashion-MNIST, 3 for CIFAR-10).
    patch : side of a square patch; must divide ``image_size``.
    width : token dimension ``d``.
    depth : number of transformer blocks.
    heads : attention heads per block; must divide ``width``.
    mlp_ratio : hidden width of the MLP over ``width``.
    n_classes : output classes.
    init_std : standard deviation of the (truncated) normal initialisation
        of all linear maps, the [CLS] token and the position embeddings.
    """

    image_size: int = 28
    channels: int = 1
    patch: int = 4
    width: int = 64
    depth: int = 2
    heads: int = 1
    mlp_ratio: int = 2
    n_classes: int = 10
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in ("image_size", "channels", "patch", "width", "depth", "heads", "mlp_ratio", "n_classes"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"ViTConfig.{name} must be a positive integer, got {getattr(self, name)}")
        if self.image_size % self.patch:
            raise ValueError(f"patch {self.patch} does not divide image_size {self.image_size}")
        if self.width % self.heads:
            raise ValueError(f"heads {self.heads} does not divide width {self.width}")
        if not self.init_std > 0:
            raise ValueError(f"init_std must be positive, got {self.init_std}")

    @property
    def grid(self) -> int:
        """Patches per side."""
        return self.image_size // self.patch

    @property
    def n_patches(self) -> int:
        """``P``, the number of patch tokens."""
        return self.grid**2

    def to_dict(self) -> dict:
        return asdict(self)


class Attention(nn.Module):
    """Multi-head self-attention that also returns its weights.

    ``forward(x)`` with ``x`` of shape ``(B, T, d)`` returns the output
    ``(B, T, d)`` and the attention weights ``(B, heads, T, T)`` (each row
    sums to one).
    """

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, width // heads
        self.q = nn.Linear(width, width, bias=False)
        self.k = nn.Linear(width, width, bias=False)
        self.v = nn.Linear(width, width)
        self.out = nn.Linear(width, width)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, width)`` -> ``(B, heads, T, head_dim)``: the per-head view of a projection."""
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)  # (B, h, T, dh)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = self.split_heads(self.q(x)), self.split_heads(self.k(x)), self.split_heads(self.v(x))
        logits = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        attn = logits.softmax(dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(x.shape)
        return self.out(y), attn

    def key_query_matrices(self) -> torch.Tensor:
        """``W_Q^h (W_K^h)ᵀ`` per head, shape ``(heads, d, d)``, in the convention ``logit = x W xᵀ``."""
        wq = self.q.weight.T.reshape(-1, self.heads, self.head_dim).transpose(0, 1)  # (h, d, dh)
        wk = self.k.weight.T.reshape(-1, self.heads, self.head_dim).transpose(0, 1)
        return wq @ wk.transpose(-1, -2)

    def value_output_matrices(self) -> torch.Tensor:
        """``W_V^h W_O^h`` per head, shape ``(heads, d, d)``: what head ``h`` adds to a token per unit of attention.

        In the row-vector convention of :meth:`key_query_matrices` a token
        ``x`` attended with weight 1 contributes ``x W_V^h W_O^h`` (biases
        aside). Like ``W_Q W_Kᵀ`` it is a product of two matrices initialised
        at the same scale, so it is the like-for-like control for the growth of
        the key-query product.
        """
        wv = self.v.weight.T.reshape(-1, self.heads, self.head_dim).transpose(0, 1)  # (h, d, dh)
        wo = self.out.weight.T.reshape(self.heads, self.head_dim, -1)  # (h, dh, d)
        return wv @ wo


class Block(nn.Module):
    """Pre-LN transformer block; ``forward(x)`` returns ``(x, attention weights)``."""

    def __init__(self, width: int, heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.mlp = nn.Sequential(nn.Linear(width, mlp_ratio * width), nn.GELU(), nn.Linear(mlp_ratio * width, width))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y, attn = self.attn(self.ln1(x))
        x = x + y
        return x + self.mlp(self.ln2(x)), attn


class ViT(nn.Module):
    """Vision transformer with a [CLS] token (see the module docstring).

    ``forward(images)`` maps float images ``(B, C, H, W)`` to class logits
    ``(B, n_classes)``; ``forward(images, return_attention=True)`` also
    returns the attention weights of every block, a list of ``depth`` tensors
    ``(B, heads, T, T)`` with token 0 the [CLS] token.
    """

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = c = config
        self.embed = nn.Linear(c.channels * c.patch * c.patch, c.width)
        self.cls = nn.Parameter(torch.zeros(1, 1, c.width))
        self.pos = nn.Parameter(torch.zeros(1, c.n_patches + 1, c.width))
        self.blocks = nn.ModuleList(Block(c.width, c.heads, c.mlp_ratio) for _ in range(c.depth))
        self.ln = nn.LayerNorm(c.width)
        self.head = nn.Linear(c.width, c.n_classes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Truncated-normal(``init_std``) weights, zero biases, unit LayerNorms."""
        std = self.config.init_std
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=std, a=-2 * std, b=2 * std)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.trunc_normal_(self.cls, std=std, a=-2 * std, b=2 * std)
        nn.init.trunc_normal_(self.pos, std=std, a=-2 * std, b=2 * std)

    def patchify(self, images: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W)`` -> ``(B, P, C*patch*patch)``, patches in row-major grid order."""
        c = self.config
        if images.ndim != 4 or tuple(images.shape[1:]) != (c.channels, c.image_size, c.image_size):
            raise ValueError(
                f"expected images of shape (B, {c.channels}, {c.image_size}, {c.image_size}), got {tuple(images.shape)}"
            )
        return patchify(images, c.patch)

    def forward(self, images: torch.Tensor, return_attention: bool = False):
        x = self.embed(self.patchify(images))
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        attns = []
        for block in self.blocks:
            x, attn = block(x)
            attns.append(attn)
        logits = self.head(self.ln(x[:, 0]))
        return (logits, attns) if return_attention else logits


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """Cut ``(B, C, H, W)`` into ``(B, (H/patch)*(W/patch), C*patch*patch)`` patches (row-major grid)."""
    b, ch, h, w = images.shape
    if h % patch or w % patch:
        raise ValueError(f"patch {patch} does not divide the image size {h}x{w}")
    x = images.reshape(b, ch, h // patch, patch, w // patch, patch)
    return x.permute(0, 2, 4, 1, 3, 5).reshape(b, (h // patch) * (w // patch), ch * patch * patch)


def cls_patch_attention(attn: torch.Tensor) -> torch.Tensor:
    """The [CLS] row of an attention tensor, restricted to the patches and renormalised.

    Parameters
    ----------
    attn : ``(B, heads, T, T)`` attention weights, token 0 = [CLS].

    Returns
    -------
    ``(B, heads, T-1)``: ``a_t / sum_{t>=1} a_t`` for the [CLS] query, sums to one.
    """
    if attn.ndim != 4 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"expected attention weights (B, heads, T, T), got {tuple(attn.shape)}")
    row = attn[:, :, 0, 1:]
    return row / row.sum(-1, keepdim=True)


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) over the last axis; ``0 log 0 = 0``."""
    return -(probs * torch.log(probs.clamp_min(1e-30))).sum(-1)


def key_query_norm(model: ViT, layer: int = -1) -> tuple[float, float]:
    """Norms of the key-query matrices ``W_Q^h (W_K^h)ᵀ`` of one block.

    Returns
    -------
    (frobenius, spectral) : the Frobenius norm over all heads together
    (root of the sum of squares) and the largest spectral norm of a head.
    With one head these are ``||W_Q W_Kᵀ||_F`` and ``||W_Q W_Kᵀ||_2``.
    """
    with torch.no_grad():
        w = model.blocks[layer].attn.key_query_matrices().double()
        return float(torch.linalg.matrix_norm(w).square().sum().sqrt()), float(torch.linalg.matrix_norm(w, 2).max())


WEIGHT_NORMS = ("qk", "qk_spec", "q", "k", "v", "ov", "mlp_in", "mlp_out")
"""The names :func:`weight_norms` returns, in order."""


def weight_norms(model: ViT, layer: int = -1) -> dict[str, float]:
    """Frobenius norms of the weights of one block: the key-query product and its controls.

    Returns
    -------
    dict with ``qk`` (``||W_Q W_Kᵀ||_F`` over all heads, as :func:`key_query_norm`),
    ``qk_spec`` (its largest per-head spectral norm), ``q`` and ``k``
    (``||W_Q||_F``, ``||W_K||_F``), ``v`` (the value projection ``||W_V||_F``),
    ``ov`` (``||W_V W_O||_F`` over heads, :meth:`Attention.value_output_matrices`),
    ``mlp_in`` and ``mlp_out`` (the two weight matrices of the MLP).
    """
    block = model.blocks[layer]
    fro, spec = key_query_norm(model, layer)
    with torch.no_grad():
        ov = block.attn.value_output_matrices().double()
        out = {
            "qk": fro,
            "qk_spec": spec,
            "q": float(block.attn.q.weight.double().norm()),
            "k": float(block.attn.k.weight.double().norm()),
            "v": float(block.attn.v.weight.double().norm()),
            "ov": float(torch.linalg.matrix_norm(ov).square().sum().sqrt()),
            "mlp_in": float(block.mlp[0].weight.double().norm()),
            "mlp_out": float(block.mlp[2].weight.double().norm()),
        }
    return {k: out[k] for k in WEIGHT_NORMS}


# --------------------------------------------------------------------------- training


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

    def to_dict(self) -> dict:
        return asdict(self)


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
    model: ViT, images: torch.Tensor, labels: torch.Tensor, normalize: Normalizer, batch_size: int = 1000
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
    model: ViT,
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


# --------------------------------------------------------------------------- logit spread and its bound


@torch.no_grad()
def cls_logits(model: ViT, inputs: torch.Tensor, layer: int = -1) -> torch.Tensor:
    """Attention logits of the [CLS] query over the patches in block ``layer``.

    Parameters
    ----------
    inputs : normalised images ``(B, C, H, W)``.

    Returns
    -------
    ``(B, heads, P)``; their softmax is :func:`cls_patch_attention` of that block.
    """
    layer = layer % len(model.blocks)
    x = model.embed(model.patchify(inputs))
    x = torch.cat([model.cls.expand(x.shape[0], -1, -1), x], dim=1) + model.pos
    for block in model.blocks[:layer]:
        x, _ = block(x)
    block = model.blocks[layer]
    u = block.ln1(x)
    att = block.attn
    q, k = att.split_heads(att.q(u)), att.split_heads(att.k(u))
    return (q[:, :, :1] @ k[:, :, 1:].transpose(-1, -2)).squeeze(2) / math.sqrt(att.head_dim)


def logit_spread_bound(model: ViT, layer: int = -1) -> float:
    """An upper bound on the spread ``max_t z_t - min_t z_t`` of the [CLS] logits of block ``layer``.

    With ``LN(x) = g * x_hat + b`` (``||x_hat|| = sqrt(d)``), every head satisfies
    ``spread <= ||W_h||_2 (||g||_inf sqrt(d) + ||b||) 2 ||g||_inf sqrt(d) / sqrt(d_h)``,
    ``W_h = W_Q^h (W_K^h)ᵀ``; this returns the largest over heads.
    """
    block = model.blocks[layer]
    with torch.no_grad():
        d = block.ln1.normalized_shape[0]
        g = float(block.ln1.weight.abs().max())
        b = float(block.ln1.bias.norm())
        w2 = float(torch.linalg.matrix_norm(block.attn.key_query_matrices().double(), 2).max())
    return w2 * (g * math.sqrt(d) + b) * 2 * g * math.sqrt(d) / math.sqrt(block.attn.head_dim)
