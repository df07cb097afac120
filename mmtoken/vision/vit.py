"""A small vision transformer with a [CLS] token, and the statistics of its attention.

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

The statistics of the [CLS] attention over the patches (:func:`attention_statistics`
on a whole split, :func:`probe_statistics` on a batch) are what a training run
records (:func:`mmtoken.vision.vit_runs.train_into`); the training loop is :mod:`mmtoken.vision.vit_train`.
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
    "foreground_mask",
    "effective_patches",
    "attention_statistics",
    "probe_statistics",
]

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
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


# --------------------------------------------------------------------------- attention statistics


def foreground_mask(images: np.ndarray, patch: int, threshold: float | None) -> np.ndarray:
    """``bool (N, P)``: patches whose mean pixel value (``x/255``) is at least ``threshold``."""
    if threshold is None:
        return np.zeros((images.shape[0], (images.shape[2] // patch) * (images.shape[3] // patch)), bool)
    x = torch.as_tensor(images, dtype=torch.float64) / 255.0
    return (patchify(x, patch).mean(-1) >= threshold).numpy()


def _entropy(p: np.ndarray) -> np.ndarray:
    """:func:`entropy` of a NumPy array (nats, last axis)."""
    return -(p * np.log(np.clip(p, 1e-30, None))).sum(-1)


def effective_patches(p: np.ndarray) -> np.ndarray:
    """``exp(entropy)`` over the last axis: 1 for one patch, ``P`` for uniform attention."""
    return np.exp(_entropy(np.asarray(p, np.float64)))


@torch.no_grad()
def attention_statistics(
    model: ViT,
    images: np.ndarray,
    labels: np.ndarray,
    normalize: Callable[[torch.Tensor], torch.Tensor],
    fg: np.ndarray,
    batch_size: int = 1000,
) -> dict:
    """One pass over ``images``: loss, accuracy and the [CLS] attention statistics of every block.

    Parameters
    ----------
    images : ``uint8 (N, C, H, W)``; labels ``(N,)``; fg ``bool (N, P)`` foreground patches.
    normalize : the map from ``uint8`` images to network inputs (a :class:`mmtoken.vision.vit_train.Normalizer`).

    Returns
    -------
    dict with ``loss``, ``acc`` and ``layers``: one dict per block with
    ``entropy`` (mean over images and heads, nats), ``eff_image`` (mean
    effective patches of the per-image maps), ``eff_mean`` (effective patches
    of the image-averaged map, mean over heads), ``fg_share`` (mean attention
    mass on foreground patches), ``uniform`` (what uniform attention puts on
    them: the mean share of foreground patches), ``top1_fg`` (fraction of
    images whose most attended patch is foreground); and ``mean_map``
    ``(depth, P)``, the image- and head-averaged map.
    """
    model.eval()
    dev = next(model.parameters()).device
    depth, n = len(model.blocks), len(images)
    loss, correct = 0.0, 0
    ent, eff, share, top = (np.zeros(depth) for _ in range(4))
    sums = None
    for i in range(0, n, batch_size):
        x = normalize(torch.as_tensor(images[i : i + batch_size], device=dev))
        y = torch.as_tensor(labels[i : i + batch_size], device=dev)
        logits, attns = model(x, return_attention=True)
        loss += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
        correct += int((logits.argmax(-1) == y).sum())
        f = fg[i : i + batch_size]
        a = np.stack([cls_patch_attention(att.double()).cpu().numpy() for att in attns])  # (depth, B, h, P)
        sums = a.sum(1) if sums is None else sums + a.sum(1)
        h = _entropy(a)  # (depth, B, h)
        ent += h.mean(-1).sum(-1)
        eff += np.exp(h).mean(-1).sum(-1)
        head_mean = a.mean(2)  # (depth, B, P)
        share += (head_mean * f).sum(-1).sum(-1)
        top += f[np.arange(len(f)), head_mean.argmax(-1)].sum(-1)
    mean_maps = sums / n  # (depth, h, P)
    layers = [
        {
            "entropy": ent[l] / n,
            "eff_image": eff[l] / n,
            "eff_mean": float(effective_patches(mean_maps[l]).mean()),
            "fg_share": share[l] / n,
            "uniform": float(fg.mean()),
            "top1_fg": top[l] / n,
        }
        for l in range(depth)
    ]
    return {
        "loss": loss / n,
        "acc": correct / n,
        "layers": [{k: float(v) for k, v in d.items()} for d in layers],
        "mean_map": mean_maps.mean(1),
    }


@torch.no_grad()
def probe_statistics(model: ViT, x: torch.Tensor, fg: torch.Tensor) -> dict[str, list]:
    """Attention statistics of every layer on the (normalised) probe batch ``x`` ``(B, C, H, W)``.

    ``fg`` ``(B, P)`` marks the foreground patches (float). Returns, per block (lists
    of ``depth``), ``entropy`` (mean over images and heads, nats), ``eff`` (mean
    ``exp(entropy)``), ``eff_mean`` (effective patches of the batch-averaged map, mean
    over heads), ``fg_share`` (attention mass on foreground patches) and ``maps`` (the
    head-averaged maps ``(B, P)``).
    """
    model.eval()
    _, attns = model(x, return_attention=True)
    out = {"entropy": [], "eff": [], "eff_mean": [], "fg_share": [], "maps": []}
    for attn in attns:
        a = cls_patch_attention(attn.double())  # (B, h, P)
        h = entropy(a)  # (B, h)
        out["entropy"].append(float(h.mean()))
        out["eff"].append(float(h.exp().mean()))
        out["eff_mean"].append(float(entropy(a.mean(0)).exp().mean()))
        out["fg_share"].append(float((a.mean(1) * fg).sum(-1).mean()))
        out["maps"].append(a.mean(1).float().cpu().numpy())
    return out
