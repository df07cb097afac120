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


def machine_meta() -> dict:
    """When and on what the numbers were measured, written next to them for the benchmarks page."""
    import datetime
    import os
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }
    try:
        import torch

        meta.update(torch=torch.__version__, threads=torch.get_num_threads())
    except ImportError:
        pass
    return meta
