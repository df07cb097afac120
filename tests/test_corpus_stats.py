"""mmtoken.embeddings.corpus_stats: the (partial) Spearman correlation, the U-shape statistics, the polarity mix."""

from __future__ import annotations

import numpy as np
import pytest

from mmtoken.embeddings import corpus_stats

pytestmark = pytest.mark.usefixtures("review_data_dir")


def test_partial_spearman_agrees_with_residual_ranks():
    rng = np.random.default_rng(0)
    z = rng.normal(size=400)
    x = z + rng.normal(size=400)
    y = z + 0.5 * x + rng.normal(size=400)
    from scipy.stats import rankdata

    rx, ry, rz = rankdata(x), rankdata(y), rankdata(z)
    res = lambda r: r - np.polyval(np.polyfit(rz, r, 1), rz)  # noqa: E731
    expected = np.corrcoef(res(rx), res(ry))[0, 1]
    assert np.isclose(corpus_stats.partial_spearman(x, y, z), expected, atol=1e-12)
    assert np.isclose(corpus_stats.partial_spearman(x, y, np.exp(z)), expected, atol=1e-12)  # monotone in z: unchanged
    assert np.isclose(corpus_stats.spearman(x, y), np.corrcoef(rx, ry)[0, 1])
    assert np.isnan(corpus_stats.spearman(np.ones(5), np.arange(5.0)))
    with pytest.raises(ValueError, match="one length"):
        corpus_stats.partial_spearman(x, y, z[:3])


def _stats(delta, count):
    delta, count = np.asarray(delta, float), np.asarray(count, float)
    return corpus_stats.TokenStats(count, count * (1 + delta) / 2, count * (1 - delta) / 2, delta / 100, delta)


def test_u_shape_separates_a_u_from_one_arm_and_from_frequency():
    rng = np.random.default_rng(0)
    delta = rng.uniform(-1, 1, 500)
    count = rng.integers(100, 10_000, 500).astype(float)
    st = _stats(delta, count)
    u = corpus_stats.u_shape(np.abs(delta) + 0.01 * rng.normal(size=500), st)
    assert u.partial > 0.9 and u.positive > 0.9 and u.negative > 0.9 and abs(u.signed) < 0.2
    one_arm = corpus_stats.u_shape(delta, st)  # attention monotone in Delta: only the positive arm rises
    assert one_arm.positive > 0.9 and one_arm.negative < -0.9
    # |Delta| and the logits both follow the count (rare tokens: extreme Delta, high logits), nothing else
    size = np.clip(1.5 / np.log(count) + 0.01 * rng.normal(size=500), 0.01, 1)
    freq = corpus_stats.u_shape(-np.log(count) + 0.1 * rng.normal(size=500), _stats(np.sign(delta) * size, count))
    assert freq.spearman > 0.5 and abs(freq.partial) < 0.15 and freq.count < -0.9
    assert np.isnan(corpus_stats.partial_spearman(np.arange(9.0), np.arange(9.0) ** 2, np.arange(9.0)))
    few = corpus_stats.u_shape(np.abs(delta), _stats(delta, np.full(500, 50.0)))
    assert few.n == 0 and np.isnan(few.partial)


def test_polarity_mix():
    # tokens: 1 polar positive, 2 polar negative, 3 neutral; reviews: [1,3] (+), [1,2] (-), [3] (+)
    st = _stats([np.nan, 1.0, -0.8, 0.1], [0, 50, 50, 50])
    mix = corpus_stats.polarity_mix(np.array([[1, 3, 3], [1, 2, 0], [3, 0, 0]]), np.array([1, -1, 1]), st)
    assert np.isclose(mix.exclusive, 1 / 3) and np.isclose(mix.polar, 2 / 3)
    assert np.isclose(mix.per_sequence, 1.0) and np.isclose(mix.both_signs, 1 / 3)
    assert np.isclose(mix.against, 1 / 3) and np.isclose(mix.none, 1 / 3)
