"""How long the heavy chapters take at each scale, on a 2-core CPU and on a T4-class GPU.

The GPU note of chapters 8, 9 and 12 (``book/_snippets/gpu.md``) is
generated here. Two of its columns are measurements on this project's 2-core
build machine: the quick-scale time of each chapter's computation
(``MEASURED``: seconds recorded by the chapters' own runs from empty caches)
and, where ``benchmarks/paper_scale.py`` ran the chapter at paper scale
(``benchmarks/results/paper_scale.json``), its paper-scale wall time, marked
"measured" (a lower bound where the run was stopped at the script's limit).
The other cells are estimates, and the note says so:

* work is counted, not guessed: one training step of each chapter's model is
  run at each scale's sizes under :class:`torch.utils.flop_counter.FlopCounterMode`
  (matrix-product FLOPs) and a dispatch counter (tensor operations, i.e. GPU
  kernel launches); multiplied by the number of steps of the chapter's runs;
* paper scale on the CPU = measured quick time, its part that grows with the scale
  (``SCALED``) multiplied by paper FLOPs / quick FLOPs;
* T4 = FLOPs / sustained rate + launches x launch cost, with the rates in
  ``T4`` (half the card's peak: 8.1 TFLOP/s in float32, 0.25 in float64) and
  10 us per kernel launch. Evaluation passes and the CPU-only cvxpy checks
  are left out (they are a small part at paper scale, and do not move to a GPU).

Run ``python scripts/chapter_costs.py`` to rewrite the snippet; a unit test
checks that it is up to date.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mmtoken import config  # noqa: E402
from mmtoken.attention import grad, train  # noqa: E402
from mmtoken.attention.model import AttentionProblem  # noqa: E402
from mmtoken.chapters import ch08_random, ch09_vit_sparsity, ch12_real_reviews  # noqa: E402
from mmtoken.embeddings import review_model  # noqa: E402
from mmtoken.vision import vit  # noqa: E402

SNIPPET = ROOT / "book" / "_snippets" / "gpu.md"
SCALE_RUNS = ROOT / "benchmarks" / "results" / "paper_scale.json"
"""What ``benchmarks/paper_scale.py`` measured: each chapter from an empty data folder, at each scale."""

MEASURED = {
    "08_random": 14.9,
    "09_vit_sparsity": 375.0,
    "12_real_reviews": 428.5,
}
"""Quick-scale wall seconds of each chapter from empty caches on the 2-core build machine.

Chapter 8 and 12: the notebooks' execution times in the strict build of 2026-12-01 (jupyter-cache
records). Chapter 9: its five runs (three held-out seeds and the smaller-rate control at 184 CPU s
each, the one-epoch collapse control at ~20 s, as the runs recorded them in ``history.json``), two
single-threaded processes at a time.
"""

SCALED = {"08_random": 1.0, "09_vit_sparsity": 1.0, "12_real_reviews": 128.0 / 428.5}
"""Share of the measured time that grows with the scale: chapter 12's validation search and regime
study run at one size; its seeds' fits took 128 CPU s of the 428.5 s (recorded by the runs)."""

T4 = {"float32": 4.0e12, "float64": 0.125e12, "launch_s": 10e-6}
"""Sustained rates assumed for a T4 (half of its peak) and the cost of one kernel launch."""

CHAPTERS = {
    "08_random": "8 (random instances)",
    "09_vit_sparsity": "9 (ViT on images)",
    "12_real_reviews": "12 (real reviews)",
}
NOTEBOOKS = {
    "08_random": "part1/08_random",
    "09_vit_sparsity": "part1/09_vit_sparsity",
    "12_real_reviews": "part2/12_real_reviews",
}
"""Each chapter's notebook under ``book/``, as ``paper_scale.py`` names it."""


def measured_paper(chapter: str, runs: Path = SCALE_RUNS) -> str | None:
    """The paper-scale wall time ``paper_scale.py`` measured for ``chapter`` (``"> 10 min"`` where it was
    stopped at its limit), or None where it has no finished or stopped run."""
    if not runs.is_file():
        return None
    row = json.loads(runs.read_text()).get("paper", {}).get(NOTEBOOKS[chapter])
    if row is None or row["status"] not in ("finished", "timeout"):
        return None
    return human(row["wall_s"]) if row["status"] == "finished" else f"> {human(row['limit_s'])}"


class _OpCounter(TorchDispatchMode):
    """Counts tensor operations (each at least one kernel launch on a GPU) and the elements they write.

    Elementwise work (softmax, exp, the optimizer's updates) is counted as one FLOP per element written;
    matrix products are left to :class:`FlopCounterMode`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.elements = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        if func._overloadpacket not in flop_registry:
            outs = out if isinstance(out, (tuple, list)) else (out,)
            self.elements += sum(o.numel() for o in outs if isinstance(o, torch.Tensor))
        return out


@dataclass
class Work:
    """Matrix-product FLOPs and tensor operations of a chapter at one scale, and their dtype."""

    flops: float
    ops: float
    dtype: str

    def __add__(self, other: Work) -> Work:
        return Work(self.flops + other.flops, self.ops + other.ops, self.dtype)

    def __mul__(self, k: float) -> Work:
        return Work(self.flops * k, self.ops * k, self.dtype)


def count(step) -> Work:
    """FLOPs (matrix products, plus one per element written by other operations) and operations of ``step()``."""
    ops = _OpCounter()
    with FlopCounterMode(display=False) as flops, ops:
        dtype = step()
    return Work(float(flops.get_total_flops() + ops.elements), float(ops.ops), dtype)


@contextmanager
def torch_path():
    """Count the torch implementation (the compiled CPU kernel is invisible to the counters)."""
    old = os.environ.get("MMTOKEN_FASTPATH")
    os.environ["MMTOKEN_FASTPATH"] = "off"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MMTOKEN_FASTPATH")
        else:
            os.environ["MMTOKEN_FASTPATH"] = old


def _random_step(pr: AttentionProblem, p0: torch.Tensor, lr: float) -> str:
    with torch_path(), torch.inference_mode():
        train.train_p(pr, p0, steps=1, lr=lr, record_every=1, record_probs=False)
        grad.saturation(pr, p0)
    return "float64"


def _vit_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> str:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return "float32"


def _fit_step(params, rows, y, counts, names, batch) -> str:
    review_model.fit(params, rows, y, counts=counts, train=names, epochs=1, lr=1e-3, batch=batch, seed=0)
    return "float32"


def random_work(scale: str) -> Work:
    """Chapter 8: normalized GD on every padded batch of the grid (one batch per key dimension ``d``)."""
    grid = ch08_random.settings(scale)
    total = Work(0.0, 0.0, "float64")
    for d in grid.d:
        b = ch08_random.padded_batch(grid, d)
        pr = AttentionProblem(b["K"], b["gamma"], b["mask"])
        p0 = torch.zeros(pr.K.shape[0], d, dtype=pr.K.dtype)

        total = total + count(functools.partial(_random_step, pr, p0, grid.lr)) * grid.steps
    return total


def vit_work(scale: str, batch: int = 2) -> Work:
    """Chapter 9: forward, backward and AdamW step of every run of the study, at the configured batch size."""
    total = Work(0.0, 0.0, "float32")
    n_train = {"fashion-mnist": 60_000, "cifar-10": 50_000}
    for group in ch09_vit_sparsity.controls(ch09_vit_sparsity.settings(scale)).values():
        for exp in group:
            c, tc = exp.model, exp.train
            model = vit.ViT(c)
            opt = torch.optim.AdamW(model.parameters(), lr=tc.lr)
            x = torch.zeros(batch, c.channels, c.image_size, c.image_size)
            y = torch.zeros(batch, dtype=torch.long)
            per = count(functools.partial(_vit_step, model, opt, x, y))
            steps = math.ceil((n_train[exp.dataset] - exp.n_validation) / tc.batch_size) * tc.epochs
            # FLOPs grow with the batch; the number of launches does not
            total = total + Work(per.flops / batch * tc.batch_size * steps, per.ops * steps, "float32")
    return total


def reviews_work(scale: str) -> Work:
    """Chapter 12: the four Adam fits of every seed on IMDB and Rotten Tomatoes (two-phase runs left out)."""
    from mmtoken.datasets import text
    from mmtoken.embeddings.review_runs import RUNS, SEEDS, prepare, run_settings, tensors

    total = Work(0.0, 0.0, "float32")
    for name in ("imdb", "rt"):
        s = ch12_real_reviews.settings(scale).setup(name)
        data = prepare(s, text.load(name))
        t = tensors(data)
        N = t.X.shape[0]
        rows = t.X[: s.batch]
        params = review_model.Params(torch.zeros(data.V, s.d), torch.zeros(s.d), torch.ones(s.d))
        for run in RUNS:
            names, _, epochs = run_settings(s, run)
            step = functools.partial(_fit_step, params, rows, t.y[: s.batch], t.counts[: s.batch], names, s.batch)
            total = total + count(step) * (math.ceil(N / s.batch) * epochs * len(SEEDS))
    return total


WORK = {"08_random": random_work, "09_vit_sparsity": vit_work, "12_real_reviews": reviews_work}


def estimates(chapter: str) -> dict:
    """Counted work at both scales and the four times (seconds) of the table."""
    with config.single_thread():
        quick, paper = WORK[chapter]("quick"), WORK[chapter]("paper")
    if not quick.flops > 0:
        raise RuntimeError(f"no work counted for chapter {chapter} at quick scale: the counters missed its kernels")
    cpu_quick = MEASURED[chapter]
    grows = cpu_quick * SCALED[chapter]

    def t4(w: Work) -> float:
        return w.flops / T4[w.dtype] + w.ops * T4["launch_s"]

    # the part that does not grow with the scale is assumed to speed up as the counted quick runs do
    fixed = (cpu_quick - grows) * t4(quick) / grows
    return {
        "quick": quick,
        "paper": paper,
        "cpu_quick": cpu_quick,
        "cpu_paper": cpu_quick - grows + grows * paper.flops / quick.flops,
        "t4_quick": fixed + t4(quick),
        "t4_paper": fixed + t4(paper),
    }


def human(seconds: float) -> str:
    """A duration to one or two significant figures: ``40 s``, ``7 min``, ``3.5 h``, ``12 days``."""
    if seconds < 90:
        return f"{max(1, round(seconds, -1 if seconds >= 20 else 0)):.0f} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60):.0f} min"
    if seconds < 48 * 3600:
        h = seconds / 3600
        return f"{h:.1f} h" if h < 10 else f"{round(h):.0f} h"
    return f"{round(seconds / 86400):.0f} days"


NOTE = """:::{{admonition}} Faster on a GPU
:class: tip
This chapter runs at quick scale on a laptop CPU. For the paper-scale run,
open it on Colab (the page's launch button, or the notebook's *Open in
Colab* badge; its notebook asks Colab for a GPU runtime) and set `mmtoken.config.set_scale("paper")` in the setup cell
(or `MMTOKEN_SCALE=paper`); the device is picked automatically and the setup
cell prints it. How long the heavy chapters take:

{table}

The first time column is measured (the chapter from empty caches on the
book's 2-core build machine), and so is a paper-scale CPU cell marked
*measured* (the whole notebook in a fresh kernel from an empty data folder;
"> " where the run was stopped at that limit).{measured} The others are estimates from
counted work: one training step of each run at that scale's sizes is counted
(matrix-product FLOPs, one FLOP per element written by other operations,
and tensor operations) and multiplied by the number of steps. The
paper-scale CPU time scales the measured one by the FLOP ratio; a T4 is
assumed to sustain half its peak (4 TFLOP/s in float32; 0.125 in float64,
which chapter 8 uses) plus 10 µs per kernel launch, so small problems are
bound by launches. Data preparation and the cvxpy checks are left out. No
GPU was available to measure: read them as orders of magnitude (the
book's `chapter_costs` script computes them).
:::
"""


def table(rows: dict) -> str:
    """The markdown table of the note."""
    lines = ["| chapter | quick, 2-core CPU | paper, 2-core CPU | quick, T4 | paper, T4 |", "|---|---|---|---|---|"]
    for ch, r in rows.items():
        paper = measured_paper(ch)
        lines.append(
            f"| {CHAPTERS[ch]} | {human(r['cpu_quick'])} | "
            f"{human(r['cpu_paper']) if paper is None else paper + ' (measured)'} | "
            f"{human(r['t4_quick'])} | {human(r['t4_paper'])} |"
        )
    return "\n".join(lines)


def measured_when(runs: Path = SCALE_RUNS) -> str:
    """`` Measured at paper scale on 2026-12-07, AMD EPYC (2 cores), commit 1f68f92.`` for the chapters the
    table marks measured, or ``""`` where none is."""
    if not runs.is_file():
        return ""
    paper = json.loads(runs.read_text()).get("paper", {})
    metas = [paper[nb]["meta"] for ch, nb in NOTEBOOKS.items() if measured_paper(ch, runs) and "meta" in paper[nb]]
    if not metas:
        return ""
    m = metas[0]
    return f" The measured cells ran on {m['date']}, {m['cpu']} ({m['cores']} cores), commit {m['commit']}."


def note(rows: dict) -> str:
    """The whole snippet (generated: a test checks it is up to date)."""
    text = NOTE.format(table=table(rows), measured=measured_when())
    return "<!-- generated by scripts/chapter_costs.py; do not edit -->\n" + text


def main() -> None:
    rows = {}
    for ch in WORK:
        start = time.perf_counter()
        rows[ch] = estimates(ch)
        print(f"{ch}: counted in {time.perf_counter() - start:.0f} s")
    for ch, r in rows.items():
        print(
            ch,
            {k: (f"{v.flops:.3g} FLOP, {v.ops:.3g} ops" if isinstance(v, Work) else f"{v:.4g}") for k, v in r.items()},
        )
    SNIPPET.write_text(note(rows))
    print(f"wrote {SNIPPET.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
