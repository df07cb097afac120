"""Image data for the vision-transformer chapter: Fashion-MNIST and CIFAR-10.

Fashion-MNIST (Xiao, Rasul & Vollgraf 2017; MIT licence, Zalando SE)
    60,000 + 10,000 grey 28x28 images in ten classes, stored as gzipped idx
    files. :func:`load_fashion_mnist` takes the first of these that holds
    the files:

    1. the cache ``data/fashion-mnist/`` (decompressed, checked at every load);
    2. a folder passed as ``source``, ``$MMTOKEN_FASHION_MNIST_DIR``, the
       cache folder itself (``*-ubyte.gz`` placed there by hand), the Debian
       package (offline; ``apt-get install -y dataset-fashion-mnist``, files in
       ``/usr/share/datasets/fashion-mnist``);
    3. a download of the four ``*-ubyte.gz`` files from
       :data:`FASHION_MNIST_MIRROR`, the address torchvision's
       ``FashionMNIST`` and the upstream README use (Colab takes this path).

    A downloaded gzip file must have the MD5 torchvision and the upstream
    README publish. The Debian package re-compresses the files, so its gzip
    files differ from the upstream ones; both decompress to the same idx
    files, and the SHA-256 of the *decompressed* idx file is checked whatever
    the source. The decompressed files are cached (55 MB) and checked again
    at every load; :func:`data_source` says where they came from.

CIFAR-10 (Krizhevsky 2009)
    60,000 colour 32x32 images in ten classes, the "python version" archive
    ``cifar-10-python.tar.gz`` (170,498,071 bytes) from
    https://www.cs.toronto.edu/~kriz/cifar.html. :func:`download_cifar10`
    fetches it into ``data/cifar-10/`` when the network allows; the archive is
    verified (MD5 as published on that page and in torchvision, SHA-256 as in
    Keras) before anything in it is unpickled, and the pickles are read with
    an unpickler that only admits plain containers and NumPy arrays.

No reader substitutes one dataset for another: a missing dataset raises
:class:`~mmtoken.datasets.download.DatasetMissing` saying how to get it.
Images come back as ``uint8`` arrays of shape ``(N, C, H, W)`` and labels as
``int64`` arrays of shape ``(N,)``.
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
    "CIFAR10_CLASSES",
    "CIFAR10",
    "cifar10_path",
    "verify_archive",
    "download_cifar10",
    "read_cifar10_archive",
    "load_cifar10",
    "IMAGE_DATASETS",
    "load_images",
    "data_source",
]

import gzip
import hashlib
import io
import math
import os
import pickle
import tarfile
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

import numpy as np

from .download import (
    DOWNLOAD_DEADLINE,
    DatasetError,
    DatasetMissing,
    atomic_write_bytes,
    cache_dir,
    download_file,
    fit_line,
    read_bounded,
    read_origins,
    record_origin,
    sha256_file,
    sweep_partial,
    url_host,
)

# --------------------------------------------------------------------------- Fashion-MNIST

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
    data : the whole file: a 4-byte magic ``00 00 <dtype> <ndim>``, ``ndim``
        big-endian ``int32`` sizes, then the values in C order.
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


def _idx_size(rec: Mapping) -> int | None:
    """Bytes of the idx file of ``rec`` (header and values), from its registered shape."""
    if "shape" not in rec:
        return None
    shape = tuple(rec["shape"])
    return 4 + 4 * len(shape) + math.prod(shape)


def _decompressed(path: Path, gz: bool | None = None, rec: Mapping | None = None) -> bytes:
    """The idx bytes of a source file: gzip if ``gz`` (by default: if its name ends in ``.gz``).

    Streamed, and stopped one byte past the registered size of ``rec``'s idx file: a
    gzip bomb placed by hand costs that much memory, then fails the checksum.
    """
    gz = path.suffix == ".gz" if gz is None else gz
    try:
        return read_bounded(path, _idx_size(rec) if rec is not None else None, gz=gz)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DatasetError(
            f"{path} is not a valid gzip file ({exc}); it is corrupt or truncated: reinstall or download it again"
        ) from exc


def _check_idx_digest(data: bytes, rec: Mapping, where: str) -> None:
    digest = hashlib.sha256(data).hexdigest()
    if digest != rec["sha256"]:
        raise DatasetError(
            f"checksum mismatch for {where} (decompressed): expected sha256 "
            f"{rec['sha256']}, found {digest}. The file is corrupt or not "
            "the published Fashion-MNIST; reinstall or download it again."
        )


def _download_fashion_file(
    rec: Mapping, dest: Path, mirror: str, timeout: float, deadline: float, folders: list[Path]
) -> bytes:
    """Fetch ``<file>.gz`` from ``mirror``; return its verified idx bytes. Nothing stays in ``dest`` on failure.

    The gzip bytes are checked (MD5 as published, when the record has one;
    SHA-256 of the decompressed content always) before :func:`download_file`
    renames the ``.part`` file; the verified gzip file is then deleted at once
    (its idx bytes are returned for the caller to cache): the cache holds the
    decompressed files only, as with the other sources.
    """
    url = mirror.rstrip("/") + "/" + rec["file"] + ".gz"
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
        data = _decompressed(part, gz=True, rec=rec)  # a .part file: the name does not say it is gzip
        _check_idx_digest(data, rec, url)
        holder.append(data)

    gz = dest / (rec["file"] + ".gz")
    try:
        download_file(
            url,
            gz,
            check=check,
            timeout=timeout,
            deadline=deadline,
            missing_note=_missing_fashion_message(rec["file"], folders, dest),
        )
    except DatasetMissing as exc:  # the message says it all: not the urllib chain under it
        raise DatasetMissing(str(exc)) from None
    finally:
        # the verified gzip file is a transit copy; a refused one never got its name
        if holder and gz.is_file():
            gz.unlink()
    return holder[0]


def _origin_of(path: Path, dest: Path, searched: list[tuple[Path, str]]) -> str:
    if path.parent == dest:
        return "files placed in the cache folder"
    return next(label for folder, label in searched if path.parent == folder)


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
    source : a folder holding ``<file>.gz`` or ``<file>``, searched first;
        then ``$MMTOKEN_FASHION_MNIST_DIR``, the cache folder and the Debian
        package folder.
    dest : the cache folder, ``data/fashion-mnist/`` by default (gzip files
        placed there by hand are found too).
    registry : split -> part -> ``{"file", "sha256", "gz_md5_upstream", ...}``;
        tests pass a registry of fixture files.
    download : fetch a file found in no folder from ``mirror``.
    mirror : base address of the ``<file>.gz`` files, :data:`FASHION_MNIST_MIRROR`
        (read at call time) by default.
    timeout, deadline : seconds one wait for the server, and one whole file, may take.

    Returns
    -------
    Path of the cache folder. Every file in it has its registered SHA-256, and
    its origin is recorded there (see :func:`data_source`).

    Raises
    ------
    DatasetMissing
        a file is in none of the folders and cannot be downloaded (the message
        names the address tried and says how to get the files).
    DatasetError
        a file is found or downloaded but does not decompress or has the wrong
        checksum (a refused download leaves nothing in the cache).
    """
    dest = Path(dest) if dest is not None else cache_dir("fashion-mnist")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(f"cannot create the Fashion-MNIST cache folder {dest} ({exc.strerror or exc})") from None
    sweep_partial(dest)
    mirror = FASHION_MNIST_MIRROR if mirror is None else mirror
    searched = _fashion_sources(source)
    folders = [d for d, _ in searched]
    origins = read_origins(dest)
    for parts in registry.values():
        for rec in parts.values():
            target = dest / rec["file"]
            candidates = [d / (rec["file"] + suffix) for d in [dest, *folders] for suffix in (".gz", "")]
            found = [c for c in candidates if c.is_file() and c != target]
            if target.is_file() and sha256_file(target) == rec["sha256"]:
                if rec["file"] not in origins:
                    # a cache filled before origins were recorded: name the source that rebuilds it
                    # identically (checked, once), so the statement is the same on every later run
                    origin = "the cache folder (source not recorded)"
                    for path in found:
                        try:
                            _check_idx_digest(_decompressed(path, rec=rec), rec, str(path))
                        except DatasetError:
                            continue
                        origin = _origin_of(path, dest, searched)
                        break
                    record_origin(dest, {rec["file"]: origin})
                continue
            url = None
            if found:
                path = found[0]
                data = _decompressed(path, rec=rec)
                _check_idx_digest(data, rec, str(path))
                origin = _origin_of(path, dest, searched)
            elif download:
                data = _download_fashion_file(rec, dest, mirror, timeout, deadline, folders)
                url = mirror.rstrip("/") + "/" + rec["file"] + ".gz"
                origin = f"downloaded from {MIRROR_NAMES.get(url_host(url), url_host(url))}, md5 verified"
            elif target.is_file():
                raise DatasetError(
                    f"cached {target} has the wrong checksum and no source file was "
                    "found to rebuild it; delete it. " + _missing_fashion_message(rec["file"], folders, dest)
                )
            else:
                raise DatasetMissing(_missing_fashion_message(rec["file"], folders, dest))
            atomic_write_bytes(target, data)
            record_origin(dest, {rec["file"]: origin}, url=url)
    return dest


def _read_verified_idx(path: Path, rec: Mapping) -> np.ndarray:
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != rec["sha256"]:
        raise DatasetError(
            f"checksum mismatch for {path}: expected sha256 {rec['sha256']}, found "
            f"{digest}. Delete it; the next load rebuilds it from the source files."
        )
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


# --------------------------------------------------------------------------- CIFAR-10

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
        "or run mmtoken.datasets.images.download_cifar10() on a machine with network "
        "access (Colab works). No other dataset is substituted."
    )


def verify_archive(path: os.PathLike, *, md5: str | None, sha256: str | None) -> None:
    """Check a file's MD5 and SHA-256 (either may be ``None`` to skip it).

    Raises :class:`DatasetMissing` if the file does not exist and
    :class:`DatasetError` naming the expected and found digest on a mismatch.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetMissing(f"{path} does not exist")
    h_md5, h_sha = hashlib.md5(), hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h_md5.update(block)
            h_sha.update(block)
    for kind, want, got in (("md5", md5, h_md5.hexdigest()), ("sha256", sha256, h_sha.hexdigest())):
        if want is not None and got != want:
            raise DatasetError(
                f"checksum mismatch for {path}: expected {kind} {want}, found {got}. "
                "The file is corrupt or truncated; delete it and download it again."
            )


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
    dest : target file, :func:`cifar10_path` by default. An existing file with
        the right checksums is kept.
    url : where to fetch from; ``CIFAR10["url"]`` (read at call time) by default.
    timeout : seconds any single wait for the server may take.
    deadline : seconds the whole download may take.

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
    if dest.is_file():
        verify_archive(dest, md5=CIFAR10["md5"], sha256=CIFAR10["sha256"])
        return dest
    sweep_partial(dest.parent)
    try:
        download_file(
            url,
            dest,
            timeout=timeout,
            deadline=deadline,
            check=lambda part: verify_archive(part, md5=CIFAR10["md5"], sha256=CIFAR10["sha256"]),
        )
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
    md5, sha256 : its expected digests (the published ones by default; tests
        pass those of a fixture). Checked before anything is unpickled.

    Returns
    -------
    ``{"train": (images, labels), "test": (images, labels)}`` with ``uint8``
    images ``(N, 3, 32, 32)`` and ``int64`` labels ``(N,)`` in ``0..9``.
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
                    try:
                        fh = tar.extractfile(member)
                    except KeyError:
                        fh = None
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

    Reads the cached archive (:func:`cifar10_path`); fetches it first when
    ``download`` is true. Offline, raises :class:`DatasetMissing` with
    instructions.
    """
    if split not in ("train", "test"):
        raise ValueError(f"unknown split {split!r}; choose 'train' or 'test'")
    path = cifar10_path()
    if not path.is_file():
        if not download:
            raise DatasetMissing(_missing_cifar_message(path, "the archive is not cached"))
        download_cifar10(path)
    return _cifar10_cached(str(path))[split]


# --------------------------------------------------------------------------- one entry point

IMAGE_DATASETS = {"fashion-mnist": FASHION_MNIST_CLASSES, "cifar-10": CIFAR10_CLASSES}


def load_images(name: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Images ``uint8 (N, C, H, W)`` and labels ``int64 (N,)`` of ``name`` in :data:`IMAGE_DATASETS`.

    Takes the data from the first source that has it (the cache, a local copy,
    then a download from the canonical address); :func:`data_source` says which.
    """
    if name == "fashion-mnist":
        return load_fashion_mnist(split)
    if name == "cifar-10":
        return load_cifar10(split)
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
        files = [rec["file"] for parts in FASHION_MNIST.values() for rec in parts.values()]
    elif name == "cifar-10":
        folder = Path(folder) if folder is not None else cifar10_path().parent
        files = [CIFAR10["file"]]
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
