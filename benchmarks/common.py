"""Timing helper shared by the benchmark scripts."""
import time


def timed(fn):
    """Wall and CPU seconds of ``fn()``."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c
