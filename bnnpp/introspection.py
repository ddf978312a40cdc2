"""What a NumPyro model is made of, found by abstract tracing (``jax.eval_shape``: nothing
is compiled or run): its latent sites with shapes and ArviZ dims, and the parameters of its
observation site ``"y"`` at one set of latent values.

This module sits between the models and everything that consumes them (inference, the
posterior, the sweep); it imports neither.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro import handlers

__all__ = [
    "BATCH_WRAPPERS", "SiteInfo", "check_model", "is_flax_module", "latent_sites", "num_parameters", "observation",
    "refuse_flax_module", "unwrap",
]


@dataclass(frozen=True)
class SiteInfo:
    """A latent sample site: its shape and ArviZ dimension names."""

    shape: tuple[int, ...]
    dims: tuple[str, ...]


_ABSTRACT_KEY = jax.ShapeDtypeStruct((2,), jnp.uint32)
"""A PRNG key's shape for abstract tracing (a concrete ``PRNGKey(0)`` would compile a program)."""

BATCH_WRAPPERS = (dist.ExpandedDistribution, dist.Independent)
"""Wrappers that only reshape a distribution (``.expand``, ``.to_event``)."""


def unwrap(fn: dist.Distribution, through: tuple[type, ...] = (*BATCH_WRAPPERS, dist.MaskedDistribution)) -> dist.Distribution:
    """The distribution inside ``fn``'s wrappers of the types ``through`` (default: reshaping
    and masking; pass :data:`BATCH_WRAPPERS` where a mask changes what matters)."""
    while isinstance(fn, through):
        fn = fn.base_dist
    return fn


def improper_as_zeros(site):
    """A ``substitute_fn`` for abstract traces: zeros for sites with an improper prior
    (``priors.flat``), which cannot be sampled and whose shape is all that matters there."""
    fn = site.get("fn") if site["type"] == "sample" else None
    return jnp.zeros(fn.shape()) if fn is not None and isinstance(unwrap(fn), dist.ImproperUniform) else None


def _abstract_trace(model: Callable, x, y) -> dict:
    """The model's sample sites from one abstract trace (nothing compiled): name → a dict with
    ``is_observed``, ``fn`` (the distribution), ``shape`` and ``dims`` (``infer={"dims": ...}``)."""
    found: dict[str, dict] = {}

    def trace_once(key):
        seeded = handlers.seed(model, key)
        trace = handlers.trace(handlers.substitute(seeded, substitute_fn=improper_as_zeros)).get_trace(x, y)
        for name, site in trace.items():
            if site["type"] == "sample":
                found[name] = {
                    "is_observed": site["is_observed"], "fn": site["fn"], "shape": tuple(jnp.shape(site["value"])),
                    "dims": tuple((site.get("infer") or {}).get("dims", ())),
                }
        return 0

    jax.eval_shape(trace_once, _ABSTRACT_KEY)
    return found


def latent_sites(model: Callable, x, y=None) -> dict[str, SiteInfo]:
    """The model's latent (unobserved) sample sites with shapes and dims, in trace order.

    Dims come from a site's ``infer={"dims": ...}`` (as set by :func:`bnnpp.models.dense`),
    else ``<site>_dim_<i>``. Traced abstractly with ``jax.eval_shape``: no compilation.

    Returns:
        site name → :class:`SiteInfo`.
    """
    return _latent(_abstract_trace(model, x, y))


def _latent(found: dict) -> dict[str, SiteInfo]:
    out = {}
    for name, site in found.items():
        if site["is_observed"]:
            continue
        shape, dims = site["shape"], site["dims"]
        out[name] = SiteInfo(shape, dims if len(dims) == len(shape) else tuple(f"{name}_dim_{i}" for i in range(len(shape))))
    return out


#: Bytes a fit needs per latent scalar, about: float32 value, gradient, two Adam moments, a
#: variational scale and its moments, and the copies a compiled step keeps (a generous bound).
BYTES_PER_PARAMETER = 64


def available_memory() -> int | None:
    """Physical memory of this machine in bytes, or ``None`` where it cannot be read."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def is_flax_module(obj) -> bool:
    """True for a Flax Linen or NNX module instance (checked without importing Flax)."""
    return any(c.__module__.startswith("flax.") and c.__name__ == "Module" for c in type(obj).__mro__)


def refuse_flax_module(model) -> None:
    """A one-line TypeError when a bare Flax module is passed where a NumPyro model is expected."""
    if is_flax_module(model):
        raise TypeError(
            f"model is a Flax module ({type(model).__name__}), not a NumPyro model: wrap it with "
            "bnnpp.models.from_flax(module, likelihood=..., num_classes=...)"
        )


def check_model(model: Callable, x, y) -> dict[str, SiteInfo]:
    """Check a model before anything compiles, by one abstract trace: it has an observed
    site ``"y"``, no discrete latent sites, and its parameters fit in memory.

    Returns:
        The latent sites (as :func:`latent_sites`).

    Raises:
        ValueError: one line naming what is wrong and what to do.
    """
    refuse_flax_module(model)
    try:
        found = _abstract_trace(model, x, y)
    except (ValueError, TypeError, NotImplementedError) as e:
        raise ValueError(f"the model fails on the training data: {type(e).__name__}: {e}") from None
    sites = _latent(found)
    if "y" not in found or not found["y"]["is_observed"]:
        raise ValueError("the model has no observed site named 'y': sample the targets as numpyro.sample('y', ..., obs=y)")
    discrete = [n for n, site in found.items() if not site["is_observed"] and site["fn"].support.is_discrete]
    if discrete:
        raise ValueError(
            f"discrete latent site(s) {', '.join(discrete)}: bnnpp's methods need continuous latents; marginalise them "
            "out in the model or make them observed"
        )
    count = num_parameters(sites)
    memory = available_memory()
    if memory is not None and count * BYTES_PER_PARAMETER > memory:
        raise ValueError(
            f"the model has {count:,} latent parameters, about {count * BYTES_PER_PARAMETER / 2**30:.0f} GiB to fit, "
            f"more than this machine's {memory / 2**30:.0f} GiB: use a smaller network"
        )
    return sites


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
