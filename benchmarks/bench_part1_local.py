"""Compute time of the chapter 3 (local convergence) and 4 (many inputs) experiments at quick scale.

Not a test: prints a table of wall and CPU seconds per experiment, imports excluded.
Run with ``OMP_NUM_THREADS=1 python benchmarks/bench_part1_local.py``.
"""

import torch
from common import print_timings

from mmtoken import config
from mmtoken.attention import geometry, instances, svm
from mmtoken.chapters import ch03_local as lc
from mmtoken.chapters import ch04_inputs as mi


def main():
    scale = config.scale()
    svm.att_svm([[[0.0, 1.0], [1.0, 0.0]]], [0])  # warm up cvxpy outside the timings
    inst = instances.fig2()
    opt = geometry.optimal_tokens(inst.gamma)
    gmm = svm.att_svm(inst.K, opt).x
    n_ngd = config.pick(quick=4000, paper=20_000, which=scale)
    n_gd = config.pick(quick=2000, paper=20_000, which=scale)
    rows = [
        (
            "03 whole chapter: Fig. 1 local (6 starts) + 12 cone runs, batched; counterexample (16 starts); 10 SVMs",
            lambda: lc.run(lc.settings(scale)),
        ),
        (
            f"04 Fig. 2 normalized GD, {n_ngd} steps (6 starts, every step recorded)",
            lambda: mi.train_run(inst.problem(), inst.starts, opt, gmm, "normalized", 0.1, n_ngd),
        ),
        (
            f"04 Fig. 2 plain GD, {n_gd} steps (6 starts, every step recorded)",
            lambda: mi.train_run(inst.problem(), inst.starts, opt, gmm, "gd", 1.0, n_gd),
        ),
    ]
    print_timings(rows, scale, torch.get_num_threads())


if __name__ == "__main__":
    main()
