"""``map``: maximum a posteriori point estimate with optax — the deterministic baseline.

The objective is the negative log joint (prior + likelihood) of the model on the
unconstrained space (see :mod:`bnnpp.inference.joint`). Weights are unconstrained, so for
them this is the usual MAP (with ``priors.flat()``: maximum likelihood). By default
(``hyperparameters="auto"``) the hierarchical scales and a learned noise sd of a bnnpp network
under Normal priors are trained by the Laplace-GGN evidence instead
(:mod:`bnnpp.inference.evidence`). Under ``hyperparameters="map"`` (and ``"auto"`` for other
models) they are optimised jointly, as ``log σ`` including the log-Jacobian: the mode of the
density of ``log σ``, which stays away from the σ → 0 spike of the joint density of weights
and their scale (but not from collapsing into it on small data). With minibatches the likelihood is scaled by N/B, so each step's loss is an
unbiased estimate of the full negative log joint.

The posterior has one chain and one draw, so ``predict``, ``to_arviz`` and ``save`` work as
for every other method (all uncertainty is aleatoric).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bnnpp.inference.algorithm import Algorithm, Hooks, Keys, RunSpec
from bnnpp.inference.chunks import all_finite
from bnnpp.inference.collapse import say_not_suited, sparse_inputs_note
from bnnpp.inference.evidence import EvidenceState, evidence_plan, hyper_optimizer, hyper_start, resolve_every, scheduled_update
from bnnpp.inference.joint import constrained_values, init_start, joint_terms
from bnnpp.inference.model_info import ModelInfo
from bnnpp.inference.optimizer_step import apply_optimizer
from bnnpp.inference.options import (
    Options,
    init_loc_option,
    optimizer,
    optimizer_of,
    option,
    optional,
    positive_float,
    positive_int,
    steps_for,
    temperature_option,
)
from bnnpp.inference.registry import Method, register
from bnnpp.inference.start import apply_start
from bnnpp.introspection import probe_rows

__all__ = ["DEFAULTS", "MAPInfo", "MAPOptions", "MAPState", "build"]


HYPERPARAMETERS = ("auto", "evidence", "map")
HYPERPARAMETERS_HELP = (
    "how prior scales and a learned noise sd are fitted: evidence (the Laplace-GGN marginal likelihood every "
    "evidence_every steps, Immer et al. 2021), map (jointly with the weights), auto (evidence for bnnpp networks "
    "of at most 2,000 weights with such sites under Normal priors, else map)"
)


@dataclass(frozen=True)
class MAPOptions(Options):
    """Options of ``method="map"``."""

    exclusive = (("optimizer", "learning_rate"), ("epochs", "num_steps"))

    num_steps: int = option(5_000, "optimisation steps", check=positive_int, flag="steps")
    epochs: int | None = option(
        None, "passes over the data (replaces num_steps: steps = epochs x (N // batch_size))", check=optional(positive_int), type=int
    )
    batch_size: int | None = option(None, "minibatch rows per step (None: full batch)", check=optional(positive_int), type=int)
    learning_rate: float = option(1e-2, "Adam learning rate", check=positive_float)
    optimizer: Any = option(None, "any optax transformation (replaces learning_rate)", check=optimizer, flag=False)
    init_loc: str = init_loc_option()
    init_radius: float = option(
        2.0,
        "start values uniform in (-r, r) on the unconstrained space (init_loc uniform; non-layer sites under glorot)",
        check=positive_float,
    )
    chunk_size: int | None = option(None, "steps per compiled chunk", check=optional(positive_int), flag=False, type=int)
    temperature: float = temperature_option()
    hyperparameters: str = option("auto", HYPERPARAMETERS_HELP, choices=HYPERPARAMETERS)
    evidence_every: int | None = option(
        None, "steps between evidence updates (None: 1/50 of the run)", check=optional(positive_int), type=int
    )
    evidence_steps: int = option(20, "Adam steps on the hyperparameters per evidence update", check=positive_int)

    def check(self) -> None:
        super().check()
        if self.temperature != 1.0 and self.hyperparameters == "evidence":
            raise ValueError(
                f"hyperparameters={self.hyperparameters!r} does not take a temperature (the evidence is of the "
                "untempered model): use hyperparameters='map' or temperature=1"
            )


DEFAULTS = MAPOptions.defaults()
"""Every option's default, as a dict (option name → value)."""


class MAPState(NamedTuple):
    """position: site → unconstrained value; opt_state: the optimizer's state."""

    position: dict
    opt_state: Any


class MAPInfo(NamedTuple):
    """loss: the (minibatch estimate of the) negative log joint, scalar."""

    loss: jax.Array


def map_keys(root) -> Keys:
    """The keys of a MAP fit from its root key (a fixed derivation: a seed gives the same fit in
    every version that keeps it)."""
    key_init, key_model = jax.random.split(root)
    return Keys(init=key_init, steps=key_model, data=jax.random.fold_in(key_init, 1), sample=key_model)


def evidence_plan_of(model, x, y, options) -> Any:
    """The :class:`~bnnpp.inference.evidence.EvidencePlan` of options with a
    ``hyperparameters`` field, or ``None`` for the joint MAP: ``"map"``, or ``"auto"`` where
    the evidence has nothing to learn or does not apply (see
    :func:`~bnnpp.inference.evidence.evidence_plan`; a network of more than
    :data:`~bnnpp.inference.evidence.FULL_LIMIT` weights, where only the diagonal GGN is
    affordable; a tempered fit, ``temperature != 1``, whose evidence would be of another model).

    Why ``"auto"`` is map's default: on small regression data (a hierarchical or fixed Normal
    prior, a learned noise sd, tens of rows) the joint MAP of the weights, their scales and the
    noise collapses to a flat mean (the scales' spike at 0) or fits the noise (the noise sd's
    maximum sits at the training residuals), while the evidence (MacKay 1992; Immer et al. 2021)
    integrates the weights out around the mode and charges the fit for the parameters it spends."""
    choice = getattr(options, "hyperparameters", "map")
    if choice == "map" or (choice == "auto" and getattr(options, "temperature", 1.0) != 1.0):
        return None
    plan = evidence_plan(model, x, y, required=choice == "evidence")
    if choice == "auto" and plan is not None and plan.structure != "full":
        # large nets: the diagonal GGN's log determinant is only an upper bound (Hadamard's
        # inequality), and plenty of data pins the scales anyway
        return None
    return plan


def build(model, x, y, options: MAPOptions, start: dict | None = None, info: ModelInfo | None = None) -> Algorithm:
    """MAP as an :class:`Algorithm`; ``sample`` repeats the mode ``(num_samples, *site)``.
    ``start``: site → unconstrained start value for the sites it names
    (:func:`bnnpp.inference.start.start_position`); the others start uniform in ±init_radius.
    ``info``: the model's :class:`ModelInfo` (traced here when not given)."""
    opt = optimizer_of(options)
    info = info or ModelInfo.of(model, x, y)
    sites = info.sites
    draw_start = init_start(options.init_loc, info.layers)
    n = x.shape[0]
    batch = options.batch_size or n
    key_model = np.zeros(2, np.uint32)  # the models draw nothing random at a fixed position: a fixed key (PRNGKey(0))

    plan = evidence_plan_of(model, x, y, options)
    num_steps = steps_for(options, n)
    every = resolve_every(options.evidence_every, num_steps)
    starts = None if plan is None else hyper_start(model, plan, x, y)

    def init(key, data):
        u = apply_start(draw_start({name: s.shape for name, s in sites.items()}, key, options.init_radius), start)
        if plan is None:
            return MAPState(u, opt.init(u))
        # hyperparameters start at unit prior scales and a bounded noise sd (evidence.hyper_start)
        hyper = apply_start(starts, start)
        u = {**u, **hyper}
        return MAPState(u, EvidenceState(opt.init(u), hyper_optimizer().init(hyper)))

    def neg_log_joint(u, xb, yb):
        log_prior, log_lik, _ = joint_terms(model, u, xb, yb, key_model)
        return -(log_prior + (n / batch) * log_lik)

    def step(key, state, batch_data):
        loss, grads = jax.value_and_grad(neg_log_joint)(state.position, *batch_data)
        if plan is None:
            position, opt_state = apply_optimizer(opt, grads, state.opt_state, state.position)
            return MAPState(position, opt_state), MAPInfo(loss)
        # the weights by the log joint with the hyperparameters held (`periodic` moves them)
        ev = state.opt_state
        position, opt_inner = apply_optimizer(opt, grads, ev.opt, state.position)
        position = {**position, **{k: state.position[k] for k in plan.hyper}}
        return MAPState(position, ev._replace(opt=opt_inner)), MAPInfo(loss)

    def periodic(t, state, batch_data):
        # after step t (0-based), every `every` steps: the hyperparameters by the evidence at the
        # new weights (bnnpp.inference.evidence); the last update leaves `every` steps to the weights
        ev = state.opt_state
        position, hyper_opt = scheduled_update(
            model, plan, t, state.position, ev.hyper_opt, batch_data, n, every, num_steps, options.evidence_steps
        )
        return MAPState(position, ev._replace(hyper_opt=hyper_opt))

    # small regression data too sparse for its inputs (n < 3**d, as the ensemble's): no spread where the mode misses
    sparse = sparse_inputs_note("map", model, x, y, info.layers)

    def sample(key, state, num_samples):
        # latent shapes do not depend on n: one row is enough to run the model
        values = constrained_values(model, state.position, *probe_rows(model, x, y), key_model, sites)
        return jax.tree_util.tree_map(lambda v: jnp.broadcast_to(v, (num_samples, *jnp.shape(v))), values)

    return Algorithm(
        init,
        step,
        sample,
        RunSpec(num_steps=num_steps, num_samples=1, batch_size=options.batch_size, name="map"),
        Hooks(
            point=lambda state: state.position,
            keys=map_keys,
            postfix=lambda info: {"-log joint": f"{info.loss.mean():.4g}"},
            periodic=None if plan is None else periodic,
            extras=(lambda state: say_not_suited(sparse)) if sparse else None,
        ),
    )


register(
    Method("map", MAPOptions, build=build, summary="maximum a posteriori point estimate (optax on the log joint)", smoke={"num_steps": 60})
)


def map_start(model, x, y, num_steps: int, batch_size: int | None = None, hyperparameters: str = "map"):
    """A short MAP fit for a variational method to start from (``init_loc="map"``): ``num_steps``
    steps of :func:`build`'s algorithm with the default options (``hyperparameters="map"``; ``"auto"`` trains the
    prior scales and noise by evidence), on minibatches of ``batch_size`` rows drawn uniformly
    (``None``: the full data), run inside the caller's compiled ``init``; ``hyperparameters``
    as :class:`MAPOptions`' (``"evidence"``: the prior scales and noise by the evidence).

    Returns ``start(key, data) -> {site: unconstrained value}``, the MAP position."""
    # map's own start ("auto": U(±2/sqrt(fan_in)) for hierarchical layers, Glorot for fixed-scale ones): a wide U(±2)
    # start saturates the first layer on several inputs, and a heteroscedastic net's log-scale output can stall far
    # off the data from there (bnnpp.inference.options.init_loc_option)
    options = MAPOptions(num_steps=num_steps, batch_size=batch_size, hyperparameters=hyperparameters, init_loc="auto")
    one = build(model, x, y, options)
    n = x.shape[0]

    # the fallback start, taken when the run goes non-finite (e.g. a heteroscedastic net whose log-scale output
    # overflows): Glorot-scale layers everywhere, a fresh draw
    fallback = build(model, x, y, replace(options, init_loc="glorot"))

    def start(key, data):
        xd, yd = data
        key_init, key_steps = jax.random.split(key)

        def body(carry, kt):
            state, restarted, stopped = carry
            k, t = kt
            if batch_size is None or batch_size >= n:
                batch = (xd, yd)
            else:
                rows = jax.random.randint(k, (batch_size,), 0, n)
                batch = (xd[rows], yd[rows])
            new, info = one.step(k, state, batch)
            new = new if one.hooks.periodic is None else one.hooks.periodic(t, new, batch)
            finite = all_finite((info.loss, new.position))
            # the first non-finite step restarts from the fallback start, a second one stops at the state before it
            # (the runner's NaN guard); never handing NaN to the method that starts here
            restart = ~finite & ~restarted & ~stopped
            stopped = stopped | (~finite & restarted)
            pick = jax.tree_util.tree_map(
                lambda a, old, upd: jnp.where(restart, a, jnp.where(stopped | ~finite, old, upd)), again, state, new
            )
            return (pick, restarted | restart, stopped), None

        again = fallback.init(jax.random.fold_in(key_init, 1), data)  # once, outside the loop
        steps = (jax.random.split(key_steps, num_steps), jnp.arange(num_steps, dtype=jnp.int32))
        carry = (one.init(key_init, data), jnp.zeros((), bool), jnp.zeros((), bool))
        (state, _, _), _ = jax.lax.scan(body, carry, steps)
        return state.position

    return start
