"""One worker pool: long computations in fresh interpreters, which end with the process that started them.

Chapters 9 and 12 train several runs at once on a CPU (each single-threaded, so its numbers do not depend on the
core count). :func:`map_jobs` runs ``func(*args)`` for each job in a process of its own, started with the *spawn*
method (a fresh interpreter: no state of a notebook kernel is copied, and memory does not pile up from job to job),
at most ``workers`` at a time, and returns the results in the jobs' order. Each job answers through a pipe of its
own and the processes share no lock, so stopping one can never block another.

A worker never outlives its parent:

- the parent is killed (``SIGKILL``, a crashed kernel): Linux sends each worker ``SIGKILL`` at once
  (``PR_SET_PDEATHSIG``, set when the worker starts); elsewhere a watchdog thread in each worker sees the parent
  gone within :data:`WATCH_SECONDS` and ends the worker;
- the parent is interrupted (``SIGINT``: Ctrl-C, Jupyter's stop button) or a job fails: it kills every running
  worker, waits for them, and re-raises.

A job that fails raises :class:`WorkerError` in the parent, with the job and the worker's own traceback; a worker
that dies (killed for memory) raises it too. Nothing is recomputed behind the caller's back.
"""

from __future__ import annotations

__all__ = ["WATCH_SECONDS", "WorkerError", "cores", "default_workers", "map_jobs"]

import ctypes
import multiprocessing
import multiprocessing.connection
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence

WATCH_SECONDS = 0.5
"""How often a worker's watchdog looks at its parent."""


class WorkerError(RuntimeError):
    """A job failed in a worker process (its traceback is in the message), or a worker died."""


def cores() -> int:
    """The cores this process may run on (its CPU affinity where the system tells it, else every core)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_workers() -> int:
    """One more worker than the cores (single-threaded runs that wait on memory cost little)."""
    return cores() + 1


def _die_with_parent(parent: int) -> None:
    """In a worker: ask the kernel to kill it with its parent (Linux), and start the watchdog that ends it when the
    parent is gone (any POSIX system)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, 9)  # PR_SET_PDEATHSIG = 1, SIGKILL = 9
        except (OSError, AttributeError):
            pass  # the watchdog below still ends it
    if os.getppid() != parent:  # the parent died before the line above ran
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="mmtoken-watchdog", daemon=True).start()


def _work(func: Callable, args: tuple, answer, parent: int) -> None:
    """A worker's whole life: one job, its result or its traceback sent back through ``answer``."""
    _die_with_parent(parent)
    try:
        message = ("ok", func(*args))
    except BaseException as exc:  # the traceback as text: it is printed in the parent
        message = ("error", f"{type(exc).__name__}: {exc}\n\nin the worker:\n{traceback.format_exc()}")
    answer.send(message)
    answer.close()


def map_jobs(func: Callable, jobs: Sequence[tuple], workers: int | None = None) -> list:
    """``[func(*args) for args in jobs]``, computed in fresh worker processes, ``workers`` at a time.

    Parameters
    ----------
    func : a module-level function of an importable module (the workers import it by name).
    jobs : the arguments of each call (picklable); what ``func`` returns must be picklable too.
    workers : processes at a time (default :func:`default_workers`).

    Raises
    ------
    WorkerError : a job raised (the first failure, with the worker's traceback) or a worker died; the other
        workers are stopped first.
    """
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be None or a positive integer, got {workers!r}")
    if getattr(func, "__module__", "__main__") == "__main__" or "<locals>" in getattr(func, "__qualname__", "<"):
        raise ValueError(f"func must be a module-level function of an importable module, got {func!r}")
    jobs = [tuple(j) for j in jobs]
    ctx = multiprocessing.get_context("spawn")
    todo = list(enumerate(jobs))
    running: dict[int, tuple] = {}  # job index -> (process, the end of its pipe we read)
    out: list = [None] * len(jobs)
    limit = workers or default_workers()
    try:
        while todo or running:
            while todo and len(running) < limit:
                i, args = todo.pop(0)
                receive, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_work, args=(func, args, send, os.getpid()), daemon=True)
                proc.start()
                send.close()  # the worker holds the other end: EOF here once it is gone
                running[i] = (proc, receive)
            ready = multiprocessing.connection.wait([r for _, r in running.values()])
            for i in [i for i, (_, r) in running.items() if r in ready]:
                proc, receive = running.pop(i)
                try:
                    status, value = receive.recv()
                except EOFError:  # it ended without an answer: killed
                    proc.join()
                    raise WorkerError(
                        f"a worker died while computing {func.__qualname__}{jobs[i]!r} (exit code {proc.exitcode})"
                    ) from None
                finally:
                    receive.close()
                proc.join()
                if status == "error":
                    raise WorkerError(f"{func.__qualname__}{jobs[i]!r} failed: {value}")
                out[i] = value
        return out
    except BaseException:  # a failure, or an interrupt (KeyboardInterrupt): every worker ends now
        for proc, _ in running.values():
            proc.kill()
        for proc, receive in running.values():
            proc.join()
            receive.close()
        raise
