"""Training paper B's model on real reviews: the gather model, fits, the one-step update, evaluation, baselines.

The model depends on ``E`` only through the per-token numbers ``a = E p``
(attention logit) and ``b = E v`` (value), so each step computes those two
vectors once and gathers them per position (:func:`outputs`). Used by
:mod:`mmtoken.experiments.real_reviews`.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from scipy import sparse
from scipy.stats import spearmanr

from . import config
from .datasets.tokenize import PAD_ID
from .tokens import TokenStats


def outputs(a: torch.Tensor, b: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Model output and attention from per-token logits ``a = E p`` and values ``b = E v``.

    ``tokens`` is ``(B, T)`` with ``PAD_ID`` at padding (each row holds a token).
    Equals :func:`mmtoken.embedding.forward`, at the cost of two gathers.
    """
    mask = tokens != PAD_ID
    z = a[tokens].masked_fill(~mask, float("-inf"))
    s = torch.softmax(z, dim=-1)
    return (s * b[tokens]).sum(-1), s


def _batches(n: int, batch: int, gen: torch.Generator | None):
    order = torch.randperm(n, generator=gen) if gen is not None else torch.arange(n)
    for k in range(0, n, batch):
        yield order[k:k + batch]


def _trim(tokens: torch.Tensor) -> torch.Tensor:
    """Drop the all-padding columns at the right of a batch."""
    width = int((tokens != PAD_ID).sum(-1).max())
    return tokens[:, :max(width, 1)]


@dataclass
class Params:
    E: torch.Tensor
    p: torch.Tensor
    v: torch.Tensor

    def per_token(self) -> tuple[np.ndarray, np.ndarray]:
        with torch.no_grad():
            return (self.E @ self.p).double().cpu().numpy(), (self.E @ self.v).double().cpu().numpy()


def fit(params: Params, tokens: torch.Tensor, y: torch.Tensor, *, train: tuple[str, ...], epochs: int,
        lr: float, batch: int, seed: int) -> list[float]:
    """Adam on the named parameters (``"E"``, ``"p"``, ``"v"``) with the logistic loss; mean loss per epoch."""
    names = [n for n in ("E", "p", "v") if n in train]
    leaves = {n: getattr(params, n).detach().clone().requires_grad_(n in names) for n in ("E", "p", "v")}
    opt = torch.optim.Adam([leaves[n] for n in names], lr=lr)
    gen = torch.Generator().manual_seed(seed)
    history = []
    for _ in range(epochs):
        total = 0.0
        for idx in _batches(tokens.shape[0], batch, gen):
            idx = idx.to(tokens.device)
            tok = _trim(tokens[idx])
            a, b = leaves["E"] @ leaves["p"], leaves["E"] @ leaves["v"]
            f, _ = outputs(a, b, tok)
            loss = torch.nn.functional.softplus(-y[idx] * f).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item() * idx.numel()
        history.append(total / tokens.shape[0])
    for n in ("E", "p", "v"):
        setattr(params, n, leaves[n].detach())
    return history


def one_step_E(params: Params, tokens: torch.Tensor, y: torch.Tensor, chunk: int = 2048) -> tuple[Params, float]:
    """One full-batch gradient step on ``E`` at ``p = 0``, of size ``eta = 1 / max_s ||grad_{E_s} L||``.

    So the largest row moves by exactly one. Returns the new parameters and ``eta``.
    """
    E = params.E.detach().clone().requires_grad_(True)
    n = tokens.shape[0]
    for k in range(0, n, chunk):
        tok = _trim(tokens[k:k + chunk])
        f, _ = outputs(E @ params.p, E @ params.v, tok)
        (torch.nn.functional.softplus(-y[k:k + chunk] * f).sum() / n).backward()
    g = E.grad
    eta = 1.0 / float(g.norm(dim=1).max())
    return Params(params.E - eta * g, params.p.clone(), params.v.clone()), eta


@torch.no_grad()
def evaluate(params: Params, tokens: torch.Tensor, y: torch.Tensor, top: torch.Tensor,
             chunk: int = 2048) -> dict:
    """Accuracy, and attention mass on ``top`` tokens against their share of positions."""
    a, b = params.E @ params.p, params.E @ params.v
    correct, mass, share, loss = 0, 0.0, 0.0, 0.0
    for k in range(0, tokens.shape[0], chunk):
        tok = _trim(tokens[k:k + chunk])
        f, s = outputs(a, b, tok)
        yk = y[k:k + chunk]
        correct += int(((f > 0) == (yk > 0)).sum())
        loss += float(torch.nn.functional.softplus(-yk * f).sum())
        hit = top[tok] & (tok != PAD_ID)
        mass += float((s * hit).sum())
        share += float((hit.sum(-1) / (tok != PAD_ID).sum(-1)).sum())
    n = tokens.shape[0]
    return {"accuracy": correct / n, "loss": loss / n, "top_mass": mass / n, "top_share": share / n,
            "selection": (mass / share) if share > 0 else float("nan")}


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
        return torch.sparse_csr_tensor(torch.as_tensor(X.indptr, dtype=torch.int64),
                                       torch.as_tensor(X.indices, dtype=torch.int64),
                                       torch.as_tensor(X.data, dtype=torch.float64), size=X.shape,
                                       check_invariants=False).to(device)


def bow_logistic(train_tok: np.ndarray, y: np.ndarray, test_tok: np.ndarray, y_test: np.ndarray,
                 V: int, C: float = 1.0, iters: int = 100) -> dict:
    """Binary bag-of-words logistic regression.

    Minimises ``sum_i log(1 + exp(-y_i (w^T x_i + b))) + ||w||^2 / (2C)`` with
    L-BFGS (``torch.optim.LBFGS``, strong Wolfe line search) on a sparse
    design matrix; ``C = 1`` is the usual default.
    """
    dev = config.device()
    Xs = presence(train_tok, V)
    X, XT, Xt = _csr(Xs, dev), _csr(Xs.T, dev), _csr(presence(test_tok, V), dev)
    y = torch.as_tensor(np.asarray(y, dtype=float), device=dev)
    y_test = torch.as_tensor(np.asarray(y_test, dtype=float), device=dev)
    w = torch.zeros(V, dtype=torch.float64, device=dev)
    b = torch.zeros(1, dtype=torch.float64, device=dev)
    theta = torch.zeros(V + 1, dtype=torch.float64, device=dev, requires_grad=True)
    opt = torch.optim.LBFGS([theta], lr=1.0, max_iter=iters, history_size=20, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-8, tolerance_change=1e-12)

    def closure():
        # the gradient is formed by hand (sparse products), then handed to the optimiser
        with torch.no_grad():
            w, b = theta[:-1], theta[-1]
            m = y * (X @ w + b)
            loss = torch.nn.functional.softplus(-m).sum() + (w @ w) / (2 * C)
            r = -y * torch.sigmoid(-m)
            theta.grad = torch.cat([XT @ r + w / C, r.sum().reshape(1)])
        return loss

    opt.step(closure)
    w, b = theta.detach()[:-1], theta.detach()[-1]
    acc = lambda A, yy: float((torch.sign(A @ w + b) == yy).double().mean())
    return {"accuracy": acc(Xt, y_test), "train_accuracy": acc(X, y),
            "iterations": int(opt.state[opt._params[0]]["n_iter"]), "w": w.cpu().numpy()}


# ----------------------------------------------------------------------------- metrics
def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation (``nan`` when one side is constant, e.g. ``p = 0``)."""
    x, y = np.asarray(x), np.asarray(y)
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(spearmanr(x, y).statistic)


def token_metrics(a: np.ndarray, b: np.ndarray, stats: TokenStats) -> dict:
    """Alignment and U-shape correlations over tokens seen at least 20 / 100 times in training."""
    out = {}
    for k in (20, 100):
        keep = stats.count >= k
        out[f"align_{k}"] = spearman(b[keep], stats.alpha[keep])
        out[f"ushape_{k}"] = spearman(a[keep], np.abs(stats.delta[keep]))
        out[f"signed_{k}"] = spearman(a[keep], stats.delta[keep])
    return out


def top_decile(stats: TokenStats, min_count: int = 20) -> np.ndarray:
    """Tokens (seen at least ``min_count`` times) in the top decile of ``|Delta_s|``."""
    keep = stats.count >= min_count
    cut = np.quantile(np.abs(stats.delta[keep]), 0.9)
    return keep & (np.abs(np.nan_to_num(stats.delta)) >= cut)
