"""Checks of a model against the training data before anything compiles: it runs, observes one
site shaped like the targets with a likelihood bnnpp can predict with, fits in memory."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import numpyro.distributions as dist

from bnnpp.introspection.sites import (
    OBSERVED,
    RESERVED_OBSERVED,
    RESERVED_PREFIX,
    SiteInfo,
    _abstract_trace,
    _latent,
    num_parameters,
    unwrap,
)

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


STORED_DIMS = ("chain", "draw")
"""ArviZ's dimensions of every stored group. A latent site may take their names (it is stored
under another and renamed back on load); the observed site may not: its name is the variable
of the log-likelihood and observed-data groups."""


def _check_names(found: dict) -> None:
    """One-line ValueError for a site name a posterior cannot store: empty or not a string, or an
    observed site named after one of ArviZ's dimensions (:data:`STORED_DIMS`), which xarray
    would refuse only when the fit is written."""
    for site_name, site in found.items():
        name = (
            site_name if site.get("renamed_from") is None else site["renamed_from"]
        )  # the user's name of a site bnnpp renamed (the observed one)
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"the model has a site named {name!r}: give every numpyro.sample/deterministic site a non-empty name")
        if name in STORED_DIMS and site.get("is_observed"):
            raise ValueError(f"the model observes a site named {name!r}, the name of ArviZ's {name} dimension: rename the site")


MODEL_ERRORS = (ValueError, TypeError, NotImplementedError, AssertionError)
"""What a user's model raises on data it cannot take (its own ``assert`` included): turned
into one-line ``ValueError``s by :func:`check_model` and :func:`check_sites`."""


def check_model(model: Callable, x, y) -> dict[str, SiteInfo]:
    """Check a model before anything compiles, by one abstract trace: it has the observed site
    bnnpp reads (``"y"``, or the site :func:`rename_observed` renamed), whose shape matches
    ``y`` row for row (one log-density per row) and whose likelihood bnnpp can predict with
    (:data:`PREDICTABLE`), no site in bnnpp's reserved namespace, no discrete latent sites,
    and its parameters fit in memory.

    Returns:
        The latent sites (as :func:`latent_sites`).

    Raises:
        ValueError: one line naming what is wrong and what to do.
    """
    refuse_flax_module(model)
    plates: dict[str, tuple[int, int]] = {}
    found = _traced(model, x, y, plates)
    for name, (size, subsample) in plates.items():
        if subsample < size:  # bnnpp's minibatches scale the likelihood by N/B: twice with this plate's N/B
            raise ValueError(
                f"the model's plate {name!r} subsamples ({subsample} of {size}): bnnpp draws minibatches and scales "
                f"them itself; write numpyro.plate({name!r}, x.shape[0]) and pass batch_size={subsample} to bnnpp.fit"
            )
    _check_names(found)
    reserved = [n for n in found if n.startswith(RESERVED_PREFIX) and found[n].get("renamed_from") is None]
    if reserved:
        raise ValueError(f"site name(s) {', '.join(reserved)}: names starting with {RESERVED_PREFIX!r} are bnnpp's; rename them")
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


def _traced(model: Callable, x, y, plates: dict | None = None) -> dict:
    """:func:`_abstract_trace` on the training data, a model's error as one-line ValueError."""
    try:
        return _abstract_trace(model, x, y, plates)
    except MODEL_ERRORS as e:
        text = str(e)
        if "must have unique names" in text:  # NumPyro's "all sites must have unique names but got `a` duplicated"
            raise ValueError(f"the model samples two sites with one name ({_one_line(e)}): rename one of them") from None
        call = f"model(x, {model.keyword}=y)" if getattr(model, "keyword", None) else "model(x, y)"
        raise ValueError(
            f"the model fails on the training data ({_one_line(e)}); bnnpp calls it as {call} with x "
            f"{tuple(np.shape(x))}, y {tuple(np.shape(y))}"
        ) from None


def _one_line(e: BaseException) -> str:
    """``"Type: first line of the message"`` (an assert's message can span lines)."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _data_sites(found: dict) -> list[str]:
    """The observed sites of a trace, ``numpyro.factor`` terms (observed ``Unit`` sites) left out."""
    return [k for k, site in found.items() if site["is_observed"] and not isinstance(site["fn"], dist.Unit)]


PREDICTABLE = (
    dist.CategoricalProbs,
    dist.CategoricalLogits,
    dist.BernoulliProbs,
    dist.BernoulliLogits,
    dist.Normal,
    dist.StudentT,
    dist.Poisson,
)
"""Observation distributions :func:`observation` (and so ``Posterior.predict``) can predict with."""


def _check_observed(found: dict, y_shape: tuple[int, ...], name: str) -> None:
    """The observed site ``name`` (traced as :data:`RESERVED_OBSERVED` when renamed) exists,
    has one log-density per row of ``y`` (its distribution's shape is ``y``'s shape and its
    batch shape is ``(n,)``; a ``(n, K)`` target is one event, ``.to_event(1)``) and a
    likelihood in :data:`PREDICTABLE`."""
    internal = OBSERVED if name == OBSERVED else RESERVED_OBSERVED
    observed = [k for k in _data_sites(found) if k != internal]
    if internal not in found or not found[internal]["is_observed"]:
        if observed:
            raise ValueError(
                f"the model has no observed site named {name!r} (its observed site is {observed[0]!r}): leave out observed=, "
                f"or pass observed={observed[0]!r}"
            )
        raise ValueError(f"the model has no observed site named {name!r}: sample the targets as numpyro.sample({name!r}, ..., obs=y)")
    fn = found[internal]["fn"]
    batch, event = tuple(fn.batch_shape), tuple(fn.event_shape)
    if batch + event != tuple(y_shape):
        hint = (
            "a (n, 1) network output against 1-D y broadcasts to (n, n): take out[..., 0], or pass y as (n, 1) with .to_event(1)"
            if len(y_shape) == 1 and batch + event == (y_shape[0], y_shape[0])
            else "pass y.reshape(-1), or a model whose likelihood has one event of y's row shape"
            if batch + event == tuple(y_shape[:1])
            else "make the likelihood's shape equal y's"
        )
        raise ValueError(
            f"the observed site {name!r} has shape {batch + event} (batch {batch}, event {event}) but y has shape {tuple(y_shape)}: {hint}"
        )
    if batch != tuple(y_shape[:1]):
        fix = (
            "sample it inside numpyro.plate('data', n) without .to_event"
            if len(y_shape) == 1
            else f"e.g. dist.Normal(mean, sd).to_event({len(y_shape) - 1})"
        )
        raise ValueError(
            f"the observed site {name!r} has batch shape {batch} for y of shape {tuple(y_shape)}: bnnpp needs one "
            f"log-density per row of y, so a row must be one event: {fix}"
        )
    base = unwrap(fn)
    if not isinstance(base, PREDICTABLE):
        raise ValueError(
            f"the observed site {name!r} has a {type(base).__name__} likelihood, which bnnpp cannot predict with: use a "
            "Categorical, Bernoulli, Normal, StudentT or Poisson observation"
        )


def find_observed(model: Callable, x, y) -> str:
    """The name of the model's one observed site (``numpyro.factor`` terms aside), by one
    abstract trace of ``model(x, y)``.

    Raises:
        ValueError: one line when the model observes no site or several (then ``observed=``
            chooses), or fails on the data.
    """
    names = _data_sites(_traced(model, x, y))
    if not names:
        raise ValueError("the model observes no site: sample the targets as numpyro.sample('y', ..., obs=y)")
    if len(names) > 1:
        raise ValueError(f"the model observes several sites ({', '.join(names)}): pass observed='NAME' to say which holds y")
    return names[0]


def check_sites(model: Callable, sites: dict[str, SiteInfo], x, what: str) -> None:
    """The latent sites ``model`` has at inputs ``x`` are ``sites`` (names and shapes), by one
    abstract trace; ValueError naming the first difference and ``what`` they came from."""
    try:
        found = _abstract_trace(model, x, None)
    except MODEL_ERRORS as e:
        raise ValueError(f"the model fails on {what}'s inputs ({_one_line(e)}): pass the model it was fitted with") from None
    internal = RESERVED_OBSERVED if RESERVED_OBSERVED in found else OBSERVED  # y=None samples it: not a latent
    mine = {k: v for k, v in _latent(found).items() if k != internal}
    if set(mine) != set(sites):
        missing, extra = sorted(set(sites) - set(mine)), sorted(set(mine) - set(sites))
        raise ValueError(
            f"the model's latent sites differ from {what}'s (missing {missing or 'none'}, not in the file "
            f"{extra or 'none'}): pass the model it was fitted with"
        )
    for k, site in sites.items():
        if mine[k].shape != tuple(site.shape):
            raise ValueError(
                f"site {k!r} has shape {mine[k].shape} in the model but {tuple(site.shape)} in {what}: pass the model it was fitted with"
            )
