"""Compute time of the part-1 experiments (chapters 1, 2, saturation appendix) at quick scale.

Not a test: prints a table of wall and CPU seconds per experiment, imports excluded.
Run with ``OMP_NUM_THREADS=1 python benchmarks/bench_part1.py``.
"""

import torch
from common import print_timings

from mmtoken import config
from mmtoken.attention import svm
from mmtoken.chapters import app_saturation as saturation
from mmtoken.chapters import ch01_model
from mmtoken.chapters import ch02_global as ch


def main():
    scale = config.scale()
    svm.att_svm([[[0.0, 1.0], [1.0, 0.0]]], [0])  # warm up cvxpy outside the timings
    s = ch.settings(scale)
    rows = [
        ("01 W = p (2 key maps x 6 starts x 500 GD steps)", lambda: ch01_model.run(ch01_model.settings(scale))),
        ("02 Fig. 1 global, published 1000 steps (6 starts)", lambda: ch.published_run(s)),
        ("02 continuation to 10k/200k steps (6 starts)", lambda: ch.long_run(s)),
        ("02 regularization path (radii x 12 starts)", lambda: ch.reg_path(s.instance, s.reg_radii, s.reg_iters)),
        ("app. saturation trap (3 gradients x 6 starts)", lambda: saturation.run(saturation.settings(scale))),
    ]
    print_timings(rows, scale, torch.get_num_threads())


if __name__ == "__main__":
    main()
