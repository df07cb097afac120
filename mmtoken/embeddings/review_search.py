"""The validation search of chapter 12: every choice made on a split carved from the training reviews.

Joint training is tuned one factor at a time in the order of :data:`GRID`, keeping the best validation accuracy
(ties: the earlier value), epochs the best epoch of the best trial; then the step and epochs of the two contrasts
and the bag-of-words L2 weight. Seed :data:`.review_runs.DEV_SEED`; only accuracy is optimised, never attention.
The search of each data set is kept by the store as ``real_reviews/<data set>/search`` (:func:`search_result`).
"""

from __future__ import annotations

__all__ = ["START", "GRID", "MAX_EPOCHS", "search", "search_result", "cached_search"]

import dataclasses
from dataclasses import asdict

import numpy as np

from mmtoken import config
from mmtoken.datasets import text
from mmtoken.embeddings.review_runs import (
    DEV_SEED,
    RUN_FIELDS,
    VALIDATION,
    ResultKey,
    Setup,
    init,
    prepare,
    train_model,
)
from mmtoken.embeddings.review_seeds import run_bow

# Where the validation search starts (the previous chapter's choices) and what it tries.
START = {
    "imdb": Setup("imdb", min_count=10, max_len=512),
    "rt": Setup("rt", min_count=2, max_len=64),
}
GRID = {
    "lr": (1e-3, 3e-3, 1e-2, 3e-2),
    "init_std": (0.01, 0.1, 1.0),
    "d": (32, 64, 128),
    "warmup": (0, 1),
    "min_count": {"imdb": (5, 10, 20), "rt": (1, 2, 5)},
    "max_len": {"imdb": (256, 512), "rt": (64,)},
    "lr_v": (1e-3, 3e-3, 1e-2, 3e-2),
    "lr_uniform": (3e-3, 1e-2, 3e-2, 1e-1, 3e-1),
    "bow_C": (0.03, 0.1, 0.3, 1.0, 3.0),
}
MAX_EPOCHS = {"imdb": 6, "rt": 12}
"""Epochs tried in the search: the validation accuracy is recorded after each, the best epoch is chosen."""


def _trial(s: Setup, ds: text.TextDataset, run: str, seed: int = DEV_SEED) -> dict:
    """Train ``run`` under ``s`` on the fit part, recording the validation accuracy after every epoch."""
    data = prepare(s, ds, part="validation")
    v, _, E_init = init(s, data.V, seed)
    epochs = MAX_EPOCHS.get(s.dataset, 6)
    s_run = dataclasses.replace(s, **{f.epochs: epochs for f in RUN_FIELDS.values()})
    _, hist = train_model(s_run, data, v, E_init, run, seed, record_val=True)
    acc = hist.val_accuracy
    best = int(np.argmax(acc))  # the first best epoch
    return {"run": run, "val_accuracy": acc, "best_epoch": best + 1, "best": acc[best]}


def search(s0: Setup, ds: text.TextDataset) -> tuple[Setup, list[dict]]:
    """Coordinate search on the validation split from ``s0``: the chosen setup and one record per trial."""
    with config.single_thread():
        return _search(s0, ds)


def _search(s0: Setup, ds: text.TextDataset) -> tuple[Setup, list[dict]]:
    name = s0.dataset
    s, records = s0, []
    best = None
    for factor in ("lr", "init_std", "d", "warmup", "min_count", "max_len"):
        values = GRID[factor][name] if isinstance(GRID[factor], dict) else GRID[factor]
        results = {}
        for value in values:
            trial = dataclasses.replace(s, **{factor: value})
            if best is not None and value == getattr(s, factor):
                results[value] = best  # the current setup: already measured
                continue
            results[value] = _trial(trial, ds, "joint")
            records.append({"factor": factor, "value": value, **results[value]})
        value = max(values, key=lambda x: (results[x]["best"], -values.index(x)))
        s, best = dataclasses.replace(s, **{factor: value}), results[value]
    s = dataclasses.replace(s, epochs=best["best_epoch"])
    for run in ("joint_v", "uniform_tuned"):  # the contrasts with a step of their own ("uniform" shares joint's)
        _, factor, epochs = RUN_FIELDS[run]
        results = {}
        for value in GRID[factor]:
            results[value] = _trial(dataclasses.replace(s, **{factor: value}), ds, run)
            records.append({"factor": factor, "value": value, **results[value]})
        value = max(GRID[factor], key=lambda x: (results[x]["best"], -GRID[factor].index(x)))
        s = dataclasses.replace(s, **{factor: value, epochs: results[value]["best_epoch"]})
    data = prepare(s, ds, part="validation")
    accs = {}
    for C in GRID["bow_C"]:
        accs[C] = run_bow(dataclasses.replace(s, bow_C=C), data)["accuracy"]
        records.append(
            {"factor": "bow_C", "value": C, "run": "bow", "val_accuracy": [accs[C]], "best_epoch": 0, "best": accs[C]}
        )
    s = dataclasses.replace(s, bow_C=max(GRID["bow_C"], key=lambda x: (accs[x], -GRID["bow_C"].index(x))))
    return s, records


def _start(dataset: str) -> Setup:
    if dataset not in START:
        raise ValueError(f"dataset must be one of {tuple(START)}, got {dataset!r}")
    return START[dataset]


def search_result(dataset: str, ds: text.TextDataset | None = None) -> ResultKey:
    """The stored result of :func:`search` from :data:`START` on ``dataset`` (``real_reviews/<data set>/search``);
    ``ds``: its data set when already loaded."""
    config = {
        "start": _start(dataset),
        "grid": GRID,
        "max_epochs": MAX_EPOCHS,
        "validation": VALIDATION,
        "seed": DEV_SEED,
    }
    ds = ds if ds is not None else text.load(dataset)
    return ResultKey(f"{dataset}/search", config, (search,), ds.fingerprint)


def cached_search(dataset: str) -> tuple[Setup, list[dict]]:
    """:func:`search` from :data:`START`, through the store: the chosen setup and one record per trial."""
    s0, ds = _start(dataset), text.load(dataset)

    def compute():
        chosen, records = search(s0, ds)
        return {}, {"chosen": asdict(chosen), "records": records}

    _, meta = search_result(dataset, ds).cached(compute)
    chosen = {k: tuple(v) if isinstance(v, list) else v for k, v in meta["chosen"].items()}
    return Setup(**chosen), meta["records"]
