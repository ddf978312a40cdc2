"""``mc_dropout``: Monte-Carlo dropout (Gal & Ghahramani 2016) and concrete dropout (Gal,
Hron & Kendall 2017) as variational inference over the weights of bnnpp layers.

**The family.** For every bnnpp layer ``l`` with weights ``M_l`` the approximate posterior
is ``W_l = diag(z_l) M_l`` with ``z_l,i ~ Bernoulli(1 − p_l)`` per *input* ``i`` (Gal &
Ghahramani 2016, eq. 2): dropout on the inputs of every layer. A dense layer's row ``i``
(``M_l[i, :]``) is dropped; a convolution drops whole input channels (``M_l[:, :, i, :]``,
spatial dropout), so that dropping an input of the layer is exactly zeroing a slice of its
kernel. Biases and every other latent site are point estimates (MAP, as ``method="map"``, on
the unconstrained space). No ``1/(1 − p)`` rescaling: ``M`` is the variational mean of Gal's
derivation and a draw is ``M`` with rows zeroed.

**Hierarchical priors.** Under a hierarchical Normal prior on networks of at most 2,000 weights
(``hyperparameters="auto"``, the default) the layer scales and a learned noise sd are not
point estimates of the objective but trained by the Laplace-GGN evidence at the means ``M``
every ``evidence_every`` steps (:mod:`bnnpp.inference.evidence`, as ``map`` and the ensemble):
the joint point estimate runs to the spike of the prior at scale → 0, where every weight is
zero and the predictive a constant (the density of ``N(w | 0, s²)`` at ``w = 0`` grows without
bound as ``s → 0``).

**The objective** (Gal & Ghahramani 2016, §3 and appendix; Gal et al. 2017, eq. 3) is minimised with
Adam::

    − (N/B) Σ_batch log p(y | x, diag(z) M)       one mask per example and layer
    − Σ_l (1 − p_l) log p(M_l)                     weight decay from the prior (the KL's
                                                   Gaussian term; exact for a normal prior)
    − Σ_{other sites} log p(site)                  (MAP terms)
    − Σ_l K_l H(p_l)     [concrete only]           K_l inputs of layer l, H Bernoulli entropy

With ``concrete=True`` the masks are the concrete (relaxed Bernoulli) relaxation at
temperature ``relaxation_temperature`` (Gal et al. 2017 eq. 5) and ``logit p_l`` is learnt per layer
by the same gradient; without it ``p_l = rate`` for every layer.

**The draws.** Each posterior draw is every site's point value with each layer's weight
matrix ``M_l`` multiplied by a fresh ``Bernoulli(1 − p_l)`` row mask, so
``Posterior.samples``, ``predict`` (the MC-dropout predictive: the average over draws) and
``to_arviz`` need nothing dropout-specific; ``stats.extras["dropout_rate"]`` has the
(learnt) rate of each layer.

**Which models.** ``mlp``, ``cnn``, ``lenet5`` and any model whose weights come from
:func:`bnnpp.models.layers.dense` / :func:`bnnpp.models.layers.conv2d`: dropout is attached
to the layer message those helpers send, and a layer's weights must be its latent site
``<name>.w`` (their default). Weights sampled with plain ``numpyro.sample`` are not seen
(such a model with no bnnpp layer at all is rejected with a one-line error).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
from numpyro.primitives import Messenger

from bnnpp.inference.algorithm import Algorithm, Hooks, RunSpec
from bnnpp.inference.collapse import dropout_small_data_note, say_not_suited, small_hierarchical_regression
from bnnpp.inference.evidence import EvidenceState, hyper_optimizer, hyper_start, member_hyperparameters, resolve_every, scheduled_update
from bnnpp.inference.joint import constrained_values, init_start, joint_terms, log_likelihood, site_log_prior
from bnnpp.inference.map_estimate import HYPERPARAMETERS, MAPOptions, evidence_plan_of
from bnnpp.inference.optimizer_step import apply_optimizer
from bnnpp.inference.options import (
    Options,
    boolean,
    fraction,
    init_loc_option,
    optimizer,
    optimizer_of,
    option,
    optional,
    positive_float,
    positive_int,
    steps_for,
)
from bnnpp.inference.registry import Method, register
from bnnpp.inference.start import apply_start
from bnnpp.inference.variational_layers import find_layers, latent_layers
from bnnpp.introspection import latent_sites, probe_rows
from bnnpp.models.layers import LAYER_EFFECT

__all__ = ["MCDropoutInfo", "MCDropoutOptions", "MCDropoutState", "build", "dropout_layers"]


@dataclass(frozen=True)
class MCDropoutOptions(Options):
    """Options of ``method="mc_dropout"``."""

    exclusive = (("optimizer", "learning_rate"), ("epochs", "num_steps"))

    rate: float = option(
        0.1,
        "dropout probability p on the inputs of every layer (the start value with concrete)",
        check=fraction(low_open=True, high_open=True),
    )
    concrete: bool = option(False, "learn p per layer (concrete dropout, Gal et al. 2017)", check=boolean)
    relaxation_temperature: float = option(
        0.1,
        "concrete relaxation temperature (Gal et al. 2017 eq. 5; not the posterior temperature, which mc_dropout does not take)",
        check=positive_float,
    )
    refused: ClassVar[dict[str, str]] = {
        "temperature": "mc_dropout cannot temper its posterior (its objective is not a log density); the concrete relaxation's "
        "temperature is relaxation_temperature"
    }
    num_steps: int = option(5_000, "optimisation steps", check=positive_int, flag="steps")
    epochs: int | None = option(
        None, "passes over the data (replaces num_steps: steps = epochs x (N // batch_size))", check=optional(positive_int), type=int
    )
    batch_size: int | None = option(None, "minibatch rows per step (None: full batch)", check=optional(positive_int), type=int)
    learning_rate: float = option(1e-2, "Adam learning rate", check=positive_float)
    optimizer: Any = option(None, "any optax transformation (replaces learning_rate)", check=optimizer, flag=False)  # noqa: RUF009
    init_loc: str = init_loc_option("auto_wide")  # U(±2) under hierarchical priors: the fan_in start cost moons accuracy (0.847)
    init_radius: float = option(
        2.0,
        "start values uniform in (-r, r) on the unconstrained space (init_loc uniform; non-layer sites under glorot)",
        check=positive_float,
    )
    num_samples: int = option(100, "posterior draws (dropout masks)", check=positive_int)
    hyperparameters: str = option(
        "auto",
        "how prior scales and a learned noise sd are fitted: evidence (the Laplace-GGN marginal likelihood at the means every "
        "evidence_every steps, Immer et al. 2021), map (jointly with the weights), auto (evidence under a hierarchical Normal "
        "prior on networks of at most 2,000 weights, else map)",
        choices=HYPERPARAMETERS,
    )
    evidence_every: int | None = option(
        None, "steps between evidence updates (None: 1/50 of the run)", check=optional(positive_int), type=int
    )
    evidence_steps: int = option(20, "Adam steps on the hyperparameters per evidence update", check=positive_int)
    chunk_size: int | None = option(None, "steps per compiled chunk", check=optional(positive_int), flag=False, type=int)


class MCDropoutState(NamedTuple):
    """position: site → unconstrained value (the means M and the point sites); logit_p:
    ``(L,)`` logit of each layer's dropout rate; opt_state: the optimizer's state."""

    position: dict
    logit_p: jax.Array
    opt_state: Any


class MCDropoutInfo(NamedTuple):
    """loss: the minibatch estimate of the objective (scalar); rate: ``(L,)`` dropout rates."""

    loss: jax.Array
    rate: jax.Array


def dropout_layers(model, x, y) -> dict[str, dict]:
    """The layers dropout attaches to: name → find_layers' record plus ``index``, ``site``
    (the weight site: ``<name>.w``, or a Flax layer's kernel) and ``axis`` (the weight axis of the inputs: 0 dense, 2 conv2d).

    Raises:
        ValueError: the model has no bnnpp layer, or a layer's weights are not its latent
            site ``<name>.w``.
    """
    layers = latent_layers(model, x, y, "mc_dropout", "drops the inputs of bnnpp layers")
    return {name: {**layer, "site": layer["sites"][0], "axis": 0 if layer["kind"] == "dense" else 2} for name, layer in layers.items()}


class _InputDropout(Messenger):
    """Multiply the inputs of every bnnpp layer by a mask, one per example (and input unit,
    or input channel for a convolution); the layer's default then samples/applies M."""

    def __init__(self, fn, layers, logit_p, key, temperature, concrete):
        super().__init__(fn)
        self.layers, self.logit_p, self.key = layers, logit_p, key
        self.temperature, self.concrete = temperature, concrete

    def process_message(self, msg):
        if msg["type"] != LAYER_EFFECT or msg["layer"] not in self.layers:
            return
        layer = self.layers[msg["layer"]]
        name, x, units, prior, scale = msg["args"]
        shape = x.shape if layer["kind"] == "dense" else (x.shape[0], *([1] * (x.ndim - 2)), x.shape[-1])
        key = jax.random.fold_in(self.key, layer["index"])
        logit = self.logit_p[layer["index"]]
        if self.concrete:  # Gal et al. 2017 eq. 5: relaxed drop indicator
            u = jax.random.uniform(key, shape, minval=1e-7, maxval=1.0 - 1e-7)
            drop = jax.nn.sigmoid((logit + jnp.log(u) - jnp.log1p(-u)) / self.temperature)
            keep = 1.0 - drop
        else:
            keep = jax.random.bernoulli(key, jax.nn.sigmoid(-logit), shape).astype(x.dtype)
        msg["args"] = (name, x * keep, units, prior, scale)


def build(model, x, y, options: MCDropoutOptions, start: dict | None = None) -> Algorithm:
    """MC / concrete dropout as an :class:`Algorithm`; ``sample`` returns
    ``{site: (num_samples, *site)}``, weight sites with their dropped rows zeroed. ``start``:
    site → unconstrained start value (:func:`bnnpp.inference.start.start_position`)."""
    layers = dropout_layers(model, x, y)
    sites = latent_sites(model, x, y)
    draw_start = init_start(options.init_loc, find_layers(model, *probe_rows(model, x, y)))
    weight_layer = {layer["site"]: layer for layer in layers.values()}
    n = x.shape[0]
    batch = options.batch_size or n
    opt = optimizer_of(options)
    key_model = jax.random.PRNGKey(0)  # the models draw nothing random at a fixed position
    logit0 = math.log(options.rate) - math.log1p(-options.rate)  # host arithmetic: build may run inside a trace (sweep)
    fan_in = jnp.asarray([layer["in"] for layer in layers.values()], jnp.float32)  # K_l
    # the ensemble's rule: map's "auto" (evidence on at most 2,000 weights) under a hierarchical Normal prior, else "map"
    plan = evidence_plan_of(model, x, y, MAPOptions(hyperparameters=member_hyperparameters(options.hyperparameters, model, x, y)))
    num_steps = steps_for(options, n)
    every = resolve_every(options.evidence_every, num_steps)
    starts = None if plan is None else hyper_start(model, plan, x, y)

    def init(key, data):
        u = apply_start(draw_start({name: s.shape for name, s in sites.items()}, key, options.init_radius), start)
        logit_p = jnp.full((len(layers),), logit0, jnp.float32)
        if plan is None:
            return MCDropoutState(u, logit_p, opt.init((u, logit_p)))
        # the hyperparameters' start of map (evidence.hyper_start)
        u = {**u, **apply_start(starts, start)}
        return MCDropoutState(u, logit_p, EvidenceState(opt.init((u, logit_p)), hyper_optimizer().init({k: u[k] for k in plan.hyper})))

    def objective(params, key, xb, yb):
        u, logit_p = params
        if not options.concrete:
            logit_p = jax.lax.stop_gradient(logit_p)
        handler = lambda m: _InputDropout(m, layers, logit_p, key, options.relaxation_temperature, options.concrete)
        _, _, trace = joint_terms(model, u, xb, yb, key_model, extra_handlers=(handler,))
        p = jax.nn.sigmoid(logit_p)
        log_prior = jnp.zeros(())
        for name, site in trace.items():
            if site["type"] == "sample" and not site["is_observed"]:
                lp = site_log_prior(site)
                if name in weight_layer:  # Gal & Ghahramani: (1 − p) × the Gaussian KL term
                    lp = (1.0 - p[weight_layer[name]["index"]]) * lp
                log_prior = log_prior + lp
        entropy = -(p * jnp.log(p) + (1 - p) * jnp.log1p(-p))
        reg = jnp.sum(fan_in * entropy) if options.concrete else 0.0
        return -(log_prior + reg + (n / batch) * log_likelihood(trace))

    def step(key, state, batch_data):
        params = (state.position, state.logit_p)
        loss, grads = jax.value_and_grad(objective)(params, key, *batch_data)
        inner = state.opt_state if plan is None else state.opt_state.opt
        (position, logit_p), inner = apply_optimizer(opt, grads, inner, params)
        if plan is None:
            return MCDropoutState(position, logit_p, inner), MCDropoutInfo(loss, jax.nn.sigmoid(logit_p))
        # the hyperparameters are held between evidence updates (`periodic` moves them)
        position = {**position, **{k: state.position[k] for k in plan.hyper}}
        return MCDropoutState(position, logit_p, state.opt_state._replace(opt=inner)), MCDropoutInfo(loss, jax.nn.sigmoid(logit_p))

    def periodic(t, state, batch_data):
        # after step t (0-based), every `every` steps: the hyperparameters by the evidence at the means M (no dropout)
        ev = state.opt_state
        position, hyper_opt = scheduled_update(
            model, plan, t, state.position, ev.hyper_opt, batch_data, n, every, num_steps, options.evidence_steps
        )
        return state._replace(position=position, opt_state=ev._replace(hyper_opt=hyper_opt))

    def sample(key, state, num_samples):
        values = constrained_values(model, state.position, *probe_rows(model, x, y), key_model, sites)
        keep_p = jax.nn.sigmoid(-state.logit_p)

        def one(k):
            out = dict(values)
            for name, layer in weight_layer.items():
                w = values[name]
                mask = jax.random.bernoulli(jax.random.fold_in(k, layer["index"]), keep_p[layer["index"]], (w.shape[layer["axis"]],))
                shape = [1] * w.ndim
                shape[layer["axis"]] = -1
                out[name] = w * mask.reshape(shape).astype(w.dtype)
            return out

        return jax.vmap(one)(jax.random.split(key, num_samples))

    names = list(layers)
    small = small_hierarchical_regression(model, x, y)  # said once after the fit: not suited to the case

    def extras(state):
        rates = {"dropout_rate": {k: float(v) for k, v in zip(names, jax.nn.sigmoid(state.logit_p), strict=True)}}
        return {**rates, **(say_not_suited(dropout_small_data_note("mc_dropout", n)) if small else {})}

    return Algorithm(
        init,
        step,
        sample,
        RunSpec(
            num_steps=num_steps,
            num_samples=options.num_samples,
            batch_size=options.batch_size,
            name="concrete dropout" if options.concrete else "mc dropout",
        ),
        Hooks(
            point=lambda state: state.position,
            extras=extras,
            postfix=lambda info: {"loss": f"{info.loss.mean():.4g}"},
            periodic=None if plan is None else periodic,
        ),
    )


register(
    Method(
        "mc_dropout",
        MCDropoutOptions,
        build=build,
        summary="MC dropout on every layer's inputs; concrete=True learns the rates (Gal & Ghahramani 2016; Gal et al. 2017)",
        smoke={"num_steps": 60, "num_samples": 20},
    )
)
