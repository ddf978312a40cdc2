"""Prediction in blocks of draws and rows (:meth:`Posterior._evaluate`): the same numbers as one
call over every draw and row, for a network (rows split too), a model with deterministic
sites and a model with per-row latents (rows kept whole)."""

from __future__ import annotations

import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import bnnpp
from bnnpp.posterior import core


def with_deterministic(x, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    s = numpyro.sample("s", dist.HalfNormal(1.0))
    mean = numpyro.deterministic("mean", x @ w)
    with numpyro.plate("rows", x.shape[0]):
        numpyro.sample("y", dist.Normal(mean, s), obs=y)


def per_row(sigma, y=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    with numpyro.plate("J", sigma.shape[0]):
        theta = numpyro.sample("theta", dist.Normal(mu, 5.0))
        numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)


@pytest.fixture(scope="module")
def fits():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(37, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -1.0]) + 0.3 * rng.normal(size=37)).astype(np.float32)
    net = bnnpp.models.mlp(hidden=(8,), likelihood="gaussian")
    sigma = np.linspace(1.0, 3.0, 11).astype(np.float32)
    return {
        "network": (bnnpp.fit(net, (x, y), method="advi", num_steps=50, num_samples=23, progress=False), x),
        "deterministic": (bnnpp.fit(with_deterministic, (x, y), method="advi", num_steps=50, num_samples=23, progress=False), x),
        "per_row": (bnnpp.fit(per_row, (sigma, 2 * sigma), method="advi", num_steps=50, num_samples=23, progress=False), sigma),
    }


@pytest.mark.parametrize("limit", [30, 80], ids=["rows_split", "draw_blocks"])
@pytest.mark.parametrize("case", ["network", "deterministic", "per_row"])
def test_blocks_match_one_call(fits, case, limit, monkeypatch):
    post, x = fits[case]
    whole = post.predict(x, seed=3)
    ll = post.log_likelihood()
    # 30: one draw a call, the network's 37 rows in blocks of 30 (the last padded); 80: blocks of two draws, rows whole
    monkeypatch.setattr(core, "MAX_DRAW_ROWS", limit)
    post = post.__class__(**{f.name: getattr(post, f.name) for f in core.dataclasses.fields(post) if f.init})
    blocked = post.predict(x, seed=3)
    np.testing.assert_allclose(blocked.draws, whole.draws, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(blocked.noise, whole.noise, rtol=1e-5, atol=1e-6)
    for k, v in whole.deterministic.items():
        np.testing.assert_allclose(blocked.deterministic[k], v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(post.log_likelihood(), ll, rtol=1e-5, atol=1e-5)
