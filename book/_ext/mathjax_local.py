"""Serve MathJax from the book itself when a local copy exists, so the HTML renders offline.

``scripts/setup.sh`` unpacks MathJax 3 (npm package ``mathjax@3.2.2``, checksum
verified) into ``_static/mathjax/``; without it Sphinx's default CDN copy is used.
"""
from pathlib import Path

LOCAL = Path("_static") / "mathjax" / "tex-mml-chtml.js"


def _use_local(app, config):
    if (Path(app.srcdir) / LOCAL).is_file():
        config.mathjax_path = LOCAL.relative_to("_static").as_posix()
        static = list(config.html_static_path or [])
        if "_static" not in static:
            config.html_static_path = static + ["_static"]


def setup(app):
    app.connect("config-inited", _use_local)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
