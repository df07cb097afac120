"""Whole processes, side by side: ``python -m mmtoken figures --only fig-global-paths`` (paper A's Fig. 1,
global case) against the same figure made by

- **the official code** run as a script, when it is placed by hand: ``--official PATH`` (a ``.py``, or a
  notebook whose code cells are run as one script, each ``plt.show()`` saving the figure as PNG and PDF as
  the other two do), in its own folder and, with ``--official-python PY``, its own environment (paper A's
  notebooks import ``cvxopt`` and ``scikit-learn``, which mmtoken does not install); the public repository
  belongs in the git-ignored ``benchmarks/official/`` and is never committed;
- else **the public-style replica** (``benchmarks/public_style_fig_global_paths.py``: nn.Module, autograd,
  SGD, float32, same steps, same plot);
- **the floor** (``benchmarks/floor_fig_global_paths.py``): a plain Python process with NumPy and
  matplotlib only, computing just what the figure draws.

Also ``python -c "import torch"`` and ``import mmtoken``. CPU time (user + sys of the child process, from
``resource.getrusage``), median of ``--repeat`` runs, is the measure: the machine may be shared, and wall time
then measures the neighbours. The figure command is timed twice: with its results cached (``cached``: what a
reader gets after editing plotting code) and with an empty data folder (``cold``: it trains and draws). Issue
30's targets are printed against the ratios: cold at least 3x faster than the baseline (official or replica), within 2x
of the floor. Writes ``benchmarks/results/whole_process.json``; not a test.

Run: ``python benchmarks/bench_whole_process.py [--repeat 3] [--official PATH [--official-python PY]]``; the run
of 2026-12-07 used ``--official benchmarks/official/MaxMarginTokenSelection/single_input_converge.ipynb
--official-python benchmarks/official/.venv/bin/python`` (that venv: torch 2.13.0 and the lock's NumPy, SciPy and
matplotlib, with cvxopt and scikit-learn).
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


def cpu_of(cmd: list[str], env: dict | None = None, cwd: Path | None = None) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of ``cmd`` as a child process (in ``cwd``)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    env = {**os.environ, **(env or {})}
    if cwd is not None:  # a script run in its own folder imports its neighbours (the official ``base.py``)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(cwd), env.get("PYTHONPATH")]))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def as_script(path: Path, folder: str) -> Path:
    """``path`` itself for a ``.py``; for a notebook, its code cells (IPython magics and shell lines left out)
    written to one script in ``folder``, each ``plt.show()`` replaced by saving the figure as PNG and PDF in
    ``folder`` (as ``mmtoken figures`` and the floor do: under Agg a ``show`` would draw nothing)."""
    if path.suffix == ".py":
        return path
    if path.suffix != ".ipynb":
        raise SystemExit(f"--official must be a .py or an .ipynb, got {path}")
    cells = json.loads(path.read_text())["cells"]
    lines = ["import matplotlib", "matplotlib.use('Agg')"]
    shown = 0
    for c in cells:
        if c["cell_type"] == "code":
            for ln in "".join(c["source"]).splitlines():
                if ln.lstrip().startswith(("%", "!")):
                    continue
                if ln.strip() == "plt.show()":
                    indent = ln[: len(ln) - len(ln.lstrip())]
                    stem = f"{folder}/official{shown}"
                    ln = f"{indent}[plt.gcf().savefig('{stem}.' + ext) for ext in ('png', 'pdf')]"
                    shown += 1
                lines.append(ln)
    out = Path(folder) / (path.stem + "_as_script.py")
    out.write_text("\n".join(lines) + "\n")
    return out


TARGETS = {"baseline / cold": (">=", 3.0), "cold / floor": ("<=", 2.0)}  # issue 30, item 6


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--official", type=Path, default=None, help="the official script or notebook, placed by hand")
    ap.add_argument(
        "--official-python",
        type=Path,
        default=None,
        help="the interpreter of the official code (its own venv: it needs cvxopt and scikit-learn); default: this one",
    )
    args, _ = ap.parse_known_args(argv)  # run_all.py passes its own arguments
    if args.repeat < 1:
        raise SystemExit(f"--repeat must be at least 1, got {args.repeat}")
    if args.official is not None and not args.official.is_file():
        raise SystemExit(f"--official: no file {args.official}")
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        figs = ["-m", "mmtoken", "figures", "--only", "fig-global-paths", "--out", tmp]
        if args.official is not None:
            # run in its own folder, which also goes on the path (the notebooks import their ``base.py``)
            official_py = str(args.official_python.absolute() if args.official_python else py)
            baseline = (
                "official script",
                [official_py, str(as_script(args.official, tmp))],
                args.official.parent.resolve(),
            )
        else:
            baseline = (
                "public-style replica",
                [py, str(HERE / "public_style_fig_global_paths.py"), f"{tmp}/pub"],
                None,
            )
        cases = {
            "import torch": ([py, "-c", "import torch"], None, None),
            "import mmtoken (+ config, ledger, plotting)": (
                [py, "-c", "import mmtoken.config, mmtoken.book.ledger, mmtoken.book.plotting"],
                None,
                None,
            ),
            "mmtoken figures, results cached": ([py, *figs], None, None),
            "mmtoken figures, empty data folder (cold)": ([py, *figs], "cold", None),
            baseline[0]: (baseline[1], None, baseline[2]),
            "floor (python + numpy + matplotlib)": (
                [py, str(HERE / "floor_fig_global_paths.py"), f"{tmp}/floor"],
                None,
                None,
            ),
        }
        subprocess.run([py, *figs], check=True, stdout=subprocess.DEVNULL)  # fill the results cache
        rows = {}
        for name, (cmd, mode, cwd) in cases.items():
            runs = []
            for _ in range(args.repeat):
                env = {"MMTOKEN_DATA": tempfile.mkdtemp(dir=tmp)} if mode == "cold" else None
                runs.append(cpu_of(cmd, env, cwd))
            cpu = sorted(r[0] for r in runs)
            rows[name] = {
                "cpu_s_min": round(cpu[0], 2),
                "cpu_s_median": round(cpu[len(cpu) // 2], 2),
                "wall_s_median": round(sorted(r[1] for r in runs)[len(runs) // 2], 2),
            }
            print(f"{name:50s} CPU min {cpu[0]:6.2f} s  median {cpu[len(cpu) // 2]:6.2f} s", flush=True)
    med = {k: v["cpu_s_median"] for k, v in rows.items()}
    cold, floor = med["mmtoken figures, empty data folder (cold)"], med["floor (python + numpy + matplotlib)"]
    ratios = {"baseline / cold": round(med[baseline[0]] / cold, 2), "cold / floor": round(cold / floor, 2)}
    print(f"baseline: {baseline[0]}")
    for k, v in ratios.items():
        op, bar = TARGETS[k]
        met = v >= bar if op == ">=" else v <= bar
        print(f"{k:16s} x{v:<6} target {op} {bar:g}: {'met' if met else 'MISSED'}")
    OUT.mkdir(exist_ok=True)
    (OUT / "whole_process.json").write_text(
        json.dumps(
            {
                "meta": {**machine_meta(), "repeat": args.repeat, "baseline": baseline[0]},
                "rows": rows,
                "ratios": ratios,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
