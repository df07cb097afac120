"""Toy review data shared by the tests of chapter 12's modules (review_phase_two, review_runs, review_search,
review_regime, review_jobs, chapters.ch12_real_reviews) and of the tokenizer's cache: reviews drawn from paper B's
data model, and a setup small enough to train every run in seconds (:data:`QUICK`: in about a second)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from mmtoken.datasets import corpus
from mmtoken.embeddings import review_runs

POS, NEG = ["great", "superb", "moving"], ["awful", "dull", "boring"]
NEUTRAL = [f"w{k}" for k in range(30)]


def toy_dataset(n_train=240, n_test=120, seed=0, name="toy") -> corpus.TextDataset:
    """Reviews of 8-16 neutral words and one or two words of their polarity (the paper's data model),
    plus one training and one test review made of a word seen nowhere else."""
    rng = np.random.default_rng(seed)
    texts, labels, split = [], [], []
    for k in range(n_train + n_test):
        y = 1 if k % 2 == 0 else -1
        words = list(rng.choice(NEUTRAL, rng.integers(8, 17)))
        for _ in range(rng.integers(1, 3)):
            words.insert(rng.integers(0, len(words) + 1), rng.choice(POS if y > 0 else NEG))
        texts.append(" ".join(words))
        labels.append(y)
        split.append(0 if k < n_train else 1)
    texts[n_train + 1] = "unseenword"  # a test review without any in-vocabulary word (min_count 2)
    return corpus.make_dataset(name, texts, labels, split, {"source": "test"})


TINY = review_runs.Setup(
    "toy",
    min_count=2,
    max_len=24,
    d=16,
    batch=32,
    lr=0.03,
    epochs=12,
    init_std=0.1,
    lr_v=0.03,
    epochs_v=12,
    lr_uniform=0.1,
    epochs_uniform=12,
    p2_steps=60,
    scan=(-3.0, 0.0, 3.0),
)
QUICK = dataclasses.replace(TINY, epochs=1, epochs_v=1, epochs_uniform=1, p2_steps=5)
"""TINY with one epoch per run and five evaluations of phase two: a seed in about a second (for the store's tests)."""


def toy_corpus_file(folder: Path, name: str = "toy") -> tuple[corpus.TextDataset, Path]:
    """The toy data set and its compact cache written under ``folder`` (what a worker process reads it from)."""
    ds = toy_dataset(name=name)
    return ds, corpus.save_cache(ds, Path(folder) / f"{name}-corpus.npz")
