"""Training runs of the small ViT, cached and validated: what a run is, what it records, where it is kept.

A run (:class:`Experiment`) trains :class:`mmtoken.vit.ViT` on an image
dataset split into training and validation images (a fixed random split of
the training set); the test split is read once, after training, in one pass
that measures the accuracy and the attention statistics
(:func:`attention_statistics`). During training the weight norms
(:func:`mmtoken.vit.weight_norms`) and the attention statistics of a probe
batch of validation images are logged.

Each run is cached in ``data/vit/<key>/`` (:func:`run_experiments`), a folder
result of the package's results cache (:mod:`mmtoken.resultcache`: folder
results), ``key`` a digest of its fingerprint: the code that produces the
numbers (:func:`code_fingerprint`: :mod:`mmtoken.vit` and the functions of
:data:`TRAINING_CODE`, finer than the module-level fingerprint of other results
because a retrain costs minutes), the configuration and the data. The folder
holds a manifest (written last) with the cache's name, the fingerprint and the
SHA-256 and size of every file; :func:`load` checks all of it and the shapes
of everything it reads, so a damaged, stale or swapped folder is a
:class:`CacheError` (rebuilt by :func:`run_experiments`, or reported with
instructions), never a raw error. Checkpoints are read with
``weights_only=True`` only. Folders are written atomically (a temporary
folder, then a rename); leftovers of interrupted writes are swept
(:func:`sweep_leftovers`).

Runs that must be trained go to worker processes (:func:`train_in_processes`),
each with the torch thread count of its configuration (one thread at quick
scale), so the numbers do not depend on the machine's core count.
"""

from __future__ import annotations

__all__ = [
    "CACHE_NAME",
    "CACHE_VERSION",
    "CacheError",
    "CacheMissing",
    "Experiment",
    "Result",
    "RawData",
    "RAW_ARRAYS",
    "data_digest",
    "load_raw",
    "split_indices",
    "foreground_mask",
    "effective_patches",
    "attention_statistics",
    "log_points",
    "LOG_KEYS",
    "LAYER_KEYS",
    "train_into",
    "TRAINING_CODE",
    "code_fingerprint",
    "fingerprint",
    "cache_key",
    "load",
    "checkpoint",
    "sweep_leftovers",
    "train_from_spec",
    "train_in_processes",
    "run_experiments",
    "run_experiment",
]

import functools
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from . import config, resultcache, vit
from .datasets import images as image_data
from .datasets.download import cache_dir

CACHE_NAME = "vit_sparsity"
CACHE_VERSION = 2


class CacheError(resultcache.CacheError):
    """A cache folder exists but cannot be trusted: damaged, stale, or holding another run."""


class CacheMissing(FileNotFoundError):
    """No cache folder for a run."""


@dataclass(frozen=True)
class Experiment:
    """Everything that determines a run (its digest, with the code and the data, keys the cache).

    Attributes
    ----------
    dataset : a name in :data:`mmtoken.datasets.images.IMAGE_DATASETS`.
    model, train : the network and its schedule.
    n_validation : training images held out as the validation split (a fixed
        random subset, :func:`split_indices`); the rest are trained on.
    split_seed : seeds that subset (the same split for every training seed).
    logs_per_epoch : how often the attention statistics and norms are recorded.
    logs_first_epoch : how often during the first epoch, where most of the change happens.
    n_probe : the first ``n_probe`` validation images form the probe batch whose
        attention is recorded during training.
    map_epochs : epochs (0 = initialisation) whose checkpoints and probe
        attention maps are stored; ``None``: every epoch.
    foreground : a patch is foreground when its mean pixel value (in [0, 1])
        is at least this; ``None`` where the images have no background (CIFAR-10).
    test : evaluate on the test split once, after training (``False`` while
        choosing the recipe, so that the test split is never seen then).
    """

    dataset: str
    model: vit.ViTConfig
    train: vit.TrainConfig
    n_validation: int = 10_000
    split_seed: int = 0
    logs_per_epoch: int = 4
    logs_first_epoch: int = 16
    n_probe: int = 512
    map_epochs: tuple[int, ...] | None = None
    foreground: float | None = 0.1
    test: bool = True

    def __post_init__(self) -> None:
        if self.dataset not in image_data.IMAGE_DATASETS:
            raise ValueError(f"Experiment.dataset {self.dataset!r} is not one of {tuple(image_data.IMAGE_DATASETS)}")
        for name in ("n_validation", "logs_per_epoch", "logs_first_epoch", "n_probe"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Experiment.{name} must be a positive integer, got {value!r}")
        if isinstance(self.split_seed, bool) or not isinstance(self.split_seed, int) or self.split_seed < 0:
            raise ValueError(f"Experiment.split_seed must be a non-negative integer, got {self.split_seed!r}")
        if self.n_probe > self.n_validation:
            raise ValueError(f"Experiment.n_probe ({self.n_probe}) exceeds n_validation ({self.n_validation})")
        if self.map_epochs is not None:
            e = self.map_epochs
            if (
                not isinstance(e, tuple)
                or not e
                or any(isinstance(k, bool) or not isinstance(k, int) for k in e)
                or list(e) != sorted(set(e))
                or e[0] < 0
                or e[-1] > self.train.epochs
            ):
                raise ValueError(
                    f"Experiment.map_epochs must be None or increasing epochs in 0..{self.train.epochs}, got {e!r}"
                )
        if self.foreground is not None and not 0 < self.foreground < 1:
            raise ValueError(f"Experiment.foreground must be None or in (0, 1), got {self.foreground!r}")
        if not isinstance(self.test, bool):
            raise ValueError(f"Experiment.test must be True or False, got {self.test!r}")

    @property
    def epochs_mapped(self) -> tuple[int, ...]:
        """The epochs whose maps and checkpoints are stored."""
        return tuple(range(self.train.epochs + 1)) if self.map_epochs is None else self.map_epochs

    def with_seed(self, seed: int) -> Experiment:
        return replace(self, train=replace(self.train, seed=seed))


@dataclass
class Result:
    """A (cached) run. Arrays are NumPy; ``L`` log points, ``E+1`` epoch ends, ``M`` map epochs.

    Attributes
    ----------
    experiment : the configuration.
    log : per log point: ``step``, ``epoch`` (float), ``lr``, ``train_loss``
        ``(L,)``; the weight norms of :data:`mmtoken.vit.WEIGHT_NORMS` and, on
        the validation probe batch, ``entropy`` (mean over images and heads,
        nats), ``eff`` (mean ``exp(entropy)``: effective patches of the
        per-image maps), ``eff_mean`` (effective patches of the probe-averaged
        map) and ``fg_share`` (attention mass on foreground patches), each ``(L, depth)``.
    epoch_end : indices into ``log`` of the epoch ends ``0..E``.
    val_loss, val_acc : ``(E+1,)`` on the whole validation split.
    test : ``None`` when the run did not touch the test split; else the one
        pass over it after training: ``loss``, ``acc`` and ``layers``, a list
        (one dict per block) of :func:`attention_statistics`.
    test_mean_map : ``(depth, P)`` test-averaged [CLS] attention (head mean), or ``None``.
    probe_attention : ``(M, depth, n_probe, P)`` head-averaged [CLS] attention
        over patches (renormalised) at ``experiment.epochs_mapped``.
    probe_images : ``uint8 (n_probe, C, H, W)``; probe_labels ``(n_probe,)``.
    probe_fg : ``bool (n_probe, P)`` foreground patches (all false without a rule).
    classes : class names.
    seconds, cpu_seconds : wall and CPU time of the training (not printed by the book).
    normalizer : the map from ``uint8`` images to network inputs used in training.
    path : the cache folder.
    """

    experiment: Experiment
    log: dict[str, np.ndarray]
    epoch_end: np.ndarray
    val_loss: np.ndarray
    val_acc: np.ndarray
    test: dict | None
    test_mean_map: np.ndarray | None
    probe_attention: np.ndarray
    probe_images: np.ndarray
    probe_labels: np.ndarray
    probe_fg: np.ndarray
    classes: tuple[str, ...]
    seconds: float
    cpu_seconds: float
    normalizer: vit.Normalizer = field(repr=False)
    path: Path = field(repr=False)

    @property
    def n_patches(self) -> int:
        return self.experiment.model.n_patches

    @property
    def seed(self) -> int:
        return self.experiment.train.seed

    def epoch_values(self, name: str, layer: int = -1) -> np.ndarray:
        """``log[name][:, layer]`` at the epoch ends, ``(E+1,)``."""
        return self.log[name][self.epoch_end, layer]


# --------------------------------------------------------------------------- data and statistics


@dataclass(frozen=True)
class RawData:
    """A dataset's train and test splits as loaded, with a digest of their contents."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    fingerprint: str


RAW_ARRAYS = ("x_train", "y_train", "x_test", "y_test")


def data_digest(*arrays: np.ndarray) -> str:
    """SHA-256 of the dtypes, shapes and bytes of ``arrays``."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def load_raw(name: str) -> RawData:
    """Load ``name``'s train and test splits and fingerprint them (:func:`data_digest`)."""
    x_train, y_train = image_data.load_images(name, "train")
    x_test, y_test = image_data.load_images(name, "test")
    return RawData(name, x_train, y_train, x_test, y_test, data_digest(x_train, y_train, x_test, y_test))


def split_indices(n_train: int, n_validation: int, split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(train, validation)`` of a fixed random split of ``n_train`` training images, each sorted."""
    if not 0 < n_validation < n_train:
        raise ValueError(f"n_validation must be in 1..{n_train - 1} for {n_train} training images, got {n_validation}")
    perm = np.random.default_rng(split_seed).permutation(n_train)
    return np.sort(perm[n_validation:]), np.sort(perm[:n_validation])


def foreground_mask(images: np.ndarray, patch: int, threshold: float | None) -> np.ndarray:
    """``bool (N, P)``: patches whose mean pixel value (``x/255``) is at least ``threshold``."""
    if threshold is None:
        return np.zeros((images.shape[0], (images.shape[2] // patch) * (images.shape[3] // patch)), bool)
    x = torch.as_tensor(images, dtype=torch.float64) / 255.0
    return (vit.patchify(x, patch).mean(-1) >= threshold).numpy()


def _entropy(p: np.ndarray) -> np.ndarray:
    return -(p * np.log(np.clip(p, 1e-30, None))).sum(-1)


def effective_patches(p: np.ndarray) -> np.ndarray:
    """``exp(entropy)`` over the last axis: 1 for one patch, ``P`` for uniform attention."""
    return np.exp(_entropy(np.asarray(p, np.float64)))


@torch.no_grad()
def attention_statistics(
    model: vit.ViT,
    images: np.ndarray,
    labels: np.ndarray,
    normalize: vit.Normalizer,
    fg: np.ndarray,
    batch_size: int = 1000,
) -> dict:
    """One pass over ``images``: loss, accuracy and the [CLS] attention statistics of every block.

    Parameters
    ----------
    images : ``uint8 (N, C, H, W)``; labels ``(N,)``; fg ``bool (N, P)`` foreground patches.

    Returns
    -------
    dict with ``loss``, ``acc`` and ``layers``: one dict per block with
    ``entropy`` (mean over images and heads, nats), ``eff_image`` (mean
    effective patches of the per-image maps), ``eff_mean`` (effective patches
    of the image-averaged map, mean over heads), ``fg_share`` (mean attention
    mass on foreground patches), ``uniform`` (what uniform attention puts on
    them: the mean share of foreground patches), ``top1_fg`` (fraction of
    images whose most attended patch is foreground); and ``mean_map``
    ``(depth, P)``, the image- and head-averaged map.
    """
    model.eval()
    dev = next(model.parameters()).device
    depth, n = len(model.blocks), len(images)
    loss, correct = 0.0, 0
    ent, eff, share, top = (np.zeros(depth) for _ in range(4))
    sums = None
    for i in range(0, n, batch_size):
        x = normalize(torch.as_tensor(images[i : i + batch_size], device=dev))
        y = torch.as_tensor(labels[i : i + batch_size], device=dev)
        logits, attns = model(x, return_attention=True)
        loss += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
        correct += int((logits.argmax(-1) == y).sum())
        f = fg[i : i + batch_size]
        a = np.stack([vit.cls_patch_attention(att.double()).cpu().numpy() for att in attns])  # (depth, B, h, P)
        sums = a.sum(1) if sums is None else sums + a.sum(1)
        h = _entropy(a)  # (depth, B, h)
        ent += h.mean(-1).sum(-1)
        eff += np.exp(h).mean(-1).sum(-1)
        head_mean = a.mean(2)  # (depth, B, P)
        share += (head_mean * f).sum(-1).sum(-1)
        top += f[np.arange(len(f)), head_mean.argmax(-1)].sum(-1)
    mean_maps = sums / n  # (depth, h, P)
    layers = [
        {
            "entropy": ent[l] / n,
            "eff_image": eff[l] / n,
            "eff_mean": float(effective_patches(mean_maps[l]).mean()),
            "fg_share": share[l] / n,
            "uniform": float(fg.mean()),
            "top1_fg": top[l] / n,
        }
        for l in range(depth)
    ]
    return {
        "loss": loss / n,
        "acc": correct / n,
        "layers": [{k: float(v) for k, v in d.items()} for d in layers],
        "mean_map": mean_maps.mean(1),
    }


@torch.no_grad()
def _probe(model: vit.ViT, x: torch.Tensor, fg: torch.Tensor) -> dict[str, list]:
    """Attention statistics of every layer on the (normalised) probe batch."""
    model.eval()
    _, attns = model(x, return_attention=True)
    out = {"entropy": [], "eff": [], "eff_mean": [], "fg_share": [], "maps": []}
    for attn in attns:
        a = vit.cls_patch_attention(attn.double())  # (B, h, P)
        h = vit.entropy(a)  # (B, h)
        out["entropy"].append(float(h.mean()))
        out["eff"].append(float(h.exp().mean()))
        out["eff_mean"].append(float(vit.entropy(a.mean(0)).exp().mean()))
        out["fg_share"].append(float((a.mean(1) * fg).sum(-1).mean()))
        out["maps"].append(a.mean(1).float().cpu().numpy())
    return out


def log_points(steps_per_epoch: int, epochs: int, per_epoch: int, first_epoch: int) -> list[int]:
    """Steps after which statistics are logged: ``per_epoch`` times an epoch, ``first_epoch`` times in the first."""
    return sorted(
        {round(k * steps_per_epoch / per_epoch) for k in range(epochs * per_epoch + 1)}
        | {round(k * steps_per_epoch / first_epoch) for k in range(first_epoch)}
    )


# --------------------------------------------------------------------------- training into a cache folder

LOG_KEYS = ("step", "epoch", "lr", "train_loss", *vit.WEIGHT_NORMS, "entropy", "eff", "eff_mean", "fg_share")
LAYER_KEYS = (*vit.WEIGHT_NORMS, "entropy", "eff", "eff_mean", "fg_share")


def train_into(exp: Experiment, raw: RawData, target: Path, fingerprint: dict[str, str]) -> None:
    """Train ``exp`` on ``raw`` and write its cache folder ``target`` (atomically: a temporary folder, then a rename).

    Every torch computation (training, probes, evaluation) runs with
    ``exp.train.threads`` threads, so the files do not depend on the core
    count. Top-level so that :func:`run_experiments` can run it in a worker process.
    """
    m, t = exp.model, exp.train
    if raw.x_train.shape[1:] != (m.channels, m.image_size, m.image_size):
        raise ValueError(
            f"{exp.dataset} images have shape {raw.x_train.shape[1:]}, the model expects "
            f"{(m.channels, m.image_size, m.image_size)}"
        )
    tr, va = split_indices(len(raw.x_train), exp.n_validation, exp.split_seed)
    x_tr, y_tr, x_va, y_va = raw.x_train[tr], raw.y_train[tr], raw.x_train[va], raw.y_train[va]
    dev = config.device()
    target = Path(target)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        with config.deterministic(t.threads):  # pinned threads, deterministic kernels
            cpu0, wall0 = time.process_time(), time.perf_counter()
            config.seed_everything(t.seed)
            model = vit.ViT(m).to(dev)
            normalize = vit.Normalizer.fit(torch.as_tensor(x_tr))
            xtr, ytr = torch.as_tensor(x_tr, device=dev), torch.as_tensor(y_tr, device=dev)
            xva, yva = torch.as_tensor(x_va, device=dev), torch.as_tensor(y_va, device=dev)
            probe_fg = foreground_mask(x_va[: exp.n_probe], m.patch, exp.foreground)
            probe_x = normalize(xva[: exp.n_probe])
            fg = torch.as_tensor(probe_fg, dtype=torch.float64, device=dev)
            spe = len(x_tr) // t.batch_size
            log: dict[str, list] = {k: [] for k in LOG_KEYS}
            ends: dict[str, list] = {"epoch_end": [], "val_loss": [], "val_acc": []}
            maps: list[np.ndarray] = []

            def on_log(step: int, epoch: float, loss: float) -> None:
                stats = _probe(model, probe_x, fg)
                norms = [vit.weight_norms(model, layer) for layer in range(m.depth)]
                log["step"].append(step)
                log["epoch"].append(epoch)
                log["lr"].append(t.lr * vit.lr_factor(step, spe * t.epochs, t.warmup) if step < spe * t.epochs else 0.0)
                log["train_loss"].append(loss)
                for k in vit.WEIGHT_NORMS:
                    log[k].append([n[k] for n in norms])
                for k in ("entropy", "eff", "eff_mean", "fg_share"):
                    log[k].append(stats[k])
                if step % spe == 0:
                    e = step // spe
                    loss_va, acc_va = vit.evaluate(model, xva, yva, normalize)
                    ends["epoch_end"].append(len(log["step"]) - 1)
                    ends["val_loss"].append(loss_va)
                    ends["val_acc"].append(acc_va)
                    if e in exp.epochs_mapped:
                        maps.append(np.stack(stats["maps"]))
                        torch.save(model.state_dict(), tmp / f"ckpt_epoch{e:03d}.pt")

            vit.train(
                model,
                xtr,
                ytr,
                t,
                normalize,
                log_points=log_points(spe, t.epochs, exp.logs_per_epoch, exp.logs_first_epoch),
                on_log=on_log,
            )
            seconds, cpu_seconds = time.perf_counter() - wall0, time.process_time() - cpu0
            test, mean_map = None, None
            if exp.test:  # the one look at the test split
                fg_test = foreground_mask(raw.x_test, m.patch, exp.foreground)
                test = attention_statistics(model, raw.x_test, raw.y_test, normalize, fg_test)
                mean_map = test.pop("mean_map")
        arrays = {
            "probe_attention": np.stack(maps),
            "probe_images": x_va[: exp.n_probe],
            "probe_labels": y_va[: exp.n_probe],
            "probe_fg": probe_fg,
        }
        if mean_map is not None:
            arrays["test_mean_map"] = mean_map
        np.savez_compressed(tmp / "arrays.npz", **arrays)
        history = {
            "experiment": asdict(exp),
            "classes": list(image_data.IMAGE_DATASETS[exp.dataset]),
            "seconds": seconds,
            "cpu_seconds": cpu_seconds,
            "normalizer": {"mean": normalize.mean.flatten().tolist(), "std": normalize.std.flatten().tolist()},
            "torch": torch.__version__,
            "device": str(dev),
            "log": log,
            **ends,
            "test": test,
        }
        (tmp / "history.json").write_text(json.dumps(history))
        resultcache.write_manifest(tmp, CACHE_NAME, CACHE_VERSION, fingerprint)
        resultcache.commit_folder(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


TRAINING_CODE = (
    split_indices,
    foreground_mask,
    _entropy,
    effective_patches,
    attention_statistics,
    _probe,
    log_points,
    train_into,
)
"""The functions of this module that compute what a cache folder holds (with all of :mod:`mmtoken.vit`)."""


@functools.lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """SHA-256 of the source that produces a cache folder: :mod:`mmtoken.vit` and :data:`TRAINING_CODE`."""
    h = hashlib.sha256(inspect.getsource(vit).encode())
    for f in TRAINING_CODE:
        h.update(inspect.getsource(f).encode())
    return h.hexdigest()


def fingerprint(exp: Experiment, data_fingerprint: str) -> dict[str, str]:
    """The source fingerprint of a run: ``code``, ``config`` and ``data`` digests."""
    blob = json.dumps(asdict(exp), sort_keys=True, default=list)
    return {"code": code_fingerprint(), "config": hashlib.sha256(blob.encode()).hexdigest(), "data": data_fingerprint}


def cache_key(fp: Mapping[str, str]) -> str:
    """The folder name of a run: 16 hex digits of the digest of its fingerprint (:func:`mmtoken.resultcache.folder_key`)."""
    return resultcache.folder_key(CACHE_NAME, CACHE_VERSION, dict(fp))


# --------------------------------------------------------------------------- reading a cache folder, validated


def _damaged(path: Path, reason: str) -> CacheError:
    return CacheError(
        f"ViT cache {path} cannot be used: {reason}. run_experiment rebuilds it (it is treated as "
        f"missing); to rebuild it yourself, delete the folder or call "
        f"run_experiment(..., retrain=True)."
    )


def _read_json(path: Path, folder: Path) -> dict:
    try:
        return resultcache.read_json(path)
    except resultcache.CacheError as exc:
        raise _damaged(folder, str(exc)) from None


def _experiment_from_dict(d: dict) -> Experiment:
    train = dict(d["train"])
    train["betas"] = tuple(train["betas"])
    d = dict(d)
    map_epochs = d.pop("map_epochs")
    return Experiment(
        **{
            **d,
            "model": vit.ViTConfig(**d["model"]),
            "train": vit.TrainConfig(**train),
            "map_epochs": None if map_epochs is None else tuple(map_epochs),
        }
    )


def _check_array(path: Path, name: str, arr: np.ndarray, shape: tuple, kind: str) -> np.ndarray:
    if tuple(arr.shape) != tuple(shape) or arr.dtype.kind not in kind:
        raise _damaged(
            path,
            f"array {name} has shape {tuple(arr.shape)} and dtype {arr.dtype}, "
            f"expected shape {tuple(shape)} and kind {kind!r}",
        )
    return arr  # non-finite values are allowed: a diverged run is a result, not a damaged cache


def load(path: os.PathLike, exp: Experiment | None = None, fp: Mapping[str, str] | None = None) -> Result:
    """Read and validate a cache folder written by :func:`train_into`.

    Parameters
    ----------
    path : the folder ``data/vit/<key>``.
    exp, fp : when given, the run the folder must hold and its fingerprint
        (:func:`fingerprint`); a folder holding anything else is an error.

    Raises
    ------
    CacheMissing : no such folder.
    CacheError : the folder is damaged (a file missing, truncated or altered),
        stale (another code, configuration, data or cache version) or holds
        another run; the message says what and how to rebuild it.
    """
    path = Path(path)
    if not path.is_dir():
        raise CacheMissing(f"no ViT cache at {path}")
    try:  # name, version, key, fingerprint, and every file's size and SHA-256
        files = resultcache.check_folder(path, CACHE_NAME, CACHE_VERSION, None if fp is None else dict(fp))["files"]
    except resultcache.CacheError as exc:
        raise _damaged(path, str(exc)) from None
    history = _read_json(path / "history.json", path)
    try:
        stored = _experiment_from_dict(history["experiment"])
    except (KeyError, TypeError, ValueError) as exc:
        raise _damaged(path, f"history.json does not describe a run ({type(exc).__name__}: {exc})") from None
    if exp is not None and stored != exp:
        raise _damaged(path, "it holds another configuration")
    exp = stored
    need = {"history.json", "arrays.npz", *(f"ckpt_epoch{e:03d}.pt" for e in exp.epochs_mapped)}
    if need - set(files):
        raise _damaged(path, f"its manifest lacks {sorted(need - set(files))}")
    m, depth, P, M = exp.model, exp.model.depth, exp.model.n_patches, len(exp.epochs_mapped)
    try:
        with np.load(path / "arrays.npz", allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as exc:  # a corrupt zip raises BadZipFile, OSError, ValueError or EOFError
        raise _damaged(path, f"arrays.npz cannot be read ({type(exc).__name__})") from None
    expected = {
        "probe_attention": ((M, depth, exp.n_probe, P), "f"),
        "probe_images": ((exp.n_probe, m.channels, m.image_size, m.image_size), "u"),
        "probe_labels": ((exp.n_probe,), "iu"),
        "probe_fg": ((exp.n_probe, P), "b"),
    }
    if exp.test:
        expected["test_mean_map"] = ((depth, P), "f")
    for name, (shape, kind) in expected.items():
        if name not in arrays:
            raise _damaged(path, f"arrays.npz lacks {name}")
        _check_array(path, name, arrays[name], shape, kind)
    try:
        raw_log = history["log"]
        log = {k: np.asarray(raw_log[k], dtype=np.int64 if k == "step" else np.float64) for k in LOG_KEYS}
        epoch_end = np.asarray(history["epoch_end"], dtype=np.int64)
        val_loss = np.asarray(history["val_loss"], dtype=np.float64)
        val_acc = np.asarray(history["val_acc"], dtype=np.float64)
        normalizer = vit.Normalizer(history["normalizer"]["mean"], history["normalizer"]["std"])
        seconds, cpu_seconds = float(history["seconds"]), float(history["cpu_seconds"])
        classes = tuple(str(c) for c in history["classes"])
        test = history["test"]
    except (KeyError, TypeError, ValueError) as exc:
        raise _damaged(path, f"history.json lacks or garbles a field ({type(exc).__name__}: {exc})") from None
    L = len(log["step"])
    for k in LOG_KEYS:
        shape = (L, depth) if k in LAYER_KEYS else (L,)
        _check_array(path, f"log[{k!r}]", log[k], shape, "if")
    E = exp.train.epochs
    for name, arr in (("epoch_end", epoch_end), ("val_loss", val_loss), ("val_acc", val_acc)):
        _check_array(path, name, arr, (E + 1,), "if")
    if epoch_end.min() < 0 or epoch_end.max() >= L or len(classes) != m.n_classes:
        raise _damaged(path, "history.json is inconsistent (epoch ends or classes)")
    if exp.test:
        keys = {"entropy", "eff_image", "eff_mean", "fg_share", "uniform", "top1_fg"}
        if (
            not isinstance(test, dict)
            or not {"loss", "acc", "layers"} <= set(test)
            or not isinstance(test["layers"], list)
            or len(test["layers"]) != depth
            or any(not isinstance(d, dict) or set(d) != keys for d in test["layers"])
        ):
            raise _damaged(path, "history.json lacks the test statistics")
    elif test is not None:
        raise _damaged(path, "history.json holds test statistics of a run that must not touch the test split")
    return Result(
        exp,
        log,
        epoch_end,
        val_loss,
        val_acc,
        test,
        arrays.get("test_mean_map"),
        arrays["probe_attention"],
        arrays["probe_images"],
        arrays["probe_labels"].astype(np.int64),
        arrays["probe_fg"],
        classes,
        seconds,
        cpu_seconds,
        normalizer,
        path,
    )


def checkpoint(result: Result, epoch: int) -> vit.ViT:
    """The model at one of ``result.experiment.epochs_mapped`` (on the CPU).

    The file is checked against its recorded SHA-256 and read with
    ``weights_only=True``; anything unreadable is a :class:`CacheError`.
    """
    if epoch not in result.experiment.epochs_mapped:
        raise ValueError(f"no checkpoint for epoch {epoch}; stored: {result.experiment.epochs_mapped}")
    path = result.path
    name = f"ckpt_epoch{epoch:03d}.pt"
    try:
        resultcache.check_file(path, name)
    except resultcache.CacheError as exc:
        raise _damaged(path, str(exc)) from None
    model = vit.ViT(result.experiment.model)
    try:
        state = torch.load(path / name, map_location="cpu", weights_only=True)
        model.load_state_dict(state)
    except Exception as exc:  # never pass on torch's advice to load with weights_only=False
        raise _damaged(path, f"{name} is not a checkpoint of this model ({type(exc).__name__})") from None
    return model.eval()


def sweep_leftovers(root: os.PathLike) -> list[Path]:
    """Delete what interrupted writes left in the cache ``root``; return what was removed.

    Removes temporary run folders ``<key>.tmp-<pid>`` whose process no longer
    runs, and ``*.part`` / ``*.tmp`` files in ``root`` and in its run folders
    (this module never leaves such files in place: they come from an
    interrupted copy or download).
    """
    root = Path(root)
    removed = []

    def drop(p: Path) -> None:
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        removed.append(p)

    for p in sorted(root.iterdir()) if root.is_dir() else []:
        if ".tmp-" in p.name:
            try:
                pid = int(p.name.rsplit("-", 1)[1])
                os.kill(pid, 0)
                alive = pid != os.getpid()
            except (ValueError, ProcessLookupError, OverflowError):
                alive = False
            except PermissionError:
                alive = True
            if not alive:
                drop(p)
        elif p.name.endswith((".part", ".tmp")):
            drop(p)
        elif p.is_dir():
            for q in sorted(p.iterdir()):
                if q.name.endswith((".part", ".tmp")):
                    drop(q)
    return removed


# --------------------------------------------------------------------------- running (cached, seeds in parallel)


def train_from_spec(spec_path: os.PathLike) -> None:
    """Worker entry point of :func:`train_in_processes`: run the job described by a JSON spec file.

    The spec names the experiment, the cache folder, the fingerprint and an
    ``.npz`` file holding the data, whose digest is checked before training.
    """
    spec = json.loads(Path(spec_path).read_text())
    exp = _experiment_from_dict(spec["experiment"])
    with np.load(spec["data"], allow_pickle=False) as z:
        arrays = [z[k] for k in RAW_ARRAYS]
    raw = RawData(exp.dataset, *arrays, data_digest(*arrays))
    if raw.fingerprint != spec["fingerprint"]["data"]:
        raise CacheError(f"the data handed to the worker in {spec['data']} changed on the way")
    if code_fingerprint() != spec["fingerprint"]["code"]:
        raise CacheError("the training code changed on disk after the run was planned; run it again")
    train_into(exp, raw, Path(spec["target"]), spec["fingerprint"])


def train_in_processes(jobs: list[tuple[Experiment, RawData, Path, dict]], workers: int) -> None:
    """Run :func:`train_into` for each job in fresh Python processes, at most ``workers`` at a time.

    Each worker is started with ``python -c`` (not ``multiprocessing``), so no
    script of the caller is re-imported and no ``if __name__ == "__main__"``
    guard is needed. The data go through one ``.npz`` file per dataset; a
    failing worker raises ``RuntimeError`` with the end of its output.
    """
    package_root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    code = "import sys; from mmtoken.vit_runs import train_from_spec; train_from_spec(sys.argv[1])"
    with tempfile.TemporaryDirectory(prefix="mmtoken-vit-") as tmp:
        data_files: dict[str, str] = {}
        pending = []
        for i, (exp, raw, target, fp) in enumerate(jobs):
            if raw.name not in data_files:
                data_files[raw.name] = str(Path(tmp) / f"data-{len(data_files)}.npz")
                np.savez(data_files[raw.name], **{k: getattr(raw, k) for k in RAW_ARRAYS})
            spec = Path(tmp) / f"job{i}.json"
            spec.write_text(
                json.dumps(
                    {"experiment": asdict(exp), "data": data_files[raw.name], "target": str(target), "fingerprint": fp}
                )
            )
            pending.append((spec, Path(tmp) / f"job{i}.out"))
        running, failures = [], []
        # each run takes minutes: a bar over finished runs where someone watches (off in builds)
        bar = config.progress_bar(
            total=len(pending), desc="ViT runs", enabled=config.progress_enabled(len(pending), threshold=1)
        )
        try:
            while pending or running:
                while pending and len(running) < workers:
                    spec, out = pending.pop(0)
                    fh = open(out, "wb")
                    running.append(
                        (
                            subprocess.Popen(
                                [sys.executable, "-c", code, str(spec)], stdout=fh, stderr=subprocess.STDOUT, env=env
                            ),
                            fh,
                            out,
                        )
                    )
                time.sleep(0.2)
                for job in [j for j in running if j[0].poll() is not None]:
                    running.remove(job)
                    bar.update(1)
                    proc, fh, out = job
                    fh.close()
                    if proc.returncode != 0:
                        failures.append(out.read_bytes().decode(errors="replace")[-3000:])
        finally:
            bar.close()
            for proc, fh, _ in running:  # interrupted: stop the workers this call started
                proc.terminate()
                proc.wait()
                fh.close()
    if failures:
        raise RuntimeError(f"{len(failures)} ViT training worker(s) failed; the last said:\n{failures[-1]}")


def run_experiments(
    exps: Iterable[Experiment], *, retrain: bool = False, on_damage: str = "rebuild", workers: int | None = None
) -> list[Result]:
    """Load the cached runs of ``exps`` from ``data/vit/<key>/``, training the missing ones first.

    Parameters
    ----------
    exps : the runs.
    retrain : train even when a valid cache exists.
    on_damage : ``"rebuild"`` (default): a damaged or stale cache folder is
        treated as missing, with a warning; ``"raise"``: raise its
        :class:`CacheError` (which says how to rebuild it).
    workers : processes that train in parallel (each single-threaded when
        ``train.threads == 1``, so the results do not depend on it); default:
        twice the CPU count on the CPU (single-threaded runs waiting on
        each other cost little), one on a GPU.

    Returns
    -------
    The results, in the order of ``exps``, always read back from the cache so
    that a fresh run and a cached one give identical numbers.
    """
    exps = list(exps)
    if on_damage not in ("rebuild", "raise"):
        raise ValueError(f"on_damage must be 'rebuild' or 'raise', got {on_damage!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be None or a positive integer, got {workers!r}")
    for e in exps:
        if not isinstance(e, Experiment):
            raise ValueError(f"exps must hold Experiment objects, got {type(e).__name__}")
    root = cache_dir("vit")
    sweep_leftovers(root)
    raws: dict[str, RawData] = {}
    plan, todo = [], {}
    for exp in exps:
        if exp.dataset not in raws:
            raws[exp.dataset] = load_raw(exp.dataset)
        fp = fingerprint(exp, raws[exp.dataset].fingerprint)
        target = root / cache_key(fp)
        plan.append((exp, fp, target))
        if retrain:
            todo[target] = (exp, fp)
            continue
        try:
            load(target, exp, fp)
        except CacheMissing:
            todo[target] = (exp, fp)
        except CacheError as exc:
            if on_damage == "raise":
                raise
            warnings.warn(f"{exc} Rebuilding it now.", stacklevel=2)
            todo[target] = (exp, fp)
    if todo:
        from .resultcache import locked

        # one process trains at a time: a second one (another pytest-xdist worker, a notebook
        # kernel) waits here, then finds the runs the first one wrote and trains only the rest
        with locked(root.parent / "vit-training"):  # the lock file lives in data/.locks, not among the runs
            if not retrain:
                for target in list(todo):
                    exp, fp = todo[target]
                    try:
                        load(target, exp, fp)
                        del todo[target]
                    except (CacheMissing, CacheError):
                        pass
            if workers is None:
                workers = 1 if config.device().type != "cpu" else 2 * (os.cpu_count() or 1)
            jobs = [(exp, raws[exp.dataset], target, fp) for target, (exp, fp) in todo.items()]
            if min(workers, len(jobs)) <= 1:
                for job in config.progress_bar(
                    jobs, desc="ViT runs", enabled=config.progress_enabled(len(jobs), threshold=1)
                ):
                    train_into(*job)
            elif jobs:
                train_in_processes(jobs, workers)
    return [load(target, exp, fp) for exp, fp, target in plan]


def run_experiment(exp: Experiment, *, retrain: bool = False, on_damage: str = "rebuild") -> Result:
    """One run of :func:`run_experiments`."""
    return run_experiments([exp], retrain=retrain, on_damage=on_damage)[0]
