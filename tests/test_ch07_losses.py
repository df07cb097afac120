"""Chapter 7's logistic regularization path (issue 43, item 1): computed with the excess in log space past the
radius where it underflows, it passes chapter 2's bar at R = 10^4, and its competitor misses that bar by the
margin the claim states."""

import numpy as np
import pytest

from mmtoken.attention import geometry, instances, long_paths
from mmtoken.book import ledger
from mmtoken.chapters import ch07_losses as ch


def test_predicted_offset_and_radius():
    """The offset p_2* = log(|l'(C)| C / |l'(1)|) / 2 and the radius where the bar is met."""
    sig = lambda x: 1 / (1 + np.exp(-x))
    assert ch.limit_offset(100, "logistic") == pytest.approx(0.5 * np.log(100 * sig(-100.0) / sig(-1.0)), rel=1e-12)
    assert ch.limit_offset(100, "correlation") == pytest.approx(0.5 * np.log(100.0), rel=1e-12)
    assert ch.radius_for(0.999, -47.04) == pytest.approx(47.04 / np.sqrt(0.002))
    # the continued grid ends about a decade past that radius, and continues chapter 2's spacing
    r = ch.radius_for(ch.REG_MIN_CORR, ch.limit_offset(ch.REG_C, "logistic"))
    assert 9 * r <= ch.REG_RADII_LOGISTIC[-1] < 10 * r  # the power of ten about a decade past it
    assert np.allclose(ch.REG_RADII_LOGISTIC[: len(ch.REG_RADII)], ch.REG_RADII)


@pytest.mark.slow
def test_logistic_path_passes_and_its_competitor_misses_by_the_stated_margin():
    c = ledger.REGISTRY["A.losses.reg_path_logistic"]
    assert c.kind == "theorem" and c.known_miss is None
    own, rival = c.func(), c.against()
    assert own.passed and own.value["short_of_bar"] < 0
    assert not rival.passed and rival.value["short_of_bar"] >= ch.REG_COMPETITOR_MARGIN
    # the path keeps the predicted offset from the GMM line at the largest radii
    path = ch.reg_path("logistic", ch.settings(), tuple(ch.REG_RADII_LOGISTIC))
    assert abs(path[-1, 1] - ch.limit_offset(ch.REG_C, "logistic")) < 0.1
    assert geometry.correlation(path[-1], ch._gmm()) > ch.REG_MIN_CORR


def test_planar_certificate_is_small_at_the_minimiser_and_covers_it_from_elsewhere():
    """At the path's point the certified angle is small; from a point 5 degrees off, the sectors it leaves still
    hold the minimiser (the angle returned is at least the distance to it): a bound, not a guess."""
    pr = instances.fig4(100).problem()
    p = ch.reg_path("correlation", ch.settings())[-1]  # R = 100
    arc = long_paths.planar_certificate(pr, p, "correlation")
    assert 0 < arc < np.radians(0.2)
    off = np.linalg.norm(p) * ch.TILT
    gap = np.arccos(geometry.correlation(off, p))
    assert long_paths.planar_certificate(pr, off, "correlation") >= gap - arc
    with pytest.raises(ValueError, match="two-token"):
        long_paths.planar_certificate(instances.fig1("global").problem(), [1.0, 0.0])
