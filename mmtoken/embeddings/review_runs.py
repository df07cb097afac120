"""Chapter 12's runs, one model at a time: the setups, the splits and the prepared data, the training.

The test split is the data set's own (Rotten Tomatoes: the seeded 80/20 split of :mod:`mmtoken.datasets.text`),
touched once per seed by the final models (:mod:`.review_seeds`); every choice is made on a validation split of the
training split (:data:`VALIDATION`, :mod:`.review_search`) with seed 0; claims are judged on the held-out :data:`SEEDS`.

Every result of these runs is kept by the one store (:mod:`mmtoken.book.resultcache`) under the owner :data:`OWNER`,
each named and keyed by one :class:`ResultKey`.
"""

from __future__ import annotations

__all__ = [
    "DATASETS",
    "SEEDS",
    "DEV_SEED",
    "VALIDATION",
    "U_COUNT",
    "TOP_COUNT",
    "Setup",
    "RunFields",
    "RUN_FIELDS",
    "RUNS",
    "RunSettings",
    "run_settings",
    "validation_split",
    "Data",
    "prepare",
    "Tensors",
    "tensors",
    "verbatim_overlap",
    "init",
    "train_model",
    "describe",
    "OWNER",
    "ResultKey",
]

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from mmtoken import config
from mmtoken.book import resultcache
from mmtoken.datasets import text, tokenize
from mmtoken.embeddings import corpus_stats, review_model
from mmtoken.embeddings.corpus_stats import TokenStats
from mmtoken.embeddings.review_model import Chunks, Params

DATASETS = ("imdb", "rt", "yelp")
SEEDS = (10, 11, 12, 13, 14)
"""Held-out seeds on which every observation claim is judged (never used while developing)."""
DEV_SEED = 0
"""The seed of the validation search."""
VALIDATION = {"fraction": 0.2, "seed": 0}
"""The validation split: this fraction of the training reviews, stratified by label, drawn with this seed."""
U_COUNT = 100
"""Count cut-off of the U-shape statistics (training occurrences), the same for every data set."""
TOP_COUNT = 20
"""Tokens eligible for the top decile of |Delta| (selection statistic)."""


# ----------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class Setup:
    """Everything that defines one data set's runs (part of every cache key); the chapter checks that its values
    are the ones :func:`mmtoken.embeddings.review_search.search` selects."""

    dataset: str
    min_count: int  # vocabulary: words seen this often in the training split
    max_len: int  # T: first T in-vocabulary words, padded
    d: int = 64  # embedding dimension
    lr: float = 3e-3  # Adam step of joint training (and of uniform attention "at the same step")
    epochs: int = 4
    init_std: float = 0.1  # E^0 entries of joint training
    warmup: int = 0  # epochs of linear warm-up
    lr_v: float = 3e-3  # joint training with v trained
    epochs_v: int = 4
    lr_uniform: float = 3e-2  # uniform attention at its own validated step
    epochs_uniform: int = 4
    bow_C: float = 1.0  # logistic regression: sum of losses + ||w||^2 / (2 C)
    batch: int = 256
    small_std: float = 1e-6  # E^0 entries of the two-phase protocol ("small random")
    p2_steps: int = 300  # phase two: gradient evaluations of normalized GD on p
    scan: tuple = (-30.0, -10.0, -3.0, -1.0, -0.3, 0.0, 0.3, 1.0, 3.0, 10.0, 30.0)  # p = c v / max|E^1 v|
    max_train: int | None = None  # seeded subsample (Yelp at quick scale)
    max_test: int | None = None

    @property
    def tokenizer(self) -> tokenize.TokenizerConfig:
        return tokenize.TokenizerConfig(min_count=self.min_count, max_len=self.max_len)


class RunFields(NamedTuple):
    """What one attention run trains, and the :class:`Setup` fields that hold its Adam step and its epochs."""

    train: tuple[str, ...]  # names of the trained parameters of :class:`mmtoken.embeddings.review_model.Params`
    lr: str  # the Setup field of the Adam step
    epochs: str  # the Setup field of the number of epochs


RUN_FIELDS = {
    "joint": RunFields(("E", "p"), "lr", "epochs"),
    "joint_v": RunFields(("E", "p", "v"), "lr_v", "epochs_v"),
    "uniform": RunFields(("E",), "lr", "epochs"),  # p = 0 fixed, at the joint model's step
    "uniform_tuned": RunFields(("E",), "lr_uniform", "epochs_uniform"),  # p = 0 fixed, at its own validated step
}
"""The attention runs of every seed: what each trains and with which :class:`Setup` fields."""
RUNS = tuple(RUN_FIELDS)
"""Names of the attention runs, in the order they are trained."""


class RunSettings(NamedTuple):
    """One run's trained parameter names, Adam step and epochs under one setup."""

    train: tuple[str, ...]
    lr: float
    epochs: int


def run_settings(s: Setup, run: str) -> RunSettings:
    """The trained parameter names, Adam step and epochs of ``run`` (one of :data:`RUNS`) under ``s``."""
    if run not in RUN_FIELDS:
        raise ValueError(f"run must be one of {RUNS}, got {run!r}")
    f = RUN_FIELDS[run]
    return RunSettings(f.train, getattr(s, f.lr), getattr(s, f.epochs))


# ----------------------------------------------------------------------------- data
def validation_split(
    labels: np.ndarray, train_rows: np.ndarray, fraction: float = 0.2, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Split ``train_rows`` into (fit, validation) rows, stratified by ``labels``; both sorted."""
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction}")
    rng = np.random.default_rng(seed)
    val = []
    for label in (-1, 1):
        rows = train_rows[labels[train_rows] == label]
        val.append(rng.choice(rows, int(round(fraction * rows.size)), replace=False))
    val = np.sort(np.concatenate(val))
    return np.setdiff1d(train_rows, val), val


@dataclass
class Data:
    """One data set tokenized and split: row indices of the reviews with a token in the training part (``fit``) and
    the evaluated part (``evaluation``), and the counts of empty reviews left out (``n_empty_*``)."""

    corpus: tokenize.TokenizedCorpus
    part: str  # "validation" (search) or "test" (final runs)
    fit: np.ndarray
    evaluation: np.ndarray
    n_empty_fit: int
    n_empty_eval: int
    stats: TokenStats  # over the fit rows

    @property
    def V(self) -> int:
        return self.corpus.vocab_size


def prepare(s: Setup, ds: text.TextDataset, part: str = "test") -> Data:
    """Tokenize (cached) and split ``ds``: fit on train and evaluate on test, or fit/validation within train."""
    if part not in ("test", "validation"):
        raise ValueError(f"part must be 'test' or 'validation', got {part!r}")
    corpus = tokenize.tokenize_dataset(ds, s.tokenizer)
    train, test = corpus.part("train", nonempty=False), corpus.part("test", nonempty=False)
    rng = np.random.default_rng(0)
    if s.max_train is not None and train.size > s.max_train:
        train = np.sort(rng.choice(train, s.max_train, replace=False))
    if s.max_test is not None and test.size > s.max_test:
        test = np.sort(rng.choice(test, s.max_test, replace=False))
    if part == "validation":
        train, test = validation_split(corpus.labels, train, VALIDATION["fraction"], VALIDATION["seed"])
    has = corpus.lengths > 0
    fit, evaluation = train[has[train]], test[has[test]]
    stats = corpus_stats.token_stats(
        corpus.tokens[fit], corpus.labels[fit].astype(int), corpus.vocab_size, pad_id=tokenize.PAD_ID
    )
    return Data(corpus, part, fit, evaluation, int((~has[train]).sum()), int((~has[test]).sum()), stats)


@dataclass
class Tensors:
    """The fit rows collapsed to distinct tokens with counts (for training), and both sets as chunks."""

    X: torch.Tensor
    counts: torch.Tensor
    y: torch.Tensor
    train: Chunks
    test: Chunks


def tensors(data: Data, dtype=torch.float32) -> Tensors:
    """:class:`Tensors` of ``data`` in ``dtype`` on the package device."""
    c, dev = data.corpus, config.device()
    ids, counts = review_model.collapse(c.tokens[data.fit])
    return Tensors(
        torch.as_tensor(ids, dtype=torch.long, device=dev),
        torch.as_tensor(counts, dtype=dtype, device=dev),
        torch.as_tensor(c.labels[data.fit], dtype=dtype, device=dev),
        Chunks.build(c.tokens[data.fit], c.labels[data.fit], dtype=dtype),
        Chunks.build(c.tokens[data.evaluation], c.labels[data.evaluation], dtype=dtype),
    )


def verbatim_overlap(ds: text.TextDataset) -> int:
    """Number of test texts that also occur, character for character, in the training split."""
    train = {t for t, s in zip(ds.texts, ds.split) if s == 0}
    return sum(1 for t, s in zip(ds.texts, ds.split) if s == 1 and t in train)


# ----------------------------------------------------------------------------- one model
def init(s: Setup, V: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``v`` (a random unit vector), the small ``E^0`` of the two-phase protocol (float64) and that of joint training."""
    gen = config.seed_everything(seed)
    v = torch.randn(s.d, generator=gen, dtype=torch.float64)
    v = v / v.norm()
    E_small = s.small_std * torch.randn(V, s.d, generator=gen, dtype=torch.float64)
    E_init = s.init_std * torch.randn(V, s.d, generator=gen)
    dev = config.device()
    return v.to(dev), E_small.to(dev), E_init.to(dev)


def train_model(
    s: Setup,
    data: Data,
    v: torch.Tensor,
    E0: torch.Tensor,
    run: str,
    seed: int,
    t: Tensors | None = None,
    record_val: bool = False,
) -> tuple[Params, review_model.FitHistory]:
    """Train ``run`` (one of :data:`RUNS`) from ``E0`` with ``p = 0``, with :func:`run_settings` of ``s``."""
    t = t or tensors(data)
    train, lr, epochs = run_settings(s, run)
    params = Params(E0.clone(), torch.zeros_like(v, dtype=E0.dtype), v.to(E0.dtype).clone())
    hist = review_model.fit(
        params,
        t.X,
        t.y,
        counts=t.counts,
        train=train,
        epochs=epochs,
        lr=lr,
        batch=s.batch,
        seed=seed + 1,
        warmup=s.warmup,
        val=(t.test, data.n_empty_eval) if record_val else None,
    )
    return params, hist


def describe(params: Params, data: Data, test: Chunks, train: Chunks, top: torch.Tensor) -> tuple[dict, dict]:
    """Metrics of a trained model and its per-token arrays (``logits = E p``, ``values = E v``)."""
    a, b = params.per_token()
    m = review_model.evaluate(params, test, data.n_empty_eval, top)
    m["train_accuracy"] = review_model.evaluate(params, train, data.n_empty_fit)["accuracy"]
    keep = data.stats.count >= TOP_COUNT
    m["alignment"] = corpus_stats.spearman(b[keep], data.stats.alpha[keep])
    m["u_shape"] = corpus_stats.u_shape(a, data.stats, U_COUNT).as_dict() if np.ptp(a[1:]) > 0 else None
    m["p_norm"] = float(params.p.norm())
    pn, vn = float(params.p.norm()), float(params.v.norm())
    m["cos_p_v"] = float(params.p.double() @ params.v.double()) / (pn * vn) if pn > 0 else 0.0
    return m, {"logits": a, "values": b}


# ----------------------------------------------------------------------------- the store
OWNER = "real_reviews"
"""The owner of chapter 12's results in the store (``data/results/real_reviews/``, carried in ``book/trained/``)."""


class ResultKey(NamedTuple):
    """One result of chapter 12 in the store: what :func:`mmtoken.book.resultcache.cached` and
    :func:`~mmtoken.book.resultcache.stored` are given, built once so that computing and checking use one key.

    ``name``: ``"imdb/seed10"``, ``"rt/search"``, ...; ``config``: every setting that decides the result (with the
    types of its values); ``code``: the functions whose code computes it (the training, not the caching around it);
    ``data``: the fingerprint of its data set.
    """

    name: str
    config: object
    code: tuple[Callable, ...]
    data: str

    def cached(self, compute: Callable[[], resultcache.Stored], expect: Mapping[str, tuple] | None = None):
        """The stored result, or ``compute()`` d now and stored: ``(arrays, meta)``."""
        return resultcache.cached(
            OWNER, self.name, compute, config=self.config, code=self.code, data=self.data, expect=expect
        )

    def stored(self) -> bool:
        """Whether :meth:`cached` would read the result (nothing is computed)."""
        return resultcache.stored(OWNER, self.name, config=self.config, code=self.code, data=self.data)
