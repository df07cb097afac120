"""Every experiment's ``run()`` follows the current scale (``config.set_scale`` / ``config.use_scale``).

``run(scale=None)`` must read :func:`mmtoken.config.scale` each time it is
called: a ``run`` memoised on its arguments would return the first scale's
result after ``set_scale`` (the bug chapter 9 had). The generic test stops
each ``run()`` at the moment it reads the scale, so nothing is computed.
"""

import inspect

import numpy as np
import pytest

from mmtoken import chapters, config
from mmtoken.chapters import load_all

ALL = {name: m for name, m in load_all().items() if callable(getattr(m, "run", None))}
MODULES = {name: m for name, m in ALL.items() if not m.__name__.startswith(chapters.PACKAGE + ".")}
"""Modules of :mod:`mmtoken.experiments`: ``run(scale=None)``."""
FORM = {name: m for name, m in ALL.items() if name not in MODULES}
"""Generated chapter modules: ``run(settings)``, the published settings at the current scale from
``settings(scale=None)`` (or ``Settings.at(scale=None)``)."""


class ReadScale(Exception):
    """Raised by the patched ``config.scale``: ``run()`` read the current scale."""


def test_every_chapter_module_has_a_run():
    assert "real_reviews" in MODULES and "ch09_vit_sparsity" in FORM


@pytest.mark.parametrize("name", sorted(MODULES))
def test_run_reads_the_current_scale_on_every_call(name, monkeypatch):
    run = MODULES[name].run
    assert not hasattr(run, "cache_info"), f"{name}.run is memoised on its arguments: run() ignores set_scale"
    assert "scale" in inspect.signature(run).parameters, f"{name}.run takes no scale"

    def scale():
        raise ReadScale

    monkeypatch.setattr(config, "scale", scale)
    for _ in range(2):  # every call, not only the first
        with pytest.raises(ReadScale):
            run()


@pytest.mark.parametrize("name", sorted(FORM))
def test_chapter_settings_read_the_current_scale_on_every_call(name, monkeypatch):
    m = FORM[name]
    published = getattr(m, "settings", None) or m.Settings.at
    assert "scale" in inspect.signature(published).parameters, f"{name}: its settings take no scale"
    assert isinstance(published("quick"), m.Settings) and isinstance(published("paper"), m.Settings)

    def scale():
        raise ReadScale

    monkeypatch.setattr(config, "scale", scale)
    for _ in range(2):  # every call, not only the first
        with pytest.raises(ReadScale):
            published()


def test_vit_sparsity_settings_follow_use_scale():
    """Chapter 9's study at the current scale: ``run(settings())`` trains Fashion-MNIST runs at quick scale and
    CIFAR-10 runs at paper scale (``run`` is memoised on the settings, which differ)."""
    vs = FORM["ch09_vit_sparsity"]
    with config.use_scale("quick"):
        quick = vs.controls(vs.settings())
    with config.use_scale("paper"):
        paper = vs.controls(vs.settings())
    assert {e.dataset for g in quick.values() for e in g} == {"fashion-mnist"}
    assert {e.dataset for g in paper.values() for e in g} == {"cifar-10"}
    assert vs.settings("quick") != vs.settings("paper") and hash(vs.settings("paper")) == hash(vs.settings("paper"))


def test_real_reviews_run_follows_use_scale(monkeypatch):
    rr = MODULES["real_reviews"]
    seen = []
    monkeypatch.setattr(rr, "run_dataset", lambda name, scale: seen.append((name, scale)) or np.zeros(1))
    with config.use_scale("paper"):
        rr.run()
    with config.use_scale("quick"):
        rr.run()
    scales = [s for _, s in seen]
    assert scales and set(scales[: len(scales) // 2]) == {"paper"} and set(scales[len(scales) // 2 :]) == {"quick"}
