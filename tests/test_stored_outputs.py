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
