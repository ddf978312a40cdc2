"""The log joint of a NumPyro model on the unconstrained space, split into its prior and
likelihood parts — what the methods that drive their own updates (``map``, ``bbb``,
``sgld``) differentiate, and the building blocks for writing a new method.

A position ``u`` maps every latent site name to an unconstrained array; a site's value is
``biject_to(support)(u)`` (identity for weights, ``exp``/``softplus`` for scales), and the
prior part includes ``log |d value / d u|`` so that the density is the one of ``u``.
Observed sites form the likelihood part; callers scale it by ``N / batch`` for minibatches.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.flatten_util import ravel_pytree
from numpyro.distributions.transforms import biject_to

from bnnpp.introspection import latent_trace, probe_rows

__all__ = [
    "WIDE_START_INPUTS",
    "constrained_values",
    "full_gaussian_log_weights",
    "gaussian_log_weights",
    "glorot_limits",
    "init_glorot",
    "init_start",
    "init_uniform",
    "joint_terms",
    "latent_trace",
    "log_likelihood",
    "prior_diag",
    "site_log_prior",
]


def _site_log_prob(site) -> jnp.ndarray:
    lp = site["fn"].log_prob(site["value"])
    if site.get("scale") is not None:
        lp = site["scale"] * lp
    return jnp.sum(lp)


def site_log_prior(site) -> jnp.ndarray:
    """A latent site's log-density at its value plus, when it was set from an unconstrained
    value (``site["unconstrained"]``), the log-Jacobian ``log |d value / d u|``: the density
    of ``u``. Scalar."""
    lp = _site_log_prob(site)
    if "unconstrained" in site:
        t = biject_to(site["fn"].support)
        lp = lp + jnp.sum(t.log_abs_det_jacobian(site["unconstrained"], site["value"]))
    return lp


def log_likelihood(trace: dict) -> jnp.ndarray:
    """Sum of the observed sites' log-densities in trace ``trace`` (times a site's ``scale``), scalar."""
    total = jnp.zeros(())
    for site in trace.values():
        if site["type"] == "sample" and site["is_observed"]:
            total = total + _site_log_prob(site)
    return total


def joint_terms(model: Callable, u: dict, x, y, key, *, extra_handlers=()) -> tuple[jnp.ndarray, jnp.ndarray, dict]:
    """Prior and likelihood of ``model`` at the unconstrained position ``u``.

    Returns:
        ``(log_prior, log_likelihood, trace)``: ``log_prior`` sums every latent site's
        log-density plus the log-Jacobian of its transform (scalar); ``log_likelihood`` sums
        the observed sites' log-densities over the rows given (scalar, not rescaled).
    """
    trace = latent_trace(model, u, x, y, key, extra_handlers=extra_handlers)
    log_prior = jnp.zeros(())
    for site in trace.values():
        if site["type"] == "sample" and not site["is_observed"]:
            log_prior = log_prior + site_log_prior(site)
    return log_prior, log_likelihood(trace), trace


def init_uniform(shapes: dict[str, tuple[int, ...]], key, radius: float) -> dict[str, jnp.ndarray]:
    """Unconstrained start values uniform in ``(-radius, radius)`` (NumPyro's ``init_to_uniform``).

    Returns:
        site name → float array of the site's shape.
    """
    return init_glorot(shapes, key, radius, {}, frozenset())


def init_glorot(
    shapes: dict[str, tuple[int, ...]], key, radius: float, limits: dict[str, float], biases: frozenset
) -> dict[str, jnp.ndarray]:
    """Unconstrained start values as :func:`init_uniform`, except the weights of the network's
    layers, U(±limit) with ``limits[site] = sqrt(6 / (fan_in + fan_out))`` (Glorot & Bengio
    2010, eq. 16), and their biases, 0 (the sites in ``biases``). The same keys as
    :func:`init_uniform`, one per site in order.

    Returns:
        site name → float array of the site's shape.
    """
    keys = jax.random.split(key, max(1, len(shapes)))
    out = {}
    for k, (name, shape) in zip(keys, shapes.items(), strict=False):
        r = limits.get(name, radius)
        out[name] = jnp.zeros(shape) if name in biases else jax.random.uniform(k, shape, minval=-r, maxval=r)
    return out


def glorot_limits(layers: dict) -> tuple[dict[str, float], frozenset]:
    """``(limits, biases)`` for :func:`init_glorot` from :func:`bnnpp.inference.variational_layers.find_layers`'s
    layers: each layer's weight site → sqrt(6 / (fan_in + fan_out)), and its bias sites."""
    limits = {lay["sites"][0]: math.sqrt(6.0 / (lay["fan_in"] + lay["fan_out"])) for lay in layers.values()}
    return limits, frozenset(lay["sites"][1] for lay in layers.values() if len(lay["sites"]) > 1)


WIDE_START_INPUTS = 2
"""``init_loc="auto_wide"`` starts hierarchical layers U(±radius) only when the network's first
layer has at most this many inputs; with more, U(±radius/sqrt(fan_in)) as ``"auto"``. On one or
two inputs the wide start is what gives an ensemble's members their disagreement away from the
data (independent random starts, Lakshminarayanan et al. 2017) and mc_dropout a fit of a curved
boundary. On more standardised inputs U(±radius) in every layer starts the members' outputs many
targets' sds off the data (a first-layer pre-activation sd of about radius·sqrt(fan_in/3),
compounded by every later layer), and a hierarchical ensemble's members do not come back from
there. An empirical bound: the wide start's spread grows with the number of inputs, and 2 is the
largest count at which it still helps."""


def init_start(init_loc: str, layers: dict):
    """``init(shapes, key, radius) -> {site: value}`` for an ``init_loc`` option
    (:func:`bnnpp.inference.options.init_loc_option`), per layer of ``layers``
    (:attr:`~bnnpp.inference.model_info.ModelInfo.layers`):

    - ``"glorot"``: weights U(±sqrt(6 / (fan_in + fan_out))), biases 0;
    - ``"fan_in"``: weights and biases U(±radius / sqrt(fan_in)) (U(±radius) at one input);
    - ``"uniform"``: every site U(±radius);
    - ``"auto"``: glorot for layers whose prior has a fixed scale, fan_in for hierarchical ones;
    - ``"auto_wide"``: glorot for fixed-scale layers, uniform for hierarchical ones when the
      first layer has at most :data:`WIDE_START_INPUTS` inputs, else fan_in for them.

    Every other site (prior scales, noise, sites outside bnnpp layers) starts U(±radius); the
    keys are :func:`init_uniform`'s in every case."""

    def hierarchical(layer):
        return bool(getattr(layer.get("prior"), "hierarchical", False))

    few_inputs = bool(layers) and next(iter(layers.values()))["fan_in"] <= WIDE_START_INPUTS
    per_layer = {
        "glorot": lambda lay: "glorot",
        "fan_in": lambda lay: "fan_in",
        "uniform": lambda lay: "uniform",
        "auto": lambda lay: "fan_in" if hierarchical(lay) else "glorot",
        "auto_wide": lambda lay: ("uniform" if few_inputs else "fan_in") if hierarchical(lay) else "glorot",
    }
    if init_loc not in per_layer:
        raise ValueError(f"unknown init_loc {init_loc!r}; choose one of {', '.join(per_layer)}")
    kinds = {name: per_layer[init_loc](lay) for name, lay in layers.items()}

    def draw(shapes, key, radius):
        limits, biases = glorot_limits({k: v for k, v in layers.items() if kinds[k] == "glorot"})
        for name, lay in layers.items():
            if kinds[name] == "fan_in":
                limits |= dict.fromkeys(lay["sites"][:2], radius / math.sqrt(lay["fan_in"]))
        return init_glorot(shapes, key, radius, limits, biases)

    return draw


def constrained_values(model: Callable, u: dict, x, y, key, names) -> dict[str, jnp.ndarray]:
    """The constrained values of the latent sites ``names`` at unconstrained position ``u``."""
    trace = latent_trace(model, u, x, y, key)
    return {name: trace[name]["value"] for name in names}


def full_gaussian_log_weights(model: Callable, mean: dict, factor, fixed: dict, x, y, num_draws: int, seed: int = 0):
    """Importance log-weights log p(u, y) − log q(u) (up to one constant) of a Gaussian q =
    N(mean, C Cᵀ) on the unconstrained space of the sites in ``mean`` (flattened with
    ``ravel_pytree``; ``factor`` C ``(P, P)``), the sites in ``fixed`` held at their values:
    draws u = mean + C z, z ~ N(0, I), and log q(u) = −‖z‖²/2 + const (Yao et al. 2018, §2).

    Returns:
        numpy float64 array ``(S,)``."""
    flat, unravel = ravel_pytree(mean)
    factor = jnp.asarray(factor, flat.dtype)

    def weights(keys, flat, factor, fixed, x, y):
        def one(key):
            k_z, k_m = jax.random.split(key)
            z = jax.random.normal(k_z, flat.shape, flat.dtype)
            lp, ll, _ = joint_terms(model, {**fixed, **unravel(flat + factor @ z)}, x, y, k_m)
            return lp + ll + 0.5 * jnp.sum(z**2)

        return jax.lax.map(one, keys, batch_size=100)

    keys = jax.random.split(jax.random.PRNGKey(seed), num_draws)
    return np.asarray(jax.jit(weights)(keys, flat, factor, fixed, x, y), dtype=np.float64)


def gaussian_log_weights(model: Callable, loc: dict, scale: dict, x, y, num_draws: int, seed: int = 0):
    """Importance log-weights log p(u, y) − log q(u) of a mean-field Gaussian q on the
    unconstrained space, for PSIS (Yao, Vehtari, Simpson & Gelman 2018, §2).

    Args:
        model: the NumPyro model.
        loc, scale: site name → mean and sd of q's factor on the site's unconstrained space (sd 0:
            the coordinate is held at its mean).
        x, y: the full training data (the likelihood is not rescaled).
        num_draws: S, draws from q.
        seed: PRNG seed of the draws.

    Returns:
        numpy float64 array ``(S,)``.
    """
    names = tuple(loc)

    def weights(keys, loc, scale, x, y):
        # q's parameters and the data are arguments, not constants baked into the program
        def one(key):
            k_u, k_m = jax.random.split(key)
            ks = jax.random.split(k_u, len(names))
            u = {n: loc[n] + scale[n] * jax.random.normal(k, jnp.shape(loc[n])) for n, k in zip(names, ks, strict=True)}
            # a zero sd is a coordinate q holds fixed (e.g. advi/bbb's evidence-held scales): it stays at its
            # mean and adds nothing to log q, so the weights are those of q given the held values
            log_q = sum(
                jnp.sum(jnp.where(scale[n] > 0, dist.Normal(loc[n], jnp.where(scale[n] > 0, scale[n], 1.0)).log_prob(u[n]), 0.0))
                for n in names
            )
            lp, ll, _ = joint_terms(model, u, x, y, k_m)
            return lp + ll - log_q

        # vmapped in batches of 100 draws: bounded memory on large data sets
        return jax.lax.map(one, keys, batch_size=100)

    keys = jax.random.split(jax.random.PRNGKey(seed), num_draws)
    return np.asarray(jax.jit(weights)(keys, loc, scale, x, y), dtype=np.float64)


def prior_diag(model: Callable, theta: dict, hyper: dict, x, y, key) -> dict:
    """−diag ∂²/∂θ² log p(θ | h) per site of ``theta`` (same shapes): the prior's precision at
    the unconstrained ``theta`` and the other latent sites ``hyper``, as the Hessian-vector
    product with ones — exact for the factorised priors of :mod:`bnnpp.priors` (their Hessian
    in θ is diagonal). The model runs on one row of ``x``/``y`` (``y`` may be ``None``)."""

    def log_prior(th):
        return joint_terms(model, {**th, **hyper}, *probe_rows(model, x, y), key)[0]

    _, hvp = jax.jvp(jax.grad(log_prior), (theta,), (jax.tree_util.tree_map(jnp.ones_like, theta),))
    return jax.tree_util.tree_map(jnp.negative, hvp)
