"""The joint regularization path of paper A's Theorems 5-6: head ``v`` and token ``p`` under two ridge constraints.

``(v(R_v, R_p), p(R_v, R_p)) = argmin L(v, p)  s.t.  ||v|| <= R_v, ||p|| <= R_p``, with
``L(v, p) = (1/n) sum_i l(Y_i f(X_i))`` and ``f(X_i) = sum_t s_it x_it^T v``, ``s_i = softmax(K_i p)``.

* :func:`joint_reference` fixes, before anything is trained, what the theorems compare
  with: the selection ``alpha`` that maximizes the head-SVM margin over all
  selections (checked to be strict: under ``v_mm`` every other token of an input
  scores strictly below the selected one), the head SVM ``v_mm``, its support
  inputs, the ATT-SVM ``p_mm`` and the relaxed ATT-SVM ``p_relax``.
* :func:`joint_regularization_path` solves the constrained problem on the product of
  the two spheres ``||v|| = R_v``, ``||p|| = R_p``: alternating rotations of the two
  directions with the one sphere move of the package, :func:`mmtoken.train.sphere_step`,
  each accepted only when the loss decreases (angles x1.5 on success, /2 on failure),
  every pair of radii and every start in one batch. Between points with the same
  most-attended tokens, losses are compared through the saturation-safe split
  ``L = base + excess`` of :func:`mmtoken.grad.loss_parts`, so a rotation of ``p``
  that changes the loss by ``1e-40`` of itself is still seen; between points whose
  most-attended tokens differ, through ``L`` formed directly (:class:`JointLoss`).
* :func:`limit_direction` is the direction the path tends to when both radii grow with
  ``R_v / R_p = rho`` (derived in the chapter): it maximizes the smallest of the support
  inputs' attention margins and, for a non-support input ``i``, its attention margin plus
  ``rho`` times its head-margin excess ``Delta_i``, keeping every selection.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from . import grad, svm, train
from .losses import Loss, get_loss
from .model import AttentionProblem, as_tensor, scores


@dataclass
class JointReference:
    """What Theorems 5-6 compare the joint path with, fixed from the definitions.

    Attributes
    ----------
    alpha : ``(n,)`` selection maximizing the head-SVM margin (one token per input).
    v_mm : ``(d,)`` head SVM of ``alpha``; margin ``1/||v_mm||``.
    support : inputs whose head constraint is active (the head's support vectors).
    excess : ``(n,)`` head-margin excess ``Delta_i = Y_i x_{i alpha_i}^T v_mm/||v_mm|| - 1/||v_mm||``
        (zero on the support).
    p_mm, p_relax : ATT-SVM and relaxed ATT-SVM of ``alpha`` (``(m,)``).
    margins : table ``[(alpha, head margin or None)]`` over every selection.
    """

    alpha: np.ndarray
    v_mm: np.ndarray
    support: list
    excess: np.ndarray
    p_mm: np.ndarray
    p_relax: np.ndarray
    margins: list

    @property
    def all_support(self) -> bool:
        """Theorem 5's case: every selected token is a support vector of the head."""
        return len(self.support) == len(self.alpha)


def joint_reference(X, Y, W=None, tol: float = 1e-6) -> JointReference:
    """The selection and the SVMs of Theorems 5-6 for data ``X (n, T, d)``, ``Y (n,)``, key map ``W (d, m)``.

    Enumerates the ``T^n`` selections (keep them few), solves the head SVM of each
    and keeps the largest margin. Raises ``ValueError`` when the best selection is
    not unique or not strict (some other token scores at least as high under ``v_mm``).
    """
    X = np.asarray(X, dtype=float)
    Y = np.asarray(Y, dtype=float)
    if X.ndim != 3 or Y.shape != (X.shape[0],):
        raise ValueError(f"X must be (n, T, d) and Y (n,), got {X.shape} and {Y.shape}")
    n, T, _ = X.shape
    if T**n > 4096:
        raise ValueError(f"{T}^{n} selections are too many to enumerate")
    K = X if W is None else X @ np.asarray(W, dtype=float)
    table = []
    for alpha in itertools.product(range(T), repeat=n):
        try:
            table.append((alpha, svm.head_svm(X, Y, alpha).margin))
        except svm.InfeasibleSVM:
            table.append((alpha, None))
    feasible = sorted((m, a) for a, m in table if m is not None)
    if not feasible:
        raise svm.InfeasibleSVM("no selection makes the head SVM feasible")
    best_margin, best = feasible[-1]
    if len(feasible) > 1 and feasible[-2][0] >= best_margin - tol:
        raise ValueError(f"the head-SVM margin is maximized by more than one selection: {feasible[-2][1]}, {best}")
    alpha = np.array(best)
    head = svm.head_svm(X, Y, alpha)
    score = Y[:, None] * (X @ head.x)  # (n, T) under v_mm
    chosen = score[np.arange(n), alpha]
    others = np.where(np.arange(T)[None, :] == alpha[:, None], -np.inf, score)
    if not np.all(others.max(-1) < chosen - tol):
        raise ValueError("the selection is not strict: under v_mm another token scores as high as the selected one")
    support = svm.head_support(head)
    unit_margin = chosen / np.linalg.norm(head.x)
    excess = unit_margin - unit_margin.min()
    excess[support] = 0.0
    return JointReference(
        alpha, head.x, support, excess, svm.att_svm(K, alpha).x, svm.relaxed_att_svm(K, alpha, support).x, table
    )


@dataclass
class JointLoss:
    """``L(v, p)`` at a batch of points, in the forms the comparisons need (shapes ``(...)``, ``top (..., n)``).

    ``base + excess`` is the saturation-safe split of :func:`mmtoken.grad.loss_parts` (exact to the last
    digit of ``excess`` between two points with the same most-attended tokens ``top``); ``total`` is
    ``mean l(u_i)`` formed directly, the right comparison between points whose ``top`` differ (where the
    split can cancel: a large base against a large negative excess).
    """

    base: torch.Tensor
    excess: torch.Tensor
    total: torch.Tensor
    top: torch.Tensor

    def lower_than(self, other: JointLoss) -> torch.Tensor:
        """Where ``L(self) < L(other)``: by the split where the selections agree, by ``total`` elsewhere."""
        same = (self.top == other.top).all(-1)
        split = (self.base - other.base) + (self.excess - other.excess) < 0
        return torch.where(same, split, self.total < other.total)

    def where(self, mask: torch.Tensor, other: JointLoss) -> JointLoss:
        return JointLoss(
            *(
                torch.where(m, a, b)
                for m, a, b in (
                    (mask, self.base, other.base),
                    (mask, self.excess, other.excess),
                    (mask, self.total, other.total),
                    (mask[..., None], self.top, other.top),
                )
            )
        )


def joint_loss(
    X: torch.Tensor,
    Y: torch.Tensor,
    K: torch.Tensor,
    v: torch.Tensor,
    p: torch.Tensor,
    loss: Loss,
    sat: grad.Saturation | None = None,
) -> JointLoss:
    """:class:`JointLoss` at ``v (..., d)``, ``p (..., m)`` (``sat``: the saturation at that point, if at hand)."""
    problem = AttentionProblem(K, scores(X, Y, v))
    sat = sat or grad.saturation(problem, p)
    base, excess = grad.loss_parts(problem, p, loss, sat)
    return JointLoss(base, excess, loss.value(sat.u).mean(-1), sat.top)


def joint_regularization_path(
    X, Y, radii_v, radii_p, a0, b0, *, W=None, loss: str | Loss = "logistic", iters: int = 600, theta0: float = 0.3
) -> tuple[torch.Tensor, torch.Tensor]:
    """Solutions of ``min L(v, p) s.t. ||v|| <= R_v, ||p|| <= R_p`` on the two spheres, for paired radii.

    Parameters
    ----------
    X : ``(n, T, d)`` tokens; Y : ``(n,)`` labels; W : ``(d, m)`` key map (identity if None).
    radii_v, radii_p : ``(nR,)`` the pairs ``(R_v, R_p)``.
    a0 : ``(starts, d)`` and b0 : ``(starts, m)`` start directions of ``v`` and ``p`` (paired; normalised here).
    iters : alternating rotations (one of ``v``, one of ``p``) per pair of radii.

    Returns
    -------
    ``V (nR, starts, d)`` and ``P (nR, starts, m)``; pick the best start per pair with :func:`best_of_starts`.
    """
    loss = get_loss(loss)
    X = as_tensor(X, "X")
    Y = as_tensor(Y, "Y", device=X.device)
    K = X if W is None else X @ as_tensor(W, "W", device=X.device)
    Rv = as_tensor(radii_v, "radii_v", device=X.device)
    Rp = as_tensor(radii_p, "radii_p", device=X.device)
    if Rv.ndim != 1 or Rv.shape != Rp.shape or not bool((Rv > 0).all() and (Rp > 0).all()):
        raise ValueError("radii_v and radii_p must be 1-d arrays of positive numbers of the same length")
    a0, b0 = as_tensor(a0, "a0", device=X.device), as_tensor(b0, "b0", device=X.device)
    if a0.ndim != 2 or b0.ndim != 2 or a0.shape[0] != b0.shape[0]:
        raise ValueError(f"a0 (starts, d) and b0 (starts, m) must pair up, got {tuple(a0.shape)}, {tuple(b0.shape)}")
    if a0.shape[1] != X.shape[-1] or b0.shape[1] != K.shape[-1]:
        raise ValueError(f"a0 must end in d={X.shape[-1]} and b0 in m={K.shape[-1]}")
    shape = (len(Rv), a0.shape[0])
    a = (a0 / a0.norm(dim=-1, keepdim=True)).expand(*shape, a0.shape[1]).clone()
    b = (b0 / b0.norm(dim=-1, keepdim=True)).expand(*shape, b0.shape[1]).clone()
    Rv, Rp = Rv[:, None, None], Rp[:, None, None]
    theta_v = torch.full(shape, theta0, dtype=a.dtype, device=a.device)
    theta_p = theta_v.clone()
    cur = joint_loss(X, Y, K, Rv * a, Rp * b, loss)
    for _ in range(iters):
        # one rotation of v (p fixed), then one of p (v fixed); each kept only if the loss falls
        problem = AttentionProblem(K, scores(X, Y, Rv * a))
        sat = grad.saturation(problem, Rp * b)
        cand = train.sphere_step(a, train.grad_v(X, Y, sat, loss), theta_v)
        new = joint_loss(X, Y, K, Rv * cand, Rp * b, loss)
        ok = new.lower_than(cur)
        a, theta_v = train.accept(ok, cand, a, theta_v)
        cur = new.where(ok, cur)

        problem = AttentionProblem(K, scores(X, Y, Rv * a))
        cand = train.sphere_step(b, grad.grad_p(problem, Rp * b, loss).direction, theta_p)
        new = joint_loss(X, Y, K, Rv * a, Rp * cand, loss)
        ok = new.lower_than(cur)
        b, theta_p = train.accept(ok, cand, b, theta_p)
        cur = new.where(ok, cur)
    return (Rv * a).cpu(), (Rp * b).cpu()


def best_of_starts(
    X, Y, V: torch.Tensor, P: torch.Tensor, *, W=None, loss: str | Loss = "logistic"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per pair of radii, the start of lowest loss: ``V (nR, starts, d)``, ``P (nR, starts, m)`` -> ``(nR, d)``, ``(nR, m)``."""
    loss = get_loss(loss)
    X = as_tensor(X, "X")
    Y = as_tensor(Y, "Y", device=X.device)
    K = X if W is None else X @ as_tensor(W, "W", device=X.device)
    val = joint_loss(X, Y, K, V.to(X.device), P.to(X.device), loss)
    rows = torch.arange(V.shape[0])
    lead = val.total.argmin(1)  # the best selection, by the direct loss
    same = (val.top == val.top[rows, lead][:, None]).all(-1)  # starts that share it
    key = torch.where(same, (val.base - val.base[rows, lead][:, None]) + val.excess, torch.full_like(val.base, np.inf))
    idx = key.argmin(1)  # among them, by the split (exact)
    return V[rows, idx], P[rows, idx]


def radial_slopes(
    X, Y, V: torch.Tensor, P: torch.Tensor, *, W=None, loss: str | Loss = "logistic"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Signs of ``<grad_v L, v>`` and ``<grad_p L, p>`` at ``(V, P)``, ``(...)`` each.

    Both negative means that growing either norm lowers the loss, so the ridge-constrained
    minimiser lies on both spheres (the multipliers of the two constraints are positive).
    """
    loss = get_loss(loss)
    X = as_tensor(X, "X")
    Y = as_tensor(Y, "Y", device=X.device)
    K = X if W is None else X @ as_tensor(W, "W", device=X.device)
    problem = AttentionProblem(K, scores(X, Y, V))
    sat = grad.saturation(problem, P)
    gv = train.grad_v(X, Y, sat, loss)
    gp = grad.grad_p(problem, P, loss, sat).direction
    return torch.sign((gv * V).sum(-1)), torch.sign((gp * P).sum(-1))


def limit_direction(K, alpha, support, excess, rho: float) -> np.ndarray:
    """The limit direction of ``p`` along the path with ``R_v / R_p = rho``, a unit vector ``(m,)``.

    ``argmax_{||q|| <= 1} mu`` subject to ``(k_{i alpha_i} - k_it)^T q >= mu`` for support inputs,
    ``(k_{i alpha_i} - k_it)^T q + rho * excess_i >= mu`` and ``(k_{i alpha_i} - k_it)^T q >= 0``
    for the others (a second-order cone program; the optimum has ``||q|| = 1`` when ``mu > 0``).
    """
    K = np.asarray(K, dtype=float)
    alpha = np.asarray(alpha, dtype=int)
    excess = np.asarray(excess, dtype=float)
    if rho < 0:
        raise ValueError(f"rho must be >= 0, got {rho}")
    support = set(int(i) for i in support)
    import cvxpy as cp  # imported when used (about a second, with scipy.stats)

    q, mu = cp.Variable(K.shape[-1]), cp.Variable()
    cons = [cp.norm(q) <= 1]
    for i in range(K.shape[0]):
        for t in range(K.shape[1]):
            if t == alpha[i]:
                continue
            m = (K[i, alpha[i]] - K[i, t]) @ q
            cons += [m >= mu] if i in support else [m + rho * excess[i] >= mu, m >= 0]
    prob = cp.Problem(cp.Maximize(mu), cons)
    prob.solve(solver=svm.SOLVER)
    if prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or mu.value <= 0:
        raise svm.InfeasibleSVM(f"no direction keeps the selection {alpha.tolist()} with a positive margin")
    return np.asarray(q.value) / np.linalg.norm(q.value)


__all__ = [
    "JointReference",
    "joint_reference",
    "JointLoss",
    "joint_loss",
    "joint_regularization_path",
    "best_of_starts",
    "radial_slopes",
    "limit_direction",
]
