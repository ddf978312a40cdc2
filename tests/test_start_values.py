"""The start values of the point-estimate methods (``init_loc``): Glorot-scaled layer weights
for fixed-scale priors, U(±init_radius) under hierarchical priors and for ``"uniform"``."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest

import bnnpp
from bnnpp import priors
from bnnpp.inference import map_estimate


def _start(model, x, y, **options):
    alg = map_estimate.build(model, x, y, map_estimate.MAPOptions(**options))
    state = alg.init(jax.random.PRNGKey(0), (x, y))
    return {k: np.asarray(v) for k, v in state.position.items()}


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(16, 30)).astype(np.float32), rng.normal(size=16).astype(np.float32)


def test_fixed_scale_prior_starts_glorot_and_biases_at_zero(data):
    x, y = data
    net = bnnpp.models.mlp((20,), activation="tanh", likelihood="gaussian", noise=None, prior=priors.normal(1.0), standardize=False)
    u = _start(net, x, y)  # the default, "auto"
    w1, w2 = (k for k in u if k.endswith(".w"))
    assert np.abs(u[w1]).max() <= math.sqrt(6 / (30 + 20)) and np.abs(u[w1]).max() > 0.8 * math.sqrt(6 / 50)
    assert np.abs(u[w2]).max() <= math.sqrt(6 / (20 + 1))
    assert all(np.all(u[k] == 0) for k in u if k.endswith(".b"))
    noise = [k for k in u if not k.endswith((".w", ".b"))]
    assert noise and all(np.abs(u[k]).max() <= 2.0 for k in noise)  # other sites U(±init_radius)
    np.testing.assert_array_equal(_start(net, x, y, init_loc="glorot")[w1], u[w1])


def test_hierarchical_prior_starts_fan_in_scaled_and_auto_wide_as_uniform_on_few_inputs(data):
    x, y = data
    hier = bnnpp.models.mlp((20,), activation="tanh", likelihood="gaussian", noise=None,
                            prior=priors.normal(scale=priors.inverse_gamma(1.0, 1.0)), standardize=False)
    auto, wide, uniform = _start(hier, x, y), _start(hier, x, y, init_loc="auto_wide"), _start(hier, x, y, init_loc="uniform")
    for k in uniform:  # 30 inputs (> WIDE_START_INPUTS): auto_wide is auto's fan_in start, the same draws
        np.testing.assert_array_equal(wide[k], auto[k])
    for columns in (1, 2):  # few inputs: auto_wide leaves hierarchical layers at U(±2), the very same draws as "uniform"
        few_wide, few_uniform = _start(hier, x[:, :columns], y, init_loc="auto_wide"), _start(hier, x[:, :columns], y, init_loc="uniform")
        for k in few_uniform:
            np.testing.assert_array_equal(few_wide[k], few_uniform[k])
    x3 = x[:, :3]
    np.testing.assert_array_equal(_start(hier, x3, y, init_loc="auto_wide")["dense_1.w"], _start(hier, x3, y)["dense_1.w"])
    w1, b1, w2 = (k for k in auto if k.endswith((".w", ".b")) and not k.endswith("1.b"))
    assert np.abs(uniform[w1]).max() > 1.5  # U(±2)
    # auto: weights and biases U(±2/sqrt(fan_in)): the same uniform draws, scaled
    np.testing.assert_allclose(auto[w1], uniform[w1] / math.sqrt(30), rtol=1e-6)
    np.testing.assert_allclose(auto[b1], uniform[b1] / math.sqrt(30), rtol=1e-6)
    np.testing.assert_allclose(auto[w2], uniform[w2] / math.sqrt(20), rtol=1e-6)
    scales = [k for k in auto if not k.endswith((".w", ".b"))]
    assert scales and all(np.array_equal(auto[k], uniform[k]) for k in scales)  # other sites U(±2)
    assert bnnpp.inference.get_method("ensemble").options().init_loc == "auto_wide"
    assert bnnpp.inference.get_method("map").options().init_loc == "auto"


def test_init_loc_is_checked(data):
    with pytest.raises(ValueError, match="init_loc"):
        map_estimate.MAPOptions(init_loc="he")
