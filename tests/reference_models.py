"""Six textbook NumPyro models with data, whose latent sizes follow the data's shapes, for testing
bnnpp's samplers against reference posterior moments computed by plain NumPyro
(``benchmarks/reference_posteriors.py`` → ``tests/data/reference_posteriors.json``).

Every model has the signature ``model(x, y=None)`` and observes its targets at exactly one sample
site, ``obs``. Latent sizes come from ``x.shape`` or module constants, never from x's values.
``PROBLEMS = {name: (model, x, y)}``; x and y are float32 numpy arrays with the same number of rows.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

# --------------------------------------------------------------------------- eight schools

SCHOOLS_Y = np.array([28, 8, -3, 7, -1, 1, 18, 12], dtype=np.float32)
SCHOOLS_SIGMA = np.array([15, 10, 16, 11, 9, 11, 10, 18], dtype=np.float32)


def schools_plate(x, y=None):
    """Centred eight schools with a plate: mu ~ N(0, 5), tau ~ HalfCauchy(5), theta ~ N(mu, tau), obs ~ N(theta, x)."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("J", x.shape[0]):
        theta = numpyro.sample("theta", dist.Normal(mu, tau))
        numpyro.sample("obs", dist.Normal(theta, x), obs=y)


def schools_expand(x, y=None):
    """Centred eight schools without a plate: theta ~ Normal(mu, tau).expand([J]).to_event(1)."""
    J = x.shape[0]
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    theta = numpyro.sample("theta", dist.Normal(mu, tau).expand([J]).to_event(1))
    numpyro.sample("obs", dist.Normal(theta, x), obs=y)  # one log-density per school, as bnnpp needs


# --------------------------------------------------------------------------- funnel

FUNNEL_J = 10
FUNNEL_V = -1.0
FUNNEL_OBS_SD = 2.0


def funnel(x, y=None):
    """Centred Neal's funnel with data: v ~ N(0, 3), theta_j ~ N(0, exp(v/2)), obs_j ~ N(theta_j, x_j)."""
    v = numpyro.sample("v", dist.Normal(0.0, 3.0))
    with numpyro.plate("J", x.shape[0]):
        theta = numpyro.sample("theta", dist.Normal(0.0, jnp.exp(v / 2)))
        numpyro.sample("obs", dist.Normal(theta, x), obs=y)


def _funnel_data():
    rng = np.random.default_rng(20240601)
    x = np.full((FUNNEL_J,), FUNNEL_OBS_SD, dtype=np.float32)
    theta = rng.normal(0.0, np.exp(FUNNEL_V / 2), size=FUNNEL_J)
    y = (theta + x * rng.normal(size=FUNNEL_J)).astype(np.float32)
    return x, y


# --------------------------------------------------------------------------- local level, missing data

RW_T = 50
RW_N_MISSING = 10
RW_SIGMA_LEVEL = 0.3
RW_SIGMA_OBS = 0.5


def random_walk_missing(x, y=None):
    """Local-level model with 10 masked (missing) points: level ~ GaussianRandomWalk(sigma_level), obs ~ N(level, sigma_obs)."""
    T = x.shape[0]
    sigma_level = numpyro.sample("sigma_level", dist.HalfNormal(1.0))
    sigma_obs = numpyro.sample("sigma_obs", dist.HalfNormal(1.0))
    level = numpyro.sample("level", dist.GaussianRandomWalk(scale=sigma_level, num_steps=T))
    with numpyro.plate("time", T), numpyro.handlers.mask(mask=x[:, 1] > 0):
        numpyro.sample("obs", dist.Normal(level, sigma_obs), obs=y)


def _random_walk_data():
    rng = np.random.default_rng(20240602)
    level = np.cumsum(rng.normal(0.0, RW_SIGMA_LEVEL, size=RW_T))
    y = level + rng.normal(0.0, RW_SIGMA_OBS, size=RW_T)
    missing = np.sort(rng.choice(RW_T, size=RW_N_MISSING, replace=False))
    observed = np.ones(RW_T)
    observed[missing] = 0.0
    y[missing] = 0.0
    x = np.stack([np.arange(RW_T), observed], axis=1).astype(np.float32)
    return x, y.astype(np.float32)


# --------------------------------------------------------------------------- Rasch item response

N_STUDENTS = 20
N_ITEMS = 10
RASCH_SIGMA_D = 1.0


def irt_rasch(x, y=None):
    """Rasch model: ability ~ N(0, 1), difficulty ~ N(0, sigma_d), obs ~ Bernoulli(logits=ability[s] - difficulty[i])."""
    sigma_d = numpyro.sample("sigma_d", dist.HalfNormal(1.0))
    with numpyro.plate("students", N_STUDENTS):
        ability = numpyro.sample("ability", dist.Normal(0.0, 1.0))
    with numpyro.plate("items", N_ITEMS):
        difficulty = numpyro.sample("difficulty", dist.Normal(0.0, sigma_d))
    student = x[:, 0].astype(jnp.int32)
    item = x[:, 1].astype(jnp.int32)
    with numpyro.plate("responses", x.shape[0]):
        numpyro.sample("obs", dist.Bernoulli(logits=ability[student] - difficulty[item]), obs=y)


def _rasch_data():
    rng = np.random.default_rng(20240603)
    ability = rng.normal(0.0, 1.0, size=N_STUDENTS)
    difficulty = rng.normal(0.0, RASCH_SIGMA_D, size=N_ITEMS)
    student, item = (a.ravel() for a in np.meshgrid(np.arange(N_STUDENTS), np.arange(N_ITEMS), indexing="ij"))
    p = 1.0 / (1.0 + np.exp(-(ability[student] - difficulty[item])))
    y = (rng.uniform(size=p.shape) < p).astype(np.float32)
    x = np.stack([student, item], axis=1).astype(np.float32)
    return x, y


# --------------------------------------------------------------------------- stochastic volatility

SV_T = 100
SV_SIGMA = 0.15
SV_NU = 8.0


def stochastic_volatility(x, y=None):
    """Stochastic volatility: sigma ~ Exp(10), nu ~ Exp(0.1), s ~ GaussianRandomWalk(sigma), obs ~ StudentT(nu + 2, 0, exp(s))."""
    T = x.shape[0]
    sigma = numpyro.sample("sigma", dist.Exponential(10.0))
    nu = numpyro.sample("nu", dist.Exponential(0.1))
    s = numpyro.sample("s", dist.GaussianRandomWalk(scale=sigma, num_steps=T))
    with numpyro.plate("time", T):
        numpyro.sample("obs", dist.StudentT(nu + 2.0, 0.0, jnp.exp(s)), obs=y)


def _sv_data():
    rng = np.random.default_rng(20240604)
    s = np.cumsum(rng.normal(0.0, SV_SIGMA, size=SV_T))
    r = rng.standard_t(SV_NU + 2.0, size=SV_T) * np.exp(s)
    return np.arange(SV_T, dtype=np.float32), r.astype(np.float32)


# --------------------------------------------------------------------------- registry

PROBLEMS = {
    "schools_plate": (schools_plate, SCHOOLS_SIGMA.copy(), SCHOOLS_Y.copy()),
    "schools_expand": (schools_expand, SCHOOLS_SIGMA.copy(), SCHOOLS_Y.copy()),
    "funnel": (funnel, *_funnel_data()),
    "random_walk_missing": (random_walk_missing, *_random_walk_data()),
    "irt_rasch": (irt_rasch, *_rasch_data()),
    "stochastic_volatility": (stochastic_volatility, *_sv_data()),
}
"""Problem name → ``(model, x, y)``; ``model(x, y)`` fits, ``model(x, None)`` predicts."""
