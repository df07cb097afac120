"""Paper B's model on real reviews: the gather model, fits, the one-step update, the bag-of-words baseline.

Per-token logits ``a = E p`` and values ``b = E v`` are computed once and gathered per position (:func:`outputs`).
Token ids are ``(N, T)`` integer arrays with ``PAD_ID`` at padding. A review without any in-vocabulary word has no
input: training skips it and every accuracy counts it as an error. Phase two: :mod:`.review_phase_two`.
"""

from __future__ import annotations

__all__ = [
    "outputs",
    "collapse",
    "length_batches",
    "Chunks",
    "Params",
    "FitHistory",
    "fit",
    "one_step_E",
    "one_step_closed_form",
    "predict",
    "evaluate",
    "presence",
    "bow_logistic",
    "top_decile",
]

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy import sparse

from mmtoken import config
from mmtoken.datasets.tokenize import PAD_ID
from mmtoken.embeddings.embedding import gather_outputs


def outputs(
    a: torch.Tensor, b: torch.Tensor, tokens: torch.Tensor, counts: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Model output ``(B,)`` and attention ``(B, T)`` from per-token logits ``a (V,)`` and values ``b (V,)``.

    ``tokens (B, T)``: every row holds a token. ``counts (B, T)``: occurrences of each entry of collapsed rows
    (:func:`collapse`). :func:`mmtoken.embeddings.embedding.gather_outputs` with the padding mask.
    """
    return gather_outputs(a, b, tokens, tokens != PAD_ID, counts)


def collapse(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's distinct tokens and how often each occurs: ``(ids, counts)``, both ``(N, U)``.

    ``U`` is the largest number of distinct tokens in a row; ids are sorted within a row, padded with ``PAD_ID``
    (count 0). :func:`outputs` on the collapsed rows equals it on the original ones at 62% of the work (IMDB).
    """
    tokens = np.asarray(tokens)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must have shape (N, T), got {tokens.shape}")
    N, T = tokens.shape
    S = np.sort(tokens, axis=1)  # padding (0) first, then the ids in order
    start = np.ones_like(S, dtype=bool)
    start[:, 1:] = S[:, 1:] != S[:, :-1]
    start &= S != PAD_ID
    flat = np.flatnonzero(start)
    row = flat // T
    end = np.minimum(np.append(flat[1:], N * T), (row + 1) * T)  # the run of each distinct id ends there
    rank = np.cumsum(start, axis=1)[start] - 1
    U = max(int(start.sum(1).max()) if N else 0, 1)
    ids = np.zeros((N, U), dtype=tokens.dtype)
    counts = np.zeros((N, U), dtype=np.int32)
    ids[row, rank] = S.ravel()[flat]
    counts[row, rank] = end - flat
    return ids, counts


def _trim(tokens: torch.Tensor) -> torch.Tensor:
    """Drop the all-padding columns at the right of a batch."""
    width = int((tokens != PAD_ID).sum(-1).max())
    return tokens[:, : max(width, 1)]


def length_batches(lengths: np.ndarray, batch: int, gen: torch.Generator, pool: int = 50) -> list[torch.Tensor]:
    """One epoch of mini-batches (row indices) that group reviews of similar length.

    A random permutation is cut into pools of ``pool`` batches, each pool sorted by length and cut into batches,
    and all batches shuffled: every row appears once, and trimming the padding saves most of the work.
    """
    if batch < 1 or pool < 1:
        raise ValueError(f"batch and pool must be at least 1, got {batch}, {pool}")
    lengths = torch.as_tensor(np.asarray(lengths))
    perm = torch.randperm(lengths.numel(), generator=gen)
    out = []
    for k in range(0, perm.numel(), batch * pool):
        chunk = perm[k : k + batch * pool]
        chunk = chunk[torch.argsort(lengths[chunk], stable=True)]
        out.extend(chunk[j : j + batch] for j in range(0, chunk.numel(), batch))
    order = torch.randperm(len(out), generator=gen)
    return [out[int(i)] for i in order]


@dataclass
class Chunks:
    """A data set cut once into chunks for full passes: rows (each with a token) collapsed (:func:`collapse`),
    sorted by their number of distinct tokens; ``rows`` maps each chunk row back to its index in the input."""

    tokens: list[torch.Tensor]
    counts: list[torch.Tensor]
    labels: list[torch.Tensor]
    rows: list[np.ndarray]
    n: int

    @classmethod
    def build(
        cls, tokens: np.ndarray, labels: np.ndarray, size: int = 2048, dtype=torch.float32, device=None
    ) -> Chunks:
        tokens, labels = np.asarray(tokens), np.asarray(labels)
        if tokens.ndim != 2 or labels.shape != (tokens.shape[0],):
            raise ValueError(f"tokens must be (N, T) and labels (N,), got {tokens.shape} and {labels.shape}")
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        ids, counts = collapse(tokens)
        lengths = (ids != PAD_ID).sum(1)
        if np.any(lengths == 0):
            raise ValueError("tokens holds a row without any token; remove it first (it has no input)")
        order = np.argsort(lengths, kind="stable")
        dev = device or config.device()
        out = cls([], [], [], [], int(order.size))
        for k in range(0, order.size, size):
            idx = order[k : k + size]
            w = int(lengths[idx].max())
            out.tokens.append(torch.as_tensor(ids[idx, :w], dtype=torch.long, device=dev))
            out.counts.append(torch.as_tensor(counts[idx, :w], dtype=dtype, device=dev))
            out.labels.append(torch.as_tensor(labels[idx], dtype=dtype, device=dev))
            out.rows.append(idx)
        return out

    def __iter__(self):
        return iter(zip(self.tokens, self.counts, self.labels))


@dataclass
class Params:
    """The embedding table ``E (V, d)``, the <cls> embedding ``p (d,)`` and the head ``v (d,)``."""

    E: torch.Tensor
    p: torch.Tensor
    v: torch.Tensor

    def per_token(self) -> tuple[np.ndarray, np.ndarray]:
        """``(E p, E v)`` as float64 arrays ``(V,)``."""
        with torch.no_grad():
            return (self.E @ self.p).double().cpu().numpy(), (self.E @ self.v).double().cpu().numpy()


@dataclass
class FitHistory:
    """Mean training loss and (if a validation set was given) validation accuracy after each epoch."""

    loss: list[float] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)


def fit(
    params: Params,
    tokens: torch.Tensor,
    y: torch.Tensor,
    *,
    train: tuple[str, ...],
    epochs: int,
    lr: float,
    batch: int,
    seed: int,
    counts: torch.Tensor | None = None,
    warmup: int = 0,
    val: tuple[Chunks, int] | None = None,
) -> FitHistory:
    """Adam on the named parameters (``"E"``, ``"p"``, ``"v"``) with the logistic loss.

    Parameters
    ----------
    params : updated in place.
    tokens, y : ``(N, T)`` ids (every row with a token) and labels ``(N,)`` of ``+1``/``-1``.
    counts : ``(N, T)`` occurrences of each id if the rows are collapsed (:func:`collapse`).
    train : names of the trained parameters.
    epochs, lr, batch, seed, warmup : passes, Adam step, reviews per batch, batch order, epochs of warm-up (0: none).
    val : ``(chunks, n_empty)`` of a validation set: its accuracy is recorded after each epoch.
    """
    if epochs < 0 or lr <= 0 or warmup < 0 or not set(train) <= {"E", "p", "v"} or not train:
        raise ValueError(
            f"need epochs >= 0, lr > 0, warmup >= 0 and train within E, p, v; got {epochs}, {lr}, {warmup}, {train}"
        )
    names = [n for n in ("E", "p", "v") if n in train]
    leaves = {n: getattr(params, n).detach().clone().requires_grad_(n in names) for n in ("E", "p", "v")}
    opt = torch.optim.Adam([leaves[n] for n in names], lr=lr)
    gen = torch.Generator().manual_seed(seed)
    lengths = (tokens != PAD_ID).sum(-1).cpu().numpy()
    per_epoch = math.ceil(tokens.shape[0] / batch)
    ramp = max(warmup * per_epoch, 1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: min(1.0, (k + 1) / ramp) if warmup else 1.0)
    history = FitHistory()
    # a bar over batches where someone watches a long fit (a Jupyter kernel, a terminal); off in builds
    bar = config.progress_bar(
        total=epochs * per_epoch,
        desc=f"fit {'+'.join(names)}",
        enabled=config.progress_enabled(epochs * tokens.numel()),
    )
    for _ in range(epochs):
        total = 0.0
        for idx in length_batches(lengths, batch, gen):
            bar.update(1)
            idx = idx.to(tokens.device)
            tok = _trim(tokens[idx])
            cnt = None if counts is None else counts[idx, : tok.shape[1]]
            f, _ = outputs(leaves["E"] @ leaves["p"], leaves["E"] @ leaves["v"], tok, cnt)
            loss = torch.nn.functional.softplus(-y[idx] * f).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * idx.numel()
        history.loss.append(total / tokens.shape[0])
        if val is not None:
            current = Params(leaves["E"].detach(), leaves["p"].detach(), leaves["v"].detach())
            history.val_accuracy.append(evaluate(current, *val)["accuracy"])
    bar.close()
    for n in ("E", "p", "v"):
        setattr(params, n, leaves[n].detach())
    return history


def one_step_E(params: Params, data: Chunks) -> tuple[Params, float]:
    """One full-batch gradient step on ``E`` at ``p = 0`` of size ``eta = 1 / max_s ||grad_{E_s} L||`` (the largest
    row moves by one), in the dtype of ``params.E``. Returns the new parameters and ``eta``."""
    E = params.E.detach().clone().requires_grad_(True)
    for tok, cnt, y in data:
        f, _ = outputs(E @ params.p, E @ params.v, tok, cnt)
        (torch.nn.functional.softplus(-y.to(E.dtype) * f).sum() / data.n).backward()
    g = E.grad
    eta = 1.0 / float(g.norm(dim=1).max())
    return Params((params.E - eta * g).detach(), params.p.clone(), params.v.clone()), eta


def one_step_closed_form(tokens: np.ndarray, labels: np.ndarray, f0: np.ndarray, V: int) -> np.ndarray:
    """The coefficient ``c_s = (1/N) sum_i y_i sigma(-y_i f0_i) n_s(X_i) / T_i``, ``(V,)``, from token counts.

    At ``p = 0``, ``grad_{E_s} L = -c_s v``, so a step ``eta`` gives ``E^1_s v - E^0_s v = eta c_s ||v||^2``: a
    NumPy check of :func:`one_step_E`. ``tokens (N, T)`` (rows hold a token), ``f0 (N,)`` the outputs at ``E^0``.
    """
    tokens, labels, f0 = np.asarray(tokens), np.asarray(labels, dtype=float), np.asarray(f0, dtype=float)
    valid = tokens != PAD_ID
    lengths = valid.sum(1)
    if np.any(lengths == 0):
        raise ValueError("tokens holds a row without any token")
    weight = labels / (1.0 + np.exp(labels * f0)) / lengths  # y_i sigma(-y_i f_i) / T_i
    rows = np.repeat(np.arange(tokens.shape[0]), tokens.shape[1])[valid.ravel()]
    return np.bincount(tokens.ravel()[valid.ravel()], weights=weight[rows], minlength=V) / tokens.shape[0]


@torch.no_grad()
def predict(params: Params, data: Chunks) -> np.ndarray:
    """Outputs ``f (N,)`` of the model on ``data`` (float64, in the original row order)."""
    a, b = params.E @ params.p, params.E @ params.v
    out = np.empty(data.n)
    for (tok, cnt, _), rows in zip(data, data.rows):
        out[rows] = outputs(a, b, tok, cnt)[0].double().cpu().numpy()
    return out


@torch.no_grad()
def evaluate(params: Params, data: Chunks, n_empty: int = 0, top: torch.Tensor | None = None) -> dict:
    """Accuracy (``n_empty`` empty reviews count as errors), loss and, if ``top (V,)`` is given, the attention mass
    on the ``top`` tokens; ``selection`` = that mass over the tokens' mean share of positions."""
    if n_empty < 0:
        raise ValueError(f"n_empty must be >= 0, got {n_empty}")
    a, b = params.E @ params.p, params.E @ params.v
    correct, mass, share, loss = 0, 0.0, 0.0, 0.0
    for tok, cnt, y in data:
        f, s = outputs(a, b, tok, cnt)
        correct += int(((f > 0) == (y > 0)).sum())
        loss += float(torch.nn.functional.softplus(-y.to(f.dtype) * f).sum())
        if top is not None:
            hit = top[tok] & (tok != PAD_ID)
            mass += float((s * hit).sum())
            share += float(((cnt * hit).sum(-1) / cnt.sum(-1)).sum())
    n = data.n
    out = {"accuracy": correct / (n + n_empty), "loss": loss / n, "n": n, "n_empty": n_empty}
    if top is not None:
        out.update(top_mass=mass / n, top_share=share / n, selection=(mass / share) if share > 0 else float("nan"))
    return out


# ----------------------------------------------------------------------------- bag of words
def presence(tokens: np.ndarray, V: int) -> sparse.csr_matrix:
    """Binary bag of words: ``X[i, s] = 1`` if token ``s`` occurs in row ``i`` (padding excluded)."""
    tokens = np.asarray(tokens)
    rows = np.repeat(np.arange(tokens.shape[0]), tokens.shape[1])
    cols = tokens.ravel()
    keep = cols != PAD_ID
    X = sparse.csr_matrix((np.ones(int(keep.sum())), (rows[keep], cols[keep])), shape=(tokens.shape[0], V))
    X.sum_duplicates()
    X.data[:] = 1.0
    return X


def _csr(X: sparse.csr_matrix, device) -> torch.Tensor:
    X = X.tocsr()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(
            torch.as_tensor(X.indptr, dtype=torch.int64),
            torch.as_tensor(X.indices, dtype=torch.int64),
            torch.as_tensor(X.data, dtype=torch.float64),
            size=X.shape,
            check_invariants=False,
        ).to(device)


def bow_logistic(
    train_tok: np.ndarray,
    y: np.ndarray,
    eval_tok: dict[str, tuple[np.ndarray, np.ndarray]],
    V: int,
    C: float = 1.0,
    iters: int = 100,
) -> dict:
    """Binary bag-of-words logistic regression, evaluated on the named sets of ``eval_tok``.

    Minimises ``sum_i log(1 + exp(-y_i (w^T x_i + c))) + ||w||^2 / (2C)`` by L-BFGS (strong Wolfe) on a sparse
    design matrix. ``eval_tok`` maps a name to ``(tokens, labels)``; an empty review counts as an error.
    Returns ``{"accuracy": {name: ...}, "train_accuracy", "iterations", "w"}``.
    """
    if C <= 0 or iters < 1:
        raise ValueError(f"C must be > 0 and iters >= 1, got {C}, {iters}")
    dev = config.device()
    Xs = presence(train_tok, V)
    X, XT = _csr(Xs, dev), _csr(Xs.T, dev)
    yt = torch.as_tensor(np.asarray(y, dtype=float), device=dev)
    theta = torch.zeros(V + 1, dtype=torch.float64, device=dev, requires_grad=True)
    opt = torch.optim.LBFGS(
        [theta],
        lr=1.0,
        max_iter=iters,
        history_size=20,
        line_search_fn="strong_wolfe",
        tolerance_grad=1e-8,
        tolerance_change=1e-12,
    )

    def closure():
        # the gradient is formed by hand (sparse products), then handed to the optimiser
        with torch.no_grad():
            w, c = theta[:-1], theta[-1]
            m = yt * (X @ w + c)
            loss = torch.nn.functional.softplus(-m).sum() + (w @ w) / (2 * C)
            r = -yt * torch.sigmoid(-m)
            theta.grad = torch.cat([XT @ r + w / C, r.sum().reshape(1)])
        return loss

    opt.step(closure)
    w, c = theta.detach()[:-1], theta.detach()[-1]

    def accuracy(tok, labels):
        tok, labels = np.asarray(tok), np.asarray(labels, dtype=float)
        score = (_csr(presence(tok, V), dev) @ w + c).cpu().numpy()
        has = (tok != PAD_ID).any(1)
        return float(((np.sign(score) == labels) & has).mean())

    return {
        "accuracy": {name: accuracy(*pair) for name, pair in eval_tok.items()},
        "train_accuracy": accuracy(train_tok, y),
        "iterations": int(opt.state_dict()["state"][0]["n_iter"]),
        "w": w.cpu().numpy(),
    }


def top_decile(count: np.ndarray, delta: np.ndarray, min_count: int = 20) -> np.ndarray:
    """Tokens (seen at least ``min_count`` times) in the top decile of ``|Delta_s|``, bool ``(V,)``."""
    keep = (np.asarray(count) >= min_count) & np.isfinite(delta)
    if not keep.any():
        raise ValueError(f"no token is seen {min_count} times")
    cut = np.quantile(np.abs(delta[keep]), 0.9)
    return keep & (np.abs(np.nan_to_num(delta)) >= cut)
