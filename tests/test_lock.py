"""The lock file (``requirements/lock.txt``): exact versions that satisfy ``pyproject.toml``'s ranges.

``make`` (``scripts/setup.sh``) installs every package at the version the stored notebook outputs were
made with; pip users get the ranges. The two must agree: every dependency of the package and of the
extras ``make`` installs is locked, at a version its range admits, and the set-up stamp covers the lock
(so editing it re-runs the install).
"""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock.txt"
EXTRAS = ("book", "test")  # what scripts/setup.sh installs: -e '.[book,test]'


def locked() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in LOCK.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        assert m, f"lock line is not an exact pin: {line!r}"
        name = canonicalize_name(m.group(1))
        assert name not in pins, f"{name} locked twice"
        pins[name] = Version(m.group(2))
    return pins


def requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in EXTRAS:
        reqs += [Requirement(r) for r in project["optional-dependencies"][extra]]
    return reqs


def test_every_dependency_is_locked_within_its_range():
    pins = locked()
    assert len(pins) > 50  # the whole tree, not only the direct dependencies
    for req in requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} (pyproject.toml) is not in requirements/lock.txt"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"lock pins {name}=={pins[name]}, outside pyproject.toml's range {req}"
        )


def test_lock_names_the_default_torch_and_not_the_package_itself():
    pins = locked()
    assert "mmtoken" not in pins  # the package is installed editable from the checkout
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    default = re.search(r"TORCH_SPEC=\$\{TORCH_SPEC:-(torch==[^}]+)\}", setup).group(1)
    assert f"torch=={pins['torch']}" == default  # no local label (+cpu): a CUDA build of it satisfies it too


def test_setup_installs_the_lock_and_its_stamp_covers_it():
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "LOCK=requirements/lock.txt" in setup
    stamp_line = next(line for line in setup.splitlines() if line.startswith("want="))
    assert '"$LOCK"' in stamp_line and "TORCH_SPEC" in stamp_line
    install = next(line for line in setup.splitlines() if "-e '.[book,test]'" in line)
    assert '-c "$constraints"' in install
