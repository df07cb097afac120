"""The attention model of paper A, batched over leading dimensions.

``f(X) = <X v, softmax(K p)>`` with keys ``K = X W`` (or keys given directly), value head ``v`` and tunable token
``p``. The ``p``-dynamics need only the keys ``K`` and the token scores ``gamma_it = Y_i x_it^T v``, bundled in
:class:`AttentionProblem`.

Shapes: ``n`` inputs, ``T`` tokens, ``d`` token dimension, ``m`` key dimension; leading batch dimensions ``...``
(runs, instances) broadcast against each other.
"""

from __future__ import annotations

__all__ = ["as_tensor", "keys", "scores", "logits", "softmax_probs", "output", "AttentionProblem"]

import functools
from dataclasses import dataclass

import torch

from mmtoken import validate
from mmtoken.config import DTYPE
from mmtoken.config import device as default_device


def as_tensor(x, name: str, dtype: torch.dtype = DTYPE, device=None) -> torch.Tensor:
    """Convert to a float tensor on the package device; refuse NaN, infinity, complex and non-numbers (a
    ``ValueError`` naming ``name``)."""
    device = device or default_device()
    if isinstance(x, torch.Tensor):
        if x.is_complex():
            raise ValueError(f"{name} must be real, got a complex tensor")
        if x.device.type == "meta":
            raise ValueError(f"{name} is a meta-device tensor: it has a shape but no values")
        t = x.to(dtype=dtype, device=device)
    else:
        a = validate.numeric(x, name)
        if any(st < 0 for st in a.strides):  # torch refuses NumPy views with negative strides (a[::-1])
            a = a.copy()
        t = torch.as_tensor(a, dtype=dtype, device=device)
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return t


def _tensor(x, name: str) -> torch.Tensor:
    """Floating tensors pass as they are (the building blocks below run inside loops, in the dtype given); anything
    else is converted or refused naming ``name``."""
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.device.type != "meta":
        return x
    return as_tensor(x, name)


def _common(*ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The tensors in one dtype (the widest; float32 with float64 gives float64) and on the first one's device."""
    dtype = functools.reduce(torch.promote_types, [t.dtype for t in ts])
    return tuple(t.to(dtype=dtype, device=ts[0].device) for t in ts)


def _bool_mask(mask, device) -> torch.Tensor:
    """``mask`` as a boolean tensor on ``device``; 0/1 numbers accepted, any other value refused."""
    if not isinstance(mask, torch.Tensor):
        m = validate.numeric(mask, "mask")
        return torch.as_tensor(validate.mask(m, m.shape, "mask"), device=device)
    if mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("mask must be boolean (True at real tokens)")
    return mask.to(dtype=torch.bool, device=device)


def keys(X: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """Keys ``K = X W``: ``X (..., n, T, d)``, ``W (..., d, m)`` -> ``(..., n, T, m)``."""
    X, W = _common(_tensor(X, "X"), _tensor(W, "W"))
    if W.ndim < 2:
        raise ValueError(f"W must have shape (d, m), got {tuple(W.shape)}")
    if X.shape[-1] != W.shape[-2]:
        raise ValueError(f"X has token dimension {X.shape[-1]} but W has {W.shape[-2]} rows")
    return X @ W.unsqueeze(-3) if W.ndim > 2 else X @ W


def scores(X: torch.Tensor, Y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Token scores ``gamma_it = Y_i x_it^T v``: ``X (..., n, T, d)``, ``Y (..., n)``, ``v (..., d)`` -> ``(..., n, T)``."""
    X, Y, v = _common(_tensor(X, "X"), _tensor(Y, "Y"), _tensor(v, "v"))
    if X.ndim < 3 or Y.ndim < 1 or v.ndim < 1:
        raise ValueError(
            f"X must be (..., n, T, d), Y (..., n) and v (..., d); got {tuple(X.shape)}, "
            f"{tuple(Y.shape)}, {tuple(v.shape)}"
        )
    if X.shape[-1] != v.shape[-1]:
        raise ValueError(f"X has token dimension {X.shape[-1]} but v has {v.shape[-1]}")
    if Y.shape[-1] != X.shape[-3]:
        raise ValueError(f"Y has {Y.shape[-1]} labels but X has {X.shape[-3]} inputs")
    return Y.unsqueeze(-1) * (X @ v.unsqueeze(-1).unsqueeze(-3)).squeeze(-1)


def logits(K: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Attention logits ``z_it = <k_it, p>``: ``K (..., n, T, m)``, ``p (..., m)`` -> ``(..., n, T)``."""
    K, p = _common(_tensor(K, "K"), _tensor(p, "p"))
    if K.ndim < 3 or p.ndim < 1:
        raise ValueError(f"K must be (..., n, T, m) and p (..., m); got {tuple(K.shape)}, {tuple(p.shape)}")
    if K.shape[-1] != p.shape[-1]:
        raise ValueError(f"keys have dimension {K.shape[-1]} but p has {p.shape[-1]}")
    return (K @ p.unsqueeze(-2).unsqueeze(-1)).squeeze(-1)


def softmax_probs(K: torch.Tensor, p: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Attention ``s = softmax(K p)`` over tokens, ``(..., n, T)``; zero where ``mask`` is False."""
    z = logits(K, p)
    if mask is not None:
        mask = _bool_mask(mask, z.device)
        try:
            shape = validate.batch_shape(mask.shape, z.shape)
        except ValueError:
            raise ValueError(f"mask shape {tuple(mask.shape)} does not match the logits {tuple(z.shape)}") from None
        empty = ~mask.expand(shape).any(-1)
        if bool(empty.any()):  # softmax over no token: NaN, not an attention
            raise ValueError(f"mask leaves {int(empty.sum())} input(s) with no real token (all padding)")
        z = z.masked_fill(~mask, float("-inf"))
    return torch.softmax(z, dim=-1)


def output(X: torch.Tensor, v: torch.Tensor, K: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Model output ``f(X_i) = sum_t s_it x_it^T v``, ``(..., n)``."""
    X, v = _common(_tensor(X, "X"), _tensor(v, "v"))
    if v.ndim < 1:
        raise ValueError("v must have shape (..., d), got a scalar")
    if X.ndim < 3 or X.shape[-1] != v.shape[-1]:
        raise ValueError(f"X must be (..., n, T, d) with d = {v.shape[-1]} like v, got {tuple(X.shape)}")
    s = softmax_probs(K, p)
    return (s * (X @ v.unsqueeze(-1).unsqueeze(-3)).squeeze(-1)).sum(-1)


@dataclass
class AttentionProblem:
    """The data of the ``p``-problem with the head fixed.

    Attributes
    ----------
    K : ``(..., n, T, m)`` keys.
    gamma : ``(..., n, T)`` token scores ``Y_i x_it^T v``.
    mask : optional bool ``(..., n, T)``, True at real tokens (padding gets zero attention).
    """

    K: torch.Tensor
    gamma: torch.Tensor
    mask: torch.Tensor | None = None

    def __post_init__(self) -> None:
        self.K = as_tensor(self.K, "K")
        self.gamma = as_tensor(self.gamma, "gamma", device=self.K.device)
        if self.K.ndim < 3:
            raise ValueError(f"K must have shape (..., n, T, m), got {tuple(self.K.shape)}")
        if self.gamma.ndim < 2 or self.gamma.shape[-2:] != self.K.shape[-3:-1]:
            raise ValueError(
                f"gamma has shape {tuple(self.gamma.shape)} but K has (n, T) = {tuple(self.K.shape[-3:-1])}"
            )
        if self.K.shape[-2] < 2:
            raise ValueError("every input needs at least two tokens")
        if self.K.shape[-3] == 0 or self.K.shape[-1] == 0 or self.K.numel() == 0:
            raise ValueError(f"K must have at least one input and one key dimension, got {tuple(self.K.shape)}")
        try:
            validate.batch_shape(self.K.shape[:-3], self.gamma.shape[:-2])
        except ValueError:
            raise ValueError(
                f"the batch shapes of K {tuple(self.K.shape)} and gamma {tuple(self.gamma.shape)} do not broadcast"
            ) from None
        if self.mask is not None:
            self.mask = _bool_mask(self.mask, self.K.device)
            if self.mask.ndim < 2 or self.mask.shape[-2:] != self.gamma.shape[-2:]:
                raise ValueError(f"mask shape {tuple(self.mask.shape)} does not match gamma {tuple(self.gamma.shape)}")
            if not bool(self.mask.any(-1).all()):
                raise ValueError("an input holds only padding")

    @classmethod
    def from_data(cls, X, Y, v, W=None, mask=None) -> AttentionProblem:
        """Build from tokens ``X (..., n, T, d)``, labels ``Y (..., n)``, head ``v (d,)`` and ``W (d, m)`` (identity if None)."""
        X = as_tensor(X, "X")
        Y = as_tensor(Y, "Y", device=X.device)
        v = as_tensor(v, "v", device=X.device)
        if X.ndim < 3 or 0 in X.shape[-3:]:
            raise ValueError(f"X must have shape (..., n, T, d) with n, T, d >= 1, got {tuple(X.shape)}")
        if Y.ndim < 1 or v.ndim < 1:
            raise ValueError(f"Y must have shape (..., n) and v (..., d), got {tuple(Y.shape)} and {tuple(v.shape)}")
        if Y.shape[-1] != X.shape[-3]:
            raise ValueError(f"Y has {Y.shape[-1]} labels but X has {X.shape[-3]} inputs")
        if not bool(((Y == 1) | (Y == -1)).all()):
            raise ValueError("labels Y must be +1 or -1")
        K = X if W is None else keys(X, as_tensor(W, "W", device=X.device))
        if not bool(torch.isfinite(K).all()):
            raise ValueError("X and W: the keys X W overflow float64; rescale X or W")
        gamma = scores(X, Y, v)
        if not bool(torch.isfinite(gamma).all()):
            raise ValueError("X and v: the scores Y x^T v overflow float64; rescale X or v")
        return cls(K, gamma, mask)

    @property
    def n(self) -> int:
        return self.K.shape[-3]

    @property
    def T(self) -> int:
        return self.K.shape[-2]

    @property
    def m(self) -> int:
        return self.K.shape[-1]

    def optimal_tokens(self) -> torch.Tensor:
        """``opt_i = argmax_t gamma_it`` (padding excluded), ``(..., n)``."""
        g = self.gamma if self.mask is None else self.gamma.masked_fill(~self.mask, float("-inf"))
        return g.argmax(-1)
