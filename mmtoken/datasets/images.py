"""The image datasets of the vision-transformer chapter by name: Fashion-MNIST and CIFAR-10.

:func:`load_images` reads one split of a dataset named in :data:`IMAGE_DATASETS`
through its reader (:mod:`mmtoken.datasets.fashion_mnist`,
:mod:`mmtoken.datasets.cifar10`); :func:`data_source` says where the cached copy
came from. No reader substitutes one dataset for another: a missing dataset
raises :class:`~mmtoken.datasets.download.DatasetMissing` saying how to get it.
Images come back as ``uint8`` arrays of shape ``(N, C, H, W)`` and labels as
``int64`` arrays of shape ``(N,)``.
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

    Takes the data from the first source that has it (the cache, a local copy,
    then a download from the canonical address); :func:`data_source` says which.
    """
    if name == "fashion-mnist":
        return fashion_mnist.load_fashion_mnist(split)
    if name == "cifar-10":
        return cifar10.load_cifar10(split)
    raise ValueError(f"unknown image dataset {name!r}; choose one of {tuple(IMAGE_DATASETS)}")


def data_source(name: str, *, folder: os.PathLike | None = None) -> str:
    """One line (at most 72 characters) saying where the cached copy of ``name`` came from.

    For a chapter to print after loading, e.g. ``"fashion-mnist: Debian package
    dataset-fashion-mnist"`` or ``"fashion-mnist: downloaded from torchvision's
    mirror, md5 verified"``. Reads the origin record the loaders keep in the
    cache folder (and the full address of a download), so it reads no data,
    downloads nothing, and says the same on every run that reuses the cache.

    Parameters
    ----------
    name : a name in :data:`IMAGE_DATASETS`.
    folder : the cache folder, ``data/<name>/`` by default.

    Returns
    -------
    ``"<name>: <origin>"``; ``"<name>: not loaded yet"`` before the first load.
    """
    if name == "fashion-mnist":
        folder = Path(folder) if folder is not None else cache_dir("fashion-mnist")
        files = [rec["file"] for parts in fashion_mnist.FASHION_MNIST.values() for rec in parts.values()]
    elif name == "cifar-10":
        folder = Path(folder) if folder is not None else cifar10.cifar10_path().parent
        files = [cifar10.CIFAR10["file"]]
    else:
        raise ValueError(f"unknown image dataset {name!r}; choose one of {tuple(IMAGE_DATASETS)}")
    record = read_origins(folder)
    origins = []
    for f in files:
        if (folder / f).is_file():
            # a CIFAR archive with no record was put there by hand (a download records itself)
            origin = record.get(f, {}).get("origin", "the cache folder (source not recorded)")
            if name == "cifar-10" and f not in record:
                origin = "archive placed in the cache folder"
            if origin not in origins:
                origins.append(origin)
    if not origins:
        return f"{name}: not loaded yet"
    return fit_line(f"{name}: " + " + ".join(origins))
