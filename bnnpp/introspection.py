"""What a NumPyro model is made of, found by abstract tracing (``jax.eval_shape``: nothing
is compiled or run): its latent sites with shapes and ArviZ dims, and the parameters of its
observation site ``"y"`` at one set of latent values.

This module sits between the models and everything that consumes them (inference, the
posterior, the sweep); it imports neither.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro import handlers

__all__ = ["BATCH_WRAPPERS", "SiteInfo", "latent_sites", "num_parameters", "observation", "unwrap"]


@dataclass(frozen=True)
class SiteInfo:
    """A latent sample site: its shape and ArviZ dimension names."""

    shape: tuple[int, ...]
    dims: tuple[str, ...]


BATCH_WRAPPERS = (dist.ExpandedDistribution, dist.Independent)
"""Wrappers that only reshape a distribution (``.expand``, ``.to_event``)."""


def unwrap(fn: dist.Distribution, through: tuple[type, ...] = (*BATCH_WRAPPERS, dist.MaskedDistribution)) -> dist.Distribution:
    """The distribution inside ``fn``'s wrappers of the types ``through`` (default: reshaping
    and masking; pass :data:`BATCH_WRAPPERS` where a mask changes what matters)."""
    while isinstance(fn, through):
        fn = fn.base_dist
    return fn


def latent_sites(model: Callable, x, y=None) -> dict[str, SiteInfo]:
    """The model's latent (unobserved) sample sites with shapes and dims, in trace order.

    Dims come from a site's ``infer={"dims": ...}`` (as set by :func:`bnnpp.models.dense`),
    else ``<site>_dim_<i>``. Traced abstractly with ``jax.eval_shape``: no compilation.

    Returns:
        site name → :class:`SiteInfo`.
    """
    found: dict[str, SiteInfo] = {}

    def improper_as_zeros(site):
        # an improper prior (priors.flat) cannot be sampled; only its shape matters here
        fn = site.get("fn") if site["type"] == "sample" else None
        return jnp.zeros(fn.shape()) if fn is not None and isinstance(unwrap(fn), dist.ImproperUniform) else None

    def trace_once(key):
        seeded = handlers.seed(model, key)
        trace = handlers.trace(handlers.substitute(seeded, substitute_fn=improper_as_zeros)).get_trace(x, y)
        for name, site in trace.items():
            if site["type"] != "sample" or site["is_observed"]:
                continue
            shape = tuple(jnp.shape(site["value"]))
            dims = tuple((site.get("infer") or {}).get("dims", ()))
            if len(dims) != len(shape):
                dims = tuple(f"{name}_dim_{i}" for i in range(len(shape)))
            found[name] = SiteInfo(shape, dims)
        return 0

    jax.eval_shape(trace_once, jax.random.PRNGKey(0))
    return found


def num_parameters(sites: dict[str, SiteInfo]) -> int:
    """Total number of latent coordinates over ``sites``."""
    return int(sum(math.prod(site.shape) for site in sites.values()))


def observation(model: Callable, sample: dict, key, x, y=None) -> dict:
    """Trace the model at one set of latent values; return its likelihood's parameters.

    Args:
        model: the NumPyro model; its observations are the site ``"y"``.
        sample: latent site name → constrained value.
        key: PRNG key for any randomness in the model.
        x: inputs ``(n, ...)``; y: targets ``(n,)`` or ``None``.

    Returns:
        ``{"probs": (n, C)}`` for Categorical/Bernoulli observations, ``{"loc": (n,),
        "scale": (n,)}`` for Normal ones, plus ``"log_likelihood"`` ``(n,)`` when ``y`` is given.
    """
    trace = handlers.trace(handlers.substitute(handlers.seed(model, key), data=sample)).get_trace(x, y)
    if "y" not in trace:
        raise ValueError("the model has no observation site named 'y': sample the targets as numpyro.sample('y', ...)")
    fn = trace["y"]["fn"]
    base = unwrap(fn)
    n = x.shape[0]
    if isinstance(base, dist.CategoricalProbs | dist.CategoricalLogits):
        out = {"probs": jnp.broadcast_to(base.probs, (n, base.probs.shape[-1]))}
    elif isinstance(base, dist.BernoulliProbs | dist.BernoulliLogits):
        p = jnp.broadcast_to(base.probs, (n,))
        out = {"probs": jnp.stack([1 - p, p], axis=-1)}
    elif isinstance(base, dist.Normal):
        out = {"loc": jnp.broadcast_to(base.loc, (n,)), "scale": jnp.broadcast_to(base.scale, (n,))}
    else:
        raise TypeError(
            f"prediction supports Categorical, Bernoulli and Normal observation sites, got {type(base).__name__}"
        )
    if y is not None:
        out["log_likelihood"] = jnp.broadcast_to(fn.log_prob(y), (n,))
    return out
