"""The published configurations of paper A as named constructors, and random instances.

In Figs. 1, 2 and 4 the keys are the first two coordinates of each token (``W`` projects onto them) and the
third carries the score (``v = e_3``), so ``p`` moves in the plane.
"""

from __future__ import annotations

__all__ = [
    "PLANE",
    "E3",
    "Instance",
    "FIG1_STARTS",
    "fig1",
    "CE_X",
    "CE_Y",
    "CE_V",
    "counterexample",
    "FIG2_SHIFTS",
    "fig2",
    "fig3",
    "fig4",
    "random_instances",
]

from dataclasses import dataclass, field

import numpy as np
import torch

from mmtoken import validate
from mmtoken.attention.model import AttentionProblem

PLANE = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
"""``W`` of the planar examples: keys are the first two coordinates."""
E3 = np.array([0.0, 0.0, 1.0])


@dataclass
class Instance:
    """A dataset ``(X, Y)`` with a head ``v`` and key map ``W``.

    Attributes
    ----------
    X : ``(n, T, d)``; Y : ``(n,)``; v : ``(d,)``; W : ``(d, m)``.
    starts : ``(S, m)`` published starting points of ``p``.
    name : a label for plots.
    """

    X: np.ndarray
    Y: np.ndarray
    v: np.ndarray
    W: np.ndarray
    starts: np.ndarray
    name: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def K(self) -> np.ndarray:
        """Keys ``(n, T, m)``."""
        return self.X @ self.W

    @property
    def gamma(self) -> np.ndarray:
        """Scores ``(n, T)``."""
        return self.Y[:, None] * (self.X @ self.v)

    def problem(self) -> AttentionProblem:
        return AttentionProblem(self.K, self.gamma)

    def gmm(self):
        """``svm.att_svm(K, geometry.optimal_tokens(gamma))``: the GMM direction is its ``x (m,)``; raises
        :class:`mmtoken.attention.svm.InfeasibleSVM` when the optimal tokens cannot be separated."""
        from mmtoken.attention import geometry, svm  # the solver (cvxpy) is imported when a GMM is asked for

        return svm.att_svm(self.K, geometry.optimal_tokens(self.gamma))


FIG1_STARTS = np.array([[0.0, y] for y in (1.0, 0.5, 0.0, -0.5, -1.0, -1.5)])


def fig1(case: str = "global") -> Instance:
    """Fig. 1: one input, three tokens; ``case`` = ``"global"`` or ``"local"``: tokens ``(-0.1, 1)`` score 1,
    ``(1, 0)`` score 0.9, ``(0, 0)`` score 0.9 (global case) or 0 (local case)."""
    if case not in ("global", "local"):
        raise ValueError(f"case must be 'global' or 'local', got {case!r}")
    xy = np.array([[[-0.1, 1.0], [1.0, 0.0], [0.0, 0.0]]])
    s = np.array([[1.0, 0.9, 0.9 if case == "global" else 0.0]])
    X = np.concatenate([xy, s[..., None]], axis=-1)  # the third coordinate carries the score
    return Instance(X, np.array([1.0]), E3, PLANE, FIG1_STARTS.copy(), f"fig1-{case}")


CE_X = np.array([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [2.0, 0.0]]])
"""Tokens ``(2, 2, 2)`` of the book's ``n = T = d = 2`` counterexample (chapter 3; Part III's W-model reuses them):
input 1 ``x_11 = (1, 0)``, ``x_12 = (0, 0)``; input 2 ``x_21 = (0, 1)``, ``x_22 = (2, 0)``."""
CE_Y = np.array([1.0, 1.0])
"""Labels ``(2,)`` of the counterexample."""
CE_V = np.array([1.0, 3.0])
"""Head ``(2,)`` of the counterexample: scores ``gamma_1 = (1, 0)``, ``gamma_2 = (3, 2)``."""


def counterexample() -> Instance:
    """The book's ``n = T = d = 2`` instance on which two starts reach two max-margin directions (chapter 3).

    Keys are the tokens :data:`CE_X` (``W = I``), labels :data:`CE_Y`, head :data:`CE_V`; starts ``(16, 2)``: the
    unit circle every 22.5 degrees from ``(1, 0)``.
    """
    ang = np.arange(16) * (2 * np.pi / 16)
    starts = np.stack([np.cos(ang), np.sin(ang)], -1).round(15)
    return Instance(CE_X.copy(), CE_Y.copy(), CE_V.copy(), np.eye(2), starts, "counterexample")


FIG2_SHIFTS = np.array([[1.0, 0.0, 0.0], [-1.0, 1.0, 0.0], [-0.5, -0.5, 0.0]])
"""Fig. 2 centres: token 0, tokens 1-3 and tokens 4-6 (the third coordinate is overwritten by the score)."""


def fig2(seed: int = 0) -> Instance:
    """Fig. 2: n = 3 inputs of T = 7 tokens, generated as the public code generates them.

    ``X = 0.2 * torch.randn((3, 7, 3), generator=g)`` (float32, ``g`` seeded with ``seed``), shifted by
    :data:`FIG2_SHIFTS` in float32 as there, then the third coordinate overwritten by the score (1 for token 0,
    0.5 for the rest); ``Y = 1``. Starts ``p0 = (x, 0)`` for ``x in (1, 0.5, 0, -0.5, -1, -1.5)``.
    """
    seed = validate.count(seed, "seed")
    g = torch.Generator().manual_seed(seed)
    X = 0.2 * torch.randn((3, 7, 3), generator=g)
    shift = torch.as_tensor(FIG2_SHIFTS, dtype=X.dtype)
    X[:, 0] += shift[0]
    X[:, 1:4] += shift[1]
    X[:, 4:7] += shift[2]
    X[:, 0, 2] = 1.0
    X[:, 1:, 2] = 0.5
    starts = np.array([[x, 0.0] for x in (1.0, 0.5, 0.0, -0.5, -1.0, -1.5)])
    return Instance(X.double().numpy(), np.ones(3), E3, PLANE, starts, "fig2", {"seed": seed})


def fig3(case: str = "tight") -> Instance:
    """Fig. 3: joint training, n = 3, T = 2, ``W = I``.

    ``X_i = [(0, 0), x_i]`` with ``x = (1, 1), (1, -1)`` and ``(0.5, 1)`` (tight) or ``(0.5, 1.5)`` (loose);
    ``Y = (1, -1, 1)``; starts ``p0 = (0, -1)``, ``v0 = (-1, 0)`` (in ``extra["v0"]``).
    """
    if case not in ("tight", "loose"):
        raise ValueError(f"case must be 'tight' or 'loose', got {case!r}")
    third = (0.5, 1.0) if case == "tight" else (0.5, 1.5)
    X = np.array([[[0.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, -1.0]], [[0.0, 0.0], list(third)]])
    Y, v0 = np.array([1.0, -1.0, 1.0]), np.array([-1.0, 0.0])
    return Instance(X, Y, v0, np.eye(2), np.array([[0.0, -1.0]]), f"fig3-{case}", {"v0": v0.copy()})


def fig4(C: float) -> Instance:
    """Fig. 4: n = 2, T = 2, d = 3: ``X_1 = [(0,0,0), (1,1,C)]``, ``X_2 = [(0,0,0), (1,-1,1)]``, ``Y = (1, 1)``, ``p0 = 0``."""
    C = validate.real_number(C, "C")
    X = np.array([[[0.0, 0.0, 0.0], [1.0, 1.0, C]], [[0.0, 0.0, 0.0], [1.0, -1.0, 1.0]]])
    return Instance(X, np.ones(2), E3, PLANE, np.zeros((1, 2)), f"fig4-C{C:g}")


def random_instances(count: int, n: int, T: int, d: int, seed: int = 0) -> dict[str, np.ndarray]:
    """``count`` random instances, batched: keys ``K (count, n, T, d)`` i.i.d. ``N(0, I/d)`` and
    scores ``gamma (count, n, T)`` i.i.d. ``N(0, 1)``.
    """
    count, n, d = (validate.count(x, name, minimum=1) for x, name in ((count, "count"), (n, "n"), (d, "d")))
    T = validate.count(T, "T", minimum=2)
    rng = np.random.default_rng(validate.count(seed, "seed"))
    return {"K": rng.normal(size=(count, n, T, d)) / np.sqrt(d), "gamma": rng.normal(size=(count, n, T))}
