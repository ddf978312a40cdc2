"""Models whose latent sizes follow the data's rows (one effect per group, one step per time
point), written as NumPyro's examples write them: every method traces them on the rows that
give the latents their shapes, refuses minibatches and predictions at other row counts in one
line, and the exact methods recover a closed-form posterior with per-group latents.

Closed form: J groups, θ_j ~ N(μ₀, τ²) independently, y_j | θ_j ~ N(θ_j, σ_j²) with known σ_j:
θ_j | y_j ~ N(m_j, s_j²), s_j² = 1 / (1/τ² + 1/σ_j²), m_j = s_j² (μ₀/τ² + y_j/σ_j²) (Gelman et
al., Bayesian Data Analysis, 3rd ed., eq. 2.12). The posterior factorises, so mean-field ADVI's
optimum and Laplace's approximation are exact too.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import bnnpp
from bnnpp.inference.collapse import probes_apply
from bnnpp.introspection import probe_rows, row_latents, shape_rows

# eight schools (Rubin 1981): estimated effects and their standard errors
Y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0], np.float32)
SIGMA = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0], np.float32)
MU0, TAU = 5.0, 10.0


def schools_plate(sigma, y=None):
    """Eight schools as NumPyro's examples write it: the plate's size is the data's length."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("J", len(sigma)):
        theta = numpyro.sample("theta", dist.Normal(mu, tau))
        numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)


def schools_expand(sigma, y=None):
    """The same model with the effects as one vector site (``expand([J]).to_event(1)``)."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    theta = numpyro.sample("theta", dist.Normal(mu, tau).expand([sigma.shape[0]]).to_event(1))
    numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)


def groups_known_scale(sigma, y=None):
    """The conjugate case: known μ₀ and τ, one effect per row."""
    with numpyro.plate("J", sigma.shape[0]):
        theta = numpyro.sample("theta", dist.Normal(MU0, TAU))
        numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)


def closed_form():
    var = 1.0 / (1.0 / TAU**2 + 1.0 / SIGMA.astype(np.float64) ** 2)
    return var * (MU0 / TAU**2 + Y / SIGMA.astype(np.float64) ** 2), np.sqrt(var)


def test_shape_rows_tells_networks_from_per_row_latents():
    x = np.zeros((5, 3), np.float32)
    net = bnnpp.models.mlp(hidden=(4,), likelihood="gaussian")
    assert shape_rows(net, x, np.zeros(5, np.float32)) == 1
    assert row_latents(net, x, np.zeros(5, np.float32)) == ()
    assert shape_rows(schools_plate, SIGMA, Y) == 8
    assert row_latents(schools_expand, SIGMA, Y) == ("theta",)
    xs, ys = probe_rows(schools_plate, SIGMA, Y)
    assert xs.shape == (8,) and ys.shape == (8,)


@pytest.mark.parametrize("model", [schools_plate, schools_expand], ids=["plate", "expand"])
@pytest.mark.parametrize("method", ["advi", "map", "mclmc"])
def test_eight_schools_site_shapes(model, method):
    """advi traced the plate form on one row and returned one school; mclmc's start probe ran
    the model on zeros, which the plate form uses as a scale."""
    from bnnpp.inference.registry import get_method

    post = bnnpp.fit(model, (SIGMA, Y), method=method, seed=0, progress=False, **get_method(method).smoke)
    assert post.samples["theta"].shape[2:] == (8,)
    assert post.samples["mu"].shape[2:] == ()
    assert post.predict(SIGMA).mean.shape == (8,)
    assert not probes_apply(post)  # no network: the over-confidence and collapse checks stay silent


def test_minibatches_and_other_row_counts_refused():
    with pytest.raises(ValueError, match=r"theta take their size from the 8 rows of x.*batch_size=None"):
        bnnpp.fit(schools_plate, (SIGMA, Y), method="map", num_steps=10, batch_size=4, progress=False)
    with pytest.raises(ValueError, match=r"take their size from the 8 rows.*swag would fit minibatches of 4 rows"):
        bnnpp.fit(schools_plate, (SIGMA, Y), method="swag", pretrain_steps=5, swag_epochs=2, progress=False)
    post = bnnpp.fit(schools_plate, (SIGMA, Y), method="map", num_steps=50, progress=False)
    assert post.row_latents() == ("theta",)
    with pytest.raises(ValueError, match=r"'theta' has shape \(8,\).*\(3,\) at these 3 rows"):
        post.predict(SIGMA[:3])


@pytest.mark.parametrize(
    "method, options, tol",
    [
        # mean-field q of a factorised Gaussian posterior: exact at the optimum; 20k steps of Adam reach it
        ("advi", {"num_steps": 20_000, "num_samples": 4000, "learning_rate": 0.01}, 0.05),
        # the posterior is Gaussian: the Laplace approximation at the MAP is exact
        ("laplace", {"num_steps": 3000, "num_samples": 4000, "learning_rate": 0.05}, 0.05),
        # 4 chains x 1000 draws: Monte Carlo error of a mean about 0.02 sd (ESS > 2000), of an sd about 2%
        ("nuts", {"num_chains": 4, "num_warmup": 500, "num_samples": 1000}, 0.1),
    ],
)
def test_per_group_posterior_closed_form(method, options, tol):
    """Mean and sd of every θ_j against the closed form: standardised error of the means (in
    posterior sds) and the ratio of the sds; ``tol`` covers the Monte Carlo error of
    4,000 draws (0.016 sd for independent draws) with room for the sampler's autocorrelation."""
    mean, sd = closed_form()
    post = bnnpp.fit(groups_known_scale, (SIGMA, Y), method=method, seed=0, progress=False, **options)
    theta = np.asarray(post.samples["theta"], np.float64).reshape(-1, 8)
    z = (theta.mean(axis=0) - mean) / sd
    assert np.mean(z**2) < tol**2, (z, theta.mean(axis=0), mean)
    np.testing.assert_allclose(theta.std(axis=0) / sd, 1.0, atol=2 * tol)


T = 60
_rng = np.random.default_rng(0)
RETURNS = (_rng.normal(size=T) * np.exp(np.cumsum(_rng.normal(0.0, 0.2, T)) / 2 - 0.5)).astype(np.float32)


def stochastic_volatility(t, y=None):
    """A stochastic-volatility model (NumPyro's ``examples/stochastic_volatility.py``): one
    log-volatility per time point, a Gaussian random walk as long as the series."""
    sigma = numpyro.sample("sigma", dist.Exponential(10.0))
    nu = numpyro.sample("nu", dist.Exponential(0.1))
    s = numpyro.sample("s", dist.GaussianRandomWalk(scale=sigma, num_steps=t.shape[0]))
    numpyro.sample("r", dist.StudentT(nu + 2.0, 0.0, jnp.exp(s)), obs=y)


PER_ROW = {
    "schools_plate": (schools_plate, SIGMA, Y, "theta", (8,)),
    "schools_expand": (schools_expand, SIGMA, Y, "theta", (8,)),
    "stochastic_volatility": (stochastic_volatility, np.arange(T, dtype=np.float32), RETURNS, "s", (T,)),
}


@pytest.mark.slow
@pytest.mark.parametrize("problem", sorted(PER_ROW))
def test_every_method_per_row_latents(problem):
    """Every registered method, at its smoke settings: the per-row site comes back with the
    model's shape, or the fit is refused with a one-line error (mc_dropout and vd need bnnpp
    layers; swag and multiswag fit minibatches; laplace's GGN needs a Normal observation)."""
    from bnnpp.inference.registry import get_method, registered

    model, x, y, site, shape = PER_ROW[problem]
    fitted, refused = [], []
    for method in registered():
        try:
            post = bnnpp.fit(model, (x, y), method=method, seed=0, progress=False, **get_method(method).smoke)
        except ValueError as e:
            assert "\n" not in str(e), (method, str(e))
            refused.append(method)
            continue
        assert post.samples[site].shape[2:] == shape, method
        fitted.append(method)
    assert {"advi", "bbb", "map", "ensemble", "nuts", "sgld"} <= set(fitted), (fitted, refused)


@pytest.mark.parametrize("include_data", [True, False])
def test_per_row_posterior_saves_and_loads(tmp_path, include_data):
    """A saved eight-schools posterior reloads against its model (with or without its training
    rows), predicts the same, and refuses another row count."""
    post = bnnpp.fit(schools_plate, (SIGMA, Y), method="map", num_steps=50, progress=False)
    path = tmp_path / "schools.nc"
    post.save(path, include_data=include_data)
    again = bnnpp.load(path, model=schools_plate)
    assert again.samples["theta"].shape[2:] == (8,) and again.row_latents(SIGMA) == ("theta",)
    np.testing.assert_array_equal(again.predict(SIGMA).mean, post.predict(SIGMA).mean)
    with pytest.raises(ValueError, match="as many rows as the fit"):
        again.predict(SIGMA[:4])
