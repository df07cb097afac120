"""Fig. 1 (global case) the way the public notebook makes it, as one script: nn.Module, autograd,
torch.optim.SGD, float32, each start trained on its own for 1000 normalized steps, then the paths
of the first 200 steps plotted with matplotlib and saved as PNG and PDF.

Self-contained on purpose (torch, NumPy, matplotlib only; no mmtoken): it is the whole-process
baseline of ``benchmarks/bench_whole_process.py`` for ``python -m mmtoken figures --only
fig-global-paths``. Usage: ``python public_style_fig_global_paths.py OUT_STEM``.
"""

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import nn

STEPS, LR, EPS, SHOWN = 1000, 0.1, 1e-9, 200


class Attention(nn.Module):
    """One prompt p attending over the tokens of X: f(X) = <softmax(X W p), X v>."""

    def __init__(self, d):
        super().__init__()
        self.p = nn.Parameter(torch.zeros(d))
        self.key = nn.Linear(d, d, bias=False)
        self.query = nn.Linear(d, d, bias=False)
        self.w = nn.Parameter(torch.zeros(d), requires_grad=False)

    def forward(self, X):
        K = self.key(X)  # (n, T, d)
        q = self.query(self.p)  # (d,)
        s = torch.softmax(K @ q, dim=-1)  # (n, T)
        return (s.unsqueeze(-1) * X).sum(1) @ self.w  # (n,)


# the instance: one input, three tokens (planar keys, score as the third coordinate)
X = torch.tensor([[[-0.1, 1.0, 1.0], [1.0, 0.0, 0.9], [0.0, 0.0, 0.9]]], dtype=torch.float32)
Y = torch.tensor([1.0])
plane = torch.diag(torch.tensor([1.0, 1.0, 0.0]))
paths = []
for y0 in (1.0, 0.5, 0.0, -0.5, -1.0, -1.5):
    model = Attention(3)
    with torch.no_grad():
        model.key.weight.copy_(plane)
        model.query.weight.copy_(plane)
        model.w.copy_(torch.tensor([0.0, 0.0, 1.0]))
        model.p.copy_(torch.tensor([0.0, y0, 0.0]))
    opt = torch.optim.SGD([model.p], lr=LR)
    path = [model.p.detach()[:2].clone()]
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.log(1 + torch.exp(-Y * model(X))).mean()
        loss.backward()
        model.p.grad /= model.p.grad.norm() + EPS
        opt.step()
        path.append(model.p.detach()[:2].clone())
    paths.append(torch.stack(path).numpy())

fig, ax = plt.subplots(figsize=(6, 4))
for path in paths:
    ax.plot(path[: SHOWN + 1, 0], path[: SHOWN + 1, 1], lw=1.2)
    ax.plot(*path[0], "o", ms=4)
keys = X[0, :, :2].numpy()
ax.scatter(keys[:, 0], keys[:, 1], marker="*", s=120, c="k", zorder=3)
ax.set_xlabel("p[0]")
ax.set_ylabel("p[1]")
for ext in ("png", "pdf"):
    fig.savefig(f"{sys.argv[1]}.{ext}", bbox_inches="tight")
print(np.round(np.stack([p[-1] for p in paths]), 3))
