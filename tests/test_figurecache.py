"""The figure cache: which figures it may keep, its key, and the figures command that copies a kept
rendering out without importing torch or matplotlib."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmtoken import config, figurecache
from mmtoken.chapters import load_all

ROOT = Path(__file__).resolve().parent.parent
PKG = "mmtoken.experiments"


def test_figure_names_read_from_source_equal_the_imported_dictionaries():
    """Two independent readings of FIGURES: the source parsed statically, and the imported module."""
    for name, module in load_all().items():
        static = figurecache.figure_names(module.__name__)
        assert static == list(getattr(module, "FIGURES", {})), name


def test_only_experiments_without_external_data_are_cacheable():
    data = {n for n, m in load_all().items() if figurecache.reads_data(m.__name__)}
    assert data == {"real_reviews", "vit_sparsity", "vit_tuning"}
    assert figurecache.key(f"{PKG}.real_reviews", "fig-reviews-logits") is None
    assert isinstance(figurecache.key("mmtoken.chapters.ch02_global", "fig-global-paths"), str)


def test_key_follows_figure_scale_and_device(monkeypatch):
    m = "mmtoken.chapters.ch02_global"
    monkeypatch.delenv("MMTOKEN_DEVICE", raising=False)
    base = figurecache.key(m, "fig-global-paths")
    assert figurecache.key(m, "fig-global-paths") == base
    assert figurecache.key(m, "fig-global-other") != base
    with config.use_scale("paper"):
        assert figurecache.key(m, "fig-global-paths") != base
    monkeypatch.setenv("MMTOKEN_DEVICE", "cpu")
    assert figurecache.key(m, "fig-global-paths") != base


def test_store_lookup_copy_and_replace(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    src = [tmp_path / "a.png", tmp_path / "a.pdf"]
    for i, p in enumerate(src):
        p.write_bytes(bytes([i + 1]) * 10)
    assert figurecache.lookup("fig-x", "0" * 64) is None
    figurecache.store("fig-x", "0" * 64, src)
    kept = figurecache.lookup("fig-x", "0" * 64)
    assert [p.read_bytes() for p in kept] == [p.read_bytes() for p in src]
    out = figurecache.copy_out(kept, tmp_path / "out")
    assert out == [f"{tmp_path / 'out'}.png", f"{tmp_path / 'out'}.pdf"]
    figurecache.store("fig-x", "1" * 64, src)  # a new rendering replaces the old one
    assert figurecache.lookup("fig-x", "0" * 64) is None
    assert len(list(figurecache.folder().iterdir())) == 3  # PNG, PDF and their checksum record
    (figurecache.lookup("fig-x", "1" * 64)[1]).write_bytes(b"")  # an emptied file is not a rendering
    assert figurecache.lookup("fig-x", "1" * 64) is None
    assert figurecache.lookup("fig-x", None) is None
    with pytest.raises(ValueError, match="expected 2 files"):
        figurecache.store("fig-x", "2" * 64, src[:1])


def _kept(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    src = [tmp_path / "a.png", tmp_path / "a.pdf"]
    for i, p in enumerate(src):
        p.write_bytes(bytes([i + 1]) * 100)
    figurecache.store("fig-x", "0" * 64, src)
    return figurecache.lookup("fig-x", "0" * 64)


@pytest.mark.parametrize("damage", ["truncate", "flip", "record", "no record"])
def test_a_damaged_kept_figure_is_never_handed_out(tmp_path, monkeypatch, damage):
    """Issue 28.6: a truncated or altered kept file (non-empty) is drawn again, not copied out."""
    kept = _kept(tmp_path, monkeypatch)
    record = kept[0].with_suffix(".json")
    if damage == "truncate":
        kept[0].write_bytes(kept[0].read_bytes()[:50])
    elif damage == "flip":
        kept[1].write_bytes(b"\x03" + kept[1].read_bytes()[1:])
    elif damage == "record":
        record.write_text("not json")
    else:
        record.unlink()
    assert figurecache.lookup("fig-x", "0" * 64) is None
    assert figurecache.copy_out(kept, tmp_path / "out") is None
    assert not (tmp_path / "out.png").exists() and not (tmp_path / "out.pdf").exists()


def test_copy_out_and_save_replace_a_symlink_never_write_through_it(tmp_path, monkeypatch):
    """Issue 28.6: a link in the output folder pointing outside it is replaced; its target is untouched."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from mmtoken import plotting

    kept = _kept(tmp_path, monkeypatch)
    outside = tmp_path / "precious.txt"
    outside.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    for ext in ("png", "pdf"):
        (out / f"f.{ext}").symlink_to(outside)
        (out / f"g.{ext}").symlink_to(outside)
    figurecache.copy_out(kept, out / "f")
    fig, _ = plt.subplots()
    plotting.save(fig, str(out / "g"))
    plt.close(fig)
    assert outside.read_text() == "keep me"
    for stem in ("f", "g"):
        for ext in ("png", "pdf"):
            assert not (out / f"{stem}.{ext}").is_symlink()
    assert (out / "f.png").read_bytes() == kept[0].read_bytes()
    assert (out / "g.png").read_bytes()[:4] == b"\x89PNG"


def test_unwritable_cache_warns_and_keeps_nothing(tmp_path, monkeypatch):
    blocker = tmp_path / "data"
    blocker.mkdir()
    (blocker / "cache").write_text("a file where the folder should be")
    monkeypatch.setenv("MMTOKEN_DATA", str(blocker))
    src = [tmp_path / "a.png", tmp_path / "a.pdf"]
    for p in src:
        p.write_bytes(b"x")
    with pytest.warns(UserWarning, match="not kept"):
        figurecache.store("fig-x", "0" * 64, src)


def _figures_process(data: Path, out: Path, *extra: str) -> dict:
    """Run the figures command in a fresh process; report what it imported and its output."""
    code = (
        "import sys, json; from mmtoken.__main__ import main; "
        f"rc = main(['figures', '--only', 'fig-tour-paths', '--out', {str(out)!r}, *{list(extra)!r}]); "
        "print(json.dumps({'rc': rc, 'torch': 'torch' in sys.modules, 'mpl': 'matplotlib' in sys.modules}))"
    )
    env = {k: v for k, v in os.environ.items() if k != "MMTOKEN_DEVICE"}
    env.update(MMTOKEN_DATA=str(data), MPLBACKEND="Agg", MMTOKEN_PROGRESS="off")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_second_call_copies_the_kept_rendering_without_torch(tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    first = _figures_process(data, out)
    assert first == {"rc": 0, "torch": True, "mpl": True}  # drawn: the experiment ran
    png = (out / "fig-tour-paths.png").read_bytes()
    (out / "fig-tour-paths.png").unlink()
    second = _figures_process(data, out)
    assert second == {"rc": 0, "torch": False, "mpl": False}
    assert (out / "fig-tour-paths.png").read_bytes() == png
    forced = _figures_process(data, out, "--force")
    assert forced == {"rc": 0, "torch": True, "mpl": True}
    assert (out / "fig-tour-paths.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
