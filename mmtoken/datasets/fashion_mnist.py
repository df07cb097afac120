"""Fashion-MNIST (Xiao, Rasul & Vollgraf 2017; MIT licence, Zalando SE), verified and cached.

60,000 + 10,000 grey 28x28 images in ten classes, stored as gzipped idx
files. :func:`load_fashion_mnist` takes the first of these that holds the
files:

1. the cache ``data/fashion-mnist/`` (decompressed, 55 MB, checked at every load);
2. ``*-ubyte.gz`` placed in the cache folder by hand, a folder passed as ``source``,
   ``$MMTOKEN_FASHION_MNIST_DIR``, the Debian package (offline;
   ``apt-get install -y dataset-fashion-mnist``, files in ``/usr/share/datasets/fashion-mnist``);
3. a download from :data:`FASHION_MNIST_MIRROR` (Colab takes this path), whose gzip
   files must have the MD5 torchvision and the upstream README publish.

The Debian package re-compresses the files, so the SHA-256 checked, whatever the
source, is that of the *decompressed* idx file.
:func:`mmtoken.datasets.images.data_source` says where the cached files came from.
"""

from __future__ import annotations

__all__ = [
    "FASHION_MNIST_CLASSES",
    "DEBIAN_FASHION_MNIST_DIR",
    "FASHION_MNIST_URL",
    "FASHION_MNIST_MIRROR",
    "MIRROR_NAMES",
    "FASHION_MNIST",
    "parse_idx",
    "prepare_fashion_mnist",
    "load_fashion_mnist",
]

import gzip
import hashlib
import math
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from mmtoken.datasets.download import (
    DOWNLOAD_DEADLINE,
    DatasetError,
    DatasetMissing,
    atomic_write_bytes,
    cache_dir,
    download_file,
    read_bounded,
    read_origins,
    record_origin,
    sha256_file,
    sweep_partial,
    url_host,
)

FASHION_MNIST_CLASSES = (
    "t-shirt/top",
    "trouser",
    "pullover",
    "dress",
    "coat",
    "sandal",
    "shirt",
    "sneaker",
    "bag",
    "ankle boot",
)
DEBIAN_FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
FASHION_MNIST_URL = "https://github.com/zalandoresearch/fashion-mnist"
FASHION_MNIST_MIRROR = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
"""Base address of the four ``<file>.gz``: torchvision's ``FashionMNIST.mirrors`` and the
download links of the upstream README. Plain http (an S3 website endpoint serves no https);
the MD5 of each gzip file and the SHA-256 of its decompressed content are checked instead.
Read at call time, so a test (or a reader with a local mirror) can point it elsewhere."""
MIRROR_NAMES = {"fashion-mnist.s3-website.eu-central-1.amazonaws.com": "torchvision's mirror"}
"""Short names of known download hosts, so a source statement fits one line."""

FASHION_MNIST: dict[str, dict[str, dict]] = {
    # split -> part -> file record. ``sha256`` is of the decompressed idx file
    # (what is verified and cached); ``gz_sha256_debian`` is of the gzip file in
    # the Debian package dataset-fashion-mnist 0.0~git20200523.55506a9-1;
    # ``gz_md5_upstream`` is the MD5 the upstream README publishes for its gzip.
    "train": {
        "images": {
            "file": "train-images-idx3-ubyte",
            "shape": (60000, 28, 28),
            "sha256": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
            "gz_sha256_debian": "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
            "gz_md5_upstream": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        },
        "labels": {
            "file": "train-labels-idx1-ubyte",
            "shape": (60000,),
            "sha256": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
            "gz_sha256_debian": "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
            "gz_md5_upstream": "25c81989df183df01b3e8a0aad5dffbe",
        },
    },
    "test": {
        "images": {
            "file": "t10k-images-idx3-ubyte",
            "shape": (10000, 28, 28),
            "sha256": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
            "gz_sha256_debian": "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
            "gz_md5_upstream": "bef4ecab320f06d8554ea6380940ec79",
        },
        "labels": {
            "file": "t10k-labels-idx1-ubyte",
            "shape": (10000,),
            "sha256": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
            "gz_sha256_debian": "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05",
            "gz_md5_upstream": "bb300cfdad3c16e7a12a480ee83cd310",
        },
    },
}

_IDX_DTYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def parse_idx(data: bytes, *, name: str = "idx data") -> np.ndarray:
    """Parse the bytes of an (uncompressed) idx file.

    Parameters
    ----------
    data : the whole file: magic ``00 00 <dtype> <ndim>``, ``ndim`` big-endian ``int32`` sizes, values in C order.
    name : used in error messages.

    Returns
    -------
    np.ndarray of the stored shape, native byte order.

    Raises
    ------
    DatasetError
        bad magic, unknown dtype, truncated or over-long data.
    """
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise DatasetError(f"{name} is not an idx file (bad magic number {data[:4]!r})")
    code, ndim = data[2], data[3]
    if code not in _IDX_DTYPES:
        raise DatasetError(f"{name}: unknown idx dtype code 0x{code:02x}")
    if ndim == 0 or len(data) < 4 + 4 * ndim:
        raise DatasetError(f"{name}: truncated idx header ({len(data)} bytes, {ndim} dimensions)")
    shape = tuple(int(s) for s in np.frombuffer(data, dtype=">i4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[code]
    expected = 4 + 4 * ndim + int(np.prod(shape)) * dtype.itemsize
    if len(data) != expected:
        raise DatasetError(
            f"{name}: idx header says shape {shape} ({expected} bytes) but the file "
            f"holds {len(data)} bytes; it is truncated or corrupt"
        )
    arr = np.frombuffer(data, dtype=dtype, offset=4 + 4 * ndim).reshape(shape)
    return arr.astype(dtype.newbyteorder("="), copy=True)


def _fashion_sources(extra: os.PathLike | None = None) -> list[tuple[Path, str]]:
    """The folders searched for source files, each with how a source statement names it."""
    dirs = []
    if extra is not None:
        dirs.append((Path(extra), "the folder passed as source"))
    if os.environ.get("MMTOKEN_FASHION_MNIST_DIR"):
        dirs.append((Path(os.environ["MMTOKEN_FASHION_MNIST_DIR"]), "$MMTOKEN_FASHION_MNIST_DIR"))
    dirs.append((DEBIAN_FASHION_MNIST_DIR, "Debian package dataset-fashion-mnist"))
    return dirs


def _missing_fashion_message(name: str, searched: list[Path], dest: Path) -> str:
    where = ", ".join(str(d) for d in searched)
    return (
        f"Fashion-MNIST file {name}(.gz) was not found (searched the cache folder {dest} and {where}). "
        "Get it with `sudo apt-get install -y dataset-fashion-mnist` (Debian/Ubuntu; files in "
        f"{DEBIAN_FASHION_MNIST_DIR}), download the four *-ubyte.gz files from "
        f"{FASHION_MNIST_MIRROR} (see {FASHION_MNIST_URL}) into {dest} or into "
        "$MMTOKEN_FASHION_MNIST_DIR, or load with download=True where the network is reachable."
    )


def _check_digest(data: bytes, rec: Mapping, where: str, fix: str) -> None:
    digest = hashlib.sha256(data).hexdigest()
    if digest != rec["sha256"]:
        raise DatasetError(f"checksum mismatch for {where}: expected sha256 {rec['sha256']}, found {digest}. {fix}")


def _source_idx(path: Path, rec: Mapping, where: str | None = None, gz: bool | None = None) -> bytes:
    """The verified idx bytes of a source file: gzip if ``gz`` (by default: if its name ends in ``.gz``).

    Read no further than one byte past the size ``rec``'s shape gives (:func:`read_bounded`).
    """
    shape = tuple(rec["shape"]) if "shape" in rec else None
    size = None if shape is None else 4 + 4 * len(shape) + math.prod(shape)
    try:
        data = read_bounded(path, size, gz=path.suffix == ".gz" if gz is None else gz)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DatasetError(
            f"{path} is not a valid gzip file ({exc}); it is corrupt or truncated: reinstall or download it again"
        ) from exc
    fix = "The file is corrupt or not the published Fashion-MNIST; reinstall or download it again."
    _check_digest(data, rec, f"{where or path} (decompressed)", fix)
    return data


def _download_fashion_file(rec: Mapping, url: str, dest: Path, timeout: float, deadline: float, note: str) -> bytes:
    """Fetch ``url`` (``<file>.gz``); return its idx bytes, checked (MD5 of the gzip file, when the record
    has one, and SHA-256 of its content) before :func:`download_file` renames the ``.part`` file.

    The verified gzip file is then deleted: the cache holds the decompressed files only.
    """
    holder: list[bytes] = []

    def check(part: Path) -> None:
        md5 = rec.get("gz_md5_upstream")
        if md5 is not None:
            found = hashlib.md5(part.read_bytes()).hexdigest()
            if found != md5:
                raise DatasetError(
                    f"checksum mismatch for {url}: expected md5 {md5}, found {found}. "
                    "The download is corrupt or not the published Fashion-MNIST; "
                    "nothing was kept."
                )
        holder.append(_source_idx(part, rec, url, gz=True))  # a .part file: the name does not say it is gzip

    gz = dest / (rec["file"] + ".gz")
    try:
        download_file(url, gz, check=check, timeout=timeout, deadline=deadline, missing_note=note)
    except DatasetMissing as exc:  # the message says it all: not the urllib chain under it
        raise DatasetMissing(str(exc)) from None
    finally:
        if holder and gz.is_file():  # a refused download never got its name
            gz.unlink()
    return holder[0]


def prepare_fashion_mnist(
    *,
    source: os.PathLike | None = None,
    dest: os.PathLike | None = None,
    registry: Mapping[str, Mapping[str, Mapping]] = FASHION_MNIST,
    download: bool = True,
    mirror: str | None = None,
    timeout: float = 30.0,
    deadline: float = DOWNLOAD_DEADLINE,
) -> Path:
    """Copy the idx files into the cache (decompressed, verified) once.

    Parameters
    ----------
    source : a folder holding ``<file>.gz`` or ``<file>``, searched after the cache folder,
        before ``$MMTOKEN_FASHION_MNIST_DIR`` and the Debian package folder.
    dest : the cache folder, ``data/fashion-mnist/`` by default.
    registry : split -> part -> ``{"file", "sha256", "gz_md5_upstream", ...}``; tests pass fixture files.
    download : fetch a file found in no folder from ``mirror``.
    mirror : base address of the ``<file>.gz`` files, :data:`FASHION_MNIST_MIRROR` (read at call time) by default.
    timeout, deadline : seconds one wait for the server, and one whole file, may take.

    Returns
    -------
    Path of the cache folder; every file in it has its registered SHA-256 and a recorded origin.

    Raises
    ------
    DatasetMissing
        a file is in none of the folders and cannot be downloaded (the message says how to get it).
    DatasetError
        a file found or downloaded does not decompress or has the wrong checksum (nothing is kept).
    """
    dest = Path(dest) if dest is not None else cache_dir("fashion-mnist")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(f"cannot create the Fashion-MNIST cache folder {dest} ({exc.strerror or exc})") from None
    sweep_partial(dest)
    mirror = FASHION_MNIST_MIRROR if mirror is None else mirror
    searched = [(dest, "files placed in the cache folder"), *_fashion_sources(source)]
    folders = [d for d, _ in searched[1:]]
    origins = read_origins(dest)
    for parts in registry.values():
        for rec in parts.values():
            target = dest / rec["file"]
            candidates = [(d / (rec["file"] + suffix), label) for d, label in searched for suffix in (".gz", "")]
            found = [(path, label) for path, label in candidates if path.is_file() and path != target]
            missing = _missing_fashion_message(rec["file"], folders, dest)
            if target.is_file() and sha256_file(target) == rec["sha256"]:
                if rec["file"] not in origins:
                    # a cache filled before origins were recorded: name the source that rebuilds it
                    # identically (checked, once), so the statement is the same on every later run
                    origin = "the cache folder (source not recorded)"
                    for path, label in found:
                        try:
                            _source_idx(path, rec)
                        except DatasetError:
                            continue
                        origin = label
                        break
                    record_origin(dest, {rec["file"]: origin})
                continue
            url = None
            if found:
                data, origin = _source_idx(found[0][0], rec), found[0][1]
            elif download:
                url = mirror.rstrip("/") + "/" + rec["file"] + ".gz"
                data = _download_fashion_file(rec, url, dest, timeout, deadline, missing)
                origin = f"downloaded from {MIRROR_NAMES.get(url_host(url), url_host(url))}, md5 verified"
            elif target.is_file():
                raise DatasetError(
                    f"cached {target} has the wrong checksum and no source file was found to rebuild it; delete it. "
                    + missing
                )
            else:
                raise DatasetMissing(missing)
            atomic_write_bytes(target, data)
            record_origin(dest, {rec["file"]: origin}, url=url)
    return dest


def _read_verified_idx(path: Path, rec: Mapping) -> np.ndarray:
    data = path.read_bytes()
    _check_digest(data, rec, str(path), "Delete it; the next load rebuilds it from the source files.")
    arr = parse_idx(data, name=str(path))
    if "shape" in rec and tuple(arr.shape) != tuple(rec["shape"]):
        raise DatasetError(f"{path}: shape {arr.shape}, expected {tuple(rec['shape'])}")
    return arr


def load_fashion_mnist(
    split: str = "train",
    *,
    source: os.PathLike | None = None,
    dest: os.PathLike | None = None,
    registry: Mapping[str, Mapping[str, Mapping]] = FASHION_MNIST,
    download: bool = True,
    mirror: str | None = None,
    timeout: float = 30.0,
    deadline: float = DOWNLOAD_DEADLINE,
) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST images and labels of one split.

    Parameters
    ----------
    split : ``"train"`` (60,000) or ``"test"`` (10,000).
    source, dest, registry, download, mirror, timeout, deadline : see :func:`prepare_fashion_mnist`.

    Returns
    -------
    images : ``uint8`` array ``(N, 1, 28, 28)``, 0 = black background.
    labels : ``int64`` array ``(N,)`` in ``0..9`` (names in :data:`FASHION_MNIST_CLASSES`).
    """
    if split not in registry:
        raise ValueError(f"unknown split {split!r}; choose one of {tuple(registry)}")
    dest = prepare_fashion_mnist(
        source=source,
        dest=dest,
        registry=registry,
        download=download,
        mirror=mirror,
        timeout=timeout,
        deadline=deadline,
    )
    recs = registry[split]
    images = _read_verified_idx(dest / recs["images"]["file"], recs["images"])
    labels = _read_verified_idx(dest / recs["labels"]["file"], recs["labels"]).astype(np.int64)
    if images.ndim != 3 or labels.shape != (images.shape[0],):
        raise DatasetError(f"Fashion-MNIST {split}: images {images.shape} and labels {labels.shape} do not match")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise DatasetError(f"Fashion-MNIST {split}: labels outside 0..9")
    return images[:, None, :, :], labels
