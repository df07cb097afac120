"""Serve MathJax from the book itself when a local copy exists, load it once, and load every script once.

``scripts/setup.sh`` unpacks MathJax 3 (npm package ``mathjax@3.2.2``, checksum
verified) into ``_static/mathjax/``; without it Sphinx's default CDN copy is used.

Two console errors on every page came from loading scripts twice:

- Jupyter Book adds every ``*.js`` file under ``_static/`` to ``html_js_files``,
  so the local MathJax was loaded a second time, without ``defer``, next to the
  copy ``sphinx.ext.mathjax`` loads, and the second copy threw ("Cannot set
  property Package"). The MathJax files are taken out of ``html_js_files``: the
  math extension loads MathJax, on the pages that have math.
- sphinx-thebe and sphinx-togglebutton register their inline configuration
  scripts once per build phase, so ``const THEBE_JS_URL`` was declared twice (a
  SyntaxError). Each page's script list is de-duplicated before it is written.
"""
from __future__ import annotations

from pathlib import Path

LOCAL = Path("_static") / "mathjax" / "tex-mml-chtml.js"
MATHJAX_DIR = "mathjax/"


def _use_local(app, config):
    if (Path(app.srcdir) / LOCAL).is_file():
        config.mathjax_path = LOCAL.relative_to("_static").as_posix()
        static = list(config.html_static_path or [])
        if "_static" not in static:
            config.html_static_path = static + ["_static"]
    config.html_js_files = [js for js in (config.html_js_files or [])
                            if not _name(js).startswith(MATHJAX_DIR)]


def _name(entry) -> str:
    return (entry[0] if isinstance(entry, (tuple, list)) else entry) or ""


def _key(script) -> tuple:
    filename = getattr(script, "filename", script) or ""
    attributes = getattr(script, "attributes", {}) or {}
    return filename, attributes.get("body", "")


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen, keep = set(), []
    for script in scripts:
        key = _key(script)
        if key in seen:
            continue
        seen.add(key)
        keep.append(script)
    scripts[:] = keep


def setup(app):
    # before sphinx's convert_html_js_files (priority 800), while entries are still plain names
    app.connect("config-inited", _use_local, priority=700)
    app.connect("html-page-context", _dedupe_scripts, priority=1000)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
