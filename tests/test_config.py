"""config: the scale switch (set_scale, use_scale, pick, reset) and the environment it reads."""

import pytest

from mmtoken import config


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv("MMTOKEN_SCALE", raising=False)
    config.reset()
    yield
    config.reset()


def test_default_env_and_set_scale_order(monkeypatch):
    assert config.scale() == "quick"
    monkeypatch.setenv("MMTOKEN_SCALE", "paper")
    assert config.scale() == "paper"  # the environment variable
    config.set_scale("quick")
    assert config.scale() == "quick"  # set_scale overrides it
    config.reset()
    assert config.scale() == "paper"  # reset: back to the environment


def test_use_scale_restores_even_after_an_error():
    config.set_scale("quick")
    with pytest.raises(RuntimeError), config.use_scale("paper"):
        assert config.scale() == "paper"
        assert config.pick(quick=1, paper=2) == 2
        raise RuntimeError
    assert config.scale() == "quick" and config.pick(quick=1, paper=2) == 1
    with config.use_scale("paper"), config.use_scale("quick"):
        assert config.scale() == "quick"  # nested: the inner one wins
    assert config.scale() == "quick"


def test_pick_with_an_explicit_scale_ignores_the_current_one():
    config.set_scale("paper")
    assert config.pick(quick="q", paper="p", which="quick") == "q"


def test_bad_scales_are_named(monkeypatch):
    with pytest.raises(config.ConfigError, match="'huge'"):
        config.set_scale("huge")
    with pytest.raises(config.ConfigError, match="'huge'"), config.use_scale("huge"):
        pass
    assert config.scale() == "quick"  # a refused value changes nothing
    monkeypatch.setenv("MMTOKEN_SCALE", "Paper")
    with pytest.raises(config.ConfigError, match="MMTOKEN_SCALE='Paper'"):
        config.scale()


def test_deterministic_pins_threads_and_kernels_then_restores_them():
    import torch

    before = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled())
    with config.deterministic(1):
        assert torch.get_num_threads() == 1
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        x = torch.randn(64, 64, dtype=torch.float32, generator=torch.Generator().manual_seed(0))
        first = (x @ x).sum()
        assert torch.equal(first, (x @ x).sum())
    assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == before
    with config.deterministic(None):
        assert torch.get_num_threads() == before[0]
    with pytest.raises(ValueError, match="threads"):
        with config.deterministic(0):
            pass
