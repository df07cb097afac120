"""Whole processes, side by side: ``python -m mmtoken figures --only fig-global-paths`` against the
same figure made by a script written the way the public code is
(``benchmarks/public_style_fig_global_paths.py``: nn.Module, autograd, SGD, float32, same steps, same
plot). Also ``python -c "import torch"`` (the floor both pay) and ``import mmtoken``.

CPU time (user + sys of the child process, from ``resource.getrusage``) is the measure: the machine
may be shared, and wall time then measures the neighbours. The figure command is timed three ways:
with its rendering kept in the figure cache (``kept``: code and settings unchanged since it was last
drawn; the process copies two files and imports neither torch nor matplotlib), drawn again from the
results cache (``--force``: what a reader gets after editing the plotting code), and with an empty
data folder (``cold``: it trains and draws). Writes ``benchmarks/results/whole_process.json``; not a test.

Run: ``python benchmarks/bench_whole_process.py [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import machine_meta  # benchmarks/ is on sys.path (run directly or from run_all)

HERE = Path(__file__).resolve().parent
OUT = HERE / "results"


def cpu_of(cmd: list[str], env: dict | None = None) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``cmd`` as a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args, _ = ap.parse_known_args(argv)  # run_all.py passes its own arguments
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        figs = ["-m", "mmtoken", "figures", "--only", "fig-global-paths", "--out", tmp]
        cases = {
            "import torch": ([py, "-c", "import torch"], None),
            "import mmtoken (+ config, ledger, plotting)": (
                [py, "-c", "import mmtoken.config, mmtoken.book.ledger, mmtoken.book.plotting"],
                None,
            ),
            "mmtoken figures, rendering kept (unchanged code)": ([py, *figs], None),
            "mmtoken figures --force, result cached": ([py, *figs, "--force"], None),
            "mmtoken figures, empty data folder (cold)": ([py, *figs], "cold"),
            "public-style script": ([py, str(HERE / "public_style_fig_global_paths.py"), f"{tmp}/public"], None),
        }
        subprocess.run([py, *figs], check=True, stdout=subprocess.DEVNULL)  # fill the results and figure caches
        rows = {}
        for name, (cmd, mode) in cases.items():
            runs = []
            for _ in range(args.repeat):
                env = None
                if mode == "cold":
                    env = {"MMTOKEN_DATA": tempfile.mkdtemp(dir=tmp)}
                runs.append(cpu_of(cmd, env))
            cpu = sorted(r[0] for r in runs)
            rows[name] = {
                "cpu_s_min": round(cpu[0], 2),
                "cpu_s_median": round(cpu[len(cpu) // 2], 2),
                "wall_s_median": round(sorted(r[1] for r in runs)[len(runs) // 2], 2),
            }
            print(f"{name:50s} CPU min {cpu[0]:6.2f} s  median {cpu[len(cpu) // 2]:6.2f} s")
    pub = rows["public-style script"]["cpu_s_median"]
    ratios = {k: round(pub / rows[k]["cpu_s_median"], 2) for k in rows if k.startswith("mmtoken figures")}
    for k, v in ratios.items():
        print(f"public-style / {k}: x{v}")
    OUT.mkdir(exist_ok=True)
    (OUT / "whole_process.json").write_text(
        json.dumps(
            {"meta": {**machine_meta(), "repeat": args.repeat}, "rows": rows, "ratio_public_over": ratios}, indent=2
        )
    )


if __name__ == "__main__":
    main()
