"""``advi``: automatic differentiation variational inference (Kucukelbir et al. 2017) with
NumPyro's SVI and an autoguide.

``guide="normal"`` is mean-field ADVI (``AutoNormal``: one independent Normal per latent
coordinate on the unconstrained space); ``"lowrank"`` (``AutoLowRankMultivariateNormal``)
and ``"fullrank"`` (``AutoMultivariateNormal``) add correlations. The ELBO is estimated with
``num_particles`` Monte-Carlo draws per step (:class:`SortedTraceELBO`, NumPyro's ``Trace_ELBO``
with its sites added in a fixed order).

NumPyro's ``SVIState`` carries its own PRNG key, split on every update; it is seeded by
``init``, so the runner's per-step key is not used. The approximation is a
:class:`~bnnpp.posterior.MeanFieldGaussian` for ``guide="normal"`` (AutoNormal's loc and
scale on the unconstrained space) and :class:`~bnnpp.posterior.GuideParameters` otherwise.

With ``batch_size = B < N`` every step sees a minibatch drawn on the device by the runner
and the observed sites' log-likelihood is scaled by N/B (:class:`ScaleObserved`, the factor
NumPyro's ``plate(..., subsample_size=B)`` applies), so the ELBO estimate stays unbiased for
the full data (Hoffman et al. 2013, stochastic variational inference).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from numpyro.handlers import replay, seed
from numpyro.infer import SVI, Trace_ELBO
from numpyro.infer.autoguide import AutoLowRankMultivariateNormal, AutoMultivariateNormal, AutoNormal
from numpyro.infer.initialization import init_to_uniform
from numpyro.infer.util import compute_log_probs
from numpyro.optim import optax_to_numpyro
from numpyro.primitives import Messenger
from numpyro.util import check_model_guide_match

from bnnpp.inference.algorithm import Algorithm, Hooks, Keys, RunSpec
from bnnpp.inference.bbb import resolve_hyperparameters
from bnnpp.inference.collapse import mean_field_small_data_note, say_not_suited, small_hierarchical_regression
from bnnpp.inference.joint import glorot_limits
from bnnpp.inference.map_estimate import map_start
from bnnpp.inference.options import (
    Options,
    optimizer,
    optimizer_of,
    option,
    optional,
    positive_float,
    positive_int,
    schedule_option,
    steps_for,
    temperature_option,
)
from bnnpp.inference.registry import Method, register
from bnnpp.inference.start import apply_start
from bnnpp.inference.variational_layers import find_layers
from bnnpp.introspection import latent_sites, probe_rows
from bnnpp.posterior import GuideParameters, MeanFieldGaussian

__all__ = [
    "DEFAULTS",
    "GUIDES",
    "ADVIInfo",
    "ADVIOptions",
    "ScaleObserved",
    "SortedTraceELBO",
    "build",
]

GUIDES = {"normal": AutoNormal, "lowrank": AutoLowRankMultivariateNormal, "fullrank": AutoMultivariateNormal}


class ScaleObserved(Messenger):
    """Multiply the log-probability of every observed sample site by ``factor`` (N/B for a
    minibatch of B of N rows); latent sites (the prior) are left as they are."""

    def __init__(self, fn=None, factor: float = 1.0):
        self.factor = factor
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] == "sample" and msg.get("is_observed"):
            msg["scale"] = self.factor if msg.get("scale") is None else msg["scale"] * self.factor


class SortedTraceELBO(Trace_ELBO):
    """NumPyro's ``Trace_ELBO`` with the per-site terms added in sorted site-name order.

    NumPyro 0.22 adds the terms log p − log q in ``set`` order (``numpyro/infer/elbo.py``),
    which follows Python's string-hash seed, so the HLO of every program that differentiates
    the ELBO changed from one process to the next (missing JAX's persistent compilation
    cache), and float32 sums differed in the last bits between runs with the same seed. The estimator is the
    same (Wingate & Weber 2013; Ranganath et al. 2014): per particle, draw z ~ q, then
    log p(x, z) − log q(z); the loss is minus its mean over particles.
    """

    def loss_with_mutable_state(self, rng_key, param_map, model, guide, *args, **kwargs):
        def particle(key):
            model_seed, guide_seed = jax.random.split(key)
            guide_lp, guide_trace = compute_log_probs(seed(guide, guide_seed), args, kwargs, param_map)
            if any(site["type"] == "mutable" for site in guide_trace.values()):
                raise TypeError("advi does not support numpyro.mutable sites in the guide")
            model_lp, model_trace = compute_log_probs(replay(seed(model, model_seed), guide_trace), args, kwargs, param_map)
            check_model_guide_match(model_trace, guide_trace)
            elbo = jnp.array(0.0)
            for name in sorted(set(model_lp) | set(guide_lp)):
                elbo = elbo + model_lp.get(name, 0.0) - guide_lp.get(name, 0.0)
            return elbo

        if self.num_particles == 1:
            return {"loss": -particle(rng_key), "mutable_state": None}
        elbos = self.vectorize_particles_fn(particle, jax.random.split(rng_key, self.num_particles))
        return {"loss": -jnp.mean(elbos), "mutable_state": None}


@dataclass(frozen=True)
class ADVIOptions(Options):
    """Options of ``method="advi"``."""

    exclusive = (("optimizer", "learning_rate"), ("optimizer", "schedule"), ("epochs", "num_steps"))

    num_steps: int = option(10_000, "optimisation steps", check=positive_int, flag="steps")
    epochs: int | None = option(
        None, "passes over the data (replaces num_steps: steps = epochs x (N // batch_size))", check=optional(positive_int), type=int
    )
    batch_size: int | None = option(None, "minibatch rows per step (None: full batch)", check=optional(positive_int), type=int)
    learning_rate: float = option(1e-2, "Adam learning rate (the start of the schedule)", check=positive_float)
    schedule: str = schedule_option()
    optimizer: Any = option(None, "any optax transformation (replaces learning_rate and schedule)", check=optimizer, flag=False)
    num_particles: int = option(1, "Monte-Carlo samples per ELBO estimate", check=positive_int)
    guide: str = option("normal", "variational family (normal = mean-field)", choices=tuple(GUIDES))
    num_samples: int = option(1000, "posterior draws kept (per chain for MCMC)", check=positive_int)
    init_scale: float = option(0.01, "initial sd of the variational factors", check=positive_float)
    init_loc: str = option(
        "glorot",
        "initial means: glorot (bnnpp layer weights U(±sqrt(6/(fan_in+fan_out))), biases 0, other sites "
        "U(±init_radius) on the unconstrained space), uniform (every site U(±init_radius)) or map (a short "
        "evidence-trained MAP fit of map_steps steps)",
        choices=("glorot", "uniform", "map"),
    )
    map_steps: int = option(5000, "MAP steps of init_loc='map' and of hyperparameters='evidence'", check=positive_int)
    init_radius: float = option(
        2.0,
        "start values uniform in (-r, r) on the unconstrained space (a start near zero lets hierarchical "
        "scales collapse to a near-linear optimum)",
        check=positive_float,
    )
    hyperparameters: str = option(
        "auto",
        "the sites outside the layers (prior scales, a learned noise sd): variational (factors of q), evidence "
        "(held at the values of an evidence-trained MAP of map_steps steps, which the means also start from; q over "
        "the weights only; guide='normal'), map (the same, held at a joint MAP's values), auto (with guide='normal': "
        "evidence under a hierarchical Normal prior, map under another hierarchical prior on small regression data; "
        "else variational)",
        choices=("variational", "evidence", "map", "auto"),
    )
    chunk_size: int | None = option(None, "steps per compiled chunk", check=optional(positive_int), flag=False, type=int)
    temperature: float = temperature_option()

    def check(self) -> None:
        if self.hyperparameters in ("evidence", "map") and self.guide != "normal":
            raise ValueError(f"hyperparameters={self.hyperparameters!r} holds mean-field factors: use guide='normal' (got {self.guide!r})")


DEFAULTS = ADVIOptions.defaults()
"""Every option's default, as a dict (option name → value)."""


class ADVIInfo(NamedTuple):
    """loss: the negative ELBO estimate of the step; negative_elbo: the same (what the
    diagnostics read for every variational method)."""

    loss: jax.Array
    negative_elbo: jax.Array


def _keys(root) -> Keys:
    # a fixed derivation, so that a seed gives the same fit in every version that keeps it
    key_init, key_draw = jax.random.split(root)
    return Keys(init=key_init, steps=key_init, data=jax.random.fold_in(key_init, 1), sample=key_draw)


def build(model, x, y, options: ADVIOptions, start: dict | None = None) -> Algorithm:
    """ADVI as an :class:`Algorithm` over NumPyro's ``SVIState``. ``start``: site →
    unconstrained value where q's means start (:func:`bnnpp.inference.start.start_position`),
    over ``init_loc`` for the sites it names."""
    n = int(x.shape[0])
    sites = latent_sites(model, x, y)
    choice, frozen = _held_sites(model, x, y, options, sites)
    opt = optimizer_of(options, steps_for(options, n))
    if frozen:  # the evidence-trained hyperparameters are held: their parameters get no update
        names = {f"{name}_auto_{part}" for name in frozen for part in ("loc", "scale")}
        opt = optax.chain(optax.masked(optax.set_to_zero(), lambda params: {k: k in names for k in params}), opt)
    guide = GUIDES[options.guide](model, init_loc_fn=_init_locations(model, x, y, options), init_scale=options.init_scale)
    batch = options.batch_size or n
    # the guide is built on the model itself (its sites); the ELBO sees the rescaled likelihood
    elbo_model = model if batch == n else ScaleObserved(model, factor=n / batch)
    svi = SVI(elbo_model, guide, optax_to_numpyro(opt), SortedTraceELBO(num_particles=options.num_particles))
    x1, y1 = jax.device_put(probe_rows(model, x, y))  # the rows that give the latents their shapes

    if frozen:  # held at the values of an evidence-trained or a joint MAP, which the means start from
        from_map = map_start(model, x, y, options.map_steps, options.batch_size, hyperparameters=choice)
    else:
        from_map = map_start(model, x, y, options.map_steps, options.batch_size) if options.init_loc == "map" else None

    def init(key, data):
        # the guide keeps what it was set up with (its postprocessing closes over the model's
        # arguments), so it is set up on one concrete row rather than on the traced data
        state = svi.init(key, x1, y1)
        if from_map is None and not start:
            return state
        params = svi.optim.get_params(state.optim_state)  # unconstrained
        if from_map is not None:
            position = from_map(jax.random.fold_in(key, 2), data)
        else:
            position = {name: params[f"{name}_auto_loc"] for name in sites} if options.guide == "normal" else _unpack_loc(guide, params)
        params = _with_locs(guide, options.guide, params, apply_start(position, start), sites)
        params = {**params, **{f"{name}_auto_scale": jnp.full_like(params[f"{name}_auto_scale"], _HELD) for name in frozen}}
        return state._replace(optim_state=svi.optim.init(params))

    def step(key, state, batch):
        state, loss = svi.update(state, *batch)
        return state, ADVIInfo(loss, loss)

    def sample(key, state, num_samples):
        params = svi.get_params(state)  # constrained guide parameters
        draws = guide.sample_posterior(key, params, x1, y1, sample_shape=(num_samples,))
        return {name: draws[name] for name in sites}

    def point(state):
        params = svi.get_params(state)
        if options.guide == "normal":
            return {name: params[f"{name}_auto_loc"] for name in sites}
        return _unpack_loc(guide, params)

    def approximation(state):
        params = svi.get_params(state)
        if options.guide == "normal":
            scale = {n: jnp.zeros_like(params[f"{n}_auto_scale"]) if n in frozen else params[f"{n}_auto_scale"] for n in sites}
            return MeanFieldGaussian({n: params[f"{n}_auto_loc"] for n in sites}, scale)
        return GuideParameters(params)

    # mean-field q on small data under a hierarchical prior: not suited, said once after the fit
    small = options.guide == "normal" and small_hierarchical_regression(model, x, y)

    def extras(state):
        return say_not_suited(mean_field_small_data_note("advi", n, held=bool(frozen))) if small else {}

    return Algorithm(
        init,
        step,
        sample,
        RunSpec(num_steps=steps_for(options, n), num_samples=options.num_samples, batch_size=options.batch_size, name="advi"),
        Hooks(
            point=point,
            approximation=approximation,
            extras=extras,
            keys=_keys,
            postfix=lambda info: {"elbo": f"{-info.loss.mean():.4g}"},
        ),
    )


_HELD = -20.0
"""The unconstrained (softplus⁻¹) sd of a held hyperparameter's factor: softplus(−20) ≈ 2e-9,
a point for every purpose (its log q is a constant of the ELBO)."""


def _held_sites(model, x, y, options: ADVIOptions, sites) -> tuple[str, tuple]:
    """``(choice, held)``: the resolved ``hyperparameters`` and the sites held at the MAP's values
    (every latent site outside the bnnpp layers' weights and biases) under ``"evidence"`` (an
    evidence-trained MAP) or ``"map"`` (a joint MAP), or ``"auto"`` with ``guide="normal"`` resolved
    as bbb's (:func:`bnnpp.inference.bbb.resolve_hyperparameters`, which says why); else none."""
    if options.hyperparameters == "variational" or options.guide != "normal":
        return "variational", ()

    layers = find_layers(model, *probe_rows(model, x, y))
    choice = resolve_hyperparameters(options.hyperparameters, model, x, y, layers)
    if choice == "variational":
        return choice, ()
    weights = {s for lay in layers.values() for s in lay["sites"]}
    if not layers:
        raise ValueError(f"hyperparameters={choice!r}: the model has no bnnpp layer; use hyperparameters='variational'")
    return choice, tuple(name for name in sites if name not in weights)


def _init_locations(model, x, y, options: ADVIOptions):
    """NumPyro init strategy for the guide's means. ``init_loc="glorot"``: the weights of bnnpp
    dense/conv layers U(±sqrt(6/(fan_in + fan_out))) (Glorot & Bengio 2010, eq. 16), their
    biases 0 — as bbb starts — and every other site (scales, noise, sites of a hand-written
    model) U(±init_radius) on its unconstrained space. Weights drawn U(±2) instead start the
    network saturated or exploding (a 50-unit layer on standardised inputs has pre-activations
    of sd ≈ 8), and the fit does not recover from it within the default steps."""
    if options.init_loc == "uniform":
        return init_to_uniform(radius=options.init_radius)
    limits, biases = glorot_limits(find_layers(model, *probe_rows(model, x, y)))
    # NumPyro recognises init strategies as functools.partial objects
    return functools.partial(_init_glorot, limits=limits, biases=biases, radius=options.init_radius)


def _init_glorot(site=None, *, limits: dict, biases: frozenset, radius: float):
    """The ``init_loc="glorot"`` strategy of :func:`_init_locations` for one site."""
    if site is None:
        return functools.partial(_init_glorot, limits=limits, biases=biases, radius=radius)
    name = site["name"]
    if site["type"] == "sample" and not site["is_observed"] and name in limits:
        return init_to_uniform(site, radius=limits[name])
    if site["type"] == "sample" and not site["is_observed"] and name in biases:
        return jnp.zeros(tuple(site["kwargs"].get("sample_shape", ())) + tuple(site["fn"].shape()))
    return init_to_uniform(site, radius=radius)


def _with_locs(guide, family: str, params: dict, position: dict, sites) -> dict:
    """The guide's unconstrained parameters with its means set to ``position`` (unconstrained)."""
    if family == "normal":
        return {**params, **{f"{name}_auto_loc": position[name] for name in sites}}
    flat = jnp.concatenate([jnp.ravel(position[name]) for name in guide._init_locs])
    return {**params, f"{guide.prefix}_loc": flat}


def _unpack_loc(guide, params) -> dict:
    """The unconstrained means of a low-rank / full-rank autoguide, per site."""
    return guide._unpack_latent(params[f"{guide.prefix}_loc"])


register(
    Method(
        "advi",
        ADVIOptions,
        build=build,
        summary="mean-field / low-rank / full-rank ADVI (NumPyro SVI + autoguide)",
        smoke={"num_steps": 60, "num_samples": 20, "map_steps": 50},
    )
)
