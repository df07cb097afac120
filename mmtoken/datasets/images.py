"""The image datasets of the vision-transformer chapter by name: Fashion-MNIST and CIFAR-10.

:func:`load_images` reads one split through the dataset's reader (:mod:`.fashion_mnist`,
:mod:`.cifar10`); :func:`data_source` says where the cached copy came from. Images come back
as ``uint8`` arrays ``(N, C, H, W)`` and labels as ``int64`` arrays ``(N,)``.
"""

from __future__ import annotations

__all__ = ["IMAGE_DATASETS", "load_images", "data_source"]

import os
from pathlib import Path

import numpy as np

from mmtoken.datasets import cifar10, fashion_mnist
from mmtoken.datasets.download import cache_dir, fit_line, read_origins

IMAGE_DATASETS = {"fashion-mnist": fashion_mnist.FASHION_MNIST_CLASSES, "cifar-10": cifar10.CIFAR10_CLASSES}


def load_images(name: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Images ``uint8 (N, C, H, W)`` and labels ``int64 (N,)`` of ``name`` in :data:`IMAGE_DATASETS`.

    From the first source that has them (the cache, a local copy, a download); :func:`data_source` says which.
    """
    if name == "fashion-mnist":
        return fashion_mnist.load_fashion_mnist(split)
    if name == "cifar-10":
        return cifar10.load_cifar10(split)
    raise ValueError(f"unknown image dataset {name!r}; choose one of {tuple(IMAGE_DATASETS)}")


def data_source(name: str, *, folder: os.PathLike | None = None) -> str:
    """One line (at most 72 characters) saying where the cached copy of ``name`` came from.

    For a chapter to print after loading, e.g. ``"fashion-mnist: Debian package dataset-fashion-mnist"``.
    Reads only the origin record the loaders keep in the cache folder, so it says the same on every
    run that reuses the cache.

    Parameters
    ----------
    name : a name in :data:`IMAGE_DATASETS`.
    folder : the cache folder, ``data/<name>/`` by default.

    Returns
    -------
    ``"<name>: <origin>"``; ``"<name>: not loaded yet"`` before the first load.
    """
    if name not in IMAGE_DATASETS:
        raise ValueError(f"unknown image dataset {name!r}; choose one of {tuple(IMAGE_DATASETS)}")
    folder = Path(folder) if folder is not None else cache_dir(name)
    if name == "fashion-mnist":
        files = [rec["file"] for parts in fashion_mnist.FASHION_MNIST.values() for rec in parts.values()]
        unrecorded = "the cache folder (source not recorded)"
    else:  # a CIFAR archive with no record was put there by hand (a download records itself)
        files = [cifar10.CIFAR10["file"]]
        unrecorded = "archive placed in the cache folder"
    record = read_origins(folder)
    origins = dict.fromkeys(record.get(f, {}).get("origin", unrecorded) for f in files if (folder / f).is_file())
    return fit_line(f"{name}: " + " + ".join(origins)) if origins else f"{name}: not loaded yet"
