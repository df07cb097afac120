"""Jobs for the worker pool's tests (tests/test_workers.py): importable by a spawned worker."""

import os
import time
from pathlib import Path


def square(x: int) -> int:
    return x * x


def fail(x: int) -> int:
    raise ValueError(f"job {x} refuses")


def die(x: int) -> int:
    os._exit(3)  # a worker killed mid-job (as the kernel's OOM killer does)


def sleep_forever(folder: str, i: int) -> None:
    """Write this worker's pid into ``folder``, then sleep far longer than any test waits."""
    Path(folder, f"{i}.pid").write_text(str(os.getpid()))
    time.sleep(600)
