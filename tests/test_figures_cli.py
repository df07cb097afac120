"""The figures CLI writes PNG and PDF files through the chapters' own plotting functions."""
from mmtoken.__main__ import main


def test_figures_cli_writes_png_and_pdf(tmp_path, capsys):
    assert main(["figures", "--only", "fig-tour-paths", "fig-your", "--out", str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["fig-tour-paths.pdf", "fig-tour-paths.png"]
    assert all((tmp_path / n).stat().st_size > 1000 for n in written)
    assert (tmp_path / "fig-tour-paths.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_figures_cli_unknown_name(tmp_path):
    assert main(["figures", "--only", "no-such-figure", "--out", str(tmp_path)]) == 2
