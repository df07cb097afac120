"""Joint training of the head ``v`` and the token ``p`` (chapter 5, the published Fig. 3 runs): each moves
along its own normalized gradient (:func:`mmtoken.attention.grad.grad_p`, :func:`grad_v`), every start at once, through
the compiled CPU kernel where it runs the loss (:func:`mmtoken.attention.fastpath.runs_loss`), in torch otherwise.
"""

from __future__ import annotations

__all__ = ["train_joint", "grad_v"]

import math

import numpy as np
import torch

from mmtoken import validate
from mmtoken.attention import fastpath
from mmtoken.attention.grad import Saturation, grad_p, safe_norm, saturation, unit_and_log_norm
from mmtoken.attention.losses import Loss, get_loss
from mmtoken.attention.model import AttentionProblem, as_tensor, scores
from mmtoken.attention.train import History, progress_flag, record_steps, stack_rows
from mmtoken.config import progress_bar, progress_enabled


def train_joint(
    X,
    Y,
    v0,
    p0,
    *,
    steps: int,
    lr: float = 0.1,
    lr_v: float | None = None,
    W=None,
    loss: str | Loss = "logistic",
    record_every: int | None = None,
    progress: bool | None = None,
) -> History:
    """Joint training, at once: ``p <- p - lr grad_p L / ||grad_p L||``, ``v <- v - lr_v grad_v L / ||grad_v L||``.

    Parameters
    ----------
    X : ``(n, T, d)`` tokens (or ``(..., n, T, d)``); Y : ``(n,)`` labels in ``{+1, -1}``;
    W : ``(d, m)`` key map (identity if None).
    v0 : ``(..., d)``; p0 : ``(..., m)`` starts.
    lr, lr_v : positive finite step sizes (``lr_v`` defaults to ``lr``).
    record_every : as in :func:`train_p` (``None``: a bounded history).

    Returns
    -------
    History with ``v`` filled and ``extra["output_prob"]`` ``(S, ..., n)``, ``sigma(Y_i f(X_i))``.

    Raises
    ------
    ValueError naming the argument (checked before the compiled kernel reads anything).
    """
    loss = get_loss(loss)
    lr = validate.positive(lr, "lr")
    lr_v = lr if lr_v is None else validate.positive(lr_v, "lr_v")
    progress = progress_flag(progress)
    X = as_tensor(X, "X")
    Y = as_tensor(Y, "Y", device=X.device)
    if X.ndim < 3 or 0 in X.shape:
        raise ValueError(f"X must have shape (n, T, d) with no empty dimension, got {tuple(X.shape)}")
    if X.shape[-2] < 2:
        raise ValueError(f"X has T = {X.shape[-2]} token(s) per input; attention needs at least two")
    if Y.ndim < 1 or Y.shape[-1] != X.shape[-3] or (X.ndim == 3 and Y.ndim != 1):
        raise ValueError(f"Y must have shape ({X.shape[-3]},) (one label per input of X), got {tuple(Y.shape)}")
    if not bool(((Y == 1) | (Y == -1)).all()):
        raise ValueError(f"labels Y must be +1 or -1, got values {sorted(set(Y.flatten().tolist()))[:6]}")
    if W is not None:
        W = as_tensor(W, "W", device=X.device)
        if W.ndim != 2 or W.shape[0] != X.shape[-1] or W.shape[1] == 0:
            raise ValueError(f"W must have shape ({X.shape[-1]}, m), got {tuple(W.shape)}")
    K = X if W is None else X @ W
    v = as_tensor(v0, "v0", device=X.device).clone()
    p = as_tensor(p0, "p0", device=X.device).clone()
    if v.ndim == 0 or p.ndim == 0 or v.shape[-1] != X.shape[-1] or p.shape[-1] != K.shape[-1]:
        raise ValueError(
            f"v0 must end in d={X.shape[-1]} and p0 in m={K.shape[-1]}, got {tuple(v.shape)}, {tuple(p.shape)}"
        )
    try:
        batch = torch.Size(validate.batch_shape(v.shape[:-1], p.shape[:-1]))
        if X.ndim > 3:
            validate.batch_shape(batch, X.shape[:-3], Y.shape[:-1])
    except ValueError:
        raise ValueError(
            f"the batch shapes of v0 {tuple(v.shape)}, p0 {tuple(p.shape)} and X {tuple(X.shape)} do not broadcast"
        ) from None
    if math.prod(batch) == 0:
        raise ValueError("v0 and p0 hold no start")
    v, p = v.expand(*batch, v.shape[-1]).clone(), p.expand(*batch, p.shape[-1]).clone()
    steps = validate.count(steps, "steps")
    n, T = X.shape[-3], X.shape[-2]
    record = record_steps(steps, record_every, math.prod(batch) * (p.shape[-1] + v.shape[-1] + 2 + n * T + n))
    bar = progress if progress is not None else progress_enabled(steps * max(p.numel(), 1))
    if X.ndim == 3 and X.device.type == "cpu" and fastpath.available() and fastpath.runs_loss(loss):
        return _train_joint_compiled(X, Y, K, v, p, steps, lr, lr_v, loss, sorted(record), bar)
    rows: dict[str, list] = {k: [] for k in ("step", "p", "v", "loss", "probs", "out")}
    problem = AttentionProblem(K, scores(X, Y, v))  # validated once
    for k in progress_bar(range(steps + 1), enabled=bar, desc="joint GD"):
        problem.gamma = scores(X, Y, v)  # only the scores move with v
        sat = saturation(problem, p)
        if k in record:
            rows["step"].append(k)
            rows["p"].append(p.clone())
            rows["v"].append(v.clone())
            rows["loss"].append(loss.value(sat.u).mean(-1))
            rows["probs"].append(sat.probs)
            rows["out"].append(torch.sigmoid(sat.u))
        if k == steps:
            break
        gp = grad_p(problem, p, loss, sat)
        gv = grad_v(X, Y, sat, loss)
        p = p - lr * gp.direction
        v = v - lr_v * gv
    P, V, loss_rows, probs = (stack_rows(rows[k]) for k in ("p", "v", "loss", "probs"))
    extra = {"output_prob": stack_rows(rows["out"])}
    return History(np.array(rows["step"]), P, safe_norm(P), loss_rows, probs, V, extra)


def _train_joint_compiled(X, Y, K, v, p, steps, lr, lr_v, loss, record, bar) -> History:
    """:func:`train_joint` through the compiled kernel (in chunks); the history is evaluated afterwards."""
    batch = p.shape[:-1]
    arrays = X.numpy(), Y.numpy(), K.numpy(), p.reshape(-1, p.shape[-1]).numpy(), v.reshape(-1, v.shape[-1]).numpy()
    with progress_bar(total=steps, enabled=bar, desc="joint GD") as pbar:
        update = lambda done: pbar.update(done - pbar.n)
        out_p, out_v = fastpath.run_joint(*arrays, steps, lr, lr_v, loss.name, np.array(record), callback=update)
    P = torch.from_numpy(out_p).reshape(len(record), *batch, p.shape[-1])
    V = torch.from_numpy(out_v).reshape(len(record), *batch, v.shape[-1])
    sat = saturation(AttentionProblem(K, scores(X, Y, V)), P)
    extra = {"output_prob": torch.sigmoid(sat.u)}
    return History(np.array(record), P, safe_norm(P), loss.value(sat.u).mean(-1), sat.probs, V, extra)


def grad_v(X: torch.Tensor, Y: torch.Tensor, sat: Saturation, loss: Loss) -> torch.Tensor:
    """Unit direction of ``grad_v L = (1/n) sum_i l'(u_i) Y_i sum_t s_it x_it``, ``(..., d)``; the weights
    ``l'(u_i)`` are rescaled in log space, so the direction survives when they all underflow."""
    loss = get_loss(loss)
    if not isinstance(sat, Saturation):
        raise ValueError(f"sat must be a Saturation (mmtoken.attention.grad.saturation), got {type(sat).__name__}")
    log_w = loss.log_neg_deriv(sat.u)  # (..., n)
    M = log_w.max(-1, keepdim=True).values
    w = -torch.exp(log_w - M) * Y  # l' < 0
    attended = (sat.probs.unsqueeze(-1) * X).sum(-2)  # (..., n, d)
    G = (w.unsqueeze(-1) * attended).sum(-2)
    return unit_and_log_norm(G)[0]  # scaled before the norm: tokens of size 1e200 keep their direction
