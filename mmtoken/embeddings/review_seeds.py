"""What chapter 12 computes per held-out seed and once per data set, through the one store.

Per seed (:func:`run_seed`): the two-phase protocol, the attention runs and a few examples. Once per data set
(:func:`profile`): the bag-of-words baseline and how the data meet paper B's data model. Each is kept by the store
(:mod:`mmtoken.book.resultcache`) as ``real_reviews/<data set>/seed<k>`` and ``real_reviews/<data set>/profile``,
keyed by :func:`seed_result` and :func:`profile_result`: the setup, the data and the code that computes it.
"""

from __future__ import annotations

__all__ = [
    "two_phase",
    "examples",
    "run_seed",
    "SEED_DTYPE",
    "stored_precision",
    "run_bow",
    "profile",
    "seed_result",
    "profile_result",
    "cached_seed",
    "cached_profile",
]

import time

import numpy as np
import torch

from mmtoken import config
from mmtoken.datasets import text, tokenize
from mmtoken.embeddings import corpus_stats, review_model, review_phase_two
from mmtoken.embeddings.review_model import Chunks, Params
from mmtoken.embeddings.review_runs import (
    RUNS,
    TOP_COUNT,
    U_COUNT,
    Data,
    ResultKey,
    Setup,
    describe,
    init,
    prepare,
    tensors,
    train_model,
    verbatim_overlap,
)


# ----------------------------------------------------------------------------- the two-phase protocol
def two_phase(
    s: Setup, data: Data, v: torch.Tensor, E_small: torch.Tensor, top: torch.Tensor, conflicts: bool = False
) -> tuple[dict, dict]:
    """One step on E from ``E_small`` at ``p = 0`` (float64), the scan ``p = c v``, then phase two on ``p``.

    Phase two runs on the training split, its end point is evaluated on the test split. ``attends_optimal``: share
    of training reviews that attend most to their optimal token; ``conflicts``: also check the selection's feasibility.
    """
    c = data.corpus
    t = tensors(data, torch.float64)
    train, test = t.train, t.test
    zero = torch.zeros_like(v)
    start = Params(E_small, zero, v)
    p1, eta = review_model.one_step_E(start, train)
    b0, b1 = (E_small @ v).cpu().numpy(), (p1.E @ v).cpu().numpy()
    f0 = review_model.predict(start, train)
    coef = review_model.one_step_closed_form(c.tokens[data.fit], c.labels[data.fit], f0, data.V)
    step = b1 - b0
    keep = data.stats.count >= TOP_COUNT
    one = review_model.evaluate(p1, test, data.n_empty_eval, top)  # right after the step: p = 0, uniform attention
    one.update(
        eta=eta,
        alignment=corpus_stats.spearman(b1[keep], data.stats.alpha[keep]),
        closed_form_error=float(np.abs(step - eta * coef * float(v @ v))[1:].max() / np.abs(step).max()),
        first_order_error=float(np.abs(step - eta / 2 * data.stats.alpha)[1:].max() / np.abs(step).max()),
    )
    scale_c = float(np.abs(b1).max())
    scan = {"c": list(s.scan), "loss": [], "accuracy": []}
    for c_ in s.scan:  # on the training split: the landscape phase two descends
        e = review_model.evaluate(Params(p1.E, (c_ / scale_c) * v, v), train, data.n_empty_fit)
        scan["loss"].append(e["loss"])
        scan["accuracy"].append(e["accuracy"])
    ph = review_phase_two.phase_two(p1.E, v, train, steps=s.p2_steps)
    end = Params(p1.E, ph.p, v)
    m, arrays = describe(end, data, test, train, top)
    attended = review_phase_two.top_tokens(p1.E @ ph.p, train)
    optimal = review_phase_two.top_tokens(p1.E @ v, train, labels=True)
    m.update(
        c=float(ph.p @ v) * scale_c,
        stop=ph.stop,
        accepted=ph.accepted,
        train_loss=ph.loss[-1],
        unsaturated=ph.unsaturated[-1],
        steps=ph.steps[-1],
        attends_optimal=float((attended == optimal).mean()),
    )
    if conflicts:
        m["attended_conflicts"] = review_phase_two.selection_conflicts(c.tokens[data.fit], attended, data.V)
    history = {
        "steps": ph.steps,
        "loss": ph.loss,
        "p_norm": ph.p_norm,
        "step_size": ph.step_size,
        "grad_log_norm": ph.grad_log_norm,
        "unsaturated": ph.unsaturated,
    }
    return {"one_step": one, "two_phase": m, "scan": scan, "phase_two": history}, {
        "values/E0": b0,
        "values/one_step": b1,
        "closed_form": coef,
        **{f"{k}/two_phase": x for k, x in arrays.items()},
    }


# ----------------------------------------------------------------------------- one seed
def examples(data: Data, params: Params, seed: int, per_class: int = 2) -> tuple[list[dict], dict]:
    """A few test reviews (drawn with ``seed`` among those of a fixed length range) with their attention."""
    c = data.corpus
    lo, hi = (25, 45) if c.config.max_len > 100 else (12, 30)
    rng = np.random.default_rng(seed)
    out, arrays = [], {}
    a, b = params.E @ params.p, params.E @ params.v
    for label in (1, -1):
        pool = [int(i) for i in data.evaluation if lo <= c.lengths[i] <= hi and c.labels[i] == label]
        for i in sorted(rng.choice(pool, min(per_class, len(pool)), replace=False)) if pool else []:
            tok = torch.as_tensor(c.tokens[i : i + 1, : c.lengths[i]], dtype=torch.long, device=a.device)
            f, att = review_model.outputs(a, b, tok)
            arrays[f"example/{len(out)}"] = att[0].detach().double().cpu().numpy()
            out.append({"row": int(i), "words": c.decode(i), "label": int(label), "output": float(f[0])})
    return out, arrays


def run_seed(s: Setup, data: Data, seed: int) -> tuple[dict, dict]:
    """Every attention run of one seed: per-token arrays and metrics (see the module docstring)."""
    with config.deterministic():  # one thread, deterministic kernels
        start = time.process_time()
        t = tensors(data)
        top_np = review_model.top_decile(data.stats.count, data.stats.delta, TOP_COUNT)
        top = torch.as_tensor(top_np, device=config.device())
        v, E_small, E_init = init(s, data.V, seed)
        metrics, arrays = two_phase(s, data, v, E_small, top)
        history = {}
        for run in RUNS:
            params, hist = train_model(s, data, v, E_init, run, seed, t)
            metrics[run], per_token = describe(params, data, t.test, t.train, top)
            history[run] = hist.loss
            arrays.update({f"{k}/{run}": x for k, x in per_token.items()})
            if run == "joint":
                metrics["examples"], ex_arrays = examples(data, params, seed)
                arrays.update(ex_arrays)
        metrics["history"] = history
        metrics["cpu_seconds"] = time.process_time() - start
        return {k: stored_precision(x) for k, x in arrays.items()}, metrics


SEED_DTYPE = np.float32
"""The per-token arrays of a seed are kept at float32 (7 significant digits): the chapter prints at most 3 decimals of
statistics over them (ranks, means over token bins), the metrics are computed from the float64 values before, and a
seed's IMDB arrays take 1.2 MB instead of 2.0 (the trained runs carried in the repository: at most 20 MB)."""


def stored_precision(x: np.ndarray) -> np.ndarray:
    """``x`` as a seed's result keeps it: floating arrays at :data:`SEED_DTYPE`, others as they are."""
    x = np.asarray(x)
    return x.astype(SEED_DTYPE) if x.dtype.kind == "f" else x


def run_bow(s: Setup, data: Data) -> dict:
    """The bag-of-words logistic regression (deterministic: no seed)."""
    c = data.corpus
    r = review_model.bow_logistic(
        c.tokens[data.fit],
        c.labels[data.fit],
        {"eval": (c.tokens[data.evaluation], c.labels[data.evaluation])},
        data.V,
        C=s.bow_C,
    )
    n = data.evaluation.size
    acc = r["accuracy"]["eval"] * n / (n + data.n_empty_eval)  # the empty reviews count as errors
    return {"accuracy": acc, "train_accuracy": r["train_accuracy"], "iterations": r["iterations"]}


def profile(s: Setup, ds: text.TextDataset, data: Data) -> dict:
    """What does not depend on a seed: the bag-of-words baseline and how the data meet paper B's data model
    (``optimal_conflicts``: whether one ``p`` could make every training review attend to its optimal token after the
    step, the largest ``y_i alpha_s`` as ``E^1_s v ~ (eta/2) alpha_s``, if the logits were free)."""
    with config.deterministic():  # one thread, deterministic kernels
        c = data.corpus
        alpha = torch.as_tensor(data.stats.alpha)
        train = Chunks.build(c.tokens[data.fit], c.labels[data.fit], dtype=torch.float64)
        optimal = review_phase_two.top_tokens(alpha, train, labels=True)
        return {
            "bow": run_bow(s, data),
            "polarity": corpus_stats.polarity_mix(c.tokens[data.fit], c.labels[data.fit], data.stats).as_dict(),
            "optimal_conflicts": review_phase_two.selection_conflicts(c.tokens[data.fit], optimal, data.V),
            "optimal_positive": float((data.stats.alpha[optimal] * c.labels[data.fit] > 0).mean()),
            "verbatim_overlap": verbatim_overlap(ds),
            "n_train": int(data.fit.size + data.n_empty_fit),
            "n_test": int(data.evaluation.size + data.n_empty_eval),
            "empty_train": data.n_empty_fit,
            "empty_test": data.n_empty_eval,
            "vocab": data.V - 1,
            "mean_len": float(c.lengths[data.fit].mean()),
            "truncated": float((c.full_lengths[data.fit] > s.max_len).mean()),
            "tokens_top": int((data.stats.count >= TOP_COUNT).sum()),
            "tokens_u": int((data.stats.count >= U_COUNT).sum()),
        }


# ----------------------------------------------------------------------------- through the store
def seed_result(s: Setup, ds: text.TextDataset, seed: int) -> ResultKey:
    """The stored result of :func:`run_seed` of ``seed`` under ``s`` on ``ds`` (``real_reviews/<data set>/seed<k>``)."""
    return ResultKey(f"{s.dataset}/seed{seed}", {"setup": s, "seed": seed}, (run_seed, prepare), ds.fingerprint)


def profile_result(s: Setup, ds: text.TextDataset) -> ResultKey:
    """The stored result of :func:`profile` under ``s`` on ``ds`` (``real_reviews/<data set>/profile``)."""
    return ResultKey(f"{s.dataset}/profile", {"setup": s}, (profile, prepare), ds.fingerprint)


def cached_seed(s: Setup, ds: text.TextDataset, seed: int, data: Data | None = None) -> tuple[dict, dict]:
    """:func:`run_seed` for the test split, through the store (``data``: ``prepare(s, ds)`` when already made)."""
    V = len(tokenize.tokenize_dataset(ds, s.tokenizer).vocab) if data is None else data.V
    expect = {f"{k}/{run}": (V,) for run in RUNS for k in ("logits", "values")}
    expect.update({"values/one_step": (V,), "logits/two_phase": (V,), "closed_form": (V,)})
    return seed_result(s, ds, seed).cached(
        lambda: run_seed(s, data if data is not None else prepare(s, ds), seed), expect
    )


def cached_profile(s: Setup, ds: text.TextDataset, data: Data | None = None) -> dict:
    """:func:`profile` for the test split, through the store (``data``: ``prepare(s, ds)`` when already made)."""
    return profile_result(s, ds).cached(lambda: ({}, profile(s, ds, data if data is not None else prepare(s, ds))))[1]
