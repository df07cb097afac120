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


def _main_run(c: float = cm.OFFSET, loss_excess: float = 0.0, freeze_at: float | None = None):
    """A main run whose direction follows ``1 - corr = c^2 / (2 r^2)`` exactly, margin 0.2."""
    margin = 0.2
    r = np.linspace(1.0, 400.0, 4000)
    corr = 1 - c**2 / (2 * r**2)
    if freeze_at is not None:
        corr = np.where(r >= freeze_at, corr[np.searchsorted(r, freeze_at)], corr)
    loss = np.full_like(r, 0.45)
    loss[-1] *= 1 + loss_excess
    return SimpleNamespace(
        norm=r / margin, svm_margin=margin, corr=corr, steps=np.arange(r.size) * 10, loss=loss, loss_inf=0.45
    )


def test_rate_check_passes_the_predicted_rate_and_rejects_a_frozen_direction():
    assert cm.rate_check(_main_run()).passed
    assert not cm.rate_check(_main_run(freeze_at=cm.TWO_NORMS[0])).passed
    assert not cm.rate_check(_main_run(c=3 * cm.OFFSET)).passed  # a slower rate
    assert not cm.rate_check(_main_run(loss_excess=1e-4)).passed  # the loss short of its infimum
    frozen = cm.frozen_direction(_main_run())
    assert not cm.rate_check(_main_run(), frozen).passed


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
