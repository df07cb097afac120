"""Configuration in one place: the size switch, the device, dtype, seeding, determinism, progress bars.

The book runs at two scales: ``quick``, the default (every chapter executes in seconds to a few minutes on
a 2-core laptop CPU; what nbval and the claims ledger check), and ``paper``, the published (or larger)
sizes, meant for a GPU. Select it with ``MMTOKEN_SCALE`` or :func:`set_scale`; experiments read it
through :func:`scale` and :func:`pick`.
"""

from __future__ import annotations

__all__ = [
    "SCALES",
    "T",
    "ConfigError",
    "scale",
    "set_scale",
    "use_scale",
    "pick",
    "device",
    "device_report",
    "single_thread",
    "seed_everything",
    "data_dir",
    "RECORD_ENV",
    "recording",
    "recording_run",
    "TRAINED_ENV",
    "trained_dir",
    "PROGRESS_MODES",
    "progress_enabled",
    "on_terminal",
    "progress_bar",
    "set_progress",
    "reset",
    "deterministic",
]

import os
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from mmtoken import validate

if TYPE_CHECKING:
    import torch

SCALES = ("quick", "paper")


def __getattr__(name: str):
    # torch is imported on first use, so that commands that need no tensor
    # (``python -m mmtoken claims`` reading records) do not pay its import
    if name == "DTYPE":  # default dtype of the theory chapters: the softmax saturates by design
        import torch

        return torch.float64
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


T = TypeVar("T")


class ConfigError(ValueError):
    """An environment variable or setting the package cannot run with; the message names it."""


_scale: str | None = None
_progress: str | None = None


def scale() -> str:
    """The current size, ``"quick"`` (default) or ``"paper"``."""
    value = _scale or os.environ.get("MMTOKEN_SCALE", "quick")
    if value not in SCALES:
        raise ConfigError(f"MMTOKEN_SCALE={value!r} is not a known scale; choose one of {SCALES}")
    return value


def set_scale(value: str) -> None:
    """Set the size for this process (overrides ``MMTOKEN_SCALE``)."""
    global _scale
    if value not in SCALES:
        raise ConfigError(f"scale {value!r} is not one of {SCALES}")
    _scale = value


@contextmanager
def use_scale(value: str) -> Iterator[None]:
    """Temporarily run at ``value``."""
    global _scale
    old = _scale
    set_scale(value)
    try:
        yield
    finally:
        _scale = old


def pick(quick: T, paper: T, which: str | None = None) -> T:
    """Return ``quick`` or ``paper`` according to the current scale."""
    return paper if (which or scale()) == "paper" else quick


def device() -> torch.device:
    """The compute device: CUDA when present, else the CPU; ``MMTOKEN_DEVICE`` (``cpu``, ``cuda``, ``cuda:1``,
    ``mps``) overrides it, and one that is not usable here is a :class:`ConfigError` (no silent fallback to a
    CPU run that takes hours)."""
    import torch

    name = os.environ.get("MMTOKEN_DEVICE", "").strip()
    if name:
        return _checked_device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


_checked: dict[str, torch.device] = {}


def _checked_device(name: str) -> torch.device:
    import torch

    if name in _checked:
        return _checked[name]
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise ConfigError(
            f"MMTOKEN_DEVICE={name!r} is not a device torch knows; use cpu, cuda, cuda:<index> or mps, or unset it"
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"MMTOKEN_DEVICE={name!r} but CUDA is not available here "
                "(torch.cuda.is_available() is False); unset it or set MMTOKEN_DEVICE=cpu"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError(f"MMTOKEN_DEVICE={name!r} but only {torch.cuda.device_count()} CUDA device(s) exist")
    elif dev.type == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ConfigError(f"MMTOKEN_DEVICE={name!r} but MPS is not available here; unset it or use cpu")
    elif dev.type != "cpu":
        raise ConfigError(f"MMTOKEN_DEVICE={name!r}: the package runs on cpu, cuda or mps")
    _checked[name] = dev
    return dev


def device_report() -> str:
    """Two lines for a chapter's setup cell: the device found and how to switch the scale (the text depends
    on the machine, so chapters print it in a cell whose output nbval does not compare)."""
    import torch

    dev = device()
    found = f"{dev} ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else f"{dev} (no CUDA GPU found)"
    other = "paper" if scale() == "quick" else "quick"
    return f"device: {found}\nscale: {scale()}; for the other: config.set_scale({other!r})"


@contextmanager
def single_thread() -> Iterator[None]:
    """One intra-op torch thread while small tensor operations run on the CPU (nothing changes on a GPU).

    On Part II's tiny tensors threads gain nothing, and on a shared 2-core machine OpenMP threads waiting
    for each other made runs ten times slower; one thread also makes float32 results core-count independent.
    """
    import torch

    if device().type != "cpu":
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


@contextmanager
def deterministic(threads: int | None = 1) -> Iterator[None]:
    """Training that gives the same numbers on every run of the same machine and package versions.

    Sets ``threads`` torch intra-op threads (``None``: leave torch's setting), so every CPU reduction runs in
    the same order whatever the core count, and ``torch.use_deterministic_algorithms`` (``warn_only``: an
    operation without a deterministic kernel warns; on a GPU the cuBLAS workspace is fixed through
    ``CUBLAS_WORKSPACE_CONFIG`` when unset). The previous settings are restored afterwards.

    Another CPU or BLAS still gives other low digits, which grow through training, so chapters print trained
    results on a grid coarser than their measured spread (``report.on_grid``; CONTRIBUTING).
    """
    import torch

    if threads is not None:
        threads = validate.count(threads, "threads", minimum=1)
    old_threads = torch.get_num_threads()
    old_det = torch.are_deterministic_algorithms_enabled()
    old_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if threads is not None:
        torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det, warn_only=old_warn)


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a CPU torch generator seeded with ``seed``."""
    seed = validate.count(seed, "seed")
    if seed >= 2**32:
        raise ValueError(f"seed must be below 2**32 (NumPy's legacy seeding), got {seed}")
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 -- code that uses NumPy's global generator is seeded too
    import torch

    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def data_dir() -> Path:
    """Folder for downloaded data and cached results: ``MMTOKEN_DATA``, else the checkout's ``data/``, else
    ``~/.cache/mmtoken``. Asking creates nothing (every writer creates the folders of the file it writes)."""
    env = os.environ.get("MMTOKEN_DATA")
    if env:
        path = Path(env).expanduser()
        what = f"MMTOKEN_DATA={env!r}"
    else:
        repo = Path(__file__).resolve().parent.parent
        path = repo / "data" if (repo / "pyproject.toml").exists() else Path.home() / ".cache" / "mmtoken"
        what = f"the data folder {path}"
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} is a file, not a folder; point MMTOKEN_DATA at a folder")
    return path


RECORD_ENV = "MMTOKEN_RECORD"
"""The switch the book's own runs set (``make nbval``, the builds under ``make``, ``python -m mmtoken claims``):
``1`` records claim results and competitor verdicts in the ledger; unset (a reader's session, a test), nothing is."""


def recording() -> bool:
    """Whether this process is one of the book's own runs, which record their claims (:data:`RECORD_ENV` is ``1``)."""
    value = os.environ.get(RECORD_ENV, "")
    if value not in ("", "0", "1"):
        raise ConfigError(f"{RECORD_ENV} must be 1 (a run of the book, which records claims) or unset, got {value!r}")
    return value == "1"


@contextmanager
def recording_run() -> Iterator[None]:
    """Run the block as one of the book's own runs (:func:`recording`), its worker processes included (the switch
    is an environment variable); ``python -m mmtoken claims`` runs in one."""
    before = os.environ.get(RECORD_ENV)
    os.environ[RECORD_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(RECORD_ENV, None)
        else:
            os.environ[RECORD_ENV] = before


TRAINED_ENV = "MMTOKEN_TRAINED"
"""Where the carried trained runs are read from (:func:`trained_dir`); ``none`` reads none."""


def trained_dir() -> Path | None:
    """Where the trained runs that travel with the repository are (``book/trained`` of a checkout, or
    ``MMTOKEN_TRAINED``; ``MMTOKEN_TRAINED=none`` reads none, as ``make reproduce`` does); ``None`` outside a
    checkout (an installed wheel carries no trained runs: its reader trains them)."""
    env = os.environ.get(TRAINED_ENV)
    if env:
        return None if env == "none" else Path(env).expanduser()
    repo = Path(__file__).resolve().parent.parent
    return repo / "book" / "trained" if (repo / "pyproject.toml").exists() else None


PROGRESS_MODES = ("on", "off", "auto")


def progress_enabled(total_work: int, threshold: int = 200_000) -> bool:
    """Whether a loop of ``total_work`` elementary updates should show a progress bar.

    ``MMTOKEN_PROGRESS`` = ``on`` / ``off`` / ``auto`` (default: only for long runs, on a terminal or in a
    Jupyter kernel). Builds and tests set ``off`` so stored notebook outputs and logs stay clean.
    """
    mode = _progress or os.environ.get("MMTOKEN_PROGRESS", "auto").strip().lower()
    if mode not in PROGRESS_MODES:
        raise ConfigError(f"MMTOKEN_PROGRESS={mode!r} is not one of {PROGRESS_MODES}")
    if mode == "on":
        return True
    if mode == "off":
        return False
    return total_work >= threshold and (on_terminal() or _in_jupyter())


def on_terminal() -> bool:
    """Whether stderr is a terminal (progress bars are drawn there); False when stderr is replaced or closed."""
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def _in_jupyter() -> bool:
    """Whether this process is a Jupyter kernel (where ``tqdm.auto`` draws a widget)."""
    shell = sys.modules.get("IPython")
    try:
        ip = shell.get_ipython() if shell is not None else None
    except Exception:  # noqa: BLE001 - any IPython oddity means: not a kernel we can draw in
        return False
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


def progress_bar(iterable=None, *, total: int | None = None, desc: str | None = None, enabled: bool = True):
    """A ``tqdm`` progress bar: ``tqdm.auto`` when ``enabled`` (a widget in a Jupyter kernel), else a silent one.

    ``tqdm.auto`` is imported only when a bar is shown: without ``ipywidgets`` it warns, and that warning
    must not reach the stored outputs of notebooks that show no bar.
    """
    if not enabled:
        from tqdm.std import tqdm as silent

        return silent(iterable, total=total, desc=desc, disable=True)
    import warnings

    from tqdm.std import TqdmWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmWarning)  # no ipywidgets: a text bar instead of a widget
        from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, leave=False)


def set_progress(mode: str) -> None:
    """Force progress bars ``"on"``, ``"off"`` or back to ``"auto"``."""
    global _progress
    if mode not in PROGRESS_MODES:
        raise ConfigError(f"progress mode {mode!r} is not one of on/off/auto")
    _progress = mode


def reset() -> None:
    """Forget :func:`set_scale` and :func:`set_progress`: back to the environment variables and defaults."""
    global _scale, _progress
    _scale = None
    _progress = None
