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
