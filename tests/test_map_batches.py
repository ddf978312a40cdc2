"""MAP with minibatches: on a linear-Gaussian model the mode is ridge regression in closed
form; minibatch steps (likelihood scaled by N/B, reshuffled each epoch on the device) with a
decaying step size must land on it, as full-batch steps do."""

from __future__ import annotations

import numpy as np
import optax
import pytest

import bnnpp
from bnnpp import models, priors


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3)).astype(np.float32)
    y = (x @ np.array([1.5, -2.0, 0.5]) + 0.3 + rng.normal(size=200)).astype(np.float32)
    return x, y


def test_minibatch_map_reaches_the_ridge_solution():
    x, y = _data()
    model = models.mlp((), standardize=False, likelihood="gaussian", noise=1.0, prior=priors.normal(1.0))
    # log joint = −½‖y − Xw − b‖² − ½‖w‖² − ½b² + const: mode (AᵀA + I)⁻¹ Aᵀy with A = [X, 1]
    a = np.c_[x, np.ones(len(x))].astype(np.float64)
    exact = np.linalg.solve(a.T @ a + np.eye(4), a.T @ y)
    opt = optax.adam(optax.exponential_decay(0.05, transition_steps=4000, decay_rate=1e-3))
    post = bnnpp.fit(model, (x, y), method="map", seed=0, progress=False, num_steps=4000, batch_size=50, optimizer=opt)
    assert post.info["num_batches"] == 4
    got = np.r_[post.samples["dense_0.w"][0, 0, :, 0], post.samples["dense_0.b"][0, 0]]
    # measured 1.6e-5 from the mode (full batch: 1.4e-7); 1e-3 leaves room for other seeds/CPUs
    np.testing.assert_allclose(got, exact, atol=1e-3)


def test_batch_size_checks():
    x, y = _data()
    model = models.mlp((), standardize=False, likelihood="gaussian", noise=1.0)
    with pytest.raises(ValueError, match="batch_size 500 is larger than the 200 training rows"):
        bnnpp.fit(model, (x, y), method="map", batch_size=500)
    with pytest.raises(ValueError, match="batch_size must be an integer"):
        bnnpp.fit(model, (x, y), method="map", batch_size=0)
