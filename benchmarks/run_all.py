"""Run every benchmark (``make bench``); each writes or prints its own table.

``--book`` also times a full execution of every chapter at quick scale
(written to ``benchmarks/results/book.json``). Not part of the tests.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # the scripts share benchmarks/common.py
from common import machine_meta  # noqa: E402


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def time_book() -> dict:
    """Execute every chapter notebook once, in fresh kernels, and time each."""
    rows = {}
    for nb in sorted((ROOT / "book").rglob("*.ipynb")):
        if ".ipynb_checkpoints" in nb.parts:
            continue
        t = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "jupyter", "execute", "--output", "/dev/null", str(nb)],
            check=True,
            capture_output=True,
            cwd=nb.parent,
        )
        rows[str(nb.relative_to(ROOT))] = round(time.perf_counter() - t, 1)
        print(f"{rows[str(nb.relative_to(ROOT))]:8.1f} s  {nb.relative_to(ROOT)}")
    total = round(sum(rows.values()), 1)
    print(f"{total:8.1f} s  whole book at quick scale")
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "book.json").write_text(
        json.dumps({"meta": machine_meta(), "chapters": rows, "total_s": total}, indent=2)
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--book", action="store_true", help="also time a full execution of the book")
    args = parser.parse_args()
    for path in sorted(HERE.glob("bench_*.py")):
        print(f"\n== {path.name}")
        _load(path).main()
    if args.book:
        print("\n== book execution")
        time_book()


if __name__ == "__main__":
    main()
