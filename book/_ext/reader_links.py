"""Launch buttons (Colab, Binder) and the ``.ipynb`` download open the reader notebooks.

sphinx-book-theme builds its launch URLs from ``repository.url``, ``repository.branch``
and the page's source path (``header_buttons/launch.py``), so on its own it would
open the paired ``.ipynb`` on ``main``: the nbval reference, full of MyST syntax.
This extension runs after the theme (``html-page-context``, priority 502) and
rewrites those buttons:

- Colab and Binder open ``<reader_path>`` on the ``notebooks`` branch of the
  repository named in ``pyproject.toml`` (``scripts/project_meta.py``), which the
  Pages workflow fills with the reader notebooks and ``binder/``;
- the ``.ipynb`` download serves the reader notebook copied into the site
  (``notebooks/<reader_path>``).

A launch button of any other provider is an error: it would point somewhere this
book does not publish.
"""
from __future__ import annotations

from reader_notebooks import OUT, project_meta, reader_path

PRIORITY = 502  # after sphinx-book-theme's add_launch_buttons / add_header_buttons (501)


def launch_urls(meta, docname: str) -> dict[str, str]:
    """The launch URLs of one page, by provider name as the theme labels its buttons."""
    path = reader_path(docname)
    return {"Colab": meta.colab_url(path), "Binder": meta.binder_url(path)}


def _rewrite(app, pagename, templatename, context, doctree):
    groups = context.get("header_buttons") or []
    launch = [g for g in groups if g.get("label") == "launch-buttons"]
    if not launch:
        return
    _, meta = project_meta(app)
    urls = launch_urls(meta, pagename)
    for group in launch:
        for button in group["buttons"]:
            if button.get("type") != "link":
                continue
            if button["text"] not in urls:
                raise ValueError(f"{pagename}: launch button {button['text']!r} has no reader-notebook URL; "
                                 f"configure only {sorted(urls)} in _config.yml launch_buttons")
            button["url"] = urls[button["text"]]
    for group in groups:
        if group.get("label") == "download-buttons":
            for button in group["buttons"]:
                if button.get("label") == "download-notebook-button":
                    button["url"] = context["pathto"](f"{OUT}/{reader_path(pagename)}", 1)


def setup(app):
    app.connect("html-page-context", _rewrite, priority=PRIORITY)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
