"""Every chapter's published settings follow the current scale (``config.set_scale`` / ``config.use_scale``).

``settings(scale=None)`` must read :func:`mmtoken.config.scale` each time it is
called: a memoised result would keep the first scale's after ``set_scale`` (the
bug chapter 9 had). The generic test stops each call at the moment it reads the
scale, so nothing is computed; ``run`` itself is memoised on the settings, which
differ between the scales.
"""

import inspect

import numpy as np
import pytest

from mmtoken import chapters, config
from mmtoken.chapters import load_all

ALL = {name: m for name, m in load_all().items() if callable(getattr(m, "run", None))}
FORM = {name: m for name, m in ALL.items() if m.__name__.startswith(chapters.PACKAGE + ".")}
"""Generated chapter modules: ``run(settings)``, the published settings at the current scale from
``settings(scale=None)`` (or ``Settings.at(scale=None)``)."""


class ReadScale(Exception):
    """Raised by the patched ``config.scale``: ``run()`` read the current scale."""


def test_every_chapter_module_has_a_run():
    assert {"ch09_vit_sparsity", "ch12_real_reviews"} <= set(FORM) and FORM == ALL  # no experiments module left


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


def test_real_reviews_settings_follow_use_scale(monkeypatch):
    """Chapter 12 at the current scale: ``run(settings())`` runs each data set with the setup of that scale (the
    full vocabulary and twice the dimension at paper scale)."""
    rr = FORM["ch12_real_reviews"]
    seen = []
    monkeypatch.setattr(rr, "run_dataset", lambda setup, seeds: seen.append(setup) or np.zeros(1))
    with config.use_scale("paper"):
        rr.run(rr.settings())
    with config.use_scale("quick"):
        rr.run(rr.settings())
    half = len(seen) // 2
    assert seen and seen[:half] == [rr.settings("paper").setup(s.dataset) for s in seen[:half]]
    assert seen[half:] == [rr.Settings().setup(s.dataset) for s in seen[half:]]
    assert {s.min_count for s in seen[:half]} == {1} and seen[0] != seen[half]
