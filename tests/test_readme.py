"""The README is the PyPI page: its library example runs, and every link and image is absolute.

The example is the first ```python block after the heading "The package on its own"; it
is executed as a reader would paste it, and what it prints must be what the README says.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
sys.path.insert(0, str(ROOT / "scripts"))
import project_meta as pm  # noqa: E402


def _example() -> tuple[str, str]:
    section = README.split("## The package on its own", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    said = re.search(r"This prints `([^`]+)`", section).group(1)
    return code, said


def test_readme_example_is_short_and_prints_what_it_says():
    code, said = _example()
    lines = [line for line in code.splitlines() if line.strip()]
    assert len(lines) <= 16, f"the README example has {len(lines)} lines; keep it to about 15"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})
    assert out.getvalue().strip() == said


def test_readme_links_and_images_are_absolute():
    meta = pm.load(ROOT)
    body = re.sub(r"```.*?```", "", README, flags=re.S)
    targets = [m.group("target") for m in pm.MD_LINK.finditer(body)]
    assert targets, "no links found: the pattern no longer matches the README"
    relative = [t for t in targets if not re.match(r"^(https?:|mailto:|#)", t)]
    assert not relative, f"relative links break on PyPI: {relative}"
    images = [m.group("target") for m in pm.MD_LINK.finditer(body) if m.group("bang")]
    org, repo = meta.org_repo
    for url in images:
        assert url.startswith(f"https://raw.githubusercontent.com/{org}/{repo}/{meta.tag}/"), url
        assert (ROOT / url.split(f"/{meta.tag}/", 1)[1]).is_file(), f"{url} names no file of the repository"


def test_quick_start_puts_the_pip_reader_first():
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    pip, make = section.find("pip install mmtoken"), section.find("make book")
    assert 0 <= pip < make, "the quick start says the pip user's commands first, then the clone's"
