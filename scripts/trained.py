"""The trained runs carried in ``book/trained/`` (:mod:`mmtoken.book.trained`): write them, or check them.

    python scripts/trained.py make     # retrain chapters 9 and 12 from an empty results folder, carry what they read
    python scripts/trained.py check    # the manifest, every file's SHA-256, and that no run's code has changed

``make`` executes the two chapters' notebooks (copies; the stored ones are not touched) in a fresh data folder that
shares the downloaded data but no result, with the carried runs switched off (``MMTOKEN_TRAINED=none``), so every
run they read is trained now; then it replaces the carried files by those results and rewrites the manifest
(``make trained``). About half an hour on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = {
    "09_vit_sparsity": "book/part1/09_vit_sparsity.ipynb",
    "12_real_reviews": "book/part2/12_real_reviews.ipynb",
}


def fresh_data(tmp: Path, data: Path) -> Path:
    """A data folder in ``tmp`` that links to the downloaded data of ``data`` and holds no computed result but the
    parsed text data sets (``results/text``: derived from the downloads, not trained)."""
    fresh = tmp / "data"
    (fresh / "results").mkdir(parents=True)
    for entry in data.iterdir() if data.is_dir() else ():
        if entry.name not in ("results", ".locks"):
            (fresh / entry.name).symlink_to(entry.resolve())
    if (data / "results" / "text").is_dir():
        (fresh / "results" / "text").symlink_to((data / "results" / "text").resolve())
    return fresh


def execute(notebook: Path, folder: Path, env: dict) -> None:
    """Execute a copy of ``notebook`` in ``folder`` (the stored notebook is left as it is)."""
    copy = folder / notebook.name
    shutil.copy(notebook, copy)
    subprocess.run(
        [sys.executable, "-m", "jupyter", "execute", "--inplace", "--timeout=7200", str(copy)], check=True, env=env
    )


def make() -> int:
    from mmtoken import config
    from mmtoken.book import trained

    target = config.trained_dir() or ROOT / "book" / "trained"
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mmtoken-trained-") as tmp:
        data = fresh_data(Path(tmp), config.data_dir())
        env = dict(os.environ, MMTOKEN_DATA=str(data), MMTOKEN_TRAINED="none", MMTOKEN_RECORD="1")
        env.setdefault("MMTOKEN_PROGRESS", "off")
        for chapter, notebook in CHAPTERS.items():
            print(f"trained: executing chapter {chapter} (every run it reads is trained now)", flush=True)
            execute(ROOT / notebook, Path(tmp), env)
        manifest = trained.carry(data / "results", target)
    print(
        f"trained: {len(manifest['files'])} files, {manifest['bytes']:,} bytes in {target} "
        f"({time.perf_counter() - start:.0f} s); commit them"
    )
    return 0


def check() -> int:
    from mmtoken import config
    from mmtoken.book import trained

    target = config.trained_dir() or ROOT / "book" / "trained"
    problems = trained.check(target)
    for p in problems:
        print(f"trained: {p}", file=sys.stderr)
    if not problems:
        print(f"trained: {target} holds runs of today's code")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("make", "check"))
    args = parser.parse_args(argv)
    return make() if args.command == "make" else check()


if __name__ == "__main__":
    sys.exit(main())
