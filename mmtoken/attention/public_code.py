"""A replica of paper A's public code: float32 autograd through the softmax, the way the figures were made.

The authors' notebooks (``MaxMarginTokenSelection/*.ipynb`` with ``base.py`` in
``github.com/ucr-optml/max_margin_attention``) train the tunable token with

* an ``nn.Module`` holding a prompt ``p (d,)``, a head ``w (d,)``, a query and a key map
  (``nn.Linear(d, d, bias=False)``, set to ``diag(1, 1, 0)`` for the planar figures, or the identity) and the
  identity as value map; the output is ``softmax(Q K^T) V w`` read at the prompt;
* the loss written as ``torch.log(1 + torch.exp(-Y * f))``, averaged over inputs;
* autograd in float32, then the gradient of the prompt divided in place by ``||g|| + eps`` (:data:`EPS_FIG1`,
  :data:`EPS_FIG2`);
* one ``torch.optim.SGD`` step with ``lr = 0.1``.

:func:`public_normalized_gd` does exactly that, for every start at once: the prompt is a ``(S, d)`` parameter and
the loss the sum over starts of each start's mean loss (so each row of the gradient is that start's own, bit for
bit), each row normalized on its own. The module's throw-away random initial weights are drawn as the public code
draws them, inside :func:`torch.random.fork_rng` (the caller's random state is left as it was).

This is the computation the book shows to fail once the softmax saturates (the saturation appendix).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from mmtoken import config
from mmtoken.attention.instances import Instance
from mmtoken.attention.train import History

EPS_FIG1 = 1e-9
"""The public code's ``||g|| + eps`` in the single-input (Fig. 1) and loss (Fig. 4) notebooks."""
EPS_FIG2 = 1e-12
"""The same constant in the several-input (Fig. 2) notebook."""


class PromptAttention(nn.Module):
    """The public code's attention model with ``S`` prompts trained side by side.

    ``f_s(X_i) = w^T V^T softmax(K_i q_s)`` with ``q_s = W_q p_s``, ``K_i = X_i W_k^T`` and ``V = X_i``.

    Parameters
    ----------
    d : token dimension.
    starts : ``S`` number of prompts (one per start).
    weight : ``(d, d)`` weight of both the key and the query map, or None for the identity maps.
    dtype : float32 as published; float64 gives the same computation in double precision.
    """

    def __init__(self, d: int, starts: int, weight: torch.Tensor | None = None, dtype: torch.dtype = torch.float32):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            if weight is None:
                self.query, self.key = nn.Identity(), nn.Identity()
            else:
                self.query = nn.Linear(d, d, bias=False, dtype=dtype)
                self.key = nn.Linear(d, d, bias=False, dtype=dtype)
                self.query.weight.data = weight.to(dtype).clone()
                self.key.weight.data = weight.to(dtype).clone()
            self.value = nn.Identity()
            self.w = nn.Parameter(torch.randn(d, dtype=dtype) * 0.01)  # overwritten by the caller
            self.prompt = nn.Parameter(torch.randn(starts, d, dtype=dtype) * 0.01)
        self.attention: torch.Tensor | None = None

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """``X (n, T, d)`` -> outputs ``(S, n)``; keeps the attention ``(S, n, T)`` in :attr:`attention`."""
        Q = self.query(self.prompt)[:, None, None, :]  # (S, 1, 1, d)
        K = self.key(X)  # (n, T, d)
        A = torch.softmax(Q @ K.transpose(-2, -1), dim=-1)  # (S, n, 1, T)
        self.attention = A[..., 0, :]
        out = A @ self.value(X)  # (S, n, 1, d)
        return out[..., 0, :] @ self.w


def _check(X, Y, v, starts, weight, steps, lr, eps, record_every):
    if X.ndim != 3:
        raise ValueError(f"X must have shape (n, T, d), got {tuple(X.shape)}")
    n, T, d = X.shape
    if Y.shape != (n,):
        raise ValueError(f"Y must have shape ({n},), got {tuple(Y.shape)}")
    if v.shape != (d,):
        raise ValueError(f"v must have shape ({d},), got {tuple(v.shape)}")
    if starts.ndim != 2 or starts.shape[1] != d:
        raise ValueError(f"starts must have shape (S, {d}) (prompts in token space), got {tuple(starts.shape)}")
    if weight is not None and weight.shape != (d, d):
        raise ValueError(f"weight must have shape ({d}, {d}), got {tuple(weight.shape)}")
    if steps < 0 or record_every < 1:
        raise ValueError(f"steps must be >= 0 and record_every >= 1, got {steps}, {record_every}")
    if lr <= 0 or eps < 0:
        raise ValueError(f"lr must be > 0 and eps >= 0, got lr={lr}, eps={eps}")


def public_normalized_gd(
    X,
    Y,
    v,
    starts,
    *,
    steps: int,
    lr: float = 0.1,
    eps: float = EPS_FIG1,
    weight=None,
    dtype: torch.dtype = torch.float32,
    record_every: int = 1,
) -> History:
    """Normalized GD on the prompt exactly as the public code runs it, every start at once.

    Parameters
    ----------
    X : ``(n, T, d)`` tokens; Y : ``(n,)`` labels; v : ``(d,)`` head (fixed).
    starts : ``(S, d)`` initial prompts, in token space (e.g. ``(0, y, 0)`` for Fig. 1).
    steps : SGD steps; lr : its learning rate.
    eps : the constant of ``g / (||g|| + eps)``.
    weight : ``(d, d)`` key and query map (``diag(1, 1, 0)`` for the planar figures), None for identity.
    dtype : float32 (the public code) or float64 (the same computation in double precision).
    record_every : thinning of the recorded history (the last step is always recorded).

    Returns
    -------
    History with ``p (R, S, d)`` (prompts, in token space), ``norm (R, S)``, ``loss (R, S)`` (the
    loss as this code computes it) and ``probs (R, S, n, T)`` (its attention); ``extra["grad_norm"]``
    holds ``||g||`` before normalization (``(R, S)``; the last row, after the final step, is NaN).
    """
    t = lambda a: torch.as_tensor(np.asarray(a, dtype=float)).to(dtype)
    X, Y, v, starts = t(X), t(Y), t(v), t(starts)
    weight = None if weight is None else t(weight)
    _check(X, Y, v, starts, weight, steps, lr, eps, record_every)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: a thread pool only adds overhead (10x on a busy CPU)
    try:
        return _loop(X, Y, v, starts, weight, dtype, steps, lr, eps, record_every)
    finally:
        torch.set_num_threads(threads)


def _loop(X, Y, v, starts, weight, dtype, steps, lr, eps, record_every) -> History:
    model = PromptAttention(X.shape[-1], starts.shape[0], weight, dtype)
    model.prompt.data = starts.clone()
    model.w.data = v.clone()
    optimizer = torch.optim.SGD([model.prompt], lr=lr)
    record = set(range(0, steps + 1, record_every)) | {steps}
    rows: dict[str, list] = {"step": [], "p": [], "loss": [], "probs": [], "gnorm": []}
    # one autograd step per iteration (~1 ms): a reader in Jupyter sees a bar on long runs
    bar = config.progress_enabled(steps, threshold=5_000)
    for it in config.progress_bar(range(steps + 1), desc="public code", enabled=bar):
        optimizer.zero_grad()
        loss = torch.log(1 + torch.exp(-Y * model(X))).mean(-1)  # (S,): each start's mean loss
        if it in record:
            rows["step"].append(it)
            rows["p"].append(model.prompt.detach().clone())
            rows["loss"].append(loss.detach().clone())
            rows["probs"].append(model.attention.detach().clone())
        if it == steps:  # recorded (the last step always is), with no gradient after it
            rows["gnorm"].append(torch.full((starts.shape[0],), float("nan"), dtype=dtype))
            break
        loss.sum().backward()  # row s of the gradient = start s's
        g = model.prompt.grad
        gn = g.norm(dim=-1, keepdim=True)
        if it in record:
            rows["gnorm"].append(gn[:, 0].clone())
        g /= gn + eps  # the public normalization
        optimizer.step()
    P = torch.stack(rows["p"]).double()
    return History(
        np.array(rows["step"]),
        P,
        P.norm(dim=-1),
        torch.stack(rows["loss"]).double(),
        torch.stack(rows["probs"]).double(),
        extra={"grad_norm": torch.stack(rows["gnorm"]).double()},
    )


def token_space_weight(W) -> np.ndarray:
    """The public code's ``(d, d)`` key/query weight for the package's key map ``W (d, m)``: ``W W^T``.

    For the planar figures this is ``diag(1, 1, 0)``. Requires orthonormal columns (then the logits
    ``<W W^T p, W W^T x>`` equal ``<W^T p, W^T x>``).
    """
    W = np.asarray(W, dtype=float)
    if W.ndim != 2 or not np.allclose(W.T @ W, np.eye(W.shape[1])):
        raise ValueError("W must be a (d, m) matrix with orthonormal columns")
    return W @ W.T


def run_instance(
    inst: Instance,
    *,
    steps: int,
    lr: float = 0.1,
    eps: float = EPS_FIG1,
    dtype: torch.dtype = torch.float32,
    record_every: int = 1,
    starts=None,
) -> History:
    """:func:`public_normalized_gd` on a package :class:`~mmtoken.attention.instances.Instance`.

    The starts (``inst.starts`` unless given, ``(S, m)`` in key space) are lifted to token space (``p W^T``); the
    returned ``p`` are projected back (``p W``), ``(R, S, m)``, to compare with the package's trainers.
    """
    W = np.asarray(inst.W, dtype=float)
    weight = token_space_weight(W)
    starts = np.asarray(inst.starts if starts is None else starts, dtype=float)
    if starts.ndim != 2 or starts.shape[1] != W.shape[1]:
        raise ValueError(f"starts must have shape (S, {W.shape[1]}), got {starts.shape}")
    h = public_normalized_gd(
        inst.X,
        inst.Y,
        inst.v,
        starts @ W.T,
        steps=steps,
        lr=lr,
        eps=eps,
        weight=weight,
        dtype=dtype,
        record_every=record_every,
    )
    P = h.p @ torch.as_tensor(W)
    return History(h.steps, P, P.norm(dim=-1), h.loss, h.probs, extra=h.extra)


__all__ = ["PromptAttention", "public_normalized_gd", "run_instance", "token_space_weight", "EPS_FIG1", "EPS_FIG2"]
