"""Losses of Assumption A (paper A): strictly decreasing, bounded derivative on bounded sets.

Each loss provides its value ``l(u)``, its derivative ``l'(u) < 0`` and
``log|l'(u)|``; the last is what the saturation-safe gradients use, and it
stays finite where ``l'(u)`` itself underflows (large margins ``u``).
"""

from __future__ import annotations

__all__ = ["Loss", "LOSSES", "get_loss"]

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Loss:
    """A margin loss ``l(u)`` with ``u = Y f(X)``."""

    name: str
    value: Callable[[torch.Tensor], torch.Tensor]
    deriv: Callable[[torch.Tensor], torch.Tensor]
    log_neg_deriv: Callable[[torch.Tensor], torch.Tensor]
    excess: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    """``excess(g, h) = l(g + h) - l(g)`` computed without cancellation for tiny ``h``."""

    def __repr__(self) -> str:
        return f"Loss({self.name!r})"


logistic = Loss(
    "logistic",
    value=lambda u: F.softplus(-u),  # log(1 + e^{-u}) without overflow
    deriv=lambda u: -torch.sigmoid(-u),
    log_neg_deriv=lambda u: -F.softplus(u),  # log sigmoid(-u)
    excess=lambda g, h: torch.log1p(torch.sigmoid(-g) * torch.expm1(-h)),
)
exponential = Loss(
    "exponential",
    value=lambda u: torch.exp(-u),
    deriv=lambda u: -torch.exp(-u),
    log_neg_deriv=lambda u: -u,
    excess=lambda g, h: torch.exp(-g) * torch.expm1(-h),
)
correlation = Loss(
    "correlation",
    value=lambda u: -u,
    deriv=lambda u: -torch.ones_like(u),
    log_neg_deriv=lambda u: torch.zeros_like(u),
    excess=lambda g, h: -h,
)

LOSSES = {loss.name: loss for loss in (logistic, exponential, correlation)}


def get_loss(loss: str | Loss) -> Loss:
    """Look a loss up by name (``"logistic"``, ``"exponential"``, ``"correlation"``)."""
    if isinstance(loss, Loss):
        return loss
    if not isinstance(loss, str):
        raise ValueError(f"loss must be a name in {sorted(LOSSES)} or a Loss, got {type(loss).__name__}")
    try:
        return LOSSES[loss]
    except KeyError:
        raise ValueError(f"unknown loss {loss!r}; choose one of {sorted(LOSSES)}") from None
