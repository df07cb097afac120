"""What the registries say about a file the loaders download, by the name it is saved under: its size, and the
command that fetches it again.

:func:`mmtoken.datasets.download.download_file` refuses a body announced or sent larger than the size of
the file it is saving (:func:`size`), so a wrong server costs no more than the right file, and its errors
say what to run (:func:`retry`). The text sources and CIFAR-10 record their sizes in their registries
(:data:`.sources.SOURCES`, :data:`.cifar10.CIFAR10`), read at call time; the Fashion-MNIST registry records
the decompressed files, so the sizes of the gzip files downloaded are here (:data:`GZIP_SIZES`).
"""

from __future__ import annotations

__all__ = ["GZIP_SIZES", "size", "retry"]

GZIP_SIZES = {
    "train-images-idx3-ubyte.gz": 26421880,
    "train-labels-idx1-ubyte.gz": 29515,
    "t10k-images-idx3-ubyte.gz": 4422102,
    "t10k-labels-idx1-ubyte.gz": 5148,
}
"""Bytes of the four Fashion-MNIST gzip files at torchvision's mirror (the files whose MD5s upstream
publishes): the Debian package's re-compressed file plus the file name (and its NUL) the upstream gzip
header carries, e.g. 26,421,856 + len("train-images-idx3-ubyte") + 1 (``tests/test_datasets_download.py``)."""

_TEXT_NAMES = {"imdb-stanford": "imdb", "imdb-npm": "imdb", "rt": "rt", "yelp": "yelp"}


def _text_sources() -> dict[str, tuple[dict, str]]:
    from mmtoken.datasets import sources  # it imports the download module, which imports this one

    return {s["file"]: (s, _TEXT_NAMES.get(k, k)) for k, s in sources.SOURCES.items() if "file" in s}


def size(name: str) -> int | None:
    """The registered size in bytes of a downloaded file saved as ``name``; ``None`` when none is registered."""
    from mmtoken.datasets import cifar10

    sizes = dict(GZIP_SIZES)
    sizes[cifar10.CIFAR10["file"]] = cifar10.CIFAR10.get("size")
    sizes.update({file: src.get("size") for file, (src, _) in _text_sources().items()})
    found = sizes.get(name)
    return None if found is None else int(found)


def retry(name: str) -> str:
    """What to run to download the file saved as ``name`` again (a generic phrase for a file not registered)."""
    from mmtoken.datasets import cifar10

    if name in GZIP_SIZES:
        return "run `mmtoken.datasets.images.load_images('fashion-mnist', 'train')` again"
    if name == cifar10.CIFAR10["file"]:
        return "run `mmtoken.datasets.cifar10.download_cifar10()` again"
    if name in (text := _text_sources()):
        return f"run `python -m mmtoken.datasets fetch {text[name][1]}` again"
    return "run the same call again to download it afresh"
