"""pytest configuration for the whole repository (the chapters' nbval runs and the unit tests).

Progress bars are off under pytest, whichever command starts it (``make test``, or the README's
``pytest --nbval book/part1/02_global.ipynb ...`` run by hand): a stored notebook output holds no
bar, and a bar drawn while nbval executes a chapter (a widget, or tqdm's text on stderr) would fail
the comparison. nbval's kernels inherit this process's environment, so setting the variable here
reaches them. Under ``--nbval`` it is forced ``off`` (the stored outputs were made without bars);
otherwise an explicit ``MMTOKEN_PROGRESS`` is kept. A person in Jupyter (no pytest) keeps the
default ``auto``: a bar for long loops.
"""

from __future__ import annotations

import os


def pytest_configure(config) -> None:
    nbval = bool(getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False))
    if nbval:
        os.environ["MMTOKEN_PROGRESS"] = "off"
    else:
        os.environ.setdefault("MMTOKEN_PROGRESS", "off")
