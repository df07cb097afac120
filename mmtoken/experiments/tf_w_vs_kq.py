"""Chapter 13 (``book/part3/13_w_vs_kq``): ``W`` learns a Frobenius SVM, ``(K, Q)`` a nuclear-norm SVM.

The same random instances (the public code's draws, seeds 0, 1, ...: unit
tokens and queries, a unit head, random labels) are trained two ways, batched:

* normalized GD on ``W`` (step 0.1, 20 000 steps) with the saturation-safe
  gradient: :func:`mmtoken.tfsvm.train_w` (paper A's trainer on the keys
  ``vec(x_it z_i^T)``, compiled kernel);
* normalized GD on ``(K, Q)``, each factor its own unit step of 0.1, the
  directions from the stable ``G = grad_W L`` and the public code's penalty
  ``lambda (||K||^2 + ||Q||^2)``, ``lambda = 2.2e-16``: :func:`mmtoken.tfsvm.train_kq`
  (and, for contrast, the same run without the penalty);

and compared with the Frobenius Att-SVM and the nuclear-norm Att-SVM* of the
selection each run makes (fixed from the run, then checked independently:
the ``W`` selection is classified locally optimal by paper A's classifier).
A short run with float64 autograd through the plain softmax shows the
collapse after saturation.
"""

from __future__ import annotations

__all__ = [
    "CHAPTER",
    "SIZES",
    "LR",
    "STEPS",
    "RECORD_EVERY",
    "NAIVE_STEPS",
    "NAIVE_DTYPES",
    "SEED",
    "CORR_W",
    "CORR_KQ",
    "CORR_GAIN",
    "SizeResult",
    "NaiveRun",
    "WvsKQ",
    "starts",
    "imbalance",
    "run",
    "summary",
    "plot_correlations",
    "plot_singular_values",
    "slow_instances",
    "plot_naive",
    "FIGURES",
    "w_check",
    "kq_check",
    "rank_check",
    "PlainCone",
    "plain_cone",
    "plain_check",
    "plain_cone_run",
]

import functools
from dataclasses import dataclass

import numpy as np
import torch

from .. import config, geometry, smoothness, tfsvm, train
from ..ledger import Measured, claim
from ..plotting import colors, style, subplots

CHAPTER = "13_w_vs_kq"
SIZES = ((4, 4, 6), (6, 8, 10))
"""``(n, T, d)``: the issue's size and a larger one (the public code's ``local_converge`` size)."""
LR = 0.1
STEPS = 20_000
RECORD_EVERY = 100
NAIVE_STEPS = STEPS
NAIVE_DTYPES = {"float64": torch.float64, "float32": torch.float32}
SEED = 0
CORR_W = 0.9999
CORR_KQ = 0.99
CORR_GAIN = 0.02


@dataclass
class SizeResult:
    """One size, ``B`` instances, ``S`` records.

    ``corr_*`` are ``(S, B)`` correlations of the iterates with a reference; ``sv_kq``
    ``(S, B, d)`` singular values of ``K Q^T`` divided by the largest.
    """

    n: int
    T: int
    d: int
    data: dict  # X (B, n, T, d), Z (B, n, d), v (B, d), Y (B, n)
    steps: np.ndarray  # (S,)
    W_w: np.ndarray  # (B, d, d) last W iterate
    W_kq: np.ndarray  # (B, d, d) last K Q^T
    sel_w: np.ndarray  # (B, n) selection of the W run
    sel_kq: np.ndarray  # (B, n) selection of the (K, Q) run
    local_w: np.ndarray  # (B,) W selection classified locally optimal
    fro_w: np.ndarray  # (B, d, d) Frobenius SVM of the W selection
    nuc_w: np.ndarray  # (B, d, d) nuclear SVM of the W selection
    fro_kq: np.ndarray  # (B, d, d) Frobenius SVM of the (K, Q) selection
    nuc_kq: np.ndarray  # (B, d, d) nuclear SVM of the (K, Q) selection
    nuc_gap: np.ndarray  # (B,) duality gap of the nuclear solutions of the (K, Q) selections
    rank_nuc: np.ndarray  # (B,) rank of the nuclear solution (threshold tfsvm.RANK_TOL)
    rank_kq: np.ndarray  # (B,) rank of the last K Q^T (same threshold)
    nuc_excess: np.ndarray  # (B,) ||W_kq||_* / min margin over ||W_*^mm||_* - 1
    imbalance: np.ndarray  # (B,) ||K^T K - Q^T Q||_F / ||K Q^T||_F at the end
    unpenalised: (
        dict  # the (K, Q) run without the penalty: corr, excess, imbalance, rank_agree, norm (B,); sv (S, B, d)
    )
    corr_w_fro: np.ndarray
    corr_w_nuc: np.ndarray
    corr_kq_nuc: np.ndarray
    corr_kq_fro: np.ndarray
    sv_kq: np.ndarray

    @property
    def label(self) -> str:
        return f"n={self.n}, T={self.T}, d={self.d}"


@dataclass
class NaiveRun:
    """Normalized GD on ``W`` with float64 autograd (plain softmax) against the stable gradient."""

    steps: np.ndarray  # (S,)
    corr_naive: dict  # dtype name -> (S, B) correlation with the Frobenius SVM of the stable run's selection
    corr_stable: np.ndarray  # (S, B)

    def at(self, k: int) -> dict:
        """Median and minimum correlation over instances at step ``k``, per run."""
        i = int(np.flatnonzero(self.steps == k)[0])
        runs = {"stable": self.corr_stable, **self.corr_naive}
        return {name: (float(np.median(c[i])), float(c[i].min())) for name, c in runs.items()}


@dataclass
class WvsKQ:
    sizes: list  # [SizeResult]
    naive: NaiveRun


def starts(B: int, d: int, seed: int = SEED + 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``W0, K0, Q0 (B, d, d)`` uniform on ``[-1/sqrt d, 1/sqrt d]`` (PyTorch's default init of the public code)."""
    rng = np.random.default_rng(seed)
    b = 1.0 / np.sqrt(d)
    return tuple(rng.uniform(-b, b, size=(B, d, d)) for _ in range(3))


def _flat(A) -> np.ndarray:
    A = np.asarray(A)
    return A.reshape(*A.shape[:-2], -1)


def _corr(Ws, refs) -> np.ndarray:
    return geometry.correlation(_flat(Ws), _flat(refs))


def _one_size(n: int, T: int, d: int, count: int) -> SizeResult:
    data = tfsvm.random_instances(count, n, T, d, seed=SEED)
    problem = tfsvm.w_problem(data["X"], data["Y"], data["v"], data["Z"])
    W0, K0, Q0 = starts(count, d)
    with torch.inference_mode():
        rw = tfsvm.train_w(problem, W0, steps=STEPS, lr=LR, record_every=RECORD_EVERY)
        rk = tfsvm.train_kq(problem, K0, Q0, steps=STEPS, lr=LR, record_every=RECORD_EVERY)
    Kx, gamma = problem.K.numpy(), problem.gamma.numpy()
    sel_w, sel_kq = rw.selection, rk.selection
    fro_w, nuc_w, fro_kq, nuc_kq, local, gaps, ranks = [], [], [], [], [], [], []
    # five convex programs per instance (cvxpy; the training above is batched): about a second each,
    # so a reader in Jupyter sees a bar (never under nbval or a build: see config.progress_enabled)
    bar = config.progress_bar(range(count), desc=f"SVMs n={n} T={T} d={d}", enabled=config.progress_enabled(count, 2))
    for b in bar:
        X, Z = data["X"][b], data["Z"][b]
        fro_w.append(tfsvm.frobenius_svm(X, Z, sel_w[b]).x)
        nuc_w.append(tfsvm.nuclear_svm(X, Z, sel_w[b]).W)
        fro_kq.append(tfsvm.frobenius_svm(X, Z, sel_kq[b]).x)
        sol = tfsvm.nuclear_svm(X, Z, sel_kq[b])
        nuc_kq.append(sol.W)
        gaps.append(sol.check["gap"])
        ranks.append(sol.rank())
        local.append(geometry.classify(Kx[b], gamma[b], sel_w[b]).locally_optimal)
    W_w, W_kq = rw.W[-1].numpy(), rk.W[-1].numpy()
    nuc_kq = np.array(nuc_kq)
    sv = np.linalg.svd(rk.W.numpy(), compute_uv=False)
    optimum = np.linalg.svd(nuc_kq, compute_uv=False).sum(-1)
    excess = tfsvm.nuclear_excess(data["X"], data["Z"], sel_kq, W_kq, optimum)
    with torch.inference_mode():
        r0 = tfsvm.train_kq(problem, K0, Q0, steps=STEPS, lr=LR, record_every=RECORD_EVERY, penalty=0.0)
    unpenalised = _contrast_summary(data, r0)
    return SizeResult(
        n,
        T,
        d,
        data,
        rw.steps,
        W_w,
        W_kq,
        sel_w,
        sel_kq,
        np.array(local),
        np.array(fro_w),
        np.array(nuc_w),
        np.array(fro_kq),
        nuc_kq,
        np.array(gaps),
        np.array(ranks),
        tfsvm.numerical_rank(W_kq),
        excess,
        imbalance(rk.K[-1].numpy(), rk.Q[-1].numpy()),
        unpenalised,
        _corr(rw.W.numpy(), np.array(fro_w)),
        _corr(rw.W.numpy(), np.array(nuc_w)),
        _corr(rk.W.numpy(), nuc_kq),
        _corr(rk.W.numpy(), np.array(fro_kq)),
        sv / sv[..., :1],
    )


def imbalance(K, Q) -> np.ndarray:
    """``||K^T K - Q^T Q||_F / ||K Q^T||_F`` for ``K, Q (..., d, m)``: zero for balanced factors
    (conserved by gradient flow on ``(K, Q)``, up to the start's small imbalance)."""
    Kt, Qt = np.swapaxes(K, -1, -2), np.swapaxes(Q, -1, -2)
    return np.linalg.norm(Kt @ K - Qt @ Q, axis=(-2, -1)) / np.linalg.norm(K @ Qt, axis=(-2, -1))


def _contrast_summary(data, rj) -> dict:
    """Correlation with, and nuclear-norm excess over, the Att-SVM* of the selection of a contrast run."""
    W = rj.W[-1].numpy()
    sv = np.linalg.svd(rj.W.numpy(), compute_uv=False)
    sols = [tfsvm.nuclear_svm(data["X"][b], data["Z"][b], a) for b, a in enumerate(rj.selection)]
    ref = np.array([sol.W for sol in sols])
    optimum = np.array([sol.objective for sol in sols])
    return {
        "corr": _corr(W, ref),
        "excess": tfsvm.nuclear_excess(data["X"], data["Z"], rj.selection, W, optimum),
        "imbalance": imbalance(rj.K[-1].numpy(), rj.Q[-1].numpy()),
        "rank_agree": tfsvm.numerical_rank(W) == np.array([sol.rank() for sol in sols]),
        "norm": np.linalg.norm(_flat(W), axis=-1),
        "sv": sv / sv[..., :1],
    }


def _naive(first: SizeResult) -> NaiveRun:
    """The plain-softmax gradient (what autograd computes) in float64 and float32, first size, same starts."""
    data = first.data
    problem = tfsvm.w_problem(data["X"], data["Y"], data["v"], data["Z"])
    W0, _, _ = starts(len(data["X"]), first.d)
    corr = {}
    for name, dtype in NAIVE_DTYPES.items():
        naive = tfsvm.train_w_naive(problem, W0, steps=NAIVE_STEPS, lr=LR, record_every=RECORD_EVERY, dtype=dtype)
        corr[name] = _corr(naive.W.numpy(), first.fro_w)
    keep = first.steps <= NAIVE_STEPS
    return NaiveRun(naive.steps, corr, first.corr_w_fro[keep])


def run(scale: str | None = None) -> WvsKQ:
    """Both sizes (10 instances each quick, 25 paper), both parameterisations, both SVMs; the naive run."""
    return _run(scale or config.scale())


@functools.lru_cache(maxsize=None)
def _run(scale: str) -> WvsKQ:
    count = config.pick(quick=10, paper=25, which=scale)
    with config.single_thread():
        sizes = [_one_size(n, T, d, count) for n, T, d in SIZES]
        return WvsKQ(sizes, _naive(sizes[0]))


def summary(r: WvsKQ | None = None) -> list[dict]:
    """Per size: the worst final correlations and the rank agreement (the claims' numbers)."""
    r = r or run()
    out = []
    for s in r.sizes:
        gain = s.corr_kq_nuc[-1] - s.corr_kq_fro[-1]
        out.append(
            {
                "size": s.label,
                "instances": len(s.W_w),
                "min_corr_w_fro": float(s.corr_w_fro[-1].min()),
                "all_local": bool(s.local_w.all()),
                "min_corr_kq_nuc": float(s.corr_kq_nuc[-1].min()),
                "below_kq": int((s.corr_kq_nuc[-1] < CORR_KQ).sum()),
                "min_gain": float(gain.min()),
                "rank_agree": int((s.rank_kq == s.rank_nuc).sum()),
                "max_nuc_gap": float(s.nuc_gap.max()),
            }
        )
    return out


# ---------------------------------------------------------------- claims
@claim(
    "C.w.frobenius",
    chapter=CHAPTER,
    kind="observation",
    known_miss="measured at quick scale on the public code's draws (seeds 0-9): 2 of the 20 instances are "
    "still converging at 20 000 steps (1 - correlation 1.4e-4 for seed 7 at n = T = 4, d = 6 and 2.3e-4 "
    "for seed 2 at n = 6, T = 8, d = 10; the other 18 below 3.6e-5); 1 - correlation falls as about k^-2 "
    "on every instance and crosses 1e-4 near 23 000 and 30 000 steps (chapter 13, 'Slow instances'). "
    "The 10 NumPy-drawn instances of each size that the chapter used before it took the public draws "
    "all passed (worst 0.999939)",
    checks="Transformers as SVMs (2308.16898): convergence of GD on W to the Frobenius Att-SVM of the "
    "(locally optimal) tokens it selects (reconstructed); normalized GD, the algorithm of the paper's "
    "experiments, is an extension beyond the plain GD of its theorems (hence an observation)",
    statement="On 10 random instances (25 at paper scale; the public code's draws, seeds 0, 1, ...) of each "
    "size (n = T = 4, d = 6 and n = 6, T = 8, d = 10), normalized GD "
    "on W (step 0.1, saturation-safe gradient, 20 000 steps) converges in direction to the Frobenius "
    "Att-SVM of the selection it makes, and that selection is locally optimal.",
    threshold="every instance: correlation >= 0.9999 with the Frobenius Att-SVM of its selection, and "
    "geometry.classify calls the selection locally optimal",
    competitor="the nuclear-norm Att-SVM* of the same selection",
    against=lambda: w_check(nuclear=True),
)
def _claim_w() -> Measured:
    return w_check()


def w_check(nuclear: bool = False) -> Measured:
    """C.w.frobenius's check against the Frobenius SVM of the selection (or the nuclear one, the competitor)."""
    r = run()
    rows = {}
    for s in r.sizes:
        c = (s.corr_w_nuc if nuclear else s.corr_w_fro)[-1]
        rows[s.label] = {"min_corr": round(float(c.min()), 6), "all_local": bool(s.local_w.all())}
    ok = all(v["min_corr"] >= CORR_W and v["all_local"] for v in rows.values())
    return Measured(rows, bool(ok))


@claim(
    "C.kq.nuclear",
    chapter=CHAPTER,
    kind="observation",
    checks="Transformers as SVMs (2308.16898): the (K, Q) parameterisation is biased towards the nuclear-norm "
    "Att-SVM* (reconstructed; the paper proves it for the regularization path); normalized GD on the "
    "public code's penalised loss, the algorithm of the paper's experiments, is an extension",
    statement="On the same instances, normalized GD on (K, Q) (each factor a unit step of 0.1, directions from "
    "the stable gradient of the public code's loss L(K Q^T) + lambda (||K||^2 + ||Q||^2), lambda = 2.2e-16, "
    "20 000 steps) ends in the direction of the nuclear-norm Att-SVM* of the selection it makes, clearly "
    "closer to it than to the Frobenius Att-SVM.",
    threshold="every instance: correlation of K Q^T >= 0.99 with the nuclear-norm Att-SVM* of its selection, "
    "and >= 0.02 more than with the Frobenius Att-SVM of that selection",
    competitor="the Frobenius Att-SVM of the same selection (the roles of the two SVMs swapped)",
    against=lambda: kq_check(frobenius=True),
)
def _claim_kq() -> Measured:
    return kq_check()


def kq_check(frobenius: bool = False) -> Measured:
    """C.kq.nuclear's check with the nuclear SVM as the target (or the Frobenius one, the competitor)."""
    rows, ok = {}, True
    for s in run().sizes:
        mine, other = (s.corr_kq_fro, s.corr_kq_nuc) if frobenius else (s.corr_kq_nuc, s.corr_kq_fro)
        gain = mine[-1] - other[-1]
        below = int((mine[-1] < CORR_KQ).sum())
        ok = ok and below == 0 and float(gain.min()) >= CORR_GAIN  # judged on the raw values
        rows[s.label] = {  # recorded to 4 decimals: the 6th digit moves with the BLAS
            "min_corr": round(float(mine[-1].min()), 4),
            "below_0.99": below,
            "min_gain": round(float(gain.min()), 4),
        }
    return Measured(rows, bool(ok))


@claim(
    "C.kq.low_rank",
    chapter=CHAPTER,
    kind="observation",
    checks="Transformers as SVMs (2308.16898): the (K, Q) limit is low rank like the nuclear-norm Att-SVM* "
    "(reconstructed); normalized GD on the public code's penalised loss is an extension",
    statement="On the same instances, after 20 000 normalized steps on (K, Q) (penalised loss as in "
    "C.kq.nuclear), the number of singular values of K Q^T above 1e-2 of the largest equals the rank of "
    "the nuclear-norm Att-SVM* of its selection (same threshold).",
    threshold="equal ranks (threshold 1e-2 of the largest singular value) on every instance",
    competitor="the rank of the Frobenius Att-SVM of the same selection (n: its constraint matrices end in z_i^T)",
    against=lambda: rank_check(frobenius=True),
)
def _claim_rank() -> Measured:
    return rank_check()


def rank_check(frobenius: bool = False) -> Measured:
    """C.kq.low_rank's check: the rank of K Q^T against the nuclear SVM's (or the Frobenius SVM's)."""
    rows = {}
    for s in run().sizes:
        ref = tfsvm.numerical_rank(s.fro_kq) if frobenius else s.rank_nuc
        rows[s.label] = {"agree": int((s.rank_kq == ref).sum()), "of": len(s.W_kq)}
    return Measured(rows, all(v["agree"] == v["of"] for v in rows.values()))


# ---------------------------------------------------------------- plain GD in a cone (the W theorem's algorithm)
CONE_CORR = 0.99
"""Starts of the plain-GD check: correlation 0.99 with ``W^mm_alpha`` (inside the theorem's cone)."""
CONE_NORM = 10.0
"""... at ``10 ||W^mm_alpha||`` (every margin about 10). A first design started at ``3 ||W^mm_alpha||``; judged on
the chapter's instances it failed (lowest correlation 0.942: at that norm plain GD follows the finite-norm path
``W^mm log k + W_fin``, whose direction is up to 6% off; the norm was not "large enough" for the theorem). The
norm 10 was then chosen on the trial seeds 10-12 (lowest correlation 0.990, ``1 - corr`` shrinking 0.78-0.81
times), before the judged instances were run again."""
PLAIN_STEPS = 100_000
PLAIN_CONE = 0.98
"""Plain GD must stay at correlation at least this with the Frobenius SVM at every recorded step (a cone of twice
the start's aperture; paper A's local theorem keeps the iterates in a cone around the SVM). Set on a trial (the
public draws of seeds 10-12, first size, selection from normalized GD), run before the judged instances: the
lowest correlation over the run was 0.987; 1 - corr changed by a factor 0.54-1.06 in 10^5 steps (plain GD turns
like 1 / log k), so a check that the direction *converges* cannot run here in a chapter's time. (These trial
numbers are for starts at ``3 ||W^mm||``; at ``CONE_NORM`` see there.)"""


@dataclass
class PlainCone:
    """Plain GD ``W <- W - eta grad L(W)`` from cone starts around ``W^mm_alpha`` (``B`` instances)."""

    lr: float  # the smallest 1/L of the instances (the book's smoothness bound)
    gap_start: np.ndarray  # (B,) 1 - corr(W0, W^mm_alpha)
    gap_end: np.ndarray  # (B,) 1 - corr(W_end, W^mm_alpha)
    corr_min: np.ndarray  # (B,) lowest corr(W, W^mm_alpha) over the recorded steps
    corr_nuc_max: np.ndarray  # (B,) highest corr(W, W^mm_star_alpha) over the recorded steps
    corr_nuc: np.ndarray  # (B,) corr(W_end, W^mm_star_alpha)
    gap_nuc_start: np.ndarray  # (B,) 1 - corr(W0, W^mm_star_alpha)
    kept: np.ndarray  # (B,) the selection stayed alpha
    norm: np.ndarray  # (2, B) ||W|| at steps/10 and at the end


def plain_cone(data: dict, alpha, fro, nuc, seed: int = SEED + 2) -> PlainCone:
    """Plain GD within the step bound from starts at correlation :data:`CONE_CORR` with ``fro (B, d, d)``.

    The step is the smallest ``1/L`` over the instances (one batched run); a start is
    ``CONE_NORM ||W^mm|| (c u + sqrt(1 - c^2) e)`` with ``u = W^mm/||W^mm||`` and ``e`` a random unit
    direction orthogonal to ``u``.
    """
    problem = tfsvm.w_problem(data["X"], data["Y"], data["v"], data["Z"])
    K, gamma = problem.K.numpy(), problem.gamma.numpy()
    B = fro.shape[0]
    lr = min(1.0 / smoothness.smoothness_bound(K[b], gamma[b]) for b in range(B))
    u = _flat(fro) / np.linalg.norm(_flat(fro), axis=-1, keepdims=True)
    e = np.random.default_rng(seed).normal(size=u.shape)
    e -= (e * u).sum(-1, keepdims=True) * u
    e /= np.linalg.norm(e, axis=-1, keepdims=True)
    W0 = (
        CONE_NORM * np.linalg.norm(_flat(fro), axis=-1, keepdims=True) * (CONE_CORR * u + np.sqrt(1 - CONE_CORR**2) * e)
    )
    with torch.inference_mode():
        h = train.train_p(problem, W0, steps=PLAIN_STEPS, lr=lr, method="gd", record_every=PLAIN_STEPS // 10)
    P = h.p.numpy()
    cf = lambda A, ref: geometry.correlation(A, _flat(ref))
    return PlainCone(
        lr,
        1 - cf(W0, fro),
        1 - cf(P[-1], fro),
        cf(P, fro).min(0),
        cf(P, nuc).max(0),
        cf(P[-1], nuc),
        1 - cf(W0, nuc),
        (h.probs[-1].argmax(-1).numpy() == np.asarray(alpha)).all(-1),
        np.linalg.norm(P[[int(np.flatnonzero(h.steps == PLAIN_STEPS // 10)[0]), -1]], axis=-1),
    )


def plain_check(c: PlainCone, against_nuclear: bool = False) -> Measured:
    """Plain GD stays in the cone ``corr >= PLAIN_CONE`` around the Frobenius SVM (or, for the competitor,
    around the nuclear one), keeps the selection and grows in norm."""
    corr = c.corr_nuc_max if against_nuclear else c.corr_min
    ok = bool((corr >= PLAIN_CONE).all() and c.kept.all() and (c.norm[-1] > c.norm[0]).all())
    return Measured(
        {
            "min_corr": round(float(corr.min()), 4),
            "selection_kept": bool(c.kept.all()),
            "norm_growing": bool((c.norm[-1] > c.norm[0]).all()),
            "step": round(c.lr, 3),
            "gap_ratio_end_over_start": [round(float(x), 2) for x in c.gap_end / c.gap_start],
        },
        ok,
    )


def plain_cone_run(r: WvsKQ | None = None) -> PlainCone:
    """:func:`plain_cone` on the first size's instances and the selections of their ``W`` runs."""
    return _plain_cone_run(config.scale()) if r is None else _plain_of(r)


def _plain_of(r: WvsKQ) -> PlainCone:
    s = r.sizes[0]
    return plain_cone(s.data, s.sel_w, s.fro_w, s.nuc_w)


@functools.lru_cache(maxsize=None)
def _plain_cone_run(scale: str) -> PlainCone:
    return _plain_of(run(scale))


@claim(
    "C.w.plain_gd",
    chapter=CHAPTER,
    kind="theorem",
    checks="Transformers as SVMs (2308.16898), GD on W (reconstructed; paper A's local theorem on the keys "
    "vec(x z^T)): plain GD with a step within the book's smoothness bound, started in a cone around W^mm_alpha "
    "of a locally optimal selection",
    statement="On the first size's instances (n = T = 4, d = 6), plain GD on W (step the smallest 1/L, "
    "10^5 steps) from starts at correlation 0.99 with the Frobenius Att-SVM of the W run's (locally optimal) "
    "selection, at 10 times its norm, keeps the selection, grows in norm and stays in a cone around that SVM "
    "(the first half of the theorem; its directional limit is too slow for plain GD to show here).",
    threshold="every instance: the selection kept, ||W|| growing over the last decade, correlation >= 0.98 "
    "with the Frobenius SVM at every recorded step; set on a trial (seeds 10-12: lowest 0.987 from 3 ||W^mm||, "
    "0.990 from 10 ||W^mm||; the start at 3 ||W^mm|| failed on the judged instances, see CONE_NORM)",
    competitor="the nuclear-norm Att-SVM* of the same selection (the same cone around it)",
    against=lambda: plain_check(plain_cone_run(), against_nuclear=True),
)
def _claim_plain() -> Measured:
    return plain_check(plain_cone_run())


# ---------------------------------------------------------------- plots
def plot_correlations(r: WvsKQ | None = None, axes=None):
    """Median (line) and range (band) over instances of the correlation with both SVMs, per parameterisation."""
    r = r or run()
    if axes is None:
        fig, axes = subplots(2, titles=["W", "(K, Q)"])
    fig = axes[0].figure
    s = r.sizes[0]
    for ax, series in (
        (axes[0], {"frobenius svm": s.corr_w_fro, "nuclear svm": s.corr_w_nuc}),
        (axes[1], {"nuclear svm": s.corr_kq_nuc, "frobenius svm": s.corr_kq_fro}),
    ):
        for name, c in series.items():
            k = 0 if name.startswith("frob") else 1
            st = style(k)
            ax.plot(s.steps[1:], np.median(c[1:], 1), lw=1.8, label=name, **st)
            ax.fill_between(s.steps[1:], c[1:].min(1), c[1:].max(1), color=st["color"], alpha=0.2, lw=0)
        ax.set_xscale("log")
        ax.set_xlabel("iteration k")
        ax.set_ylim(0.6, 1.01)
        ax.legend(loc="lower right")
    axes[0].set_ylabel("correlation")
    return fig


def plot_singular_values(r: WvsKQ | None = None, axes=None):
    """Singular values of ``K Q^T`` (divided by the largest) against the step, per instance, first size:
    the public code's penalised run and the same run without the penalty."""
    r = r or run()
    if axes is None:
        fig, axes = subplots(2, titles=["with the penalty (public code)", "without the penalty"])
    fig = axes[0].figure
    s = r.sizes[0]
    cs = colors(s.d)
    for ax, sv in ((axes[0], s.sv_kq), (axes[1], s.unpenalised["sv"])):
        for b in range(sv.shape[1]):
            for j in range(1, s.d):
                ax.plot(
                    s.steps[1:],
                    np.maximum(sv[1:, b, j], 1e-12),
                    color=cs[j],
                    lw=0.9,
                    alpha=0.7,
                    label=f"sigma_{j + 1}" if b == 0 else None,
                )
        ax.axhline(tfsvm.RANK_TOL, color="0.3", ls=":", lw=1.2)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(1e-8, 2)
        ax.set_xlabel("iteration k")
    axes[0].set_ylabel("singular value / largest")
    axes[1].legend(loc="lower left", fontsize=8, ncol=2)
    return fig


def slow_instances(r: WvsKQ | None = None, steps: int = 40_000, every: int = 10_000) -> list[dict]:
    """The ``W`` runs that end below :data:`CORR_W`, continued to ``steps``: ``1 - correlation`` every ``every``.

    Returns one row per such instance: size label, instance index, ``steps (S,)`` and ``gap (S,)``
    (``1 -`` correlation with the Frobenius Att-SVM of the selection of the 20 000-step run).
    """
    r = r or run()
    rows = []
    for s in r.sizes:
        slow = np.flatnonzero(s.corr_w_fro[-1] < CORR_W)
        if slow.size == 0:
            continue
        data = {k: v[slow] for k, v in s.data.items()}
        problem = tfsvm.w_problem(data["X"], data["Y"], data["v"], data["Z"])
        W0 = starts(len(s.W_w), s.d)[0][slow]
        with torch.inference_mode():
            long = tfsvm.train_w(problem, W0, steps=steps, lr=LR, record_every=every)
        gap = 1 - _corr(long.W.numpy(), s.fro_w[slow])
        for j, b in enumerate(slow):
            rows.append({"size": s.label, "instance": int(b), "steps": long.steps[1:], "gap": gap[1:, j]})
    return rows


def plot_naive(r: WvsKQ | None = None, ax=None):
    """Correlation with the Frobenius SVM: the plain-softmax gradient against the stable one (median, range)."""
    r = r or run()
    fig, ax = (ax.figure, ax) if ax is not None else subplots(1)
    nv = r.naive
    runs = {"stable gradient": nv.corr_stable, **{f"{k} plain softmax": c for k, c in nv.corr_naive.items()}}
    for k, (name, c) in enumerate(runs.items()):
        st = style(k)
        ax.plot(nv.steps[1:], np.median(c[1:], 1), lw=1.8, label=name, **st)
        ax.fill_between(nv.steps[1:], c[1:].min(1), c[1:].max(1), color=st["color"], alpha=0.2, lw=0)
    ax.set_xscale("log")
    ax.set_yscale("logit")
    ax.set_xlabel("iteration k")
    ax.set_ylabel("correlation with frobenius svm")
    ax.legend(loc="lower left")
    return fig


FIGURES = {
    "fig-wkq-correlations": lambda: plot_correlations(),
    "fig-wkq-singular-values": lambda: plot_singular_values(),
    "fig-wkq-naive": lambda: plot_naive(),
}
