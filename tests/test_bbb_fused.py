"""bbb's fused weight draw: the unrolled-threefry noise is jax.random.normal bit for bit, and
mc_weight_draw's closed-form gradient equals autodiff of the Monte-Carlo KL written out."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bnnpp import priors
from bnnpp.inference import variational_layers as vl


@pytest.mark.parametrize("shape", [(7,), (784, 400), (3, 3, 2, 5)])
def test_normal_noise_is_jax_random_normal_bit_for_bit(shape):
    """The same numbers as jax.random.normal for a raw uint32 key and a typed threefry key,
    eagerly, under jit, inside the once-only conditional and under vmap over keys."""
    for key in (jax.random.PRNGKey(3), jax.random.key(11)):
        expected = np.asarray(jax.random.normal(key, shape))
        np.testing.assert_array_equal(np.asarray(vl.normal_noise(key, shape)), expected)
        once = jax.jit(lambda k, s=shape: vl._noise_once(k, s, jnp.float32, jnp.float32(1.0)))
        np.testing.assert_array_equal(np.asarray(once(key)), expected)
    keys = jax.random.split(jax.random.PRNGKey(5), 3)
    batched = jax.vmap(lambda k: vl._noise_once(k, shape, jnp.float32, jnp.float32(-1.0)))(keys)
    np.testing.assert_array_equal(np.asarray(batched), np.asarray(jax.vmap(lambda k: jax.random.normal(k, shape))(keys)))


def test_normal_noise_falls_back_for_other_generators():
    key = jax.random.key(0, impl="rbg")
    np.testing.assert_array_equal(np.asarray(vl.normal_noise(key, (5, 4))), np.asarray(jax.random.normal(key, (5, 4))))
    np.testing.assert_array_equal(
        np.asarray(vl.normal_noise(jax.random.PRNGKey(0), (3,), jnp.bfloat16)),
        np.asarray(jax.random.normal(jax.random.PRNGKey(0), (3,), jnp.bfloat16)),
    )


def _written_out(log_prior, mu, rho, key):
    """The same draw and KL term under plain autodiff: σ = softplus(ρ), w = μ + σε,
    −Σ log σ − n/2 log(2πe) − Σ log p(w)."""
    sigma = jax.nn.softplus(rho)
    eps = jax.random.normal(key, mu.shape)
    w = mu + sigma * eps
    kl = -jnp.sum(jnp.log(sigma)) - 0.5 * mu.size * math.log(2 * math.pi * math.e) - jnp.sum(log_prior(w))
    return sigma, eps, w, kl


@pytest.mark.parametrize(
    "prior", [priors.scale_mixture(0.5, 1.0, math.exp(-6)), priors.laplace(0.3), priors.normal(0.7)], ids=lambda p: p.kind
)
def test_mc_weight_draw_matches_autodiff_of_the_written_out_kl(prior):
    """Values and the vector-Jacobian product for random cotangents of (σ, w, kl) agree with
    autodiff of the formula; ε is noise, so its cotangent is ignored by both. Tolerance: float32
    rounding of sums over 1,200 elements and of the mixture's log-density (rtol 1e-5)."""
    rng = np.random.default_rng(0)
    shape = (40, 30)
    mu = jnp.asarray(rng.normal(0, 0.2, shape), jnp.float32)
    rho = jnp.asarray(rng.normal(-4, 1.5, shape), jnp.float32)  # σ from ~1e-4 to ~0.3: both mixture components matter
    key = jax.random.PRNGKey(2)
    log_prior = lambda w: prior.log_prob(w, 1.0)
    fused = lambda m, r: vl.mc_weight_draw(log_prior, m, r, key)
    plain = lambda m, r: _written_out(log_prior, m, r, key)
    out_f, vjp_f = jax.vjp(fused, mu, rho)
    out_p, vjp_p = jax.vjp(plain, mu, rho)
    for a, b in zip(out_f, out_p, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    cot = (
        jnp.asarray(rng.normal(size=shape), jnp.float32),  # σ (used by the local estimator)
        jnp.zeros(shape, jnp.float32),  # ε
        jnp.asarray(rng.normal(size=shape), jnp.float32),  # w
        jnp.float32(0.37),  # kl
    )
    for a, b in zip(vjp_f(cot), vjp_p(cot), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5 * float(jnp.max(jnp.abs(b))))


def test_softplus_matches_float64():
    """bbb's series softplus is float32-accurate: within 3e-7 relative of log1p(exp(x)) in
    float64 (float32's rounding unit is 6e-8; ``jax.nn.softplus`` itself is off by 2e-7),
    over the whole range where the value is a normal float32, and 0, inf, nan at the ends."""
    x = jnp.linspace(-120.0, 120.0, 400_001, dtype=jnp.float32)
    got = np.asarray(vl.softplus(x), np.float64)
    ref = np.logaddexp(0.0, np.asarray(x, np.float64))
    normal = ref >= np.finfo(np.float32).tiny
    assert np.max(np.abs(got - ref)[normal] / ref[normal]) < 3e-7
    assert np.all(np.abs(got[~normal]) <= np.finfo(np.float32).tiny)  # e^x below float32's normal range: 0 or a denormal
    assert np.max(np.abs(got - np.asarray(jax.nn.softplus(x), np.float64))[normal] / ref[normal]) < 4e-7
    ends = np.asarray(vl.softplus(jnp.array([-jnp.inf, jnp.inf, jnp.nan], jnp.float32)))
    assert ends[0] == 0.0 and ends[1] == np.inf and np.isnan(ends[2])


@pytest.mark.slow  # four compiled programs: ~1 minute on 2 cores
def test_bbb_step_profile_quick(tmp_path):
    """The step-profile benchmark runs and finds the BBB step's weight noise and matmuls."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "studies" / "bbb_step_profile.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--quick", "--results", str(tmp_path)], check=False, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads((tmp_path / "bbb_step_profile.json").read_text())["rows"]
    assert rows["map"]["noise"] == 0.0 and rows["bbb (local)"]["noise"] > 0.0
    assert all(r["matmul"] > 0.0 and r["total_op_ms"] > 0.0 for r in rows.values())
