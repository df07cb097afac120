"""Progress bars off while Jupyter Book executes the chapters (``make book``, ``jupyter-book build``).

The kernels that execute the notebooks inherit the build's environment; an executed output with a
progress bar (a widget, or tqdm's text on stderr) would land in the HTML. Set here rather than only
in the Makefile, so that a build started by hand is the same. A person running a notebook in Jupyter
keeps ``MMTOKEN_PROGRESS``'s default ``auto`` (a bar for long loops).
"""

from __future__ import annotations

import os


def setup(app):
    os.environ["MMTOKEN_PROGRESS"] = "off"
    return {"parallel_read_safe": True, "parallel_write_safe": True}
