"""Beyond linear heads: attention that selects several tokens (Part III, chapter 15).

The model is a transformer read out at query ``z_i`` with the head of the public
``TFasSVM`` code's ``lambda`` mode: ``a_i = X_i^T softmax(X_i W z_i)``,
``f(X_i) = u^T a_i - lam ||a_i||^2``, logistic loss ``log(1 + e^{-f})``
(labels ``+1``). Per input the optimal attention maximises the concave
``h_i(s) = gamma_i^T s - lam ||X_i^T s||^2`` over the simplex; with
orthonormal tokens (``X_i X_i^T = I``) it is the projection of
``gamma_i / (2 lam)`` on the simplex, whose support ``O_i`` may hold several
tokens. The instance is built so that (i) each input's optimal support is a
designed set (sizes 2, 3, 1, 2) with the optimal mixture uniform on it and (ii)
the tokens outside it are strictly worse (strict complementarity).

Normalized GD on ``W`` (float64, the gradient in closed form and checked
against autograd in the tests) is run from several starts in one batch; the
selected sets are read off the final attention (mass ``>= 1e-3``, every other
token ``<= 1e-4``), checked against the construction, and GD's direction is
compared with the generalised SVM of those sets (:mod:`mmtoken.gen_svm`), tied
and untied.

The chapter ``book/part3/15_multi_token.md`` shows these runs.
"""

from __future__ import annotations

__all__ = [
    "CHAPTER",
    "LOG_UNDERFLOW",
    "SCORES",
    "simplex_projection",
    "simplex_qp",
    "MultiInstance",
    "make_instance",
    "GENERIC",
    "generic_instance",
    "Objective",
    "train_w",
    "MultiResult",
    "run",
    "generic_corr",
    "summary",
    "plot_corr",
    "plot_generic",
    "FIGURES",
    "max_nonselected",
    "gen_svm_check",
]

import functools
import itertools
from dataclasses import dataclass

import numpy as np
import torch

from .. import config, gen_svm, geometry
from ..ledger import Measured, claim
from ..plotting import panel_titles, style, two_panels

CHAPTER = "15_multi_token"
HIGH, LOW = 1e-3, 1e-4
"""Selected set: tokens with final attention ``>= HIGH``; the split is clean when all others are ``<= LOW``."""
LOG_UNDERFLOW = -700.0
"""float64 ``exp`` underflows near ``-745``: every log-probability must stay above this (checked), so the
closed-form gradient loses nothing to underflow."""
_A, _B = 0.45, -0.15
SCORES = np.array(
    [
        [_A, _A, _B, _B],  # O = {0, 1}
        [_B, _A, _A, _A],  # O = {1, 2, 3}
        [_B, _B, _A, _B],  # O = {2}
        [_A, _B, _B, _A],
    ]
)  # O = {0, 3}
"""The designed scores ``gamma_it = u^T x_it``: selected tokens share the top score, the others share the
bottom one (equal scores keep the finite corrections of GD small, as in paper A's Theorem 2)."""


def simplex_projection(y) -> np.ndarray:
    """Euclidean projection of ``y (T,)`` on the probability simplex (sort-based, exact)."""
    y = np.asarray(y, float)
    if y.ndim != 1 or y.size == 0 or not np.isfinite(y).all():
        raise ValueError(f"y must be a finite non-empty 1-d array, got shape {y.shape}")
    srt = np.sort(y)[::-1]
    c = np.cumsum(srt) - 1.0
    k = np.arange(1, y.size + 1)
    r = k[srt - c / k > 0][-1]
    return np.maximum(y - c[r - 1] / r, 0.0)


def simplex_qp(g, M, tol: float = 1e-12) -> np.ndarray:
    """The maximiser of ``g^T s - s^T M s`` over the simplex (``M (T, T)`` positive definite), exactly: every
    support ``S`` is tried (small ``T``), its KKT system ``2 M_SS s_S + nu 1 = g_S, 1^T s_S = 1`` solved, and
    the support whose solution is positive and that no outside token improves (``g_t - 2 (M s)_t <= nu``) kept."""
    g, M = np.asarray(g, float), np.asarray(M, float)
    T = g.size
    if g.ndim != 1 or M.shape != (T, T) or T > 12:
        raise ValueError(f"g must be (T,) with T <= 12 and M (T, T), got {g.shape} and {M.shape}")
    best, val = None, -np.inf
    for k in range(1, T + 1):
        for S in itertools.combinations(range(T), k):
            S = list(S)
            A = np.zeros((k + 1, k + 1))
            A[:k, :k], A[:k, k], A[k, :k] = 2 * M[np.ix_(S, S)], 1.0, 1.0
            sol = np.linalg.lstsq(A, np.append(g[S], 1.0), rcond=None)[0]
            if sol[:k].min() <= tol:
                continue
            s = np.zeros(T)
            s[S] = sol[:k]
            grad = g - 2 * M @ s
            if np.delete(grad, S).max(initial=-np.inf) > sol[k] + 1e-10:
                continue
            if (v := g @ s - s @ M @ s) > val:
                best, val = s, v
    if best is None:
        raise ValueError("no support satisfies the KKT conditions (is M positive definite?)")
    return best


@dataclass
class MultiInstance:
    X: np.ndarray  # (n, T, d) tokens, orthonormal within each input
    Z: np.ndarray  # (n, d) unit queries
    u: np.ndarray  # (d,) head direction
    lam: float  # quadratic penalty of the head

    @property
    def gamma(self) -> np.ndarray:
        return self.X @ self.u

    def optimal_attention(self) -> np.ndarray:
        """``(n, T)``: the maximiser of ``h_i`` over the simplex: with orthonormal tokens the projection of
        ``gamma_i / (2 lam)``, otherwise :func:`simplex_qp`."""
        G = np.einsum("ntd,nsd->nts", self.X, self.X)
        if np.allclose(G, np.eye(G.shape[-1]), atol=1e-10):
            return np.stack([simplex_projection(g / (2 * self.lam)) for g in self.gamma])
        return np.stack([simplex_qp(g, self.lam * Gi) for g, Gi in zip(self.gamma, G)])

    def optimal_sets(self) -> list[tuple[int, ...]]:
        return [tuple(int(t) for t in np.flatnonzero(s > 0)) for s in self.optimal_attention()]

    def complementarity_gap(self) -> float:
        """Smallest ``(common gradient on O_i) - (gradient of a token outside O_i)`` of ``h_i`` at the optimum:
        positive means every non-selected token is strictly worse (strict complementarity)."""
        S = self.optimal_attention()
        G = self.gamma - 2 * self.lam * S  # gradient of h_i in s (orthonormal tokens)
        gaps = [G[i, S[i] > 0].min() - G[i, S[i] == 0].max() for i in range(len(S)) if (S[i] == 0).any()]
        return float(min(gaps))


def make_instance(scores=SCORES, d: int = 5, lam: float = 0.2, seed: int = 0) -> MultiInstance:
    """Tokens with ``x_it^T u = gamma_it`` and ``X_i X_i^T = I``: ``x_it = gamma_it u + r_it`` with
    ``r_i`` of Gram ``I - gamma_i gamma_i^T`` in a random ``T``-dimensional subspace of ``u^perp``."""
    scores = np.asarray(scores, float)
    n, T = scores.shape
    if d < T + 1:
        raise ValueError(f"d must be at least T + 1 = {T + 1} (orthonormal tokens beside u), got {d}")
    if not lam > 0:
        raise ValueError(f"lam must be positive, got {lam}")
    if (np.linalg.norm(scores, axis=1) >= 1).any():
        raise ValueError("each row of scores must have norm < 1 (orthonormal tokens with those projections)")
    rng = np.random.default_rng(seed)
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    X = np.zeros((n, T, d))
    for i, g in enumerate(scores):
        basis = np.linalg.qr(np.column_stack([u, rng.normal(size=(d, T))]))[0][:, 1:]  # (d, T) in u^perp
        w, V = np.linalg.eigh(np.eye(T) - np.outer(g, g))
        R = (V * np.sqrt(np.clip(w, 0, None))) @ V.T  # Gram I - g g^T
        X[i] = np.outer(g, u) + R @ basis.T
    Z = rng.normal(size=(n, d))
    Z /= np.linalg.norm(Z, axis=1, keepdims=True)
    return MultiInstance(X, Z, u, float(lam))


GENERIC = {"n": 4, "T": 4, "d": 5, "lam": 0.3, "min_weight": 0.15, "max_tied_untied_corr": 0.97}
"""The search for a generic instance: unit random tokens (not orthonormal), at least two inputs with a mixed
optimum, no input mixing all tokens, every optimal weight >= ``min_weight``, and tied and untied SVMs of the
optimal sets correlating below ``max_tied_untied_corr`` (so that a run can tell them apart)."""


def generic_instance(max_seed: int = 100, start: int = 0) -> tuple[int, MultiInstance]:
    """The first seed in ``range(start, max_seed)`` meeting :data:`GENERIC`'s criteria, and its instance."""
    n, T, d, lam = GENERIC["n"], GENERIC["T"], GENERIC["d"], GENERIC["lam"]
    for seed in range(start, max_seed):
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(n, T, d))
        X /= np.linalg.norm(X, axis=-1, keepdims=True)
        Z = rng.normal(size=(n, d))
        Z /= np.linalg.norm(Z, axis=1, keepdims=True)
        u = rng.normal(size=d)
        inst = MultiInstance(X, Z, u / np.linalg.norm(u), lam)
        S = inst.optimal_attention()
        sizes = (S > 0).sum(1)
        if sizes.max() == T or (sizes >= 2).sum() < 2 or S[S > 0].min() < GENERIC["min_weight"]:
            continue
        sets = inst.optimal_sets()
        tied, free = gen_svm.w_gen_svm(X, Z, sets), gen_svm.w_gen_svm(X, Z, sets, tied=False)
        if geometry.correlation(tied.ravel(), free.ravel()) < GENERIC["max_tied_untied_corr"]:
            return seed, inst
    raise ValueError(f"no seed in [{start}, {max_seed}) meets the criteria of GENERIC")


class Objective:
    """``L(W) = mean_i log(1 + exp(-f(X_i)))`` batched over ``W (S, d, d)``, float64, with its gradient."""

    def __init__(self, inst: MultiInstance):
        t = lambda a: torch.as_tensor(np.asarray(a, float), dtype=torch.float64)
        self.X, self.Z, self.u, self.lam = t(inst.X), t(inst.Z), t(inst.u), inst.lam

    def parts(self, W: torch.Tensor):
        logits = torch.einsum("ntd,sde,ne->snt", self.X, W, self.Z)
        log_s = torch.log_softmax(logits, -1)
        s = log_s.exp()
        a = torch.einsum("snt,ntd->snd", s, self.X)
        f = a @ self.u - self.lam * (a * a).sum(-1)
        return log_s, s, a, f

    def value(self, W: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.softplus(-self.parts(W)[3]).mean(-1)

    def grad(self, W: torch.Tensor):
        """``(dL/dW (S, d, d), log-probabilities (S, n, T))`` in closed form:
        ``dL/dlogit_it = l'(f_i) s_it (g_it - s_i^T g_i) / n`` with ``g_it = x_it^T (u - 2 lam a_i)``."""
        log_s, s, a, f = self.parts(W)
        lp = -torch.sigmoid(-f)  # l'(f), (S, n)
        g = torch.einsum("ntd,snd->snt", self.X, self.u - 2 * self.lam * a)
        dlogit = lp[..., None] * s * (g - (s * g).sum(-1, keepdim=True)) / s.shape[1]
        return torch.einsum("snt,ntd,ne->sde", dlogit, self.X, self.Z), log_s


def train_w(inst: MultiInstance, W0, steps: int, lr: float, record_every: int = 100):
    """Normalized GD ``W <- W - lr G/||G||_F`` from starts ``W0 (S, d, d)``; returns ``(steps, Ws, log_s)``
    with ``Ws (records, S, d, d)`` and the final log-probabilities ``(S, n, T)``."""
    obj = Objective(inst)
    W = torch.as_tensor(np.asarray(W0, float), dtype=torch.float64).clone()
    if W.ndim != 3 or W.shape[1:] != (inst.X.shape[2],) * 2:
        raise ValueError(f"W0 must be (starts, d, d) with d = {inst.X.shape[2]}, got {tuple(W.shape)}")
    rec_steps, rec = [], []
    for k in range(steps + 1):
        G, log_s = obj.grad(W)
        if k % record_every == 0 or k == steps:
            rec_steps.append(k)
            rec.append(W.clone())
        if k == steps:
            break
        W = W - lr * G / G.flatten(1).norm(dim=1)[:, None, None]
    return np.array(rec_steps), torch.stack(rec).numpy(), log_s.numpy()


@dataclass
class MultiResult:
    inst: MultiInstance
    steps: np.ndarray
    Ws: np.ndarray  # (records, S, d, d)
    log_s: np.ndarray  # (S, n, T) final
    sets: list  # per start: sets read off the final attention (None: no clean split)
    W_tied: np.ndarray  # generalised SVM of the sets (ties kept)
    W_free: np.ndarray  # the same without the ties
    W_single: np.ndarray  # ordinary Att-SVM of the most attended tokens
    generic: dict  # the generic instance: seed, sets, steps, Ws (records, d, d), final probs, SVMs

    def corr(self, W_ref: np.ndarray) -> np.ndarray:
        """``(records, S)`` correlation of GD's iterates with ``W_ref``."""
        R, S = self.Ws.shape[:2]
        return geometry.correlation(self.Ws.reshape(R, S, -1), W_ref.ravel())


def run(scale: str | None = None) -> MultiResult:
    return _run(scale or config.scale())


@functools.lru_cache(maxsize=None)
def _run(scale: str) -> MultiResult:
    steps = config.pick(quick=3000, paper=20000, which=scale)
    starts = config.pick(quick=4, paper=16, which=scale)
    inst = make_instance()
    d = inst.X.shape[2]
    gen = np.random.default_rng(1)
    W0 = 0.1 * gen.normal(size=(starts, d, d))
    W0[0] = 0.0  # the first start is W = 0
    st, Ws, log_s = train_w(inst, W0, steps, lr=0.1, record_every=max(steps // 30, 1))
    sets = []
    for P in np.exp(log_s):
        try:
            sets.append(gen_svm.sets_from_probs(P, HIGH, LOW))
        except ValueError:
            sets.append(None)
    ref = sets[0] if sets[0] is not None else inst.optimal_sets()
    W_tied = gen_svm.w_gen_svm(inst.X, inst.Z, ref)
    W_free = gen_svm.w_gen_svm(inst.X, inst.Z, ref, tied=False)
    top = np.exp(log_s[0]).argmax(-1)
    W_single = gen_svm.w_gen_svm(inst.X, inst.Z, [[int(t)] for t in top])
    seed, g_inst = generic_instance()
    g_sets = g_inst.optimal_sets()
    g_st, g_Ws, g_log = train_w(g_inst, np.zeros((1, d, d)), steps, lr=0.1, record_every=max(steps // 30, 1))
    generic = {
        "seed": seed,
        "inst": g_inst,
        "sets": g_sets,
        "steps": g_st,
        "Ws": g_Ws[:, 0],
        "probs": np.exp(g_log[0]),
        "W_tied": gen_svm.w_gen_svm(g_inst.X, g_inst.Z, g_sets),
        "W_free": gen_svm.w_gen_svm(g_inst.X, g_inst.Z, g_sets, tied=False),
    }
    return MultiResult(inst, st, Ws, log_s, sets, W_tied, W_free, W_single, generic)


def generic_corr(r: MultiResult) -> dict:
    """``(records,)`` correlations of GD on the generic instance with its tied and untied SVMs."""
    g = r.generic
    Ws = g["Ws"].reshape(len(g["steps"]), -1)
    return {
        "tied": geometry.correlation(Ws, g["W_tied"].ravel()),
        "untied": geometry.correlation(Ws, g["W_free"].ravel()),
    }


# ---------------------------------------------------------------- claims
def summary(r: MultiResult) -> dict:
    designed = r.inst.optimal_sets()
    c = r.corr(r.W_tied)[-1]
    return {
        "starts": int(len(r.sets)),
        "sets_match_construction": all(s == designed for s in r.sets),
        "set_sizes": [len(o) for o in designed],
        "min_corr_gen_svm": float(c.min()),
        "max_corr_untied": float(r.corr(r.W_free)[-1].max()),
        "max_corr_single_token": float(r.corr(r.W_single)[-1].max()),
        "min_log_prob": float(r.log_s.min()),
        "complementarity_gap": r.inst.complementarity_gap(),
    }


GENERIC_TIED_CORR = 0.95
"""Generic instance: GD's correlation with the generalised (tied) SVM, and above the untied one's. Written after a
trial on the next three seeds meeting :data:`GENERIC` (58, 66, 88; 3000 steps from ``W = 0``): tied 0.859, 0.683,
0.987 against untied 0.841, 0.773, 0.912 (only seed 88 meets it; the other two have not split cleanly by then)."""


def max_nonselected(r: MultiResult) -> float:
    """Largest final attention on a token outside the designed sets, over the starts (the designed instance)."""
    designed = r.inst.optimal_sets()
    P = np.exp(r.log_s)
    out = np.ones(P.shape[1:], bool)
    for i, o in enumerate(designed):
        out[i, list(o)] = False
    return float(P[:, out].max())


def gen_svm_check(r: MultiResult, ref: str = "tied") -> Measured:
    """The claim's check with GD's direction compared to ``ref`` (``"tied"``: the generalised SVM, the claim;
    ``"untied"``: the competitor), on the designed and on the generic instance."""
    m = summary(r)
    c = generic_corr(r)
    mine, other = (c["tied"][-1], c["untied"][-1]) if ref == "tied" else (c["untied"][-1], c["tied"][-1])
    designed = r.corr(r.W_tied if ref == "tied" else r.W_free)[-1].min()
    ok = (
        m["sets_match_construction"]
        and m["min_log_prob"] > LOG_UNDERFLOW
        and designed >= 0.99
        and mine >= GENERIC_TIED_CORR
        and mine > other
    )
    # recorded to 3 decimals (judged above on the raw values): correlations move by up to 6e-5 with the BLAS
    value = {
        "designed_sets_match": m["sets_match_construction"],
        "designed_min_corr": round(float(designed), 3),
        "generic_seed": int(r.generic["seed"]),
        "generic_corr": round(float(mine), 3),
        "generic_corr_other": round(float(other), 3),
    }
    return Measured(value, bool(ok))


@claim(
    "C.multi.gen_svm",
    chapter=CHAPTER,
    kind="observation",
    checks="Transformers as SVMs, Sec. 6: the proposed SVM equivalence for nonlinear heads (a conjecture "
    "there, no theorem); normalized GD on W (an algorithm beyond any theorem), on the chapter's designed "
    "instance and on its generic instance (seed 52), whose numbers were known from issue 25 before the "
    "threshold was written: an illustration on one instance, not a held-out test",
    statement="On an instance where attention selects several tokens per input, normalized GD selects the "
    "designed sets and its direction matches the generalised SVM (ties inside, margin 1 outside) of the "
    "selected sets; on a generic instance where the tied and untied SVMs are apart it turns towards the "
    "tied one.",
    threshold="designed instance, every start: a clean split (selected >= 1e-3, others <= 1e-4) equal to the "
    "designed optimal sets, no float64 underflow, correlation with the generalised SVM >= 0.99; generic "
    "instance (3000 steps from W = 0): correlation with the tied SVM >= 0.95 and above that with the untied "
    "SVM (set on a trial on seeds 58, 66, 88, where only 88 met it)",
    competitor="the untied SVM (the selected tokens' logits left free among themselves)",
    against=lambda: gen_svm_check(run(), "untied"),
)
def _claim_gen_svm() -> Measured:
    return gen_svm_check(run())


# ---------------------------------------------------------------- figures
def plot_corr(r: MultiResult | None = None):
    """(a) ``1 - corr`` of GD (start ``W = 0``) with the tied, untied and single-token SVMs against the step;
    (b) the final attention of that start against the designed optimum, per input."""
    r = r or run()
    fig, axes = two_panels()
    x = np.maximum(r.steps, 1)
    for k, (name, W) in enumerate([("generalised svm", r.W_tied), ("untied", r.W_free), ("one token", r.W_single)]):
        c = r.corr(W)
        axes[0].plot(x, np.clip(1 - c[:, 0], 1e-8, None), label=name, **style(k))
        if k == 0:
            axes[0].fill_between(
                x,
                np.clip(1 - c.max(1), 1e-8, None),
                np.clip(1 - c.min(1), 1e-8, None),
                color=style(0)["color"],
                alpha=0.2,
                lw=0,
            )
    axes[0].axhline(0.01, color="0.4", lw=0.8, ls=":")
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("1 - correlation")
    axes[0].legend(loc="center right", fontsize=8)
    P = np.exp(r.log_s[0])
    S = r.inst.optimal_attention()
    n, T = P.shape
    pos = np.arange(n * T)
    axes[1].bar(pos - 0.2, P.ravel(), width=0.4, label="gd", color=style(0)["color"])
    axes[1].bar(pos + 0.2, S.ravel(), width=0.4, label="optimum", color=style(1)["color"])
    for i in range(1, n):
        axes[1].axvline(i * T - 0.5, color="0.6", lw=0.6)
    axes[1].set_xticks(pos, [str(t) for _ in range(n) for t in range(T)])
    axes[1].set_xlabel("token (inputs 1 to 4)")
    axes[1].set_ylabel("attention")
    axes[1].legend(loc="upper right", fontsize=8)
    panel_titles(axes, ["direction", "selected sets"])
    return fig


def plot_generic(r: MultiResult | None = None):
    """``1 - corr`` of GD on the generic instance with its tied and untied SVMs against the step."""
    from ..plotting import one_panel

    r = r or run()
    c = generic_corr(r)
    fig, ax = one_panel()
    x = np.maximum(r.generic["steps"], 1)
    ax.plot(x, np.clip(1 - c["tied"], 1e-8, None), label="generalised svm (tied)", **style(0))
    ax.plot(x, np.clip(1 - c["untied"], 1e-8, None), label="untied svm", **style(1))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("1 - correlation")
    ax.legend(loc="lower left")
    return fig


FIGURES = {"fig-multi-token": lambda: plot_corr(), "fig-multi-generic": lambda: plot_generic()}
