"""What a NumPyro model is made of, found by abstract tracing (``jax.eval_shape``: nothing
is compiled or run): its latent sites with shapes and ArviZ dims, its observed site checked
against the targets, and the parameters of its observation site ``"y"`` at one set of latent
values.

bnnpp calls a model as ``model(x, y)`` with ``y=None`` to predict, and reads its observations
from the site ``"y"``; a model whose observed site has another name (NumPyro's
``examples/bnn.py`` samples ``"Y"``) is wrapped by :func:`rename_observed`.

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
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers

__all__ = [
    "BATCH_WRAPPERS", "OBSERVED", "RenamedObservation", "SiteInfo", "check_model", "check_sites", "is_flax_module",
    "latent_sites", "num_parameters", "observation", "refuse_flax_module", "rename_observed", "unwrap",
]

OBSERVED = "y"
"""The name bnnpp reads a model's observations from."""
_RENAMED_FROM = "bnnpp_renamed_from"  # infer key marking the site "y" that rename_observed renamed


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


def _abstract_trace(model: Callable, x, y, plates: dict | None = None) -> dict:
    """The model's sample sites from one abstract trace (nothing compiled): name → a dict with
    ``is_observed``, ``fn`` (the distribution), ``shape`` and ``dims`` (``infer={"dims": ...}``).
    ``plates``, when given, is filled with plate name → ``(size, subsample_size)``."""
    found: dict[str, dict] = {}

    def trace_once(key):
        seeded = handlers.seed(model, key)
        trace = handlers.trace(handlers.substitute(seeded, substitute_fn=improper_as_zeros)).get_trace(x, y)
        for name, site in trace.items():
            if site["type"] == "plate" and plates is not None:
                size, subsample = site["args"][:2]
                plates[name] = (int(size), int(size if subsample is None else subsample))
            if site["type"] == "sample":
                found[name] = {
                    "is_observed": site["is_observed"], "fn": site["fn"], "shape": tuple(jnp.shape(site["value"])),
                    "dims": tuple((site.get("infer") or {}).get("dims", ())),
                    "renamed_from": (site.get("infer") or {}).get(_RENAMED_FROM),
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


MODEL_ERRORS = (ValueError, TypeError, NotImplementedError, AssertionError)
"""What a user's model raises on data it cannot take (its own ``assert`` included): turned
into one-line ``ValueError``s by :func:`check_model` and :func:`check_sites`."""


def check_model(model: Callable, x, y) -> dict[str, SiteInfo]:
    """Check a model before anything compiles, by one abstract trace: it has an observed
    site ``"y"`` whose shape matches ``y`` row for row (one log-density per row), no discrete
    latent sites, and its parameters fit in memory.

    Returns:
        The latent sites (as :func:`latent_sites`).

    Raises:
        ValueError: one line naming what is wrong and what to do.
    """
    refuse_flax_module(model)
    plates: dict[str, tuple[int, int]] = {}
    try:
        found = _abstract_trace(model, x, y, plates)
    except MODEL_ERRORS as e:
        raise ValueError(
            f"the model fails on the training data ({_one_line(e)}); bnnpp calls it as model(x, y) with x "
            f"{tuple(np.shape(x))}, y {tuple(np.shape(y))}"
        ) from None
    for name, (size, subsample) in plates.items():
        if subsample < size:  # bnnpp's minibatches scale the likelihood by N/B: twice with this plate's N/B
            raise ValueError(
                f"the model's plate {name!r} subsamples ({subsample} of {size}): bnnpp draws minibatches and scales "
                f"them itself; write numpyro.plate({name!r}, x.shape[0]) and pass batch_size={subsample} to bnnpp.fit"
            )
    sites = _latent(found)
    _check_observed(found, np.shape(y), getattr(model, "observed", OBSERVED))
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


def _one_line(e: BaseException) -> str:
    """``"Type: first line of the message"`` (an assert's message can span lines)."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _check_observed(found: dict, y_shape: tuple[int, ...], name: str) -> None:
    """The observed site ``"y"`` (``name`` in the user's model) exists and has one
    log-density per row of ``y``: its distribution's shape is ``y``'s shape and its batch
    shape is ``(n,)`` (a ``(n, K)`` target is one event, ``.to_event(1)``)."""
    # numpyro.factor terms are observed sites of the Unit distribution: part of the joint, not data
    observed = [k for k, site in found.items() if site["is_observed"] and not isinstance(site["fn"], dist.Unit)]
    if name != OBSERVED and OBSERVED in found and found[OBSERVED].get("renamed_from") != name:
        # the model has its own "y" and nothing called ``name`` was renamed to it
        raise ValueError(
            f"the model has no sample site named {name!r}; its observed site is {OBSERVED!r}: leave out observed= "
            f"(or pass observed={OBSERVED!r})"
        )
    if OBSERVED not in found or not found[OBSERVED]["is_observed"]:
        if observed and name != OBSERVED:
            raise ValueError(f"the model has no observed site named {name!r}; its observed site is {observed[0]!r}: pass observed={observed[0]!r}")
        if observed:
            raise ValueError(
                f"the model's observed site is {observed[0]!r}, not 'y': pass observed={observed[0]!r} to bnnpp.fit "
                "(or name the site 'y')"
            )
        raise ValueError(
            f"the model has no observed site named {name!r}: sample the targets as numpyro.sample('y', ..., obs=y) "
            "(or pass observed='NAME' to bnnpp.fit)"
        )
    if len(observed) > 1:
        raise ValueError(f"the model has several observed sites ({', '.join(observed)}): bnnpp fits models with one")
    fn = found[OBSERVED]["fn"]
    batch, event = tuple(fn.batch_shape), tuple(fn.event_shape)
    if batch + event != tuple(y_shape):
        hint = (
            "a (n, 1) network output against 1-D y broadcasts to (n, n): take out[..., 0], or pass y as (n, 1) "
            "with .to_event(1)" if len(y_shape) == 1 and batch + event == (y_shape[0], y_shape[0])
            else "pass y.reshape(-1), or a model whose likelihood has one event of y's row shape"
            if batch + event == tuple(y_shape[:1]) else "make the likelihood's shape equal y's"
        )
        raise ValueError(
            f"the observed site {name!r} has shape {batch + event} (batch {batch}, event {event}) but y has shape "
            f"{tuple(y_shape)}: {hint}"
        )
    if batch != tuple(y_shape[:1]):
        fix = (
            "sample it inside numpyro.plate('data', n) without .to_event" if len(y_shape) == 1
            else f"e.g. dist.Normal(mean, sd).to_event({len(y_shape) - 1})"
        )
        raise ValueError(
            f"the observed site {name!r} has batch shape {batch} for y of shape {tuple(y_shape)}: bnnpp needs one "
            f"log-density per row of y, so a row must be one event: {fix}"
        )


def check_sites(model: Callable, sites: dict[str, SiteInfo], x, what: str) -> None:
    """The latent sites ``model`` has at inputs ``x`` are ``sites`` (names and shapes), by one
    abstract trace; ValueError naming the first difference and ``what`` they came from."""
    try:
        mine = {k: v for k, v in latent_sites(model, x, None).items() if k != OBSERVED}  # y=None samples "y"
    except MODEL_ERRORS as e:
        raise ValueError(f"the model fails on {what}'s inputs ({_one_line(e)}): pass the model it was fitted with") from None
    if set(mine) != set(sites):
        missing, extra = sorted(set(sites) - set(mine)), sorted(set(mine) - set(sites))
        raise ValueError(
            f"the model's latent sites differ from {what}'s (missing {missing or 'none'}, not in the file "
            f"{extra or 'none'}): pass the model it was fitted with"
        )
    for k, site in sites.items():
        if mine[k].shape != tuple(site.shape):
            raise ValueError(
                f"site {k!r} has shape {mine[k].shape} in the model but {tuple(site.shape)} in {what}: pass the model it was "
                "fitted with"
            )


class RenamedObservation:
    """A NumPyro model whose observed site ``observed`` is seen by bnnpp as ``"y"``; call it
    as the model. Made by :func:`rename_observed`."""

    def __init__(self, model: Callable, observed: str):
        self.model = model
        self.observed = observed

    def __call__(self, *args, **kwargs):
        with _Rename(self.observed, OBSERVED):
            return self.model(*args, **kwargs)

    def __getattr__(self, name):  # the wrapped model's hints (likelihood, num_classes, input_rank ...)
        if name in ("model", "observed", "spec"):  # no spec: the file records a custom model
            raise AttributeError(name)
        return getattr(self.model, name)

    def __repr__(self) -> str:
        return f"rename_observed({self.model!r}, {self.observed!r})"


class _Rename(handlers.Messenger):
    """Renames the sample site ``old`` to ``new`` before any outer handler sees it."""

    def __init__(self, old: str, new: str):
        self.old, self.new = old, new
        super().__init__()

    def process_message(self, msg):
        if msg["type"] == "sample" and msg["name"] == self.old:
            msg["name"] = self.new
            msg["infer"] = {**(msg.get("infer") or {}), _RENAMED_FROM: self.old}  # read by the model check


def rename_observed(model: Callable, observed: str) -> Callable:
    """``model`` itself when its observed site is ``"y"`` (``observed == "y"``), else a
    :class:`RenamedObservation` that bnnpp reads as having a site ``"y"``.

    Raises:
        TypeError: ``observed`` is not a non-empty string.
    """
    if not isinstance(observed, str) or not observed:
        raise TypeError(f"observed must be the name of the model's observed site, e.g. 'Y', got {observed!r}")
    if observed == OBSERVED or getattr(model, "observed", None) == observed:
        return model
    return RenamedObservation(model, observed)


def num_parameters(sites: dict[str, SiteInfo]) -> int:
    """Total number of latent coordinates over ``sites``."""
    return int(sum(math.prod(site.shape) for site in sites.values()))


def observation(model: Callable, sample: dict, key, x, y=None) -> dict:
    """Trace the model at one set of latent values; return its likelihood's parameters.

    Args:
        model: the NumPyro model; its observations are the site ``"y"``.
        sample: latent site name → constrained value.
        key: PRNG key for any randomness in the model.
        x: inputs ``(n, ...)``; y: targets ``(n, *event)`` or ``None``.

    Returns:
        ``{"probs": (n, C)}`` for Categorical/Bernoulli observations; for the others arrays of
        the targets' shape ``(n, *event)``: ``"loc"``, ``"scale"`` (Normal), plus ``"df"``
        (StudentT), or ``"rate"`` (Poisson); and ``"log_likelihood"`` ``(n,)`` (one value per
        row, an event's elements summed) when ``y`` is given.
    """
    trace = handlers.trace(handlers.substitute(handlers.seed(model, key), data=sample)).get_trace(x, y)
    if OBSERVED not in trace:
        raise ValueError("the model has no observation site named 'y': sample the targets as numpyro.sample('y', ...)")
    fn = trace[OBSERVED]["fn"]
    base = unwrap(fn)
    n = x.shape[0]
    shape = jnp.shape(trace[OBSERVED]["value"])
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
            "prediction supports Categorical, Bernoulli, Normal, StudentT and Poisson observation sites, got "
            f"{type(base).__name__}"
        )
    if y is not None:
        out["log_likelihood"] = jnp.broadcast_to(fn.log_prob(y), (n,))
    return out
