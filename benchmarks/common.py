"""Timing helper shared by the benchmark scripts."""
import time


def timed(fn):
    """Wall and CPU seconds of ``fn()``."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def print_timings(rows, scale: str, threads: int) -> None:
    """Run and time each ``(name, fn)`` of ``rows``; print wall and CPU seconds as a table."""
    width = max(len(name) for name, _ in rows)
    print(f"scale: {scale}, torch threads: {threads}")
    print(f"{'experiment':{width}s} {'wall s':>8s} {'cpu s':>8s}")
    for name, fn in rows:
        wall, cpu = timed(fn)
        print(f"{name:{width}s} {wall:8.2f} {cpu:8.2f}")
