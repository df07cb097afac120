"""scripts/stored_outputs.py: the build renders the outputs nbval checked, and counts executions."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("stored_outputs", ROOT / "scripts" / "stored_outputs.py")
so = importlib.util.module_from_spec(spec)
spec.loader.exec_module(so)


def test_seeded_cache_matches_what_the_build_reads(tmp_path):
    from jupyter_cache import get_cache
    from myst_nb.core.read import read_myst_markdown_notebook
    from myst_parser.config.main import MdParserConfig

    md = ROOT / "book" / "tour.md"
    assert md in so.chapters()
    so.seed(tmp_path / "cache")
    cache = get_cache(str(tmp_path / "cache"))
    as_built = read_myst_markdown_notebook(md.read_text(), MdParserConfig(), add_source_map=True, path=str(md))
    record = cache.match_cache_notebook(as_built)  # the key myst-nb computes from the .md
    _, merged = cache.merge_match_into_notebook(as_built)
    code = [c for c in merged.cells if c.cell_type == "code"]
    assert record is not None and any(c.outputs for c in code)


def test_count_reads_executions_from_the_build_log(tmp_path, capsys):
    log = tmp_path / "build.log"
    tour = ROOT / "book" / "tour.md"
    log.write_text(f"{ROOT / 'book/part1/01_model.md'}: Using cached notebook: ID=3 [mystnb]\n")
    assert so.count(log) == 0
    assert "book/tour.ipynb: 1 (nbval 1, build 0)" in capsys.readouterr().out
    log.write_text(f"{tour}: Executing notebook using local CWD [mystnb]\n")
    assert so.count(log) == 1
    assert "book/tour.ipynb: 2 (nbval 1, build 1)" in capsys.readouterr().out


def test_make_book_executes_only_chapters_changed_since_stored(tmp_path, monkeypatch, capsys):
    import shutil

    import pytest
    from jupyter_cache import get_cache
    from myst_nb.core.read import read_myst_markdown_notebook
    from myst_parser.config.main import MdParserConfig

    for name in ("tour.md", "tour.ipynb", "appendix/claims.md", "appendix/claims.ipynb"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / "book" / name, tmp_path / name)
    changed, same = tmp_path / "tour.md", tmp_path / "appendix" / "claims.md"
    changed.write_text(changed.read_text() + "\n```{code-cell} ipython3\nprint('new')\n```\n")
    monkeypatch.setattr(so, "chapters", lambda: [changed, same])
    with pytest.raises(SystemExit, match="hold different code"):  # make test: an error
        so.seed(tmp_path / "strict")
    assert so.seed(tmp_path / "cache", stale="execute") == 0  # make book: left to execute
    out = capsys.readouterr().out
    assert "1 notebooks cached" in out and "the build executes 1" in out and str(changed) in out
    cache = get_cache(str(tmp_path / "cache"))

    def built(md):
        return read_myst_markdown_notebook(md.read_text(), MdParserConfig(), add_source_map=True, path=str(md))

    assert cache.match_cache_notebook(built(same)) is not None
    with pytest.raises(KeyError):
        cache.match_cache_notebook(built(changed))
