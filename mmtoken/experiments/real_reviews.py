"""Chapter 12: paper B's picture on real reviews (IMDB, Rotten Tomatoes, Yelp when present).

The computation lives in :mod:`mmtoken.review_runs` (splits, validation
search, held-out seeds, baselines, the results cache) on top of
:mod:`mmtoken.review_model` (the model and its training). This module gathers the
results of every seed into one object per data set, and holds the chapter's
tables, figures and claims. Every observation claim is judged on the worst of
the held-out seeds :data:`mmtoken.review_runs.SEEDS`.
"""

from __future__ import annotations

__all__ = [
    "stop_summary",
    "CHAPTER",
    "QUICK",
    "setup",
    "DATASETS",
    "RUN_LABELS",
    "MODELS",
    "DatasetResult",
    "run_dataset",
    "compute_in_parallel",
    "Result",
    "run",
    "search",
    "Regime",
    "regime",
    "span",
    "baseline_table",
    "transposed",
    "by_dataset",
    "profile_table",
    "setup_table",
    "trial_tables",
    "seed_table",
    "ushape_table",
    "search_summary",
    "regime_table",
    "attended_tokens",
    "SHORT_LABELS",
    "plot_alignment",
    "plot_ushape",
    "plot_scan",
    "plot_regime",
    "plot_attention",
    "plot_accuracy",
    "FIGURES",
    "THRESHOLDS",
    "ALIGN_JOINT",
    "ONE_STEP",
    "NAMES",
    "SEED_TEXT",
    "yelp_missing",
    "SMALL_SEEDS",
    "SMALL_ATTENDS",
    "STOP_LABELS",
    "stop_label",
    "final_gradient_norm",
    "order_bound",
    "saturated_at",
    "random_part_table",
    "small_regime_check",
]

import dataclasses
import functools
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import config, plotting, report, review_model, review_regime, review_runs, review_search
from ..corpus_stats import TokenStats
from ..datasets import text
from ..datasets.download import DatasetMissing
from ..ledger import Measured
from ..ledger import claim as ledger_claim
from ..plotting import colors, token_scatter
from ..review_runs import RUNS, SEEDS, Setup  # noqa: F401  (re-exported for the chapter)

CHAPTER = "12_real_reviews"

QUICK = {
    "imdb": Setup(
        "imdb",
        min_count=5,
        max_len=512,
        d=64,
        lr=0.01,
        epochs=2,
        init_std=0.01,
        warmup=0,
        lr_v=0.01,
        epochs_v=2,
        lr_uniform=0.3,
        epochs_uniform=2,
        bow_C=0.1,
    ),
    "rt": Setup(
        "rt",
        min_count=2,
        max_len=64,
        d=128,
        lr=0.01,
        epochs=3,
        init_std=0.1,
        warmup=0,
        lr_v=0.01,
        epochs_v=2,
        lr_uniform=0.03,
        epochs_uniform=3,
        bow_C=0.3,
    ),
}
"""The quick-scale setups the chapter runs: the choices of :func:`mmtoken.review_search.search` on the
validation split (:func:`search_summary` checks that they agree)."""


def setup(dataset: str, scale: str | None = None) -> Setup:
    """The configuration of ``dataset`` at ``scale`` (quick: CPU minutes; paper: a GPU).

    Yelp (not available here) takes IMDB's validated choices with a seeded
    subsample at quick scale; the paper scale keeps the quick choices with a
    full vocabulary, longer IMDB/Yelp sequences and twice the dimension (not
    validated here: no GPU).
    """
    if dataset not in review_runs.DATASETS:
        raise ValueError(f"unknown data set {dataset!r}; choose one of {review_runs.DATASETS}")
    quick = dataclasses.replace(QUICK["imdb" if dataset == "yelp" else dataset], dataset=dataset)
    if dataset == "yelp":
        quick = dataclasses.replace(quick, max_train=50_000, max_test=10_000)
    paper = dataclasses.replace(
        quick, min_count=1, max_len=64 if dataset == "rt" else 1024, d=2 * quick.d, max_train=None, max_test=None
    )
    return config.pick(quick=quick, paper=paper, which=scale)


DATASETS = review_runs.DATASETS
RUN_LABELS = {
    "one_step": "one step on E (p = 0)",
    "two_phase": "two-phase (step on E, then p)",
    "joint": "attention, v fixed",
    "joint_v": "attention, v trained",
    "uniform": "uniform attention, same step",
    "uniform_tuned": "uniform attention, tuned step",
    "bow": "bag-of-words logistic regression",
}
MODELS = ("joint", "joint_v", "uniform", "uniform_tuned", "bow", "two_phase")


# ----------------------------------------------------------------------------- results
@dataclass
class DatasetResult:
    """One data set: its setup, token statistics and the runs of every held-out seed."""

    setup: Setup
    vocab: list[str]
    stats: TokenStats  # over the training split
    top: np.ndarray  # bool (V,), top decile of |Delta| among tokens seen >= 20 times
    profile: dict  # seed-free: bag of words, data-model statistics, sizes
    arrays: dict[int, dict] = field(default_factory=dict)  # seed -> per-token arrays
    metrics: dict[int, dict] = field(default_factory=dict)  # seed -> metrics

    @property
    def name(self) -> str:
        return self.setup.dataset

    @property
    def seeds(self) -> list[int]:
        return sorted(self.metrics)

    def values(self, run: str, key: str, sub: str | None = None) -> np.ndarray:
        """``metrics[seed][run][key]`` (or ``[...][key][sub]``) over the seeds; the bag of words has one value."""
        if run == "bow":
            return np.array([self.profile["bow"][key]])
        out = [self.metrics[s][run][key] for s in self.seeds]
        return np.array([o[sub] if sub else o for o in out], dtype=float)


def run_dataset(dataset: str, scale: str | None = None) -> DatasetResult:
    """Every held-out seed of one data set at ``scale``, from the results cache when computed before."""
    return _run_dataset(dataset, scale or config.scale())


@functools.lru_cache(maxsize=None)
def _run_dataset(dataset: str, scale: str) -> DatasetResult:
    s = setup(dataset, scale)
    ds = text.load(dataset, download=dataset != "yelp")
    data = review_runs.prepare(s, ds)
    top = review_model.top_decile(data.stats.count, data.stats.delta, review_runs.TOP_COUNT)
    r = DatasetResult(s, data.corpus.vocab, data.stats, top, review_runs.cached_profile(s, ds, data))
    compute_in_parallel(s, [seed for seed in SEEDS if not review_runs.seed_cached(s, ds, seed)])
    for seed in SEEDS:
        r.arrays[seed], r.metrics[seed] = review_runs.cached_seed(s, ds, seed, data)
    return r


_WORKER = """
import json, sys
from mmtoken import review_runs
from mmtoken.datasets import text
fields = json.loads(sys.argv[1])
s = review_runs.Setup(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})
review_runs.cached_seed(s, text.load(s.dataset, download=False), int(sys.argv[2]))
"""


def compute_in_parallel(s: Setup, seeds: list[int], workers: int | None = None) -> None:
    """Compute the seeds ``seeds`` of ``s`` into the results cache, ``workers`` at a time in fresh interpreters.

    On a CPU with two or more cores two seeds run at once (each in one thread,
    with its own generators, so the results are those one process gives). A
    seed whose worker fails is simply left to the caller, which computes it in
    this process (and shows the error if there is one). Nothing runs in
    parallel on a GPU or for a single missing seed.
    """
    workers = workers or min(2, os.cpu_count() or 1)
    if workers < 2 or len(seeds) < 2 or config.device().type != "cpu" or not text.available(s.dataset):
        return
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(Path(review_runs.__file__).resolve().parent.parent)] + sys.path)
    )
    args = json.dumps(dataclasses.asdict(s))
    pending, running = list(seeds), []
    while pending or running:
        while pending and len(running) < workers:
            running.append(
                subprocess.Popen(
                    [sys.executable, "-c", _WORKER, args, str(pending.pop(0))],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        running[0].wait()
        running = [p for p in running if p.poll() is None]


@dataclass
class Result:
    datasets: dict[str, DatasetResult]
    missing: dict[str, str]  # data sets that are not available, with how to get them


def run(scale: str | None = None) -> Result:
    """IMDB and Rotten Tomatoes always (fetched if needed); Yelp when its data is on disk."""
    scale = scale or config.scale()
    out, missing = {}, {}
    for name in DATASETS:
        if name == "yelp" and not text.available("yelp"):
            missing[name] = text.yelp_note()
            continue
        try:
            out[name] = run_dataset(name, scale)
        except DatasetMissing as exc:
            if name != "yelp":
                raise
            missing[name] = str(exc)
    return Result(out, missing)


@functools.lru_cache(maxsize=None)
def search(dataset: str) -> tuple[Setup, pd.DataFrame]:
    """The validation search of ``dataset`` (cached): the setup it selects and one row per trial."""
    chosen, records = review_search.cached_search(dataset)
    rows = [
        {
            "factor": r["factor"],
            "value": r["value"],
            "model": RUN_LABELS.get(r["run"], r["run"]),
            "best epoch": r["best_epoch"] or "",
            "validation accuracy": r["best"],
            "by epoch": " ".join(f"{x:.3f}" for x in r["val_accuracy"]),
        }
        for r in records
    ]
    return chosen, pd.DataFrame(rows)


@dataclass
class Regime:
    """The two-phase protocol at :data:`mmtoken.review_regime.REGIME`, per held-out seed."""

    setup: Setup
    arrays: dict[int, dict]
    metrics: dict[int, dict]

    def values(self, key: str, sub: str | None = None) -> np.ndarray:
        out = [self.metrics[s]["two_phase"][key] for s in sorted(self.metrics)]
        return np.array([o[sub] if sub else o for o in out], dtype=float)


@functools.lru_cache(maxsize=None)
def regime(which: str = "reviews", steps: int | None = None, small: bool = False) -> Regime:
    """The two-phase protocol at the theory's dimension (:data:`mmtoken.review_regime.REGIME`), every held-out seed.

    ``which``: ``"reviews"`` (Rotten Tomatoes) or ``"control"`` (sequences of the data model, same sizes);
    ``steps``: another budget for phase two; ``small``: the small initialisation
    :data:`mmtoken.review_regime.SMALL` instead, on the seeds :data:`SMALL_SEEDS`.
    """
    arrays, metrics = {}, {}
    for seed in SMALL_SEEDS if small else SEEDS:
        arrays[seed], metrics[seed] = review_regime.cached(seed, which, steps, small=small)
    base = review_regime.SMALL if small else review_regime.REGIME
    s = base if steps is None else dataclasses.replace(base, p2_steps=steps)
    return Regime(s, arrays, metrics)


# ----------------------------------------------------------------------------- tables
STOP_LABELS = {"converged": "stopped (loss flat)", "budget": "budget spent"}
"""How a phase-two run ended, in words: its rule stops when the loss falls by less than 1e-9 (relative) over
20 evaluations, which is a stop, not a proof of convergence."""


def stop_label(stop: str) -> str:
    """:data:`STOP_LABELS` of a phase-two ``stop`` code (the code itself when unknown)."""
    return STOP_LABELS.get(stop, stop)


def stop_summary(labels) -> str:
    """``"stop: budget spent (3 of 5 seeds), stopped (loss flat) (2 of 5 seeds)"``: each stop label once with
    the number of seeds that ended on it, in order of first appearance (one line that fits the column)."""
    labels = list(labels)
    counts = {label: labels.count(label) for label in dict.fromkeys(labels)}
    return "stop: " + ", ".join(f"{label} ({n} of {len(labels)} seeds)" for label, n in counts.items())


def final_gradient_norm(metrics: dict) -> float:
    """``||grad_p L||`` at the end of phase two, from a run's ``metrics`` (its history holds the log-norm)."""
    return float(np.exp(metrics["phase_two"]["grad_log_norm"][-1]))


def order_bound(x: float) -> str:
    """``"< 1e-k"``: the smallest power of ten above ``x > 0`` (an order of magnitude that holds on any machine
    unless ``x`` sits at a power of ten)."""
    if not x > 0:
        raise ValueError(f"x must be positive, got {x!r}")
    return f"< {10.0 ** math.ceil(math.log10(x)):.0e}"


def span(x, digits: int = 3) -> str:
    """``min - max`` of the values ``x`` (one value alone if they agree at ``digits``)."""
    x = np.asarray(x, dtype=float)
    lo, hi = f"{x.min():.{digits}f}", f"{x.max():.{digits}f}"
    return lo if lo == hi else f"{lo} - {hi}"


def baseline_table(res: Result) -> pd.DataFrame:
    """Test accuracy of every model: range over the seeds (``accuracy``), its mean, and in how
    many seeds it beats attention with v fixed (``beats v fixed``)."""
    rows = []
    for name, r in res.datasets.items():
        ref = r.values("joint", "accuracy")
        for run in MODELS:
            acc = r.values(run, "accuracy")
            beats = int((acc > ref).sum()) if acc.size == ref.size else int((acc[0] > ref).sum())
            rows.append(
                {
                    "data": name,
                    "model": RUN_LABELS[run],
                    "accuracy": span(acc),
                    "mean": round(float(acc.mean()), 3),
                    "beats v fixed": "" if run == "joint" else f"{beats} of {ref.size}",
                }
            )
    return pd.DataFrame(rows)


def transposed(table: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """``table`` with rows and columns swapped (a narrow table of a wide one), its float columns
    first written with ``digits`` decimals so that every value keeps its precision."""
    out = table.copy()
    for col in out.columns:
        if out[col].dtype.kind == "f":
            out[col] = [f"{x:.{digits}f}" for x in out[col]]
    return out.T


def by_dataset(res: Result, row) -> pd.DataFrame:
    """A narrow table: one column per data set, one row per quantity.

    ``row(r)`` maps a :class:`DatasetResult` to ``{quantity: value}`` (values already
    formatted, e.g. with :func:`span`); quantities missing for a data set are left blank.
    """
    return pd.DataFrame({name: row(r) for name, r in res.datasets.items()}).fillna("")


def profile_table(res: Result) -> pd.DataFrame:
    """Sizes of each data set as the chapter uses it (one column per data set)."""
    return by_dataset(
        res,
        lambda r: {
            "train reviews": r.profile["n_train"],
            "test reviews": r.profile["n_test"],
            "vocabulary": r.profile["vocab"],
            "mean length": f"{r.profile['mean_len']:.1f}",
            "truncated (%)": f"{100 * r.profile['truncated']:.1f}",
            f"tokens seen >= {review_runs.U_COUNT} times": r.profile["tokens_u"],
            f"tokens seen >= {review_runs.TOP_COUNT} times": r.profile["tokens_top"],
            "no vocabulary word: train": r.profile["empty_train"],
            "no vocabulary word: test": r.profile["empty_test"],
        },
    )


def setup_table(res: Result) -> tuple[pd.DataFrame, dict[str, tuple]]:
    """Every field of each data set's :class:`~mmtoken.review_runs.Setup`, one column per data set,
    and (apart, being long) the scan values ``c`` of each data set."""
    setups = {name: dataclasses.asdict(r.setup) for name, r in res.datasets.items()}
    table = pd.DataFrame(
        {name: {k: str(v) for k, v in s.items() if k not in ("dataset", "scan")} for name, s in setups.items()}
    )
    return table, {name: tuple(s["scan"]) for name, s in setups.items()}


def trial_tables(dataset: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The validation search of ``dataset`` as two narrow tables, both indexed by trial number.

    ``trials``: factor, value, best epoch and validation accuracy (4 decimals) of each trial;
    ``curves``: its validation accuracy after each epoch, written without the leading zero
    (the bag of words has one value).
    """
    _, table = search(dataset)
    index = pd.RangeIndex(1, len(table) + 1, name="trial")
    trials = pd.DataFrame(
        {
            "factor": table["factor"].to_numpy(),
            "value": [f"{v:g}" for v in table["value"]],
            "best epoch": table["best epoch"].to_numpy(),
            "val acc": [f"{a:.4f}" for a in table["validation accuracy"]],
        },
        index=index,
    )
    curves = [" ".join(x[1:] if x.startswith("0.") else x for x in row.split()) for row in table["by epoch"]]
    width = max(len(c) for c in curves)
    curves = pd.DataFrame({"after each epoch": [c.ljust(width) for c in curves]}, index=index)
    return trials, curves


def seed_table(r: DatasetResult) -> pd.DataFrame:
    """Per held-out seed: the claims' statistics and the baselines' accuracies."""
    rows = []
    for seed in r.seeds:
        m = r.metrics[seed]
        u = m["joint"]["u_shape"]
        rows.append(
            {
                "seed": seed,
                "acc": m["joint"]["accuracy"],
                "partial U": u["partial"],
                "arm +": u["positive"],
                "arm -": u["negative"],
                "spearman U": u["spearman"],
                "selection": m["joint"]["selection"],
                "align": m["joint"]["alignment"],
                "v trained": m["joint_v"]["accuracy"],
                "uniform": m["uniform"]["accuracy"],
                "uniform tuned": m["uniform_tuned"]["accuracy"],
                "two-phase": m["two_phase"]["accuracy"],
            }
        )
    return pd.DataFrame(rows).set_index("seed").round(3)


def ushape_table(res: Result, run: str = "joint") -> pd.DataFrame:
    """The U-shape statistics of ``run`` (tokens seen >= 100 times), seed ranges."""
    rows = []
    for name, r in res.datasets.items():
        u = lambda k, r=r: r.values(run, "u_shape", k)  # noqa: E731
        rows.append(
            {
                "data": name,
                "tokens": int(u("n")[0]),
                "spearman(pE, |Delta|)": span(u("spearman")),
                "partial, given log count": span(u("partial")),
                "arm Delta > 0": span(u("positive")),
                "arm Delta < 0": span(u("negative")),
                "spearman(pE, Delta)": span(u("signed")),
                "spearman(pE, log count)": span(u("count")),
            }
        )
    return pd.DataFrame(rows)


def search_summary(res: Result) -> pd.DataFrame:
    """The chosen setup of each data set next to the one the runs use (they must agree)."""
    keys = (
        "min_count",
        "max_len",
        "d",
        "lr",
        "epochs",
        "init_std",
        "warmup",
        "lr_v",
        "epochs_v",
        "lr_uniform",
        "epochs_uniform",
        "bow_C",
    )
    rows = []
    for name, r in res.datasets.items():
        if name not in review_search.START:
            continue
        chosen, _ = search(name)
        rows.append(
            {
                "data": name,
                **{k: getattr(chosen, k) for k in keys},
                "used by the runs": all(getattr(chosen, k) == getattr(r.setup, k) for k in keys),
            }
        )
    return pd.DataFrame(rows).set_index("data")


def regime_table(reg: Regime) -> pd.DataFrame:
    """Phase two at the theory's dimension, per held-out seed.

    ``1 - max attention`` is the largest over the training reviews of one minus
    the attention on the most attended distinct token (0 once it underflows).
    """
    rows = []
    for seed in sorted(reg.metrics):
        m = reg.metrics[seed]["two_phase"]
        u = m["u_shape"]
        rows.append(
            {
                "seed": seed,
                "test acc": m["accuracy"],
                "train acc": m["train_accuracy"],
                "train loss": m["train_loss"],
                "evaluations": m["steps"],
                "stop": stop_label(m["stop"]),
                "||p||": m["p_norm"],
                # below 1e-9 it is machine precision (0 once it underflows float64): shown as that bound
                "1 - max attention": report.above(m["unsaturated"], 1e-9, ".0e"),
                "attends optimal token": m["attends_optimal"],
                "partial U": u["partial"],
                "arm +": u["positive"],
                "arm -": u["negative"],
                "spearman(pE, Delta)": u["signed"],
            }
        )
    return pd.DataFrame(rows).set_index("seed")


def saturated_at(metrics: dict, below: float = 1e-6) -> int | None:
    """The first recorded evaluation of phase two with ``1 - max attention < below`` in every training
    review (``None`` if never)."""
    h = metrics["phase_two"]
    hit = np.flatnonzero(np.asarray(h["unsaturated"]) < below)
    return int(np.asarray(h["steps"])[hit[0]]) if hit.size else None


def random_part_table(reg: Regime) -> pd.DataFrame:
    """Random against learned part of the values after the one step, per seed: the share of the vocabulary
    (padding left out) whose ``|E_s^{0T} v|`` exceeds ``|E_s^{1T} v - E_s^{0T} v|``, and the median ratio."""
    rows = []
    for seed in sorted(reg.arrays):
        a = reg.arrays[seed]
        b0 = np.abs(a["values/E0"][1:])
        step = np.abs(a["values/one_step"][1:] - a["values/E0"][1:])
        ratio = b0 / step
        rows.append(
            {"seed": seed, "random > learned": float((ratio > 1).mean()), "median ratio": float(np.median(ratio))}
        )
    return pd.DataFrame(rows).set_index("seed")


def attended_tokens(
    r: DatasetResult, seed: int | None = None, k: int = 10, run: str = "joint", min_count: int = review_runs.U_COUNT
) -> pd.DataFrame:
    """The ``k`` most and least attended tokens (by ``p^T E_s``) among those seen ``min_count`` times."""
    a = r.arrays[seed or r.seeds[0]][f"logits/{run}"]
    idx = np.flatnonzero(r.stats.count >= min_count)
    order = idx[np.argsort(-a[idx], kind="stable")]
    rows = []
    for hi, lo in zip(order[:k], order[::-1][:k]):
        rows.append(
            {
                "most attended": r.vocab[hi],
                "pE": a[hi],
                "Delta": r.stats.delta[hi],
                "least attended": r.vocab[lo],
                "pE ": a[lo],
                "Delta ": r.stats.delta[lo],
            }
        )
    return pd.DataFrame(rows, index=pd.RangeIndex(1, len(rows) + 1, name="rank")).round(2)


# ----------------------------------------------------------------------------- plots
def _datasets(res: Result | None, names=None) -> list[DatasetResult]:
    res = res or run()
    return [res.datasets[n] for n in (names or res.datasets)]


def _symlog(ax, axis: str, data: np.ndarray) -> None:
    """Symmetric log scale, linear below the 20% quantile of |data|, ticks at a few powers of ten."""
    a = np.abs(data[np.isfinite(data)])
    lin = float(np.quantile(a[a > 0], 0.2)) if (a > 0).any() else 1.0
    top = float(a.max()) if a.size else 1.0
    powers = [10.0**k for k in range(int(np.floor(np.log10(lin))) + 1, int(np.floor(np.log10(top))) + 1)]
    ticks = [-x for x in powers[::-1]] + [0.0] + powers
    if len(ticks) > 7:
        ticks = [-x for x in powers[::-2][::-1]] + [0.0] + powers[::-1][::2][::-1]
    getattr(ax, f"set_{axis}scale")("symlog", linthresh=lin, linscale=0.6)
    getattr(ax, f"set_{axis}ticks")(
        ticks, [f"{t:.0e}".replace("e-0", "e-").replace("e+0", "e") if t else "0" for t in ticks]
    )


SHORT_LABELS = {
    "one_step": "one step on E",
    "two_phase": "two-phase",
    "joint": "joint, v fixed",
    "joint_v": "joint, v trained",
}
"""Panel-title names of the runs (:data:`RUN_LABELS` gives the full names)."""


def plot_alignment(res: Result | None = None, names=None, seed: int = SEEDS[0]):
    """``E_s^T v`` against the signed frequency ``alpha_s``: after one step on E, and after joint training."""
    rs = _datasets(res, names)
    fig, axes = plotting.subplots(2, len(rs), squeeze=False, aspect=0.7)
    runs = ("one_step", "joint")
    plotting.panel_titles(axes, [f"{r.name}, {SHORT_LABELS[run_name]}" for r in rs for run_name in runs])
    for row, r in zip(axes, rs):
        keep = r.stats.count >= review_runs.TOP_COUNT
        for ax, run_name in zip(row, runs):
            b = r.arrays[seed][f"values/{run_name}"][keep]
            token_scatter(
                r.stats.alpha[keep], b, xlabel=r"signed frequency $\alpha_s$", ylabel=r"$E_s^\top v$", ax=ax, alpha=0.3
            )
            _symlog(ax, "x", r.stats.alpha[keep])
            _symlog(ax, "y", b)
    return fig


def plot_ushape(res: Result | None = None, names=None, runs=("two_phase", "joint", "joint_v"), seed: int = SEEDS[0]):
    """Paper B, Fig. 1: attention logit ``p^T E_s`` against ``Delta_s``, per run (tokens seen >= 100 times).

    Panel titles: data set and run, then the partial U statistic and the two arms of ``seed``.
    """
    rs = _datasets(res, names)
    fig, axes = plotting.subplots(len(runs), len(rs), squeeze=False, aspect=1.0)
    titles = []
    for row, r in zip(axes, rs):
        keep = r.stats.count >= review_runs.U_COUNT
        for j, (ax, run_name) in enumerate(zip(row, runs)):
            a = r.arrays[seed][f"logits/{run_name}"][keep]
            token_scatter(
                r.stats.delta[keep],
                a,
                xlabel=r"$\Delta_s$",
                ylabel=r"logit $p^\top E_s$" if j == 0 else "",
                ax=ax,
                alpha=0.35,
            )
            u = r.metrics[seed][run_name]["u_shape"]
            titles.append(
                f"{r.name}, {SHORT_LABELS.get(run_name, run_name)}\nU {u['partial']:.2f}, arms "
                f"{u['positive']:.2f}/{u['negative']:.2f}"
            )
    plotting.panel_titles(axes, titles)
    return fig


def plot_scan(res: Result | None = None, names=None, seed: int = SEEDS[0]):
    """Two-phase protocol on the training split: loss along ``p = c v / max_s |E^1_s v|`` and where phase two ends."""
    rs = _datasets(res, names)
    fig, ax = plotting.one_panel()
    for k, r in enumerate(rs):
        st = plotting.style(k)
        sc, tp = r.metrics[seed]["scan"], r.metrics[seed]["two_phase"]
        ax.plot(sc["c"], sc["loss"], marker="o", **st, label=f"{r.name}: p = c v after one step")
        ax.plot(
            [tp["c"]],
            [tp["train_loss"]],
            "*",
            ms=13,
            color=st["color"],
            markeredgecolor="k",
            label=f"{r.name}: end of phase two",
        )
    ax.axhline(np.log(2), color="0.4", lw=0.8, ls=":")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel(r"c = largest attention logit $|p^\top E^1_s|$, signed by $p^\top v$")
    ax.set_ylabel("training loss")
    fig.legend(loc="outside lower center", ncol=2)
    return fig


def plot_regime(reg: Regime | None = None):
    """Phase two at the theory's dimension: loss, ``||p||`` and ``1 - max attention`` along the run, every seed."""
    reg = reg or regime()
    fig, axes = plotting.three_panels(["training loss", "norm of p", "1 - max attention"], aspect=1.1)
    for k, seed in enumerate(sorted(reg.metrics)):
        h = reg.metrics[seed]["phase_two"]
        steps = np.asarray(h["steps"])
        for ax, key in zip(axes, ("loss", "p_norm", "unsaturated")):
            y = np.asarray(h[key], dtype=float)
            ax.plot(
                steps[1:] if key != "loss" else steps,
                y[1:] if key != "loss" else y,
                lw=1.2,
                label=f"seed {seed}",
                **plotting.style(k),
            )
    for ax, ylabel in zip(axes, ("loss", r"$\Vert p\Vert$", "max over reviews")):
        ax.set_xlabel("evaluation")
        ax.set_ylabel(ylabel)
    axes[2].set_yscale("log")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=len(reg.metrics))
    return fig


def plot_attention(res: Result | None = None, name: str = "imdb", width: int = 7, seed: int = SEEDS[0]):
    """The words of a few test reviews coloured by the attention of the jointly trained model (one panel each,
    titled with the review's label and whether the model classifies it correctly)."""
    r = _datasets(res, [name])[0]
    exs = r.metrics[seed]["examples"]
    atts = [r.arrays[seed][f"example/{i}"] for i in range(len(exs))]
    nrows = [int(np.ceil(len(ex["words"]) / width)) for ex in exs]
    fig, axes = plt.subplots(
        len(exs),
        1,
        figsize=(plotting.COLUMN_WIDTH, 0.32 * sum(nrows) + 0.45 * len(exs)),
        gridspec_kw={"height_ratios": nrows},
        squeeze=False,
        layout="constrained",
    )
    cmap = plt.get_cmap("rocket_r") if "rocket_r" in plt.colormaps() else plt.get_cmap("Reds")
    titles = []
    for ax, ex, w, h in zip(axes[:, 0], exs, atts, nrows):
        grid = np.full(h * width, np.nan)
        grid[: w.size] = w
        ax.imshow(grid.reshape(h, width), cmap=cmap, vmin=0, vmax=max(w.max(), 1e-12), aspect="auto")
        for k, word in enumerate(ex["words"]):
            ax.text(
                k % width,
                k // width,
                word,
                ha="center",
                va="center",
                fontsize=8,
                color="white" if w[k] > 0.6 * w.max() else "black",
            )
        ax.set_xticks([])
        ax.set_yticks([])
        ax.grid(False)
        label = "positive" if ex["label"] > 0 else "negative"
        correct = (ex["output"] > 0) == (ex["label"] > 0)
        titles.append(f"{label} review, " + ("classified correctly" if correct else "misclassified"))
    plotting.panel_titles(axes[:, 0], titles)
    return fig


def plot_accuracy(res: Result | None = None):
    """Test accuracy of every model per data set: the range over the held-out seeds (bars: mean)."""
    rs = _datasets(res)
    fig, ax = plotting.one_panel(aspect=0.45)
    cs = colors(len(MODELS))
    width = 0.8 / len(MODELS)
    for j, run_name in enumerate(MODELS):
        x = np.arange(len(rs)) + (j - (len(MODELS) - 1) / 2) * width
        accs = [r.values(run_name, "accuracy") for r in rs]
        mean = np.array([a.mean() for a in accs])
        err = np.array([[m - a.min() for m, a in zip(mean, accs)], [a.max() - m for m, a in zip(mean, accs)]])
        ax.bar(x, mean, width, color=cs[j], label=RUN_LABELS[run_name], yerr=err, capsize=2, error_kw={"lw": 0.8})
    ax.set_xticks(np.arange(len(rs)), [r.name for r in rs])
    ax.set_ylim(0.45, 0.95)
    ax.axhline(0.5, color="0.4", lw=0.8, ls=":")
    ax.set_ylabel("test accuracy")
    fig.legend(loc="outside lower center", ncol=2)
    return fig


FIGURES = {
    "fig-real-alignment": lambda: plot_alignment(),
    "fig-real-ushape": lambda: plot_ushape(),
    "fig-real-scan": lambda: plot_scan(),
    "fig-real-regime": lambda: plot_regime(),
    "fig-real-attention-imdb": lambda: plot_attention(name="imdb"),
    "fig-real-attention-rt": lambda: plot_attention(name="rt"),
    "fig-real-accuracy": lambda: plot_accuracy(),
}


# ----------------------------------------------------------------------------- claims
THRESHOLDS = {
    "imdb": {"accuracy": 0.85, "selection": 8.0, "sel_acc": 0.8},
    "rt": {"accuracy": 0.70, "selection": 3.0, "sel_acc": 0.70},
    "yelp": {"accuracy": 0.85, "selection": 8.0, "sel_acc": 0.8},
}
U_PARTIAL, U_ARM = 0.5, 0.4
ALIGN_JOINT = 0.7
ONE_STEP = {"closed_form": 1e-9, "first_order": 1e-3, "spearman": 0.99}
SMALL_SEEDS = SEEDS[:3]  # the small-initialisation regime: three held-out seeds (its runs are ten times longer)
SMALL_ATTENDS = 0.99  # B.regime.small_control: share of training sequences on their important token
MISS_SMALL_CONTROL = (
    "measured 2026-12-01 after the threshold's commit: on seeds 10-12 the control puts the largest "
    "attention of only 0.520, 0.534 and 0.499 of its training sequences on their important token after "
    "its 13,600 evaluations (budget spent; test accuracy 0.988-0.992, the values alone classify); the "
    "attention saturates (1 - max attention < 1e-6) by evaluation 380-430 (phase two's step grows by 1.2 "
    "per accepted step) on a selection that leaves half the sequences on another token, and the loss "
    "then stays flat (seed 10: 0.47526 at evaluation 1,130, 0.47484 at 13,600)."
)
NAMES = {"imdb": "IMDB", "rt": "Rotten Tomatoes", "yelp": "Yelp polarity"}
SEED_TEXT = f"on each of the held-out seeds {SEEDS[0]}-{SEEDS[-1]}"


def _per_seed(x: np.ndarray, digits: int = 4) -> list[float]:
    return [round(float(v), digits) for v in x]


def _register(ds: str) -> None:
    t = THRESHOLDS[ds]
    label = NAMES[ds]
    claim = functools.partial(ledger_claim, requires=yelp_missing if ds == "yelp" else None)

    @claim(
        f"B.{ds}.accuracy",
        kind="observation",
        chapter=CHAPTER,
        checks="paper B, real-data experiments",
        statement=f"On {label}, joint training of E and p with v fixed reaches the stated test accuracy "
        f"{SEED_TEXT} (judged on the worst).",
        threshold=f"test accuracy >= {t['accuracy']} on every seed",
    )
    def _accuracy() -> Measured:
        r = run_dataset(ds)
        acc = r.values("joint", "accuracy")
        return Measured(
            {"worst": round(float(acc.min()), 4), "per_seed": _per_seed(acc)},
            bool(acc.min() >= t["accuracy"]),
            f"v trained {span(r.values('joint_v', 'accuracy'))}, uniform tuned "
            f"{span(r.values('uniform_tuned', 'accuracy'))}, bag of words "
            f"{r.profile['bow']['accuracy']:.4f}",
        )

    @claim(
        f"B.{ds}.one_step_alignment",
        kind="consistency",
        chapter=CHAPTER,
        checks="paper B, one step on E",
        statement=f"On {label}, after the one step at p = 0, E^1_s v - E^0_s v equals the closed form "
        "eta (1/N) sum_i y_i sigma(-y_i f_i) n_s(X_i)/T_i computed from token counts (independently "
        "of autograd), is (eta/2) alpha_s to first order, and so E^1_s v is a monotone function of "
        "the signed frequency (tokens seen >= 20 times), " + SEED_TEXT + ".",
        threshold=f"relative deviation from the closed form <= {ONE_STEP['closed_form']:g} and from "
        f"(eta/2) alpha_s <= {ONE_STEP['first_order']:g}; Spearman(E^1 v, alpha) >= {ONE_STEP['spearman']}",
    )
    def _one_step() -> Measured:
        r = run_dataset(ds)
        cf, fo = r.values("one_step", "closed_form_error"), r.values("one_step", "first_order_error")
        rho = r.values("one_step", "alignment")
        ok = (
            cf.max() <= ONE_STEP["closed_form"]
            and fo.max() <= ONE_STEP["first_order"]
            and rho.min() >= ONE_STEP["spearman"]
        )
        return Measured(
            {"closed_form": float(cf.max()), "first_order": float(fo.max()), "spearman": round(float(rho.min()), 6)},
            bool(ok),
        )

    @claim(
        f"B.{ds}.alignment",
        kind="observation",
        chapter=CHAPTER,
        checks="paper B, one step on E",
        statement=f"On {label}, after joint training (E and p, v fixed) E_s^T v still increases with the signed "
        f"frequency alpha_s (tokens seen >= 20 times), {SEED_TEXT}.",
        threshold=f"Spearman(E v, alpha) >= {ALIGN_JOINT} on every seed",
    )
    def _alignment() -> Measured:
        rho = run_dataset(ds).values("joint", "alignment")
        return Measured(
            {"worst": round(float(rho.min()), 4), "per_seed": _per_seed(rho)}, bool(rho.min() >= ALIGN_JOINT)
        )

    @claim(
        f"B.{ds}.u_shape",
        kind="observation",
        chapter=CHAPTER,
        checks="paper B, Figure 1",
        statement=f"On {label}, after joint training with v fixed the attention logit p^T E_s grows with "
        f"|Delta_s| (tokens seen >= {review_runs.U_COUNT} times in training) beyond what their frequency "
        "explains, and on each arm (Delta_s > 0 and < 0) separately: a U in Delta_s, " + SEED_TEXT + ".",
        threshold=f"partial Spearman(p^T E_s, |Delta_s| given log count) >= {U_PARTIAL} and Spearman(p^T E_s, "
        f"|Delta_s|) >= {U_ARM} on each arm, on every seed",
    )
    def _ushape() -> Measured:
        r = run_dataset(ds)
        part, pos, neg = (r.values("joint", "u_shape", k) for k in ("partial", "positive", "negative"))
        ok = part.min() >= U_PARTIAL and pos.min() >= U_ARM and neg.min() >= U_ARM
        return Measured(
            {
                "partial": round(float(part.min()), 4),
                "arm_pos": round(float(pos.min()), 4),
                "arm_neg": round(float(neg.min()), 4),
            },
            bool(ok),
            f"worst seed of each statistic; two-phase protocol: partial "
            f"{span(r.values('two_phase', 'u_shape', 'partial'))}",
        )

    @claim(
        f"B.{ds}.selection",
        kind="observation",
        chapter=CHAPTER,
        checks="paper B, token selection",
        statement=f"On {label} test reviews, attention mass on the top decile of |Delta_s| tokens (seen >= 20 "
        f"times) is a multiple of their share of positions, in a run that classifies well, {SEED_TEXT}.",
        threshold=f"mass / share >= {t['selection']} with test accuracy >= {t['sel_acc']}, on every seed",
    )
    def _selection() -> Measured:
        r = run_dataset(ds)
        ratio, acc = r.values("joint", "selection"), r.values("joint", "accuracy")
        return Measured(
            {"ratio": round(float(ratio.min()), 3), "accuracy": round(float(acc.min()), 4)},
            bool(ratio.min() >= t["selection"] and acc.min() >= t["sel_acc"]),
            f"ratio {span(ratio, 2)} over the seeds",
        )


def small_regime_check(which: str) -> Measured:
    """B.regime.small_control's check on the small-initialisation runs of ``which`` (``"control"`` or ``"reviews"``)."""
    reg = regime(which, small=True)
    share = np.array([reg.metrics[k]["two_phase"]["attends_optimal"] for k in sorted(reg.metrics)])
    acc = np.array([reg.metrics[k]["two_phase"]["accuracy"] for k in sorted(reg.metrics)])
    return Measured(
        {"worst": round(float(share.min()), 4), "per_seed": _per_seed(share)},
        bool(share.min() >= SMALL_ATTENDS),
        f"{which}, seeds {list(SMALL_SEEDS)}: test accuracy {span(acc)}",
    )


@ledger_claim(
    "B.regime.small_control",
    kind="observation",
    chapter=CHAPTER,
    checks="paper B's two-phase protocol at a small initialisation, on its own data model",
    statement="On the data-model control at Rotten Tomatoes' sizes (d = 2048 >= |V|), with E^0 of row norm "
    "sigma0 = 0.5 (chapter 11's units; per-entry std 0.5 / sqrt(2048)) and phase two's budget scaled as "
    "1/margin (1,500 x 4.5 / 0.5 = 13,600 gradient evaluations), phase two puts each training sequence's "
    "largest attention on its important token, on each of the held-out seeds 10-12.",
    threshold="share of training sequences whose most attended token is their important one >= 0.99 on every "
    "seed (set 2026-12-01, committed before any run at this initialisation)",
    known_miss=MISS_SMALL_CONTROL,
    competitor="Rotten Tomatoes' reviews under the same protocol and sizes (no data model)",
    against=lambda: small_regime_check("reviews"),
)
def _small_control() -> Measured:
    return small_regime_check("control")


def yelp_missing() -> str | None:
    """``None`` when Yelp's data are on disk, else how to get them: Yelp's claims then report
    *data missing* (they are always registered; Yelp is never downloaded for you nor substituted)."""
    if text.available("yelp"):
        return None
    return "Yelp polarity is not on disk: `python -m mmtoken.datasets fetch yelp` (see the chapter)"


for _ds in DATASETS:
    _register(_ds)
