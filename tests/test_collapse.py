"""The collapse check (bnnpp.inference.collapse): fires on a fit that explains structured
targets as noise, stays quiet on a good fit and on targets that do not depend on the inputs."""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest

import bnnpp
from bnnpp import priors
from bnnpp.inference.collapse import CollapseWarning, collapse_message, neighbour_noise_sd


def _sinusoid(n=32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-0.5, 0.5, (n, 1)).astype(np.float32)
    return x, (10 * np.sin(2 * np.pi * x[:, 0]) + rng.normal(size=n)).astype(np.float32)


def _posterior(x, y, mean, noise, method="bbb", standardize=True, draws=10, spread=None, options=None):
    """A stand-in for a fitted regression posterior whose predictive at the training inputs has
    ``mean`` (n,) and a constant noise sd ``noise``, and at other inputs x′ a mean whose sd over
    draws is ``spread(x′)`` (n′,) (``None``: no spread): the checks read only these attributes."""
    def predict(xs, num_samples):
        at_data = xs.shape == x.shape and np.array_equal(xs, x)
        loc = np.asarray(mean, np.float64) if at_data else np.zeros(len(xs))
        sd = np.zeros(len(xs)) if spread is None else spread(xs)
        z = np.random.default_rng(0).normal(size=(num_samples, len(xs)))
        z = (z - z.mean(0)) / z.std(0) if num_samples > 1 else 0 * z  # exactly sd over draws
        return types.SimpleNamespace(task="regression", likelihood="gaussian", mean=loc, draws=loc + sd * z,
                                     noise=np.full((num_samples, len(xs)), noise))
    model = types.SimpleNamespace(task="regression", standardize=standardize)
    return types.SimpleNamespace(has_data=True, model=model, x=x, y=y, num_chains=1, num_draws=draws, method=method,
                                 predict=predict, stats=types.SimpleNamespace(extras={}, options=options or {}))


def test_neighbour_noise_sd_against_the_truth():
    """Smooth f plus N(0, 0.5²) on 400 points: the estimate is within 10% of 0.5 (its relative
    sd is about 1/sqrt(n) plus a bias of order the spacing times the slope, 0.0025 · 2π); pure
    noise N(0, 3²) in 3-d: within 15% of 3 (the neighbour's target is independent)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (400, 1))
    assert neighbour_noise_sd(x, np.sin(np.pi * x[:, 0]) + 0.5 * rng.normal(size=400)) == pytest.approx(0.5, rel=0.1)
    x3 = rng.normal(size=(400, 3))
    assert neighbour_noise_sd(x3, 3 * rng.normal(size=(400, 1))) == pytest.approx(3.0, rel=0.15)


def test_local_linear_noise_sd_is_not_inflated_by_the_slope():
    """y = x³ + N(0, 3²) on 20 points of U[−4, 4] (the cubic of benchmarks/small_data.py; its
    slope reaches 48), 50 draws: the root mean estimated variance of the local-linear estimate
    is within 15% of 3 (its curvature bias, of order f″ · spacing², measured 11%), the
    nearest-neighbour one more than 1.5 times 3 (its slope bias); 2-d smooth f plus N(0, 0.5²)
    on 400 points: within 15% of 0.5 (one draw; its relative sd is about 1.5/sqrt(400)·sqrt(2), 0.1); too few rows for a plane: None."""
    from bnnpp.inference.collapse import local_linear_noise_sd

    rng = np.random.default_rng(0)
    local, neighbour = [], []
    for _ in range(50):
        x = rng.uniform(-4, 4, (20, 1))
        y = x[:, 0] ** 3 + 3 * rng.normal(size=20)
        local.append(local_linear_noise_sd(x, y) ** 2)
        neighbour.append(neighbour_noise_sd(x, y) ** 2)
    assert np.sqrt(np.mean(local)) == pytest.approx(3.0, rel=0.15)
    assert np.sqrt(np.mean(neighbour)) > 1.5 * 3.0
    x2 = rng.uniform(-1, 1, (400, 2))
    assert local_linear_noise_sd(x2, np.sin(3 * x2[:, 0]) * x2[:, 1] + 0.5 * rng.normal(size=400)) == pytest.approx(0.5, rel=0.15)
    assert local_linear_noise_sd(x2[:4], x2[:4, 0]) is None


def test_collapse_fires_on_the_noise_explanation_and_not_on_a_fit():
    x, y = _sinusoid()
    # advi/bbb's collapse on issue 35's sinusoid: a weak trend, noise near the targets' sd (6.5)
    line = collapse_message(_posterior(x, y, 0.5 * np.sin(2 * np.pi * x[:, 0]) * 10 * 0.4, 6.0))
    assert line is not None and "\n" not in line
    assert "method='laplace'" in line and "method='nuts'" in line
    # a good fit: the true mean and noise sd
    assert collapse_message(_posterior(x, y, 10 * np.sin(2 * np.pi * x[:, 0]), 1.0)) is None
    # the true mean with a noise sd near the targets' (an over-dispersed predictive): its mean
    # keeps the signal, so it is no collapse (laplace's per-row sd on UCI yacht, R² 1.00)
    assert collapse_message(_posterior(x, y, 10 * np.sin(2 * np.pi * x[:, 0]), 6.0)) is None
    # targets that do not depend on x: a flat mean with the targets' sd is the right answer
    rng = np.random.default_rng(1)
    noise_only = (6.5 * rng.normal(size=32)).astype(np.float32)
    assert collapse_message(_posterior(x, noise_only, np.full(32, noise_only.mean()), noise_only.std())) is None
    # a flat mean under a small noise sd (mc_dropout's zeroed sd head on UCI yacht: softplus(0) = 0.69 of the
    # targets' sd, just below the noise ratio) misses the structure too; the line says it is the mean
    line = collapse_message(_posterior(x, y, np.zeros(32), 0.69 * float(np.std(y)), method="mc_dropout"))
    assert line is not None and "mean leaves the training targets' structure out" in line and "\n" not in line
    # ... but not when nothing varies with x
    assert collapse_message(_posterior(x, noise_only, np.full(32, noise_only.mean()), 0.5 * noise_only.std())) is None
    # the fix never names the collapsed method itself
    assert "method='laplace'" not in collapse_message(_posterior(x, y, np.zeros(32), 6.5, method="laplace"))
    # map, laplace and ensemble from the Glorot start: the fix is the uniform start
    line = collapse_message(_posterior(x, y, np.zeros(32), 6.5, method="ensemble", options={"init_loc": "glorot"}))
    assert "init_loc='uniform'" in line and "\n" not in line


@pytest.mark.slow
@pytest.mark.parametrize("method", ["advi", "bbb"])
def test_mean_field_collapse_on_the_sinusoid_warns(method):
    """Issue 35: advi and bbb with the scales and noise as factors of q (their former default,
    hyperparameters='variational') explain the standardised sinusoid as noise under the
    hierarchical prior (benchmarks/README.md, "Variational fits under hierarchical priors");
    the warning says so."""
    x, y = _sinusoid()
    model = bnnpp.models.mlp((50,), activation="tanh", likelihood="gaussian", prior=priors.normal(scale=priors.inverse_gamma(1.0, 1.0)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = bnnpp.fit(model, (x, y), method=method, progress=False, hyperparameters="variational")
    lines = [str(w.message) for w in caught if issubclass(w.category, CollapseWarning)]
    assert len(lines) == 1 and post.stats.extras["collapse_warning"] == lines[0]


def test_overfit_fires_on_an_interpolating_fit_and_not_on_a_fit():
    """The over-fit check: a predictive that passes through the 32 noisy sinusoid targets with
    an sd of 0.1 (the data's noise sd is 1; the local-linear estimate 0.9) warns in one
    line naming the fix; the true mean with the true noise sd does not, nor the same
    interpolation on more than SMALL_DATA_ROWS rows, or on rows too sparse for their inputs (where the
    estimate bounds nothing)."""
    from bnnpp.inference.collapse import SMALL_DATA_ROWS, overconfidence_message

    x, y = _sinusoid()
    line = overconfidence_message(_posterior(x, y, y, 0.1, method="map", draws=1))
    assert line is not None and "\n" not in line
    assert "fitted the training targets' noise" in line and "method='laplace' or method='ensemble'" in line
    assert collapse_message(_posterior(x, y, y, 0.1, method="map")) is None  # not a collapse
    assert overconfidence_message(_posterior(x, y, 10 * np.sin(2 * np.pi * x[:, 0]), 1.0, draws=1)) is None
    assert overconfidence_message(_posterior(x, y, 10 * np.sin(2 * np.pi * x[:, 0]), 0.6, draws=1)) is None  # 0.66 of the estimate
    xl, yl = _sinusoid(n=SMALL_DATA_ROWS + 1)
    assert overconfidence_message(_posterior(xl, yl, yl, 0.1, method="map", draws=1)) is None
    # 100 rows in 6 inputs (fewer than OVERFIT_ROWS_PER_AXIS ** 6): the local-linear estimate bounds nothing there
    # (UCI yacht: it fired on NUTS), so the same interpolation is not judged; in 2 inputs it is
    rng = np.random.default_rng(3)
    x6 = rng.uniform(-1, 1, (100, 6))
    y6 = np.sin(3 * x6).sum(axis=1) + rng.normal(size=100)
    assert overconfidence_message(_posterior(x6, y6, y6, 0.1, method="map", draws=1)) is None
    x2 = x6[:, :2]
    y2 = np.sin(3 * x2).sum(axis=1) + rng.normal(size=100)
    assert "fitted the training targets' noise" in overconfidence_message(_posterior(x2, y2, y2, 0.1, method="map", draws=1))


def test_overconfidence_fires_when_the_sd_does_not_grow_away_from_the_data():
    """A fit with draws whose predictive sd is the same at the training inputs and far from
    them (noise sd 1, no spread of the mean) warns; one whose mean spreads with the distance
    from the data (sd 4·|x′| at x′, the outer inputs moved to |x′| ≈ 0.5–1: growth about 2–4×)
    does not. outside_growth against hand-computed values: 1 without spread."""
    from bnnpp.inference.collapse import GROWTH_RATIO, outside_growth, overconfidence_message

    x, y = _sinusoid()
    truth = 10 * np.sin(2 * np.pi * x[:, 0])
    flat = _posterior(x, y, truth, 1.0)
    assert outside_growth(flat, x) == pytest.approx(1.0)
    line = overconfidence_message(flat)
    assert line is not None and "\n" not in line and f"under {GROWTH_RATIO}×" in line and "method='laplace'" in line
    growing = _posterior(x, y, truth, 1.0, spread=lambda xs: 4.0 * np.abs(xs[:, 0]))
    assert outside_growth(growing, x) > 2.0
    assert overconfidence_message(growing) is None
    assert outside_growth(_posterior(x, y, truth, 1.0, draws=1), x) is None  # a point estimate
    same = np.zeros_like(x)  # every input the same row (a model of y alone): nothing is away from it
    honest = _posterior(same, y, np.full_like(y, y.mean()), float(y.std()))  # the targets' mean and sd
    assert outside_growth(honest, same) is None and overconfidence_message(honest) is None
    assert collapse_message(honest) is None  # a flat mean is the fit when nothing varies with x


def test_overconfidence_judges_each_side_of_the_data():
    """A fit whose sd grows only past one end of the inputs (spread 8·max(x′ − 0.5, 0): the
    ensemble on the blog regression, whose members extrapolate one slope past x = −0.5 or 0.5)
    warns: on the other side its sd does not grow (exactly 1×), though the root mean over both
    sides is 1.9×, above GROWTH_RATIO. In two dimensions, a spread growing with the distance from
    the data in every direction does not warn."""
    from bnnpp.inference.collapse import GROWTH_RATIO, outside_growth, overconfidence_message

    x, y = _sinusoid()
    truth = 10 * np.sin(2 * np.pi * x[:, 0])
    spread = lambda xs: 8.0 * np.maximum(xs[:, 0] - 0.5, 0.0)  # 0 at the data (x in [-0.5, 0.5])
    one_sided = _posterior(x, y, truth, 1.0, spread=spread)
    c = x[:, 0].mean()
    outer = np.abs(x[:, 0] - c) >= np.median(np.abs(x[:, 0] - c))
    moved = (c + 2 * (x - c))[outer]
    assert np.sqrt(1 + np.mean(spread(moved) ** 2)) > GROWTH_RATIO  # the former measure, both sides pooled
    assert outside_growth(one_sided, x) == pytest.approx(1.0)
    line = overconfidence_message(one_sided)
    assert line is not None and "on one side" in line
    rng = np.random.default_rng(1)
    x2 = rng.uniform(-1, 1, (60, 2))
    y2 = x2.sum(axis=1) + rng.normal(size=60)
    radial = _posterior(x2, y2, x2.sum(axis=1), 1.0, spread=lambda xs: 3.0 * np.linalg.norm(xs, axis=1))
    assert outside_growth(radial, x2) > GROWTH_RATIO and overconfidence_message(radial) is None


def test_overconfidence_warning_after_a_map_fit_and_in_metrics_json():
    """The joint MAP (``hyperparameters="map"``; map's default trains the noise by evidence and
    does not over-fit here) from the uniform start on 20 points of the cubic y = x³ + N(0, 3²)
    (the toy of Hernández-Lobato & Adams 2015; benchmarks/small_data.py) drives its learned noise
    sd far below the data's: one OverconfidenceWarning, recorded in stats.extras and written to metrics.json."""
    from bnnpp.inference.collapse import OverconfidenceWarning
    from bnnpp.runs.fit_run import fit_record

    rng = np.random.default_rng(0)
    x = rng.uniform(-4, 4, (20, 1)).astype(np.float32)
    y = (x[:, 0] ** 3 + 3 * rng.normal(size=20)).astype(np.float32)
    model = bnnpp.models.mlp((50,), activation="relu", likelihood="gaussian", prior=priors.normal(scale=priors.inverse_gamma(1.0, 1.0)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = bnnpp.fit(model, (x, y), method="map", progress=False, init_loc="uniform", hyperparameters="map")
    lines = [str(w.message) for w in caught if issubclass(w.category, OverconfidenceWarning)]
    assert len(lines) == 1 and post.stats.extras["overconfidence_warning"] == lines[0]
    assert not any(issubclass(w.category, CollapseWarning) for w in caught)
    report = fit_record(post, model, {}, seed=0, test={}, seconds={})  # what `bnnpp fit` writes as metrics.json
    assert report.to_json()["overconfidence_warning"] == lines[0]
