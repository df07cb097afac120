"""The ViT runs in the one store: what a run is (:class:`Experiment`), what it records (:class:`Result`), its checkpoints.

A run is one result of :mod:`mmtoken.book.resultcache` (owner :data:`OWNER`, name :func:`run_name`, configuration
the :class:`Experiment`): the arrays of :data:`Result` that are arrays, and the rest (the history: the log, the
validation curve, the test statistics, the normaliser, the timings) as its JSON note. The store keys it by the
experiment, the data's digest and the code that trains it (:func:`mmtoken.vision.vit_runs.train_into` and
everything it calls), and refuses a damaged, swapped or stale file; :func:`from_stored` reads the note and checks
what the store cannot (the lengths of the log, the test statistics), so a garbled note is a
:class:`~mmtoken.book.resultcache.CacheError` too, never a raw error.

The checkpoints of a run (its model at each of :attr:`Experiment.epochs_mapped`) are a separate result beside it,
``<run name>-checkpoints`` (:func:`checkpoints_path`), with the run's fingerprint: written whenever the run
trains (:func:`store_checkpoints`), never carried with the repository (``book/trained`` holds what the chapter
reads back, not models). :func:`checkpoint` loads one, and says how to get them where they are not stored.
"""

from __future__ import annotations

__all__ = [
    "OWNER",
    "Experiment",
    "Result",
    "LOG_KEYS",
    "LAYER_KEYS",
    "run_name",
    "expected_arrays",
    "from_stored",
    "checkpoints_path",
    "store_checkpoints",
    "checkpoint",
]

import hashlib
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from mmtoken.book import resultcache
from mmtoken.datasets import images as image_data
from mmtoken.datasets.download import DataFolderError
from mmtoken.vision import vit, vit_train

OWNER = "vit"
"""The store's owner of the ViT runs: they live in ``<data>/results/vit/`` (and, carried, ``book/trained/vit/``)."""
CHECKPOINTS = "-checkpoints"
"""What a run's name is followed by in the name of its checkpoints."""


@dataclass(frozen=True)
class Experiment:
    """Everything that determines a run (with the data's digest and the training code, it keys the stored run).

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
    """A stored run. Arrays are NumPy; ``L`` log points, ``E+1`` epoch ends, ``M`` map epochs.

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
    entry : where the store keeps the run (:class:`mmtoken.book.resultcache.Entry`: its file in the data folder,
        its carried copy, its fingerprint).
    digest : SHA-256 of what the run holds (fingerprint, arrays and note): results computed from the run (chapter
        9's training accuracy, its logit spreads) are keyed by it, so they follow the run they were computed from.
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
    entry: resultcache.Entry = field(repr=False)
    digest: str = field(repr=False)

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
TEST_KEYS = frozenset({"entropy", "eff_image", "eff_mean", "fg_share", "uniform", "top1_fg"})


def run_name(exp: Experiment) -> str:
    """The store's name of run ``exp`` (``fashion-mnist/seed13``); the file name adds a key of the whole
    configuration (:func:`mmtoken.book.resultcache.path_of`), so runs of one seed with other settings never meet."""
    if not isinstance(exp, Experiment):
        raise ValueError(f"exp must be an Experiment, got {type(exp).__name__}")
    return f"{exp.dataset}/seed{exp.train.seed}"


def expected_arrays(exp: Experiment) -> dict[str, tuple[int, ...]]:
    """The arrays a stored run of ``exp`` holds and their shapes (the store refuses a file that differs)."""
    m, P = exp.model, exp.model.n_patches
    out = {
        "probe_attention": (len(exp.epochs_mapped), m.depth, exp.n_probe, P),
        "probe_images": (exp.n_probe, m.channels, m.image_size, m.image_size),
        "probe_labels": (exp.n_probe,),
        "probe_fg": (exp.n_probe, P),
    }
    if exp.test:
        out["test_mean_map"] = (m.depth, P)
    return out


def _unreadable(e: resultcache.Entry, reason: str) -> resultcache.CacheError:
    return resultcache.CacheError(
        f"the stored ViT run {e.title} cannot be used: {reason}; retrain it with "
        "mmtoken.vision.vit_runs.run_experiment(exp, retrain=True), which replaces it"
    )


def _digest(fp: str, arrays: Mapping[str, np.ndarray], meta: dict) -> str:
    h = hashlib.sha256(fp.encode() + b"\0" + json.dumps(meta, sort_keys=True).encode())
    for k in sorted(arrays):
        a = np.ascontiguousarray(arrays[k])
        h.update(f"\0{k}\0{a.dtype.str}{a.shape}\0".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def from_stored(arrays: Mapping[str, np.ndarray], meta: dict, exp: Experiment, entry: resultcache.Entry) -> Result:
    """The :class:`Result` of run ``exp`` from what the store returned for it (:func:`expected_arrays` and the note
    :func:`mmtoken.vision.vit_runs.train_into` wrote). A note that lacks or garbles a field, or whose log does not
    fit the experiment, raises :class:`~mmtoken.book.resultcache.CacheError` saying how to retrain the run."""
    depth, E = exp.model.depth, exp.train.epochs
    missing = set(expected_arrays(exp)) - set(arrays)
    if missing:
        raise _unreadable(entry, f"it lacks the arrays {sorted(missing)}")
    try:
        log = {k: np.asarray(meta["log"][k], dtype=np.int64 if k == "step" else np.float64) for k in LOG_KEYS}
        epoch_end = np.asarray(meta["epoch_end"], dtype=np.int64)
        val_loss, val_acc = (np.asarray(meta[k], dtype=np.float64) for k in ("val_loss", "val_acc"))
        normalizer = vit_train.Normalizer(meta["normalizer"]["mean"], meta["normalizer"]["std"])
        seconds, cpu_seconds = float(meta["seconds"]), float(meta["cpu_seconds"])
        classes = tuple(str(c) for c in meta["classes"])
        test = meta["test"]
    except (KeyError, TypeError, ValueError) as exc:
        raise _unreadable(entry, f"its note lacks or garbles a field ({type(exc).__name__}: {exc})") from None
    L = len(log["step"])
    for k in LOG_KEYS:
        if log[k].shape != ((L, depth) if k in LAYER_KEYS else (L,)):
            raise _unreadable(entry, f"log[{k!r}] has shape {log[k].shape} for {L} log points and {depth} blocks")
    for name, a in (("epoch_end", epoch_end), ("val_loss", val_loss), ("val_acc", val_acc)):
        if a.shape != (E + 1,):
            raise _unreadable(entry, f"{name} has shape {a.shape}, expected ({E + 1},)")
    if L == 0 or epoch_end.min() < 0 or epoch_end.max() >= L or len(classes) != exp.model.n_classes:
        raise _unreadable(entry, "its note is inconsistent (epoch ends or classes)")
    if exp.test:
        if (
            not isinstance(test, dict)
            or not {"loss", "acc", "layers"} <= set(test)
            or not isinstance(test["layers"], list)
            or len(test["layers"]) != depth
            or any(not isinstance(d, dict) or set(d) != TEST_KEYS for d in test["layers"])
        ):
            raise _unreadable(entry, "its note lacks the test statistics")
    elif test is not None:
        raise _unreadable(entry, "it holds test statistics of a run that must not touch the test split")
    a = {k: arrays.get(k) for k in ("test_mean_map", "probe_attention", "probe_images", "probe_labels", "probe_fg")}
    a["probe_labels"] = a["probe_labels"].astype(np.int64)
    a["probe_attention"] = a["probe_attention"].astype(np.float32)  # stored at float16: it is only drawn
    return Result(
        exp, log, epoch_end, val_loss, val_acc, test, *a.values(), classes, seconds, cpu_seconds, normalizer, entry,
        _digest(entry.fp, arrays, meta),
    )  # fmt: skip


# --------------------------------------------------------------------------- checkpoints, beside the run
def checkpoints_path(exp: Experiment) -> Path:
    """Where the data folder keeps the checkpoints of run ``exp`` (the store's file name of ``<run name>-checkpoints``;
    never among the carried runs)."""
    return resultcache.path_of(OWNER, run_name(exp) + CHECKPOINTS, exp)


def _checkpoints_title(exp: Experiment) -> str:
    return f"{OWNER}/{run_name(exp)}{CHECKPOINTS}"


def store_checkpoints(exp: Experiment, fp: str, states: Mapping[int, Mapping[str, np.ndarray]]) -> None:
    """Store the model of run ``exp`` at each epoch of ``states`` (epoch -> its ``state_dict`` as NumPy arrays) under
    the run's fingerprint ``fp``, beside the run (:func:`checkpoints_path`). Where the data folder cannot be written,
    a ``RuntimeWarning`` says so and the run stands without them."""
    if sorted(states) != list(exp.epochs_mapped):
        raise ValueError(f"states must hold the epochs {exp.epochs_mapped}, got {sorted(states)}")
    arrays = {f"epoch{e:03d}.{k}": v for e, state in states.items() for k, v in state.items()}
    try:
        resultcache.save(checkpoints_path(exp), _checkpoints_title(exp), fp, arrays, {"epochs": sorted(states)})
    except (OSError, DataFolderError) as exc:
        warnings.warn(f"the checkpoints of {run_name(exp)} are not stored ({exc})", RuntimeWarning, stacklevel=2)


def checkpoint(result: Result, epoch: int) -> vit.ViT:
    """The model of ``result`` at one of ``result.experiment.epochs_mapped`` (on the CPU, in eval mode), from the
    run's checkpoints in the data folder. Raises :class:`~mmtoken.book.resultcache.CacheError` where they are not
    stored for this run (the carried runs hold none: retrain the run here), or cannot be read."""
    exp = result.experiment
    if epoch not in exp.epochs_mapped:
        raise ValueError(f"no checkpoint for epoch {epoch}; stored: {exp.epochs_mapped}")
    path = checkpoints_path(exp)
    if not path.is_file():
        raise resultcache.CacheError(
            f"the checkpoints of {result.entry.title} are not stored here ({path}): the carried runs hold none; "
            "retrain with mmtoken.vision.vit_runs.run_experiment(exp, retrain=True) (minutes) to store them"
        )
    try:
        arrays, _ = resultcache.load(path, _checkpoints_title(exp), result.entry.fp)
    except resultcache.StaleResult:
        raise resultcache.CacheError(
            f"the checkpoints at {path} are of another training of {result.entry.title} (other code, settings or "
            "data); retrain with mmtoken.vision.vit_runs.run_experiment(exp, retrain=True) to store this run's"
        ) from None
    prefix = f"epoch{epoch:03d}."
    state = {k[len(prefix) :]: torch.from_numpy(v) for k, v in arrays.items() if k.startswith(prefix)}
    model = vit.ViT(exp.model)
    try:
        model.load_state_dict(state)
    except (RuntimeError, ValueError) as exc:  # missing or unexpected keys, wrong shapes
        raise resultcache.CacheError(
            f"{path} holds no checkpoint of this model at epoch {epoch} ({type(exc).__name__}); retrain with "
            "mmtoken.vision.vit_runs.run_experiment(exp, retrain=True)"
        ) from None
    return model.eval()
