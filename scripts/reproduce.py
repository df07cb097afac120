"""``make reproduce``: the whole book again from nothing, checked against what the repository stores.

1. A fresh, empty data folder (``MMTOKEN_DATA``): the review data sets are fetched again from their registries
   and every result is computed; the carried trained runs are switched off (``MMTOKEN_TRAINED=none``), so
   chapters 9 and 12 retrain.
2. nbval of every chapter's notebook against its stored outputs (``JOBS`` at a time), as one of the book's own
   runs (``MMTOKEN_RECORD=1``), then of the claims appendix.
3. Every carried run (``book/trained/``) against the one just retrained under the same fingerprint: each array and
   each number of its note within the tolerance of trained results (CONTRIBUTING, "Training results across
   CPUs": :data:`mmtoken.book.tolerance.RTOL` of the stored scale), timings left out.
4. On success, ``benchmarks/results/reproduce.json`` (when, on what machine, the commit, how long) is written, copied
   into the package's data (``project_meta.py apply package-data``), and the claims appendix, which shows it,
   re-executed; the release workflow runs this before it publishes.

About an hour on a 2-core CPU. Exit status 0 when everything reproduced.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
LEDGER_NB = "book/appendix/claims.ipynb"
SKIP = ("seconds",)  # timings in a result's note: they measure the machine, not the result


def differences(new: object, old: object, rtol: float, where: str = "") -> list[str]:
    """Where ``new`` and ``old`` (a result's arrays or note) differ by more than ``rtol`` of the stored scale."""
    if isinstance(old, dict) and isinstance(new, dict):
        kept = {k: v for k, v in old.items() if not any(s in str(k) for s in SKIP)}
        out = [f"{where}/{k}: missing" for k in kept if k not in new]
        for k, v in kept.items():
            if k in new:
                out += differences(new[k], v, rtol, f"{where}/{k}")
        return out
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)):
        if len(old) != len(new):
            return [f"{where}: {len(new)} entries, stored {len(old)}"]
        return [d for i, (a, b) in enumerate(zip(new, old)) for d in differences(a, b, rtol, f"{where}[{i}]")]
    if isinstance(old, (bool, str)) or old is None:
        return [] if new == old else [f"{where}: {new!r}, stored {old!r}"]
    a, b = np.asarray(new, dtype=float), np.asarray(old, dtype=float)
    if a.shape != b.shape:
        return [f"{where}: shape {a.shape}, stored {b.shape}"]
    finite = np.isfinite(b)
    if not np.array_equal(np.isfinite(a), finite):
        return [f"{where}: finite where the stored is not, or the reverse"]
    scale = float(np.abs(b[finite]).max()) if finite.any() else 0.0
    gap = float(np.abs(a[finite] - b[finite]).max()) if finite.any() else 0.0
    return [] if gap <= rtol * scale + 1e-12 else [f"{where}: differs by {gap:.3g} (stored scale {scale:.3g})"]


def compare(carried: Path, retrained: Path, rtol: float) -> tuple[int, list[str], int]:
    """Each carried run of ``carried`` against the file of the same path under ``retrained``: (files, problems,
    files whose fingerprint differs).

    The same path is the same result under the same configuration (the file name is its key), and
    :func:`mmtoken.book.trained.check` has found the code unchanged, so a fingerprint that differs can only come
    from its data: a result keyed by the digest of a run it reads (chapter 9's ``train_accuracy`` and
    ``spread_check`` read the ViT run), which differs when that run is retrained to within the tolerance rather
    than bit for bit. Those are compared by value like the rest."""
    from mmtoken.book import resultcache, trained

    manifest = json.loads((carried / trained.MANIFEST).read_text())
    problems, rekeyed = [], 0
    for e in manifest["files"]:
        new_path = retrained / e["file"]
        try:
            new = resultcache.load(new_path, e["name"], None)
            rekeyed += resultcache.read_header(new_path)[0].get("fingerprint") != e["fingerprint"]
        except (resultcache.CacheError, FileNotFoundError) as exc:
            problems.append(f"{e['file']}: not retrained ({exc})")
            continue
        old = resultcache.load(carried / e["file"], e["name"], e["fingerprint"])
        problems += [f"{e['file']}{d}" for d in differences(new, old, rtol)]
    return len(manifest["files"]), problems, rekeyed


def main(argv: list[str] | None = None) -> int:
    from mmtoken.book import resultcache, tolerance, trained

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="notebooks at a time (default: cores)")
    args = parser.parse_args(argv)
    stale = trained.check(ROOT / "book" / "trained")
    if stale:  # the carried runs must be of today's code, or there is nothing to compare them with
        print("reproduce: the carried runs are not of today's code:\n  " + "\n  ".join(stale), file=sys.stderr)
        return 1
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mmtoken-reproduce-") as tmp:
        env = dict(os.environ, MMTOKEN_DATA=tmp, MMTOKEN_TRAINED="none", MMTOKEN_RECORD="1", MMTOKEN_PROGRESS="off")
        py = [sys.executable, "-m"]
        notebooks = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "book").rglob("*.ipynb"))
        chapters = [nb for nb in notebooks if nb != LEDGER_NB and ".ipynb_checkpoints" not in nb]
        nbval = ["--nbval", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg", "--nbval-cell-timeout=7200"]
        steps = [
            ("fetch the review data sets", py + ["mmtoken.datasets", "fetch", "imdb", "rt"]),
            (
                "nbval of every chapter",
                py
                + ["pytest", "-p", "no:cacheprovider", "-n", str(args.jobs)]
                + ["--dist", "loadfile", *chapters, *nbval],
            ),
            ("nbval of the claims appendix", py + ["pytest", "-p", "no:cacheprovider", LEDGER_NB, *nbval]),
        ]
        for what, cmd in steps:
            print(f"reproduce: {what}", flush=True)
            if subprocess.run(cmd, cwd=ROOT, env=env).returncode != 0:
                print(f"reproduce: FAILED at: {what}", file=sys.stderr)
                return 1
        carried = ROOT / "book" / "trained"
        n, problems, rekeyed = compare(carried, Path(tmp) / "results", tolerance.RTOL)
        for p in problems:
            print(f"reproduce: {p}", file=sys.stderr)
        if problems:
            print(f"reproduce: FAILED: {len(problems)} differences in {n} carried runs", file=sys.stderr)
            return 1
        seconds = time.perf_counter() - start
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        record = {
            "date": time.strftime("%Y-%m-%d"),
            "machine": resultcache.machine(),
            "commit": commit.stdout.strip() or "unknown",
            "seconds": round(seconds),
            "notebooks": len(chapters) + 1,
            "carried_runs": n,
        }
        (ROOT / "benchmarks" / "results" / trained.REPRODUCED).write_text(json.dumps(record, indent=1) + "\n")
        subprocess.run([sys.executable, "scripts/project_meta.py", "apply", "package-data"], cwd=ROOT, check=True)
        print("reproduce: the claims appendix shows this run: re-executing it", flush=True)
        subprocess.run(py + ["jupyter", "execute", "--inplace", LEDGER_NB], cwd=ROOT, env=env, check=True)
    print(
        f"reproduce: passed in {seconds:.0f} s ({n} carried runs within rtol {tolerance.RTOL} of the retrained;"
        f" {rekeyed} of them keyed by a retrained run's digest)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
