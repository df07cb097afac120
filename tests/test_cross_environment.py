"""The theory chapters' stored outputs hold under another numeric environment (issue 23, item 4).

nbval runs the chapters that compute without training (the tour, chapters 1-8, 10, 11, 13-15 and the
appendices that compute) once more, under a numeric environment other than the one ``make test``'s
main nbval run uses: OpenBLAS forced to its Haswell kernels, ATen's CPU kernels at their ``default``
capability (no AVX-512), and another thread count; with an empty ``MMTOKEN_DATA``, so every result is
recomputed rather than read from the results cache. The first test checks that these switches do move
low digits here (otherwise the second would prove nothing): a float64 product and a singular value
change in their last bits. Chapters 9 and 12 (training) are measured across the same switches instead;
their printed results lie on a grid coarser than that spread (CONTRIBUTING, "Stored outputs that hold
on any machine").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THEORY = [
    "book/tour.ipynb",
    *(f"book/part1/{n}.ipynb" for n in ("01_model", "02_global", "03_local", "04_inputs")),
    *(f"book/part1/{n}.ipynb" for n in ("05_joint", "06_nonlinear", "07_losses", "08_random")),
    "book/part2/10_one_step.ipynb",
    "book/part2/11_cls_margin.ipynb",
    *(f"book/part3/{n}.ipynb" for n in ("13_w_vs_kq", "14_overparam", "15_multi_token")),
    "book/appendix/saturation.ipynb",
    "book/appendix/your_instance.ipynb",
]
PROBE = """
import json, numpy as np, torch
g = torch.Generator().manual_seed(0)
a = torch.randn(256, 256, dtype=torch.float64, generator=g)
b = torch.randn(256, 256, dtype=torch.float64, generator=g)
print(json.dumps({"torch": (a @ b).sum().item().hex(), "numpy": float(np.linalg.svd(a.numpy())[1][1]).hex(),
                  "threads": torch.get_num_threads()}))
"""


def base_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", str(ROOT))
    for k in ("OPENBLAS_CORETYPE", "ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.pop(k, None)
    return env


def probe(env: dict[str, str]) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(run.stdout)


def other_env(tmp: Path) -> dict[str, str]:
    """Another numeric environment than the default one here, and an empty data folder."""
    native = probe(base_env())
    threads = "2" if native["threads"] == 1 else "1"  # a thread count other than the default
    env = base_env() | {
        "OPENBLAS_CORETYPE": "Haswell",
        "ATEN_CPU_CAPABILITY": "default",
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "OPENBLAS_NUM_THREADS": threads,
        "MMTOKEN_DATA": str(tmp / "data"),
        "MMTOKEN_PROGRESS": "off",
        "MMTOKEN_RECORD": "1",  # nbval of the unmodified chapters: one of the book's own runs (records in tmp)
    }
    return env


def test_the_other_environment_moves_low_digits(tmp_path):
    native, other = probe(base_env()), probe(other_env(tmp_path))
    assert native["torch"] != other["torch"] or native["numpy"] != other["numpy"], (native, other)


def test_theory_chapters_hold_their_stored_outputs_in_another_numeric_environment(tmp_path):
    env = other_env(tmp_path)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--nbval"]
    cmd += ["--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "--nbval-cell-timeout=900", *THEORY]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    assert run.returncode == 0, run.stdout[-20000:] + run.stderr[-2000:]
    assert any((tmp_path / "data" / "results" / "claims").rglob("*")), "the chapters recorded nothing: not recomputed?"
