"""Your own instance in one call: train, solve, classify, compare, draw.

>>> from mmtoken.explore import analyze
>>> a = analyze(X, Y, v)          # X (n, T, d), Y (n,), v (d,)
>>> a.table                       # one row per start
>>> a.plot()
"""

from __future__ import annotations

__all__ = ["Analysis", "analyze"]

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from . import geometry, plotting, validate
from .losses import get_loss
from .model import AttentionProblem
from .train import History, train_p


@dataclass
class Analysis:
    """What :func:`analyze` found.

    Attributes
    ----------
    problem : the ``p``-problem built from ``(X, Y, v, W)``.
    starts : ``(S, m)`` starting points.
    history : the training run of all starts (one batch).
    reports : per start, the :class:`~mmtoken.geometry.SelectionReport` of the selection GD made.
    table : one row per start: selection, feasibility, local / global optimality,
        correlation with ``p_mm`` of that selection, smallest attention on the selected tokens,
        and ``ties``: the inputs whose selected token ties in score with another (then several
        selections are globally optimal: the maximisers form a set, as in paper A, and a tied
        SVM-neighbour makes a selection not locally optimal) or in logit at the final point
        (GD did not choose between them; the first listed is shown).
    """

    problem: AttentionProblem
    starts: np.ndarray
    history: History
    reports: list
    table: pd.DataFrame

    def plot(self, ax=None, first: int | None = None):
        """Paths in the plane (keys of dimension 2) or correlation curves (any dimension)."""
        P = self.history.p.numpy()
        keep = slice(None) if first is None else self.history.steps <= validate.count(first, "first")
        directions = {}
        for r in self.reports:
            if r.feasible:
                tag = "GMM" if r.globally_optimal else ("LMM" if r.locally_optimal else "p_mm")
                directions.setdefault(f"{tag} {r.alpha}", r.p_mm)
        if self.problem.m == 2:
            K = self.problem.K.cpu().numpy()
            return plotting.plot_paths(
                P[keep], directions=directions, tokens=K, ax=ax, labels=[f"start {j}" for j in range(P.shape[1])]
            )
        corr = np.stack(
            [
                geometry.correlation(P[:, j], r.p_mm) if r.feasible else np.full(len(P), np.nan)
                for j, r in enumerate(self.reports)
            ],
            axis=1,
        )
        fig = plotting.plot_curves(
            self.history.steps,
            {"each start": 1 - corr},
            xlabel="iteration",
            ylabel="1 - correlation with p_mm of its selection",
            ax=ax,
            logy=True,
        )
        return fig


def _norm(p: np.ndarray, scaled: float) -> float:
    """``||p||`` as NumPy gives it, or the scaled norm of the history where the squares overflow."""
    n = float(np.linalg.norm(p))
    return n if np.isfinite(n) and (n > 0 or not p.any()) else scaled


def analyze(
    X,
    Y,
    v,
    W=None,
    *,
    starts=None,
    n_starts: int = 6,
    steps: int = 2000,
    lr: float = 0.1,
    loss: str = "logistic",
    seed: int = 0,
    record_every: int = 10,
) -> Analysis:
    """Train ``p`` on any instance and compare where it goes with the ATT-SVM theory.

    Parameters
    ----------
    X : ``(n, T, d)`` tokens; Y : ``(n,)`` labels in ``{+1, -1}``; v : ``(d,)`` head.
    W : ``(d, m)`` key map (identity if None).
    starts : ``(S, m)`` starts, ``S >= 1``; default ``n_starts >= 1`` random unit vectors (seeded by ``seed``).
    steps, lr, loss : normalized GD with the saturation-safe gradient (``steps`` a whole
        number >= 0, ``lr`` positive and finite).
    record_every : thinning of the recorded history (whole number >= 1).

    Returns
    -------
    Analysis

    Raises
    ------
    ValueError naming the argument for malformed input (shapes, labels, NaN, complex
    numbers, counts, step sizes); :class:`mmtoken.svm.SolverFailed` if the ATT-SVM of a
    selection cannot be decided at float64 precision (never reported as infeasible).
    """
    n_starts = validate.count(n_starts, "n_starts", minimum=1)
    steps = validate.count(steps, "steps")
    lr = validate.positive(lr, "lr")
    seed = validate.count(seed, "seed")
    record_every = validate.count(record_every, "record_every", minimum=1)
    get_loss(loss)
    problem = AttentionProblem.from_data(X, Y, v, W)
    if problem.K.ndim != 3:
        raise ValueError(f"analyze takes one dataset: X must have shape (n, T, d), got {tuple(problem.K.shape)}")
    m = problem.m
    if starts is None:
        rng = np.random.default_rng(seed)
        starts = rng.normal(size=(n_starts, m))
        starts /= np.linalg.norm(starts, axis=1, keepdims=True)
    starts = np.atleast_2d(validate.real_array(starts, "starts"))
    if starts.ndim != 2 or starts.shape[1] != m or starts.shape[0] == 0:
        raise ValueError(f"starts must have shape (S, {m}) with S >= 1, got {starts.shape}")
    with torch.inference_mode():
        history = train_p(problem, starts, steps=steps, lr=lr, loss=loss, record_every=record_every)
    K = problem.K.cpu().numpy()
    gamma = problem.gamma.cpu().numpy()
    final = history.final_p.numpy()
    reports, rows = [], []
    cache: dict[tuple, geometry.SelectionReport] = {}
    for j, p in enumerate(final):
        alpha = tuple(geometry.selection(K, p).tolist())
        if alpha not in cache:
            cache[alpha] = geometry.classify(K, gamma, alpha)
        r = cache[alpha]
        reports.append(r)
        s = history.probs[-1, j].numpy()
        z = K @ p
        tied_logits = [int(i) for i in np.flatnonzero((z == z.max(-1, keepdims=True)).sum(-1) > 1)]
        ties = []
        if r.ties:
            ties.append(f"scores of inputs {sorted({i for i, _ in r.ties})}")
        if tied_logits:
            ties.append(f"logits of inputs {tied_logits}")
        rows.append(
            {
                "start": np.round(starts[j], 3).tolist(),
                "selection": alpha,
                "feasible": r.feasible,
                "locally optimal": r.locally_optimal,
                "globally optimal": r.globally_optimal,
                "correlation": round(float(geometry.correlation(p, r.p_mm)), 6) if r.feasible else np.nan,
                "min attention on selection": round(float(s[np.arange(len(alpha)), list(alpha)].min()), 6),
                "norm": round(_norm(p, float(history.norm[-1, j])), 2),
                "ties": "; ".join(ties),
            }
        )
    return Analysis(problem, starts, history, reports, pd.DataFrame(rows))
