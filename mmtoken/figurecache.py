"""Rendered figures kept for the figures command, so that an unchanged figure is not drawn again.

``python -m mmtoken figures`` draws a figure from its experiment's results.
For experiments that read no external data (every chapter except the ViT
and real-review ones), the figure is a function of the code and the
settings alone, so its rendered files can be kept and handed out again
while neither changes. The key (:func:`key`) is a digest of

* the figure's name and the experiment module's **code fingerprint**
  (:func:`mmtoken.resultcache.source_fingerprint`: its source and that of
  every ``mmtoken`` module it imports, found statically; the plotting
  theme is one of them),
* the scale and ``MMTOKEN_DEVICE``,
* the versions of NumPy, torch and matplotlib (read from the installed
  metadata: nothing is imported).

Nothing here imports torch or matplotlib: a figure found in the cache is
copied out by a process that only starts Python. ``figures --force`` draws
again. Which figures a module defines is read from its source
(:func:`figure_names`), also without importing it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import warnings
from importlib import metadata
from pathlib import Path

from . import config, resultcache
from .datasets.download import DataFolderError, atomic_write_bytes

FORMAT = 1
EXTENSIONS = ("png", "pdf")
"""The files :func:`mmtoken.plotting.save` writes for each figure."""
DATA_MODULES = ("mmtoken.datasets.text", "mmtoken.datasets.images")
"""Modules that read external data: an experiment importing one is never figure-cached."""


def figure_names(module: str) -> list[str] | None:
    """The keys of the ``FIGURES`` dictionary of experiment module ``module`` (``mmtoken.experiments.x``),
    read from its source; ``None`` if it has no ``FIGURES`` written as a literal dictionary."""
    path = resultcache.module_file(module)
    if path is None:
        raise ValueError(f"{module!r} is not a module of the mmtoken package")
    for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id == "FIGURES":
            if isinstance(node.value, ast.Dict) and all(
                isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.value.keys
            ):
                return [k.value for k in node.value.keys]
            return None
    return []


def reads_data(module: str) -> bool:
    """Whether ``module`` imports, directly or not, a module that reads external data."""
    return any(m in DATA_MODULES for m in resultcache.module_closure(module))


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def key(module: str, figure: str) -> str | None:
    """Digest identifying the rendering of ``figure`` of ``module`` today; ``None`` if it is not cacheable."""
    if reads_data(module):
        return None
    payload = {
        "format": FORMAT,
        "figure": figure,
        "code": resultcache.source_fingerprint(module),
        "scale": config.scale(),
        "device": os.environ.get("MMTOKEN_DEVICE", "").strip(),
        "versions": {d: _version(d) for d in ("numpy", "torch", "matplotlib")},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def folder() -> Path:
    """Where rendered figures are kept: ``<data folder>/cache/figures``."""
    return config.data_dir() / "cache" / "figures"


def _paths(figure: str, digest: str) -> list[Path]:
    return [folder() / f"{figure}.{digest[:20]}.{ext}" for ext in EXTENSIONS]


def _record(path: Path) -> Path:
    """The checksum record of a kept rendering: ``<figure>.<digest>.json`` beside its files."""
    return path.with_suffix(".json")


def _recorded_sums(paths: list[Path]) -> dict | None:
    try:
        sums = json.loads(_record(paths[0]).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(sums, dict) and all(isinstance(sums.get(p.name), str) for p in paths)
    return sums if ok else None


def _verified_bytes(path: Path, sums: dict) -> bytes | None:
    """The bytes of a kept file if they have the SHA-256 recorded when it was written, else None."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == sums.get(path.name) else None


def lookup(figure: str, digest: str | None) -> list[Path] | None:
    """The kept files of ``figure`` rendered under ``digest`` (PNG, PDF), or ``None`` if any is
    missing or does not have the SHA-256 recorded when it was kept (truncated, altered)."""
    if digest is None:
        return None
    paths = _paths(figure, digest)
    sums = _recorded_sums(paths)
    if sums is None or any(p.is_symlink() or _verified_bytes(p, sums) is None for p in paths):
        return None
    return paths


def store(figure: str, digest: str | None, files: list[str | os.PathLike]) -> None:
    """Keep the rendered ``files`` (one per :data:`EXTENSIONS`, in that order) of ``figure`` under ``digest``;
    older renderings of the same figure are removed. The SHA-256 of each file is recorded
    (written last), and checked before the file is handed out again."""
    if digest is None:
        return
    paths = _paths(figure, digest)
    if len(files) != len(paths):
        raise ValueError(f"expected {len(paths)} files ({', '.join(EXTENSIONS)}), got {len(files)}")
    keep = set(paths) | {_record(paths[0])}
    try:
        folder().mkdir(parents=True, exist_ok=True)
        for old in folder().glob(f"{figure}.*"):
            if old not in keep and old.name.count(".") == 2:
                old.unlink(missing_ok=True)
        _record(paths[0]).unlink(missing_ok=True)  # no record while the files change
        sums = {}
        for src, dst in zip(files, paths):
            data = Path(src).read_bytes()
            atomic_write_bytes(dst, data)
            sums[dst.name] = hashlib.sha256(data).hexdigest()
        atomic_write_bytes(_record(paths[0]), json.dumps(sums, sort_keys=True).encode())
    except (OSError, DataFolderError) as exc:  # the figure itself was written: keeping a copy is optional
        warnings.warn(f"figure {figure} not kept in {folder()}: {exc}", stacklevel=2)


def copy_out(cached: list[Path], stem: str | os.PathLike) -> list[str] | None:
    """Copy the kept files to ``<stem>.<ext>``; return the written paths.

    Each file is checked against the SHA-256 recorded when it was kept, from the very
    bytes that are written out; ``None`` (nothing written) if one does not match, so
    the caller draws the figure again. A symbolic link at ``<stem>.<ext>`` is replaced,
    never written through (temporary file and rename, as the results cache does).
    """
    sums = _recorded_sums(cached)
    if sums is None:
        return None
    blobs = [_verified_bytes(src, sums) for src in cached]
    if any(b is None for b in blobs):
        return None
    out = []
    for data, ext in zip(blobs, EXTENSIONS):
        dst = f"{stem}.{ext}"
        atomic_write_bytes(dst, data)
        out.append(dst)
    return out


__all__ = ["figure_names", "reads_data", "key", "folder", "lookup", "store", "copy_out", "EXTENSIONS", "DATA_MODULES"]
