"""Random-instance sweep (chapter 8): batched trainer against one instance at a time.

Not a test. Prints

* instances per second of normalized GD for the batched trainer (one call for
  all instances of one key dimension) and for a Python loop over the same
  instances, same steps, and their ratio (target >= 20x), for both code paths
  of :func:`mmtoken.attention.train.train_p`: the torch code (``MMTOKEN_FASTPATH=off``,
  the path a GPU runs) and, on a CPU with numba, the compiled kernel;
* the wall and CPU time of the whole sweep ``ch08_random.run(ch08_random.settings(scale))`` at the
  current scale (quick: >= 1000 instances, target < 60 s on 2 CPU cores), for
  each path.

Run with ``OMP_NUM_THREADS=1 python benchmarks/bench_random.py`` (add
``MMTOKEN_SCALE=paper`` on a GPU for the paper-scale sweep).
"""

import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from common import machine_meta  # benchmarks/ is on sys.path (run directly or from run_all)

from mmtoken import config
from mmtoken.attention import fastpath, random_batch
from mmtoken.chapters import ch08_random as ch


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def compare(b, steps: int, lr: float, loop_instances: int) -> dict:
    I = b["K"].shape[0]
    random_batch.train_batch(b["K"][:2], b["gamma"][:2], b["mask"][:2], 5, lr)  # warm-up outside the timings
    out, wall_b, _ = timed(lambda: random_batch.train_batch(b["K"], b["gamma"], b["mask"], steps, lr))
    k = min(loop_instances, I)
    p_loop, wall_l, _ = timed(
        lambda: random_batch.train_one_by_one(b["K"][:k], b["gamma"][:k], b["mask"][:k], steps, lr)
    )
    agree = float(np.abs(p_loop - out["p"][:k]).max())
    rate_b, rate_l = I / wall_b, k / wall_l
    print(
        f"  batched: {I} instances in {wall_b:.2f} s = {rate_b:.0f} inst/s; loop: {k} instances in "
        f"{wall_l:.2f} s = {rate_l:.1f} inst/s; speed-up {rate_b / rate_l:.0f}x; "
        f"max |p_batched - p_loop| = {agree:.1e}"
    )
    return {
        "batched_inst_per_s": round(rate_b, 1),
        "loop_inst_per_s": round(rate_l, 1),
        "speedup": round(rate_b / rate_l, 1),
        "max_abs_diff": agree,
    }


def main(loop_instances: int = 20, steps: int = 300, d: int = 8):
    scale = config.scale()
    grid = ch.settings(scale)
    b = ch.padded_batch(grid, d)
    print(f"scale: {scale}, device: {config.device()}, torch threads: {torch.get_num_threads()}")
    paths = [("torch code (MMTOKEN_FASTPATH=off)", "off")]
    if config.device().type == "cpu" and fastpath.njit is not None:
        paths.append(("compiled CPU kernel", "on"))
    report = {"meta": machine_meta(), "scale": scale, "d": d, "steps": steps, "torch_threads": torch.get_num_threads()}
    for name, flag in paths:
        os.environ["MMTOKEN_FASTPATH"] = flag
        print(f"{name}; d = {d}, {steps} steps:")
        row = compare(b, steps, grid.lr, loop_instances)
        ch._run.cache_clear()  # a cold sweep
        r, wall, cpu = timed(lambda: ch.run(grid))
        print(
            f"  full sweep ({scale}): {len(r.table)} instances, {grid.steps} steps: wall {wall:.1f} s, "
            f"cpu {cpu:.1f} s (training {r.seconds_train:.1f} s, SVMs {r.seconds_svm:.1f} s)"
        )
        row.update({"sweep_instances": len(r.table), "sweep_wall_s": round(wall, 1), "sweep_cpu_s": round(cpu, 1)})
        report[name] = row
    os.environ.pop("MMTOKEN_FASTPATH", None)
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / "random.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
