"""environment.yml must mirror pyproject.toml (conda cannot run on the CI machines)."""

import re
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parent.parent
CONDA_NAMES = {"torch": "pytorch"}


def _norm(req: str) -> tuple[str, str]:
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", req)
    name, spec = m.group(1).lower().replace("_", "-"), m.group(2).replace(" ", "")
    return CONDA_NAMES.get(name, name), spec


def test_environment_mirrors_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"]]
    for extra in ("book", "test"):
        wanted += project["optional-dependencies"][extra]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = dict(
        _norm(d) for d in env["dependencies"] if isinstance(d, str) and d not in ("pip",) and not d.startswith("python")
    )
    expected = dict(_norm(r) for r in wanted)
    assert conda == expected
    pip = [d for d in env["dependencies"] if isinstance(d, dict)]
    assert pip and "-e ." in pip[0]["pip"], "environment.yml must install the package itself"
