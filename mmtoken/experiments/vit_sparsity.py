"""Chapter 09: the [CLS] attention of a small vision transformer becomes sparse as its key-query norm grows.

Paper A (§4) trains a ViT on CIFAR-10 and shows the [CLS] attention of the
last layer going from dense to a few patches while the norm of the
attention weights grows. Here:

``quick``
    Fashion-MNIST (offline): 50,000 training images, 10,000 validation images
    carved from the training set (a fixed random split), the 10,000 test
    images touched once per seed at the end. Depth 2, 1 head, width 48, patch
    4 (7x7 = 49 patches), AdamW at 1e-3 without weight decay, 10% linear
    warm-up then cosine, gradient clipping at 1, 9 epochs, one CPU thread per
    run: the recipe chosen on the validation split (:mod:`.vit_tuning`).
``paper``
    CIFAR-10 (downloaded), depth 6, 6 heads, width 384, patch 2 (the paper's
    16x16 grid), AdamW lr 3e-3 (the paper's rate), crops and flips, 100
    epochs; for a GPU (not tuned or run by the book).

Observations are judged on the held-out seeds :data:`HELD_OUT_SEEDS` (the
recipe was chosen on :data:`DEV_SEEDS`), each claim on the worst seed. The
runs, their cache and its validation live in :mod:`mmtoken.vit_runs`.
"""

from __future__ import annotations

__all__ = [
    "GRID",
    "shown",
    "shown_table",
    "CHAPTER",
    "HELD_OUT_SEEDS",
    "DEV_SEEDS",
    "ACCURACY",
    "QUICK",
    "PAPER",
    "SMALLER_LR",
    "COLLAPSE_LR",
    "experiment",
    "Study",
    "controls",
    "run",
    "growth",
    "seed_summary",
    "validation_summary",
    "seed_table",
    "norm_verdict",
    "sparsity_verdict",
    "spread_check",
    "MISS_LEARNS",
    "MISS_NORM",
    "MISS_SPARSE",
    "plot_training",
    "example_indices",
    "plot_attention_maps",
    "NORM_LABELS",
    "plot_norms",
    "plot_sparsity",
    "plot_where",
    "FIGURES",
    "COLLAPSE_VAL",
    "QK_OVER_OV",
    "averaged_verdict",
    "learns_check",
    "norm_check",
    "sparse_check",
]

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from .. import config, report, vit
from ..ledger import Measured, claim
from ..plotting import COLUMN_WIDTH, colors, panel_titles, style, subplots
from ..vit_runs import Experiment, Result, checkpoint, effective_patches, run_experiments

CHAPTER = "09_vit_sparsity"
HELD_OUT_SEEDS = (10, 11, 12)
"""Seeds every observation claim is judged on (never used while choosing the recipe)."""
DEV_SEEDS = (0, 1, 2, 3, 4)
"""Seeds used while choosing the recipe on the validation split."""
# Stored outputs hold on any machine (CONTRIBUTING, "Stored outputs that hold on any machine"): trained results
# are shown on grids coarser than their spread across numeric environments, measured on seed 10 at quick scale
# (OpenBLAS Haswell + ATen default kernels + one thread against the default): test accuracy 1.6e-3, validation
# accuracy during training up to 0.02, growths 0.02 (qk) to 0.14 (ov), effective patches 0.7-0.9; foreground
# shares moved by 0.09 and are shown only against the uniform share. Claims judge the raw values.
GRID = {"acc": 0.01, "curve": 0.05, "growth": 0.5, "patches": 2.0}


def shown(x: float, what: str) -> str:
    """``x`` on the grid ``GRID[what]`` (``"acc"``, ``"curve"``, ``"growth"`` or ``"patches"``)."""
    return report.on_grid(x, GRID[what])


def shown_table(frame: pd.DataFrame, grids: Mapping[str, str]) -> pd.DataFrame:
    """A copy of ``frame`` with each column named in ``grids`` printed on its grid; other columns unchanged."""
    out = frame.copy()
    for column, what in grids.items():
        out[column] = [shown(x, what) for x in frame[column]]
    return out


ACCURACY = 0.85
"""Test accuracy a run must reach to count as a working classifier (``A.vit.learns``)."""
COLLAPSE_VAL = 0.70
"""The collapse gate of ``A.vit.norm_grows``, ``A.vit.sparsifies`` and ``A.vit.averaged_map``: a run counts
only if its final validation accuracy is at least this (set 2026-12-01, after seeds 10-12 and the collapsed
control, 0.530, had been measured; fixed for every later run). It excludes collapse only; accuracy is
``A.vit.learns``'s own claim."""
QK_OVER_OV = 3.0
"""``A.vit.norm_grows``: ``||W_Q W_K^T||_F`` must grow this many times more than ``||W_V W_O||_F`` (the factor 3
was fixed before the first runs, against ``||W_V||_F``; now compared like with like, never loosened)."""


QUICK = Experiment(
    dataset="fashion-mnist",
    model=vit.ViTConfig(image_size=28, channels=1, patch=4, width=48, depth=2, heads=1, mlp_ratio=2, init_std=0.02),
    train=vit.TrainConfig(
        epochs=9,
        batch_size=128,
        lr=1e-3,
        weight_decay=0.0,
        warmup=0.1,
        grad_clip=1.0,
        seed=HELD_OUT_SEEDS[0],
        threads=1,
    ),
)
"""The recipe :func:`.vit_tuning.choose` picks from its record ("width 48 + 9 epochs"), on the first held-out seed."""
PAPER = Experiment(
    dataset="cifar-10",
    model=vit.ViTConfig(image_size=32, channels=3, patch=2, width=384, depth=6, heads=6, mlp_ratio=2, init_std=0.02),
    train=vit.TrainConfig(
        epochs=100,
        batch_size=256,
        lr=3e-3,
        weight_decay=0.0,
        warmup=0.05,
        grad_clip=1.0,
        augment=True,
        seed=HELD_OUT_SEEDS[0],
        threads=None,
    ),
    n_validation=5000,
    logs_per_epoch=2,
    logs_first_epoch=16,
    map_epochs=(0, 1, 2, 5, 10, 25, 50, 100),
    foreground=None,
)
SMALLER_LR = 10.0
"""The smaller-learning-rate control divides the chosen rate by this."""
COLLAPSE_LR = 20.0
"""The failing control multiplies the chosen rate by this (and drops warm-up and clipping)."""


def experiment(scale: str | None = None, seed: int | None = None) -> Experiment:
    """The configuration of a scale, optionally with another seed."""
    exp = config.pick(quick=QUICK, paper=PAPER, which=scale)
    return exp if seed is None else exp.with_seed(seed)


@dataclass
class Study:
    """The chapter's runs: the recipe on each held-out seed, and the controls.

    Attributes
    ----------
    seeds : seed -> run of the chosen recipe (:data:`HELD_OUT_SEEDS`).
    smaller_lr : seed -> the same with the learning rate divided by :data:`SMALLER_LR`
        (seed :data:`HELD_OUT_SEEDS` [0] only).
    collapse : seed -> a run made to fail (:func:`controls`), on development seed 0;
        it never touches the test split.
    """

    seeds: dict[int, Result]
    smaller_lr: dict[int, Result]
    collapse: dict[int, Result]


def controls(scale: str | None = None) -> dict[str, list[Experiment]]:
    """The runs of :class:`Study` at ``scale``.

    ``seeds``: the recipe on each held-out seed. ``smaller_lr``: the first of
    them with the learning rate divided by :data:`SMALLER_LR`. ``collapse``:
    one epoch of the recipe with a :data:`COLLAPSE_LR` times larger rate and
    neither warm-up nor clipping, on development seed 0, validation only: a
    model that fails to learn, to show what the claims' statistics do on one.
    """
    main = [experiment(scale, s) for s in HELD_OUT_SEEDS]
    small = [replace(main[0], train=replace(main[0].train, lr=main[0].train.lr / SMALLER_LR))]
    base = experiment(scale, DEV_SEEDS[0])
    broken = replace(
        base,
        test=False,
        map_epochs=None,
        train=replace(base.train, lr=base.train.lr * COLLAPSE_LR, warmup=0.0, grad_clip=None, epochs=1),
    )
    return {"seeds": main, "smaller_lr": small, "collapse": [broken]}


def run(scale: str | None = None) -> Study:
    """The chapter's runs at ``scale`` (default: the current one, :func:`mmtoken.config.scale`;
    ``quick``: Fashion-MNIST on a CPU; ``paper``: CIFAR-10 on a GPU)."""
    return _study(scale or config.scale())


@functools.lru_cache(maxsize=None)
def _study(scale: str) -> Study:
    groups = controls(scale)
    flat = [e for exps in groups.values() for e in exps]
    results = iter(run_experiments(flat))
    return Study(**{name: {e.train.seed: next(results) for e in exps} for name, exps in groups.items()})


# --------------------------------------------------------------------------- summaries


def growth(r: Result, name: str, layer: int = -1) -> float:
    """``log[name]`` at the end over its value at initialisation, for one block."""
    return float(r.log[name][-1, layer] / r.log[name][0, layer])


def seed_summary(r: Result, layer: int = -1) -> dict:
    """What the claims check for one run: accuracy, norm growths and where the final attention is (test split)."""
    if r.test is None:
        raise ValueError("this run never touched the test split (Experiment.test is False)")
    t = r.test["layers"][layer]
    return {
        "seed": r.seed,
        "test_acc": r.test["acc"],
        "learned": r.test["acc"] >= ACCURACY,
        "collapsed": bool(r.val_acc[-1] < COLLAPSE_VAL),
        **{f"{k}_growth": growth(r, k, layer) for k in ("qk", "q", "k", "v", "ov", "mlp_in", "mlp_out")},
        "eff_image": t["eff_image"],
        "eff_mean": t["eff_mean"],
        "n_patches": r.n_patches,
        "fg_share": t["fg_share"],
        "uniform": t["uniform"],
        "top1_fg": t["top1_fg"],
        "val_acc": float(r.val_acc[-1]),
    }


def validation_summary(r: Result, layer: int = -1) -> dict:
    """The statistics of :func:`seed_summary` from the validation split (for runs that never saw the test split).

    The attention statistics are those of the probe batch at the last log point.
    """
    return {
        "seed": r.seed,
        "val_acc": float(r.val_acc[-1]),
        "learned": bool(r.val_acc[-1] >= ACCURACY),
        "collapsed": bool(r.val_acc[-1] < COLLAPSE_VAL),
        **{f"{k}_growth": growth(r, k, layer) for k in ("qk", "q", "k", "v", "ov", "mlp_in", "mlp_out")},
        "eff_image": float(r.log["eff"][-1, layer]),
        "eff_mean": float(r.log["eff_mean"][-1, layer]),
        "n_patches": r.n_patches,
        "fg_share": float(r.log["fg_share"][-1, layer]),
        "uniform": float(r.probe_fg.mean()),
    }


def seed_table(results: Mapping[int, Result], layer: int = -1) -> pd.DataFrame:
    """:func:`seed_summary` of every run, one row per seed."""
    return pd.DataFrame([seed_summary(r, layer) for r in results.values()]).set_index("seed")


def norm_verdict(s: Mapping) -> bool:
    """``A.vit.norm_grows`` on one seed: not collapsed, ``||W_Q W_K^T||_F`` grows >= 5x and >= 3x more than
    ``||W_V W_O||_F`` (a product of two matrices against a product of two)."""
    return bool(not s["collapsed"] and s["qk_growth"] >= 5 and s["qk_growth"] >= QK_OVER_OV * s["ov_growth"])


def sparsity_verdict(s: Mapping) -> bool:
    """``A.vit.sparsifies`` on one seed: not collapsed, and per-image effective patches <= P/2."""
    return bool(not s["collapsed"] and s["eff_image"] <= s["n_patches"] / 2)


def averaged_verdict(s: Mapping) -> bool:
    """``A.vit.averaged_map`` on one seed: not collapsed, and the averaged map's effective patches <= P/2."""
    return bool(not s["collapsed"] and s["eff_mean"] <= s["n_patches"] / 2)


def spread_check(r: Result, layer: int = -1) -> dict[str, np.ndarray]:
    """Entropy drop <= logit spread <= its bound, per stored epoch, on the probe batch.

    Returns arrays ``(M,)`` over ``epochs_mapped``: ``drop_mean`` (mean of
    ``log P - H``), ``spread_mean`` and ``spread_max`` (measured ``max_t z_t -
    min_t z_t`` of the [CLS] logits), ``bound`` (:func:`mmtoken.vit.logit_spread_bound`),
    and ``holds`` (``log P - H <= spread <= bound`` for every image and head).
    """
    x = r.normalizer(torch.as_tensor(r.probe_images))
    out = {k: [] for k in ("drop_mean", "spread_mean", "spread_max", "bound", "holds")}
    for e in r.experiment.epochs_mapped:
        model = checkpoint(r, e)
        z = vit.cls_logits(model, x, layer).double()
        drop = np.log(r.n_patches) - vit.entropy(z.softmax(-1))
        spread = z.max(-1).values - z.min(-1).values
        bound = vit.logit_spread_bound(model, layer)
        out["drop_mean"].append(float(drop.mean()))
        out["spread_mean"].append(float(spread.mean()))
        out["spread_max"].append(float(spread.max()))
        out["bound"].append(bound)
        out["holds"].append(bool((drop <= spread + 1e-9).all() and (spread <= bound * (1 + 1e-6)).all()))
    return {k: np.asarray(v) for k, v in out.items()}


# --------------------------------------------------------------------------- claims (worst of the held-out seeds)

# Measured on the held-out seeds after the recipe was fixed on validation data (chapter 9 says the same);
# declared on the claims with known_miss=.
# Known-miss evidence in the digits that hold on any machine (GRID): the claims block prints it.
MISS_LEARNS = (
    "seeds 10 and 11 end within half a point of the 0.85 bar (seed 11 below it; seed 10 on either side "
    "of it depending on the numeric environment: 0.8493 and 0.8509 measured), seed 12 about a point "
    "above; on every seed the test split is 1-1.5 points harder than the validation split, a gap the "
    "recipe search did not allow for; the model underfits (seed 10: training accuracy about 0.87)."
)
MISS_NORM = (
    "compared like with like, ||W_Q W_K^T||_F grows about 16-19x but only about 2-2.5x more than the "
    "value-output product ||W_V W_O||_F (about 8-9.5x), below the factor 3 fixed before the first runs "
    "(against ||W_V||_F alone it is about 8-9x); no seed collapsed."
)
MISS_SPARSE = (
    "seed 10 keeps about 26 effective patches per image (> P/2 = 24.5); seeds 11 and 12 about 22 and "
    "15; no seed collapsed."
)
MISS_AVERAGED = (
    "the test-averaged maps keep about 38, 34 and 30 effective patches (seeds 10-12; P/2 = 24.5): "
    "each image attends to its own few patches and the positions differ between images."
)


def _competitor(name: str) -> dict:
    """The summary of a control run of :class:`Study` (``"smaller_lr"`` on the test split, ``"collapse"`` on
    the validation split)."""
    study = run()
    if name == "collapse":
        return validation_summary(study.collapse[DEV_SEEDS[0]])
    return seed_summary(study.smaller_lr[HELD_OUT_SEEDS[0]])


def learns_check(rows: Mapping[int, Mapping]) -> Measured:
    """``A.vit.learns``'s check on per-seed summaries (``test_acc``)."""
    value = {  # on the grid (the verdict is judged on the raw values)
        "worst": float(shown(min(r["test_acc"] for r in rows.values()), "acc")),
        **{f"seed {s}": float(shown(r["test_acc"], "acc")) for s, r in rows.items()},
    }
    return Measured(value, all(r["test_acc"] >= ACCURACY for r in rows.values()), "test split")


def norm_check(rows: Mapping[int, Mapping]) -> Measured:
    """``A.vit.norm_grows``'s check on per-seed summaries."""
    g = lambda x: float(shown(x, "growth"))  # on the grid (the verdict is judged on the raw values)
    value = {
        "min qk growth": g(min(r["qk_growth"] for r in rows.values())),
        "min qk/ov growth": g(min(r["qk_growth"] / r["ov_growth"] for r in rows.values())),
        **{
            f"seed {s}": {
                "qk": g(r["qk_growth"]),
                "ov": g(r["ov_growth"]),
                "qk/ov": g(r["qk_growth"] / r["ov_growth"]),
                "collapsed": r["collapsed"],
            }
            for s, r in rows.items()
        },
    }
    return Measured(value, all(norm_verdict(r) for r in rows.values()), "growth = final / initial Frobenius norm")


def sparse_check(rows: Mapping[int, Mapping], key: str = "eff_image") -> Measured:
    """``A.vit.sparsifies`` (``key="eff_image"``) or ``A.vit.averaged_map`` (``"eff_mean"``) on per-seed summaries."""
    verdict = sparsity_verdict if key == "eff_image" else averaged_verdict
    g = lambda x: float(shown(x, "patches"))  # on the grid (the verdict is judged on the raw values)
    value = {
        f"max {key}": g(max(r[key] for r in rows.values())),
        "P": next(iter(rows.values()))["n_patches"],
        **{f"seed {s}": {key: g(r[key]), "collapsed": r["collapsed"]} for s, r in rows.items()},
    }
    return Measured(value, all(verdict(r) for r in rows.values()), "effective patches = exp(entropy), last block")


def _seeds() -> dict[int, dict]:
    return {s: seed_summary(r) for s, r in run().seeds.items()}


@claim(
    "A.vit.learns",
    chapter=CHAPTER,
    kind="observation",
    checks="the ViT of chapter 09 is a working classifier",
    statement="With the recipe chosen on validation data, the ViT classifies Fashion-MNIST test images with at "
    "least 85% accuracy on each of seeds 10-12.",
    threshold="test accuracy >= 0.85 on every held-out seed",
    known_miss=MISS_LEARNS,
    competitor="the recipe at a ten times smaller learning rate (seed 10)",
    against=lambda: learns_check({HELD_OUT_SEEDS[0]: _competitor("smaller_lr")}),
)
def _claim_learns() -> Measured:
    return learns_check(_seeds())


@claim(
    "A.vit.norm_grows",
    chapter=CHAPTER,
    kind="observation",
    checks="paper A §4 (ViT); Theorems 1-3",
    statement="On each of seeds 10-12 the final layer's ||W_Q W_K^T||_F grows at least 5x from initialisation "
    "and at least 3x more (relative) than the value-output product ||W_V W_O||_F (a product of two "
    "matrices against a product of two); a seed counts only if it did not collapse (a collapsed model "
    "grows its norms too).",
    threshold="on every held-out seed: validation accuracy >= 0.70 (the collapse gate), qk growth >= 5 and qk "
    "growth >= 3 x ov growth",
    known_miss=MISS_NORM,
    competitor="the collapsed control (20x the rate, no warm-up or clipping; validation accuracy far below 0.70)",
    against=lambda: norm_check({DEV_SEEDS[0]: _competitor("collapse")}),
)
def _claim_norm() -> Measured:
    return norm_check(_seeds())


@claim(
    "A.vit.sparsifies",
    chapter=CHAPTER,
    kind="observation",
    checks="paper A §4 (ViT); Theorems 1-3",
    statement="On each of seeds 10-12 the final layer's [CLS] attention over the 49 patches ends with at most "
    "P/2 effective patches per test image (mean of exp entropy); a seed counts only if it did not collapse.",
    threshold="on every held-out seed: validation accuracy >= 0.70 (the collapse gate) and per-image effective "
    "patches <= P/2",
    known_miss=MISS_SPARSE,
    competitor="the recipe at a ten times smaller learning rate (seed 10: no growth, near-uniform attention)",
    against=lambda: sparse_check({HELD_OUT_SEEDS[0]: _competitor("smaller_lr")}),
)
def _claim_sparse() -> Measured:
    return sparse_check(_seeds())


@claim(
    "A.vit.averaged_map",
    chapter=CHAPTER,
    kind="observation",
    checks="paper A §4 (ViT), its figure of the averaged [CLS] map",
    statement="On each of seeds 10-12 the final layer's test-averaged [CLS] map (attention averaged over the "
    "10,000 test images, then exp entropy) has at most P/2 effective patches; a seed counts only if it "
    "did not collapse.",
    threshold="on every held-out seed: validation accuracy >= 0.70 (the collapse gate) and effective patches of "
    "the averaged map <= P/2 (set 2026-12-01, the per-image claim's bound, after seeds 10-12 were measured)",
    known_miss=MISS_AVERAGED,
    competitor="the recipe at a ten times smaller learning rate (seed 10: 47 effective patches averaged)",
    against=lambda: sparse_check({HELD_OUT_SEEDS[0]: _competitor("smaller_lr")}, "eff_mean"),
)
def _claim_averaged() -> Measured:
    return sparse_check(_seeds(), "eff_mean")


# --------------------------------------------------------------------------- plots


def plot_training(study: Study | None = None):
    """Panel "training loss": running mean between log points, per seed. Panel "accuracy": validation
    accuracy per epoch, final test accuracy marked."""
    study = study or run()
    fig, (ax1, ax2) = subplots(2, titles=["training loss", "accuracy"])
    for k, (s, r) in enumerate(study.seeds.items()):
        st = style(k)
        ax1.plot(r.log["epoch"][1:], r.log["train_loss"][1:], lw=1.2, label=f"seed {s}", **st)
        ep = np.arange(len(r.val_acc))
        ax2.plot(ep[1:], r.val_acc[1:], marker="o", ms=3, label=f"seed {s}", **st)
        ax2.plot(ep[-1] + 0.15, r.test["acc"], "*", color=st["color"], ms=9)
    ax2.plot([], [], "*", color="0.3", ms=9, label="test (at the end)")
    ax2.axhline(ACCURACY, color="0.5", ls=":", lw=1)
    ax1.set(xlabel="epoch", ylabel="training cross-entropy")
    ax1.legend(loc="upper right")
    ax2.set(xlabel="epoch", ylabel="validation accuracy")
    ax2.legend(loc="lower right")
    return fig


def example_indices(r: Result, n: int = 6) -> list[int]:
    """The first probe image of each of the first ``n`` classes (a fixed rule, not a selection)."""
    out = []
    for c in range(n):
        hits = np.flatnonzero(r.probe_labels == c)
        if hits.size:
            out.append(int(hits[0]))
    return out


def plot_attention_maps(r: Result | None = None, n_examples: int = 6, layer: int = -1, n_epochs: int = 6):
    """Rows: example validation images; columns: the image, then its [CLS] attention at stored epochs.

    At most ``n_epochs`` of the stored epochs are drawn, evenly spaced from
    initialisation to the end.

    The attention of a patch is drawn as an orange overlay whose opacity is the
    weight over the largest weight in the row (so uniform attention at
    initialisation is faint everywhere); the number in the corner is the
    effective number of attended patches, ``exp(entropy)``.
    """
    r = r or next(iter(run().seeds.values()))
    idx = example_indices(r, n_examples)
    stored = r.experiment.epochs_mapped
    cols = np.unique(np.round(np.linspace(0, len(stored) - 1, min(n_epochs, len(stored)))).astype(int))
    epochs = [stored[c] for c in cols]
    g, size = r.experiment.model.grid, r.experiment.model.image_size
    cell = COLUMN_WIDTH / (len(epochs) + 1.2)  # fit the column: labels keep their size on screen
    fig, axes = plt.subplots(len(idx), len(epochs) + 1, figsize=(COLUMN_WIDTH, cell * len(idx) + 0.3), squeeze=False)
    rgb = np.array(colors(2)[1])
    for row, i in enumerate(idx):
        img = r.probe_images[i].transpose(1, 2, 0).squeeze()
        cmap = "gray" if img.ndim == 2 else None
        maps = r.probe_attention[cols, layer, i].reshape(len(epochs), g, g)
        vmax = maps.max()
        axes[row, 0].imshow(img, cmap=cmap)
        axes[row, 0].set_ylabel(r.classes[r.probe_labels[i]], fontsize=9)
        for col, e in enumerate(epochs):
            ax = axes[row, col + 1]
            overlay = np.concatenate([np.broadcast_to(rgb, (g, g, 3)), (maps[col] / vmax)[..., None]], axis=-1)
            ax.imshow(img if cmap else img // 2, cmap=cmap, vmin=0, vmax=400, extent=(0, size, size, 0))
            ax.imshow(overlay, extent=(0, size, size, 0), interpolation="nearest")
            ax.text(
                0.04,
                0.96,
                f"{effective_patches(maps[col].ravel()):.0f}",
                transform=ax.transAxes,
                va="top",
                fontsize=8,
                color="w",
                bbox={"facecolor": "k", "alpha": 0.5, "pad": 1, "lw": 0},
            )
            if row == 0:
                ax.set_title(f"epoch {e}", fontsize=9)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
        ax.grid(False)
    fig.tight_layout(pad=0.3)
    return fig


NORM_LABELS = {"qk": r"$W_Q W_K^\top$", "ov": r"$W_V W_O$", "v": r"$W_V$", "mlp_in": "MLP in", "mlp_out": "MLP out"}


def plot_norms(study: Study | None = None, layer: int = -1):
    """Growth (norm over its initial value) of the key-query product and of its controls, per seed,
    for the chosen rate (panel "chosen rate") and the smaller one (panel "rate / 10")."""
    study = study or run()
    fig, axes = subplots(2, titles=["chosen rate", f"rate / {SMALLER_LR:g}"], sharey=True)
    for ax, runs in zip(axes, (study.seeds, study.smaller_lr)):
        for k, name in enumerate(NORM_LABELS):
            for j, r in enumerate(runs.values()):
                ax.plot(
                    r.log["epoch"],
                    r.log[name][:, layer] / r.log[name][0, layer],
                    lw=1.2,
                    label=NORM_LABELS[name] if j == 0 else None,
                    **style(k),
                )
        ax.set_yscale("log")
        ax.set(xlabel="epoch")
    axes[0].set_ylabel("norm / norm at initialisation")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=len(NORM_LABELS))
    return fig


def plot_sparsity(study: Study | None = None, layer: int = -1):
    """Panel "effective patches": of the per-image and of the averaged probe map during training, per
    seed. Panel "entropy against norm": mean attention entropy against ``||W_Q W_Kᵀ||_F``, every log
    point, both learning rates."""
    study = study or run()
    fig, (ax1, ax2) = subplots(2, titles=["effective patches", "entropy against norm"])
    P = next(iter(study.seeds.values())).n_patches
    for k, (s, r) in enumerate(study.seeds.items()):
        c = style(k)["color"]
        ax1.plot(r.log["epoch"], r.log["eff"][:, layer], color=c, ls="-")
        ax1.plot(r.log["epoch"], r.log["eff_mean"][:, layer], color=c, ls="--")
        ax2.plot(r.log["qk"][:, layer], r.log["entropy"][:, layer], "-o", color=c, ms=2.5, lw=1)
        small = study.smaller_lr.get(s)
        if small is not None:
            ax2.plot(small.log["qk"][:, layer], small.log["entropy"][:, layer], ":s", color=c, ms=2.5, lw=1)
    ax1.axhline(P / 2, color="0.5", ls=":", lw=1)
    ax1.set(xlabel="epoch", ylabel="effective patches", ylim=(0, P * 1.05))
    ax2.axhline(np.log(P), color="0.5", ls=":", lw=1)
    ax2.set_xscale("log")
    ax2.set(xlabel=r"$\|W_Q W_K^\top\|_F$ (final layer)", ylabel="attention entropy (nats)")
    # one legend, below the panels: seeds by colour, the kind of curve by line style and marker
    handles = [plt.Line2D([], [], color=style(k)["color"], lw=2, label=f"seed {s}") for k, s in enumerate(study.seeds)]
    handles += [
        plt.Line2D([], [], color="0.3", ls="-", label="per image"),
        plt.Line2D([], [], color="0.3", ls="--", label="averaged map"),
        plt.Line2D([], [], color="0.5", ls=":", label="P / 2, log P"),
        plt.Line2D([], [], color="0.3", marker="o", ms=3, ls="-", label="chosen rate"),
        plt.Line2D([], [], color="0.3", marker="s", ms=3, ls=":", label=f"rate / {SMALLER_LR:g}"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=4)
    return fig


def plot_where(study: Study | None = None, layer: int = -1):
    """Top row: test-averaged final-layer attention over the grid, per seed (one shared colour scale),
    and how often each patch is foreground. Bottom: attention mass on foreground patches of the probe
    batch during training, per seed, against uniform."""
    study = study or run()
    runs = list(study.seeds.values())
    g = runs[0].experiment.model.grid
    top = [f"s{k}" for k in range(len(runs))] + ["fg"]
    fig, axd = plt.subplot_mosaic(
        [top, ["line"] * len(top)], figsize=(COLUMN_WIDTH, 4.4), height_ratios=[1, 1.1], layout="constrained"
    )
    vmax = max(float(r.test_mean_map[layer].max()) for r in runs)
    for key, r in zip(top, runs):
        im = axd[key].imshow(r.test_mean_map[layer].reshape(g, g), cmap="magma", vmin=0, vmax=vmax)
    fig.colorbar(im, ax=[axd[key] for key in top[:-1]], fraction=0.05, pad=0.02)
    im = axd["fg"].imshow(runs[0].probe_fg.mean(0).reshape(g, g), cmap="magma", vmin=0, vmax=1)
    fig.colorbar(im, ax=axd["fg"], fraction=0.046, pad=0.04)
    for key in top:
        axd[key].set(xticks=[], yticks=[])
        axd[key].grid(False)
    ax = axd["line"]
    for k, r in enumerate(runs):
        ax.plot(r.log["epoch"], r.log["fg_share"][:, layer], label=f"seed {r.seed}", **style(k))
    ax.axhline(runs[0].probe_fg.mean(), color="0.3", ls=(0, (1, 1)), lw=1, label="uniform attention")
    ax.set(xlabel="epoch", ylabel="attention on foreground", ylim=(0, 1))
    ax.legend(loc="lower right", ncol=2)
    panel_titles(
        [axd[key] for key in top] + [ax],
        [f"seed {r.seed}" for r in runs] + ["foreground", "during training (probe images)"],
    )
    return fig


FIGURES = {
    "fig-vit-training": lambda: plot_training(),
    "fig-vit-maps": lambda: plot_attention_maps(),
    "fig-vit-norms": lambda: plot_norms(),
    "fig-vit-sparsity": lambda: plot_sparsity(),
    "fig-vit-where": lambda: plot_where(),
}
