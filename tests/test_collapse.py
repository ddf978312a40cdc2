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


def _posterior(x, y, mean, noise, method="bbb", standardize=True):
    """A stand-in for a fitted regression posterior whose predictive has ``mean`` (n,) and a
    constant noise sd ``noise``: collapse_message reads only these attributes."""
    pred = types.SimpleNamespace(task="regression", likelihood="gaussian", mean=np.asarray(mean, np.float64),
                                 noise=np.full((10, len(y)), noise))
    model = types.SimpleNamespace(task="regression", standardize=standardize)
    return types.SimpleNamespace(has_data=True, model=model, x=x, y=y, num_chains=1, num_draws=10, method=method,
                                 predict=lambda xs, num_samples: pred)


def test_neighbour_noise_sd_against_the_truth():
    """Smooth f plus N(0, 0.5²) on 400 points: the estimate is within 10% of 0.5 (its relative
    sd is about 1/sqrt(n) plus a bias of order the spacing times the slope, 0.0025 · 2π); pure
    noise N(0, 3²) in 3-d: within 15% of 3 (the neighbour's target is independent)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (400, 1))
    assert neighbour_noise_sd(x, np.sin(np.pi * x[:, 0]) + 0.5 * rng.normal(size=400)) == pytest.approx(0.5, rel=0.1)
    x3 = rng.normal(size=(400, 3))
    assert neighbour_noise_sd(x3, 3 * rng.normal(size=(400, 1))) == pytest.approx(3.0, rel=0.15)


def test_collapse_fires_on_the_noise_explanation_and_not_on_a_fit():
    x, y = _sinusoid()
    # advi/bbb's collapse on issue 35's sinusoid: a weak trend, noise near the targets' sd (6.5)
    line = collapse_message(_posterior(x, y, 0.5 * np.sin(2 * np.pi * x[:, 0]) * 10 * 0.4, 6.0))
    assert line is not None and "\n" not in line
    assert "method='laplace'" in line and "method='nuts'" in line
    # a good fit: the true mean and noise sd
    assert collapse_message(_posterior(x, y, 10 * np.sin(2 * np.pi * x[:, 0]), 1.0)) is None
    # targets that do not depend on x: a flat mean with the targets' sd is the right answer
    rng = np.random.default_rng(1)
    noise_only = (6.5 * rng.normal(size=32)).astype(np.float32)
    assert collapse_message(_posterior(x, noise_only, np.full(32, noise_only.mean()), noise_only.std())) is None
    # the fix never names the collapsed method itself
    assert "method='laplace'" not in collapse_message(_posterior(x, y, np.zeros(32), 6.5, method="laplace"))


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
