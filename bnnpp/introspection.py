"""What a NumPyro model is made of, found by abstract tracing (``jax.eval_shape``: nothing
is compiled or run): its latent sites with shapes and ArviZ dims, its observed site checked
against the targets, and the parameters of its observation site at one set of latent values.

bnnpp calls a model as ``model(x, y)`` with ``y=None`` to predict: the targets go by keyword
when the model has a parameter named ``y``, ``Y``, ``obs`` or its observed site's name that
is not its second positional parameter (``def model(x, *, y=None)``,
``def model(X, D_H=5, Y=None)``), else as the second positional argument
(:func:`targets_keyword`). bnnpp's networks observe the site ``"y"``; a model whose observed
site has another name (NumPyro's ``examples/bnn.py`` samples ``"Y"``, many examples
``"obs"``) is wrapped by :func:`rename_observed`, which renames that site to the reserved
:data:`RESERVED_OBSERVED` while bnnpp traces it, so no user site can clash with it; readers
find the site with :func:`observed_site`.

This module sits between the models and everything that consumes them (inference, the
posterior, the sweep); it imports neither.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.distributions.transforms import biject_to

__all__ = [
    "BATCH_WRAPPERS", "OBSERVED", "PREDICTABLE", "RESERVED_OBSERVED", "RenamedObservation", "SiteInfo", "check_model",
    "check_sites", "deterministic_sites", "find_observed", "is_flax_module", "latent_sites", "latent_trace",
    "num_parameters", "observation", "observed_site", "refuse_flax_module", "rename_observed", "targets_keyword",
    "unwrap",
]

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

    def trace_once(key):
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
                    "is_observed": site["is_observed"], "fn": site["fn"], "shape": tuple(jnp.shape(site["value"])),
                    "dims": tuple((site.get("infer") or {}).get("dims", ())),
                    "renamed_from": (site.get("infer") or {}).get(_RENAMED_FROM),
                }
        return 0

    jax.eval_shape(trace_once, _ABSTRACT_KEY)
    return found


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


PREDICTABLE = (dist.CategoricalProbs, dist.CategoricalLogits, dist.BernoulliProbs, dist.BernoulliLogits, dist.Normal, dist.StudentT, dist.Poisson)
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
        raise ValueError(
            f"the model has no observed site named {name!r}: sample the targets as numpyro.sample({name!r}, ..., obs=y)"
        )
    fn = found[internal]["fn"]
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
                f"site {k!r} has shape {mine[k].shape} in the model but {tuple(site.shape)} in {what}: pass the model it was "
                "fitted with"
            )


def targets_keyword(model: Callable, observed: str | None = None) -> str | None:
    """The keyword bnnpp passes the targets by, or ``None`` to pass them as the second
    positional argument: the first parameter after the first named ``y``, ``Y``, ``obs`` or
    ``observed``, unless that parameter is the second positional one (then positional
    works) or its signature cannot be read."""
    try:
        params = list(inspect.signature(model).parameters.values())
    except (TypeError, ValueError):
        return None
    names = {*TARGET_KEYWORDS, *([observed] if observed else [])}
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in params if p.kind in kinds]
    if len(positional) >= 2 and positional[1].name in names:
        return None
    for p in params[1:]:
        if p.name in names and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            return p.name
    return None


class RenamedObservation:
    """A NumPyro model as bnnpp calls it, ``model(x, y)``: the targets passed by ``keyword``
    when given (:func:`targets_keyword`), and the observed site ``observed`` traced under the
    reserved name :data:`RESERVED_OBSERVED` when it is not ``"y"``. Made by
    :func:`rename_observed`."""

    def __init__(self, model: Callable, observed: str, keyword: str | None = None):
        self.model = model
        self.observed = observed
        self.keyword = keyword

    def __call__(self, x, y=None, *args, **kwargs):
        def call():
            if self.keyword is not None:
                return self.model(x, *args, **{self.keyword: y}, **kwargs)
            return self.model(x, y, *args, **kwargs)

        if self.observed == OBSERVED:
            return call()
        with _Rename(self.observed, RESERVED_OBSERVED):
            return call()

    def __getattr__(self, name):  # the wrapped model's hints (likelihood, num_classes, input_rank ...)
        if name in ("model", "observed", "keyword", "spec"):  # no spec: the file records a custom model
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


def rename_observed(model: Callable, observed: str | None, x=None, y=None) -> Callable:
    """``model`` as bnnpp calls it: itself when its observed site is ``"y"`` and it takes the
    targets as its second positional argument, else a :class:`RenamedObservation`.

    Args:
        model: the NumPyro model (a :class:`RenamedObservation` is unwrapped first).
        observed: the name of its observed site; ``None`` to find it (:func:`find_observed`
            on ``x``, ``y``: the model must observe exactly one site).

    Raises:
        TypeError: ``observed`` is neither ``None`` nor a non-empty string.
        ValueError: ``observed`` is in bnnpp's reserved namespace, or is ``None`` and the
            model observes no site or several.
    """
    if observed is not None and (not isinstance(observed, str) or not observed):
        raise TypeError(f"observed must be the name of the model's observed site, e.g. 'Y', got {observed!r}")
    if observed is not None and observed.startswith(RESERVED_PREFIX):
        raise ValueError(f"observed={observed!r}: names starting with {RESERVED_PREFIX!r} are bnnpp's; rename the site")
    if isinstance(model, RenamedObservation):
        model = model.model
    keyword = targets_keyword(model, observed)
    if observed is None:
        observed = find_observed(RenamedObservation(model, OBSERVED, keyword) if keyword else model, x, y)
    if observed == OBSERVED and keyword is None:
        return model
    return RenamedObservation(model, observed, keyword)


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
            "prediction supports Categorical, Bernoulli, Normal, StudentT and Poisson observation sites, got "
            f"{type(base).__name__}"
        )
    if y is not None:
        out["log_likelihood"] = jnp.broadcast_to(fn.log_prob(y), (n,))
    if deterministic:
        out["deterministic"] = {k: v["value"] for k, v in trace.items() if v["type"] == "deterministic"}
    return out
