"""Bad input, table-driven, for every public entry point (issue 14).

Each row is one thing a reader might type: a wrong shape, dtype, scale, step size,
count, label, selection, mask, a degenerate problem, a bad environment variable or
command line. Each must end in a correct answer (checked) or a clear error: a
``ValueError`` subclass naming the argument (``InfeasibleSVM``, ``ConfigError`` are
such subclasses), a ``DatasetError``/``DatasetMissing`` with instructions for the
loaders, a one-line message and exit status for the command lines. Never a raw
traceback from numpy, scipy, torch or the compiled kernel, a NaN table, a process abort.

``python tests/test_bad_input.py`` prints the count of cases.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from mmtoken import config
from mmtoken.attention import geometry, grad, svm, train
from mmtoken.attention.losses import get_loss
from mmtoken.attention.model import AttentionProblem, as_tensor
from mmtoken.chapters import app_your_instance as explore
from mmtoken.datasets import cifar10, cli, corpus, fashion_mnist, images, parsers, text
from mmtoken.datasets.download import DatasetError, DatasetMissing

# ----------------------------------------------------------------------------- one small well-formed instance
_rng = np.random.default_rng(0)
X = _rng.normal(size=(3, 4, 2))
Y = np.array([1.0, -1.0, 1.0])
V = np.array([1.0, 0.3])
K = X
GAMMA = Y[:, None] * (X @ V)
ALPHA = (K @ np.array([1.0, 0.3])).argmax(-1)  # the selection of a direction: feasible
P_MM = svm.att_svm(K, ALPHA).x
PROBLEM = AttentionProblem(K, GAMMA)
STARTS = np.array([[1.0, 0.0], [0.0, 1.0]])


@dataclass
class Err:
    """Raises ``exc`` with ``match`` (a substring naming the argument) in its message."""

    match: str
    exc: Any = ValueError


@dataclass
class Ok:
    """Returns; ``check(result)`` must hold."""

    check: Callable[[Any], bool] = lambda r: True


@dataclass
class Exit:
    """A command line: exit status ``code`` and ``match`` in stderr, no traceback."""

    code: int
    match: str


CASES: list[tuple[str, Callable, Any]] = []


def case(name: str, expect):
    def deco(fn):
        CASES.append((name, fn, expect))
        return fn

    return deco


def add(name: str, fn: Callable, expect) -> None:
    CASES.append((name, fn, expect))


def _close(a, b, rtol=2e-7):
    return np.allclose(a, b, rtol=rtol, atol=rtol * np.linalg.norm(b))


# ----------------------------------------------------------------------------- svm.att_svm
for c in (1e-300, 1e-150, 1e-8, 1e-5, 1e5, 1e8, 1e150, 1e300):
    add(f"att_svm K*{c:g}", lambda ctx, c=c: svm.att_svm(K * c, ALPHA), Ok(lambda r, c=c: _close(r.x * c, P_MM)))
add("att_svm K nan", lambda ctx: svm.att_svm(np.where(K > 1, np.nan, K), ALPHA), Err("K contains NaN"))
add("att_svm K inf", lambda ctx: svm.att_svm(np.where(K > 1, np.inf, K), ALPHA), Err("K contains NaN"))
add("att_svm K complex", lambda ctx: svm.att_svm(K + 0j, ALPHA), Err("K must be real"))
add("att_svm K complex tensor", lambda ctx: svm.att_svm(torch.tensor(K + 1j), ALPHA), Err("K must be real"))
add("att_svm K string", lambda ctx: svm.att_svm("keys", ALPHA), Err("K must be numeric"))
add("att_svm K None", lambda ctx: svm.att_svm(None, ALPHA), Err("K must be numeric"))
add("att_svm K ragged", lambda ctx: svm.att_svm([[[1, 2]], [[1]]], [0, 0]), Err("K must be"))
add("att_svm K 2-d", lambda ctx: svm.att_svm(K[0], ALPHA), Err("K must have 3"))
add("att_svm K 4-d", lambda ctx: svm.att_svm(K[None], ALPHA), Err("K must have 3"))
add("att_svm T=1", lambda ctx: svm.att_svm(K[:, :1], [0, 0, 0]), Err("T = 1"))
add("att_svm n=0", lambda ctx: svm.att_svm(np.zeros((0, 3, 2)), []), Err("n >= 1"))
add("att_svm m=0", lambda ctx: svm.att_svm(np.zeros((2, 3, 0)), [0, 0]), Err("m >= 1"))
add("att_svm K tensor", lambda ctx: svm.att_svm(torch.tensor(K), ALPHA), Ok(lambda r: _close(r.x, P_MM)))
add("att_svm K float32", lambda ctx: svm.att_svm(K.astype(np.float32), ALPHA), Ok(lambda r: _close(r.x, P_MM, 1e-5)))
add("att_svm K int", lambda ctx: svm.att_svm(np.array([[[2, 0], [0, 1]]]), [0]), Ok(lambda r: _close(r.x, [0.4, -0.2])))
add("att_svm identical tokens", lambda ctx: svm.att_svm(np.ones((1, 2, 2)), [0]), Err("zero", svm.InfeasibleSVM))
add(
    "att_svm midpoint selected",
    lambda ctx: svm.att_svm([[[1.0, 0], [-1.0, 0], [0, 0]]], [2]),
    Err("input(s) [0]", svm.InfeasibleSVM),
)
add("att_svm alpha short", lambda ctx: svm.att_svm(K, ALPHA[:2]), Err("alpha must have shape"))
add("att_svm alpha long", lambda ctx: svm.att_svm(K, [0, 0, 0, 0]), Err("alpha must have shape"))
add("att_svm alpha -1", lambda ctx: svm.att_svm(K, [-1, 0, 0]), Err("alpha must index"))
add("att_svm alpha T", lambda ctx: svm.att_svm(K, [4, 0, 0]), Err("alpha must index"))
add("att_svm alpha fractional", lambda ctx: svm.att_svm(K, [0.5, 1, 1]), Err("alpha must hold integer"))
add("att_svm alpha nan", lambda ctx: svm.att_svm(K, [np.nan, 1, 1]), Err("alpha must hold integer"))
add("att_svm alpha string", lambda ctx: svm.att_svm(K, "012"), Err("alpha must be numeric"))
add("att_svm alpha bool", lambda ctx: svm.att_svm(K, [True, False, True]), Err("alpha must hold token indices"))
add("att_svm alpha 2-d", lambda ctx: svm.att_svm(K, [ALPHA]), Err("alpha must have shape"))
add("att_svm alpha complex", lambda ctx: svm.att_svm(K, ALPHA + 0j), Err("alpha must be real"))
add("att_svm alpha integral float", lambda ctx: svm.att_svm(K, ALPHA.astype(float)), Ok(lambda r: _close(r.x, P_MM)))
add("att_svm alpha tensor", lambda ctx: svm.att_svm(K, torch.tensor(ALPHA)), Ok(lambda r: _close(r.x, P_MM)))
_hide = np.ones((3, 4), bool)
_hide[0, ALPHA[0]] = False
add("att_svm mask hides selected", lambda ctx: svm.att_svm(K, ALPHA, _hide), Err("mask hides the selected"))
add("att_svm mask shape", lambda ctx: svm.att_svm(K, ALPHA, np.ones((3, 3), bool)), Err("mask must have shape"))
add("att_svm mask values 2", lambda ctx: svm.att_svm(K, ALPHA, np.full((3, 4), 2)), Err("mask must be boolean"))
add("att_svm mask values 0.5", lambda ctx: svm.att_svm(K, ALPHA, np.full((3, 4), 0.5)), Err("mask must be boolean"))
add("att_svm mask complex", lambda ctx: svm.att_svm(K, ALPHA, np.ones((3, 4)) + 0j), Err("mask must be real"))
_only_sel = np.zeros((3, 4), bool)
_only_sel[np.arange(3), ALPHA] = True
add("att_svm mask leaves nothing", lambda ctx: svm.att_svm(K, ALPHA, _only_sel), Err("no constraint"))
add("att_svm mask all real", lambda ctx: svm.att_svm(K, ALPHA, np.ones((3, 4), int)), Ok(lambda r: _close(r.x, P_MM)))
add("att_svm margin finite", lambda ctx: svm.att_svm(K * 1e300, ALPHA).margin, Ok(lambda r: math.isfinite(r) and r > 0))

# ----------------------------------------------------------------------------- other SVMs
R_ONE = svm.relaxed_att_svm(K, ALPHA, [0]).x
for c in (1e-6, 1e6, 1e200):
    add(
        f"relaxed_att_svm K*{c:g}",
        lambda ctx, c=c: svm.relaxed_att_svm(K * c, ALPHA, [0]),
        Ok(lambda r, c=c: _close(r.x * c, R_ONE)),
    )
add("relaxed support empty", lambda ctx: svm.relaxed_att_svm(K, ALPHA, []), Err("support is empty"))
add("relaxed support out of range", lambda ctx: svm.relaxed_att_svm(K, ALPHA, [5]), Err("support must index"))
add("relaxed support fractional", lambda ctx: svm.relaxed_att_svm(K, ALPHA, [0.5]), Err("support must hold integer"))
add("relaxed support None", lambda ctx: svm.relaxed_att_svm(K, ALPHA, None), Err("support must be an iterable"))
add("relaxed support string", lambda ctx: svm.relaxed_att_svm(K, ALPHA, "01"), Err("support must be numeric"))
add("relaxed K complex", lambda ctx: svm.relaxed_att_svm(K * 1j, ALPHA, [0]), Err("K must be real"))
H_ONE = svm.head_svm(X, Y, ALPHA).x
for c in (1e-6, 1e6, 1e200):
    add(f"head_svm X*{c:g}", lambda ctx, c=c: svm.head_svm(X * c, Y, ALPHA), Ok(lambda r, c=c: _close(r.x * c, H_ONE)))
add("head_svm Y short", lambda ctx: svm.head_svm(X, Y[:2], ALPHA), Err("Y must be"))
add("head_svm Y 0/1", lambda ctx: svm.head_svm(X, [1, 0, 1], ALPHA), Err("Y must be"))
add("head_svm Y nan", lambda ctx: svm.head_svm(X, [1, np.nan, 1], ALPHA), Err("Y contains NaN"))
add(
    "head_svm one token",
    lambda ctx: svm.head_svm(X[np.arange(3), ALPHA][:, None], Y, [0, 0, 0]),
    Ok(lambda r: _close(r.x, H_ONE)),
)
add("head_svm zero token", lambda ctx: svm.head_svm(np.zeros((1, 2, 2)), [1], [0]), Err("zero", svm.InfeasibleSVM))
add("head_svm alpha fractional", lambda ctx: svm.head_svm(X, Y, [0.2, 0, 0]), Err("alpha must hold integer"))
_HEAD = svm.head_svm(X, Y, ALPHA)
add("head_support tol 0", lambda ctx: svm.head_support(_HEAD, 0), Err("tol must be"))
add("head_support tol nan", lambda ctx: svm.head_support(_HEAD, np.nan), Err("tol must be"))
add("head_support tol -1", lambda ctx: svm.head_support(_HEAD, -1), Err("tol must be"))
add(
    "head_support scaled",
    lambda ctx: svm.head_support(svm.head_svm(X * 1e8, Y, ALPHA)),
    Ok(lambda r: r == svm.head_support(_HEAD)),
)
W_ONE = svm.w_svm(X, ALPHA, [1.0, 2.0]).x
add("w_svm p zero", lambda ctx: svm.w_svm(X, ALPHA, [0.0, 0.0]), Err("p must be a non-zero"))
add("w_svm p 2-d", lambda ctx: svm.w_svm(X, ALPHA, [[1.0, 2.0]]), Err("p must have 1"))
add("w_svm p nan", lambda ctx: svm.w_svm(X, ALPHA, [np.nan, 1.0]), Err("p contains NaN"))
add("w_svm p complex", lambda ctx: svm.w_svm(X, ALPHA, [1j, 1.0]), Err("p must be real"))
add("w_svm X*1e7", lambda ctx: svm.w_svm(X * 1e7, ALPHA, [1.0, 2.0]), Ok(lambda r: _close(r.x * 1e7, W_ONE)))
add("w_svm p*1e-7", lambda ctx: svm.w_svm(X, ALPHA, [1e-7, 2e-7]), Ok(lambda r: _close(r.x * 1e-7, W_ONE)))
_D = K[np.arange(3), ALPHA][:, None, :] - K
_D = np.concatenate([_D[i, [t for t in range(4) if t != ALPHA[i]]] for i in range(3)])
add("min_norm_nnls empty", lambda ctx: svm.min_norm_nnls(np.zeros((0, 3)), np.zeros(0)), Ok(lambda r: r.shape == (3,)))
add(
    "min_norm_nnls no binding row",
    lambda ctx: svm.min_norm_nnls(np.ones((2, 2)), [-1, 0]),
    Ok(lambda r: np.all(r == 0)),
)
add("min_norm_nnls D 1-d", lambda ctx: svm.min_norm_nnls(np.ones(3), np.ones(3)), Err("D must have 2"))
add("min_norm_nnls b long", lambda ctx: svm.min_norm_nnls(np.ones((2, 2)), np.ones(3)), Err("b must have shape"))
add("min_norm_nnls no column", lambda ctx: svm.min_norm_nnls(np.zeros((2, 0)), np.ones(2)), Err("D must have at least"))
add("min_norm_nnls nan", lambda ctx: svm.min_norm_nnls([[np.nan, 1.0]], [1.0]), Err("D contains NaN"))
add("min_norm_nnls complex b", lambda ctx: svm.min_norm_nnls([[1.0, 1.0]], [1j]), Err("b must be real"))
add("min_norm_nnls zero row", lambda ctx: svm.min_norm_nnls([[0.0, 0.0]], [1.0]), Err("infeasible", svm.InfeasibleSVM))
add(
    "min_norm_nnls scaled 1e250",
    lambda ctx: svm.min_norm_nnls(_D * 1e250, np.ones(len(_D))),
    Ok(lambda r: _close(r * 1e250, P_MM, 1e-7)),
)
add(
    "min_norm_nnls scaled 1e-250",
    lambda ctx: svm.min_norm_nnls(_D * 1e-250, np.ones(len(_D))),
    Ok(lambda r: _close(r * 1e-250, P_MM, 1e-7)),
)

# ----------------------------------------------------------------------------- geometry
add("correlation mismatch", lambda ctx: geometry.correlation([1.0, 2.0], [1.0, 2.0, 3.0]), Err("do not broadcast"))
add("correlation nan", lambda ctx: geometry.correlation([np.nan, 1.0], [1.0, 0.0]), Err("a contains NaN"))
add("correlation complex", lambda ctx: geometry.correlation([1j, 1.0], [1.0, 0.0]), Err("a must be real"))
add("correlation string", lambda ctx: geometry.correlation("ab", [1.0, 0.0]), Err("a must be numeric"))
add("correlation zero vector", lambda ctx: geometry.correlation([0.0, 0.0], [1.0, 0.0]), Ok(lambda r: np.isnan(r)))
add("correlation huge", lambda ctx: geometry.correlation([1e300, 1e300], [1.0, 1.0]), Ok(lambda r: abs(r - 1) < 1e-12))
add("correlation tiny", lambda ctx: geometry.correlation([1e-300, 0.0], [1.0, 0.0]), Ok(lambda r: abs(r - 1) < 1e-12))
add("correlation scalar", lambda ctx: geometry.correlation(1.0, 1.0), Err("a must have at least 1"))
add("optimal_tokens empty", lambda ctx: geometry.optimal_tokens(np.zeros((2, 0))), Err("gamma has no token"))
add("optimal_tokens nan", lambda ctx: geometry.optimal_tokens([[np.nan, 1.0]]), Err("gamma contains NaN"))
add("selection mismatch", lambda ctx: geometry.selection(K, [1.0, 2.0, 3.0]), Err("share the last dimension"))
add("selection K 2-d", lambda ctx: geometry.selection(K[0], V), Err("K must have at least 3"))
add("selection p nan", lambda ctx: geometry.selection(K, [np.nan, 1.0]), Err("p contains NaN"))
add("margins alpha fractional", lambda ctx: geometry.margins(K, [0.5, 0, 0], P_MM), Err("alpha must hold integer"))
add("margins p wrong", lambda ctx: geometry.margins(K, ALPHA, [1.0, 2.0, 3.0]), Err("p must have shape"))
add("margins alpha short", lambda ctx: geometry.margins(K, [0], P_MM), Err("alpha must have shape"))
add("svm_neighbours tol -1", lambda ctx: geometry.svm_neighbours(K, ALPHA, P_MM, -1), Err("tol must be"))
add("svm_neighbours tol nan", lambda ctx: geometry.svm_neighbours(K, ALPHA, P_MM, np.nan), Err("tol must be"))
add("classify gamma shape", lambda ctx: geometry.classify(K, GAMMA[:, :2], ALPHA), Err("gamma must have shape"))
add("classify alpha fractional", lambda ctx: geometry.classify(K, GAMMA, [0.5, 0, 0]), Err("alpha must hold integer"))
add("classify alpha range", lambda ctx: geometry.classify(K, GAMMA, [9, 0, 0]), Err("alpha must index"))
add("classify K complex", lambda ctx: geometry.classify(K * 1j, GAMMA, ALPHA), Err("K must be real"))
add("classify gamma nan", lambda ctx: geometry.classify(K, GAMMA * np.nan, ALPHA), Err("gamma contains NaN"))
add("classify tol 0", lambda ctx: geometry.classify(K, GAMMA, ALPHA, tol=0), Err("tol must be"))
for c in (1e-5, 1e-150, 1e5, 1e150, 1e300):
    add(
        f"classify K*{c:g} feasible",
        lambda ctx, c=c: geometry.classify(K * c, GAMMA, ALPHA),
        Ok(lambda r: r.feasible and r.neighbours == geometry.classify(K, GAMMA, ALPHA).neighbours),
    )
add(
    "enumerate too many",
    lambda ctx: geometry.enumerate_selections(np.zeros((9, 3, 2)), np.zeros((9, 3))),
    Err("too many"),
)
add("enumerate gamma shape", lambda ctx: geometry.enumerate_selections(K, GAMMA.T), Err("gamma must have shape"))
add(
    "enumerate scaled",
    lambda ctx: geometry.enumerate_selections(K[:2] * 1e6, GAMMA[:2]),
    Ok(lambda r: [x.feasible for x in r] == [x.feasible for x in geometry.enumerate_selections(K[:2], GAMMA[:2])]),
)
add("in_cone mu 0", lambda ctx: geometry.in_cone(STARTS, V, 0, 1.0), Err("mu must be"))
add("in_cone mu 3", lambda ctx: geometry.in_cone(STARTS, V, 3, 1.0), Err("mu must be at most"))
add("in_cone mu nan", lambda ctx: geometry.in_cone(STARTS, V, np.nan, 1.0), Err("mu must be"))
add("in_cone R -1", lambda ctx: geometry.in_cone(STARTS, V, 0.1, -1.0), Err("R must be"))
add("in_cone q zero", lambda ctx: geometry.in_cone(STARTS, [0.0, 0.0], 0.1, 1.0), Err("q must be a non-zero"))
add("in_cone R 0", lambda ctx: geometry.in_cone(STARTS, V, 0.1, 0), Ok(lambda r: r.shape == (2,)))

# ----------------------------------------------------------------------------- train
for lr in (0, -0.1, np.nan, np.inf, "0.1", True, 1j, None):
    add(f"train_p lr={lr!r}", lambda ctx, lr=lr: train.train_p(PROBLEM, STARTS, steps=3, lr=lr), Err("lr must be"))
for steps in (-1, 2.5, "10", np.nan, None, True):
    add(f"train_p steps={steps!r}", lambda ctx, s=steps: train.train_p(PROBLEM, STARTS, steps=s), Err("steps must be"))
for every in (0, -1, 1.5, np.nan, "2"):
    add(
        f"train_p record_every={every!r}",
        lambda ctx, e=every: train.train_p(PROBLEM, STARTS, steps=3, record_every=e),
        Err("record_every must be"),
    )
add(
    "train_p 1e9 steps, every step recorded",
    lambda ctx: train.train_p(PROBLEM, STARTS, steps=10**9, record_every=1),
    Err("record_every"),
)
add("train_p p0 empty", lambda ctx: train.train_p(PROBLEM, np.zeros((0, 2)), steps=3), Err("p0 holds no start"))
add("train_p p0 dim", lambda ctx: train.train_p(PROBLEM, np.zeros((2, 3)), steps=3), Err("p0 must end"))
add("train_p p0 nan", lambda ctx: train.train_p(PROBLEM, [[np.nan, 0.0]], steps=3), Err("p0 contains NaN"))
add("train_p p0 complex", lambda ctx: train.train_p(PROBLEM, [[1j, 0.0]], steps=3), Err("p0 must be real"))
add("train_p p0 string", lambda ctx: train.train_p(PROBLEM, "start", steps=3), Err("p0 must be numeric"))
add("train_p p0 scalar", lambda ctx: train.train_p(PROBLEM, 1.0, steps=3), Err("p0 must end"))
add(
    "train_p p0 batch",
    lambda ctx: train.train_p(AttentionProblem(np.stack([K, K]), np.stack([GAMMA, GAMMA])), np.zeros((3, 2)), steps=3),
    Err("p0"),
)
add("train_p method", lambda ctx: train.train_p(PROBLEM, STARTS, steps=3, method="adam"), Err("method must be"))
add("train_p loss", lambda ctx: train.train_p(PROBLEM, STARTS, steps=3, loss="hinge"), Err("unknown loss"))
add("train_p loss None", lambda ctx: train.train_p(PROBLEM, STARTS, steps=3, loss=None), Err("loss must be"))
add("train_p loss list", lambda ctx: train.train_p(PROBLEM, STARTS, steps=3, loss=["logistic"]), Err("loss must be"))
add("train_p problem tuple", lambda ctx: train.train_p((K, GAMMA), STARTS, steps=3), Err("problem must be"))
add(
    "train_p progress str", lambda ctx: train.train_p(PROBLEM, STARTS, steps=3, progress="yes"), Err("progress must be")
)
add("train_p steps 0", lambda ctx: train.train_p(PROBLEM, STARTS, steps=0), Ok(lambda h: h.steps.tolist() == [0]))
add(
    "train_p steps 1e2",
    lambda ctx: train.train_p(PROBLEM, STARTS, steps=1e2, record_every=50),
    Ok(lambda h: h.steps.tolist() == [0, 50, 100]),
)
add(
    "train_p huge lr",
    lambda ctx: train.train_p(PROBLEM, STARTS, steps=5, lr=1e300),
    Ok(lambda h: bool(torch.isfinite(h.p).all())),
)
from mmtoken.attention import joint  # noqa: E402

F3 = dict(
    X=np.array(
        [
            [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.5]],
            [[0.5, 1.0], [1.0, -1.0], [0.0, 0.0]],
            [[-1.0, 0.0], [0.2, 0.2], [1.0, 1.0]],
        ]
    ),
    Y=np.array([1.0, -1.0, 1.0]),
)
J = dict(v0=np.array([0.1, -0.2]), p0=np.array([0.0, 0.1]), steps=5)
add(
    "train_joint ok",
    lambda ctx: joint.train_joint(F3["X"], F3["Y"], **J),
    Ok(lambda h: h.v.shape == (6, 2) and bool(torch.isfinite(h.p).all())),
)
for y, m in (
    ([1, 0, 1], "labels Y"),
    ([1, -1], "Y must have shape"),
    ([1, -1, 1, 1], "Y must have shape"),
    ([1, np.nan, 1], "Y contains NaN"),
    ([[1, -1, 1]], "Y must have shape"),
    ("+-+", "Y must be numeric"),
    ([2, -1, 1], "labels Y"),
):
    add(f"train_joint Y={y!r}", lambda ctx, y=y: joint.train_joint(F3["X"], y, **J), Err(m))
for lr in (0, -1, np.nan, np.inf):
    add(
        f"train_joint lr_v={lr}",
        lambda ctx, lr=lr: joint.train_joint(F3["X"], F3["Y"], lr_v=lr, **J),
        Err("lr_v must be"),
    )
    add(f"train_joint lr={lr}", lambda ctx, lr=lr: joint.train_joint(F3["X"], F3["Y"], lr=lr, **J), Err("lr must be"))
add(
    "train_joint v0 dim",
    lambda ctx: joint.train_joint(F3["X"], F3["Y"], [1.0, 2.0, 3.0], [0.0, 0.0], steps=3),
    Err("v0 must end"),
)
add("train_joint p0 dim", lambda ctx: joint.train_joint(F3["X"], F3["Y"], [1.0, 2.0], [0.0], steps=3), Err("p0 in m"))
add("train_joint X 2-d", lambda ctx: joint.train_joint(F3["X"][0], F3["Y"], **J), Err("X must have shape"))
add("train_joint T=1", lambda ctx: joint.train_joint(F3["X"][:, :1], F3["Y"], **J), Err("T = 1"))
add("train_joint W shape", lambda ctx: joint.train_joint(F3["X"], F3["Y"], W=np.eye(3), **J), Err("W must have shape"))
add(
    "train_joint steps -1",
    lambda ctx: joint.train_joint(F3["X"], F3["Y"], [0.1, 0.1], [0.0, 0.0], steps=-1),
    Err("steps must be"),
)
add(
    "train_joint record_every 0",
    lambda ctx: joint.train_joint(F3["X"], F3["Y"], record_every=0, **J),
    Err("record_every must be"),
)
add(
    "train_joint starts mismatch",
    lambda ctx: joint.train_joint(F3["X"], F3["Y"], np.zeros((2, 2)), np.zeros((3, 2)), steps=3),
    Err("do not broadcast"),
)
for th in (0, -0.3, np.nan, np.inf, 4.0, "0.3"):
    add(
        f"reg_path theta0={th!r}",
        lambda ctx, th=th: train.regularization_path(PROBLEM, [1.0], STARTS, iters=2, theta0=th),
        Err("theta0 must be"),
    )
for radii in ([], [0.0], [-1.0], [np.nan], [[1.0]], "1"):
    add(
        f"reg_path radii={radii!r}",
        lambda ctx, r=radii: train.regularization_path(PROBLEM, r, STARTS, iters=2),
        Err("radii"),
    )
for w0, m in (
    (np.zeros((0, 2)), "w0 must have shape"),
    (np.zeros((1, 2)), "w0 rows [0] are zero"),
    (np.ones((1, 3)), "w0 must have shape"),
    (np.ones(2), "w0 must have shape"),
    ([[np.nan, 1.0]], "w0 contains NaN"),
):
    add(f"reg_path w0 {np.shape(w0)}", lambda ctx, w=w0: train.regularization_path(PROBLEM, [1.0], w, iters=2), Err(m))
for it in (0, -1, 2.5):
    add(
        f"reg_path iters={it}",
        lambda ctx, it=it: train.regularization_path(PROBLEM, [1.0], STARTS, iters=it),
        Err("iters must be"),
    )
add(
    "reg_path ok",
    lambda ctx: train.regularization_path(PROBLEM, [1.0, 1e3], STARTS, iters=3),
    Ok(lambda r: r.shape == (2, 2, 2) and bool(torch.isfinite(r).all())),
)
add("best_of_starts wrong m", lambda ctx: train.best_of_starts(PROBLEM, torch.zeros(2, 2, 3)), Err("points must have"))
add("best_of_starts 2-d", lambda ctx: train.best_of_starts(PROBLEM, torch.zeros(2, 2)), Err("points must have"))
add(
    "best_of_starts nan",
    lambda ctx: train.best_of_starts(PROBLEM, torch.full((1, 2, 2), np.nan)),
    Err("points contains"),
)

# ----------------------------------------------------------------------------- analyze (app_your_instance)
AN = dict(steps=20)
for n in (0, -1, 2.5, "3"):
    add(f"analyze n_starts={n!r}", lambda ctx, n=n: explore.analyze(X, Y, V, n_starts=n, **AN), Err("n_starts must be"))
for s in (-1, 2.5, "10"):
    add(f"analyze steps={s!r}", lambda ctx, s=s: explore.analyze(X, Y, V, steps=s), Err("steps must be"))
for lr in (0, -1, np.nan, np.inf):
    add(f"analyze lr={lr}", lambda ctx, lr=lr: explore.analyze(X, Y, V, lr=lr, **AN), Err("lr must be"))
add(
    "analyze starts empty", lambda ctx: explore.analyze(X, Y, V, starts=np.zeros((0, 2)), **AN), Err("starts must have")
)
add("analyze starts dim", lambda ctx: explore.analyze(X, Y, V, starts=np.zeros((2, 3)), **AN), Err("starts must have"))
add("analyze starts nan", lambda ctx: explore.analyze(X, Y, V, starts=[[np.nan, 1]], **AN), Err("starts contains"))
add("analyze starts complex", lambda ctx: explore.analyze(X, Y, V, starts=[[1j, 1]], **AN), Err("starts must be real"))
add("analyze Y 0/1", lambda ctx: explore.analyze(X, [1, 0, 1], V, **AN), Err("labels Y"))
add("analyze Y short", lambda ctx: explore.analyze(X, [1, -1], V, **AN), Err("Y has 2 labels"))
add("analyze X 2-d", lambda ctx: explore.analyze(X[0], Y, V, **AN), Err("X must have shape"))
add("analyze X complex", lambda ctx: explore.analyze(X * 1j, Y, V, **AN), Err("X must be real"))
add("analyze v dim", lambda ctx: explore.analyze(X, Y, [1.0, 2.0, 3.0], **AN), Err("v has 3"))
add("analyze W shape", lambda ctx: explore.analyze(X, Y, V, W=np.eye(3), **AN), Err("W has 3 rows"))
add("analyze loss", lambda ctx: explore.analyze(X, Y, V, loss="hinge", **AN), Err("unknown loss"))
add("analyze record_every 0", lambda ctx: explore.analyze(X, Y, V, record_every=0, **AN), Err("record_every must be"))
add("analyze seed -1", lambda ctx: explore.analyze(X, Y, V, seed=-1, **AN), Err("seed must be"))
add("analyze T=1", lambda ctx: explore.analyze(X[:, :1], Y, V, **AN), Err("two tokens"))
for c in (1e-5, 1e5):
    add(
        f"analyze X*{c:g}",
        lambda ctx, c=c: explore.analyze(X * c, Y, V / c, steps=200, lr=0.1 / c),
        Ok(lambda a: bool(a.table["feasible"].all())),
    )
add("analyze plot first", lambda ctx: explore.analyze(X, Y, V, **AN).plot(first=-1), Err("first must be"))
add("analyze Settings steps", lambda ctx: explore.Settings(steps=-1), Err("steps must be"))
add("analyze Settings loss", lambda ctx: explore.Settings(loss="hinge"), Err("unknown loss"))
add("analyze s not Settings", lambda ctx: explore.analyze(X, Y, V, np.eye(2)), Err("s must be a Settings", TypeError))
add("analyze unknown setting", lambda ctx: explore.analyze(X, Y, V, stepz=5), Err("stepz", TypeError))

# ----------------------------------------------------------------------------- model, grad, losses
add("problem K 2-d", lambda ctx: AttentionProblem(K[0], GAMMA[0]), Err("K must have shape"))
add("problem gamma shape", lambda ctx: AttentionProblem(K, GAMMA[:, :3]), Err("gamma has shape"))
add("problem T=1", lambda ctx: AttentionProblem(K[:, :1], GAMMA[:, :1]), Err("two tokens"))
add("problem n=0", lambda ctx: AttentionProblem(np.zeros((0, 3, 2)), np.zeros((0, 3))), Err("K must have at least"))
add("problem K complex", lambda ctx: AttentionProblem(K * 1j, GAMMA), Err("K must be real"))
add("problem gamma inf", lambda ctx: AttentionProblem(K, GAMMA * np.inf), Err("gamma contains"))
add("problem mask values", lambda ctx: AttentionProblem(K, GAMMA, np.full((3, 4), 2)), Err("mask must be boolean"))
add(
    "problem mask tensor values",
    lambda ctx: AttentionProblem(K, GAMMA, torch.full((3, 4), 0.5)),
    Err("mask must be boolean"),
)
add("problem mask all padding", lambda ctx: AttentionProblem(K, GAMMA, np.zeros((3, 4), bool)), Err("only padding"))
add("problem mask shape", lambda ctx: AttentionProblem(K, GAMMA, np.ones((3, 3), bool)), Err("mask"))
add(
    "problem batch mismatch",
    lambda ctx: AttentionProblem(np.stack([K] * 2), np.stack([GAMMA] * 3)),
    Err("do not broadcast"),
)
add("from_data Y 0/1", lambda ctx: AttentionProblem.from_data(X, [1, 0, 1], V), Err("labels Y"))
add("from_data Y scalar", lambda ctx: AttentionProblem.from_data(X, 1.0, V), Err("Y must have shape"))
add("as_tensor string", lambda ctx: as_tensor("x", "thing"), Err("thing must be numeric"))
add(
    "as_tensor complex tensor",
    lambda ctx: as_tensor(torch.ones(2, dtype=torch.complex64), "thing"),
    Err("thing must be real"),
)
add("grad_p p dim", lambda ctx: grad.grad_p(PROBLEM, torch.zeros(3)), Err("p has dimension"))
add("grad_p p nan", lambda ctx: grad.grad_p(PROBLEM, [np.nan, 0.0]), Err("p contains NaN"))
add(
    "grad_p p list", lambda ctx: grad.grad_p(PROBLEM, [1.0, 0.0]), Ok(lambda g: bool(torch.isfinite(g.direction).all()))
)
add(
    "grad_p huge p",
    lambda ctx: grad.grad_p(PROBLEM, [1e200, 0.0]),
    Ok(lambda g: bool(torch.isfinite(g.direction).all())),
)
add("grad_p problem", lambda ctx: grad.grad_p((K, GAMMA), [1.0, 0.0]), Err("problem must be"))
add(
    "saturation batch",
    lambda ctx: grad.saturation(AttentionProblem(np.stack([K] * 2), np.stack([GAMMA] * 2)), torch.zeros(3, 2)),
    Err("does not broadcast"),
)
add("loss_value loss", lambda ctx: grad.loss_value(PROBLEM, [0.0, 0.0], "hinge"), Err("unknown loss"))
add("autograd p string", lambda ctx: grad.autograd_grad(PROBLEM, "p"), Err("p must be numeric"))
add("get_loss int", lambda ctx: get_loss(3), Err("loss must be"))
add("get_loss unknown", lambda ctx: get_loss("squared"), Err("unknown loss"))


# ----------------------------------------------------------------------------- environment and the command lines
def _env(var, value, fn, tmp_path_value=False):
    def run(ctx):
        v = value
        if tmp_path_value:
            f = ctx.tmp_path / "a-file"
            f.write_text("x")
            v = str(f)
        ctx.monkeypatch.setenv(var, v)
        return fn()

    return run


add("MMTOKEN_DEVICE bogus", _env("MMTOKEN_DEVICE", "bogus!", config.device), Err("MMTOKEN_DEVICE"))
add("MMTOKEN_DEVICE tpu", _env("MMTOKEN_DEVICE", "tpu", config.device), Err("MMTOKEN_DEVICE"))
if not torch.cuda.is_available():
    add("MMTOKEN_DEVICE cuda on cpu", _env("MMTOKEN_DEVICE", "cuda", config.device), Err("CUDA is not available"))
    add(
        "MMTOKEN_DEVICE cuda, problem",
        _env("MMTOKEN_DEVICE", "cuda", lambda: AttentionProblem(K, GAMMA)),
        Err("MMTOKEN_DEVICE"),
    )
    add(
        "MMTOKEN_DEVICE cuda, analyze",
        _env("MMTOKEN_DEVICE", "cuda", lambda: explore.analyze(X, Y, V, steps=5)),
        Err("MMTOKEN_DEVICE"),
    )
add("MMTOKEN_DEVICE cpu", _env("MMTOKEN_DEVICE", "cpu", config.device), Ok(lambda d: d.type == "cpu"))
add("MMTOKEN_DATA file", _env("MMTOKEN_DATA", None, config.data_dir, True), Err("is a file"))
add(
    "MMTOKEN_DATA file, text.load",
    _env("MMTOKEN_DATA", None, lambda: text.load("rt", download=False), True),
    Err("MMTOKEN_DATA"),
)
add("MMTOKEN_SCALE bogus", _env("MMTOKEN_SCALE", "huge", config.scale), Err("MMTOKEN_SCALE"))
add(
    "MMTOKEN_PROGRESS bogus",
    _env("MMTOKEN_PROGRESS", "sometimes", lambda: config.progress_enabled(1)),
    Err("MMTOKEN_PROGRESS"),
)
add("set_scale bogus", lambda ctx: config.set_scale("huge"), Err("scale"))
add("set_progress bogus", lambda ctx: config.set_progress("maybe"), Err("progress mode"))
for seed in (-1, 2.5, 2**40, "0"):
    add(f"seed_everything {seed!r}", lambda ctx, s=seed: config.seed_everything(s), Err("seed must be"))


def _cli(argv, env=None, file_env=None):
    def run(ctx):
        from mmtoken.__main__ import main

        for k, v in (env or {}).items():
            ctx.monkeypatch.setenv(k, v)
        if file_env:
            f = ctx.tmp_path / "a-file"
            f.write_text("x")
            ctx.monkeypatch.setenv(file_env, str(f))
        args = [a.replace("{tmp}", str(ctx.tmp_path)) for a in argv]
        try:
            return main(args)
        except SystemExit as exc:
            return exc.code

    return run


add("cli claims --only (none)", _cli(["claims", "--only"]), Exit(2, "--only"))
add("cli figures --only (none)", _cli(["figures", "--only"]), Exit(2, "--only"))
add("cli claims unknown", _cli(["claims", "--only", "no.such"]), Exit(2, "no claim id is or starts with 'no.such'"))
add(
    "cli claims one typo among good ids",
    _cli(["claims", "--only", "core.grad_autograd", "A.globl"]),
    Exit(2, "no claim id is or starts with 'A.globl'"),
)
add("cli claims two scales", _cli(["--scale", "quick", "figures", "--scale", "paper"]), Exit(2, "give one scale"))
add(
    "cli figures --out file",
    _cli(["figures", "--only", "fig-tour-paths", "--out", "{tmp}/f/x"], file_env=None),
    Exit(0, ""),
)  # a nested new folder is created: fine
add(
    "cli figures --out is a file",
    lambda ctx: (
        ctx.tmp_path.joinpath("o").write_text("x"),
        _cli(["figures", "--only", "fig-tour-paths", "--out", "{tmp}/o"])(ctx),
    )[1],
    Exit(2, "--out"),
)
add(
    "cli claims bogus device",
    _cli(["claims", "--only", "core"], env={"MMTOKEN_DEVICE": "bogus!"}),
    Exit(2, "MMTOKEN_DEVICE"),
)
add("cli claims data is a file", _cli(["claims", "--only", "core"], file_env="MMTOKEN_DATA"), Exit(2, "MMTOKEN_DATA"))
add(
    "cli claims bogus scale",
    _cli(["claims", "--only", "core"], env={"MMTOKEN_SCALE": "huge"}),
    Exit(2, "MMTOKEN_SCALE"),
)
add("cli bad --scale", _cli(["--scale", "huge", "claims"]), Exit(2, "--scale"))


def _text_cli(argv, file_env=False):
    def run(ctx):
        if file_env:
            f = ctx.tmp_path / "a-file"
            f.write_text("x")
            ctx.monkeypatch.setenv("MMTOKEN_DATA", str(f))
        try:
            return cli.main(argv)
        except SystemExit as exc:
            return exc.code

    return run


add("text cli unknown name", _text_cli(["fetch", "imbd"]), Exit(2, "invalid choice"))
add("text cli status, data is a file", _text_cli(["status"], file_env=True), Exit(1, "is a file"))
add("text cli fetch, data is a file", _text_cli(["fetch", "rt"], file_env=True), Exit(1, "is a file"))

# ----------------------------------------------------------------------------- loaders
add("text.load unknown", lambda ctx: text.load("imbd"), Err("unknown text dataset"))
add("text.load None", lambda ctx: text.load(None), Err("unknown text dataset"))
add("text.load list", lambda ctx: text.load(["imdb"]), Err("unknown text dataset"))
add("text.fetch unknown", lambda ctx: text.fetch("x"), Err("unknown text dataset"))
add("text.available unknown", lambda ctx: text.available("x"), Err("unknown text dataset"))
add("text.load yelp offline", lambda ctx: text.load("yelp", download=False), Err("Yelp polarity", DatasetMissing))
add(
    "corpus.read_cache missing",
    lambda ctx: corpus.read_cache(ctx.tmp_path / "none.npz", "imdb"),
    Err("does not exist", DatasetMissing),
)
add(
    "corpus.read_cache garbage",
    lambda ctx: (
        ctx.tmp_path.joinpath("g.npz").write_bytes(b"junk"),
        corpus.read_cache(ctx.tmp_path / "g.npz", "imdb"),
    )[1],
    Err("damaged", DatasetError),
)
add(
    "text.download_verified unreachable",
    lambda ctx: text.download_verified("http://127.0.0.1:9/x", ctx.tmp_path / "x", "0" * 64, timeout=2),
    Err("cannot download", DatasetMissing),
)
add(
    "text.download_verified bad url",
    lambda ctx: text.download_verified("not a url", ctx.tmp_path / "x", "0" * 64),
    Err("cannot download", DatasetMissing),
)
add("images unknown", lambda ctx: images.load_images("mnist", "train"), Err("unknown image dataset"))
add("fashion split", lambda ctx: fashion_mnist.load_fashion_mnist("val"), Err("unknown split"))
add("cifar split", lambda ctx: cifar10.load_cifar10("val"), Err("unknown split"))
add("cifar offline", lambda ctx: cifar10.load_cifar10("train", download=False), Err("CIFAR-10", DatasetMissing))
add("parse_idx junk", lambda ctx: fashion_mnist.parse_idx(b"xx"), Err("not an idx file", DatasetError))
add(
    "parse_idx truncated",
    lambda ctx: fashion_mnist.parse_idx(b"\x00\x00\x08\x01\x00\x00\x00\x05ab"),
    Err("truncated or corrupt", DatasetError),
)
add("parse_yelp_csv empty", lambda ctx: parsers.parse_yelp_csv(b""), Err("empty", DatasetError))
add(
    "make_dataset labels 0/1",
    lambda ctx: corpus.make_dataset("x", ["a", "b"], [1, 0], [0, 1]),
    Err("labels", DatasetError),
)


# ----------------------------------------------------------------------------- issue 28: trustworthy at the edges
from mmtoken.attention import instances, model, smoothness  # noqa: E402
from mmtoken.chapters import ch13_w_vs_kq as ch13  # noqa: E402
from mmtoken.chapters import ch15_multi_token as mt  # noqa: E402
from mmtoken.embeddings import corpus_stats  # noqa: E402
from mmtoken.selfattention import tfsvm  # noqa: E402

_XZ_rng = np.random.default_rng(5)
XW = _XZ_rng.normal(size=(3, 3, 2))
ZW = _XZ_rng.normal(size=(3, 2))
YW = np.array([1.0, -1.0, 1.0])
VW = np.array([0.6, -0.8])
_KW = tfsvm.w_keys(XW, ZW).numpy()
AW = (_KW @ np.array([1.0, -0.5, 0.3, 0.8])).argmax(-1)  # a direction's selection: feasible
W_MM = tfsvm.frobenius_svm(XW, ZW, AW).x
PW = np.array([0.7, -0.4])
AP = (np.einsum("ntd,d->nt", XW, np.array([1.0, 0.2]))).argmax(-1)
WSVM = svm.w_svm(XW, AP, PW).x
WPROB = tfsvm.w_problem(XW, YW, VW, ZW)
K2 = np.eye(2)[None].repeat(2, 0) * 0.5

# 28.3: an infeasibility certificate only where it holds at the problem's scale
for c in (1e-200, 1e-160, 1e160, 1e200):  # products x z^T underflow / overflow: refused, never "infeasible"
    add(f"frobenius_svm X,Z*{c:g}", lambda ctx, c=c: tfsvm.frobenius_svm(XW * c, ZW * c, AW), Err("rescale X and Z"))
    add(f"w_svm X,p*{c:g}", lambda ctx, c=c: svm.w_svm(XW * c, AP, PW * c), Err("rescale X and p"))
    add(
        f"w_gen_svm X,Z*{c:g}",
        lambda ctx, c=c: mt.w_gen_svm(XW * c, ZW * c, [(int(a),) for a in AW]),
        Err("rescale X and Z"),
    )
for c in (1e-150, 1e150):  # products out of the plain range but representable: the right answer
    add(
        f"frobenius_svm X,Z*{c:g}",
        lambda ctx, c=c: tfsvm.frobenius_svm(XW * c, ZW * c, AW),
        Ok(lambda r, c=c: _close(r.x * c * c, W_MM, 1e-6)),
    )
    add(
        f"w_svm X,p*{c:g}",
        lambda ctx, c=c: svm.w_svm(XW * c, AP, PW * c),
        Ok(lambda r, c=c: _close(r.x * c * c, WSVM, 1e-6)),
    )
add(
    "frobenius_svm X*1e-200 Z*1e200",
    lambda ctx: tfsvm.frobenius_svm(XW * 1e-200, ZW * 1e200, AW),
    Ok(lambda r: _close(r.x, W_MM, 1e-6)),
)
_Z0 = ZW.copy()
_Z0[1] = 0.0
add(
    "frobenius_svm zero query row",
    lambda ctx: tfsvm.frobenius_svm(XW, _Z0, AW),
    Err("query (or fixed vector) of input(s) [1] is zero", svm.InfeasibleSVM),
)
add(
    "nuclear_svm zero query row",
    lambda ctx: ch13.nuclear_svm(XW, _Z0, AW),
    Err("input(s) [1] is zero", svm.InfeasibleSVM),
)
add("w_svm p zero", lambda ctx: svm.w_svm(XW, AP, [0.0, 0.0]), Err("p must be a non-zero"))
add(
    "outer_svm rows mismatch",
    lambda ctx: svm.outer_svm(np.ones((2, 2)), np.ones((3, 2)), [(0, 1)] * 2, "x", "A"),
    Err("one row per entry"),
)
add(
    "min_norm_nnls names its caller's data",
    lambda ctx: mt.gen_svm(K2 * 1e-300 * 1e-10, [(0,), (0,)]),
    Err("rescale K"),
)

# 28.7: unchecked arguments that gave silent wrong answers
_toks = np.array([[1, 2, 3], [3, 2, 0]])
_labs = np.array([1, -1])
add("token_stats pad_id -1", lambda ctx: corpus_stats.token_stats(_toks, _labs, 4, pad_id=-1), Err("pad_id must be"))
add("token_stats pad_id 1.5", lambda ctx: corpus_stats.token_stats(_toks, _labs, 4, pad_id=1.5), Err("pad_id must be"))
add(
    "token_stats pad_id True", lambda ctx: corpus_stats.token_stats(_toks, _labs, 4, pad_id=True), Err("pad_id must be")
)
add("token_stats vocab_size 0", lambda ctx: corpus_stats.token_stats(_toks, _labs, 0), Err("vocab_size must be"))
add("token_stats vocab_size 4.5", lambda ctx: corpus_stats.token_stats(_toks, _labs, 4.5), Err("vocab_size must be"))
add(
    "token_stats N = 0",
    lambda ctx: corpus_stats.token_stats(np.zeros((0, 3), int), np.zeros(0), 4),
    Err("at least one sequence"),
)
add("token_stats fractional ids", lambda ctx: corpus_stats.token_stats(_toks + 0.5, _labs, 5), Err("integer token ids"))
add("token_stats string tokens", lambda ctx: corpus_stats.token_stats("abc", _labs, 4), Err("tokens must be numeric"))
add(
    "token_stats pad 0 ok",
    lambda ctx: corpus_stats.token_stats(_toks, _labs, 4, pad_id=0),
    Ok(lambda r: r.count[0] == 0 and r.count[3] == 2),
)
add("spearman nan", lambda ctx: corpus_stats.spearman([1.0, np.nan, 3.0], [1.0, 2.0, 3.0]), Err("finite"))
add(
    "partial_spearman nan",
    lambda ctx: corpus_stats.partial_spearman([1.0, 2, 3, 4], [1.0, 2, 3, np.nan], [1.0, 2, 3, 4]),
    Err("finite"),
)
_stats = corpus_stats.token_stats(_toks, _labs, 4)
add(
    "u_shape min_count 0.5",
    lambda ctx: corpus_stats.u_shape(np.zeros(4), _stats, min_count=0.5),
    Err("min_count must be"),
)
add("u_shape logits nan", lambda ctx: corpus_stats.u_shape(np.full(4, np.nan), _stats), Err("logits contains NaN"))
add(
    "u_shape stats wrong type",
    lambda ctx: corpus_stats.u_shape(np.zeros(4), {"count": 1}),
    Err("stats must be a TokenStats"),
)
add(
    "polarity_mix pad_id -1",
    lambda ctx: corpus_stats.polarity_mix(_toks, _labs, _stats, pad_id=-1),
    Err("pad_id must be"),
)
add(
    "polarity_mix threshold nan",
    lambda ctx: corpus_stats.polarity_mix(_toks, _labs, _stats, threshold=np.nan),
    Err("threshold must be"),
)
add(
    "polarity_mix labels 0/1",
    lambda ctx: corpus_stats.polarity_mix(_toks, np.array([1, 0]), _stats),
    Err("labels must be"),
)
add(
    "polarity_mix ids out of vocab",
    lambda ctx: corpus_stats.polarity_mix(_toks + 5, _labs, _stats),
    Err("tokens must hold integer ids"),
)
add(
    "gen_svm fractional set entry",
    lambda ctx: mt.gen_svm(K2, [(0.5,), (1,)]),
    Err("sets[0] entries must be an integer"),
)
add(
    "gen_svm boolean set entry",
    lambda ctx: mt.gen_svm(K2, [(True,), (0,)]),
    Err("sets[0] entries must be an integer"),
)
add(
    "gen_svm nan set entry",
    lambda ctx: mt.gen_svm(K2, [(np.nan,), (0,)]),
    Err("sets[0] entries must be an integer"),
)
add("gen_svm string sets", lambda ctx: mt.gen_svm(K2, "01"), Err("sets must be a list"))
add(
    "gen_svm integral float entry",
    lambda ctx: mt.gen_svm(K2, [(0.0,), (0.0,)]),
    Ok(lambda r: np.isfinite(r.x).all()),
)
add(
    "check_sets negative entry",
    lambda ctx: mt.check_sets([(-1,), (0,)], 2, 2),
    Err("sets[0] entries must be an integer >= 0"),
)
_K0 = np.eye(2) * 0.1
for pen in (-1.0, np.nan, np.inf, "abc", True):
    add(f"kq_grad penalty {pen!r}", lambda ctx, pen=pen: ch13.kq_grad(WPROB, _K0, _K0, pen), Err("penalty must be"))
    add(
        f"train_kq penalty {pen!r}",
        lambda ctx, pen=pen: ch13.train_kq(WPROB, _K0, _K0, steps=1, penalty=pen),
        Err("penalty must be"),
    )
for sep in ("no", "yes", 0, 1, None):
    add(
        f"train_kq separate {sep!r}",
        lambda ctx, sep=sep: ch13.train_kq(WPROB, _K0, _K0, steps=1, separate=sep),
        Err("separate must be True or False"),
    )
add(
    "train_kq separate np.bool_",
    lambda ctx: ch13.train_kq(WPROB, _K0, _K0, steps=1, separate=np.bool_(False)),
    Ok(lambda r: r.K.shape[0] == 2),
)
add("kq_grad K shape", lambda ctx: ch13.kq_grad(WPROB, np.ones((3, 2)), _K0), Err("K must have shape"))
add(
    "kq_grad K numpy ok",
    lambda ctx: ch13.kq_grad(WPROB, _K0, _K0),
    Ok(lambda r: abs(float(torch.linalg.norm(r[0])) - 1) < 1e-12),
)
add(
    "smoothness_bound K nan",
    lambda ctx: smoothness.smoothness_bound(np.where(K > 1, np.nan, K), GAMMA),
    Err("K contains NaN"),
)
add(
    "smoothness_bound gamma inf",
    lambda ctx: smoothness.smoothness_bound(K, np.where(GAMMA > 0, np.inf, GAMMA)),
    Err("gamma contains NaN"),
)
add(
    "smoothness_bound n = 0",
    lambda ctx: smoothness.smoothness_bound(np.zeros((0, 2, 2)), np.zeros((0, 2))),
    Err("no empty dimension"),
)
add("smoothness_bound loss", lambda ctx: smoothness.smoothness_bound(K, GAMMA, "hinge"), Err("unknown loss"))
add("derivative_bounds lo nan", lambda ctx: smoothness.derivative_bounds("logistic", np.nan, 1.0), Err("lo must be"))
add("hessian_norm_max points 0", lambda ctx: smoothness.hessian_norm_max(PROBLEM, 1.0, points=0), Err("points must be"))
add(
    "hessian_norm_max points 2.5",
    lambda ctx: smoothness.hessian_norm_max(PROBLEM, 1.0, points=2.5),
    Err("points must be"),
)
add("hessian_norm_max box nan", lambda ctx: smoothness.hessian_norm_max(PROBLEM, np.nan), Err("box must be"))
add("hessian_norm_max box -1", lambda ctx: smoothness.hessian_norm_max(PROBLEM, -1.0), Err("box must be"))
add("hessian problem", lambda ctx: smoothness.hessian("K", [0.0, 0.0]), Err("problem must be"))
_Kt, _pt = torch.tensor(K), torch.tensor([1.0, 0.3], dtype=torch.float64)
add(
    "softmax_probs all-padding mask",
    lambda ctx: model.softmax_probs(_Kt, _pt, torch.zeros(3, 4, dtype=torch.bool)),
    Err("no real token"),
)
_one_pad = np.ones((3, 4), bool)
_one_pad[1] = False
add(
    "softmax_probs one input all padding",
    lambda ctx: model.softmax_probs(_Kt, _pt, _one_pad),
    Err("1 input(s) with no real token"),
)
add(
    "softmax_probs mask 2",
    lambda ctx: model.softmax_probs(_Kt, _pt, torch.full((3, 4), 2)),
    Err("mask must be boolean"),
)
add(
    "softmax_probs mask shape",
    lambda ctx: model.softmax_probs(_Kt, _pt, torch.ones(2, 4, dtype=torch.bool)),
    Err("mask shape"),
)
add(
    "softmax_probs partial mask ok",
    lambda ctx: model.softmax_probs(_Kt, _pt, _hide),
    Ok(lambda r: bool(torch.isfinite(r).all()) and float(r[0, ALPHA[0]]) == 0.0),
)
for C in (np.nan, np.inf, "1", None, True):
    add(f"fig4 C={C!r}", lambda ctx, C=C: instances.fig4(C), Err("C must be a finite real number"))
add("fig4 C=2 ok", lambda ctx: instances.fig4(2), Ok(lambda r: r.X[0, 1, 2] == 2.0))
for seed in (-1, 2.5, "0"):
    add(f"fig2 seed {seed!r}", lambda ctx, s=seed: instances.fig2(s), Err("seed must be"))
    add(
        f"instances.random_instances seed {seed!r}",
        lambda ctx, s=seed: instances.random_instances(2, 2, 2, 2, s),
        Err("seed must be"),
    )
add("instances.random_instances n = 0", lambda ctx: instances.random_instances(2, 0, 2, 2), Err("n must be"))
add("instances.random_instances T = 1", lambda ctx: instances.random_instances(2, 2, 1, 2), Err("T must be"))
add(
    "instances.random_instances count 2.0 ok",
    lambda ctx: instances.random_instances(2.0, 2, 2, 2),
    Ok(lambda r: r["K"].shape == (2, 2, 2, 2)),
)
add(
    "tfsvm.random_instances count 2.0 ok",
    lambda ctx: tfsvm.random_instances(2.0, 2, 2, 2),
    Ok(lambda r: r["X"].shape == (2, 2, 2, 2)),
)
add("tfsvm.random_instances n = 0", lambda ctx: tfsvm.random_instances(1, 0, 2, 2), Err("n must be"))

# 28.8: raw tracebacks and wrong names
_bf = torch.tensor(K, dtype=torch.bfloat16)
add("AttentionProblem K bfloat16", lambda ctx: AttentionProblem(_bf, GAMMA), Ok(lambda r: r.K.dtype == torch.float64))
add(
    "att_svm K bfloat16",
    lambda ctx: svm.att_svm(torch.tensor(K, dtype=torch.bfloat16), ALPHA),
    Ok(lambda r: np.isfinite(r.x).all()),
)
add("geometry.selection K bfloat16", lambda ctx: geometry.selection(_bf, [1.0, 0.3]), Ok(lambda r: r.shape == (3,)))
add(
    "att_svm K meta",
    lambda ctx: svm.att_svm(torch.empty(3, 4, 2, device="meta"), ALPHA),
    Err("K is a meta-device tensor"),
)
add(
    "AttentionProblem K meta",
    lambda ctx: AttentionProblem(torch.empty(3, 4, 2, device="meta"), GAMMA),
    Err("K is a meta-device tensor"),
)
add(
    "model.logits K meta",
    lambda ctx: model.logits(torch.empty(3, 4, 2, device="meta"), _pt),
    Err("K is a meta-device tensor"),
)
add(
    "model.logits numpy",
    lambda ctx: model.logits(K, [1.0, 0.3]),
    Ok(lambda r: torch.allclose(r, torch.tensor(K @ [1.0, 0.3]))),
)
add("model.logits mixed dtypes", lambda ctx: model.logits(_Kt.float(), _pt), Ok(lambda r: r.dtype == torch.float64))
add(
    "model.logits int tensor",
    lambda ctx: model.logits(torch.ones(3, 4, 2, dtype=torch.int64), _pt),
    Ok(lambda r: r.dtype == torch.float64),
)
add(
    "model.scores numpy and bf16",
    lambda ctx: model.scores(X, torch.tensor(Y, dtype=torch.bfloat16), V),
    Ok(lambda r: r.shape == (3, 4)),
)
add("model.output v scalar", lambda ctx: model.output(X, 1.0, K, [1.0, 0.3]), Err("v must have shape"))
add(
    "model.keys mixed dtypes",
    lambda ctx: model.keys(torch.tensor(X, dtype=torch.float32), torch.eye(2, dtype=torch.float64)),
    Ok(lambda r: r.dtype == torch.float64),
)
add(
    "grad_p bfloat16 p",
    lambda ctx: grad.grad_p(PROBLEM, torch.tensor([1.0, 0.3], dtype=torch.bfloat16)),
    Ok(lambda r: r.direction.dtype == torch.float64),
)
add("grad_p meta p", lambda ctx: grad.grad_p(PROBLEM, torch.empty(2, device="meta")), Err("p is a meta-device tensor"))
add(
    "train_p numpy start",
    lambda ctx: train.train_p(PROBLEM, np.array([0.0, 0.0]), steps=3, progress=False),
    Ok(lambda r: r.p.shape[0] >= 2),
)
_Xneg = np.ascontiguousarray(X[:, ::-1])[:, ::-1]  # a view with negative strides, same values as X
add(
    "analyze negative strides",
    lambda ctx: explore.analyze(_Xneg, Y[::-1][::-1], V[::-1][::-1], starts=STARTS[:, ::-1], steps=5),
    Ok(lambda r: len(r.table) == 2),
)
add(
    "AttentionProblem negative strides",
    lambda ctx: AttentionProblem(K[::-1], GAMMA[::-1]),
    Ok(lambda r: torch.equal(r.K, torch.tensor(K[::-1].copy()))),
)
add(
    "from_data scores overflow names X and v",
    lambda ctx: AttentionProblem.from_data(X * 1e300, Y, V * 1e300),
    Err("X and v"),
)
add(
    "from_data keys overflow names X and W",
    lambda ctx: AttentionProblem.from_data(X * 1e300, Y, V, W=np.eye(2) * 1e300),
    Err("X and W"),
)
add(
    "analyze points: starts 0 rows",
    lambda ctx: explore.analyze(X, Y, V, starts=np.zeros((0, 2)), steps=1),
    Err("starts must have shape"),
)
add("analyze n = 0", lambda ctx: explore.analyze(np.zeros((0, 4, 2)), np.zeros(0), V, steps=1), Err("X"))
add("train_kq steps 2.5", lambda ctx: ch13.train_kq(WPROB, _K0, _K0, steps=2.5), Err("steps must be"))
add("cli claims --only ''", _cli(["claims", "--only", ""]), Exit(2, "empty name"))
add("cli figures --only ''", _cli(["figures", "--only", ""]), Exit(2, "empty name"))
add("cli figures --only ' '", _cli(["figures", "--only", "fig-tour-paths", " "]), Exit(2, "empty name"))


# the audit of the public functions (same kinds, other functions)
from mmtoken.datasets import download as download_module  # noqa: E402

_w1, _d1 = torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([0.0, 1.0], dtype=torch.float64)
for th in (np.nan, "abc", None):
    add(f"sphere_step theta {th!r}", lambda ctx, th=th: train.sphere_step(_w1, _d1, th), Err("theta"))
add(
    "sphere_step theta float ok",
    lambda ctx: train.sphere_step(_w1, _d1, 0.5),
    Ok(lambda r: abs(float(r.norm()) - 1) < 1e-12),
)
add(
    "sphere_step lists ok",
    lambda ctx: train.sphere_step([1.0, 0.0], [0.0, 1.0], torch.tensor(0.5)),
    Ok(lambda r: r.shape == (2,)),
)
add(
    "sphere_step shapes",
    lambda ctx: train.sphere_step(_w1, torch.ones(3, dtype=torch.float64), 0.5),
    Err("same dimension"),
)
add(
    "accept ok not boolean",
    lambda ctx: train.accept(PROBLEM, _w1, _w1, torch.tensor(0.5)),
    Err("ok must be a boolean tensor"),
)
add("accept theta float", lambda ctx: train.accept(torch.tensor(True), _w1, _w1, 0.5), Err("theta must be a tensor"))
for rp in ("no", 0, None):
    add(
        f"train_p record_probs {rp!r}",
        lambda ctx, rp=rp: train.train_p(PROBLEM, [0.0, 0.0], steps=2, record_probs=rp, progress=False),
        Err("record_probs must be True or False"),
    )
add(
    "grad_v loss 3",
    lambda ctx: joint.grad_v(
        torch.tensor(X), torch.tensor(Y), grad.saturation(PROBLEM, torch.zeros(2, dtype=torch.float64)), 3
    ),
    Err("loss must be"),
)
add(
    "grad_v sat",
    lambda ctx: joint.grad_v(torch.tensor(X), torch.tensor(Y), None, "logistic"),
    Err("sat must be a Saturation"),
)
for hv in ("a", None, np.nan, 2.0):
    add(f"sets_from_probs high {hv!r}", lambda ctx, hv=hv: mt.sets_from_probs(np.eye(2), high=hv), Err("high"))
for wv in (np.nan, "a", None, 3, 2.5, True):
    add(f"fit_line width {wv!r}", lambda ctx, wv=wv: download_module.fit_line("abcdef", wv), Err("width must be"))
add(
    "fit_line width np.int64 ok",
    lambda ctx: download_module.fit_line("abcdefgh", np.int64(6)),
    Ok(lambda r: r == "abc..."),
)
add("fit_line line None", lambda ctx: download_module.fit_line(None), Err("line must be a string"))
for ma in (np.nan, "a", None, -1, True):
    add(
        f"sweep_partial max_age {ma!r}",
        lambda ctx, ma=ma: download_module.sweep_partial(ctx.tmp_path, ma),
        Err("max_age must be"),
    )


# 28.1, the same kind elsewhere: norms of huge or tiny vectors
add(
    "train_p history norm at p ~ 1e200",
    lambda ctx: train.train_p(AttentionProblem(K * 1e-200, GAMMA), [0.0, 0.0], steps=5, lr=1e199, progress=False),
    Ok(lambda h: bool(torch.isfinite(h.norm).all()) and float(h.norm[-1]) > 1e199),
)
add(
    "regularization_path w0 of size 1e200",
    lambda ctx: train.regularization_path(PROBLEM, [1.0, 2.0], np.array([[1e200, 3e199]])),
    Ok(lambda r: bool(torch.isfinite(r).all())),
)
add(
    "regularization_path w0 of size 1e-200",
    lambda ctx: train.regularization_path(PROBLEM, [1.0, 2.0], np.array([[1e-200, 3e-201]])),
    Ok(lambda r: bool(torch.isfinite(r).all()) and bool((r != 0).any())),
)
add(
    "grad.safe_norm 1e200 and 1e-200",
    lambda ctx: grad.safe_norm(torch.tensor([[3e200, 4e200], [3e-200, 4e-200]], dtype=torch.float64)),
    Ok(lambda r: np.allclose(r.numpy() / [1e200, 1e-200], 5.0, rtol=1e-15)),
)


def _interrupted(ctx):
    from mmtoken.book import ledger

    def stop(*a, **k):
        raise KeyboardInterrupt

    ctx.monkeypatch.setattr(ledger, "recorded", stop)
    ctx.monkeypatch.setattr(ledger, "run_claims", stop)
    return _cli(["claims", "--only", "core"])(ctx)


add("cli claims Ctrl-C", _interrupted, Exit(130, "interrupted"))


# ----------------------------------------------------------------------------- the runner
@dataclass
class Ctx:
    monkeypatch: Any
    tmp_path: Any


@pytest.fixture(autouse=True)
def _own_data(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("MMTOKEN_DEVICE", raising=False)
    monkeypatch.delenv("MMTOKEN_SCALE", raising=False)
    monkeypatch.setenv("MMTOKEN_PROGRESS", "off")
    yield
    config.reset()


@pytest.mark.parametrize("name, fn, expect", CASES, ids=[c[0] for c in CASES])
def test_bad_input(name, fn, expect, monkeypatch, tmp_path, capsys):
    ctx = Ctx(monkeypatch, tmp_path)
    if isinstance(expect, Err):
        with pytest.raises(expect.exc) as info:
            fn(ctx)
        assert expect.match in str(info.value), f"{name}: {info.value}"
    elif isinstance(expect, Exit):
        code = fn(ctx)
        err = capsys.readouterr().err
        assert code == expect.code, f"{name}: exit {code}, stderr {err}"
        assert expect.match in err and "Traceback" not in err, err
    else:
        assert expect.check(fn(ctx)), name


def test_the_table_covers_the_filed_cases():
    """The filer tried 191 cases; the table holds at least as many."""
    assert len(CASES) >= 191


if __name__ == "__main__":
    print(len(CASES), "cases")
