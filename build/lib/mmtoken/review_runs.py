"""The protocol of chapter 12: splits, the validation search, the held-out seeds, the baselines.

* **Splits.** The test split is the data set's own (IMDB: 25,000 / 25,000;
  Rotten Tomatoes: the seeded 80/20 split of :mod:`mmtoken.datasets.text`).
  A validation split (:data:`VALIDATION`: 20% of the training reviews,
  stratified, seed 0) is carved from the training split; every choice is
  made on it (:func:`mmtoken.review_search.search`). The test split is touched
  once per seed, by the final models (:func:`run_seed`), which are trained on
  the whole training split.
* **Seeds.** Development used seed 0 (and the reviewers seeds 1-4); the
  claims are judged on the held-out :data:`SEEDS` 10-14.
* **Runs per seed** (:func:`run_seed`): the two-phase protocol of the theory
  (float64: one step on ``E`` from a small ``E^0`` at ``p = 0``, then phase two,
  normalized GD on ``p`` with ``E`` fixed); joint training of ``E`` and ``p``
  with ``v`` fixed (the chapter's model); with ``v`` trained; uniform attention
  (``p = 0`` fixed) at the joint model's step and at its own validated step.
  The bag-of-words logistic regression does not depend on a seed (:func:`run_bow`).
* **Empty reviews.** A review left without any in-vocabulary word is not used
  in training (it has no input) and counts as an error in every accuracy.

Every result is stored in the validated results cache
(:mod:`mmtoken.resultcache`) under ``data/results/real_reviews/``, keyed by
the code of this computation, the configuration and the data.
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
    "cache_fingerprint",
    "validation_split",
    "Data",
    "prepare",
    "Tensors",
    "tensors",
    "verbatim_overlap",
    "init",
    "train_model",
    "describe",
    "two_phase",
    "examples",
    "run_seed",
    "run_bow",
    "profile",
    "result_path",
    "cached_seed",
    "cached_profile",
    "seed_cached",
]

import sys
import time
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np
import torch

from . import config, corpus_stats, losses, resultcache, review_model, review_phase_two
from .corpus_stats import TokenStats
from .datasets import text, tokenize
from .datasets.download import cache_dir
from .review_model import Chunks, Params

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
    """Everything that defines one data set's runs (part of every cache key).

    The quick-scale values of the chapter (:data:`mmtoken.experiments.real_reviews.QUICK`)
    are the ones :func:`mmtoken.review_search.search` selects on the validation split; the chapter
    prints the search and checks that they agree.
    """

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

    train: tuple[str, ...]  # names of the trained parameters of :class:`mmtoken.review_model.Params`
    lr: str  # the Setup field of the Adam step
    epochs: str  # the Setup field of the number of epochs


RUN_FIELDS = {
    "joint": RunFields(("E", "p"), "lr", "epochs"),
    "joint_v": RunFields(("E", "p", "v"), "lr_v", "epochs_v"),
    "uniform": RunFields(("E",), "lr", "epochs"),  # p = 0 fixed, at the joint model's step
    "uniform_tuned": RunFields(("E",), "lr_uniform", "epochs_uniform"),  # p = 0 fixed, at its own validated step
}
"""The attention runs of every seed (:func:`run_seed`), the one place that says what each trains and with which
setting: joint training of ``E`` and ``p`` with ``v`` fixed (the chapter's model), with ``v`` trained too, and
uniform attention (``p = 0``: only ``E``) at the joint step and at its own."""
RUNS = tuple(RUN_FIELDS)
"""Names of the attention runs, in the order they are trained."""


class RunSettings(NamedTuple):
    """One run's settings under one setup: the trained parameter names, the Adam step and the epochs."""

    train: tuple[str, ...]
    lr: float
    epochs: int


def run_settings(s: Setup, run: str) -> RunSettings:
    """The trained parameter names, Adam step and epochs of ``run`` (one of :data:`RUNS`) under ``s``."""
    if run not in RUN_FIELDS:
        raise ValueError(f"run must be one of {RUNS}, got {run!r}")
    f = RUN_FIELDS[run]
    return RunSettings(f.train, getattr(s, f.lr), getattr(s, f.epochs))


def cache_fingerprint(s: Setup, data_fp: str, extra: dict | None = None, modules: tuple = ()) -> str:
    """Fingerprint of a result: this computation's code (and ``modules``), the setup (and ``extra``) and the data."""
    code = resultcache.code_fingerprint(
        [review_model, review_phase_two, corpus_stats, tokenize, losses, sys.modules[__name__], *modules]
    )
    return resultcache.fingerprint(code, {"setup": asdict(s), **(extra or {})}, data_fp)


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
    """One data set tokenized and split for a run.

    ``fit`` / ``evaluation`` are row indices of the reviews with a token in
    the training part and in the evaluated part (validation or test);
    ``n_empty_*`` count the reviews left without any in-vocabulary word.
    """

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
    """Train one of the runs ``joint`` (E, p), ``joint_v`` (E, p, v), ``uniform`` / ``uniform_tuned`` (E; p = 0),
    with the step and epochs that :func:`run_settings` reads from ``s``."""
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


# ----------------------------------------------------------------------------- the two-phase protocol
def two_phase(
    s: Setup, data: Data, v: torch.Tensor, E_small: torch.Tensor, top: torch.Tensor, conflicts: bool = False
) -> tuple[dict, dict]:
    """One step on E from ``E_small`` at ``p = 0`` (float64), the scan ``p = c v``, then phase two on ``p``.

    Phase two runs on the training split; its end point is evaluated once on
    the test split. ``attends_optimal`` is the share of training reviews whose
    most attended token is their optimal one (largest ``y_i E_s^T v``); with
    ``conflicts`` the selection the run makes is also checked for feasibility
    (:func:`mmtoken.review_phase_two.selection_conflicts`).
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
        return _run_seed(s, data, seed)


def _run_seed(s: Setup, data: Data, seed: int) -> tuple[dict, dict]:
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
    return arrays, metrics


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
    """What does not depend on a seed: the bag-of-words baseline and how the data meet paper B's data model.

    ``polarity``: :func:`mmtoken.corpus_stats.polarity_mix` of the training reviews.
    ``optimal_conflicts``: whether one ``p`` could make every training review
    attend to its optimal token after the step (largest ``y_i alpha_s``: after
    the step ``E^1_s v = (eta/2) alpha_s`` up to terms of the size of ``E^0``),
    if the logits were free (:func:`mmtoken.review_phase_two.selection_conflicts`).
    """
    with config.deterministic():  # one thread, deterministic kernels
        return _profile(s, ds, data)


def _profile(s: Setup, ds: text.TextDataset, data: Data) -> dict:
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


# ----------------------------------------------------------------------------- cached entry points
def result_path(dataset: str, kind: str, fp: str):
    """Where the cached result ``kind`` of ``dataset`` with fingerprint ``fp`` lives."""
    return cache_dir("results/real_reviews") / f"{dataset}-{kind}-{fp[:16]}.npz"


def cached_seed(s: Setup, ds: text.TextDataset, seed: int, data: Data | None = None) -> tuple[dict, dict]:
    """:func:`run_seed` for the test split, through the results cache."""
    fp = cache_fingerprint(s, ds.fingerprint, {"seed": seed})

    def compute():
        return run_seed(s, data if data is not None else prepare(s, ds), seed)

    V = len(tokenize.tokenize_dataset(ds, s.tokenizer).vocab) if data is None else data.V
    expect = {f"{k}/{run}": (V,) for run in RUNS for k in ("logits", "values")}
    expect.update({"values/one_step": (V,), "logits/two_phase": (V,), "closed_form": (V,)})
    return resultcache.load_or_compute(
        result_path(s.dataset, f"seed{seed}", fp), f"real_reviews/{s.dataset}/seed{seed}", fp, compute, expect
    )


def cached_profile(s: Setup, ds: text.TextDataset, data: Data | None = None) -> dict:
    """:func:`profile` for the test split, through the results cache."""
    fp = cache_fingerprint(s, ds.fingerprint, {"run": "profile"})

    def compute():
        return {}, profile(s, ds, data if data is not None else prepare(s, ds))

    return resultcache.load_or_compute(
        result_path(s.dataset, "profile", fp), f"real_reviews/{s.dataset}/profile", fp, compute
    )[1]


def seed_cached(s: Setup, ds: text.TextDataset, seed: int) -> bool:
    """Whether :func:`cached_seed` would read a valid stored result (no computation)."""
    fp = cache_fingerprint(s, ds.fingerprint, {"seed": seed})
    try:
        resultcache.load(result_path(s.dataset, f"seed{seed}", fp), f"real_reviews/{s.dataset}/seed{seed}", fp)
        return True
    except resultcache.CacheError:
        return False
