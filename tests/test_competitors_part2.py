"""Chapters 9-12's claims reject their competitors: each claim's own check, applied to the nearest wrong answer, fails.

The checks are pure functions of a run's histories; here they are applied to
histories built from the closed forms they test (so a check that passed
everything, or nothing, fails here), and, in the slow tests, to the real runs
(their verdicts as the chapters recorded them under nbval, evaluated when absent).
"""

from types import SimpleNamespace

import numpy as np
import pytest

from mmtoken.book import competitors, ledger
from mmtoken.chapters import ch11_cls_margin as cm


def _main_run(power: float = 2.0, c: float = cm.OFFSET, freeze_at: float | None = None):
    """A main run whose direction follows ``1 - corr = c^2 / (2 r^power)`` exactly and whose margin gap falls
    as ``1 / r``, margin 0.2."""
    margin = 0.2
    r = np.linspace(1.0, 400.0, 4000)
    corr = 1 - c**2 / (2 * r**power)
    if freeze_at is not None:
        corr = np.where(r >= freeze_at, corr[np.searchsorted(r, freeze_at)], corr)
    return SimpleNamespace(
        norm=r / margin, svm_margin=margin, corr=corr, steps=np.arange(r.size) * 10, min_margin=margin * (1 - 0.5 / r)
    )


def test_rate_check_passes_the_heuristic_rate_and_rejects_a_1_over_r_rate():
    """B.cls.rate reads a slope: r^-2 passes whatever its constant; r^-1 (the margin gap, or 1 - corr itself
    falling as 1/r) and a frozen direction fail, by the stated margin (half a unit of slope)."""
    for c in (1.0, cm.OFFSET, 10.0):  # no fitted constant
        m = cm.rate_check(_main_run(c=c))
        assert m.passed and m.value == pytest.approx(-2.0, abs=1e-2)
    competitor = cm.rate_check(_main_run(), cm.margin_gap(_main_run()))
    assert not competitor.passed and competitor.value == pytest.approx(-1.0, abs=1e-2)
    assert competitor.value - cm.MAX_SLOPE >= 0.45  # the margin by which the 1/r rate is rejected
    assert not cm.rate_check(_main_run(power=1.0)).passed
    assert not cm.rate_check(_main_run(power=1.4)).passed
    assert cm.rate_check(_main_run(power=1.6)).passed
    assert not cm.rate_check(_main_run(freeze_at=cm.TWO_NORMS[0])).passed


def test_rate_bar_lies_between_the_trial_runs_and_their_competitor():
    """The bar was set on the trial runs: all of their slopes are below it, all of their margin gaps' above."""
    assert max(cm.TRIAL_SLOPES) < cm.MAX_SLOPE < min(cm.TRIAL_MARGIN_SLOPES)
    assert ledger.REGISTRY["B.cls.rate"].kind == "observation"  # a heuristic rate, not a theorem


def test_rate_check_needs_the_second_norm():
    short = _main_run()
    short.norm = short.norm / 10  # ends at r = 40 < 300
    m = cm.rate_check(short)
    assert not m.passed and "ends at r" in m.details


def test_small_init_check_reads_only_the_named_scales():
    sweep = cm.Settings().sweep
    n = len(sweep)
    corr = np.full(n, 0.9999)
    corr[sweep.index(0.01)] = 0.92
    s = SimpleNamespace(scales=np.array(sweep), budget=np.full(n, 1000), end_attn=np.ones(n), end_corr=corr)
    assert cm.small_init_check(s).passed
    assert not cm.small_init_check(s, (0.01,)).passed


@pytest.mark.slow
@pytest.mark.parametrize(
    "cid",
    [
        "B.cls.selection",
        "B.cls.direction",
        "B.cls.small_init",
        "B.cls.rate",
        "B.synthetic.joint_selects",
        "B.regime.small_control",
        "A.vit.learns",
        "A.vit.norm_grows",
        "A.vit.sparsifies",
        "A.vit.averaged_map",
    ],
)
def test_part2_claims_pass_and_their_competitors_fail(cid):
    import mmtoken.chapters.ch09_vit_sparsity  # noqa: F401  (registers A.vit.*)
    import mmtoken.chapters.ch12_real_reviews  # noqa: F401  (registers B.regime.*)

    c = next(c for c in ledger.select([cid]) if c.id == cid)
    assert c.competitor and c.against is not None
    (own,) = [r for r in ledger.recorded([cid]) if r.id == cid]  # recorded by the chapter under nbval
    assert own.passed or own.known_miss, own
    v = competitors.recorded(c)  # likewise; evaluated now when there is no record
    assert v.rejected, f"{cid}: the claim's check does not reject the competitor ({c.competitor}): {v}"
