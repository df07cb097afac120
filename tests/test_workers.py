"""The one worker pool (mmtoken.workers): results in order, failures raised with the worker's own traceback, and no
worker outliving its parent, whether the parent is killed or interrupted (issue 42, item 3)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import toy_workers

from mmtoken import workers

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def test_results_come_back_in_the_jobs_order():
    assert workers.map_jobs(toy_workers.square, [(3,), (1,), (2,)], workers=2) == [9, 1, 4]
    assert workers.map_jobs(toy_workers.square, []) == []


def test_a_failing_job_raises_with_the_workers_traceback():
    with pytest.raises(workers.WorkerError, match=r"(?s)fail\(1,\) failed: ValueError: job 1 refuses.*in the worker"):
        workers.map_jobs(toy_workers.fail, [(1,)])


def test_a_worker_that_dies_is_an_error_not_a_silent_recompute():
    with pytest.raises(workers.WorkerError, match="a worker died"):
        workers.map_jobs(toy_workers.die, [(1,), (2,)], workers=2)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="workers"):
        workers.map_jobs(toy_workers.square, [(1,)], workers=0)
    with pytest.raises(ValueError, match="func must be a module-level function"):
        workers.map_jobs(lambda x: x, [(1,)])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has ended: it only waits for its (new) parent to reap it
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_no_worker_outlives_its_parent(tmp_path, how):
    code = (
        "import sys, toy_workers\nfrom mmtoken import workers\n"
        f"workers.map_jobs(toy_workers.sleep_forever, [({str(tmp_path)!r}, i) for i in range(3)], workers=3)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]))
    parent = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while len(list(tmp_path.glob("*.pid"))) < 3:
        assert time.time() < deadline and parent.poll() is None, "the workers did not start"
        time.sleep(0.2)
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    assert all(_alive(p) for p in pids)
    parent.send_signal(how)  # SIGINT: Ctrl-C, Jupyter's stop button; SIGKILL: a crashed kernel
    parent.wait(timeout=30)
    time.sleep(5)
    left = [p for p in pids if _alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, f"workers {left} outlived their parent ({signal.Signals(how).name})"
