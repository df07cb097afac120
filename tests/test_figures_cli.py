"""The figures CLI writes PNG and PDF files through the chapters' own plotting functions; bad input is one line."""

import os

import pytest

from mmtoken.__main__ import main


def test_figures_cli_writes_png_and_pdf(tmp_path, capsys):
    assert main(["figures", "--only", "fig-tour-paths", "fig-your", "--out", str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["fig-tour-paths.pdf", "fig-tour-paths.png"]
    assert all((tmp_path / n).stat().st_size > 1000 for n in written)
    assert (tmp_path / "fig-tour-paths.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_figure_entry_takes_no_argument():
    """The CLI calls each FIGURES entry with no argument; an entry that needs one would fail only there."""
    import inspect

    from mmtoken.chapters import load_all

    entries = {f: make for m in load_all().values() for f, make in getattr(m, "FIGURES", {}).items()}
    assert len(entries) >= 40
    for name, make in entries.items():
        required = [
            p
            for p in inspect.signature(make).parameters.values()
            if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        assert not required, f"{name} requires {required}"


def test_figures_cli_unknown_name(tmp_path):
    assert main(["figures", "--only", "no-such-figure", "--out", str(tmp_path)]) == 2


# ----------------------------------------------------------------------------- bad environment and arguments (issue 14, item 8)


def test_figures_out_that_cannot_be_written(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main(["figures", "--only", "fig-tour-paths", "--out", str(blocker)]) == 2
    assert main(["figures", "--only", "fig-tour-paths", "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "Traceback" not in err


def test_figures_out_read_only(tmp_path, capsys, monkeypatch):
    import tempfile

    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    real = tempfile.TemporaryFile

    def readonly(*a, dir=None, **k):  # root ignores permission bits: refuse as the OS would
        if dir is not None and os.path.samefile(dir, out):
            raise PermissionError(13, "Permission denied", str(dir))
        return real(*a, dir=dir, **k)

    if os.geteuid() == 0:
        monkeypatch.setattr(tempfile, "TemporaryFile", readonly)
    try:
        assert main(["figures", "--only", "fig-tour-paths", "--out", str(out)]) == 2
    finally:
        out.chmod(0o755)
    assert "cannot be written" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["claims", "figures"])
def test_only_without_values_is_refused(command, capsys):
    """`claims --only` with no values used to run every claim."""
    with pytest.raises(SystemExit) as exc:
        main([command, "--only"])
    assert exc.value.code == 2
    assert "--only" in capsys.readouterr().err


@pytest.mark.parametrize(
    "value, match",
    [
        ("cuda", "CUDA is not available"),
        ("cuda:7", "CUDA"),
        ("tpu", "not a device torch knows|cpu, cuda or mps"),
        ("bogus!", "not a device torch knows"),
    ],
)
def test_bad_device_is_one_clear_line(value, match, monkeypatch, capsys, tmp_path):
    import torch

    if value.startswith("cuda") and torch.cuda.is_available() and torch.cuda.device_count() > 7:
        pytest.skip("this machine has the GPU")
    monkeypatch.setenv("MMTOKEN_DEVICE", value)
    from mmtoken import config

    with pytest.raises(config.ConfigError, match=match):
        config.device()
    assert main(["claims", "--only", "core.att_svm_kkt"]) == 2
    err = capsys.readouterr().err
    assert "MMTOKEN_DEVICE" in err and "Traceback" not in err


def test_data_env_pointing_at_a_file(monkeypatch, tmp_path, capsys):
    f = tmp_path / "data.txt"
    f.write_text("x")
    monkeypatch.setenv("MMTOKEN_DATA", str(f))
    assert main(["claims", "--only", "core.att_svm_kkt"]) == 2
    assert "MMTOKEN_DATA" in capsys.readouterr().err
