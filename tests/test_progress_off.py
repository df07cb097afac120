"""Progress bars: off under nbval and in builds by the repository's own configuration, on for a person in Jupyter.

The README's own command (``pytest --nbval book/part1/02_global.ipynb ...``) runs outside ``make``, which
used to be the only place setting ``MMTOKEN_PROGRESS=off``; the root ``conftest.py`` and the Sphinx
extension ``book/_ext/progress_off.py`` now set it. The probe notebook prints what its kernel sees:
its stored output is ``off False``; in a kernel left at the default it would be ``None True``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from mmtoken import config

ROOT = Path(__file__).resolve().parents[1]
PROBE = "tests/fixtures/progress/probe.ipynb"


def _nbval(*args: str, progress: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MMTOKEN_PROGRESS"}
    if progress is not None:
        env["MMTOKEN_PROGRESS"] = progress
    env.setdefault("PYTHONPATH", str(ROOT))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--nbval", *args, PROBE]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_nbval_outside_make_runs_kernels_without_progress_bars():
    run = _nbval(progress=None)  # as a reader runs the README's command: no variable set
    assert run.returncode == 0, run.stdout + run.stderr
    forced = _nbval(progress="on")  # the stored outputs were made without bars: nbval forces them off
    assert forced.returncode == 0, forced.stdout + forced.stderr
    bare = _nbval("--noconftest", progress=None)  # the counterfactual: without the conftest, the kernel would draw
    assert bare.returncode != 0 and "None True" in bare.stdout, bare.stdout


def test_builds_turn_progress_off(monkeypatch):
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    try:
        import progress_off
    finally:
        sys.path.remove(str(ROOT / "book" / "_ext"))
    monkeypatch.setenv("MMTOKEN_PROGRESS", "auto")
    meta = progress_off.setup(types.SimpleNamespace())
    assert os.environ["MMTOKEN_PROGRESS"] == "off" and meta["parallel_read_safe"]
    text = (ROOT / "_config.yml").read_text()
    assert "progress_off: book/_ext" in text  # the build loads it


@pytest.mark.parametrize("work, shown", [(10**6, True), (10, False)])
def test_a_person_in_jupyter_sees_a_bar_for_long_loops(monkeypatch, work, shown):
    class ZMQInteractiveShell:  # the class name IPython's kernel shell has
        pass

    fake = types.SimpleNamespace(get_ipython=lambda: ZMQInteractiveShell())
    monkeypatch.setitem(sys.modules, "IPython", fake)
    monkeypatch.delenv("MMTOKEN_PROGRESS", raising=False)
    config.reset()
    assert config.progress_enabled(work) is shown
