"""The learned noise sd's start under ``hyperparameters="evidence"`` (``bnnpp.inference.evidence.hyper_start``):
1 in the targets' units, kept within 0.1–1 of the targets' sd, so targets in the hundreds or thousands do not start
the evidence three orders of magnitude below their noise (where its Adam stalled: ``benchmarks/README.md``,
multi-input problems)."""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import bnnpp
from bnnpp import priors
from bnnpp.inference.evidence import NOISE_START, evidence_plan, hyper_start
from bnnpp.models.scaling import bind_scaling

HIERARCHICAL = priors.normal(scale=priors.inverse_gamma(1.0, 1.0))


def _data(n: int, scale: float, seed: int = 0):
    """``n`` rows, x ~ U[−1, 1], y = scale · (sin(3x) + 0.3 ε): the noise sd is 0.3 · scale."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, 1)).astype(np.float32)
    y = (scale * (np.sin(3 * x[:, 0]) + 0.3 * rng.normal(size=n))).astype(np.float32)
    return x, y


@pytest.mark.parametrize("scale", [1e-3, 1.0, 3.0, 1e3])
def test_the_noise_starts_at_one_target_unit_within_the_band(scale):
    """Start (constrained) = clip(1, 0.1·s, 1·s) for the noise prior's scale s = the targets' sd (noise_scale 1);
    the layer variances start at 1 (unconstrained 0)."""
    x, y = _data(40, scale)
    model = bind_scaling(bnnpp.models.mlp((8,), activation="tanh", likelihood="gaussian", noise=None, prior=HIERARCHICAL), x, y)
    plan = evidence_plan(model, x, y, required=True)
    start = hyper_start(model, plan, x, y)
    s = float(np.std(y))  # the model's target scale: the training targets' sd
    want = min(max(1.0, NOISE_START[0] * s), NOISE_START[1] * s)
    assert float(jnp.exp(start["noise"])) == pytest.approx(want, rel=1e-3)
    assert all(float(jnp.max(jnp.abs(v))) == 0.0 for k, v in start.items() if k != "noise")


def test_map_learns_the_noise_of_targets_in_the_thousands():
    """60 rows, targets of sd ~ 700 with a noise sd of 300: map's evidence-trained noise lands within 0.6–1.6× of it
    (a 60-point estimate's sd is ~10%, the fit's residual is the rest). From the unbounded start (a noise sd of 1,
    0.0014 of the targets' sd) it was still 1.0 after the default 5,000 steps."""
    x, y = _data(60, 1000.0)
    model = bnnpp.models.mlp((20,), activation="tanh", likelihood="gaussian", noise=None, prior=HIERARCHICAL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = bnnpp.fit(model, (x, y), method="map", seed=0, progress=False)
    noise = float(np.mean(post.predict(x).noise))
    assert 0.6 * 300 < noise < 1.6 * 300, noise
