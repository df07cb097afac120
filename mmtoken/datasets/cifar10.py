"""CIFAR-10 (Krizhevsky 2009), downloaded once, verified, and read without unpickling arbitrary objects.

60,000 colour 32x32 images in ten classes, the "python version" archive
``cifar-10-python.tar.gz`` (170,498,071 bytes) from
https://www.cs.toronto.edu/~kriz/cifar.html. :func:`download_cifar10`
fetches it into ``data/cifar-10/`` when the network allows; the archive is
verified (MD5 as published on that page and in torchvision, SHA-256 as in
Keras) before anything in it is unpickled, and the pickles are read with
an unpickler that only admits plain containers and NumPy arrays.
"""

from __future__ import annotations

__all__ = [
    "CIFAR10_CLASSES",
    "CIFAR10",
    "cifar10_path",
    "verify_archive",
    "download_cifar10",
    "read_cifar10_archive",
    "load_cifar10",
]

import io
import os
import pickle
import tarfile
from functools import lru_cache
from pathlib import Path

import numpy as np

from mmtoken.datasets.download import (
    DOWNLOAD_DEADLINE,
    DatasetError,
    DatasetMissing,
    cache_dir,
    download_file,
    record_origin,
    sweep_partial,
    url_host,
    verify_sha256,
)

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CIFAR10 = {
    "file": "cifar-10-python.tar.gz",
    "url": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    "page": "https://www.cs.toronto.edu/~kriz/cifar.html",
    "md5": "c58f30108f718f92721af3b95e74349a",
    "sha256": "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
    "size": 170498071,
    "folder": "cifar-10-batches-py",
    "train": ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5"),
    "test": ("test_batch",),
}


def cifar10_path() -> Path:
    """Where the CIFAR-10 archive is cached: ``data/cifar-10/cifar-10-python.tar.gz``."""
    return cache_dir("cifar-10") / CIFAR10["file"]


def _missing_cifar_message(path: Path, reason: str) -> str:
    return (
        f"CIFAR-10 is not available here ({reason}). Download {CIFAR10['url']} "
        f"(see {CIFAR10['page']}; md5 {CIFAR10['md5']}) and save it as {path}, "
        "or run mmtoken.datasets.cifar10.download_cifar10() on a machine with network "
        "access (Colab works). No other dataset is substituted."
    )


def verify_archive(path: os.PathLike, *, md5: str | None, sha256: str | None) -> None:
    """Check a file's MD5 and SHA-256 (``None`` skips one): :func:`~mmtoken.datasets.download.verify_sha256`."""
    verify_sha256(path, sha256, md5=md5)


def download_cifar10(
    dest: os.PathLike | None = None,
    *,
    url: str | None = None,
    timeout: float = 60.0,
    deadline: float = DOWNLOAD_DEADLINE,
) -> Path:
    """Fetch the CIFAR-10 python archive (once) and verify it.

    Parameters
    ----------
    dest : target file, :func:`cifar10_path` by default; kept if it has the right checksums.
    url : where to fetch from; ``CIFAR10["url"]`` (read at call time) by default.
    timeout, deadline : seconds one wait for the server, and the whole download, may take.

    Returns
    -------
    Path of the verified archive.

    Raises
    ------
    DatasetMissing
        the network is not reachable (the message says how to get the file).
    DatasetError
        the download does not have the published checksums (nothing is kept).
    """
    dest = Path(dest) if dest is not None else cifar10_path()
    url = CIFAR10["url"] if url is None else url
    digests = {"md5": CIFAR10["md5"], "sha256": CIFAR10["sha256"]}
    if dest.is_file():
        verify_archive(dest, **digests)
        return dest
    sweep_partial(dest.parent)
    try:
        download_file(url, dest, check=lambda part: verify_archive(part, **digests), timeout=timeout, deadline=deadline)
    except DatasetMissing as exc:
        raise DatasetMissing(_missing_cifar_message(dest, f"download from {url} failed: {exc}")) from None
    record_origin(dest.parent, {dest.name: f"downloaded from {url_host(url)}, md5 verified"}, url=url)
    return dest


class _SafeUnpickler(pickle.Unpickler):
    """Admit only what the CIFAR batch pickles need: containers, bytes, NumPy arrays."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise DatasetError(
                f"CIFAR-10 pickle refers to {module}.{name}, which a batch file never needs; refusing to load it"
            )
        if module == "numpy.core.multiarray" and int(np.__version__.split(".")[0]) >= 2:
            module = "numpy._core.multiarray"  # NumPy 2 moved it; the archive names the old place
        return super().find_class(module, name)


def _unpickle(data: bytes, name: str) -> dict:
    try:
        obj = _SafeUnpickler(io.BytesIO(data), encoding="bytes").load()
    except DatasetError:
        raise
    except Exception as exc:  # any malformed pickle
        raise DatasetError(f"{name} is not a valid CIFAR-10 batch pickle ({exc})") from exc
    if not isinstance(obj, dict):
        raise DatasetError(f"{name}: expected a dict, got {type(obj).__name__}")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in obj.items()}


def read_cifar10_archive(
    path: os.PathLike, *, md5: str | None = CIFAR10["md5"], sha256: str | None = CIFAR10["sha256"]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Read both splits from a ``cifar-10-python.tar.gz`` archive.

    Parameters
    ----------
    path : the archive.
    md5, sha256 : its digests (the published ones by default), checked before anything is unpickled.

    Returns
    -------
    ``{"train": (images, labels), "test": (images, labels)}``: ``uint8`` images ``(N, 3, 32, 32)``,
    ``int64`` labels ``(N,)`` in ``0..9``.
    """
    path = Path(path)
    verify_archive(path, md5=md5, sha256=sha256)
    out = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for split in ("train", "test"):
                xs, ys = [], []
                for batch in CIFAR10[split]:
                    member = f"{CIFAR10['folder']}/{batch}"
                    # extractfile(name) reads the member list anyway; None: not a regular file
                    fh = tar.extractfile(member) if member in tar.getnames() else None
                    if fh is None:
                        raise DatasetError(f"{path} has no member {member}; not a CIFAR-10 python archive")
                    d = _unpickle(fh.read(), member)
                    if "data" not in d or "labels" not in d:
                        raise DatasetError(f"{member} lacks 'data' or 'labels'")
                    x = np.asarray(d["data"])
                    y = np.asarray(d["labels"], dtype=np.int64)
                    if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != 3072 or y.shape != (x.shape[0],):
                        raise DatasetError(
                            f"{member}: data {x.shape} {x.dtype} / labels {y.shape} are not "
                            "CIFAR-10 batches (N x 3072 uint8, N labels)"
                        )
                    if y.size and (y.min() < 0 or y.max() > 9):
                        raise DatasetError(f"{member}: labels outside 0..9")
                    xs.append(x.reshape(-1, 3, 32, 32))
                    ys.append(y)
                out[split] = (np.concatenate(xs), np.concatenate(ys))
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DatasetError(f"{path} is not a readable tar.gz archive ({exc})") from exc
    return out


@lru_cache(maxsize=2)
def _cifar10_cached(path: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    # the registry's digests, read now (not when the function was defined), as download_cifar10 reads them
    return read_cifar10_archive(path, md5=CIFAR10["md5"], sha256=CIFAR10["sha256"])


def load_cifar10(split: str = "train", *, download: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10 images ``uint8 (N, 3, 32, 32)`` and labels ``int64 (N,)`` of one split.

    Reads the cached archive (:func:`cifar10_path`), fetched first if ``download``; else
    :class:`DatasetMissing` says how to get it.
    """
    if split not in ("train", "test"):
        raise ValueError(f"unknown split {split!r}; choose 'train' or 'test'")
    path = cifar10_path()
    if not path.is_file():
        if not download:
            raise DatasetMissing(_missing_cifar_message(path, "the archive is not cached"))
        download_cifar10(path)
    return _cifar10_cached(str(path))[split]
