"""Fits report their own health (bnnpp.inference.health): not converged, PSIS k̂ > 0.7, and
LOO rankings whose k̂ make them unreliable."""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pytest

import bnnpp
from bnnpp import priors
from bnnpp.inference.health import FitHealthWarning, pareto_khat, still_falling


def _trace(n: int, rate: float, noise: float, seed: int = 0) -> np.ndarray:
    """A loss ``100 + 1000 exp(-rate t / n)`` with AR(1) noise (φ = 0.9, as minibatch losses are
    correlated through the parameters), ``(n,)``."""
    rng = np.random.default_rng(seed)
    e = np.zeros(n)
    for t in range(1, n):
        e[t] = 0.9 * e[t - 1] + noise * rng.normal()
    return 100 + 1000 * np.exp(-rate * np.arange(n) / n) + e


@pytest.mark.parametrize("seed", range(5))
def test_a_converged_noisy_trace_is_not_falling(seed):
    # converged after a fifth of the run; the noise (sd ≈ 2.3 of a level of 100) is left
    assert still_falling(_trace(2000, rate=20.0, noise=1.0, seed=seed)) is None


@pytest.mark.parametrize("seed", range(5))
def test_a_trace_cut_short_is_falling(seed):
    # e^-2 of the initial excess is left at the end: the middle is 1000(e^-1 - e^-2) ≈ 230 higher
    r = still_falling(_trace(2000, rate=2.0, noise=1.0, seed=seed))
    assert r is not None and r["drop"] > 150 and r["share"] > 0.04


def test_a_short_trace_is_not_judged():
    assert still_falling(np.linspace(100, 1, 50)) is None


@pytest.mark.parametrize("seed", range(3))
def test_pareto_khat_is_arviz_psislw(seed):
    rng = np.random.default_rng(seed)
    for lw in (rng.normal(size=1000), rng.standard_t(2, size=1000), 3 * rng.normal(size=400)):
        np.testing.assert_allclose(pareto_khat(lw), float(az.psislw(lw.copy())[1]), rtol=1e-10)
    assert pareto_khat(np.array([0.0, np.inf, 1.0] * 100)) == np.inf


def _linear(n: int = 200):
    """The issue's 3-coefficient linear regression: truth (1, -2, 0.5), noise sd 0.5."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = (x @ np.array([1.0, -2.0, 0.5]) + 0.5 * rng.normal(size=n)).astype(np.float32)
    return x, y


def _health(**kwargs) -> tuple[bnnpp.Posterior, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = bnnpp.fit(progress=False, seed=0, **kwargs)
    return post, [str(w.message) for w in caught if w.category is FitHealthWarning]


@pytest.mark.slow  # two fits, about 40 s on 2 busy cores
def test_a_short_bbb_fit_warns_and_a_long_advi_fit_does_not():
    model = bnnpp.models.mlp(hidden=(), likelihood="gaussian")
    post, said = _health(model=model, data=_linear(), method="bbb", epochs=200)
    assert any("bbb: not converged" in s for s in said), said
    assert any("PSIS k̂" in s for s in said), said
    assert post.stats.extras["health"] == said and all("\n" not in s for s in said)
    post, said = _health(model=model, data=_linear(), method="advi", num_steps=3000)
    assert said == [] and post.stats.extras["psis_khat"] < 0.7


@pytest.mark.slow  # the README's advi example: 10,000 steps, about 60 s on 2 busy cores
def test_the_readme_advi_example_warns_on_khat():
    model = bnnpp.models.mlp(hidden=(5, 5), activation="tanh", likelihood="categorical", num_classes=2,
                             prior=priors.normal(scale=priors.inverse_gamma(1.0, 1.0)))
    post, said = _health(model=model, data=bnnpp.data.moons(), method="advi", num_steps=10_000)
    assert [s for s in said if "PSIS k̂" in s] and post.stats.extras["psis_khat"] > 0.7
