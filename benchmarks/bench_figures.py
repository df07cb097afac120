"""Per published figure: the package's batched stable trainer against a per-start loop written
the way the public code is (an ``nn.Module``, autograd, ``torch.optim.SGD``, float32).

Run: ``make bench`` (or ``python benchmarks/bench_figures.py``). Writes
``benchmarks/results/figures.json`` and prints a table. Not part of the tests.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from common import machine_meta  # benchmarks/ is on sys.path (run directly or from run_all)
from torch import nn

from mmtoken.attention import instances, joint, train
from mmtoken.attention.model import AttentionProblem

STEPS = 1000
OUT = Path(__file__).resolve().parent / "results"


class PublicStyle(nn.Module):
    """``f(X) = <X v, softmax(X W p)>`` with ``p`` the only parameter, float32."""

    def __init__(self, p0, X, W, v, v_trainable=False):
        super().__init__()
        self.p = nn.Parameter(torch.tensor(p0, dtype=torch.float32))
        self.X = torch.tensor(X, dtype=torch.float32)
        self.W = torch.tensor(W, dtype=torch.float32)
        v = torch.tensor(v, dtype=torch.float32)
        self.v = nn.Parameter(v) if v_trainable else v

    def forward(self):
        s = torch.softmax(self.X @ self.W @ self.p, dim=-1)
        return (s * (self.X @ self.v)).sum(-1)


def public_loop(inst: instances.Instance, start, v0=None, steps: int = STEPS) -> None:
    model = PublicStyle(start, inst.X, inst.W, inst.v if v0 is None else v0, v_trainable=v0 is not None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    Y = torch.tensor(inst.Y, dtype=torch.float32)
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.log1p(torch.exp(-Y * model())).mean()
        loss.backward()
        for prm in model.parameters():
            prm.grad /= prm.grad.norm() + 1e-30  # normalized gradients, as published
        opt.step()


def _time(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def cases():
    """(name, batched run, per-start runs) for each published figure."""
    out = []
    for case in ("global", "local"):
        inst = instances.fig1(case)
        out.append(
            (
                f"fig1-{case} (6 starts)",
                lambda inst=inst: train.train_p(inst.problem(), inst.starts, steps=STEPS, record_every=10),
                lambda inst=inst: [public_loop(inst, s) for s in inst.starts],
            )
        )
    inst2 = instances.fig2()
    out.append(
        (
            "fig2 (6 starts)",
            lambda: train.train_p(inst2.problem(), inst2.starts, steps=STEPS, record_every=10),
            lambda: [public_loop(inst2, s) for s in inst2.starts],
        )
    )
    for case in ("tight", "loose"):
        inst = instances.fig3(case)
        out.append(
            (
                f"fig3-{case} (joint v, p)",
                lambda inst=inst: joint.train_joint(
                    inst.X, inst.Y, inst.extra["v0"], inst.starts[0], steps=STEPS, record_every=10
                ),
                lambda inst=inst: public_loop(inst, inst.starts[0], v0=inst.extra["v0"]),
            )
        )
    Cs = [*range(1, 11), 100]
    fig4 = [instances.fig4(C) for C in Cs]
    problem4 = AttentionProblem(np.stack([i.K for i in fig4]), np.stack([i.gamma for i in fig4]))
    for loss in ("logistic",):
        out.append(
            (
                f"fig4 (11 values of C, {loss})",
                lambda loss=loss: train.train_p(
                    problem4, np.zeros((len(Cs), 2)), steps=STEPS, record_every=10, loss=loss
                ),
                lambda: [public_loop(i, i.starts[0]) for i in fig4],
            )
        )
    return out


def main() -> None:
    rows = []
    for name, batched, loop in cases():
        with torch.inference_mode():
            t_b = _time(batched)
            os.environ["MMTOKEN_FASTPATH"] = "off"  # the torch code, the path a GPU runs
            t_t = _time(batched)
            del os.environ["MMTOKEN_FASTPATH"]
        t_l = _time(loop, repeat=1)
        rows.append(
            {
                "figure": name,
                "batched_compiled_s": round(t_b, 4),
                "batched_torch_s": round(t_t, 4),
                "per_start_public_s": round(t_l, 4),
                "speedup": round(t_l / t_b, 1),
                "speedup_torch": round(t_l / t_t, 1),
            }
        )
        print(
            f"{name:34s} compiled {t_b:7.3f} s  torch {t_t:7.3f} s  per-start public-style {t_l:7.3f} s"
            f"  x{t_l / t_b:7.1f} (torch x{t_l / t_t:5.1f})"
        )
    OUT.mkdir(exist_ok=True)
    meta = {**machine_meta(), "steps": STEPS}
    (OUT / "figures.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
