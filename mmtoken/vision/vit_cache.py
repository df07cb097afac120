"""The ViT run cache: what a run is (:class:`Experiment`), what it records (:class:`Result`), where it is kept.

A run is a folder result of :mod:`mmtoken.book.resultcache` in ``data/vit/<key>/`` (:func:`cache_key`, of the
fingerprint :func:`mmtoken.vision.vit_runs.fingerprint`), written atomically by
:func:`mmtoken.vision.vit_runs.train_into` with a manifest (written last) of the cache's name, the fingerprint and
every file's size and SHA-256. :func:`load` and :func:`checkpoint` (``weights_only=True``) check all of it and the
shapes they read, so a damaged, stale or swapped folder is a :class:`CacheError` (rebuilt by
:func:`mmtoken.vision.vit_runs.run_experiments`, or reported with instructions), never a raw error.
:func:`sweep_leftovers` removes what interrupted writes left.
"""

from __future__ import annotations

__all__ = [
    "CACHE_NAME",
    "CACHE_VERSION",
    "CacheError",
    "CacheMissing",
    "Experiment",
    "Result",
    "LOG_KEYS",
    "LAYER_KEYS",
    "cache_key",
    "experiment_from_dict",
    "load",
    "checkpoint",
    "sweep_leftovers",
]

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from mmtoken.book import resultcache
from mmtoken.datasets import images as image_data
from mmtoken.vision import vit, vit_train

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
        random subset, :func:`mmtoken.vision.vit_runs.split_indices`); the rest are trained on.
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
    train: vit_train.TrainConfig
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
    log : per log point, ``(L,)``: ``step``, ``epoch`` (float), ``lr``, ``train_loss``; ``(L, depth)``: the weight
        norms of :data:`mmtoken.vision.vit.WEIGHT_NORMS` and, on the validation probe batch, ``entropy`` (mean over
        images and heads, nats), ``eff`` (mean ``exp(entropy)``: effective patches of the per-image maps),
        ``eff_mean`` (effective patches of the probe-averaged map) and ``fg_share`` (attention mass on foreground).
    epoch_end : indices into ``log`` of the epoch ends ``0..E``.
    val_loss, val_acc : ``(E+1,)`` on the whole validation split.
    test : ``None`` when the run did not touch the test split; else the one pass over it after training: ``loss``,
        ``acc`` and ``layers``, one dict per block of :func:`mmtoken.vision.vit.attention_statistics`.
    test_mean_map : ``(depth, P)`` test-averaged [CLS] attention (head mean), or ``None``.
    probe_attention : ``(M, depth, n_probe, P)`` head-averaged [CLS] attention over patches (renormalised) at
        ``experiment.epochs_mapped``.
    probe_images, probe_labels, probe_fg : ``uint8 (n_probe, C, H, W)``, ``(n_probe,)`` and the foreground patches,
        ``bool (n_probe, P)`` (all false without a rule).
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
    normalizer: vit_train.Normalizer = field(repr=False)
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


LAYER_KEYS = (*vit.WEIGHT_NORMS, "entropy", "eff", "eff_mean", "fg_share")
LOG_KEYS = ("step", "epoch", "lr", "train_loss", *LAYER_KEYS)
"""The series of :attr:`Result.log` (one value per log point; those of ``LAYER_KEYS`` one per block)."""


def cache_key(fp: Mapping[str, str]) -> str:
    """The folder name of a run: 16 hex digits of the digest of its fingerprint (:func:`mmtoken.book.resultcache.folder_key`)."""
    return resultcache.folder_key(CACHE_NAME, CACHE_VERSION, dict(fp))


def _damaged(path: Path, reason: str) -> CacheError:
    return CacheError(
        f"ViT cache {path} cannot be used: {reason}. run_experiment rebuilds it (it is treated as missing); to "
        "rebuild it yourself, delete the folder or call run_experiment(..., retrain=True)."
    )


def experiment_from_dict(d: dict) -> Experiment:
    """The :class:`Experiment` of ``dataclasses.asdict(exp)`` read back from JSON (tuples come back as lists)."""
    return Experiment(
        **{
            **d,
            "model": vit.ViTConfig(**d["model"]),
            "train": vit_train.TrainConfig(**{**d["train"], "betas": tuple(d["train"]["betas"])}),
            "map_epochs": None if d["map_epochs"] is None else tuple(d["map_epochs"]),
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
    """Read and validate a cache folder written by :func:`mmtoken.vision.vit_runs.train_into`.

    Parameters
    ----------
    path : the folder ``data/vit/<key>``.
    exp, fp : when given, the run the folder must hold and its fingerprint
        (:func:`mmtoken.vision.vit_runs.fingerprint`); a folder holding anything else is an error.

    Raises
    ------
    CacheMissing : no such folder.
    CacheError : the folder is damaged (a file missing, truncated or altered), stale (another code, configuration,
        data or cache version) or holds another run; the message says what and how to rebuild it.
    """
    path = Path(path)
    if not path.is_dir():
        raise CacheMissing(f"no ViT cache at {path}")
    try:  # name, version, key, fingerprint, and every file's size and SHA-256
        files = resultcache.check_folder(path, CACHE_NAME, CACHE_VERSION, None if fp is None else dict(fp))["files"]
        history = resultcache.read_json(path / "history.json")
        stored = experiment_from_dict(history["experiment"])
    except resultcache.CacheError as exc:
        raise _damaged(path, str(exc)) from None
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
        log = {k: np.asarray(history["log"][k], dtype=np.int64 if k == "step" else np.float64) for k in LOG_KEYS}
        epoch_end = np.asarray(history["epoch_end"], dtype=np.int64)
        val_loss, val_acc = (np.asarray(history[k], dtype=np.float64) for k in ("val_loss", "val_acc"))
        normalizer = vit_train.Normalizer(history["normalizer"]["mean"], history["normalizer"]["std"])
        seconds, cpu_seconds = float(history["seconds"]), float(history["cpu_seconds"])
        classes = tuple(str(c) for c in history["classes"])
        test = history["test"]
    except (KeyError, TypeError, ValueError) as exc:
        raise _damaged(path, f"history.json lacks or garbles a field ({type(exc).__name__}: {exc})") from None
    L = len(log["step"])
    for k in LOG_KEYS:
        _check_array(path, f"log[{k!r}]", log[k], (L, depth) if k in LAYER_KEYS else (L,), "if")
    for name, arr in (("epoch_end", epoch_end), ("val_loss", val_loss), ("val_acc", val_acc)):
        _check_array(path, name, arr, (exp.train.epochs + 1,), "if")
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
    arrays["probe_labels"] = arrays["probe_labels"].astype(np.int64)
    probe = [arrays.get(k) for k in ("test_mean_map", "probe_attention", "probe_images", "probe_labels", "probe_fg")]
    return Result(exp, log, epoch_end, val_loss, val_acc, test, *probe, classes, seconds, cpu_seconds, normalizer, path)


def checkpoint(result: Result, epoch: int) -> vit.ViT:
    """The model at one of ``result.experiment.epochs_mapped`` (on the CPU), its file checked against its recorded
    SHA-256 and read with ``weights_only=True``; anything unreadable is a :class:`CacheError`."""
    if epoch not in result.experiment.epochs_mapped:
        raise ValueError(f"no checkpoint for epoch {epoch}; stored: {result.experiment.epochs_mapped}")
    path = result.path
    name = f"ckpt_epoch{epoch:03d}.pt"
    try:
        resultcache.check_file(path, name)
        model = vit.ViT(result.experiment.model)
        model.load_state_dict(torch.load(path / name, map_location="cpu", weights_only=True))
    except resultcache.CacheError as exc:
        raise _damaged(path, str(exc)) from None
    except Exception as exc:  # never pass on torch's advice to load with weights_only=False
        raise _damaged(path, f"{name} is not a checkpoint of this model ({type(exc).__name__})") from None
    return model.eval()


def sweep_leftovers(root: os.PathLike) -> list[Path]:
    """Delete what interrupted writes left in the cache ``root``; return what was removed: temporary run folders
    ``<key>.tmp-<pid>`` whose process no longer runs, and ``*.part`` / ``*.tmp`` files in ``root`` and in its run
    folders (this module never leaves such files in place: they come from an interrupted copy or download)."""
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
