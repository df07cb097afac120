"""The lint rules of pyproject.toml hold over the tree (`ruff check`).

`make lint` runs this and `ruff format --check` (the formatter's verdict is a make step, not a unit test:
formatting is applied to the whole tree at once with `ruff format .`)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUFF = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")


def ruff(*args: str) -> subprocess.CompletedProcess:
    assert RUFF is not None, "ruff is not installed: pip install -e '.[test]'"
    return subprocess.run([RUFF, *args, "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check():
    res = ruff("check")
    assert res.returncode == 0, res.stdout + res.stderr
