"""Each chapter at one scale, as a reader runs it: a fresh kernel, an empty data folder, timed (issue 45).

``python benchmarks/paper_scale.py`` executes every chapter of Parts I, III and IV, chapters 10 and 11, the tour
and the computing appendices at ``MMTOKEN_SCALE=paper`` (``--scale quick`` for the quick scale), one at a time,
each in its own ``jupyter execute`` with ``MMTOKEN_DATA`` set to a new empty folder, so nothing computed by an
earlier run or another chapter is read back. Chapters 9 and 12 are left out: at paper scale they need a GPU
(see the GPU note). Per chapter it records the wall seconds, the CPU seconds of the process tree (kernel
included) and the verdict of each claim the chapter printed; a chapter still running after ``--timeout`` seconds
is stopped and recorded as a lower bound (``"status": "timeout"``), never as a time it did not take.

The results are merged into ``benchmarks/results/paper_scale.json`` (one entry per scale and chapter, with the
machine, the date and the commit); the benchmarks appendix and ``scripts/chapter_costs.py`` read them.
Nothing is recorded in the claims ledger: the runs' data folders are deleted after each chapter.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # the scripts share benchmarks/common.py
from common import machine_meta  # noqa: E402

RESULTS = HERE / "results" / "paper_scale.json"
CHAPTERS = (
    "tour",
    "part1/01_model",
    "part1/02_global",
    "part1/03_local",
    "part1/04_inputs",
    "part1/05_joint",
    "part1/06_nonlinear",
    "part1/07_losses",
    "part1/08_random",
    "part2/10_one_step",
    "part2/11_cls_margin",
    "part3/13_w_vs_kq",
    "part3/14_overparam",
    "part3/15_multi_token",
    "part4/16_rates",
    "part4/17_mirror",
    "appendix/saturation",
    "appendix/your_instance",
)
"""The notebooks timed (under ``book/``), in book order; the issue's list (chapters 9 and 12 need a GPU at paper
scale; the claims and benchmarks appendices compute nothing)."""
TIMEOUT_S = 600.0
"""Default limit per chapter: the target, 10 minutes of wall at paper scale on 2 cores; a chapter still running
then has missed it, and its entry says by at least how much it did not finish."""
VERDICT = re.compile(r"^(pass|known miss|FAIL|data missing|not yet computed|not recorded)\s+([A-Za-z][\w.]*)\b")
"""A claim's line as a chapter prints it (``report.chapter_claims``): its verdict, then its id."""


def claim_lines(executed: Path) -> dict[str, str]:
    """``{claim id: the line the chapter printed for it}`` (verdict, id, measured value) from the stream outputs of
    an executed notebook: what explains a verdict, kept because the executed notebook is not."""
    out = {}
    for cell in json.loads(executed.read_text(encoding="utf-8"))["cells"]:
        for o in cell.get("outputs", []):
            if o.get("output_type") != "stream":
                continue
            for line in "".join(o["text"]).splitlines():
                m = VERDICT.match(line.strip())
                if m:
                    out[m.group(2)] = line.strip()
    return out


def verdicts(executed: Path) -> dict[str, str]:
    """``{claim id: verdict}`` from the stream outputs of an executed notebook."""
    return {i: VERDICT.match(line).group(1) for i, line in claim_lines(executed).items()}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _kill_tree(pid: int) -> None:
    """Stop ``pid`` and every process under it (the kernel runs in a session of its own, so a group kill misses
    it)."""
    import psutil  # a dependency of ipykernel, so present wherever jupyter is

    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = parent.children(recursive=True) + [parent]
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)


def time_chapter(name: str, scale: str, timeout: float) -> dict:
    """Execute ``book/<name>.ipynb`` at ``scale`` from an empty data folder; wall, CPU, status, claims."""
    nb = ROOT / "book" / f"{name}.ipynb"
    if not nb.is_file():
        raise FileNotFoundError(f"no notebook {nb}")
    work = Path(tempfile.mkdtemp(prefix="mmtoken-scale-"))
    executed = work / "executed.ipynb"
    env = dict(os.environ, MMTOKEN_SCALE=scale, MMTOKEN_DATA=str(work / "data"), MMTOKEN_PROGRESS="off")
    env.pop("MMTOKEN_RECORD", None)  # a benchmark is not one of the book's recording runs
    cmd = [sys.executable, "-m", "jupyter", "execute", "--timeout=-1", "--output", str(executed), str(nb)]
    cpu0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=nb.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        log, _ = proc.communicate(timeout=timeout)
        status = "finished" if proc.returncode == 0 else "error"
    except subprocess.TimeoutExpired:
        _kill_tree(proc.pid)
        log, _ = proc.communicate()
        status = "timeout"
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    row = {"status": status, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
    if status == "timeout":
        # a killed kernel is no child this process waited for, so RUSAGE_CHILDREN misses its CPU: none is recorded
        row.update(cpu_s=None, limit_s=timeout)
    if status == "error":
        row["error"] = (log or "").strip().splitlines()[-5:]
    if executed.is_file():
        row["claims"] = verdicts(executed)
        row["claim_lines"] = claim_lines(executed)
    shutil.rmtree(work, ignore_errors=True)
    return row


def commit() -> str:
    p = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "book", "mmtoken"], cwd=ROOT, capture_output=True)
    return p.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=("quick", "paper"), default="paper")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="notebook names, e.g. part1/08_random")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per chapter (default %(default)s)")
    args = parser.parse_args(argv)
    if not args.timeout > 0:
        parser.error(f"--timeout must be positive, got {args.timeout}")
    names = args.only or list(CHAPTERS)
    unknown = [n for n in names if n not in CHAPTERS]
    if unknown:
        parser.error(f"--only: unknown {unknown}; choose from {list(CHAPTERS)}")
    store = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    runs = store.setdefault(args.scale, {})
    meta = dict(machine_meta(), commit=commit(), timeout_s=args.timeout)
    for name in names:
        print(f"{name} at {args.scale} scale ...", flush=True)
        row = dict(time_chapter(name, args.scale, args.timeout), meta=meta)
        runs[name] = row
        bad = {k: v for k, v in row.get("claims", {}).items() if v not in ("pass", "known miss")}
        print(
            f"  {row['status']}: {row['wall_s']:.0f} s wall, "
            + (f"{row['cpu_s']:.0f} s CPU; " if row["cpu_s"] is not None else "CPU not measured; ")
            + f"{len(row.get('claims', {}))} claims"
            + (f", not passing: {bad}" if bad else ""),
            flush=True,
        )
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(store, indent=1, sort_keys=True) + "\n")  # after each chapter: a partial run
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
