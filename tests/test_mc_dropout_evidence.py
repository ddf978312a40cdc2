"""MC dropout under a hierarchical prior: the layer scales and the noise sd by the evidence at the
means (``hyperparameters="auto"``), not as point estimates of the objective, whose optimum under
``N(0, s²)`` with a learned ``s`` is the spike at s → 0 where every weight is zero and the mean flat
(UCI yacht: R² 0.00; benchmarks/README.md, mc_dropout under hierarchical priors)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import bnnpp
from bnnpp import priors
from bnnpp.inference.collapse import CollapseWarning


def _six_inputs(n=120, seed=0):
    """120 rows of 6 standard-normal inputs, a smooth function of four of them plus noise of sd 0.1."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    y = (np.sin(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2] + np.exp(0.5 * x[:, 3]) + 0.1 * rng.normal(size=n)).astype(np.float32)
    return x, y


def _fit(**options):
    # 6 inputs: the fan_in start of init_loc="auto_wide" (on 1 input its wide U(±2) start fits even as point estimates)
    x, y = _six_inputs()
    model = bnnpp.models.mlp((20,), activation="tanh", likelihood="gaussian", noise=None, prior=priors.normal(priors.half_normal(1.0)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        post = bnnpp.fit(model, (x, y), method="mc_dropout", seed=0, progress=False, num_steps=1500, num_samples=50, **options)
    r2 = 1.0 - float(np.mean((post.predict(x).mean - y) ** 2) / np.var(y))
    return post, r2, [w for w in caught if issubclass(w.category, CollapseWarning)]


def test_the_default_learns_the_scales_by_evidence_where_their_point_estimate_collapses():
    post, r2, collapsed = _fit()
    # measured 0.92 (the dropout predictive's mean on the training rows; 0.87 with 50 ReLU units)
    assert r2 > 0.8 and not collapsed
    assert float(np.min(post.samples["dense_0.scale"])) > 0.1  # measured 0.78
    # the former default, the scales as point estimates of the dropout objective: every scale and weight shrinks
    # to zero and the mean is flat (the collapse line stays quiet here: on 120 rows of 6 inputs the nearest-neighbour
    # noise estimate is near the targets' sd, so it sees no structure to miss)
    post_map, r2_map, _ = _fit(hyperparameters="map")
    assert r2_map < 0.1  # measured 0.000
    assert float(np.max(post_map.samples["dense_0.scale"])) < 1e-2  # measured 4.6e-4


def test_evidence_on_a_model_with_nothing_to_learn_is_a_one_line_error():
    x, y = _six_inputs()
    model = bnnpp.models.mlp((8,), likelihood="gaussian", noise=0.3, prior=priors.normal(1.0))
    with pytest.raises(ValueError, match="hyperparameters='evidence'.*use hyperparameters='map'"):
        bnnpp.fit(model, (x, y), method="mc_dropout", hyperparameters="evidence", num_steps=10, progress=False)


def test_small_hierarchical_regression_says_mc_dropout_does_not_suit_it():
    """Issue 35: a method that misses on small data under a hierarchical prior says so in one line after the fit
    (benchmarks/README.md, mc_dropout under hierarchical priors: test NLL 1.23–1.96× NUTS's)."""
    from bnnpp.inference.collapse import SMALL_DATA_ROWS, SUITABILITY_KEY

    x, y = _six_inputs(n=SMALL_DATA_ROWS + 40)
    model = bnnpp.models.mlp((8,), likelihood="gaussian", noise=None, prior=priors.normal(priors.half_normal(1.0)))
    said = {}
    for rows in (40, SMALL_DATA_ROWS + 40):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            post = bnnpp.fit(model, (x[:rows], y[:rows]), method="mc_dropout", seed=0, progress=False, num_steps=50, num_samples=5)
        said[rows] = [
            str(w.message) for w in caught if "not suited" in str(w.message) or "mc_dropout under a hierarchical" in str(w.message)
        ]
        assert (SUITABILITY_KEY in post.stats.extras) == (rows == 40)
    assert len(said[40]) == 1 and "\n" not in said[40][0] and "method='laplace'" in said[40][0]
    assert said[SMALL_DATA_ROWS + 40] == []
