"""Over-parameterisation in ``W`` (Part III, *Transformers as Support Vector Machines*).

The ``W`` problem of a transformer read out at query ``z_i`` is paper A's ``p``
problem with keys ``vec(x_it z_i^T)`` in dimension ``d^2``
(:func:`mmtoken.tfsvm.w_keys`). For every key dimension ``d`` of a grid we
draw ``count`` random instances (tokens and queries ``N(0, I/d)``, head
``v ~ N(0, I_d)``, labels ``+-1``, scores ``gamma_it = Y_i v^T x_it``) and

* **feasibility of every selection**: the rank certificate (queries linearly
  independent, each input's tokens affinely independent; then ATT-SVM(alpha)
  is feasible for all ``T^n`` selections, see the chapter) on *all* instances,
  and the feasibility LP (NNLS least-distance with a Farkas certificate) of all
  ``T^n`` selections on the first ``lp_instances`` instances of each ``d``;
* **where GD goes**: normalized GD on ``W`` from ``W = 0`` (saturation-safe
  gradient, all instances of one ``d`` in one batch, with chapter 8's runner
  :func:`mmtoken.experiments.random_instances.train_batch`), the selection it
  makes, whether it is the globally optimal one and whether the softmax has
  saturated; chapter 8's :func:`~mmtoken.experiments.random_instances.analyse`
  classifies the selection (correlation with its Frobenius Att-SVM, minimum
  score gap over its SVM-neighbours).

The chapter ``book/part3/14_overparam.md`` shows these runs.
"""

from __future__ import annotations

__all__ = [
    "CHAPTER",
    "FEAS_TOL",
    "Grid",
    "QUICK",
    "PAPER",
    "grid_for",
    "w_instances",
    "rank_certificate",
    "selection_feasible",
    "all_selections_feasible",
    "OverparamResult",
    "run",
    "feasibility_summary",
    "converged_spearman",
    "plot_overparam",
    "plot_corr",
    "FIGURES",
    "feasibility_check",
    "chance_rate",
    "rate_check",
]

import functools
import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import config, svm, tfsvm
from .. import random_batch as ri
from ..corpus_stats import spearman
from ..ledger import Measured, claim
from ..plotting import panel_titles, style, two_panels

CHAPTER = "14_overparam"
FEAS_TOL = 1e-8
"""An NNLS point counts as feasible when every margin is at least ``1 - FEAS_TOL``."""


@dataclass(frozen=True)
class Grid:
    n: int
    T: int
    d: tuple
    count: int  # instances per d
    steps: int
    lr: float
    lp_instances: int  # instances per d whose T^n selections are all checked by LP
    seed: int = 0

    @property
    def threshold(self) -> int:
        """``max(T - 1, n)``: from this ``d`` on every selection is feasible (rank certificate)."""
        return max(self.T - 1, self.n)


QUICK = Grid(n=3, T=4, d=(2, 3, 4, 6, 8), count=1000, steps=1500, lr=0.2, lp_instances=24)
PAPER = Grid(n=3, T=4, d=(2, 3, 4, 6, 8, 12, 16), count=4000, steps=10_000, lr=0.2, lp_instances=200)


def grid_for(scale: str) -> Grid:
    return config.pick(quick=QUICK, paper=PAPER, which=scale)


def w_instances(count: int, n: int, T: int, d: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``count`` random instances of the ``W`` model, batched.

    Returns
    -------
    dict with ``X (count, n, T, d)`` and ``Z (count, n, d)`` i.i.d. ``N(0, I/d)``, ``v (count, d)``
    ``N(0, I)``, ``Y (count, n)`` in ``{+1, -1}``, scores ``gamma (count, n, T) = Y_i v^T x_it`` and
    keys ``K (count, n, T, d*d) = vec(x_it z_i^T)``.
    """
    if min(count, n, d) < 1 or T < 2:
        raise ValueError(f"need count, n, d >= 1 and T >= 2, got count={count}, n={n}, T={T}, d={d}")
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(count, n, T, d)) / np.sqrt(d)
    Z = rng.normal(size=(count, n, d)) / np.sqrt(d)
    v = rng.normal(size=(count, d))
    Y = rng.choice([-1.0, 1.0], size=(count, n))
    gamma = Y[..., None] * np.einsum("cntd,cd->cnt", X, v)
    K = np.asarray(tfsvm.w_keys(X.reshape(count * n, T, d), Z.reshape(count * n, d))).reshape(count, n, T, d * d)
    return {"X": X, "Z": Z, "v": v, "Y": Y, "gamma": gamma, "K": K}


def rank_certificate(X, Z) -> np.ndarray:
    """Bool ``(count,)``: queries linearly independent and each input's tokens affinely independent.

    Where it holds, ATT-SVM(alpha) in ``W`` is feasible for *every* selection ``alpha`` (the chapter's
    lemma): ``W = sum_i u_i w_i^T`` with ``w_i^T z_j = delta_ij`` and ``(x_{i alpha_i} - x_it)^T u_i = 1``.
    """
    X, Z = np.asarray(X, float), np.asarray(Z, float)
    if X.ndim != 4 or Z.shape != (X.shape[0], X.shape[1], X.shape[3]):
        raise ValueError(f"X must be (count, n, T, d) and Z (count, n, d), got {X.shape} and {Z.shape}")
    count, n, T, _ = X.shape
    q_ok = np.linalg.matrix_rank(Z) == n  # (count,)
    diffs = X[:, :, 1:] - X[:, :, :1]  # (count, n, T-1, d)
    t_ok = (np.linalg.matrix_rank(diffs) == T - 1).all(axis=1)
    return q_ok & t_ok


def selection_feasible(K, alpha) -> bool | None:
    """Feasibility of ATT-SVM(alpha) for keys ``K (n, T, m)`` by NNLS: True, False (Farkas certificate)
    or None (a point was returned that misses a margin by more than :data:`FEAS_TOL`: undecided)."""
    K = np.asarray(K, dtype=float)
    n, T, _ = K.shape
    D = np.array([K[i, alpha[i]] - K[i, t] for i in range(n) for t in range(T) if t != alpha[i]])
    try:
        x = svm.min_norm_nnls(D, np.ones(len(D)))
    except svm.InfeasibleSVM:
        return False
    return bool((D @ x).min() >= 1 - FEAS_TOL) or None


def all_selections_feasible(K) -> tuple[int, int, int]:
    """Over all ``T^n`` selections of one instance: ``(feasible, infeasible, undecided)`` counts."""
    K = np.asarray(K, dtype=float)
    n, T, _ = K.shape
    out = [selection_feasible(K, a) for a in itertools.product(range(T), repeat=n)]
    return sum(o is True for o in out), sum(o is False for o in out), sum(o is None for o in out)


@dataclass
class OverparamResult:
    grid: Grid
    table: pd.DataFrame  # one row per instance
    lp: pd.DataFrame  # one row per LP-checked instance: counts over its T^n selections

    def per_d(self) -> pd.DataFrame:
        """Per ``d``: rank certificate rate, LP-feasible share of selections, saturated, global, converged."""
        g = self.table.groupby("d")
        lp = self.lp.groupby("d")[["feasible", "infeasible", "undecided"]].sum()
        tot = lp.sum(axis=1)
        return pd.DataFrame(
            {
                "certificate": g.certificate.mean(),
                "lp feasible": lp.feasible / tot,
                "lp undecided": lp.undecided,
                "saturated": g.saturated.mean(),
                "global": g["global"].mean(),
                "converged": g.converged.mean(),
            }
        )

    def classification(self) -> pd.DataFrame:
        """Per ``d``, over saturated instances: mean correlation with the Att-SVM of GD's selection,
        share selecting the global optimum, share with a negative minimum score gap."""
        s = self.table[self.table.saturated & self.table.feasible]
        g = s.groupby("d")
        return pd.DataFrame(
            {
                "saturated": g.size(),
                "mean corr": g.corr_mm.mean(),
                "min corr": g.corr_mm.min(),
                "global": g["global"].mean(),
                "gap < 0": g.gap.apply(lambda x: float((x < 0).mean())),
            }
        )


def run(scale: str | None = None) -> OverparamResult:
    return _run(scale or config.scale())


@functools.lru_cache(maxsize=None)
def _run(scale: str) -> OverparamResult:
    grid = grid_for(scale)
    records, lp_rows = [], []
    for k, d in enumerate(grid.d):
        inst = w_instances(grid.count, grid.n, grid.T, d, seed=grid.seed + 1000 * k)
        cert = rank_certificate(inst["X"], inst["Z"])
        mask = np.ones(inst["gamma"].shape, bool)
        out = ri.train_batch(inst["K"], inst["gamma"], mask, grid.steps, grid.lr)
        alpha, log_s = out["alpha"], out["log_s"]
        sel = np.take_along_axis(log_s, alpha[..., None], -1)[..., 0]
        rest = np.where(np.arange(grid.T) == alpha[..., None], -np.inf, log_s)
        log_rest = np.logaddexp.reduce(rest, axis=-1).max(-1)  # worst input's non-selected mass
        glob = (alpha == inst["gamma"].argmax(-1)).all(-1)
        sat = log_rest <= ri.LOG_SATURATED
        for j in range(grid.count):
            rec = ri.analyse(inst["K"][j], inst["gamma"][j], alpha[j], out["p"][j])
            rec.update(
                d=d,
                index=j,
                certificate=bool(cert[j]),
                saturated=bool(sat[j]),
                log_nonsel=float(log_rest[j]),
                min_sel_log_prob=float(sel[j].min()),
            )
            rec["global"] = bool(glob[j])
            rec["converged"] = bool(glob[j] and sat[j])
            records.append(rec)
        for j in range(grid.lp_instances):
            f, inf, und = all_selections_feasible(inst["K"][j])
            lp_rows.append(
                {"d": d, "index": j, "certificate": bool(cert[j]), "feasible": f, "infeasible": inf, "undecided": und}
            )
    table = pd.DataFrame(records).rename(columns={"corr": "corr_mm"})
    return OverparamResult(grid, table, pd.DataFrame(lp_rows))


# ---------------------------------------------------------------- claims
def feasibility_summary(r: OverparamResult) -> dict:
    """Above the threshold: certificate rate over all instances, LP counts over all selections of the
    LP-checked instances; and whether the certificate ever disagrees with the LP (it must not)."""
    return feasibility_check(r).value


def converged_spearman(r: OverparamResult) -> float:
    """Spearman correlation between ``d`` and the fraction converging to the global optimum, over the grid."""
    return rate_check({int(k): float(v) for k, v in r.per_d().converged.items()}).value["spearman"]


def feasibility_check(r: OverparamResult, below: bool = False) -> Measured:
    """The lemma's check on the ``d`` at or above ``max(T - 1, n)`` (or, ``below``, on the ``d`` below it)."""
    th = r.grid.threshold
    keep = (lambda d: d < th) if below else (lambda d: d >= th)
    t, lp = r.table[keep(r.table.d)], r.lp[keep(r.lp.d)]
    counts = lp[["feasible", "infeasible", "undecided"]].to_numpy()
    clash = lp[lp.certificate & (lp.infeasible + lp.undecided > 0)]
    f = {
        "d": sorted(int(d) for d in t.d.unique()),
        "instances_per_d_min": int(t.groupby("d").size().min()),
        "certificate_rate": round(float(t.certificate.mean()), 4),
        "lp_selections": int(counts.sum()),
        "lp_infeasible": int(lp.infeasible.sum()),
        "lp_undecided": int(lp.undecided.sum()),
        "certificate_vs_lp_clashes": int(len(clash)),
    }
    ok = (
        f["instances_per_d_min"] >= 1000
        and f["certificate_rate"] == 1.0
        and f["lp_infeasible"] == 0
        and f["lp_undecided"] == 0
        and f["certificate_vs_lp_clashes"] == 0
    )
    return Measured(f, bool(ok))


@claim(
    "C.overparam.feasible",
    chapter=CHAPTER,
    kind="theorem",
    checks="the chapter's feasibility lemma (every selection's Att-SVM in W is feasible when the queries are "
    "linearly independent and each input's tokens affinely independent, d >= max(T - 1, n)): its "
    "hypotheses (rank certificate) on every instance and its conclusion by an independent LP",
    statement="With d >= max(T - 1, n) the lemma's hypotheses hold on every random instance, and every one of "
    "the T^n selections of the LP subsample has a feasible Att-SVM in W.",
    threshold=">= 1000 random instances per d; for d >= max(T - 1, n): rank certificate on 100% of instances "
    "and every one of the T^n selections of the LP subsample feasible (no clash certificate/LP)",
    competitor="the same instances with d below max(T - 1, n) (d = 2), where the lemma's hypotheses fail",
    against=lambda: feasibility_check(run(), below=True),
)
def _claim_feasible() -> Measured:
    return feasibility_check(run())


def chance_rate(r: OverparamResult) -> dict:
    """Per ``d``: the global rate of a selection drawn uniformly among the feasible ones (LP subsample mean of
    ``1 / #feasible``): what over-parameterisation alone would give if GD picked any separable selection."""
    lp = r.lp.assign(chance=1.0 / r.lp.feasible.clip(lower=1))
    return {int(d): float(v) for d, v in lp.groupby("d").chance.mean().items()}


def rate_check(rates: dict) -> Measured:
    """Spearman correlation between ``d`` and a per-``d`` global rate ``{d: rate}``, required positive."""
    ds = np.array(sorted(rates), float)
    rho = spearman(ds, np.array([rates[int(d)] for d in ds]))
    return Measured(
        {"spearman": round(float(rho), 4), "by_d": {int(d): round(rates[int(d)], 4) for d in ds}}, bool(rho > 0)
    )


@claim(
    "C.overparam.global_rate",
    chapter=CHAPTER,
    kind="observation",
    checks="Transformers as SVMs: over-parameterisation helps GD reach the globally optimal tokens; "
    "normalized GD from W = 0 on random instances, beyond any theorem (the global theorem's equal-score "
    "hypothesis fails on them)",
    statement="The fraction of random instances on which normalized GD from W = 0 converges to the globally "
    "optimal tokens (saturated) does not decrease with d.",
    threshold="Spearman(d, fraction converged to the global tokens) over the grid > 0",
    competitor="chance among the separable selections (1 / number of feasible selections, LP subsample), "
    "which falls as d makes more selections feasible",
    against=lambda: rate_check(chance_rate(run())),
)
def _claim_global_rate() -> Measured:
    r = run()
    return rate_check({int(k): float(v) for k, v in r.per_d().converged.items()})


# ---------------------------------------------------------------- figures
def plot_overparam(r: OverparamResult | None = None):
    """(a) share of feasible selections (LP) and of certified instances against ``d``; (b) share of
    instances whose GD selection is the global one (saturated, and at all) against ``d``."""
    r = r or run()
    t = r.per_d()
    fig, axes = two_panels()
    ax = axes[0]
    ax.plot(t.index, t["lp feasible"], label="feasible selections (lp)", **style(0, marker=True))
    ax.plot(t.index, t["certificate"], label="rank certificate", **style(1, marker=True))
    ax.axvline(r.grid.threshold, color="0.4", lw=0.8, ls=":")
    ax.set_xlabel("token dimension d")
    ax.set_ylabel("fraction")
    ax.set_ylim(-0.03, 1.05)
    ax.legend(loc="lower right")
    ax = axes[1]
    ax.plot(t.index, t["converged"], label="global and saturated", **style(0, marker=True))
    ax.plot(t.index, t["global"], label="global selection", **style(1, marker=True))
    ax.axvline(r.grid.threshold, color="0.4", lw=0.8, ls=":")
    ax.set_xlabel("token dimension d")
    ax.set_ylabel("fraction of instances")
    ax.set_ylim(-0.03, 1.05)
    ax.legend(loc="lower right")
    panel_titles(axes, ["feasibility", "global convergence"])
    return fig


def plot_corr(r: OverparamResult | None = None):
    """``1 - corr(W, W^mm(alpha))`` of saturated instances, by ``d`` (log scale)."""
    r = r or run()
    s = r.table[r.table.saturated & r.table.feasible]
    fig, axes = two_panels()
    bins = np.logspace(-10, 0, 31)
    for k, d in enumerate(r.grid.d):
        x = np.clip(1 - s.corr_mm[s.d == d].to_numpy(), 1e-10, None)
        if len(x):
            axes[0].hist(x, bins=bins, histtype="step", lw=1.4, color=style(k)["color"], label=f"d = {d}")
    axes[0].set_xscale("log")
    axes[0].set_xlabel("1 - correlation with its att-svm")
    axes[0].set_ylabel("instances")
    axes[0].legend(loc="upper left", fontsize=8)
    c = r.classification()
    axes[1].plot(c.index, c["gap < 0"], label="negative score gap", **style(0, marker=True))
    axes[1].plot(c.index, 1 - c["global"], label="not global", **style(1, marker=True))
    axes[1].set_xlabel("token dimension d")
    axes[1].set_ylabel("fraction of saturated")
    axes[1].legend(loc="upper right")
    panel_titles(axes, ["direction", "selection"])
    return fig


FIGURES = {"fig-overparam": lambda: plot_overparam(), "fig-overparam-corr": lambda: plot_corr()}
