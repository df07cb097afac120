"""Many inputs, sparsity and step size (paper A, Fig. 2).

The published Fig. 2 configuration (``n = 3`` inputs of ``T = 7`` tokens):
normalized GD (step 0.1) from six starts turns toward the GMM; plain GD
(step 1) selects the optimal tokens too, but its gradient vanishes as the
softmax saturates, so ``||p||`` grows only logarithmically and the attention
sparsifies slowly.

The chapter ``book/part1/04_inputs.md`` shows these runs.
"""

from __future__ import annotations

__all__ = [
    "CHAPTER",
    "PROB_LEVEL",
    "Run",
    "InputsResult",
    "run",
    "train_run",
    "loglog_slope",
    "comparison",
    "public_draw",
    "STORED_PCOST",
    "notebook_svm_cost",
    "draw_check",
    "plot_keys",
    "plot_paths_fig2",
    "plot_sparsity",
    "FIGURES",
]

import functools
from dataclasses import dataclass

import numpy as np
import torch

from .. import config, geometry, instances, svm, train
from .. import long_paths as global_convergence
from ..ledger import Measured, claim
from ..plotting import colors, plot_curves, plot_paths, subplots

CHAPTER = "04_inputs"
PROB_LEVEL = 0.99
"""Mean optimal-token probability at which the two methods are compared."""


@dataclass
class Run:
    """One training run of the six starts, recorded every step."""

    method: str
    lr: float
    steps: np.ndarray  # (S,)
    paths: np.ndarray  # (S, starts, 2)
    norm: np.ndarray  # (S, starts)
    p_opt: np.ndarray  # (S, starts, n) softmax probability of each input's optimal token
    corr: np.ndarray  # (S, starts) correlation with the GMM

    @property
    def mean_p_opt(self) -> np.ndarray:
        """``(S,)`` probability of the optimal token averaged over inputs and starts."""
        return self.p_opt.mean((-1, -2))

    def first_step(self, level: float = PROB_LEVEL) -> int | None:
        """First recorded step at which :attr:`mean_p_opt` reaches ``level`` (None: never)."""
        hit = np.flatnonzero(self.mean_p_opt >= level)
        return int(self.steps[hit[0]]) if len(hit) else None


@dataclass
class InputsResult:
    keys: np.ndarray  # (n, T, 2)
    gamma: np.ndarray  # (n, T)
    opt: np.ndarray  # (n,)
    gmm: np.ndarray  # (2,)
    neighbours: list  # SVM-neighbours (input, token) of the GMM
    ngd: Run  # normalized GD, step 0.1
    gd: Run  # plain GD, step 1


def run(scale: str | None = None) -> InputsResult:
    """The whole chapter, memoised per scale."""
    return _run(scale or config.scale())


def train_run(inst, opt, gmm, method: str, lr: float, steps: int, every: int) -> Run:
    """Train ``inst`` from its starts with ``method`` (``"gd"`` or ``"normalized"``) and record a :class:`Run`.

    ``opt`` are the optimal tokens ``(n,)``, ``gmm`` the Att-SVM solution ``(d,)`` the correlations are
    measured against; ``every`` is the recording stride. The chapter's two runs are made with it.
    """
    with torch.inference_mode():
        h = train.train_p(
            inst.problem(), inst.starts, steps=steps, lr=lr, method=method, record_every=every, record_probs=True
        )
    ps = h.p.numpy()
    p_opt = h.probs.numpy()[..., np.arange(len(opt)), opt]  # (S, starts, n)
    return Run(method, lr, h.steps, ps, h.norm.numpy(), p_opt, geometry.correlation(ps, gmm))


@functools.lru_cache(maxsize=None)
def _run(scale: str) -> InputsResult:
    steps_ngd = config.pick(quick=4000, paper=20_000, which=scale)
    steps_gd = config.pick(quick=2000, paper=20_000, which=scale)
    inst = instances.fig2()
    opt = geometry.optimal_tokens(inst.gamma)
    sol = svm.att_svm(inst.K, opt)
    nb = geometry.svm_neighbours(inst.K, opt, sol.x)
    ngd = train_run(inst, opt, sol.x, "normalized", 0.1, steps_ngd, 1)
    gd = train_run(inst, opt, sol.x, "gd", 1.0, steps_gd, 1)
    return InputsResult(inst.K, inst.gamma, opt, sol.x, nb, ngd, gd)


def loglog_slope(steps: np.ndarray, norm: np.ndarray, start: int) -> float:
    """Least-squares slope of ``log ||p||`` against ``log step`` for steps ``>= start`` (norm averaged over starts).

    1 for linear growth, 0 for a constant, about ``1 / log t`` for ``log t`` growth.
    """
    keep = steps >= max(start, 1)
    if keep.sum() < 2:
        raise ValueError("need at least two recorded steps to fit a slope")
    y = np.log(np.asarray(norm)[keep].reshape(keep.sum(), -1).mean(-1))
    return float(np.polyfit(np.log(steps[keep]), y, 1)[0])


def comparison(r: InputsResult | None = None) -> dict:
    """First steps at which the mean optimal-token probability reaches 0.99 (and 0.999), and the norm growth."""
    r = r or run()
    N = int(r.gd.steps[-1])
    out = {}
    for level in (PROB_LEVEL, 0.999):
        a, b = r.ngd.first_step(level), r.gd.first_step(level)
        out[level] = {
            "ngd": a,
            "gd": b,
            "ratio": (b / a) if (a and b) else None,
            "ratio_at_least": (N + 1) / a if (a and b is None) else None,
        }
    per_start = []
    for j in range(r.ngd.p_opt.shape[1]):
        a = np.flatnonzero(r.ngd.p_opt[:, j].mean(-1) >= PROB_LEVEL)
        b = np.flatnonzero(r.gd.p_opt[:, j].mean(-1) >= PROB_LEVEL)
        per_start.append(float(r.gd.steps[b[0]] / r.ngd.steps[a[0]]) if len(a) and len(b) else float("nan"))
    out["ratio_per_start"] = per_start
    keep = r.ngd.steps <= N
    out["slope_gd"] = loglog_slope(r.gd.steps, r.gd.norm, N // 2)
    out["slope_ngd"] = loglog_slope(r.ngd.steps[keep], r.ngd.norm[keep], N // 2)
    out["horizon"] = N
    return out


# ---------------------------------------------------------------- the public generation
def public_draw(seed: int = 0) -> np.ndarray:
    """The public notebook's Fig. 2 tokens ``(3, 7, 3)``, written out independently of :func:`instances.fig2`.

    One float32 draw of all three coordinates, scaled by 0.2; each token gets its centre added
    (the centres ``(1, 0)``, ``(-1, 1)``, ``(-0.5, -0.5)`` of token 0, tokens 1-3 and tokens 4-6, with
    0 in the third coordinate); the third coordinate is then replaced by the score (1, or 0.5).
    """
    n, T, d = 3, 7, 3
    gen = torch.Generator()
    gen.manual_seed(seed)
    noise = torch.randn((n, T, d), generator=gen) * 0.2
    centre = torch.zeros(T, d)
    centre[0, :2] = torch.tensor([1.0, 0.0])
    centre[1:4, :2] = torch.tensor([-1.0, 1.0])
    centre[4:, :2] = torch.tensor([-0.5, -0.5])
    tokens = noise + centre  # one float32 addition per entry, as there
    tokens[..., 2] = torch.tensor([1.0] + [0.5] * (T - 1))
    return tokens.double().numpy()


STORED_PCOST = 0.31319
"""The last ``pcost`` of cvxopt stored in the public Fig. 2 notebook (5 digits)."""


def notebook_svm_cost(X: np.ndarray) -> float:
    """``1/2 ||q||^2`` of the SVM the public notebook solves: ATT-SVM(opt = 0) with ``W = I_3``, i.e. with the
    score coordinate inside the keys (the model itself only sees the first two coordinates)."""
    q = svm.att_svm(X, np.zeros(X.shape[0], int)).x
    return float(0.5 * q @ q)


def draw_check(seed: int = 0) -> dict:
    """Largest key difference between :func:`instances.fig2` and :func:`public_draw`, and the notebook's SVM cost
    on this draw and on a ``(3, 7, 2)`` draw of the same generator (the earlier, wrong reading)."""
    inst = instances.fig2(seed)
    X = public_draw(seed)
    g = torch.Generator().manual_seed(seed)
    X2 = np.concatenate([(0.2 * torch.randn((3, 7, 2), generator=g)).double().numpy(), X[..., 2:]], -1)
    X2[..., :2] += np.array([[1.0, 0.0]] + [[-1.0, 1.0]] * 3 + [[-0.5, -0.5]] * 3)
    return {
        "max_key_diff": float(np.abs(inst.K - X[..., :2]).max()),
        "max_token_diff": float(np.abs(inst.X - X).max()),
        "notebook_cost": notebook_svm_cost(X),
        "notebook_cost_372": notebook_svm_cost(X2),
        "stored_pcost": STORED_PCOST,
    }


# ---------------------------------------------------------------- claims
@claim(
    "A.inputs.published_draw",
    chapter=CHAPTER,
    kind="consistency",
    checks="instances.fig2 against the public code's generation of Fig. 2",
    statement="The keys of instances.fig2() are the first two coordinates of the public code's (3, 7, 3) float32 "
    "draw (0.2 randn, generator seeded 0, shifted by the three centres), re-implemented independently.",
    threshold="max |keys - public generation| <= 1e-12",
    competitor="a (3, 7, 2) draw of the same generator (the earlier, wrong reading of the public code)",
    against=lambda: _draw_vs_372(),
)
def _claim_draw() -> Measured:
    m = draw_check()
    return Measured(m, m["max_key_diff"] <= 1e-12)


def _draw_vs_372(seed: int = 0) -> Measured:
    """The claim's check against the competitor: the keys of a (3, 7, 2) draw of the same generator."""
    X = public_draw(seed)
    g = torch.Generator().manual_seed(seed)
    X2 = (0.2 * torch.randn((3, 7, 2), generator=g)).double().numpy()
    X2 += np.array([[1.0, 0.0]] + [[-1.0, 1.0]] * 3 + [[-0.5, -0.5]] * 3)
    diff = float(np.abs(X2 - X[..., :2]).max())
    return Measured({"max_key_diff": diff}, diff <= 1e-12)


E1 = np.array([1.0, 0.0])
"""The competitor of chapter 4's direction claims: the e1 axis, where the optimal keys (about (1, 0)) point
(correlation 0.980 with the GMM)."""


@claim(
    "A.inputs.paths",
    chapter=CHAPTER,
    kind="observation",  # normalized GD, beyond the theorems' plain GD and regularization path
    competitor="the e1 axis (correlation 0.980 with the GMM)",
    against=lambda: _paths_check(E1),
    checks="paper A, Fig. 2 (n = 3, T = 7): the published normalized-GD run, an extension beyond Thm 1 "
    "(a regularization path) and Thm 3 (GD from a cone)",
    statement="Fig. 2: normalized GD (step 0.1) from all six published starts converges in direction to the GMM.",
    threshold="all six starts: correlation >= 0.9999 with the GMM",
)
def _claim_paths() -> Measured:
    return _paths_check(run().gmm)


def _paths_check(ref) -> Measured:
    r = run().ngd
    c = geometry.correlation(r.paths[-1], ref)
    return Measured({"min_corr": float(c.min()), "steps": int(r.steps[-1])}, bool(c.min() >= 0.9999))


REG_RADII = np.logspace(0.0, 2.0, 9)
"""Radii of chapter 4's regularization path (chapter 2's grid)."""


@functools.lru_cache(maxsize=None)
def reg_path() -> np.ndarray:
    """Theorem 1's regularization path on Fig. 2: ``argmin_{||p|| <= R} L(p)`` for ``REG_RADII``, ``(nR, 2)``."""
    return global_convergence.planar_reg_path(instances.fig2().problem(), REG_RADII, iters=300)


def _reg_check(ref) -> Measured:
    c = geometry.correlation(reg_path(), ref)
    i10 = int(np.argmin(np.abs(REG_RADII - 10.0)))
    ok = c[-1] >= 0.999 and (1 - c[-1]) < (1 - c[i10])
    return Measured(
        {
            "R": [float(REG_RADII[0]), float(REG_RADII[-1])],
            "corr_first": round(float(c[0]), 4),
            "corr_R10": round(float(c[i10]), 4),
            "corr_last": round(float(c[-1]), 4),
        },
        bool(ok),
    )


@claim(
    "A.inputs.reg_path",
    chapter=CHAPTER,
    checks="paper A, Theorem 1 with its own object, the regularization path; Fig. 2 (n = 3, T = 7)",
    statement="The regularization path argmin_{||p|| <= R} L(p) of Fig. 2 (logistic loss) turns to the GMM "
    "direction as R grows.",
    threshold="correlation with the GMM >= 0.999 at R = 100 and 1 - corr at R = 100 below 1 - corr at R = 10 "
    "(chapter 2's bar for the same theorem, fixed before this path was computed)",
    competitor="the e1 axis (correlation 0.980 with the GMM)",
    against=lambda: _reg_check(E1),
)
def _claim_reg_path() -> Measured:
    return _reg_check(run().gmm)


# Not a guarantee of any theorem but a measured speed ratio on the published configuration, hence an
# observation. (It missed its threshold on the earlier, (3, 7, 2)-draw instance: ratio 9.2.)
@claim(
    "A.inputs.ngd_vs_gd",
    chapter=CHAPTER,
    checks="paper A, Fig. 2 (normalized vs plain GD)",
    kind="observation",
    competitor="the two methods swapped (plain GD as the fast one: ratio 1/10, and normalized GD's linear "
    "norm growth, slope 1)",
    against=lambda: _ngd_vs_gd_check(swap=True),
    statement="Normalized GD (step 0.1) reaches mean optimal-token probability 0.99 at least 10 times sooner than "
    "plain GD (step 1), whose ||p|| grows sublinearly (vanishing gradients).",
    threshold="first step of plain GD / first step of normalized GD >= 10 (mean over inputs and starts); "
    "log-log slope of plain GD's ||p|| over the second half of its run < 1",
)
def _claim_ngd_vs_gd() -> Measured:
    return _ngd_vs_gd_check(swap=False)


def _ngd_vs_gd_check(swap: bool) -> Measured:
    c = comparison()
    lv = c[PROB_LEVEL]
    ratio = lv["ratio"] if lv["ratio"] is not None else lv["ratio_at_least"]
    slope = c["slope_gd"]
    if swap:
        ratio, slope = (1 / ratio if ratio else None), c["slope_ngd"]
    ok = ratio is not None and ratio >= 10 and slope < 1
    return Measured(
        {
            "first_step_ngd": lv["ngd"],
            "first_step_gd": lv["gd"],
            "ratio": ratio,
            "ratio_per_start_min": min(c["ratio_per_start"]),
            "ratio_per_start_max": max(c["ratio_per_start"]),
            "slope_gd": c["slope_gd"],
            "slope_ngd": c["slope_ngd"],
        },
        bool(ok),
    )


# ---------------------------------------------------------------- plots
def plot_keys(r: InputsResult | None = None, ax=None):
    """The 21 keys (one marker per input; filled: optimal token), the GMM direction and, for each active
    constraint (an SVM-neighbour and the optimal token of its input), the line through the pair's midpoint
    orthogonal to the GMM direction."""
    import matplotlib.pyplot as plt

    r = r or run()
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.5, 5.0))
    fig = ax.figure
    cs = colors(r.keys.shape[0])
    u = r.gmm / np.linalg.norm(r.gmm)
    for i, keys in enumerate(r.keys):
        mk = "os^"[i % 3]
        ax.scatter(keys[:, 0], keys[:, 1], marker=mk, s=40, facecolors="none", edgecolors=cs[i], label=f"input {i}")
        ax.scatter(*keys[r.opt[i]], marker=mk, s=60, color=cs[i])
    lim = np.abs(r.keys).max() * 1.1
    ax.plot([0, u[0] * lim], [0, u[1] * lim], "--", color="0.2", lw=1.2, label="GMM direction")
    for k, (i, t) in enumerate(r.neighbours):
        a, b = r.keys[i, r.opt[i]], r.keys[i, t]
        mid = (a + b) / 2
        perp = np.array([-u[1], u[0]])
        ax.plot(
            *np.stack([mid - lim * perp, mid + lim * perp]).T,
            color="0.45",
            ls="-",
            lw=1.2,
            label="line of an active pair" if k == 0 else None,
        )
        ax.plot(*np.stack([a, b]).T, ":", color="0.45", lw=1.0)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_xlabel("first key coordinate")
    ax.set_ylabel("second key coordinate")
    ax.set_aspect("equal", adjustable="box")
    ax.legend(loc="lower left")
    return fig


def plot_paths_fig2(r: InputsResult | None = None, first: int = 200, ax=None):
    """Normalized-GD paths of the first ``first`` iterations with the GMM direction."""
    r = r or run()
    keep = r.ngd.steps <= first
    fig = plot_paths(r.ngd.paths[keep], directions={"GMM direction": r.gmm}, ax=ax)
    ax = fig.axes[0] if ax is None else ax
    ax.plot([], [], color="0.35", lw=1.6, label=f"{r.ngd.paths.shape[1]} starts (dot: start)")  # one entry
    ax.legend(loc="best")
    return fig


def plot_sparsity(r: InputsResult | None = None):
    """Two panels over the plain-GD horizon: mean optimal-token probability and ``||p||``, both methods."""
    r = r or run()
    N = int(r.gd.steps[-1])
    keep = (r.ngd.steps <= N) & (r.ngd.steps >= 1)
    keep_gd = r.gd.steps >= 1
    fig, (a, b) = subplots(2, titles=["sparsity", "norm"])
    plot_curves(
        r.gd.steps[keep_gd],
        {"normalized GD, step 0.1": r.ngd.p_opt.mean(-1)[keep], "plain GD, step 1": r.gd.p_opt.mean(-1)[keep_gd]},
        xlabel="iteration",
        ylabel="mean optimal-token probability",
        ax=a,
        logx=True,
    )
    a.axhline(PROB_LEVEL, color="0.5", lw=0.8, ls=":")
    a.get_legend().remove()  # the same two series in both panels: one legend,
    plot_curves(
        r.gd.steps[keep_gd],
        {"normalized GD, step 0.1": r.ngd.norm[keep], "plain GD, step 1": r.gd.norm[keep_gd]},
        xlabel="iteration",
        ylabel="$\\|p\\|$",
        ax=b,
        logx=True,
        logy=True,
    )
    b.legend(loc="upper left")  # in the norm panel's empty corner
    return fig


FIGURES = {
    "fig-inputs-keys": lambda: plot_keys(),
    "fig-inputs-paths": lambda: plot_paths_fig2(),
    "fig-inputs-sparsity": lambda: plot_sparsity(),
}
