"""What the many-chain samplers (``chees``, ``mclmc``) share: chains stepped in lock-step
(``vmap``, one step size and one trajectory length for all, tuned from statistics pooled
over the chains), a warm-up of ``num_warmup`` steps followed by ``num_samples`` kept steps,
and a diagonal inverse mass matrix estimated from every chain's positions in a window of
the warm-up; all of it one runner :class:`~bnnpp.inference.algorithm.Algorithm` whose
draws are emitted after every kept step, so that checkpoints, resume, the NaN guard, the
progress bar and the device mesh (chains split over ``members``) come from the runner.

Every chain runs on the model's unconstrained space with the shared log joint
(:func:`bnnpp.inference.joint.joint_terms`, log-Jacobians included) on the full data; with
``noncentered=True`` (the default) on the non-centred form of the model (:func:`bnnpp.inference.nuts.noncentered_model`:
every location-scale weight with a learned scale ``w = loc + scale · z``, z sampled), whose draws are mapped back to
the weights themselves, so the posterior's sites are the model's. A
sampler supplies a :class:`Sampler`: its kernel, its tuning state and update, and the
window of the warm-up in which the mass matrix is estimated.

Per-draw statistics (``sample_stats``, ``(chain, draw)``, named as NUTS's):
``acceptance_rate``, ``diverging`` (the energy error passed 1,000), ``step_size``,
``n_steps`` (integrator steps of the transition), ``energy`` (the proposal's energy as
BlackJAX's ``HMCInfo`` gives it; a non-finite one, a divergence, as the float32 maximum) and ``lp`` (the log joint density at the draw). ``extras``: ``divergences`` and
``divergences_per_chain`` (kept draws), ``step_size`` and ``mean_n_steps`` after warm-up,
``mass_matrix`` (``"diagonal"`` once estimated, else ``"identity"``), ``start``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from bnnpp.inference.algorithm import Algorithm, Hooks, RunSpec
from bnnpp.inference.joint import constrained_values, init_uniform
from bnnpp.inference.nuts import decentred_start, noncentered_model
from bnnpp.inference.options import Options, boolean, non_negative_int, option, optional, positive_float, positive_int
from bnnpp.inference.pathfinder import KEY_MODEL, STARTS, log_joint, start_options, starts
from bnnpp.inference.start import apply_start
from bnnpp.introspection import latent_sites, num_parameters, probe_rows

__all__ = ["ManyChainState", "Moments", "Sampler", "build_many_chain", "default_num_chains", "halton"]

INITS = STARTS
MAX_ENERGY = float(np.finfo(np.float32).max)
"""The ``energy`` statistic of a proposal whose energy is not finite (a divergence)."""


def default_num_chains() -> int:
    """Chains when ``num_chains`` is not given: 8 on a CPU (two or four cores keep 8
    vectorised chains busy), 64 on an accelerator (lock-step chains fill it at the cost
    of one)."""
    return 8 if jax.default_backend() == "cpu" else 64


@dataclass(frozen=True)
class ManyChainOptions(Options):
    """The options the many-chain samplers (mclmc, chees) share: chains, lengths, starts."""

    num_chains: int | None = option(
        None, "chains (mclmc: in lock-step; unset: 8 on a CPU, 64 on an accelerator)", check=optional(positive_int), type=int
    )
    num_warmup: int = option(500, "warm-up (tuning) steps, discarded", check=non_negative_int)
    num_samples: int = option(1000, "posterior draws kept (per chain for MCMC)", check=positive_int)
    num_steps: int | None = option(
        None, "steps per chain, replacing num_warmup and num_samples: half warm-up, half kept", check=optional(positive_int), type=int
    )
    init_loc: str
    init_radius: float = option(2.0, "start values uniform in (-r, r) on the unconstrained space", check=positive_float)
    pathfinder_paths: int
    pathfinder_maxiter: int
    init_loc, pathfinder_paths, pathfinder_maxiter = start_options()  # as nuts's
    noncentered: bool = option(
        True,
        "sample the weights whose scale is learned (a hierarchical prior) as loc + scale * z (non-centred; off: the weights themselves)",
        check=boolean,
    )
    chunk_size: int | None = option(None, "segments (about draws) per compiled chunk", check=optional(positive_int), flag=False, type=int)

    exclusive = (("num_steps", "num_warmup"), ("num_steps", "num_samples"))

    def resolve(self, n: int) -> ManyChainOptions:
        """``num_steps`` T → ``num_warmup = T // 2``, ``num_samples = T − T // 2``; an unset
        ``num_chains`` → :func:`default_num_chains`."""
        out = self
        if out.num_chains is None:
            out = dataclasses.replace(out, num_chains=default_num_chains())
        if out.num_steps is not None:
            out = dataclasses.replace(out, num_warmup=out.num_steps // 2, num_samples=out.num_steps - out.num_steps // 2)
        return out


def sampled_model(model, x, y, options):
    """The model the chains run on: ``model`` with its learned location-scale sites decentred
    (:func:`bnnpp.inference.nuts.noncentered_model`) when ``options.noncentered``, else ``model``."""
    if not getattr(options, "noncentered", False):
        return model
    return noncentered_model(model, x, y)[0]


def halton(i, max_bits: int):
    """The van der Corput (base-2 Halton) value of integer ``i + 1`` in (0, 1): BlackJAX's
    ``halton_sequence``, the quasi-random jitter of ChEES's trajectory length (Hoffman et
    al. 2021, §3)."""
    from blackjax.mcmc.dynamic_hmc import halton_sequence

    return halton_sequence(jnp.asarray(i, jnp.int32), max_bits)


class Moments(NamedTuple):
    """Pooled running moments of the chains' flattened positions: count (scalar), mean and
    m2 (sum of squared deviations), both ``(D,)``."""

    count: jax.Array
    mean: jax.Array
    m2: jax.Array


def merge_moments(m: Moments, batch: jax.Array) -> Moments:
    """``m`` with the rows of ``batch`` ``(chains, D)`` added (Chan, Golub & LeVeque 1979's
    pairwise update)."""
    nb = jnp.asarray(batch.shape[0], jnp.float32)
    mean_b = jnp.mean(batch, axis=0)
    m2_b = jnp.sum(jnp.square(batch - mean_b), axis=0)
    n = m.count + nb
    delta = mean_b - m.mean
    return Moments(n, m.mean + delta * nb / n, m.m2 + m2_b + jnp.square(delta) * m.count * nb / n)


def inverse_mass_matrix(m: Moments, threshold: float) -> jax.Array:
    """The diagonal inverse mass matrix ``(D,)``: the pooled variances shrunk towards 1e-3
    as Stan does (``var · n/(n+5) + 1e-3 · 5/(n+5)``) once ``count ≥ threshold``, else ones."""
    n = m.count
    var = m.m2 / jnp.maximum(n - 1.0, 1.0)
    var = var * (n / (n + 5.0)) + 1e-3 * (5.0 / (n + 5.0))
    return jnp.where(n >= threshold, var, jnp.ones_like(var))


class ChainStats(NamedTuple):
    """The last transition of every chain, ``(chains,)`` each: acceptance_rate, diverging,
    step_size, n_steps (int32), energy, lp."""

    acceptance_rate: jax.Array
    diverging: jax.Array
    step_size: jax.Array
    n_steps: jax.Array
    energy: jax.Array
    lp: jax.Array


class ManyChainState(NamedTuple):
    """chains: the sampler's per-chain states (leaves ``(chains, ...)``); tuning: the
    sampler's tuning state (shared by the chains); moments: :class:`Moments` of the
    mass-matrix window; last: :class:`ChainStats`; divergences: ``(chains,)`` int32, kept
    draws that diverged; t: steps done (int32); chain: ``(chains,)`` int32, each chain's
    number (its random key is the ``chain``-th of the step key's split, so a group of chains
    run on its own draws the keys it would draw in the whole fit)."""

    chains: Any
    tuning: Any
    moments: Moments
    last: ChainStats
    divergences: jax.Array
    t: jax.Array
    chain: jax.Array


PER_CHAIN = ManyChainState(chains=True, tuning=False, moments=False, last=True, divergences=True, t=False, chain=True)
"""Which parts of a :class:`ManyChainState` carry the chain axis (``RunSpec.chain_axes``); the
rest is shared and, after the warm-up, the same in every group of chains."""


class ManyChainInfo(NamedTuple):
    """Per chain, ``(chains,)`` each: loss: minus the log density after the step;
    acceptance_rate: the acceptance probability; step_size: the step's step size."""

    loss: jax.Array
    acceptance_rate: jax.Array
    step_size: jax.Array


class Sampler(NamedTuple):
    """A lock-step sampler for :func:`build_many_chain`.

    init_chain: ``init_chain(position, logdensity) -> chain_state`` (one chain);
    init_tuning: ``init_tuning() -> tuning``;
    params: ``params(tuning, warm) -> (step_size, steps_param)``, scalars: the kernel's step
        size and its trajectory parameter, from the tuning during warm-up (``warm`` a traced
        bool) and from its averages after;
    kernel: ``kernel(key, chain_state, logdensity, step_size, inverse_mass_matrix,
        steps_param) -> (chain_state, HMCInfo)`` (one chain);
    update: ``update(tuning, old_chains, new_chains, info, inverse_mass_matrix, t) ->
        tuning`` on warm-up step ``t`` (all chains' states and infos);
    window: ``(start, stop)`` warm-up steps whose positions enter the mass-matrix moments;
    threshold: pooled draws needed before the estimate replaces the identity;
    auxiliary: standard-normal coordinates appended to every chain's position (a dynamics that
        needs more dimensions than the model has: the chains sample the model's posterior times
        N(0, I), whose marginal is the posterior; the draws and ``lp`` leave them out).
    keyed_init: ``init_chain`` takes a third argument, the chain's own PRNG key (a chain state
        with a random part, e.g. generalised HMC's momentum and slice).
    """

    init_chain: Callable
    init_tuning: Callable
    params: Callable
    kernel: Callable
    update: Callable
    window: tuple[int, int]
    threshold: float
    auxiliary: int = 0
    keyed_init: bool = False


def max_bits(num_steps: int) -> int:
    """Bits of the Halton index: enough for ``num_steps`` distinct values, below int32's 31."""
    return int(min(30, max(4, math.ceil(math.log2(num_steps + 2)) + 1)))


def build_many_chain(model, x, y, options, sampler: Sampler, *, name: str, start: dict | None = None, thinning: int = 1) -> Algorithm:
    """The :class:`Algorithm` of a lock-step many-chain sampler (module docstring). ``start``:
    site → unconstrained value of ``model``'s sites where every chain starts (the others as
    ``init_loc`` starts them; a decentred weight through its prior, :func:`~bnnpp.inference.nuts.decentred_start`).

    ``options`` needs ``num_chains`` (resolved), ``num_warmup``, ``num_samples``, ``init_loc``,
    ``init_radius``, ``pathfinder_paths``, ``pathfinder_maxiter``.

    ``thinning``: kept transitions per draw (the draws are every ``thinning``-th of the
    ``num_samples · thinning`` transitions after the warm-up).

    Returns:
        The algorithm; its posterior has draws ``(num_chains, num_samples, *site_shape)``
        (constrained values) and the ``sample_stats`` of :class:`ChainStats`.
    """
    sites = latent_sites(model, x, y)
    chained = sampled_model(model, x, y, options)
    shapes = {n: s.shape for n, s in latent_sites(chained, x, y).items()}
    dim = num_parameters(sites)
    joint = log_joint(chained)
    num_chains, num_warmup, num_samples = int(options.num_chains), int(options.num_warmup), int(options.num_samples)
    start_at, stop_at = sampler.window
    aux = int(sampler.auxiliary)

    def density(data):
        """The chains' log density: the log joint, times N(0, I) on the auxiliary coordinates
        (a position is then ``(u, z)``, z ``(aux,)``)."""
        if not aux:
            return lambda u: joint(u, data)
        return lambda p: joint(p[0], data) - 0.5 * jnp.sum(jnp.square(p[1]))

    def model_part(position):
        return position[0] if aux else position

    def model_lp(chains):
        # the log joint at the draw: the auxiliary coordinates' N(0, I) term taken out again
        if not aux:
            return chains.logdensity
        return chains.logdensity + 0.5 * jnp.sum(jnp.square(chains.position[1]), axis=-1)

    def init(key, data):
        logdensity = density(data)
        if options.init_loc == "pathfinder":
            u0 = starts(
                logdensity,
                key,
                shapes,
                num_chains,
                num_paths=min(int(options.pathfinder_paths), num_chains),
                radius=float(options.init_radius),
                maxiter=int(options.pathfinder_maxiter),
            )
        else:
            u0 = jax.vmap(lambda k: init_uniform(shapes, k, float(options.init_radius)))(jax.random.split(key, num_chains))
        if start:
            rows = probe_rows(model, x, y)
            u0 = jax.vmap(lambda u: decentred_start(model, chained, u, start, *rows) if chained is not model else apply_start(u, start))(u0)
        if aux:
            u0 = (u0, jax.random.normal(jax.random.fold_in(key, 1), (num_chains, aux)))
        if sampler.keyed_init:
            chains = jax.vmap(lambda u, k: sampler.init_chain(u, logdensity, k))(
                u0, jax.random.split(jax.random.fold_in(key, 2), num_chains)
            )
        else:
            chains = jax.vmap(lambda u: sampler.init_chain(u, logdensity))(u0)
        zeros = jnp.zeros((num_chains,), jnp.float32)
        last = ChainStats(
            zeros, jnp.zeros((num_chains,), bool), zeros, jnp.zeros((num_chains,), jnp.int32), -chains.logdensity, model_lp(chains)
        )
        moments = Moments(jnp.zeros(()), jnp.zeros((dim + aux,)), jnp.zeros((dim + aux,)))
        return ManyChainState(
            chains,
            sampler.init_tuning(),
            moments,
            last,
            jnp.zeros((num_chains,), jnp.int32),
            jnp.zeros((), jnp.int32),
            jnp.arange(num_chains, dtype=jnp.int32),
        )

    def step(key, state, batch):
        logdensity = density(batch)
        t = state.t
        warm = t < num_warmup
        imm = inverse_mass_matrix(state.moments, sampler.threshold)
        step_size, steps_param = sampler.params(state.tuning, warm)
        n = state.chain.shape[0]  # num_chains, or a group's share after the warm-up (chain_threads)
        keys = jax.random.split(key, num_chains)[state.chain]
        chains, info = jax.vmap(lambda k, s: sampler.kernel(k, s, logdensity, step_size, imm, steps_param))(keys, state.chains)
        tuning = jax.lax.cond(warm, lambda: sampler.update(state.tuning, state.chains, chains, info, imm, t), lambda: state.tuning)
        in_window = (t >= start_at) & (t < stop_at)
        flat = jax.vmap(lambda u: ravel_pytree(u)[0])(chains.position)
        moments = jax.tree.map(lambda a, b: jnp.where(in_window, a, b), merge_moments(state.moments, flat), state.moments)
        diverging = info.is_divergent
        last = ChainStats(
            info.acceptance_rate.astype(jnp.float32),
            diverging,
            jnp.full((n,), step_size, jnp.float32),
            jnp.asarray(info.num_integration_steps, jnp.int32) * jnp.ones((n,), jnp.int32),
            # a diverging proposal's energy can be inf, which the runner's guard would read as a broken state
            jnp.nan_to_num(jnp.asarray(info.energy, jnp.float32), nan=MAX_ENERGY, posinf=MAX_ENERGY, neginf=-MAX_ENERGY),
            model_lp(chains),
        )
        divergences = state.divergences + (diverging & ~warm).astype(jnp.int32)
        new = ManyChainState(chains, tuning, moments, last, divergences, t + 1, state.chain)
        return new, ManyChainInfo(-last.lp, last.acceptance_rate, last.step_size)

    def values(position):
        # a decentred site's value is the deterministic site of its name
        return jax.vmap(lambda u: constrained_values(chained, u, *probe_rows(chained, x, y), KEY_MODEL, sites))(position)

    def emit(key, state):
        return values(model_part(state.chains.position)), state.last._asdict()

    def sample(key, state, n):
        return values(model_part(state.chains.position))

    def extras(state) -> dict:
        per_chain = [int(v) for v in np.asarray(state.divergences)]
        imm = np.asarray(inverse_mass_matrix(state.moments, sampler.threshold))[:dim]  # ravel order: the model's coordinates first
        return {
            "divergences": sum(per_chain),
            "divergences_per_chain": per_chain,
            "step_size": float(np.asarray(state.last.step_size)[0]),
            "mean_n_steps": float(np.mean(np.asarray(state.last.n_steps))),
            "mass_matrix": "diagonal" if float(np.asarray(state.moments.count)) >= sampler.threshold else "identity",
            "inverse_mass_matrix_range": [float(imm.min()), float(imm.max())],
            "num_parameters": dim,
            "start": options.init_loc,
        }

    return Algorithm(
        init,
        step,
        sample,
        RunSpec(
            num_steps=num_warmup + num_samples * thinning,
            num_samples=num_chains,
            name=name,
            num_chains=num_chains,
            emit=emit,
            emit_steps=np.arange(num_warmup + thinning - 1, num_warmup + num_samples * thinning, thinning),
            # after the warm-up the tuning, the mass matrix and t are read only, the same in every group
            independent_chains=True,
            chains_from=num_warmup,
            chain_axes=PER_CHAIN,
        ),
        Hooks(
            extras=extras,
            postfix=lambda info: {"accept": f"{float(np.mean(info.acceptance_rate)):.2f}", "step": f"{float(np.mean(info.step_size)):.3g}"},
        ),
    )
