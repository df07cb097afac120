"""The book as a pip user meets it: the built wheel, a fresh venv, reader notebooks in an empty folder.

What a Colab, Binder or laptop reader runs is not this checkout: it is the wheel, installed
with its declared dependencies, and the reader notebooks, each opened alone. This test
builds the wheel (``python -m build --wheel --no-isolation``), installs it with pip into a
fresh venv that has **no editable checkout, no ``data/``, no myst-nb, no ``PYTHONPATH``**,
and executes reader notebooks there from an empty folder with an empty ``MMTOKEN_DATA``;
their text outputs (stdout and ``text/plain``, sanitised with ``tests/nbval_sanitize.cfg``
as nbval does; cells nbval ignores are ignored) must equal the stored outputs of the
paired ``.ipynb`` (what the site shows). Then one data chapter runs with no network and
must stop at its data cell, quickly, with the message that says how to get the data.

Offline, the venv is assembled from this environment: the wheel's ``Requires-Dist``
closure (plus ``ipykernel``, which a notebook kernel needs) is linked in, distribution
by distribution, and ``pip check`` confirms that it satisfies the wheel's metadata; no
package index is used. On a clean runner (the ``wheel`` workflow) ``MMTOKEN_WHEEL_PYTHON``
names a venv where ``pip install dist/*.whl`` resolved everything from PyPI instead.

Reader notebooks come from the last HTML build (``_build/html/notebooks``, which ``make
test`` writes before the unit tests) or, without one, are converted here with the same
:class:`reader_notebooks.Converter` (cross-references as plain links: the code cells,
which are what runs, are the same).
"""

from __future__ import annotations

import configparser
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
sys.path.insert(0, str(ROOT / "scripts"))
import project_meta as pm  # noqa: E402
import reader_notebooks as rn  # noqa: E402

from mmtoken.book import html_tables, pages, tolerance  # noqa: E402

META = pm.load(ROOT)
BUILT = ROOT / "_build" / "html" / rn.OUT
# the reader notebooks executed from the wheel (issue 27, item 9): fast theory chapters of each part (Part III's is
# chapter 15, about 30 s from an empty data folder; chapter 13 took 174 s of the unit step's 793 s on 2026-12-03)
CHAPTERS = [
    "book/tour",
    "book/part1/02_global",
    "book/part2/10_one_step",
    "book/part3/15_multi_token",
    "book/appendix/your_instance",
]
OFFLINE_CHAPTER = "book/part2/12_real_reviews"  # its data cell needs IMDB: offline it must say so
OFFLINE_MESSAGE = "IMDB is not available"
RUNNER_PACKAGES = ["ipykernel"]  # what a notebook kernel needs besides the package
pytestmark = pytest.mark.slow


# --------------------------------------------------------------------------- the venv


def requirement_closure(roots: list[str]) -> list[metadata.Distribution]:
    """The installed distributions that ``roots`` (requirement strings) need, transitively (no extras)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [Requirement(r) for r in roots]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(req.name)
        if key in seen:
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            raise AssertionError(f"{req} is needed by the wheel but not installed in this environment") from None
        seen[key] = dist
        todo.extend(Requirement(r) for r in dist.requires or [])
    return list(seen.values())


def _link_distribution(dist: metadata.Distribution, site: Path) -> None:
    base = Path(dist.locate_file(""))
    for top in sorted({Path(f).parts[0] for f in dist.files or []}):
        if top in ("..", "__pycache__") or top.endswith(".pth"):
            continue
        target = site / top
        if not target.exists() and (base / top).exists():
            target.symlink_to(base / top)


def wheel_venv(tmp: Path) -> tuple[Path, float]:
    """Build the wheel, make a fresh venv, install the wheel there; return its python and the seconds spent."""
    t0 = time.perf_counter()
    dist_dir = tmp / "dist"
    res = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist_dir), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    wheel = next(dist_dir.glob("mmtoken-*.whl"))
    venv = tmp / "venv"
    base_python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    with zipfile.ZipFile(wheel) as z:
        meta = z.read(f"mmtoken-{META.version}.dist-info/METADATA").decode()
    declared = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    for dist in requirement_closure(declared + RUNNER_PACKAGES):
        _link_distribution(dist, site)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    res = subprocess.run(
        [*pip, "install", "-q", "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True, env=env
    )
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run([*pip, "check"], capture_output=True, text=True, env=env)
    assert res.returncode == 0, "the wheel's dependencies are not satisfied:\n" + res.stdout + res.stderr
    return python, time.perf_counter() - t0


@pytest.fixture(scope="module")
def wheel_python(tmp_path_factory) -> Path:
    given = os.environ.get("MMTOKEN_WHEEL_PYTHON")
    if given:  # a clean runner's venv (the wheel workflow): pip resolved the wheel's dependencies
        return Path(given)
    python, seconds = wheel_venv(tmp_path_factory.mktemp("wheel"))
    print(f"wheel venv: built, installed and checked in {seconds:.1f} s")
    return python


def reader_env(data: Path, offline: bool = False) -> dict[str, str]:
    """The environment of a reader's kernel: no checkout on the path, an empty data folder."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MMTOKEN_FASHION_MNIST_DIR")}
    env.update(MMTOKEN_DATA=str(data), MMTOKEN_PROGRESS="off", PYTHONNOUSERSITE="1", PYDEVD_DISABLE_FILE_VALIDATION="1")
    if offline:  # what no network looks like to urllib, pip and npm, without waiting for timeouts
        dead = "http://127.0.0.1:9"
        env.update(
            http_proxy=dead,
            https_proxy=dead,
            HTTP_PROXY=dead,
            HTTPS_PROXY=dead,
            no_proxy="",
            PIP_NO_INDEX="1",
            npm_config_registry=dead + "/",
            npm_config_cache=str(data / "npm-cache"),
            npm_config_offline="false",
        )
    return env


def test_the_venv_is_the_wheel_alone(wheel_python, tmp_path):
    probe = (
        "import importlib.util, json, pathlib, mmtoken; from mmtoken.book import html_tables, pages; "
        "print(json.dumps({'file': mmtoken.__file__, 'version': mmtoken.__version__, "
        "'checkout': (pathlib.Path(mmtoken.__file__).parent.parent / 'pyproject.toml').is_file(), "
        "'myst_nb': importlib.util.find_spec('myst_nb') is not None, "
        "'typed': (pathlib.Path(mmtoken.__file__).parent / 'py.typed').is_file(), "
        "'yaml': importlib.util.find_spec('yaml') is not None, "
        "'benchmarks': sorted(html_tables.benchmark_tables(html_tables.benchmark_results())), "
        "'pages': len(pages.book_order()), 'places': len(pages.statement_places())}))"
    )
    res = subprocess.run(
        [wheel_python, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=reader_env(tmp_path)
    )
    assert res.returncode == 0, res.stderr
    found = json.loads(res.stdout)
    assert "site-packages" in found["file"] and not found["file"].startswith(str(ROOT)), found
    assert found["version"] == META.version and found["typed"]
    assert not found["checkout"] and not found["myst_nb"], found
    # what the benchmarks and claims appendices read from the repository ships with the package
    assert found["benchmarks"] == sorted(html_tables.benchmark_tables(ROOT / "benchmarks" / "results"))
    assert found["pages"] == len(pages.book_order(ROOT)) and found["places"] == len(pages.statement_places(ROOT))


# --------------------------------------------------------------------------- the notebooks


def reader_notebook(doc: str) -> nbformat.NotebookNode:
    """The reader notebook of ``doc``: the built one, else converted here (plain links)."""
    built = BUILT / rn.reader_path(doc)
    if built.is_file():
        return nbformat.read(built, as_version=4)
    from myst_nb.core.read import read_myst_markdown_notebook

    src = ROOT / f"{doc}.md"
    conv = rn.Converter(
        resolve=lambda role, target, text: f"[{text or target}]({META.site})",
        number=lambda kind, label: label,  # no build, no numbers: the label stands in (markdown only)
        read_include=lambda p: (src.parent / p).read_text(),
        install_source=pm.install_cell(META, pm.chapter_extras(src.read_text(), META)),
    )
    return conv.convert(read_myst_markdown_notebook(src.read_text()), lambda s: pm.is_install_cell(s, META))


def _sanitizers() -> list[tuple[re.Pattern, str]]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "tests" / "nbval_sanitize.cfg")
    return [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()]


SANITIZE = _sanitizers()


def text_output(cell) -> str:
    """stdout and ``text/plain`` of a code cell, sanitised as nbval does."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream" and out.name == "stdout":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data") and "text/plain" in out.get("data", {}):
            if "image/png" in out["data"] or "image/svg+xml" in out["data"]:
                continue  # a figure's repr: nbval does not compare figures
            parts.append(out["data"]["text/plain"])
    text = "".join(parts)
    for rx, repl in SANITIZE:
        text = rx.sub(repl, text)
    return text


def _code(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code" and not pm.is_install_cell(c.source, META)]


def kernel_manager(tmp: Path, python: Path):
    """A kernel manager whose one kernel, ``wheel``, runs the wheel venv's python."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec = tmp / "kernels" / "wheel"
    spec.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "mmtoken wheel", "language": "python"}))
    specs = KernelSpecManager(kernel_dirs=[str(tmp / "kernels")], ensure_native_kernel=False)
    return KernelManager(kernel_name="wheel", kernel_spec_manager=specs)


def execute(nb, python: Path, tmp: Path, offline: bool = False, timeout: int = 900) -> float:
    """Execute ``nb`` in the wheel venv's kernel, from an empty folder; return the wall seconds."""
    from nbclient import NotebookClient

    folder, data = tmp / "reader", tmp / "data"
    folder.mkdir()
    data.mkdir()
    client = NotebookClient(
        nb, km=kernel_manager(tmp, python), timeout=timeout, resources={"metadata": {"path": str(folder)}}
    )
    t0 = time.perf_counter()
    client.execute(env=reader_env(data, offline), cwd=str(folder))
    return time.perf_counter() - t0


@pytest.mark.parametrize("doc", CHAPTERS)
def test_reader_notebook_from_the_wheel_matches_the_site(doc, wheel_python, tmp_path):
    reader = reader_notebook(doc)
    stored = nbformat.read(ROOT / f"{doc}.ipynb", as_version=4)
    ran, ref = _code(reader), _code(stored)
    assert [c.source for c in ran] == [c.source for c in ref], f"{doc}: reader and stored code cells differ"
    seconds = execute(reader, wheel_python, tmp_path)
    print(f"{doc}: executed from the wheel in {seconds:.1f} s wall")
    (ROOT / "_build").mkdir(exist_ok=True)
    with open(ROOT / "_build" / "wheel_times.txt", "a") as fh:
        fh.write(f"{doc}\t{seconds:.1f}\n")
    errors = [o for c in ran for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    differ = []
    for i, (a, b) in enumerate(zip(ran, ref)):
        tags = set(b.metadata.get("tags", []))
        if tags & {"nbval-ignore-output", "nbval-skip"}:
            continue
        fresh, site = text_output(a), text_output(b)
        if tolerance.TAG in tags:  # trained results: compared as nbval compares them (the root conftest.py)
            fresh = tolerance.snap(site, fresh)
        if fresh != site:
            differ.append(f"code cell {i}:\n--- site\n{site}\n--- wheel\n{fresh}")
    assert not differ, f"{doc}: outputs from the wheel differ from the stored ones\n" + "\n".join(differ)[:6000]


def test_data_chapter_offline_stops_at_its_data_with_the_reason(wheel_python, tmp_path):
    from nbclient.exceptions import CellExecutionError

    reader = reader_notebook(OFFLINE_CHAPTER)
    t0 = time.perf_counter()
    with pytest.raises(CellExecutionError) as err:
        execute(reader, wheel_python, tmp_path, offline=True)
    seconds = time.perf_counter() - t0
    print(f"{OFFLINE_CHAPTER} offline: stopped after {seconds:.1f} s")
    assert OFFLINE_MESSAGE in str(err.value), str(err.value)[-3000:]
    assert "text.load" in str(err.value), "it stopped at its data cell, not earlier"
    assert seconds < 120, f"offline, the data chapter took {seconds:.0f} s to say so"
