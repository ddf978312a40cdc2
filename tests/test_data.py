"""Synthetic datasets: shapes, dtypes, splits, standardisation, geometry and input checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bnnpp import data

LOADERS = [data.moons, data.circles]


@pytest.mark.parametrize("load", LOADERS, ids=["moons", "circles"])
def test_default_split_shapes_and_dtypes(load):
    ds = load()
    assert ds.x_train.shape == (700, 2) and ds.x_test.shape == (300, 2)
    assert ds.y_train.shape == (700,) and ds.y_test.shape == (300,)
    assert ds.x_train.dtype == np.float32 and ds.x_test.dtype == np.float32
    assert ds.y_train.dtype == np.int32 and ds.y_test.dtype == np.int32
    assert ds.task == "classification" and ds.num_classes == 2
    assert ds.name == load.__name__
    for y in (ds.y_train, ds.y_test):
        assert set(np.unique(y).tolist()) == {0, 1}
    # n // 2 points per class overall (split across train and test by a shuffle).
    y_all = np.concatenate([ds.y_train, ds.y_test])
    assert np.sum(y_all == 0) == 500 and np.sum(y_all == 1) == 500


@pytest.mark.parametrize("load", LOADERS, ids=["moons", "circles"])
def test_training_features_are_standardised(load):
    ds = load()
    x = ds.x_train.astype(np.float64)
    # Standardised in float64, then rounded to float32 (relative 6e-8 per entry, values
    # |x| < ~4), so mean and sd are exact to well under 1e-5.
    np.testing.assert_allclose(x.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(x.std(0), 1.0, atol=1e-5)
    # The test set uses the training statistics, so it is close to but not exactly standard.
    xt = ds.x_test.astype(np.float64)
    assert np.all(np.abs(xt.mean(0)) < 0.3) and np.all(np.abs(xt.std(0) - 1) < 0.3)
    assert np.all(np.abs(xt.mean(0)) > 1e-5)


@pytest.mark.parametrize("load", LOADERS, ids=["moons", "circles"])
def test_seed_reproducible_and_distinct(load):
    a, b, c = load(seed=3), load(seed=3), load(seed=4)
    for field in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.x_train, c.x_train)
    assert not np.array_equal(a.y_train, c.y_train)


def _unstandardise(x, col_min, col_max, raw_min, raw_max):
    """Invert x = (raw - mu) / sd for one column, given two raw values known to be attained."""
    sd = (raw_max - raw_min) / (col_max - col_min)
    return raw_min + (x - col_min) * sd


def test_noise_free_moons_lie_on_the_two_half_circles():
    """With noise 0 the raw points are exactly sklearn's moons: class 0 on the upper unit
    half circle, class 1 on the lower one centred at (1, 0.5). Undo the (unknown) affine
    standardisation from points whose raw coordinates are known (class 0 spans x in [-1, 1],
    class 0 has min y = 0 and class 1 has max y = 0.5), then check every point, train and
    test alike (so the test set must use the training statistics). float32 rounding of the
    standardised values gives errors ~1e-7; 1e-5 leaves room."""
    ds = data.moons(noise=0.0, seed=5)
    x = np.concatenate([ds.x_train, ds.x_test]).astype(np.float64)
    y = np.concatenate([ds.y_train, ds.y_test])
    c0, c1 = x[y == 0], x[y == 1]
    u = _unstandardise(x[:, 0], c0[:, 0].min(), c0[:, 0].max(), -1.0, 1.0)
    v = _unstandardise(x[:, 1], c0[:, 1].min(), c1[:, 1].max(), 0.0, 0.5)
    u0, v0, u1, v1 = u[y == 0], v[y == 0], u[y == 1], v[y == 1]
    np.testing.assert_allclose(u0**2 + v0**2, 1.0, atol=1e-5)
    assert np.all(v0 >= -1e-5)
    np.testing.assert_allclose((1 - u1) ** 2 + (0.5 - v1) ** 2, 1.0, atol=1e-5)
    assert np.all(v1 <= 0.5 + 1e-5)


@pytest.mark.parametrize("factor", [0.5, 0.3])
def test_noise_free_circles_have_radius_1_and_factor(factor):
    """Same idea as for moons: class 0 is the unit circle (it attains x = ±1 and y = ±1),
    class 1 the circle of radius ``factor``."""
    ds = data.circles(noise=0.0, factor=factor, seed=2)
    x = np.concatenate([ds.x_train, ds.x_test]).astype(np.float64)
    y = np.concatenate([ds.y_train, ds.y_test])
    c0 = x[y == 0]
    u = _unstandardise(x[:, 0], c0[:, 0].min(), c0[:, 0].max(), -1.0, 1.0)
    v = _unstandardise(x[:, 1], c0[:, 1].min(), c0[:, 1].max(), -1.0, 1.0)
    np.testing.assert_allclose(u[y == 0] ** 2 + v[y == 0] ** 2, 1.0, atol=1e-5)
    np.testing.assert_allclose(u[y == 1] ** 2 + v[y == 1] ** 2, factor**2, atol=1e-5)


@pytest.mark.parametrize("n, n_train", [(10, 7), (101, 71), (4, 3)])
def test_split_is_seventy_percent(n, n_train):
    ds = data.moons(n=n)
    assert len(ds.x_train) == n_train and len(ds.x_test) == n - n_train


# --------------------------------------------------------------------------------------
# Sinusoid
# --------------------------------------------------------------------------------------


def test_sinusoid_default():
    ds = data.sinusoid()
    assert ds.task == "regression" and ds.num_classes is None and ds.name == "sinusoid"
    assert ds.x_train.shape == (32, 1) and ds.y_train.shape == (32,)
    assert ds.x_test.shape == (300, 1) and ds.y_test.shape == (300,)
    assert ds.x_train.dtype == ds.y_train.dtype == ds.x_test.dtype == ds.y_test.dtype == np.float32
    # Not standardised: training x stays in [-0.5, 0.5] (and is spread over it).
    assert ds.x_train.min() >= -0.5 and ds.x_train.max() <= 0.5
    assert ds.x_train.max() - ds.x_train.min() > 0.5
    # Test grid: evenly spaced, endpoints exactly ±1.5.
    xt = ds.x_test[:, 0].astype(np.float64)
    assert xt[0] == -1.5 and xt[-1] == 1.5
    np.testing.assert_allclose(np.diff(xt), 3.0 / 299, rtol=1e-5)
    # Residual sd for n=32: the sample sd of 32 N(0,1) draws has sd ~ 1/sqrt(64) = 0.125,
    # so [0.5, 1.6] is a > 4-sd band (and a wrong amplitude, e.g. sin not scaled by 10,
    # gives a residual sd of ~6).
    r = ds.y_train - 10 * np.sin(2 * np.pi * ds.x_train[:, 0].astype(np.float64))
    assert 0.5 < r.std(ddof=1) < 1.6


@pytest.mark.parametrize("noise", [1.0, 0.3])
def test_sinusoid_residual_sd_large_n(noise):
    ds = data.sinusoid(n=5000, noise=noise, seed=1, n_test=5000)
    # The sample sd of n = 5000 normal draws has relative sd 1/sqrt(2n) = 1%: 5% is 5 sd.
    for x, y in ((ds.x_train, ds.y_train), (ds.x_test, ds.y_test)):
        r = y - 10 * np.sin(2 * np.pi * x[:, 0].astype(np.float64))
        assert abs(r.std(ddof=1) / noise - 1) < 0.05
        assert abs(r.mean()) < 5 * noise / math.sqrt(len(r))


def test_sinusoid_noise_free_is_exact():
    ds = data.sinusoid(noise=0.0)
    r = ds.y_train - 10 * np.sin(2 * np.pi * ds.x_train[:, 0].astype(np.float64))
    # Only float32 rounding of x and y: |d/dx 10 sin(2πx)| <= 63, times 3e-8, plus 6e-7 for y.
    assert np.max(np.abs(r)) < 1e-5


def test_sinusoid_seed():
    a, b, c = data.sinusoid(seed=7), data.sinusoid(seed=7), data.sinusoid(seed=8)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x_train, c.x_train)


def test_load_synthetic_by_name():
    for name in ("moons", "circles", "sinusoid"):
        ds = data.load_synthetic(name, seed=2)
        ref = data.SYNTHETIC[name](seed=2)
        assert ds.name == name
        np.testing.assert_array_equal(ds.x_train, ref.x_train)
    ds = data.load_synthetic("moons", seed=1, noise=0.1, n=200)
    assert len(ds.x_train) == 140


# --------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: data.moons(n=0),
        lambda: data.circles(n=0),
        lambda: data.sinusoid(n=0),
        lambda: data.moons(n=2.5),
        lambda: data.moons(noise=-1),
        lambda: data.circles(noise=-1),
        lambda: data.sinusoid(noise=-1),
        lambda: data.moons(noise=float("nan")),
        lambda: data.circles(factor=1.5),
        lambda: data.circles(factor=0.0),
        lambda: data.load_synthetic("mnist"),
    ],
    ids=[
        "moons-n0",
        "circles-n0",
        "sinusoid-n0",
        "moons-n-fractional",
        "moons-noise-neg",
        "circles-noise-neg",
        "sinusoid-noise-neg",
        "moons-noise-nan",
        "circles-factor-1.5",
        "circles-factor-0",
        "unknown-name",
    ],
)
def test_bad_input_raises(call):
    with pytest.raises(ValueError):
        call()


def test_unknown_dataset_message_lists_names():
    with pytest.raises(ValueError, match="mnist") as exc:
        data.load_synthetic("mnist")
    for name in data.SYNTHETIC:
        assert name in str(exc.value)
