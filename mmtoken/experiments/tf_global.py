"""Global convergence in ``W``: when it holds, and a counterexample (Part III, chapter 14).

Paper A's global GD theorem (its Theorem 2) is for one input (n = 1), and
paper A says n = 1 is tight. On the keys ``vec(x_it z_i^T)`` of the ``W``
problem it gives a global theorem for ``W`` in two cases the chapter proves:
n = 1, and **pairwise orthogonal queries** (``z_i^T z_j = 0``), where the
columns ``W z_i`` of the inputs never interact and the problem splits into n
one-input problems. Equal non-optimal scores and a feasible Att-SVM(opt) are
*not* enough for n >= 2:

* :func:`counterexample` -- chapter 3's instance (``X_1 = [(1,0),(0,0)]``,
  ``X_2 = [(0,1),(2,0)]``, ``v = (1,3)``, ``Y = (1,1)``; T = 2, so the equal-score
  condition holds trivially) with the independent queries ``z_1 = e_1``,
  ``z_2 = (cos t, sin t)``, ``t`` in :data:`CE_ANGLES`: plain GD (step
  :data:`CE_LR`, below the book's smoothness bound ``1/L``) and normalized GD
  from ``W0 = [[0,0],[-1,0]]`` end on the selection ``(0, 1)``, a local optimum;
  the regularization path (paper A's Theorem 1 on the ``W`` keys, which needs
  no equal scores and holds for any n) goes to the global ``W^mm``;
* :func:`orthogonal` -- random instances with orthonormal queries and equal
  non-optimal scores (and the counterexample's tokens with ``z_2 = e_2``):
  plain GD within the step bound, from random starts and from ``W0``, reaches
  the global ``W^mm``.

The chapter ``book/part3/14_overparam.md`` shows these runs.
"""

from __future__ import annotations

__all__ = [
    "CHAPTER",
    "CE_ANGLES",
    "CE_TRIAL_ANGLE",
    "CE_W0",
    "CE_LR",
    "PLAIN_STEPS",
    "NORMALIZED_STEPS",
    "NORMALIZED_LR",
    "REG_RADII",
    "REG_ITERS",
    "REG_ITERS_CONTINUED",
    "LOCAL_CORR",
    "GLOBAL_CORR_MAX",
    "REG_CORR",
    "ORTHO",
    "ORTHO_CORR",
    "ce_queries",
    "ortho_instances",
    "plain_gd",
    "Counterexample",
    "counterexample",
    "reg_path_continued",
    "Orthogonal",
    "orthogonal",
    "nearest_selection",
    "counterexample_check",
    "reg_check",
    "orthogonal_check",
    "plot_counterexample",
    "FIGURES",
]

import functools
import itertools
from dataclasses import dataclass

import numpy as np
import torch

from .. import geometry, grad, smoothness, svm, tfsvm, train
from ..instances import CE_V, CE_X, CE_Y
from ..ledger import Measured, claim
from ..plotting import panel_titles, style, two_panels

CHAPTER = "14_overparam"
CE_ANGLES = (0.5, 0.2, 0.05)
"""Angles ``t`` of the second query ``z_2 = (cos t, sin t)`` in the counterexample (``z_1 = e_1``)."""
CE_TRIAL_ANGLE = 0.3
"""The angle of the trial run that set the thresholds, before the judged angles were run."""
CE_W0 = np.array([[0.0, 0.0], [-1.0, 0.0]])
CE_LR = 0.5
PLAIN_STEPS = 100_000
NORMALIZED_STEPS = 20_000
NORMALIZED_LR = 0.1
REG_RADII = np.logspace(0.0, 2.0, 9)
REG_ITERS = 300
REG_ITERS_CONTINUED = 100
"""Rotations at the first radius and at each later one (warm-started from the radius before)."""
LOCAL_CORR = 0.99
"""Counterexample: GD must end within this correlation of the local ``W^mm(0, 1)`` (trial, angle 0.3: plain
GD 0.9970, normalized 0.99999)."""
GLOBAL_CORR_MAX = 0.9
"""... and below this correlation with the global ``W^mm(0, 0)`` (trial, angle 0.3: plain GD 0.331)."""
REG_CORR = 0.999
"""The regularization path at ``R = 100``: correlation with the global ``W^mm`` (trial, angle 0.3: 0.999996)."""
ORTHO = {"n": 3, "T": 4, "d": 4, "count": 4, "seed": 0, "trial_seed": 100, "starts": 4}
"""Random instances with orthonormal queries: sizes, judged seeds ``seed ..``, the trial's seeds ``trial_seed ..``."""
ORTHO_CORR = 0.9
"""Orthogonal queries: plain GD at ``PLAIN_STEPS`` must reach this correlation with the global ``W^mm``.
Set on the trial (chapter 3's tokens and the 4 instances of seed 100, 4 starts each), run before the judged
seeds: worst 0.939 (plain GD converges in direction like ``1/log k``), the nearest other selection's
``W^mm`` at most 0.669."""


# ---------------------------------------------------------------- instances
def ce_queries(t: float) -> np.ndarray:
    """``Z (2, 2)``: ``z_1 = e_1``, ``z_2 = (cos t, sin t)``."""
    return np.array([[1.0, 0.0], [np.cos(t), np.sin(t)]])


def ortho_instances(count: int, n: int, T: int, d: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random instances with orthonormal queries and equal non-optimal scores, batched.

    Tokens are ``N(0, I/d)`` with their component along the unit head ``v`` set so that
    token 0 scores ``1`` and every other token ``0`` (``gamma_it = Y_i v^T x_it``); the
    queries are the first ``n`` columns of a random orthogonal matrix. Needs ``d >= n``.

    Returns
    -------
    ``X (count, n, T, d)``, ``Z (count, n, d)``, ``v (count, d)``, ``Y (count, n)``.
    """
    if d < n:
        raise ValueError(f"orthonormal queries need d >= n, got d={d}, n={n}")
    rng = np.random.default_rng(seed)
    out = {"X": [], "Z": [], "v": [], "Y": []}
    for _ in range(count):
        v = rng.normal(size=d)
        v /= np.linalg.norm(v)
        Y = rng.choice([-1.0, 1.0], size=n)
        X = rng.normal(size=(n, T, d)) / np.sqrt(d)
        target = np.zeros((n, T))
        target[:, 0] = 1.0
        X += ((target * Y[:, None]) - X @ v)[..., None] * v  # now Y_i v^T x_it = target
        Z = np.linalg.qr(rng.normal(size=(d, d)))[0][:, :n].T
        for k, a in zip("XZvY", (X, Z, v, Y)):
            out[k].append(a)
    return {k: np.array(a) for k, a in out.items()}


# ---------------------------------------------------------------- runs
def plain_gd(problem, W0, lr: float, steps: int = PLAIN_STEPS) -> dict:
    """Plain GD ``W <- W - lr grad L(W)`` (saturation-safe gradient, compiled kernel) from ``W0 (..., d, d)``.

    Returns ``W`` at steps ``steps // 10`` and ``steps`` (``(2, ..., d, d)``) and the final selection.
    """
    d = W0.shape[-1]
    with torch.inference_mode():
        h = train.train_p(
            problem,
            W0.reshape(*W0.shape[:-2], -1),
            steps=steps,
            lr=lr,
            method="gd",
            record_every=steps // 10,
            record_probs=True,
        )
    i = [int(np.flatnonzero(h.steps == steps // 10)[0]), -1]
    return {"W": h.p.numpy()[i].reshape(2, *W0.shape[:-2], d, d), "selection": h.probs[-1].argmax(-1).numpy()}


@dataclass
class Counterexample:
    angles: tuple
    lr: float
    inv_smoothness: np.ndarray  # (A,) the book's bound 1/L of each angle
    gmm: np.ndarray  # (A, 2, 2) global W^mm (selection (0, 0))
    lmm: np.ndarray  # (A, 2, 2) W^mm of (0, 1)
    local: np.ndarray  # (A,) geometry.classify calls (0, 1) locally optimal
    plain: dict  # W (2, A, 2, 2) at steps/10 and steps, selection (A, 2)
    normalized: dict  # W (A, 2, 2), selection (A, 2)
    reg: np.ndarray  # (R, A, 4) regularization path (best of the starts)
    init_grad_corr: dict  # corr(-grad L(W0), W^mm) for the global and the local W^mm, (A,)

    def table(self) -> list[dict]:
        rows = []
        for a, t in enumerate(self.angles):
            rows.append(
                {
                    "t": t,
                    "plain sel": tuple(int(x) for x in self.plain["selection"][a]),
                    "plain gmm": float(geometry.correlation(self.plain["W"][-1, a].ravel(), self.gmm[a].ravel())),
                    "plain lmm": float(geometry.correlation(self.plain["W"][-1, a].ravel(), self.lmm[a].ravel())),
                    "norm. sel": tuple(int(x) for x in self.normalized["selection"][a]),
                    "norm. gmm": float(geometry.correlation(self.normalized["W"][a].ravel(), self.gmm[a].ravel())),
                    "reg gmm": float(geometry.correlation(self.reg[-1, a], self.gmm[a].ravel())),
                }
            )
        return rows


def counterexample(angles=CE_ANGLES) -> Counterexample:
    return _counterexample(tuple(float(t) for t in angles))


@functools.lru_cache(maxsize=None)
def _counterexample(angles: tuple) -> Counterexample:
    Z = np.stack([ce_queries(t) for t in angles])  # (A, 2, 2)
    A = len(angles)
    X = np.broadcast_to(CE_X, (A, *CE_X.shape)).copy()
    problem = tfsvm.w_problem(X, np.tile(CE_Y, (A, 1)), np.tile(CE_V, (A, 1)), Z)
    K, gamma = problem.K.numpy(), problem.gamma.numpy()
    inv_L = np.array([1.0 / smoothness.smoothness_bound(K[a], gamma[a]) for a in range(A)])
    gmm = np.array([tfsvm.frobenius_svm(CE_X, Z[a], [0, 0]).x for a in range(A)])
    lmm = np.array([tfsvm.frobenius_svm(CE_X, Z[a], [0, 1]).x for a in range(A)])
    local = np.array([geometry.classify(K[a], gamma[a], [0, 1]).locally_optimal for a in range(A)])
    W0 = np.broadcast_to(CE_W0, (A, 2, 2)).copy()
    plain = plain_gd(problem, W0, CE_LR)
    with torch.inference_mode():
        h = train.train_p(
            problem,
            W0.reshape(A, 4),
            steps=NORMALIZED_STEPS,
            lr=NORMALIZED_LR,
            record_every=NORMALIZED_STEPS,
            record_probs=True,
        )
        g = -grad.grad_p(problem, torch.as_tensor(W0.reshape(A, 4))).value().numpy()
        reg = reg_path_continued(problem, REG_RADII, _reg_starts(4))
    normalized = {"W": h.p.numpy()[-1].reshape(A, 2, 2), "selection": h.probs[-1].argmax(-1).numpy()}
    init = {
        "global": geometry.correlation(g, gmm.reshape(A, 4)),
        "local": geometry.correlation(g, lmm.reshape(A, 4)),
    }
    return Counterexample(angles, CE_LR, inv_L, gmm, lmm, local, plain, normalized, reg, init)


def reg_path_continued(
    problem, radii, w0, iters: int = REG_ITERS, iters_continued: int = REG_ITERS_CONTINUED
) -> np.ndarray:
    """``argmin_{||W||_F <= R} L(W)`` along ``radii`` by continuation, batched over the problem's instances.

    The first radius searches from every start direction ``w0 (starts, m)``
    (:func:`mmtoken.train.regularization_path`, best kept); each later radius starts
    from the best points of the radius before (``iters_continued`` rotations) (every instance's, shared as starts
    by all instances, the best kept per instance). Searching each radius from
    scratch needs about ten times the rotations at ``R = 100`` to converge (a
    trial: 300 rotations leave the direction 1e-3 short there).

    Returns ``(len(radii), ..., m)``.
    """
    out = []
    starts = np.asarray(w0, float)
    for R in radii:
        pts = train.regularization_path(problem, [float(R)], starts, iters=iters if not out else iters_continued)
        best = train.best_of_starts(problem, pts).numpy()[0]  # (..., m)
        out.append(best)
        starts = best.reshape(-1, best.shape[-1])
    return np.array(out)


def _reg_starts(m: int) -> np.ndarray:
    """Start directions of the regularization path: ``+-e_j`` and 8 random unit vectors (seeded)."""
    eye = np.eye(m)
    rnd = np.random.default_rng(0).normal(size=(8, m))
    return np.vstack([eye, -eye, rnd / np.linalg.norm(rnd, axis=1, keepdims=True)])


@dataclass
class Orthogonal:
    """Plain GD with orthonormal queries: ``I`` instances (the counterexample's tokens with ``z_2 = e_2`` first)."""

    names: list
    lr: np.ndarray  # (I,) the step: the book's bound 1/L
    corr_global: np.ndarray  # (2, I, S) at steps/10 and steps: correlation with the global W^mm
    corr_rival: np.ndarray  # (2, I, S) with the W^mm of the nearest other selection
    rival: list  # (I,) that selection
    norm: np.ndarray  # (2, I, S)
    global_selection: np.ndarray  # (I, S) the final selection is the optimal one


def orthogonal(seed: int = ORTHO["seed"]) -> Orthogonal:
    return _orthogonal(int(seed))


@functools.lru_cache(maxsize=None)
def _orthogonal(seed: int) -> Orthogonal:
    data = ortho_instances(ORTHO["count"], ORTHO["n"], ORTHO["T"], ORTHO["d"], seed=seed)
    cases = [(CE_X, np.eye(2), CE_V, CE_Y, "chapter 3 tokens, z = (e1, e2)")]
    cases += [
        (data["X"][b], data["Z"][b], data["v"][b], data["Y"][b], f"seed {seed}, instance {b}")
        for b in range(ORTHO["count"])
    ]
    rng = np.random.default_rng(seed + 1)
    out = {k: [] for k in ("lr", "cg", "cr", "rival", "norm", "glob")}
    for X, Z, v, Y, _ in cases:
        problem = tfsvm.w_problem(X, Y, v, Z)
        K, gamma = problem.K.numpy(), problem.gamma.numpy()
        lr = 1.0 / smoothness.smoothness_bound(K, gamma)
        d = X.shape[-1]
        W0 = np.concatenate(
            [CE_W0[None] if d == 2 else np.zeros((1, d, d)), rng.normal(size=(ORTHO["starts"] - 1, d, d))]
        )
        run = plain_gd(problem, W0, lr)
        opt = gamma.argmax(-1)
        gmm = tfsvm.frobenius_svm(X, Z, opt).x.ravel()
        rival, ref = nearest_selection(K, opt)
        Wf = run["W"].reshape(2, len(W0), -1)
        out["lr"].append(lr)
        out["cg"].append(geometry.correlation(Wf, gmm))
        out["cr"].append(geometry.correlation(Wf, ref))
        out["rival"].append(rival)
        out["norm"].append(np.linalg.norm(Wf, axis=-1))
        out["glob"].append((run["selection"] == opt).all(-1))
    st = lambda k: np.stack(out[k], 1) if k != "glob" else np.stack(out[k])
    return Orthogonal(
        [c[-1] for c in cases], np.array(out["lr"]), st("cg"), st("cr"), out["rival"], st("norm"), st("glob")
    )


def nearest_selection(K, opt) -> tuple[tuple, np.ndarray]:
    """Among the feasible selections other than ``opt``, the one whose Att-SVM correlates most with ``opt``'s.

    ``K (n, T, m)``; returns ``(selection, its W^mm flattened (m,))``: the nearest wrong answer a
    directional check must reject.
    """
    K = np.asarray(K, float)
    n, T, _ = K.shape
    ref = svm.att_svm(K, opt).x
    best, best_x, best_c = None, None, -np.inf
    for a in itertools.product(range(T), repeat=n):
        if list(a) == list(opt):
            continue
        try:
            x = svm.att_svm(K, list(a)).x
        except svm.InfeasibleSVM:
            continue
        c = geometry.correlation(x, ref)
        if c > best_c:
            best, best_x, best_c = a, x, c
    return tuple(int(t) for t in best), best_x


# ---------------------------------------------------------------- claims
def counterexample_check(ref: str, ce: Counterexample | None = None) -> Measured:
    """The counterexample's check with the reference selection ``ref`` (``"local"``: ``(0, 1)``, the claim;
    ``"global"``: ``(0, 0)``, what the false box predicted)."""
    ce = ce or counterexample()
    W = ce.plain["W"][-1]
    target, other = (ce.lmm, ce.gmm) if ref == "local" else (ce.gmm, ce.lmm)
    sel = (0, 1) if ref == "local" else (0, 0)
    A = len(ce.angles)
    c_t = geometry.correlation(W.reshape(A, -1), target.reshape(A, -1))
    c_o = geometry.correlation(W.reshape(A, -1), other.reshape(A, -1))
    c_n = geometry.correlation(ce.normalized["W"].reshape(A, -1), target.reshape(A, -1))
    hyp = bool((ce.lr <= ce.inv_smoothness).all() and ce.local.all())
    ok = (
        hyp
        and all(tuple(s) == sel for s in ce.plain["selection"])
        and all(tuple(s) == sel for s in ce.normalized["selection"])
        and c_t.min() >= LOCAL_CORR
        and c_n.min() >= LOCAL_CORR
        and c_o.max() <= GLOBAL_CORR_MAX
    )
    value = {
        "hypotheses_hold": hyp,
        "plain_corr": [round(float(c), 4) for c in c_t],
        "normalized_corr": [round(float(c), 4) for c in c_n],
        "other_corr": [round(float(c), 4) for c in c_o],
    }
    return Measured(value, bool(ok))


@claim(
    "C.global.counterexample",
    chapter=CHAPTER,
    kind="observation",
    checks="the book's own counterexample (chapter 3's instance with two independent queries): equal "
    "non-optimal scores and a feasible Att-SVM(opt) do not make GD on W global for n = 2",
    statement="On chapter 3's instance with queries z1 = e1, z2 = (cos t, sin t), t in {0.5, 0.2, 0.05} "
    "(T = 2, so the equal-score hypothesis holds; the feasibility lemma's hypotheses hold), plain GD "
    "(step 0.5 <= 1/L) and normalized GD (step 0.1) from W0 = [[0,0],[-1,0]] end on the locally "
    "optimal selection (0, 1), not on the global one.",
    threshold="every angle: both runs select (0, 1); correlation >= 0.99 with W^mm(0, 1) (plain GD at "
    "10^5 steps, normalized at 2 * 10^4) and <= 0.9 with W^mm(0, 0); set on the trial angle t = 0.3",
    competitor="the global W^mm(0, 0), which the former box predicted",
    against=lambda: counterexample_check("global"),
)
def _claim_counterexample() -> Measured:
    return counterexample_check("local")


def reg_check(ref: str, ce: Counterexample | None = None) -> Measured:
    """Regularization path at the largest radius against the global (claim) or the local (competitor) W^mm."""
    ce = ce or counterexample()
    A = len(ce.angles)
    target = (ce.gmm if ref == "global" else ce.lmm).reshape(A, -1)
    c = geometry.correlation(ce.reg, target)  # (R, A)
    ok = bool(c[-1].min() >= REG_CORR and (c[-1] > c[0]).all())
    return Measured(
        {"corr_at_R100": [round(float(x), 6) for x in c[-1]], "corr_at_R1": [round(float(x), 4) for x in c[0]]}, ok
    )


@claim(
    "C.global.reg_path",
    chapter=CHAPTER,
    kind="theorem",
    checks="paper A's Theorem 1 on the keys vec(x z^T): the Frobenius regularization path of W goes to the "
    "global W^mm for any n (no equal scores needed); the theorem's own object, computed",
    statement="On the counterexample (t in {0.5, 0.2, 0.05}), the regularization path argmin_{||W||_F <= R} "
    "L(W) (sphere search from 16 start directions at R = 1, then continued radius by radius) turns towards the global W^mm(0, 0) as R grows "
    "from 1 to 100, where GD went to the local one.",
    threshold="every angle: correlation with W^mm(0, 0) >= 0.999 at R = 100 and larger than at R = 1; set on "
    "the trial angle t = 0.3",
    competitor="the local W^mm(0, 1) where GD from W0 ends",
    against=lambda: reg_check("local"),
)
def _claim_reg() -> Measured:
    return reg_check("global")


def orthogonal_check(rival: bool = False, o: Orthogonal | None = None) -> Measured:
    """Orthogonal queries: plain GD's final correlation with the global W^mm (or, ``rival``, with the nearest
    other selection's W^mm) at least :data:`ORTHO_CORR`, rising over the last decade, norm growing."""
    o = o or orthogonal()
    c = o.corr_rival if rival else o.corr_global
    ok = bool(
        (c[-1] >= ORTHO_CORR).all()
        and (c[-1] > c[0]).all()
        and (o.norm[-1] > o.norm[0]).all()
        and (rival or o.global_selection.all())
    )
    return Measured(
        {
            "min_corr": round(float(c[-1].min()), 4),
            "instances": len(o.names),
            "starts": int(c.shape[-1]),
            "all_global": bool(o.global_selection.all()),
        },
        ok,
    )


@claim(
    "C.global.orthogonal",
    chapter=CHAPTER,
    kind="theorem",
    checks="the chapter's global theorem for W with pairwise orthogonal queries (paper A's Theorem 2 on each "
    "decoupled column; proved in the chapter): plain GD within its step bound, from any start",
    statement="With orthonormal queries and equal non-optimal scores (chapter 3's tokens with z = (e1, e2), and "
    "4 random instances, n = 3, T = 4, d = 4), plain GD with step 1/L (the book's smoothness bound) from W0 "
    "and random Gaussian starts selects the optimal tokens and turns towards the global W^mm.",
    threshold="every instance and start, at 10^5 steps: the optimal selection, correlation >= 0.9 with the "
    "global W^mm, higher than at 10^4 steps, ||W|| still growing; set on a trial (seed 100: worst 0.939)",
    competitor="the Att-SVM of the nearest other selection (highest correlation with the global W^mm)",
    against=lambda: orthogonal_check(rival=True),
)
def _claim_orthogonal() -> Measured:
    return orthogonal_check()


# ---------------------------------------------------------------- figure
def plot_counterexample(ce: Counterexample | None = None):
    """(a) correlation of the regularization path with the global and local W^mm against R; (b) the
    initial negative gradient's correlation with both, per angle."""
    ce = ce or counterexample()
    A = len(ce.angles)
    fig, axes = two_panels()
    for a, t in enumerate(ce.angles):
        for k, (name, ref) in enumerate((("global", ce.gmm), ("local", ce.lmm))):
            c = geometry.correlation(ce.reg[:, a], ref[a].ravel())
            axes[0].plot(REG_RADII, c, label=f"{name}, t = {t}", **style(k, marker=True), alpha=1.0 - 0.25 * a)
    axes[0].set_xscale("log")
    axes[0].set_xlabel("radius R")
    axes[0].set_ylabel("correlation of the path")
    axes[0].legend(loc="lower left", fontsize=7)
    x = np.arange(A)
    axes[1].bar(x - 0.2, ce.init_grad_corr["global"], width=0.4, label="global w^mm", color=style(0)["color"])
    axes[1].bar(x + 0.2, ce.init_grad_corr["local"], width=0.4, label="local w^mm", color=style(1)["color"])
    axes[1].set_xticks(x, [f"t = {t}" for t in ce.angles])
    axes[1].set_ylabel("corr(-grad L(W0), .)")
    axes[1].set_ylim(0, 1.05)
    axes[1].legend(loc="lower right", fontsize=8)
    panel_titles(axes, ["regularization path", "initial gradient"])
    return fig


FIGURES = {"fig-global-counterexample": lambda: plot_counterexample()}
