"""benchmarks/sinusoid_mixture_q.py: the implicit reparameterisation of a per-weight
two-component Gaussian mixture against closed-form moments and their gradients."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _module():
    """The benchmark script as a module (benchmarks/ is not a package; it imports _common)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location("sinusoid_mixture_q", BENCHMARKS / "sinusoid_mixture_q.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(BENCHMARKS))


PARAMS = {"loc1": jnp.array(0.7), "rho1": jnp.array(-1.0), "loc2": jnp.array(-0.4), "rho2": jnp.array(0.3), "logit": jnp.array(0.5)}


def _exact_second_moment(p):
    """E_q[w²] = Σ_k φ_k (μ_k² + σ_k²) for q = φ·N(μ1, σ1²) + (1 − φ)·N(μ2, σ2²)."""
    phi = jax.nn.sigmoid(p["logit"])
    s1, s2 = jax.nn.softplus(p["rho1"]), jax.nn.softplus(p["rho2"])
    return phi * (p["loc1"] ** 2 + s1**2) + (1 - phi) * (p["loc2"] ** 2 + s2**2)


def test_mixture_draws_have_the_mixtures_moments():
    mod = _module()
    n = 200_000
    w = np.asarray(jax.vmap(lambda k: mod._draw(k, PARAMS, "mixture"))(jax.random.split(jax.random.PRNGKey(0), n)))
    phi = float(jax.nn.sigmoid(PARAMS["logit"]))
    mean = phi * 0.7 + (1 - phi) * -0.4
    second = float(_exact_second_moment(PARAMS))
    # 5 standard errors of the sample mean and of the sample second moment (n = 200,000 draws)
    assert abs(w.mean() - mean) < 5 * w.std() / np.sqrt(n)
    assert abs((w**2).mean() - second) < 5 * (w**2).std() / np.sqrt(n)


def test_implicit_gradient_is_unbiased_for_every_parameter():
    """The per-draw gradient of w² through the implicit reparameterisation, averaged over
    200,000 draws, matches the exact gradient of E_q[w²] within 5 standard errors, for the
    means, the ρs and the mixing logit (the discrete component choice has no pathwise gradient;
    the implicit one must still be unbiased for φ)."""
    mod = _module()
    n = 200_000
    per_draw = jax.vmap(jax.grad(lambda p, k: mod._draw(k, p, "mixture") ** 2), in_axes=(None, 0))(
        PARAMS, jax.random.split(jax.random.PRNGKey(1), n))
    exact = jax.grad(_exact_second_moment)(PARAMS)
    for name, g in per_draw.items():
        g = np.asarray(g, np.float64)
        assert abs(g.mean() - float(exact[name])) < 5 * g.std() / np.sqrt(n), name


def test_gaussian_family_is_the_plain_reparameterisation():
    mod = _module()
    key = jax.random.PRNGKey(2)
    w = mod._draw(key, PARAMS, "gaussian")
    eps = jax.random.normal(jax.random.split(key)[0], ())
    np.testing.assert_allclose(float(w), float(PARAMS["loc1"] + jax.nn.softplus(PARAMS["rho1"]) * eps), rtol=1e-6)
