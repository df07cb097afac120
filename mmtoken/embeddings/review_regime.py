"""The two-phase protocol in the theory's own regime, on real reviews and on the data model.

Paper B's result for the <cls> embedding (chapter 11) needs an initial table of full row rank (``d >= |V|``) and
its data model. :data:`REGIME` meets the first on Rotten Tomatoes: 486 words (seen >= 30 times) and
``d = 2048 >= 4 |V|`` (rows of ``E^0`` independent, smallest singular value about ``std (sqrt(d) - sqrt(|V|))``),
with a *large* initialisation (entry std 0.1, row norm 4.5); :data:`SMALL` is the same at a small one. The **control**
(:func:`control_data`) runs the same code on the data model at Rotten Tomatoes' sizes: if phase two selects there
and not on the reviews, the data, not the dimension, is what the reviews lack. Each seed's run is kept by the store
as ``real_reviews/rt/<reviews|control>-<regime|small><seed>[-<steps>]`` (:func:`regime_result`).
"""

from __future__ import annotations

__all__ = [
    "REGIME",
    "LONG",
    "CONTROL",
    "ROW_NORM",
    "SIGMA0_SMALL",
    "SMALL",
    "WHICH",
    "run",
    "control_data",
    "regime_setup",
    "regime_result",
    "cached",
]

import dataclasses
import math
import time

import numpy as np
import torch

from mmtoken import config
from mmtoken.datasets import text, tokenize
from mmtoken.embeddings import corpus_stats, review_model, review_runs, review_seeds, synthetic
from mmtoken.embeddings.review_runs import Data, ResultKey, Setup, prepare

REGIME = Setup("rt", min_count=30, max_len=64, d=2048, small_std=0.1, p2_steps=1500)
"""Rotten Tomatoes, words seen >= 30 times, d = 2048, entry std 0.1, phase two for 1,500 gradient evaluations: a
*large* initialisation, row norm (chapter 11's ``sigma0``) about ``0.1 sqrt(2048) = 4.5``, above its sweep (<= 0.5)."""
ROW_NORM = REGIME.small_std * math.sqrt(REGIME.d)
"""Chapter 11's ``sigma0`` of :data:`REGIME` (the row norm of ``E^0``, about 4.5)."""
SIGMA0_SMALL = 0.5
"""The small initialisation, in chapter 11's units: its main run's ``sigma0`` (inside ``B.cls.small_init``'s range)."""
SMALL = dataclasses.replace(
    REGIME,
    small_std=SIGMA0_SMALL / math.sqrt(REGIME.d),
    p2_steps=int(100 * math.ceil(REGIME.p2_steps * ROW_NORM / SIGMA0_SMALL / 100)),
)
""":data:`REGIME` at row norm ``SIGMA0_SMALL``; phase two's budget scaled by ``ROW_NORM / SIGMA0_SMALL``
(the margin is proportional to ``sigma0``, chapter 11, so the budget goes as ``1/margin``): 13,600 evaluations."""
LONG = 4000
"""A longer budget for phase two, to see whether its end point still moves."""
CONTROL = {"n_pos": 30, "n_neg": 30, "T": 24, "min_len": 8}
"""The data model's sizes for the control (the rest of the vocabulary is neutral)."""
WHICH = ("reviews", "control")
"""What the protocol runs on: Rotten Tomatoes' reviews, or the control (:func:`control_data`)."""


def run(data: Data, seed: int, s: Setup = REGIME) -> tuple[dict, dict]:
    """The two-phase protocol under ``s`` on ``data`` for one seed (test split touched once, at the end)."""
    with config.single_thread():
        start = time.process_time()
        top = torch.as_tensor(
            review_model.top_decile(data.stats.count, data.stats.delta, review_runs.TOP_COUNT), device=config.device()
        )
        v, E_small, _ = review_runs.init(s, data.V, seed)
        metrics, arrays = review_seeds.two_phase(s, data, v, E_small, top, conflicts=True)
        metrics["cpu_seconds"] = time.process_time() - start
        return arrays, metrics


def control_data(rt: Data, seed: int = 0) -> Data:
    """Sequences of paper B's data model (sizes :data:`CONTROL`) with the vocabulary and train/test sizes of ``rt``."""
    n_train, n_test = rt.fit.size, rt.evaluation.size
    c = CONTROL
    n_neutral = rt.V - 1 - c["n_pos"] - c["n_neg"]
    syn = synthetic.generate(
        n_train + n_test,
        c["T"],
        n_pos=c["n_pos"],
        n_neg=c["n_neg"],
        n_neutral=n_neutral,
        min_len=c["min_len"],
        seed=seed,
    )
    tokens = syn.tokens.numpy().astype(np.int32)
    labels = syn.labels.numpy().astype(np.int8)
    lengths = (tokens != tokenize.PAD_ID).sum(1).astype(np.int32)
    split = np.r_[np.zeros(n_train, np.int8), np.ones(n_test, np.int8)]
    vocab = [tokenize.PAD] + [f"{k}{i}" for k, i in zip(syn.kind[1:], range(1, syn.vocab_size))]
    corpus = tokenize.TokenizedCorpus(
        "control",
        vocab,
        tokens,
        lengths,
        lengths.copy(),
        labels,
        split,
        tokenize.TokenizerConfig(min_count=1, max_len=c["T"]),
    )
    fit, evaluation = np.arange(n_train), np.arange(n_train, n_train + n_test)
    stats = corpus_stats.token_stats(tokens[fit], labels[fit].astype(int), corpus.vocab_size, pad_id=tokenize.PAD_ID)
    return Data(corpus, "test", fit, evaluation, 0, 0, stats)


def _which(which: str) -> str:
    if which not in WHICH:
        raise ValueError(f"which must be 'reviews' or 'control', got {which!r}")
    return which


def regime_setup(steps: int | None = None, small: bool = False) -> Setup:
    """:data:`REGIME`, or :data:`SMALL` if ``small``; ``steps`` replaces phase two's budget."""
    base = SMALL if small else REGIME
    return base if steps is None else dataclasses.replace(base, p2_steps=steps)


def regime_result(
    seed: int, which: str = "reviews", steps: int | None = None, small: bool = False, ds: text.TextDataset | None = None
) -> ResultKey:
    """The stored result of :func:`run` of ``seed`` on Rotten Tomatoes (``which="reviews"``) or on the control
    (``"control"``) under :func:`regime_setup` (``steps``, ``small``); ``ds``: Rotten Tomatoes when already loaded."""
    name = f"rt/{_which(which)}-{'small' if small else 'regime'}{seed}" + ("" if steps is None else f"-{steps}")
    s, ds = regime_setup(steps, small), ds if ds is not None else text.load("rt")
    if which == "control":
        return ResultKey(
            name, {"setup": s, "seed": seed, "control": CONTROL}, (run, prepare, control_data), ds.fingerprint
        )
    return ResultKey(name, {"setup": s, "seed": seed}, (run, prepare), ds.fingerprint)


def cached(seed: int, which: str = "reviews", steps: int | None = None, small: bool = False) -> tuple[dict, dict]:
    """:func:`run` on Rotten Tomatoes (``"reviews"``) or the control (``"control"``), through the store: at
    :data:`REGIME`, or :data:`SMALL` if ``small``; ``steps`` replaces phase two's budget."""
    which, s = _which(which), regime_setup(steps, small)
    ds = text.load("rt")
    key = regime_result(seed, which, steps, small, ds)

    def compute():
        data = prepare(s, ds)
        return run(data if which == "reviews" else control_data(data, seed), seed, s)

    return key.cached(compute)
