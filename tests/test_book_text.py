"""The book's sources hold no control characters: a LaTeX command written through an unescaped Python string
(``"\\rangle"``, ``"\\top"``, ``"\\beta"``, ``"\\frac"``) turns into a carriage return, a tab, a backspace or a form
feed and renders as ``angle``, ``op``, ``eta``, ``rac`` (chapter 14 carried two for a while)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(
    p for p in (ROOT / "book").rglob("*") if p.suffix in (".md", ".ipynb") and ".ipynb_checkpoints" not in p.parts
)
CONTROL = {"\r": "carriage return", "\t": "tab", "\b": "backspace", "\f": "form feed", "\v": "vertical tab"}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_control_characters(path):
    import json

    text = path.read_bytes().decode("utf-8")
    if path.suffix == ".ipynb":  # the JSON escapes them: look at the cells' text
        cells = json.loads(text)["cells"]
        text = "".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in cells)
    found = [
        f"{name} at line {text.count(chr(10), 0, text.index(ch)) + 1}" for ch, name in CONTROL.items() if ch in text
    ]
    assert not found, f"{path.relative_to(ROOT)}: {', '.join(found)} (an unescaped LaTeX command?)"
