"""Predictive metrics against hand-computed values, scipy.stats and direct float64 formulas.

The metrics work in float64 numpy, so hand-computed answers are checked to 1e-12 (a few
ulps of the sums involved); sampling checks use tolerances from the binomial sd.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats as st
from hypothesis import given, settings
from hypothesis import strategies as hst

from bnnpp import metrics

TOL = 1e-12


# --------------------------------------------------------------------------------------
# Classification scores
# --------------------------------------------------------------------------------------


def test_perfectly_confident_and_correct():
    p = np.eye(3)[[0, 2, 1, 1]]
    y = np.array([0, 2, 1, 1])
    assert metrics.accuracy(p, y) == 1.0
    assert abs(metrics.nll(p, y)) < TOL
    assert metrics.brier(p, y) == 0.0
    assert metrics.ece(p, y) == 0.0


def test_perfectly_confident_and_wrong():
    p = np.eye(2)[[0, 1]]
    y = np.array([1, 0])
    assert metrics.accuracy(p, y) == 0.0
    assert metrics.brier(p, y) == pytest.approx(2.0, abs=TOL)  # the worst Brier score
    assert metrics.ece(p, y) == pytest.approx(1.0, abs=TOL)  # conf 1, accuracy 0
    # log(0) is clipped at 1e-12, so the NLL is large but finite: -log(1e-12) = 27.63.
    assert metrics.nll(p, y) == pytest.approx(-math.log(1e-12), rel=1e-12)


def test_uniform_two_class_prediction():
    p = np.full((5, 2), 0.5)
    y = np.array([0, 1, 1, 0, 1])
    assert metrics.nll(p, y) == pytest.approx(math.log(2), abs=TOL)
    assert metrics.brier(p, y) == pytest.approx(0.5, abs=TOL)  # 0.25 + 0.25 per point


def test_hand_computed_scores():
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.25, 0.5, 0.25], [0.2, 0.2, 0.6]])
    y = np.array([0, 2, 0, 1])
    # argmax = 0, 2, 1, 2 -> correct, correct, wrong, wrong
    assert metrics.accuracy(p, y) == 0.5
    # -mean log p(label) = -(log .7 + log .6 + log .25 + log .2) / 4
    assert metrics.nll(p, y) == pytest.approx(-(math.log(0.7) + math.log(0.6) + math.log(0.25) + math.log(0.2)) / 4, abs=TOL)
    # per-point sum of squares: .09+.04+.01, .01+.09+.16, .5625+.25+.0625, .04+.64+.36
    brier_rows = [0.14, 0.26, 0.875, 1.04]
    assert metrics.brier(p, y) == pytest.approx(np.mean(brier_rows), abs=TOL)


def test_nll_uses_mean_probability_not_mean_log():
    """Two draws that disagree: p̄(label) = 0.5 gives log 2, while the mean of per-draw
    -log p would be (-log .9 - log .1)/2 = 1.204."""
    probs = np.array([[[0.9, 0.1]], [[0.1, 0.9]]])  # (S=2, n=1, C=2)
    assert metrics.nll(probs.mean(0), np.array([0])) == pytest.approx(math.log(2), abs=TOL)


def test_ece_hand_computed_bins():
    """15 bins of width 1/15: (0, 1/15], (1/15, 2/15], ..., (14/15, 1]. No confidence sits on an edge.

    point  probs        label  conf  correct  bin
      0    [.90, .10]   0      .90   1        13  (.8667, .9333]
      1    [.95, .05]   1      .95   0        14  (.9333, 1]
      2    [.62, .38]   0      .62   1         9  (.6, .6667]
      3    [.30, .70]   1      .70   1        10  (.6667, .7333]
      4    [.35, .65]   0      .65   0         9
      5    [.52, .48]   1      .52   0         7  (.4667, .5333]

    bin 9: 2 points, accuracy .5, confidence .635 -> |gap| .135
    ECE = (2·.135 + |1-.9| + |0-.95| + |1-.7| + |0-.52|) / 6 = 2.14 / 6
    """
    p = np.array([[0.9, 0.1], [0.95, 0.05], [0.62, 0.38], [0.3, 0.7], [0.35, 0.65], [0.52, 0.48]])
    y = np.array([0, 1, 0, 1, 0, 1])
    assert metrics.ece(p, y) == pytest.approx(2.14 / 6, abs=TOL)
    assert metrics.ece(p, y, num_bins=15) == metrics.ece(p, y)
    # One bin: |accuracy 3/6 - mean confidence 4.34/6|.
    assert metrics.ece(p, y, num_bins=1) == pytest.approx(abs(0.5 - 4.34 / 6), abs=TOL)


def test_ece_zero_when_calibrated_within_a_bin():
    # 10 points at confidence 0.8, 8 of them correct.
    p = np.tile([[0.2, 0.8]], (10, 1))
    y = np.array([1] * 8 + [0] * 2)
    assert metrics.ece(p, y) == pytest.approx(0.0, abs=TOL)
    assert metrics.accuracy(p, y) == 0.8


# --------------------------------------------------------------------------------------
# Entropy decomposition
# --------------------------------------------------------------------------------------


def _dirichlet_probs(seed: int, s: int, n: int, c: int, alpha: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(c, alpha), size=(s, n))


@settings(deadline=None, max_examples=60, database=None)  # no .hypothesis/ folder in the repo
@given(
    seed=hst.integers(0, 2**32 - 1),
    s=hst.integers(1, 8),
    n=hst.integers(1, 6),
    c=hst.integers(2, 6),
    alpha=hst.floats(0.05, 20.0),
)
def test_entropy_decomposition(seed, s, n, c, alpha):
    probs = _dirichlet_probs(seed, s, n, c, alpha)
    total = metrics.predictive_entropy(probs)
    aleatoric = metrics.expected_entropy(probs)
    epistemic = metrics.mutual_information(probs)
    assert total.shape == aleatoric.shape == epistemic.shape == (n,)
    # Independent reference: H[p̄] and E_s H[p_s] from scipy.stats.entropy (nats).
    np.testing.assert_allclose(total, st.entropy(probs.mean(0), axis=-1), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(aleatoric, st.entropy(probs, axis=-1).mean(0), rtol=1e-10, atol=1e-12)
    # H[p̄] = E H[p_s] + I exactly, up to float64 rounding of sums of O(log C) terms.
    np.testing.assert_allclose(total, aleatoric + epistemic, rtol=0, atol=1e-12)
    assert np.all(epistemic >= 0.0)
    assert np.all(total <= math.log(c) + 1e-12)


@pytest.mark.parametrize("s", [1, 2, 7])
def test_mutual_information_zero_when_draws_agree(s):
    one = _dirichlet_probs(1, 1, 5, 4, 1.0)
    probs = np.repeat(one, s, axis=0)
    np.testing.assert_allclose(metrics.mutual_information(probs), 0.0, atol=1e-12)
    np.testing.assert_allclose(metrics.predictive_entropy(probs), metrics.expected_entropy(probs), atol=1e-12)


def test_entropies_of_disagreeing_one_hot_draws():
    """Two confident draws that disagree: each draw has entropy 0 (0·log 0 = 0), the mean is
    uniform over 2 classes, so H[p̄] = log 2 = I and E H = 0."""
    probs = np.array([[[1.0, 0.0]], [[0.0, 1.0]]])
    np.testing.assert_allclose(metrics.expected_entropy(probs), [0.0], atol=TOL)
    np.testing.assert_allclose(metrics.predictive_entropy(probs), [math.log(2)], atol=TOL)
    np.testing.assert_allclose(metrics.mutual_information(probs), [math.log(2)], atol=TOL)


def test_uniform_prediction_entropy_is_log_c():
    probs = np.full((3, 2, 5), 0.2)
    np.testing.assert_allclose(metrics.predictive_entropy(probs), [math.log(5)] * 2, atol=TOL)
    np.testing.assert_allclose(metrics.mutual_information(probs), [0.0, 0.0], atol=TOL)


def test_expected_error_rate():
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [1 / 3, 1 / 3, 1 / 3], [0.0, 1.0, 0.0]])
    np.testing.assert_allclose(metrics.expected_error_rate(p), [0.3, 0.4, 2 / 3, 0.0], atol=TOL)
    rand = _dirichlet_probs(3, 1, 50, 4, 1.0)[0]
    np.testing.assert_allclose(metrics.expected_error_rate(rand), 1.0 - rand.max(-1), atol=0)


# --------------------------------------------------------------------------------------
# Regression scores
# --------------------------------------------------------------------------------------


def test_rmse_hand_computed():
    assert metrics.rmse(np.zeros(4), np.array([1.0, -1.0, 1.0, -1.0])) == pytest.approx(1.0, abs=TOL)
    assert metrics.rmse(np.array([3.0, 4.0]), np.zeros(2)) == pytest.approx(math.sqrt(12.5), abs=TOL)
    assert metrics.rmse(np.array([1.5, 2.5]), np.array([1.5, 2.5])) == 0.0


def test_gaussian_nll_single_draw_matches_scipy():
    rng = np.random.default_rng(0)
    n = 50
    loc = rng.normal(size=(1, n))
    scale = rng.uniform(0.1, 3.0, size=(1, n))
    y = rng.normal(size=n) * 2
    expected = -np.mean(st.norm.logpdf(y, loc=loc[0], scale=scale[0]))
    assert metrics.gaussian_nll(loc, scale, y) == pytest.approx(expected, rel=1e-12)
    # A scalar scale broadcasts over (S, n).
    expected_scalar = -np.mean(st.norm.logpdf(y, loc=loc[0], scale=0.7))
    assert metrics.gaussian_nll(loc, 0.7, y) == pytest.approx(expected_scalar, rel=1e-12)


def test_gaussian_nll_rejects_one_dimensional_loc():
    with pytest.raises(ValueError, match=r"\(S, n\)"):
        metrics.gaussian_nll(np.zeros(3), 1.0, np.zeros(3))


def test_gaussian_nll_single_draw_far_in_the_tail():
    """40 sd away, the density underflows nowhere in log space: NLL = 800 + log(sqrt(2π))."""
    assert metrics.gaussian_nll(np.zeros((1, 1)), np.ones((1, 1)), np.array([40.0])) == pytest.approx(
        -st.norm.logpdf(40.0), rel=1e-12
    )


@pytest.mark.parametrize("s", [2, 5, 30])
def test_gaussian_nll_mixture_matches_direct_formula(s):
    rng = np.random.default_rng(s)
    n = 40
    loc = rng.normal(size=(s, n))
    scale = rng.uniform(0.3, 2.0, size=(s, n))
    y = rng.normal(size=n)
    # Literal float64 mixture density, (1/S) Σ_s N(y | loc_s, scale_s²); no underflow at these values.
    dens = np.mean(np.exp(-0.5 * ((y - loc) / scale) ** 2) / (np.sqrt(2 * np.pi) * scale), axis=0)
    expected = -np.mean(np.log(dens))
    assert metrics.gaussian_nll(loc, scale, y) == pytest.approx(expected, rel=1e-12)


def test_interval_coverage_hand_computed():
    # z(95%) = 1.959964: inside are 0, 1.95 and -1.95; outside 1.97 and -2.5.
    y = np.array([0.0, 1.95, 1.97, -1.95, -2.5])
    assert metrics.interval_coverage(np.zeros(5), np.ones(5), y) == pytest.approx(3 / 5)
    # With std 2 the interval is ±3.92, so every point is inside.
    assert metrics.interval_coverage(np.zeros(5), np.full(5, 2.0), y) == 1.0


@pytest.mark.parametrize("level", [0.95, 0.5, 0.8])
def test_interval_coverage_calibrated_gaussian(level):
    n = 200_000
    y = np.random.default_rng(0).normal(size=n)
    cov = metrics.interval_coverage(np.zeros(n), np.ones(n), y, level=level)
    # Binomial sd sqrt(level (1 - level) / n) <= 0.0011; allow 5 sd.
    assert abs(cov - level) < 5 * math.sqrt(level * (1 - level) / n)


def test_a_target_shape_that_would_broadcast_is_refused():
    """(n, 1) against (n,) would broadcast to (n, n) and return a wrong number: one-line errors."""
    p = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]])
    y = np.array([0, 1, 0])
    assert metrics.accuracy(p, y) == 1.0
    for f in (metrics.accuracy, metrics.nll, metrics.brier, metrics.ece):
        with pytest.raises(ValueError, match=r"labels y must have shape \(3,\).*got \(3, 1\): pass y.reshape\(-1\)"):
            f(p, y[:, None])
    mean, sd = np.array([[1.0], [2.0], [3.0]]), np.ones((3, 1))
    assert metrics.rmse(mean, mean) == 0.0
    with pytest.raises(ValueError, match=r"targets y have shape \(3,\) but the predictive mean has shape \(3, 1\)"):
        metrics.rmse(mean, mean[:, 0])
    with pytest.raises(ValueError, match="targets y have shape"):
        metrics.interval_coverage(mean, sd, mean[:, 0])
    with pytest.raises(ValueError, match=r"one target per predicted row"):
        metrics.gaussian_nll(np.zeros((4, 3)), 1.0, np.zeros(5))
