"""Where normalized GD from ``p0 = 0`` goes on a batch of instances, and what the selection it reaches is.

Shared by the random-instance studies (chapter 8, ``A.random.*``; chapter 14, ``W`` keys of a transformer):
:func:`train_batch` trains a padded batch of instances in one call (:func:`train_one_by_one`, its reference, one
instance at a time) and :func:`analyse` classifies the selection reached. :func:`train_batches` and
:func:`continue_batches` train several batches, on every core when the work is large (the package's worker pool,
:func:`mmtoken.workers.map_jobs`), the batches cut into pieces of rows there: each row is its own run, trained by
the same call in a worker as in the caller, so the results do not depend on where or in which piece it ran, bit
for bit.
"""

from __future__ import annotations

__all__ = [
    "LOG_SATURATED",
    "DECADE_RECORDS",
    "PARALLEL_WORK",
    "train_batch",
    "continue_batch",
    "train_batches",
    "continue_batches",
    "train_one_by_one",
    "analyse",
]

import numpy as np
import torch

from mmtoken import workers as pool
from mmtoken.attention import geometry, grad, svm, train
from mmtoken.attention.model import AttentionProblem

LOG_SATURATED = -20.0
"""An instance is saturated when in every input the non-selected tokens hold at most ``e^-20`` of the attention
(GD has left the region of finite stationary points and ``||p||`` diverges)."""
DECADE_RECORDS = 10
"""The divergence test looks at ``||p||`` and the loss at every tenth of the last decade of steps: a run *diverges*
when ``||p||`` grows over the decade and the loss (as ``base + excess``, :func:`mmtoken.attention.grad.loss_parts`;
where the excess has underflowed, the largest non-selected log-mass) strictly falls from each record to the next.
A run cycling around a finite stationary point fails it, however small its non-selected mass."""


def train_batch(K, gamma, mask, steps: int, lr: float) -> dict:
    """Normalized GD from ``p0 = 0`` (logistic loss, saturation-safe gradient) on a batch of padded instances.

    Parameters
    ----------
    K : ``(I, n, T, m)`` keys of ``I`` instances (padding anywhere, masked out).
    gamma : ``(I, n, T)`` scores.
    mask : ``(I, n, T)`` booleans, ``True`` on real tokens (an input of one real token carries no gradient).
    steps : number of normalized GD steps.
    lr : step size.

    Returns
    -------
    dict of arrays: ``p (I, m)`` the final iterate, ``alpha (I, n)`` the selection (most attended token of each
    input), ``log_s (I, n, T)`` the log-attention at ``p``, and the divergence test of :data:`DECADE_RECORDS` on
    the last decade of steps: ``diverging``, ``norm_grows``, ``loss_falls`` (booleans) and
    ``norm_growth_last_decade`` (floats), each ``(I,)``.
    """
    pr = AttentionProblem(K, gamma, mask)
    p0 = torch.zeros(pr.K.shape[0], pr.K.shape[-1], dtype=pr.K.dtype, device=pr.K.device)
    every = max(steps // DECADE_RECORDS, 1)
    with torch.inference_mode():
        h = train.train_p(pr, p0, steps=steps, lr=lr, record_every=every, record_probs=False)
        keep = torch.as_tensor(np.asarray(h.steps) >= steps // DECADE_RECORDS)
        P = h.p[keep].to(pr.K.device)  # (R, I, m): steps/10, 2 steps/10, .., steps
        sats = [grad.saturation(pr, q) for q in P]
        sat = sats[-1]
    real = torch.as_tensor(mask, device=pr.K.device)
    log_rest, base, excess = [], [], []
    for q, st in zip(P, sats):
        # largest non-selected log-mass over the inputs of each instance (no underflow)
        is_top = torch.zeros_like(st.log_s, dtype=torch.bool).scatter_(-1, st.top[..., None], True)
        rest = torch.logsumexp(st.log_s.masked_fill(is_top | ~real, float("-inf")), -1)  # (I, n)
        log_rest.append(rest.amax(-1))
        b, e = grad.loss_parts(pr, q, sat=st)  # L = base + excess, the excess kept to its own digits
        base.append(b), excess.append(e)
    log_rest, base, excess = (torch.stack(x).cpu().numpy() for x in (log_rest, base, excess))  # (R, I)
    norm = P.norm(dim=-1).cpu().numpy()  # (R, I)
    dL = np.diff(base, axis=0) + np.diff(excess, axis=0)  # exact 0 in base when the selection is kept
    underflow = (excess[1:] == 0) & (excess[:-1] == 0) & (np.diff(log_rest, axis=0) < 0)
    norm_grows = norm[-1] > norm[0]  # over the decade as a whole: a run still turning may dip between records
    loss_falls = np.all((dL < 0) | underflow, axis=0)
    diverging = norm_grows & loss_falls
    return {
        "p": P[-1].cpu().numpy(),
        "alpha": sat.top.cpu().numpy(),
        "log_s": sat.log_s.cpu().numpy(),
        "diverging": diverging,
        "norm_grows": norm_grows,
        "loss_falls": loss_falls,
        "norm_growth_last_decade": norm[-1] - norm[0],
    }


def continue_batch(K, gamma, mask, p, steps: int, lr: float) -> np.ndarray:
    """Normalized GD (as :func:`train_batch`) from the iterates ``p (I, m)`` for ``steps`` more steps; returns the
    final iterates ``(I, m)``. Normalized GD keeps no state but ``p``: this is the run continued, bit for bit."""
    pr = AttentionProblem(K, gamma, mask)
    with torch.inference_mode():
        h = train.train_p(pr, p, steps=steps, lr=lr, record_every=steps, record_probs=False)
    return h.p[-1].cpu().numpy()


PARALLEL_WORK = 50_000_000
"""Instance-steps (rows times steps, summed over the batches) from which :func:`train_batches` and
:func:`continue_batches` spread the batches over worker processes (below, starting them costs more than it saves:
about a minute of one core's training at ``(n, T, m) = (8, 8, 16)``)."""


def _run_group(func, jobs: list) -> list:
    """``[func(*args) for args in jobs]``: one worker's share of :func:`_map`."""
    return [func(*args) for args in jobs]


def _groups(jobs: list, steps: int, workers: int | None) -> int:
    """How many worker processes :func:`_in_pieces` starts for ``jobs`` (``1``: none, the jobs run here)."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be None or a positive integer, got {workers!r}")
    rows = sum(np.shape(args[0])[0] for args in jobs)
    if workers is None and rows * steps < PARALLEL_WORK:
        return 1
    return max(1, min(rows, workers or pool.cores()))


def _map(func, jobs: list, groups: int) -> list:
    """``[func(*args) for args in jobs]`` (``args[0]`` the keys ``(I, n, T, m)`` of a batch) in ``groups`` worker
    processes. The jobs go to the workers longest first, each to the least loaded (cost: rows times tokens times
    ``m + 32``), one worker process per group of jobs; the results come back in the jobs' order."""
    cost = [np.prod(np.shape(args[0])[:3]) * (np.shape(args[0])[3] + 32) for args in jobs]
    load, share = [0.0] * groups, [[] for _ in range(groups)]
    for i in sorted(range(len(jobs)), key=lambda i: -cost[i]):
        g = load.index(min(load))
        load[g] += cost[i]
        share[g].append(i)
    share = [idx for idx in share if idx]
    done = pool.map_jobs(_run_group, [(func, [jobs[i] for i in idx]) for idx in share], len(share))
    out = [None] * len(jobs)
    for idx, results in zip(share, done):
        for i, res in zip(idx, results):
            out[i] = res
    return out


def _in_pieces(func, jobs: list, arrays: int, join, steps: int, workers: int | None) -> list:
    """``[func(*args) for args in jobs]`` (the first ``arrays`` of each ``args`` indexed by row), spread as in
    :func:`_map`. Each row is its own run (the kernel trains the rows one by one), so in workers the batches are
    cut into pieces of rows, about four a worker, which balance the cores better than whole batches (one batch can
    hold most of the work); ``join`` puts a batch's pieces back together."""
    groups = _groups(jobs, steps, workers)
    if groups <= 1:
        return [func(*args) for args in jobs]
    per = -(-sum(len(args[0]) for args in jobs) // (4 * groups))  # rows per piece
    cuts = [range(0, len(args[0]), per) for args in jobs]
    pieces = [tuple(a[i : i + per] for a in args[:arrays]) + args[arrays:] for args, c in zip(jobs, cuts) for i in c]
    ends = iter(_map(func, pieces, groups))
    return [join([next(ends) for _ in c]) for c in cuts]


def _join_dicts(parts: list[dict]) -> dict:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def train_batches(batches, steps: int, lr: float, workers: int | None = None) -> list[dict]:
    """:func:`train_batch` on each ``(K, gamma, mask)`` of ``batches``; on ``workers`` processes (default: every core
    when the work reaches :data:`PARALLEL_WORK`, else in this process; a number: always that many), the batches cut
    into pieces of rows there. Returns the list of :func:`train_batch`'s results, in the order of ``batches``: the
    same bits wherever they ran."""
    jobs = [(K, g, m, steps, lr) for K, g, m in batches]
    return _in_pieces(train_batch, jobs, 3, _join_dicts, steps, workers)


def continue_batches(batches, steps: int, lr: float, workers: int | None = None) -> list[np.ndarray]:
    """:func:`continue_batch` on each ``(K, gamma, mask, p)`` of ``batches``, spread as in :func:`train_batches`;
    returns the final iterates of each, in the order of ``batches``."""
    jobs = [(K, g, m, p, steps, lr) for K, g, m, p in batches]
    return _in_pieces(continue_batch, jobs, 4, np.concatenate, steps, workers)


def train_one_by_one(K, gamma, mask, steps: int, lr: float) -> np.ndarray:
    """The training of :func:`train_batch`, one instance at a time (its reference and the benchmark's baseline):
    parameters as there; returns the final iterates ``p (I, m)``."""
    out = []
    for j in range(K.shape[0]):
        pr = AttentionProblem(K[j], gamma[j], mask[j])
        with torch.inference_mode():
            h = train.train_p(
                pr, np.zeros(K.shape[-1]), steps=steps, lr=lr, record_every=max(steps, 1), record_probs=False
            )
        out.append(h.p[-1].numpy())
    return np.stack(out)


def analyse(K, gamma, alpha, p, tol: float = 1e-6) -> dict:
    """Classify the selection ``alpha`` GD reached at ``p`` on one instance.

    Parameters
    ----------
    K : ``(n, T, m)`` keys (no padding).
    gamma : ``(n, T)`` scores.
    alpha : ``(n,)`` the selected token of each input.
    p : ``(m,)`` GD's final iterate.
    tol : a constraint of ATT-SVM(alpha) is active (an SVM-neighbour) when its slack is at most ``tol`` relative
        to the largest margin.

    Returns
    -------
    dict: ``global`` (``alpha`` is the optimal selection ``gamma.argmax(-1)``), ``feasible`` (ATT-SVM(alpha) is;
    solved by NNLS, :func:`mmtoken.attention.svm.min_norm_nnls`), ``corr`` (correlation of ``p`` with ``p^mm(alpha)``),
    ``p_mm_norm``, ``gap`` (minimum score gap ``gamma_{i alpha_i} - gamma_it`` over the SVM-neighbours; ``nan``
    when there are none), ``corr_opt`` (correlation with ``p^mm(opt)``, the competitor: 0 where ATT-SVM(opt) is
    infeasible), ``gmm_feasible`` and ``corr_gmm`` (``corr`` when ``alpha`` is global). ``nan`` where undefined.
    """
    n, T, _ = K.shape
    opt = gamma.argmax(-1)
    rows = [(i, t) for i in range(n) for t in range(T) if t != alpha[i]]
    D = np.array([K[i, alpha[i]] - K[i, t] for i, t in rows])
    rec = {
        "global": bool((alpha == opt).all()),
        "feasible": True,
        "corr": np.nan,
        "gap": np.nan,
        "corr_gmm": np.nan,
        "p_mm_norm": np.nan,
        "gmm_feasible": True,
        "corr_opt": 0.0,  # correlation with p_mm(opt), the competitor (0 where ATT-SVM(opt) is infeasible)
    }
    if not rec["global"]:
        D_opt = np.array([K[i, opt[i]] - K[i, t] for i in range(n) for t in range(T) if t != opt[i]])
        try:
            rec["corr_opt"] = float(geometry.correlation(p, svm.min_norm_nnls(D_opt, np.ones(len(D_opt)))))
        except (svm.InfeasibleSVM, RuntimeError):
            rec["gmm_feasible"] = False
    try:
        x = svm.min_norm_nnls(D, np.ones(len(rows)))
    except (svm.InfeasibleSVM, RuntimeError):
        rec["feasible"] = False
        return rec
    slack = D @ x - 1.0
    nb = [rows[j] for j in np.flatnonzero(np.abs(slack) <= tol * max(1.0, np.abs(D @ x).max()))]
    rec["corr"] = float(geometry.correlation(p, x))
    rec["p_mm_norm"] = float(np.linalg.norm(x))
    rec["gap"] = float(min(gamma[i, alpha[i]] - gamma[i, t] for i, t in nb)) if nb else np.nan
    if rec["global"]:
        rec["corr_gmm"] = rec["corr_opt"] = rec["corr"]
    return rec
