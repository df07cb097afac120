"""The floor of ``benchmarks/bench_whole_process.py``: the figure of ``python -m mmtoken figures --only
fig-global-paths`` (paper A's Fig. 1, global case: normalized GD paths of ``p`` on one input of three tokens)
made by a plain process that imports only NumPy and matplotlib and computes just what it draws.

The gradient is the closed form ``dL/dp = -y sigma(-y f) P K^T (diag(s) - s s^T) X w`` in float64 (no
autograd, no torch); the instance, starts, steps and plot are those of ``public_style_fig_global_paths.py``.
In float64, as mmtoken draws them. That script's float32 paths nearly stop (``||p||`` about 14.7 at step 200,
15.7 at step 1000, against 18.2 and 21.5 here): the saturation appendix's numerical trap. So its drawn paths
are shorter than these; the work per step is the same.
Self-contained on purpose (no mmtoken). Usage: ``python floor_fig_global_paths.py OUT_STEM`` (prints ``p``
after the drawn steps).
"""

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

STEPS, LR, EPS, SHOWN = 1000, 0.1, 1e-9, 200

X = np.array([[-0.1, 1.0, 1.0], [1.0, 0.0, 0.9], [0.0, 0.0, 0.9]])  # one input: three tokens (T, d)
y = 1.0
P = np.diag([1.0, 1.0, 0.0])  # W_K = W_Q: the plane of the keys
K, gamma = X @ P, X @ np.array([0.0, 0.0, 1.0])  # keys (T, d); token scores X w (T,)


def grad(p):
    a = K @ (P @ p)
    s = np.exp(a - a.max())
    s /= s.sum()
    f = s @ gamma
    return -y / (1 + np.exp(y * f)) * (P @ (K.T @ (s * (gamma - f))))


paths = []
for y0 in (1.0, 0.5, 0.0, -0.5, -1.0, -1.5):
    p = np.array([0.0, y0, 0.0])
    path = [p[:2].copy()]
    for _ in range(STEPS):
        g = grad(p)
        p = p - LR * g / (np.linalg.norm(g) + EPS)
        path.append(p[:2].copy())
    paths.append(np.array(path))

fig, ax = plt.subplots(figsize=(6, 4))
for path in paths:
    ax.plot(path[: SHOWN + 1, 0], path[: SHOWN + 1, 1], lw=1.2)
    ax.plot(*path[0], "o", ms=4)
ax.scatter(X[:, 0], X[:, 1], marker="*", s=120, c="k", zorder=3)
ax.set_xlabel("p[0]")
ax.set_ylabel("p[1]")
for ext in ("png", "pdf"):
    fig.savefig(f"{sys.argv[1]}.{ext}", bbox_inches="tight")
print(np.round(np.stack([p[SHOWN] for p in paths]), 3))
