"""pytest configuration for the whole repository (the chapters' nbval runs and the unit tests).

Progress bars are off under pytest, whichever command starts it (``make test``, or the README's
``pytest --nbval book/part1/02_global.ipynb ...`` run by hand): a stored notebook output holds no
bar, and a bar drawn while nbval executes a chapter (a widget, or tqdm's text on stderr) would fail
the comparison. nbval's kernels inherit this process's environment, so setting the variable here
reaches them. Under ``--nbval`` it is forced ``off`` (the stored outputs were made without bars);
otherwise an explicit ``MMTOKEN_PROGRESS`` is kept. A person in Jupyter (no pytest) keeps the
default ``auto``: a bar for long loops.

A cell tagged ``nbval-tolerance`` (results of training that move with the CPU) is compared by
:func:`mmtoken.book.tolerance.snap`: its text exactly, its numbers within the tolerance stated there.
nbval has no hook for this, so its comparison method is wrapped here, for tagged cells only.
"""

from __future__ import annotations

import os


def pytest_configure(config) -> None:
    nbval = bool(getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False))
    if nbval:
        os.environ["MMTOKEN_PROGRESS"] = "off"
        _compare_with_tolerance()
    else:
        os.environ.setdefault("MMTOKEN_PROGRESS", "off")


def _compare_with_tolerance() -> None:
    from nbval.plugin import IPyNbCell

    from mmtoken.book import tolerance

    exact = IPyNbCell.compare_outputs
    if getattr(exact, "with_tolerance", False):  # configured twice (xdist workers share nothing, but be safe)
        return

    def compare_outputs(self, test, ref, skip_compare=None):
        if tolerance.TAG in self.cell.metadata.get("tags", []):
            test = tolerance.snap_outputs(ref, test)
        return exact(self, test, ref, skip_compare)

    compare_outputs.with_tolerance = True
    IPyNbCell.compare_outputs = compare_outputs


# --------------------------------------------------------------------------- where the time goes
# Seconds per file (a chapter notebook under nbval, a test module otherwise), summed over its items' setup, call
# and teardown, printed at the end of every run: CI's log then says where a cold `make test` spends its time
# (CONTRIBUTING, "Where the time of a cold make test goes"). Under xdist the workers' reports reach this hook in
# the controlling process, so the sums are per file whatever the number of workers.
_SECONDS_PER_FILE: dict[str, float] = {}


def pytest_runtest_logreport(report) -> None:
    path = report.nodeid.split("::", 1)[0]
    _SECONDS_PER_FILE[path] = _SECONDS_PER_FILE.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter) -> None:
    if len(_SECONDS_PER_FILE) < 2:
        return
    rows = sorted(_SECONDS_PER_FILE.items(), key=lambda kv: -kv[1])
    terminalreporter.section("seconds per file (the 25 slowest)")
    for path, seconds in rows[:25]:
        terminalreporter.write_line(f"{seconds:9.1f}  {path}")
    terminalreporter.write_line(f"{sum(_SECONDS_PER_FILE.values()):9.1f}  all {len(rows)} files (summed over workers)")
