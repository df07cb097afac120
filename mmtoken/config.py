"""Configuration in one place: the size switch, the device, dtype, seeding, progress bars.

The book runs at two scales:

``quick``
    the default: every chapter executes in seconds to a few minutes on a
    2-core laptop CPU; this is what nbval and the claims ledger check.
``paper``
    the published (or larger) sizes: more steps, more instances, longer
    training; meant for a GPU.

Select the scale with the environment variable ``MMTOKEN_SCALE`` or with
:func:`set_scale`; experiments read it through :func:`scale` and
:func:`pick`.
"""
from __future__ import annotations

import os
import random
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TypeVar

import numpy as np
import torch

SCALES = ("quick", "paper")
DTYPE = torch.float64
"""Default dtype of the theory chapters: the softmax saturates by design."""

T = TypeVar("T")

_scale: str | None = None
_progress: str | None = None


def scale() -> str:
    """The current size, ``"quick"`` (default) or ``"paper"``."""
    value = _scale or os.environ.get("MMTOKEN_SCALE", "quick")
    if value not in SCALES:
        raise ValueError(
            f"MMTOKEN_SCALE={value!r} is not a known scale; choose one of {SCALES}"
        )
    return value


def set_scale(value: str) -> None:
    """Set the size for this process (overrides ``MMTOKEN_SCALE``)."""
    global _scale
    if value not in SCALES:
        raise ValueError(f"scale {value!r} is not one of {SCALES}")
    _scale = value


@contextmanager
def use_scale(value: str) -> Iterator[None]:
    """Temporarily run at ``value``."""
    global _scale
    old = _scale
    set_scale(value)
    try:
        yield
    finally:
        _scale = old


def pick(quick: T, paper: T, which: str | None = None) -> T:
    """Return ``quick`` or ``paper`` according to the current scale."""
    return paper if (which or scale()) == "paper" else quick


def device() -> torch.device:
    """The compute device: CUDA when present (override with ``MMTOKEN_DEVICE``)."""
    name = os.environ.get("MMTOKEN_DEVICE")
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a CPU torch generator seeded with ``seed``."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def data_dir() -> Path:
    """Folder for downloaded data and cached results (``MMTOKEN_DATA`` or ``./data``).

    Defaults to the ``data/`` folder of the repository when the package is
    installed from a checkout, else to ``~/.cache/mmtoken``.
    """
    env = os.environ.get("MMTOKEN_DATA")
    if env:
        path = Path(env)
    else:
        repo = Path(__file__).resolve().parent.parent
        path = repo / "data" if (repo / "pyproject.toml").exists() else Path.home() / ".cache" / "mmtoken"
    path.mkdir(parents=True, exist_ok=True)
    return path


def progress_enabled(total_work: int, threshold: int = 200_000) -> bool:
    """Whether a loop of ``total_work`` elementary updates should show a progress bar.

    ``MMTOKEN_PROGRESS`` = ``on`` / ``off`` / ``auto`` (default). In ``auto``
    mode a bar is shown only for long runs and only on an interactive
    terminal, so notebooks (whose stored outputs nbval compares), tests and
    logs stay silent.
    """
    mode = _progress or os.environ.get("MMTOKEN_PROGRESS", "auto")
    if mode == "on":
        return True
    if mode == "off":
        return False
    return total_work >= threshold and sys.stderr.isatty()


def set_progress(mode: str) -> None:
    """Force progress bars ``"on"``, ``"off"`` or back to ``"auto"``."""
    global _progress
    if mode not in ("on", "off", "auto"):
        raise ValueError(f"progress mode {mode!r} is not one of on/off/auto")
    _progress = mode
