"""Every chapter's experiment is run the same way and follows the current scale (``config.set_scale`` /
``config.use_scale``).

One convention (issue 42, item 5): a module function ``settings(scale=None)`` gives the published settings, and
``run(s: Settings | None = None)`` runs them, ``None`` meaning ``settings()`` at the current scale, and returns a
result object (not a dict). ``settings()`` must read :func:`mmtoken.config.scale` each time it is called: a memoised
result would keep the first scale's after ``set_scale`` (the bug chapter 9 had), and so must a bare ``run()``, so
its memo is keyed by the resolved settings, never by ``None``. The generic tests stop each call at the moment it
reads the scale, so nothing is computed.
"""

import collections.abc
import dataclasses
import inspect

import numpy as np
import pytest

from mmtoken import chapters, config
from mmtoken.chapters import load_all

ALL = {name: m for name, m in load_all().items() if callable(getattr(m, "run", None))}
FORM = {name: m for name, m in ALL.items() if m.__name__.startswith(chapters.PACKAGE + ".")}
"""Generated chapter modules: ``run(s=None)`` and the published settings at the current scale from
``settings(scale=None)``."""


class ReadScale(Exception):
    """Raised by the patched ``config.scale``: ``run()`` read the current scale."""


def _read_scale():
    raise ReadScale


def test_every_chapter_module_has_a_run():
    assert {"ch09_vit_sparsity", "ch12_real_reviews", "ch00_tour", "app_saturation"} <= set(FORM) and FORM == ALL


@pytest.mark.parametrize("name", sorted(FORM))
def test_chapter_settings_read_the_current_scale_on_every_call(name, monkeypatch):
    m = FORM[name]
    assert callable(getattr(m, "settings", None)), f"{name}: no settings(scale=None) function"
    assert "scale" in inspect.signature(m.settings).parameters, f"{name}: its settings take no scale"
    assert isinstance(m.settings("quick"), m.Settings) and isinstance(m.settings("paper"), m.Settings)
    monkeypatch.setattr(config, "scale", _read_scale)
    for _ in range(2):  # every call, not only the first
        with pytest.raises(ReadScale):
            m.settings()


@pytest.mark.parametrize("name", sorted(FORM))
def test_run_takes_optional_settings_and_returns_a_result_object(name):
    m = FORM[name]
    sig = inspect.signature(m.run, follow_wrapped=False)  # what the reader calls, not a memo's inner function
    assert [(p.name, p.default) for p in sig.parameters.values()] == [("s", None)], (
        f"{name}: run must be run(s: Settings | None = None), got run{sig}"
    )
    assert sig.parameters["s"].annotation == (m.Settings | None), f"{name}: run's s is not a Settings | None"
    result = sig.return_annotation
    assert inspect.isclass(result) and not issubclass(result, collections.abc.Mapping), (
        f"{name}: run must return a result object, got {result!r}"
    )
    assert dataclasses.is_dataclass(result) or issubclass(result, tuple), f"{name}: {result!r} is no result object"


@pytest.mark.parametrize("name", sorted(FORM))
def test_a_bare_run_reads_the_current_scale_on_every_call(name, monkeypatch):
    """``run()`` asks :func:`mmtoken.config.scale` before anything is computed or looked up in a memo: a bare
    ``run()`` after ``set_scale("paper")`` runs the paper settings, never a memo of an earlier scale's."""
    m = FORM[name]
    monkeypatch.setattr(config, "scale", _read_scale)
    for _ in range(2):
        with pytest.raises(ReadScale):
            m.run()


def test_a_bare_run_is_the_memo_of_the_published_settings():
    """The memo is keyed by the resolved settings: ``run()`` and ``run(settings())`` are one computation."""
    tour = FORM["ch00_tour"]
    with config.use_scale("quick"):
        assert tour.run() is tour.run(tour.settings()) is tour.run(tour.Settings())


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
