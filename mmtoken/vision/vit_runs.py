"""Training runs of the small ViT, kept in the one store: how a run is trained, and how many are trained at once.

A run (:class:`mmtoken.vision.vit_cache.Experiment`) trains :class:`mmtoken.vision.vit.ViT` on
an image dataset split into training and validation images (a fixed random
split of the training set, :func:`split_indices`); the test split is read once,
after training, in one pass that measures the accuracy and the attention
statistics (:func:`mmtoken.vision.vit.attention_statistics`). During training the
weight norms (:func:`mmtoken.vision.vit.weight_norms`) and the attention statistics of
a probe batch of validation images are logged (:func:`train_into`).

:func:`run_experiments` reads each run from the store (:func:`mmtoken.book.resultcache.cached`, owner
``vit``: the data folder's ``results/vit/``, then the trained runs carried in ``book/trained/vit/``), training
the missing ones first. A run is keyed by its experiment, the digest of its data (:func:`data_digest`) and the
code that trains it: :func:`train_into` and every ``mmtoken`` definition it reaches
(:mod:`mmtoken.book.fingerprint`), so an edit of the model, the loop or the statistics retrains it, and an
edit elsewhere does not. A damaged or swapped file is recomputed with a warning, a stale one (other code)
silently; a run that trains also stores its checkpoints beside it (:func:`mmtoken.vision.vit_cache.checkpoint`).

Several missing runs train in worker processes (:func:`mmtoken.workers.map_jobs`, :func:`train_job`), each with
the torch thread count of its configuration (one thread at quick scale), so the numbers do not depend on the
machine's core count nor on where a run trained. Two processes asking for the same run (two pytest-xdist
workers, a kernel and a test) never train it twice: the second waits on the store's lock of that run and reads it.
"""

from __future__ import annotations

__all__ = [
    "RawData",
    "data_digest",
    "load_raw",
    "split_indices",
    "log_points",
    "train_into",
    "entry",
    "train_job",
    "run_experiments",
    "run_experiment",
]

import functools
import hashlib
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from mmtoken import config
from mmtoken import workers as pool
from mmtoken.book import resultcache
from mmtoken.datasets import images as image_data
from mmtoken.vision import vit, vit_cache, vit_train
from mmtoken.vision.vit_cache import OWNER, Experiment, Result

# --------------------------------------------------------------------------- data and the split


@dataclass(frozen=True)
class RawData:
    """A dataset's train and test splits as loaded, with a digest of their contents."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    fingerprint: str


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


def log_points(steps_per_epoch: int, epochs: int, per_epoch: int, first_epoch: int) -> list[int]:
    """Steps after which statistics are logged: ``per_epoch`` times an epoch, ``first_epoch`` times in the first."""
    return sorted(
        {round(k * steps_per_epoch / per_epoch) for k in range(epochs * per_epoch + 1)}
        | {round(k * steps_per_epoch / first_epoch) for k in range(first_epoch)}
    )


# --------------------------------------------------------------------------- training one run


def train_into(
    exp: Experiment, raw: RawData, checkpoint: Callable[[int, dict[str, np.ndarray]], None] | None = None
) -> resultcache.Stored:
    """Train ``exp`` on ``raw``: the run's arrays and its note (the history), as the store keeps them.

    Every torch computation (training, probes, evaluation) runs with ``exp.train.threads`` threads, so the
    numbers do not depend on the core count. ``checkpoint(epoch, state)`` is called at each of
    ``exp.epochs_mapped`` with the model's ``state_dict`` as NumPy arrays (copies): how :func:`run_experiments`
    stores the checkpoints beside the run, outside the code that keys it.
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
    with config.deterministic(t.threads):  # pinned threads, deterministic kernels
        cpu0, wall0 = time.process_time(), time.perf_counter()
        config.seed_everything(t.seed)
        model = vit.ViT(m).to(dev)
        normalize = vit_train.Normalizer.fit(torch.as_tensor(x_tr))
        xtr, ytr = torch.as_tensor(x_tr, device=dev), torch.as_tensor(y_tr, device=dev)
        xva, yva = torch.as_tensor(x_va, device=dev), torch.as_tensor(y_va, device=dev)
        probe_fg = vit.foreground_mask(x_va[: exp.n_probe], m.patch, exp.foreground)
        probe_x = normalize(xva[: exp.n_probe])
        fg = torch.as_tensor(probe_fg, dtype=torch.float64, device=dev)
        spe = len(x_tr) // t.batch_size
        log: dict[str, list] = {k: [] for k in vit_cache.LOG_KEYS}
        ends: dict[str, list] = {"epoch_end": [], "val_loss": [], "val_acc": []}
        maps: list[np.ndarray] = []

        def on_log(step: int, epoch: float, loss: float) -> None:
            stats = vit.probe_statistics(model, probe_x, fg)
            norms = [vit.weight_norms(model, layer) for layer in range(m.depth)]
            log["step"].append(step)
            log["epoch"].append(epoch)
            log["lr"].append(
                t.lr * vit_train.lr_factor(step, spe * t.epochs, t.warmup) if step < spe * t.epochs else 0.0
            )
            log["train_loss"].append(loss)
            for k in vit.WEIGHT_NORMS:
                log[k].append([n[k] for n in norms])
            for k in ("entropy", "eff", "eff_mean", "fg_share"):
                log[k].append(stats[k])
            if step % spe == 0:
                e = step // spe
                loss_va, acc_va = vit_train.evaluate(model, xva, yva, normalize)
                ends["epoch_end"].append(len(log["step"]) - 1)
                ends["val_loss"].append(loss_va)
                ends["val_acc"].append(acc_va)
                if e in exp.epochs_mapped:
                    maps.append(np.stack(stats["maps"]))
                    if checkpoint is not None:
                        checkpoint(e, {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()})

        vit_train.train(
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
            fg_test = vit.foreground_mask(raw.x_test, m.patch, exp.foreground)
            test = vit.attention_statistics(model, raw.x_test, raw.y_test, normalize, fg_test)
            mean_map = test.pop("mean_map")
    arrays = {
        # float16 (3 significant digits): only drawn (the attention maps), and the carried runs must fit in 20 MB
        "probe_attention": np.stack(maps).astype(np.float16),
        "probe_images": x_va[: exp.n_probe],
        "probe_labels": y_va[: exp.n_probe],
        "probe_fg": probe_fg,
    }
    if mean_map is not None:
        arrays["test_mean_map"] = mean_map
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
    return arrays, history


# --------------------------------------------------------------------------- runs in the store


def entry(exp: Experiment, raw: RawData) -> resultcache.Entry:
    """Where the store keeps run ``exp`` trained on ``raw``, and the fingerprint it must match (its experiment, the
    data's digest, the code of :func:`train_into`)."""
    return resultcache.entry(OWNER, vit_cache.run_name(exp), config=exp, code=[train_into], data=raw.fingerprint)


def _cached(exp: Experiment, raw: RawData, retrain: bool) -> tuple[resultcache.Stored, resultcache.Entry]:
    """The stored run of ``exp`` (trained now where the store lacks it; ``retrain``: trained now in any case, its
    file in the data folder replaced)."""
    e = entry(exp, raw)

    def compute() -> resultcache.Stored:  # train_into, and its checkpoints stored beside the run
        states: dict[int, dict[str, np.ndarray]] = {}
        stored = train_into(exp, raw, states.__setitem__)
        vit_cache.store_checkpoints(exp, e.fp, states)
        return stored

    stored = resultcache.cached(
        OWNER,
        e.name,
        compute,
        config=exp,
        code=[train_into],
        data=raw.fingerprint,
        expect=vit_cache.expected_arrays(exp),
        recompute=retrain,
    )
    return stored, e


def _result(exp: Experiment, raw: RawData, retrain: bool = False) -> Result:
    (arrays, meta), e = _cached(exp, raw, retrain)
    return vit_cache.from_stored(arrays, meta, exp, e)


def train_job(exp: Experiment, raw: RawData, retrain: bool) -> list[tuple[type[Warning], str]]:
    """A worker's job in :func:`run_experiments` (:func:`mmtoken.workers.map_jobs`): store run ``exp`` as the parent
    would (the same :func:`mmtoken.book.resultcache.cached` call), and return the warnings it gave, for the parent to
    repeat (a worker's own output reaches no notebook)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _cached(exp, raw, retrain)
    return list(dict.fromkeys((w.category, str(w.message)) for w in caught))


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


@contextmanager
def _watched(paths: Sequence[Path], bar) -> Iterator[None]:
    """Move ``bar`` on as the files at ``paths`` are (re)written (the store replaces a file when a run is stored),
    while the block runs; a silent bar is left alone."""
    stop, watcher = threading.Event(), None
    if not bar.disable:
        before = {p: _stamp(p) for p in paths}

        def watch() -> None:
            while not stop.wait(1.0):
                bar.update(sum(_stamp(p) != s for p, s in before.items()) - bar.n)

        watcher = threading.Thread(target=watch, name="vit-runs-progress", daemon=True)
        watcher.start()
    finished = False
    try:
        yield
        finished = True
    finally:
        stop.set()
        if watcher is not None:
            watcher.join()
        if finished:
            bar.update(len(paths) - bar.n)
        bar.close()


def run_experiments(exps: Iterable[Experiment], *, retrain: bool = False, workers: int | None = None) -> list[Result]:
    """The stored runs of ``exps`` (:func:`mmtoken.vision.vit_cache.from_stored`), training the missing ones first.

    Parameters
    ----------
    exps : the runs.
    retrain : train every run now, even where the store holds it (in the data folder or among the carried runs),
        replacing the data folder's file: how a carried run gets its checkpoints (the carried runs hold none).
    workers : processes that train in parallel (each single-threaded when ``train.threads == 1``, so the results
        do not depend on it); default :func:`mmtoken.workers.default_workers` on the CPU, one on a GPU. With one,
        or one run to train, it trains in this process.

    Returns
    -------
    The results, in the order of ``exps``, always read back from the store, so that a fresh run and a stored one
    give identical numbers.

    Raises
    ------
    mmtoken.workers.WorkerError : a run failed in a worker (with the worker's traceback); the runs stored before
        it stay stored.
    """
    exps = list(exps)
    if not isinstance(retrain, bool):
        raise ValueError(f"retrain must be True or False, got {retrain!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be None or a positive integer, got {workers!r}")
    for e in exps:
        if not isinstance(e, Experiment):
            raise ValueError(f"exps must hold Experiment objects, got {type(e).__name__}")
    raws: dict[str, RawData] = {}
    for exp in exps:
        if exp.dataset not in raws:
            raws[exp.dataset] = load_raw(exp.dataset)
    stored = functools.partial(resultcache.stored, OWNER, code=[train_into])
    todo = [
        exp
        for exp in dict.fromkeys(exps)
        if retrain or not stored(vit_cache.run_name(exp), config=exp, data=raws[exp.dataset].fingerprint)
    ]
    if workers is None:
        workers = 1 if config.device().type != "cpu" else pool.default_workers()
    # each run takes minutes: a bar over finished runs where someone watches (off in builds)
    bar = config.progress_bar(total=len(todo), desc="ViT runs", enabled=config.progress_enabled(len(todo), threshold=1))
    done: dict[Experiment, Result] = {}
    if min(workers, len(todo)) > 1:
        with _watched([entry(exp, raws[exp.dataset]).path for exp in todo], bar):
            said = pool.map_jobs(train_job, [(exp, raws[exp.dataset], retrain) for exp in todo], workers)
        for category, message in dict.fromkeys(w for job in said for w in job):
            warnings.warn(message, category, stacklevel=2)
    else:
        with bar:
            for exp in todo:
                done[exp] = _result(exp, raws[exp.dataset], retrain)
                bar.update(1)
    return [done[exp] if exp in done else _result(exp, raws[exp.dataset]) for exp in exps]


def run_experiment(exp: Experiment, *, retrain: bool = False) -> Result:
    """One run of :func:`run_experiments`, trained in this process where the store lacks it."""
    return run_experiments([exp], retrain=retrain, workers=1)[0]
