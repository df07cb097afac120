"""Nonlinear prediction heads (paper A, Theorem 8, Appendix D).

The model: keys ``k_it`` (planar here, so ``p`` moves in the plane), values
``x_it in R^q`` and a fixed two-layer head

    f(X_i) = h(a_i),   a_i = sum_t s_it x_it,   h(a) = c^T tanh(A a + b),

trained on the logistic loss ``L(p) = (1/n) sum_i l(Y_i h(a_i))``. Each input
has a *set* ``O_i`` of optimal tokens that all carry the same value
``x*_i`` (so any mixture of them gives the same feature, and the label
``Y_i = sign h(x*_i)``), and non-optimal tokens whose values pull ``h`` toward the
wrong label. The risk then depends on ``p`` only through the non-optimal
mixture ``delta_i = sum_{t not in O_i} s_it (x_it - x*_i)``, and is smallest at
``delta = 0`` (Assumption D; checked numerically).

We compute ``L(p) - L(infinity)`` without cancellation: ``s_it`` from the log-softmax,
``tanh(z + e) - tanh(z) = tanh(e)(1 - tanh(z)^2) / (1 + tanh(z) tanh(e))``, and
``Loss.excess``; autograd on this excess in float64 gives an accurate gradient
even when the non-optimal mixture is ``1e-12``.

The regularization path ``min L(p) s.t. ||p|| <= R`` is solved on the sphere
``||p|| = R`` by monotone rotations (as :func:`mmtoken.train.regularization_path`),
all radii and starts in one batch; its direction is compared with ATT-SVM',
``min ||p|` s.t. for each i some o in O_i has (k_io - k_it)^T p >= 1 for all t not in O_i``
(a union of convex problems: one ATT-SVM per choice ``o_i in O_i``, with the other
optimal tokens unconstrained).

The chapter ``book/part1/06_nonlinear.md`` shows these runs.
"""

from __future__ import annotations

__all__ = [
    "single_token_svm",
    "CHAPTER",
    "HeadInstance",
    "make_instance",
    "ExcessRisk",
    "reg_path",
    "att_svm_prime",
    "NonlinearResult",
    "AssumptionD",
    "first_order_weights",
    "check_assumption_d",
    "run",
    "plot_path",
    "plot_corr",
    "FIGURES",
]

import functools
import itertools
from dataclasses import dataclass

import numpy as np
import torch

from .. import config, geometry, losses, svm
from ..ledger import Measured, claim
from ..plotting import colors, plot_curves
from ..train import accept, sphere_step

CHAPTER = "06_nonlinear"


@dataclass
class HeadInstance:
    K: np.ndarray  # (n, T, 2) keys
    X: np.ndarray  # (n, T, q) values
    Y: np.ndarray  # (n,)
    optimal: list  # O_i: tuple of token indices per input
    A: np.ndarray  # (H, q)
    b: np.ndarray  # (H,)
    c: np.ndarray  # (H,)

    @property
    def x_star(self) -> np.ndarray:
        """``(n, q)`` the common value of the optimal tokens."""
        return np.stack([self.X[i, o[0]] for i, o in enumerate(self.optimal)])

    def head(self, a: np.ndarray) -> np.ndarray:
        return np.tanh(a @ self.A.T + self.b) @ self.c

    def nonopt_mask(self) -> np.ndarray:
        M = np.ones(self.K.shape[:2], bool)
        for i, o in enumerate(self.optimal):
            M[i, list(o)] = False
        return M


def make_instance(seed: int = 3, n: int = 4, T: int = 4, q: int = 3, H: int = 8) -> HeadInstance:
    """Inputs 0 and 1 have two optimal tokens, inputs 2 and 3 one; planar keys, values in ``R^q``."""
    rng = np.random.default_rng(seed)
    sizes = [2, 2] + [1] * (n - 2)
    mu = rng.normal(size=q)
    mu /= np.linalg.norm(mu)
    Y = np.array([1.0, -1.0] * (n // 2) + [1.0] * (n % 2))
    K = np.zeros((n, T, 2))
    X = np.zeros((n, T, q))
    optimal = []
    for i in range(n):
        o = tuple(range(sizes[i]))
        optimal.append(o)
        angle = rng.uniform(-0.6, 0.6, size=sizes[i])
        K[i, : sizes[i]] = 1.2 * np.stack([np.cos(angle), np.sin(angle)], -1)
        K[i, sizes[i] :] = rng.normal(size=(T - sizes[i], 2)) * 0.6 + np.array([-0.2, 0.0])
        X[i, : sizes[i]] = Y[i] * mu + 0.2 * rng.normal(size=q)  # one common value for the optimal set
        X[i, : sizes[i]] = X[i, 0]
        X[i, sizes[i] :] = -Y[i] * mu * rng.uniform(0.5, 1.5, size=(T - sizes[i], 1)) + 0.3 * rng.normal(
            size=(T - sizes[i], q)
        )
    A = mu[None, :] + 0.5 * rng.normal(size=(H, q))
    b = 0.3 * rng.normal(size=H)
    c = rng.uniform(0.5, 1.5, size=H)
    inst = HeadInstance(K, X, Y, optimal, A, b, c)
    if not np.all(np.sign(inst.head(inst.x_star)) == Y):
        raise ValueError("the head does not fit the optimal tokens' labels for this seed")
    return inst


class ExcessRisk:
    """``L(p) - L(infinity)`` for the nonlinear head, batched over ``p (..., 2)``, torch float64."""

    def __init__(self, inst: HeadInstance, loss: str = "logistic"):
        t = lambda a: torch.as_tensor(np.asarray(a, float), dtype=torch.float64)
        self.loss = losses.get_loss(loss)
        self.K, self.Y = t(inst.K), t(inst.Y)
        self.dX = t(inst.X - inst.x_star[:, None, :])  # x_it - x*_i (zero on optimal tokens)
        self.nonopt = torch.as_tensor(inst.nonopt_mask())
        self.A, self.c = t(inst.A), t(inst.c)
        zs = t(inst.x_star) @ self.A.T + t(inst.b)
        self.tz = torch.tanh(zs)  # (n, H)
        self.u_star = self.Y * (self.tz @ self.c)  # (n,)

    def mixture(self, p: torch.Tensor) -> torch.Tensor:
        """``delta_i = sum_t s_it (x_it - x*_i)``, ``(..., n, q)``, from the log-softmax."""
        z = torch.einsum("ntm,...m->...nt", self.K, p)
        s = torch.exp(z - torch.logsumexp(z, -1, keepdim=True))
        return torch.einsum("...nt,ntq->...nq", s * self.nonopt, self.dX)

    def from_mixture(self, delta: torch.Tensor) -> torch.Tensor:
        """Per-input excess risk ``l(Y_i h(x*_i + delta_i)) - l(Y_i h(x*_i))``, ``(..., n)``, without cancellation."""
        te = torch.tanh(delta @ self.A.T)  # tanh(A delta)
        dh = (te * (1 - self.tz**2) / (1 + self.tz * te)) @ self.c
        return self.loss.excess(self.u_star, self.Y * dh)  # (..., n)

    def from_attention(self, s: torch.Tensor) -> torch.Tensor:
        """``L - L_inf`` for any attention maps ``s (..., n, T)`` (rows on the simplex), ``(...)``."""
        return self.from_mixture(torch.einsum("...nt,ntq->...nq", s * self.nonopt, self.dX)).mean(-1)

    def per_input(self, p: torch.Tensor) -> torch.Tensor:
        return self.from_mixture(self.mixture(p))

    def __call__(self, p: torch.Tensor) -> torch.Tensor:
        return self.per_input(p).mean(-1)


def reg_path(risk: ExcessRisk, radii, n_starts: int = 12, iters: int = 400, theta0: float = 0.3) -> np.ndarray:
    """``argmin_{||p|| <= R} L(p)`` on the sphere for every radius: ``(nR, starts, 2)`` points.

    Monotone rotations (angle x1.5 on success, /2 on failure), every radius and start in one batch,
    gradients by float64 autograd on the excess risk.
    """
    radii = torch.as_tensor(np.asarray(radii, float), dtype=torch.float64)
    if radii.ndim != 1 or not bool((radii > 0).all()):
        raise ValueError("radii must be a 1-d array of positive numbers")
    ang = torch.arange(n_starts, dtype=torch.float64) * (2 * np.pi / n_starts)
    w = torch.stack([torch.cos(ang), torch.sin(ang)], -1).expand(len(radii), n_starts, 2).clone()
    R = radii[:, None, None]
    theta = torch.full(w.shape[:-1], theta0, dtype=torch.float64)
    for _ in range(iters):
        q = (R * w).requires_grad_(True)
        val = risk(q)
        (g,) = torch.autograd.grad(val.sum(), q)
        with torch.no_grad():
            cand = sphere_step(w, g, theta)
            ok = risk(R * cand) < val
            w, theta = accept(ok, cand, w, theta)
    return (R * w).detach().numpy()


def att_svm_prime(inst: HeadInstance) -> tuple[np.ndarray, list]:
    """ATT-SVM' by enumeration: for each choice ``o_i in O_i`` an ATT-SVM with the other optimal tokens
    unconstrained; returns the smallest solution and the table ``[(choice, ||p|| or None)]``."""
    table, best = [], None
    for choice in itertools.product(*inst.optimal):
        mask = np.ones(inst.K.shape[:2], bool)
        for i, o in enumerate(inst.optimal):
            mask[i, [t for t in o if t != choice[i]]] = False
        try:
            x = svm.att_svm(inst.K, choice, mask).x
        except svm.InfeasibleSVM:
            table.append((choice, None))
            continue
        table.append((choice, float(np.linalg.norm(x))))
        if best is None or np.linalg.norm(x) < np.linalg.norm(best[1]):
            best = (choice, x)
    if best is None:
        raise svm.InfeasibleSVM("ATT-SVM' is infeasible for every choice of optimal tokens")
    return best[1], table


@dataclass
class NonlinearResult:
    inst: HeadInstance
    radii: np.ndarray
    points: np.ndarray  # (nR, starts, 2)
    best: np.ndarray  # (nR, 2) lowest-risk start per radius
    p_prime: np.ndarray  # ATT-SVM' solution
    choices: list  # [(choice, norm)]
    assumption_d: AssumptionD

    @property
    def corr(self) -> np.ndarray:
        return geometry.correlation(self.best, self.p_prime)


@dataclass
class AssumptionD:
    """The check of Assumption D (as reconstructed in the chapter) on one instance.

    ``q(s) = max_i sum_{t not in O_i} s_it`` is the largest non-optimal mass of an attention map ``s``.
    Assumption D: there are ``c in (0, 1)`` and ``q0 > 0`` such that every pair of attention maps with
    ``q(s) <= q0`` and ``q(s') <= c q(s)`` has ``L(s') < L(s)``.

    Attributes
    ----------
    g : ``(n, T)`` first-order weights ``d(L - L_inf)/d s_it`` at the optimal-only attention (nan on optimal
        tokens): the risk added by mixing in token ``t``. All positive is the certificate below.
    c : the constant ``min g / (2 n max g)`` for which the first-order expansion proves the implication
        for small ``q0``.
    tested : ``[(q0, pairs, violations)]``: random pairs ``(s, s')`` with ``q(s)`` log-uniform in
        ``[1e-8, q0]`` and ``q(s') = c q(s) u``, ``u`` uniform in ``(0, 1]``, any distribution over tokens.
    q0 : the largest tested ``q0`` without a violation (0: none).
    min_excess : smallest ``L(p) - L_inf`` over random ``p`` (a consequence: the limit beats every mixture).
    """

    g: np.ndarray
    c: float
    tested: list
    q0: float
    min_excess: float

    @property
    def holds(self) -> bool:
        """Certificate (all first-order weights positive) and no sampled violation for some ``q0 > 0``."""
        return bool(np.nanmin(self.g) > 0 and self.q0 > 0)


def first_order_weights(risk: ExcessRisk) -> np.ndarray:
    """``(n, T)``: ``g_it = l'(u*_i) Y_i grad h(x*_i)^T (x_it - x*_i)``, the derivative of the risk in ``s_it``
    at the optimal-only attention (by autograd on :meth:`ExcessRisk.from_mixture` at ``delta = 0``); nan on
    optimal tokens. ``n`` times the risk gradient, since ``L`` averages over inputs."""
    delta = torch.zeros(risk.dX.shape[0], risk.dX.shape[-1], dtype=torch.float64, requires_grad=True)
    (G,) = torch.autograd.grad(risk.from_mixture(delta).sum(), delta)  # (n, q)
    g = torch.einsum("nq,ntq->nt", G, risk.dX).numpy()
    return np.where(risk.nonopt.numpy(), g, np.nan)


def _random_attention(nonopt: torch.Tensor, q_in: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Attention maps ``(N, n, T)`` with non-optimal mass ``q_in (N, n)`` spread at random over the non-optimal
    tokens and ``1 - q_in`` at random over the optimal ones."""
    N, (n, T) = q_in.shape[0], nonopt.shape
    w = -torch.log(torch.rand(N, n, T, generator=gen, dtype=torch.float64))  # Dirichlet(1) weights
    non = torch.where(nonopt, w, torch.zeros_like(w))
    opt = torch.where(nonopt, torch.zeros_like(w), w)
    return q_in[..., None] * non / non.sum(-1, keepdim=True) + (1 - q_in[..., None]) * opt / opt.sum(-1, keepdim=True)


def check_assumption_d(
    risk: ExcessRisk, pairs: int = 4000, q0_grid=(1e-3, 1e-2, 0.1, 0.5, 1.0), seed: int = 0
) -> AssumptionD:
    """Assumption D on one instance: the first-order certificate and random pairs for each ``q0`` of the grid."""
    g = first_order_weights(risk)
    n = g.shape[0]
    c = float(np.nanmin(g) / (2 * n * np.nanmax(g))) if np.nanmin(g) > 0 else 0.0
    gen = torch.Generator().manual_seed(seed)
    tested = []
    if c > 0:
        for q0 in q0_grid:
            q = torch.exp(torch.empty(pairs, dtype=torch.float64).uniform_(np.log(1e-8), np.log(q0), generator=gen))
            u = torch.rand(pairs, n, generator=gen, dtype=torch.float64)
            u[torch.arange(pairs), torch.randint(n, (pairs,), generator=gen)] = 1.0  # q(s) = q exactly
            u2 = 1 - torch.rand(pairs, n, generator=gen, dtype=torch.float64)  # in (0, 1]
            s = _random_attention(risk.nonopt, q[:, None] * u, gen)
            s2 = _random_attention(risk.nonopt, c * q[:, None] * u2, gen)
            with torch.no_grad():
                bad = int((risk.from_attention(s2) >= risk.from_attention(s)).sum())
            tested.append((float(q0), pairs, bad))
    ok = [q0 for q0, _, bad in tested if bad == 0]
    q0 = max(ok) if ok and ok[0] == tested[0][0] else 0.0
    gp = torch.Generator().manual_seed(seed)
    p = (
        torch.randn(2000, 2, generator=gp, dtype=torch.float64)
        * torch.rand(2000, 1, generator=gp, dtype=torch.float64)
        * 8
    )
    with torch.no_grad():
        min_excess = float(risk(p).min())
    return AssumptionD(g, c, tested, q0, min_excess)


def run(scale: str | None = None) -> NonlinearResult:
    return _run(scale or config.scale())


@functools.lru_cache(maxsize=None)
def _run(scale: str) -> NonlinearResult:
    inst = make_instance()
    risk = ExcessRisk(inst)
    radii = np.geomspace(
        0.5, config.pick(quick=60.0, paper=200.0, which=scale), config.pick(quick=12, paper=24, which=scale)
    )
    pts = reg_path(risk, radii, iters=config.pick(quick=300, paper=1000, which=scale))
    with torch.no_grad():
        val = risk(torch.as_tensor(pts))
    best = pts[np.arange(len(radii)), val.argmin(1).numpy()]
    p_prime, table = att_svm_prime(inst)
    return NonlinearResult(inst, radii, pts, best, p_prime, table, check_assumption_d(risk))


@claim(
    "A.nonlinear.path",
    chapter=CHAPTER,
    competitor="the linear head's answer: the ATT-SVM of the same choice of optimal tokens with every other "
    "token constrained, one token per input (correlation 0.85 with the ATT-SVM' direction)",
    against=lambda: _path_check(single_token_svm()),
    checks="paper A, Theorem 8 (Appendix D)",
    statement="With a fixed two-layer tanh head and optimal-token sets, the regularization path "
    "argmin_{||p|| <= R} L(p) turns toward the ATT-SVM' direction as R grows.",
    threshold="correlation with the ATT-SVM' direction >= 0.99 at the largest radius (on an instance that "
    "satisfies Assumption D: every first-order weight > 0 and no violation among the sampled pairs)",
)
def _claim_path() -> Measured:
    return _path_check(run().p_prime)


def single_token_svm() -> np.ndarray:
    """The competitor of ``A.nonlinear.path``: ATT-SVM of ATT-SVM''s choice of optimal tokens with all other
    tokens constrained (the one-token-per-input problem of the linear head), ``(2,)``."""
    inst = make_instance()
    p_prime, _ = att_svm_prime(inst)
    for choice in itertools.product(*inst.optimal):
        mask = np.ones(inst.K.shape[:2], bool)
        for i, o in enumerate(inst.optimal):
            mask[i, [t for t in o if t != choice[i]]] = False
        try:
            x = svm.att_svm(inst.K, choice, mask).x
        except svm.InfeasibleSVM:
            continue
        if np.allclose(x, p_prime, atol=1e-6):
            return svm.att_svm(inst.K, choice).x
    raise RuntimeError("ATT-SVM''s choice of optimal tokens was not found again")


def _path_check(ref) -> Measured:
    r = run()
    d = r.assumption_d
    corr = geometry.correlation(r.best, ref)
    return Measured(
        {
            "corr_at_R_max": float(corr[-1]),
            "R_max": float(r.radii[-1]),
            "assumption_d_min_weight": float(np.nanmin(d.g)),
            "assumption_d_c": d.c,
            "assumption_d_q0": d.q0,
            "assumption_d_holds": d.holds,
        },
        bool(corr[-1] >= 0.99 and d.holds),
    )


# ---------------------------------------------------------------- figures
def plot_path(r: NonlinearResult | None = None):
    """The regularization path (best start per radius) in the plane, the keys and the ATT-SVM' ray."""
    import matplotlib.pyplot as plt

    r = r or run()
    fig, ax = plt.subplots(figsize=(5.8, 5.0), layout="constrained")
    cs = colors(len(r.inst.K))
    markers = "os^D"
    opt = ~r.inst.nonopt_mask()
    for i, k in enumerate(r.inst.K):
        ax.scatter(
            k[opt[i], 0], k[opt[i], 1], marker=markers[i % 4], color=cs[i], s=50, label=f"input {i + 1}, optimal"
        )
        ax.scatter(k[~opt[i], 0], k[~opt[i], 1], marker=markers[i % 4], facecolors="none", edgecolors=cs[i], s=50)
    u = r.best / r.radii[:, None] * 2.0
    ax.plot(u[:, 0], u[:, 1], "k.-", lw=1.2, label="$2\\,\\bar p(R)/R$")
    q = r.p_prime / np.linalg.norm(r.p_prime) * 2.2
    ax.plot([0, q[0]], [0, q[1]], "--", color="0.3", label="ATT-SVM' direction")
    ax.set_xlabel("first key coordinate")
    ax.set_ylabel("second key coordinate")
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(loc="upper left")  # the keys and the path lie to the right and below
    return fig


def plot_corr(r: NonlinearResult | None = None):
    """``1 - correlation`` of the path with the ATT-SVM' direction against ``R``."""
    r = r or run()
    return plot_curves(
        r.radii, {"path vs ATT-SVM'": 1 - r.corr}, xlabel="radius r", ylabel="1 - correlation", logx=True, logy=True
    )


FIGURES = {"fig-nonlinear-path": lambda: plot_path(), "fig-nonlinear-corr": lambda: plot_corr()}
