"""Chapter 09: the [CLS] attention of a small vision transformer becomes sparse as its key-query norm grows.

Paper A (§4) trains a ViT on CIFAR-10 and shows the [CLS] attention of the
last layer going from dense to a few patches while the norm of the
attention weights grows. Here:

``quick``
    Fashion-MNIST (offline), depth 2, 1 head, width 64, patch 4 (7x7 = 49
    patches), AdamW lr 1e-2 without weight decay, 5% warm-up then cosine,
    batch 128, 3 epochs, one CPU thread: about 3 minutes.
``paper``
    CIFAR-10 (downloaded), depth 6, 6 heads, width 384, patch 2 (the paper's
    16x16 grid), AdamW lr 3e-3 (the paper's rate) without weight decay,
    warm-up then cosine, batch 256, crops and flips, 100 epochs; for a GPU.

The training history (norms, attention entropies, accuracies), the [CLS]
attention of a fixed probe batch at a few epochs and the checkpoints of those
epochs are cached under ``data/vit/<key>/``, ``key`` a hash of the whole
configuration: the book, the claims and the figures CLI load them instead of
retraining.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from scipy.stats import spearmanr

from .. import config, vit
from ..datasets import images as image_data
from ..datasets.registry import cache_dir
from ..ledger import Measured, claim
from ..plotting import colors

CHAPTER = "09_vit_sparsity"
CACHE_VERSION = 1


@dataclass(frozen=True)
class Experiment:
    """Everything that determines a run (its hash keys the cache).

    Attributes
    ----------
    dataset : a name in :data:`mmtoken.datasets.images.IMAGE_DATASETS`.
    model, train : the network and its schedule.
    logs_per_epoch : how often the attention statistics are recorded.
    logs_first_epoch : how often during the first epoch, where most of the change happens.
    n_probe : the first ``n_probe`` test images form the fixed probe batch.
    map_epochs : epochs (0 = initialisation) whose checkpoints and probe
        attention maps are stored.
    foreground : a patch is foreground when its mean pixel value (in [0, 1])
        is at least this; ``None`` where the images have no background (CIFAR-10).
    """

    dataset: str
    model: vit.ViTConfig
    train: vit.TrainConfig
    logs_per_epoch: int = 8
    logs_first_epoch: int = 32
    n_probe: int = 512
    map_epochs: tuple[int, ...] = (0, 1, 2, 3)
    foreground: float | None = 0.1

    def key(self) -> str:
        blob = json.dumps({"v": CACHE_VERSION, **asdict(self)}, sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


QUICK = Experiment(
    dataset="fashion-mnist",
    model=vit.ViTConfig(image_size=28, channels=1, patch=4, width=64, depth=2, heads=1, mlp_ratio=2,
                        init_std=0.02),
    train=vit.TrainConfig(epochs=3, batch_size=128, lr=1e-2, weight_decay=0.0, warmup=0.05, seed=0, threads=1),
)
PAPER = Experiment(
    dataset="cifar-10",
    model=vit.ViTConfig(image_size=32, channels=3, patch=2, width=384, depth=6, heads=6, mlp_ratio=2,
                        init_std=0.02),
    train=vit.TrainConfig(epochs=100, batch_size=256, lr=3e-3, weight_decay=0.0, warmup=0.05, grad_clip=1.0,
                          augment=True, seed=0, threads=None),
    logs_per_epoch=2, logs_first_epoch=16, map_epochs=(0, 1, 2, 5, 10, 25, 50, 100), foreground=None,
)


def experiment(scale: str | None = None, seed: int | None = None) -> Experiment:
    """The configuration of a scale, optionally with another seed."""
    exp = config.pick(quick=QUICK, paper=PAPER, which=scale)
    return exp if seed is None else replace(exp, train=replace(exp.train, seed=seed))


@dataclass
class Result:
    """A (cached) run. Arrays are NumPy; ``L`` log points, ``E+1`` epoch ends, ``M`` map epochs.

    Attributes
    ----------
    experiment : the configuration.
    log : per log point: ``step``, ``epoch`` (float), ``lr``, ``train_loss``
        ``(L,)``; ``norm_fro``, ``norm_spec`` (``||W_Q W_Kᵀ||``), ``entropy``
        (mean over probe images and heads, nats), ``eff`` (mean
        ``exp(entropy)``), ``fg_share`` (attention mass on foreground
        patches), each ``(L, depth)``.
    epoch_end : indices into ``log`` of the epoch ends ``0..E``.
    test_loss, test_acc : ``(E+1,)`` on the whole test set.
    probe_attention : ``(M, depth, n_probe, P)`` head-averaged [CLS] attention
        over patches (renormalised) at ``map_epochs``.
    probe_images : ``uint8 (n_probe, C, H, W)``; probe_labels ``(n_probe,)``.
    fg_mask : ``bool (n_probe, P)`` foreground patches (all false without a rule).
    classes : class names.
    train_seconds : wall time of the training (not printed by the book).
    normalizer : the map from ``uint8`` images to network inputs used in training.
    path : the cache folder.
    """

    experiment: Experiment
    log: dict[str, np.ndarray]
    epoch_end: np.ndarray
    test_loss: np.ndarray
    test_acc: np.ndarray
    probe_attention: np.ndarray
    probe_images: np.ndarray
    probe_labels: np.ndarray
    fg_mask: np.ndarray
    classes: tuple[str, ...]
    train_seconds: float
    normalizer: vit.Normalizer = field(repr=False)
    path: Path = field(repr=False)

    @property
    def n_patches(self) -> int:
        return self.experiment.model.n_patches

    def epoch_values(self, name: str, layer: int = -1) -> np.ndarray:
        """``log[name][:, layer]`` at the epoch ends, ``(E+1,)``."""
        return self.log[name][self.epoch_end, layer]


# --------------------------------------------------------------------------- running

def foreground_mask(images: np.ndarray, patch: int, threshold: float | None) -> np.ndarray:
    """``bool (N, P)``: patches whose mean pixel value (``x/255``) is at least ``threshold``."""
    if threshold is None:
        return np.zeros((images.shape[0], (images.shape[2] // patch) * (images.shape[3] // patch)), bool)
    x = torch.as_tensor(images, dtype=torch.float64) / 255.0
    return (vit.patchify(x, patch).mean(-1) >= threshold).numpy()


@torch.no_grad()
def _probe(model: vit.ViT, x: torch.Tensor, fg: torch.Tensor) -> dict[str, np.ndarray]:
    """Attention statistics of every layer on the probe batch."""
    model.eval()
    _, attns = model(x, return_attention=True)
    out = {"entropy": [], "eff": [], "fg_share": [], "maps": []}
    for attn in attns:
        a = vit.cls_patch_attention(attn.double())           # (B, h, P)
        h = vit.entropy(a)                                     # (B, h)
        out["entropy"].append(float(h.mean()))
        out["eff"].append(float(h.exp().mean()))
        out["fg_share"].append(float((a.mean(1) * fg).sum(-1).mean()))
        out["maps"].append(a.mean(1).float().cpu().numpy())
    return out


def _train_and_save(exp: Experiment, target: Path) -> None:
    """Train ``exp`` and write its cache folder ``target`` (atomically: a temporary folder, then a rename)."""
    dev = config.device()
    x_train, y_train = image_data.load_images(exp.dataset, "train")
    x_test, y_test = image_data.load_images(exp.dataset, "test")
    classes = image_data.IMAGE_DATASETS[exp.dataset]
    m, t = exp.model, exp.train
    if x_train.shape[1:] != (m.channels, m.image_size, m.image_size):
        raise ValueError(f"{exp.dataset} images have shape {x_train.shape[1:]}, the model expects "
                         f"{(m.channels, m.image_size, m.image_size)}")
    config.seed_everything(t.seed)
    model = vit.ViT(m).to(dev)
    xtr, ytr = torch.as_tensor(x_train, device=dev), torch.as_tensor(y_train, device=dev)
    xte, yte = torch.as_tensor(x_test, device=dev), torch.as_tensor(y_test, device=dev)
    normalize = vit.Normalizer.fit(torch.as_tensor(x_train))
    probe_x = normalize(xte[:exp.n_probe])
    fg_mask = foreground_mask(x_test[:exp.n_probe], m.patch, exp.foreground)
    fg = torch.as_tensor(fg_mask, dtype=torch.float64, device=dev)

    spe = len(x_train) // t.batch_size
    points = sorted({round(k * spe / exp.logs_per_epoch) for k in range(t.epochs * exp.logs_per_epoch + 1)}
                    | {round(k * spe / exp.logs_first_epoch) for k in range(exp.logs_first_epoch)})
    log: dict[str, list] = {k: [] for k in ("step", "epoch", "lr", "train_loss", "norm_fro", "norm_spec",
                                            "entropy", "eff", "fg_share")}
    epochs: dict[str, list] = {"epoch_end": [], "test_loss": [], "test_acc": []}
    maps: list[np.ndarray] = []
    _remove_stale(target)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    tmp.mkdir(parents=True)

    def on_log(step: int, epoch: float, loss: float) -> None:
        stats = _probe(model, probe_x, fg)
        norms = [vit.key_query_norm(model, layer) for layer in range(m.depth)]
        log["step"].append(step)
        log["epoch"].append(epoch)
        log["lr"].append(t.lr * vit.lr_factor(step, spe * t.epochs, t.warmup) if step < spe * t.epochs else 0.0)
        log["train_loss"].append(loss)
        log["norm_fro"].append([n[0] for n in norms])
        log["norm_spec"].append([n[1] for n in norms])
        for k in ("entropy", "eff", "fg_share"):
            log[k].append(stats[k])
        if step % spe == 0:
            e = step // spe
            loss_te, acc_te = vit.evaluate(model, xte, yte, normalize)
            epochs["epoch_end"].append(len(log["step"]) - 1)
            epochs["test_loss"].append(loss_te)
            epochs["test_acc"].append(acc_te)
            if e in exp.map_epochs:
                maps.append(np.stack(stats["maps"]))
                torch.save(model.state_dict(), tmp / f"ckpt_epoch{e:03d}.pt")

    try:
        start = time.perf_counter()
        vit.train(model, xtr, ytr, t, normalize, log_points=points, on_log=on_log)
        seconds = time.perf_counter() - start
        np.savez_compressed(tmp / "arrays.npz", probe_attention=np.stack(maps),
                            probe_images=x_test[:exp.n_probe], probe_labels=y_test[:exp.n_probe], fg_mask=fg_mask)
        history = {"experiment": asdict(exp), "key": exp.key(), "classes": list(classes),
                   "train_seconds": seconds, "normalizer": {"mean": normalize.mean.flatten().tolist(),
                                                            "std": normalize.std.flatten().tolist()},
                   "torch": torch.__version__, "device": str(dev), "log": log, **epochs}
        (tmp / "history.json").write_text(json.dumps(history))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_stale(target: Path) -> None:
    """Delete temporary folders of ``target`` left by training processes that no longer run."""
    for tmp in target.parent.glob(f"{target.name}.tmp-*"):
        try:
            pid = int(tmp.name.rsplit("-", 1)[1])
            os.kill(pid, 0)
            alive = pid != os.getpid()
        except (ValueError, ProcessLookupError):
            alive = False
        except PermissionError:
            alive = True
        if not alive:
            shutil.rmtree(tmp, ignore_errors=True)


def load(path: Path) -> Result:
    """Read a cache folder written by :func:`run_experiment`."""
    history = json.loads((path / "history.json").read_text())
    with np.load(path / "arrays.npz") as z:
        arrays = {k: z[k] for k in z.files}
    exp = _experiment_from_dict(history["experiment"])
    log = {k: np.asarray(v, dtype=np.int64 if k == "step" else np.float64) for k, v in history["log"].items()}
    return Result(exp, log, np.asarray(history["epoch_end"]), np.asarray(history["test_loss"]),
                  np.asarray(history["test_acc"]), arrays["probe_attention"], arrays["probe_images"],
                  arrays["probe_labels"], arrays["fg_mask"], tuple(history["classes"]),
                  float(history["train_seconds"]),
                  vit.Normalizer(history["normalizer"]["mean"], history["normalizer"]["std"]), path)


def _experiment_from_dict(d: dict) -> Experiment:
    train = dict(d["train"])
    train["betas"] = tuple(train["betas"])
    return Experiment(d["dataset"], vit.ViTConfig(**d["model"]), vit.TrainConfig(**train), d["logs_per_epoch"],
                      d["logs_first_epoch"], d["n_probe"], tuple(d["map_epochs"]), d["foreground"])


def checkpoint(result: Result, epoch: int) -> vit.ViT:
    """The model at one of ``result.experiment.map_epochs`` (on the CPU)."""
    if epoch not in result.experiment.map_epochs:
        raise ValueError(f"no checkpoint for epoch {epoch}; stored: {result.experiment.map_epochs}")
    model = vit.ViT(result.experiment.model)
    state = torch.load(result.path / f"ckpt_epoch{epoch:03d}.pt", map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    return model.eval()


def run_experiment(exp: Experiment, *, retrain: bool = False) -> Result:
    """Load the cached run of ``exp`` from ``data/vit/<key>/``, training it first if there is none.

    The result is always read back from the cache, so a fresh run and a
    cached one give identical numbers.
    """
    target = cache_dir("vit") / exp.key()
    if retrain or not (target / "history.json").is_file():
        _train_and_save(exp, target)
    return load(target)


@functools.lru_cache(maxsize=None)
def run(scale: str | None = None) -> Result:
    """The chapter's run at ``scale`` (``quick``: Fashion-MNIST on a CPU; ``paper``: CIFAR-10 on a GPU)."""
    return run_experiment(experiment(scale))


# --------------------------------------------------------------------------- summaries

def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation, rounded to 12 decimals.

    The statistic is a ratio of small integers (e.g. exactly -0.8 for four
    points with one adjacent swap); rounding removes the float noise of its
    computation so that a threshold such as ``<= -0.8`` is compared exactly.
    """
    return round(float(spearmanr(a, b).statistic), 12)


def sparsity_summary(r: Result, layer: int = -1) -> dict:
    """The numbers the claims check, for one layer (default: the last)."""
    ent, norm = r.epoch_values("entropy", layer), r.epoch_values("norm_fro", layer)
    return {
        "norm_init": float(norm[0]), "norm_final": float(norm[-1]), "norm_ratio": float(norm[-1] / norm[0]),
        "eff_init": float(r.epoch_values("eff", layer)[0]), "eff_final": float(r.epoch_values("eff", layer)[-1]),
        "n_patches": r.n_patches,
        "entropy_init": float(ent[0]), "entropy_final": float(ent[-1]), "entropy_drop": float(ent[0] - ent[-1]),
        "spearman_epochs": spearman(ent, norm),
        "spearman_all": spearman(r.log["entropy"][:, layer], r.log["norm_fro"][:, layer]),
        "test_acc": float(r.test_acc[-1]),
    }


def foreground_summary(r: Result, layer: int = -1) -> dict:
    """Where the [CLS] attention of one layer lands at the last stored epoch.

    Returns
    -------
    dict with
    ``uniform``: share of foreground patches (what uniform attention puts on them);
    ``fg_share``: attention mass on foreground patches, probe mean;
    ``fg_share_init``: the same at initialisation;
    ``top1_fg``: fraction of probe images whose most attended patch is foreground;
    ``eff_per_image``: mean effective number of patches of the head-averaged maps;
    ``eff_mean_map``: effective number of patches of the probe-averaged map (close
    to ``eff_per_image`` when every image attends to the same positions).
    """
    a = r.probe_attention[-1, layer].astype(np.float64)          # (n_probe, P)
    fg = r.fg_mask
    top = a.argmax(-1)
    mean_map = a.mean(0)
    return {"uniform": float(fg.mean()), "fg_share": float((a * fg).sum(-1).mean()),
            "fg_share_init": float((r.probe_attention[0, layer] * fg).sum(-1).mean()),
            "top1_fg": float(fg[np.arange(len(top)), top].mean()),
            "eff_per_image": float(np.exp(_entropy(a)).mean()), "eff_mean_map": float(np.exp(_entropy(mean_map)))}


def _entropy(p: np.ndarray) -> np.ndarray:
    return -(p * np.log(np.clip(p, 1e-30, None))).sum(-1)


def spread_check(r: Result, layer: int = -1) -> dict[str, np.ndarray]:
    """Entropy drop <= logit spread <= its bound, per stored epoch, on the probe batch.

    Returns arrays ``(M,)`` over ``map_epochs``: ``drop_mean`` (mean of
    ``log P - H``), ``spread_mean`` and ``spread_max`` (measured ``max_t z_t -
    min_t z_t`` of the [CLS] logits), ``bound`` (:func:`mmtoken.vit.logit_spread_bound`),
    and ``holds`` (``log P - H <= spread <= bound`` for every image and head).
    """
    x = r.normalizer(torch.as_tensor(r.probe_images))
    out = {k: [] for k in ("drop_mean", "spread_mean", "spread_max", "bound", "holds")}
    for e in r.experiment.map_epochs:
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


def mean_position_map(r: Result, epoch_index: int = -1, layer: int = -1) -> np.ndarray:
    """Probe-averaged [CLS] attention over the patch grid, ``(grid, grid)``."""
    g = r.experiment.model.grid
    return r.probe_attention[epoch_index, layer].mean(0).reshape(g, g)


# --------------------------------------------------------------------------- claims

@claim("A.vit.norm_grows", chapter=CHAPTER, kind="observation", checks="paper A §4 (ViT); Theorems 1-3",
       statement="Training the ViT, the final layer's ||W_Q W_K^T||_F grows at least 5x from initialisation.",
       threshold="norm(end) / norm(init) >= 5")
def _claim_norm() -> Measured:
    s = sparsity_summary(run())
    return Measured({"ratio": s["norm_ratio"], "init": s["norm_init"], "final": s["norm_final"]},
                    s["norm_ratio"] >= 5)


@claim("A.vit.sparsifies", chapter=CHAPTER, kind="observation", checks="paper A §4 (ViT); Theorems 1-3",
       statement="The final layer's [CLS] attention over patches becomes sparse as the key-query norm grows.",
       threshold="eff. patches (mean exp entropy) <= P/2; entropy drop >= 0.5 nats; "
                 "Spearman(entropy, norm) over epoch ends <= -0.8")
def _claim_sparse() -> Measured:
    s = sparsity_summary(run())
    value = {k: s[k] for k in ("eff_init", "eff_final", "n_patches", "entropy_drop", "spearman_epochs",
                               "spearman_all")}
    passed = s["eff_final"] <= s["n_patches"] / 2 and s["entropy_drop"] >= 0.5 and s["spearman_epochs"] <= -0.8
    return Measured(value, passed, "spearman_all: every logged checkpoint, not only the epoch ends")


@claim("A.vit.learns", chapter=CHAPTER, kind="observation", checks="the ViT of chapter 09 is a working classifier",
       statement="At the end of the quick run the ViT classifies Fashion-MNIST test images with at least 78% accuracy.",
       threshold="test accuracy >= 0.78")
def _claim_learns() -> Measured:
    r = run()
    return Measured(float(r.test_acc[-1]), float(r.test_acc[-1]) >= 0.78, f"dataset: {r.experiment.dataset}")


# --------------------------------------------------------------------------- plots

def plot_training(r: Result | None = None):
    """Training loss (running mean between log points), test loss and test accuracy against epochs."""
    r = r or run()
    c = colors(3)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    ep = np.arange(len(r.test_acc))
    ax1.plot(r.log["epoch"][1:], r.log["train_loss"][1:], color=c[0], label="train (running mean)")
    ax1.plot(ep, r.test_loss, "o-", color=c[1], label="test")
    ax1.set(xlabel="epoch", ylabel="cross-entropy")
    ax1.legend(fontsize=8)
    ax2.plot(ep, r.test_acc, "o-", color=c[1])
    ax2.set(xlabel="epoch", ylabel="test accuracy", ylim=(0, 1))
    fig.tight_layout()
    return fig


def example_indices(r: Result, n: int = 6) -> list[int]:
    """The first probe image of each of the first ``n`` classes (a fixed rule, not a selection)."""
    out = []
    for c in range(n):
        hits = np.flatnonzero(r.probe_labels == c)
        if hits.size:
            out.append(int(hits[0]))
    return out


def plot_attention_maps(r: Result | None = None, n_examples: int = 6, layer: int = -1):
    """Rows: example test images; columns: the image, then its [CLS] attention at each stored epoch.

    The attention of a patch is drawn as an orange overlay whose opacity is the
    weight over the largest weight in the row (so uniform attention at
    initialisation is faint everywhere); the number in the corner is the
    effective number of attended patches, ``exp(entropy)``.
    """
    r = r or run()
    idx = example_indices(r, n_examples)
    epochs = r.experiment.map_epochs
    g, size = r.experiment.model.grid, r.experiment.model.image_size
    fig, axes = plt.subplots(len(idx), len(epochs) + 1, figsize=(1.5 * (len(epochs) + 1), 1.5 * len(idx)),
                             squeeze=False)
    rgb = np.array(colors(2)[1])
    for row, i in enumerate(idx):
        img = r.probe_images[i].transpose(1, 2, 0).squeeze()
        cmap = "gray" if img.ndim == 2 else None
        maps = r.probe_attention[:, layer, i].reshape(len(epochs), g, g)
        vmax = maps.max()
        axes[row, 0].imshow(img, cmap=cmap)
        axes[row, 0].set_ylabel(r.classes[r.probe_labels[i]], fontsize=8)
        for col, e in enumerate(epochs):
            ax = axes[row, col + 1]
            overlay = np.concatenate([np.broadcast_to(rgb, (g, g, 3)), (maps[col] / vmax)[..., None]], axis=-1)
            ax.imshow(img if cmap else img // 2, cmap=cmap, vmin=0, vmax=400, extent=(0, size, size, 0))
            ax.imshow(overlay, extent=(0, size, size, 0), interpolation="nearest")
            ax.text(0.04, 0.96, f"{np.exp(_entropy(maps[col].ravel())):.0f}", transform=ax.transAxes,
                    va="top", fontsize=7, color="w", bbox={"facecolor": "k", "alpha": 0.5, "pad": 1, "lw": 0})
            if row == 0:
                ax.set_title(f"epoch {e}", fontsize=9)
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
        ax.grid(False)
    fig.tight_layout(pad=0.3)
    return fig


def plot_sparsity(r: Result | None = None, layer: int = -1):
    """Left: effective number of attended patches and key-query norm against epochs.
    Right: attention entropy against the norm, all log points, epoch ends marked."""
    r = r or run()
    c = colors(3)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.6))
    ep, eff, norm, ent = r.log["epoch"], r.log["eff"][:, layer], r.log["norm_fro"][:, layer], r.log["entropy"][:, layer]
    ax1.plot(ep, eff, color=c[0], label="effective patches")
    ax1.axhline(r.n_patches / 2, color=c[0], ls=":", lw=1, label="P / 2")
    ax1.set(xlabel="epoch", ylabel="effective number of patches", ylim=(0, r.n_patches * 1.05))
    axn = ax1.twinx()
    axn.plot(ep, norm, color=c[1], label=r"$\|W_Q W_K^\top\|_F$")
    axn.set_yscale("log")
    axn.set_ylabel(r"$\|W_Q W_K^\top\|_F$")
    axn.grid(False)
    h1, l1 = ax1.get_legend_handles_labels()
    h2, l2 = axn.get_legend_handles_labels()
    ax1.legend(h1 + h2, l1 + l2, fontsize=8, loc="center right")
    ax2.plot(norm, ent, "-", color=c[2], lw=1, alpha=0.7)
    sc = ax2.scatter(norm, ent, c=ep, cmap="viridis", s=14, zorder=3)
    fig.colorbar(sc, ax=ax2, label="epoch", fraction=0.05, pad=0.02)
    ee = r.epoch_end
    ax2.scatter(norm[ee], ent[ee], s=70, facecolors="none", edgecolors="k", zorder=4, label="epoch ends")
    ax2.axhline(np.log(r.n_patches), color="0.5", ls=":", lw=1, label="log P (uniform)")
    ax2.set_xscale("log")
    ax2.set(xlabel=r"$\|W_Q W_K^\top\|_F$ (final layer)", ylabel="attention entropy (nats)")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_where(r: Result | None = None):
    """Left: probe-averaged final-layer attention over the grid at the last epoch.
    Middle: how often each patch is foreground. Right: attention mass on foreground patches per layer
    during training against the uniform share."""
    r = r or run()
    g = r.experiment.model.grid
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), gridspec_kw={"width_ratios": [1, 1, 1.5]})
    for ax, data, label in ((axes[0], mean_position_map(r), "mean attention"),
                            (axes[1], r.fg_mask.mean(0).reshape(g, g), "foreground frequency")):
        im = ax.imshow(data, cmap="magma", vmin=0)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
        ax.set(xticks=[], yticks=[], xlabel=label)
        ax.grid(False)
    c = colors(r.experiment.model.depth + 1)
    for layer in range(r.experiment.model.depth):
        axes[2].plot(r.log["epoch"], r.log["fg_share"][:, layer], color=c[layer], label=f"layer {layer + 1}")
    axes[2].axhline(r.fg_mask.mean(), color="0.3", ls="--", lw=1, label="uniform attention")
    axes[2].set(xlabel="epoch", ylabel="attention on foreground", ylim=(0, 1))
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    return fig


FIGURES = {
    "fig-vit-training": lambda: plot_training(),
    "fig-vit-maps": lambda: plot_attention_maps(),
    "fig-vit-sparsity": lambda: plot_sparsity(),
    "fig-vit-where": lambda: plot_where(),
}
