"""Training runs of the small ViT, cached and validated: how a run is trained and fingerprinted.

A run (:class:`mmtoken.vision.vit_cache.Experiment`) trains :class:`mmtoken.vision.vit.ViT` on
an image dataset split into training and validation images (a fixed random
split of the training set, :func:`split_indices`); the test split is read once,
after training, in one pass that measures the accuracy and the attention
statistics (:func:`mmtoken.vision.vit.attention_statistics`). During training the
weight norms (:func:`mmtoken.vision.vit.weight_norms`) and the attention statistics of
a probe batch of validation images are logged (:func:`train_into`).

:func:`run_experiments` reads each run from its cache folder ``data/vit/<key>/``
(:mod:`mmtoken.vision.vit_cache`), training the missing ones first. ``key`` is a
digest of the run's fingerprint (:func:`fingerprint`): the code that produces
the numbers (:func:`code_fingerprint`: the modules of :data:`TRAINING_MODULES`
and the functions of :data:`TRAINING_CODE`, finer than the module-level
fingerprint of other results because a retrain costs minutes), the
configuration and the data.

Runs that must be trained go to worker processes (:func:`train_in_processes`),
each with the torch thread count of its configuration (one thread at quick
scale), so the numbers do not depend on the machine's core count.
"""

from __future__ import annotations

__all__ = [
    "RawData",
    "RAW_ARRAYS",
    "data_digest",
    "load_raw",
    "split_indices",
    "log_points",
    "train_into",
    "TRAINING_MODULES",
    "TRAINING_CODE",
    "code_fingerprint",
    "fingerprint",
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
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from mmtoken import config
from mmtoken.book import resultcache
from mmtoken.book.fingerprint import code_text
from mmtoken.datasets import images as image_data
from mmtoken.datasets.download import cache_dir
from mmtoken.vision import vit, vit_cache, vit_train
from mmtoken.vision.vit_cache import CacheError, CacheMissing, Experiment, Result

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


def log_points(steps_per_epoch: int, epochs: int, per_epoch: int, first_epoch: int) -> list[int]:
    """Steps after which statistics are logged: ``per_epoch`` times an epoch, ``first_epoch`` times in the first."""
    return sorted(
        {round(k * steps_per_epoch / per_epoch) for k in range(epochs * per_epoch + 1)}
        | {round(k * steps_per_epoch / first_epoch) for k in range(first_epoch)}
    )


# --------------------------------------------------------------------------- training into a cache folder


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
                        torch.save(model.state_dict(), tmp / f"ckpt_epoch{e:03d}.pt")

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
        resultcache.write_manifest(tmp, vit_cache.CACHE_NAME, vit_cache.CACHE_VERSION, fingerprint)
        resultcache.commit_folder(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


TRAINING_MODULES = (vit, vit_train)
"""The modules whose whole source is part of :func:`code_fingerprint`: the model and its attention statistics, the
training loop."""

TRAINING_CODE = (split_indices, log_points, train_into, Experiment, config.seed_everything, config.deterministic)
"""The functions (and the class, for :attr:`Experiment.epochs_mapped`) outside :data:`TRAINING_MODULES` that compute
what a cache folder holds: every ``mmtoken`` function :func:`train_into` calls (but the device choice and the
writing of the folder) is here or in those modules (``tests/test_vit_runs.py`` checks it)."""


@functools.lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """SHA-256 of the code that produces a cache folder: :data:`TRAINING_MODULES` and :data:`TRAINING_CODE`, without
    docstrings, comments or layout (:func:`mmtoken.book.fingerprint.code_text`)."""
    h = hashlib.sha256()
    for m in TRAINING_MODULES:
        h.update(code_text(inspect.getsource(m)).encode())
    for f in TRAINING_CODE:
        h.update(code_text(inspect.getsource(f)).encode())
    return h.hexdigest()


def fingerprint(exp: Experiment, data_fingerprint: str) -> dict[str, str]:
    """The source fingerprint of a run: ``code``, ``config`` and ``data`` digests."""
    blob = json.dumps(asdict(exp), sort_keys=True, default=list)
    return {"code": code_fingerprint(), "config": hashlib.sha256(blob.encode()).hexdigest(), "data": data_fingerprint}


# --------------------------------------------------------------------------- running (cached, seeds in parallel)


def train_from_spec(spec_path: os.PathLike) -> None:
    """Worker entry point of :func:`train_in_processes`: run the job described by a JSON spec file.

    The spec names the experiment, the cache folder, the fingerprint and an
    ``.npz`` file holding the data, whose digest is checked before training.
    """
    spec = json.loads(Path(spec_path).read_text())
    exp = vit_cache.experiment_from_dict(spec["experiment"])
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
    code = "import sys; from mmtoken.vision.vit_runs import train_from_spec; train_from_spec(sys.argv[1])"
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
    """Load the cached runs of ``exps`` from ``data/vit/<key>/`` (:func:`mmtoken.vision.vit_cache.load`), training the
    missing ones first.

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
    vit_cache.sweep_leftovers(root)
    raws: dict[str, RawData] = {}
    plan, todo = [], {}
    for exp in exps:
        if exp.dataset not in raws:
            raws[exp.dataset] = load_raw(exp.dataset)
        fp = fingerprint(exp, raws[exp.dataset].fingerprint)
        target = root / vit_cache.cache_key(fp)
        plan.append((exp, fp, target))
        if retrain:
            todo[target] = (exp, fp)
            continue
        try:
            vit_cache.load(target, exp, fp)
        except CacheMissing:
            todo[target] = (exp, fp)
        except CacheError as exc:
            if on_damage == "raise":
                raise
            warnings.warn(f"{exc} Rebuilding it now.", stacklevel=2)
            todo[target] = (exp, fp)
    if todo:
        from mmtoken.book.resultcache import locked

        # one process trains at a time: a second one (another pytest-xdist worker, a notebook
        # kernel) waits here, then finds the runs the first one wrote and trains only the rest
        with locked(root.parent / "vit-training"):  # the lock file lives in data/.locks, not among the runs
            if not retrain:
                for target in list(todo):
                    exp, fp = todo[target]
                    try:
                        vit_cache.load(target, exp, fp)
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
    return [vit_cache.load(target, exp, fp) for exp, fp, target in plan]


def run_experiment(exp: Experiment, *, retrain: bool = False, on_damage: str = "rebuild") -> Result:
    """One run of :func:`run_experiments`."""
    return run_experiments([exp], retrain=retrain, on_damage=on_damage)[0]
