"""A model's sites by abstract tracing: latent sites with shapes and dims, the observed site of a
trace, deterministic sites, a trace at given latent values, parameter counts and the
observation's parameters."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.distributions.transforms import biject_to

try:
    from jax.core import Tracer
except ImportError:  # pragma: no cover - where jax.core no longer re-exports it
    from jax._src.core import Tracer

OBSERVED = "y"
"""The observed site of bnnpp's own networks (and of any model fitted without renaming)."""
RESERVED_OBSERVED = "__bnnpp_observed__"
"""What :func:`rename_observed` calls a model's observed site while bnnpp traces it: a name in
bnnpp's reserved ``__bnnpp_`` namespace, which no user site may use."""
RESERVED_PREFIX = "__bnnpp_"
_RENAMED_FROM = "bnnpp_renamed_from"  # infer key marking the site that rename_observed renamed
TARGET_KEYWORDS = ("y", "Y", "obs")
"""Parameter names :func:`targets_keyword` recognises as the targets (with the observed site's name)."""


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


def _abstract_trace(model: Callable, x, y, plates: dict | None = None, deterministic: dict | None = None) -> dict:
    """The model's sample sites from one abstract trace (nothing compiled): name → a dict with
    ``is_observed``, ``fn`` (the distribution), ``shape`` and ``dims`` (``infer={"dims": ...}``).
    ``plates``, when given, is filled with plate name → ``(size, subsample_size)``;
    ``deterministic`` with each ``numpyro.deterministic`` site's name → shape."""
    found: dict[str, dict] = {}

    def trace_once(key, x, y):
        seeded = handlers.seed(model, key)
        trace = handlers.trace(handlers.substitute(seeded, substitute_fn=improper_as_zeros)).get_trace(x, y)
        for name, site in trace.items():
            if site["type"] == "deterministic" and deterministic is not None:
                deterministic[name] = tuple(jnp.shape(site["value"]))
            if site["type"] == "plate" and plates is not None:
                size, subsample = site["args"][:2]
                plates[name] = (int(size), int(size if subsample is None else subsample))
            if site["type"] == "sample":
                found[name] = {
                    "is_observed": site["is_observed"],
                    "fn": site["fn"],
                    "shape": tuple(jnp.shape(site["value"])),
                    "dims": tuple((site.get("infer") or {}).get("dims", ())),
                    "renamed_from": (site.get("infer") or {}).get(_RENAMED_FROM),
                }
        return 0

    if is_tracer(x) or is_tracer(y):  # inside a jitted function: the data by shape only
        jax.eval_shape(trace_once, _ABSTRACT_KEY, *(jax.ShapeDtypeStruct(jnp.shape(a), a.dtype) if is_tracer(a) else a for a in (x, y)))
    else:  # concrete data stays a constant of the trace, for models that read its values
        jax.eval_shape(lambda key: trace_once(key, x, y), _ABSTRACT_KEY)
    return found


def is_tracer(a) -> bool:
    """Whether ``a`` is a JAX tracer (an argument of a function being jitted or vmapped), not concrete data."""
    return isinstance(a, Tracer)


def latent_trace(model: Callable, u: dict, x, y, key, *, extra_handlers=()) -> dict:
    """Run ``model(x, y)`` with every latent site in ``u`` set from its unconstrained value.

    Args:
        model: the NumPyro model.
        u: site name → unconstrained array (sites not in ``u`` are sampled as usual).
        x, y: model arguments (``y=None`` for prediction).
        key: PRNG key for the seed handler.
        extra_handlers: handlers (callables ``model -> model``) applied inside the trace.

    Returns:
        The NumPyro trace; for each site of ``u``, ``site["value"]`` is constrained and
        ``site["unconstrained"]`` holds ``u[name]``.
    """

    def sub(site):
        if site["name"] in u and not site.get("is_observed", False):
            return biject_to(site["fn"].support)(u[site["name"]])
        return None

    m = handlers.substitute(handlers.seed(model, key), substitute_fn=sub)
    for h in extra_handlers:
        m = h(m)
    trace = handlers.trace(m).get_trace(x, y)
    for name in u:
        if name in trace:
            trace[name]["unconstrained"] = u[name]
    return trace


def observed_site(trace: dict) -> dict:
    """The observation site of a trace of a model bnnpp fits: :data:`RESERVED_OBSERVED` for a
    model wrapped by :func:`rename_observed`, else ``"y"``. ValueError when it has neither."""
    if RESERVED_OBSERVED in trace:
        return trace[RESERVED_OBSERVED]
    if OBSERVED in trace:
        return trace[OBSERVED]
    raise ValueError("the model has no observation site: sample the targets as numpyro.sample('y', ..., obs=y)")


def deterministic_sites(model: Callable, x) -> dict[str, tuple[int, ...]]:
    """The model's ``numpyro.deterministic`` sites at inputs ``x`` (``y=None``), name → shape,
    by one abstract trace."""
    out: dict[str, tuple[int, ...]] = {}
    _abstract_trace(model, x, None, deterministic=out)
    return out


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


_SHAPE_ROWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""model → {(x's shape and dtype, y's shape): rows}: :func:`shape_rows`'s answers, per model object."""


def shape_rows(model: Callable, x, y=None) -> int:
    """How many leading rows of ``x`` (and ``y``) a trace of ``model`` needs for its latent
    sites to have the shapes they have on all of ``(x, y)``: ``1`` when no latent site's shape
    follows the rows (a network's weights: ``(fan_in, units)`` whatever ``n``), else ``n``
    (one effect per row, as eight schools' ``numpyro.plate("J", len(sigma))`` or a random walk
    with one step per time point). Found by two abstract traces (nothing compiled), on the first
    row and on every row, and remembered per model object and data shape. A model that fails on
    its first row alone also needs ``n``.

    Returns:
        an int, 1 or ``x.shape[0]``."""
    n = int(np.shape(x)[0])
    if n <= 1:
        return n
    key = (tuple(np.shape(x)), str(getattr(x, "dtype", "")), None if y is None else tuple(np.shape(y)))
    try:
        known = _SHAPE_ROWS.setdefault(model, {})
    except TypeError:  # a model that takes no weak reference: traced each time
        known = {}
    if key not in known:
        whole = {k: v.shape for k, v in latent_sites(model, x, y).items()}
        try:
            first = {k: v.shape for k, v in latent_sites(model, x[:1], None if y is None else y[:1]).items()}
        except Exception:  # noqa: BLE001 - a model that cannot run on one row (e.g. a time series needing two)
            first = None
        known[key] = 1 if first == whole else n
    return known[key]


def probe_rows(model: Callable, x, y=None):
    """The fewest leading rows of ``(x, y)`` on which ``model``'s latent sites take their shapes
    on every row (:func:`shape_rows`): ``(x[:1], y[:1])`` for a network, ``(x, y)`` for a model
    with per-row latents. What a method traces the model on to build its start, guide or draws.
    ``y`` may be ``None`` (returned as ``None``)."""
    k = shape_rows(model, x, y)
    return x[:k], None if y is None else y[:k]


def row_latents(model: Callable, x, y=None) -> tuple[str, ...]:
    """The latent sites whose shape follows the number of rows of ``x`` (empty for a network),
    in trace order: the sites whose shapes on the first row differ from those on all of
    ``(x, y)``."""
    if shape_rows(model, x, y) <= 1:
        return ()
    whole = latent_sites(model, x, y)
    try:
        first = latent_sites(model, x[:1], None if y is None else y[:1])
    except Exception:  # noqa: BLE001 - as in shape_rows
        return tuple(whole)
    return tuple(k for k, v in whole.items() if k not in first or first[k].shape != v.shape)


def num_parameters(sites: dict[str, SiteInfo]) -> int:
    """Total number of latent coordinates over ``sites``."""
    return int(sum(math.prod(site.shape) for site in sites.values()))


def observation(model: Callable, sample: dict, key, x, y=None, deterministic: bool = False) -> dict:
    """Trace the model at one set of latent values; return its likelihood's parameters.

    Args:
        model: the NumPyro model; its observations are the site :func:`observed_site` finds.
        sample: latent site name → constrained value.
        key: PRNG key for any randomness in the model.
        x: inputs ``(n, ...)``; y: targets ``(n, *event)`` or ``None``.
        deterministic: also return the model's ``numpyro.deterministic`` sites.

    Returns:
        ``{"probs": (n, C)}`` for Categorical/Bernoulli observations; for the others arrays of
        the targets' shape ``(n, *event)``: ``"loc"``, ``"scale"`` (Normal), plus ``"df"``
        (StudentT), or ``"rate"`` (Poisson); and ``"log_likelihood"`` ``(n,)`` (one value per
        row, an event's elements summed) when ``y`` is given; ``"deterministic"``: name → value
        when asked for.
    """
    trace = handlers.trace(handlers.substitute(handlers.seed(model, key), data=sample)).get_trace(x, y)
    site = observed_site(trace)
    fn = site["fn"]
    base = unwrap(fn)
    n = x.shape[0]
    shape = jnp.shape(site["value"])
    if isinstance(base, dist.CategoricalProbs | dist.CategoricalLogits):
        out = {"probs": jnp.broadcast_to(base.probs, (n, base.probs.shape[-1]))}
    elif isinstance(base, dist.BernoulliProbs | dist.BernoulliLogits):
        p = jnp.broadcast_to(base.probs, (n,))
        out = {"probs": jnp.stack([1 - p, p], axis=-1)}
    elif isinstance(base, dist.Normal):
        out = {"loc": jnp.broadcast_to(base.loc, shape), "scale": jnp.broadcast_to(base.scale, shape)}
    elif isinstance(base, dist.StudentT):
        out = {k: jnp.broadcast_to(getattr(base, k), shape) for k in ("loc", "scale", "df")}
    elif isinstance(base, dist.Poisson):
        out = {"rate": jnp.broadcast_to(base.rate, shape)}
    else:
        raise TypeError(
            f"prediction supports Categorical, Bernoulli, Normal, StudentT and Poisson observation sites, got {type(base).__name__}"
        )
    if y is not None:
        out["log_likelihood"] = jnp.broadcast_to(fn.log_prob(y), (n,))
    if deterministic:
        out["deterministic"] = {k: v["value"] for k, v in trace.items() if v["type"] == "deterministic"}
    return out
