"""``mclmc``: adjusted microcanonical Langevin/Hamiltonian Monte Carlo — MAMS (Robnik,
Cohn-Gordon & Seljak 2025; the isokinetic dynamics of Robnik et al. 2023, with a Metropolis
correction), many chains in lock-step, from BlackJAX's ``adjusted_mclmc_dynamic`` kernel.

A transition draws a unit-norm velocity, runs ``n`` steps of the isokinetic McLachlan
integrator with step size ε (speed 1 in the coordinates whitened by the diagonal inverse
mass matrix), and accepts or rejects the end point. ``n`` is quasi-random with mean
``L / ε`` (``rint(0.5 + h_i · s)``, ``h_i`` the i-th Halton number, the same for every
chain; BlackJAX's ``halton_trajectory_length``), capped at ``max_integration_steps``.

Tuning (a lock-step version of BlackJAX's ``adjusted_mclmc_find_L_and_step_size``; its
tuner runs one chain through several passes, here the passes are phases of one warm-up
shared by all chains; W = ``num_warmup``):

1. steps ``[0, W/2)``: identity mass matrix, ``L = 2ε`` (BlackJAX's average of 2 steps a
   transition), ε by dual averaging (Hoffman & Gelman 2014, §3.2.1) of the chains' mean
   acceptance towards ``target_accept_prob`` (0.9, MAMS's recommendation); the positions
   of steps ``[W/4, W/2)`` of every chain are pooled into diagonal variances;
2. at step ``W/2`` the variances become the inverse mass matrix (shrunk as Stan does) and
   ``L = tuning_factor · sqrt(D)`` — the posterior's size in the whitened coordinates,
   BlackJAX's ``"avg"`` rule (``sqrt(Σ σ_i²)``, times 1.3) — and dual averaging restarts
   from the current ε;
3. steps ``[W/2, W)``: ε by dual averaging with L fixed.

The ``num_samples`` kept steps use dual averaging's averaged ε and the L of phase 2.

The isokinetic dynamics needs D ≥ 2: its velocity lies on the unit sphere of R^D, which for
D = 1 is two points the gradient cannot turn between (BlackJAX's momentum update divides by
D − 1, so the energy error is NaN, every proposal is rejected and dual averaging drives ε to
0). A one-parameter model is therefore sampled with one auxiliary N(0, 1) coordinate
appended (the chains sample the posterior times N(0, 1), whose marginal is the posterior);
the draws leave it out.
The chains run on the non-centred form of the model by default (``noncentered=True``,
:func:`bnnpp.inference.nuts.noncentered_model`: the weights with a learned scale). Starts, statistics and extras as ``chees`` (:mod:`bnnpp.inference.chees`,
:mod:`bnnpp.inference.manychain`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from bnnpp.inference.algorithm import Algorithm
from bnnpp.inference.checks import blackjax_missing, require_blackjax
from bnnpp.inference.manychain import ManyChainOptions, Sampler, build_many_chain, halton, max_bits
from bnnpp.inference.options import fraction, option, positive_float, positive_int
from bnnpp.inference.registry import Method, register
from bnnpp.introspection import latent_sites, num_parameters

__all__ = ["MCLMCOptions", "build"]

INITIAL_STEP_SIZE = 0.1
EARLY_STEPS = 2.0
"""Average integrator steps of a transition in the first warm-up phase (BlackJAX's default
``target_num_integration_steps``)."""
MIN_DIM = 2
"""The fewest coordinates the isokinetic dynamics runs on (module docstring); a model with
fewer is padded with auxiliary N(0, 1) coordinates."""


@dataclass(frozen=True)
class MCLMCOptions(ManyChainOptions):
    """Options of ``method="mclmc"`` (module docstring)."""

    target_accept_prob: float = option(
        0.9,
        "target acceptance probability of the step-size adaptation (mclmc: mean over chains; chees: harmonic mean)",
        check=fraction(low_open=True, high_open=True),
    )
    tuning_factor: float = option(
        1.3, "mclmc: trajectory length L = tuning_factor * sqrt(parameters) in whitened coordinates", check=positive_float
    )
    max_integration_steps: int = option(256, "mclmc: most integrator steps of one transition", check=positive_int)

    refused: ClassVar[dict[str, str]] = {
        "epochs": "mclmc is not trained in epochs (every step uses all the data): pass num_steps "
        "(= num_warmup + num_samples per chain, split in half) or num_warmup and num_samples"
    }


class MCLMCTuning(NamedTuple):
    """da: dual averaging's state (BlackJAX's ``DualAveragingAdaptationState``); L: the
    trajectory length, scalar (``2ε`` in the first phase)."""

    da: object
    L: jax.Array


def sampler(options: MCLMCOptions, dim: int) -> Sampler:
    """Adjusted MCLMC as a :class:`~bnnpp.inference.manychain.Sampler` for a model of ``dim``
    parameters (padded to :data:`MIN_DIM` with auxiliary coordinates)."""
    auxiliary = max(0, MIN_DIM - dim)
    dim = dim + auxiliary
    from blackjax.adaptation.step_size import dual_averaging_adaptation
    from blackjax.mcmc import adjusted_mclmc_dynamic
    from blackjax.mcmc.adjusted_mclmc import rescale

    warmup = int(options.num_warmup)
    half = warmup // 2
    bits = max_bits(warmup + int(options.num_samples))
    cap = int(options.max_integration_steps)
    da_init, da_update, da_final = dual_averaging_adaptation(target=float(options.target_accept_prob))

    def num_steps(i, avg):
        return jnp.clip(jnp.rint(0.5 + halton(i, bits) * rescale(jnp.maximum(avg, 1.0))), 1, cap).astype(jnp.int32)

    kernel = adjusted_mclmc_dynamic.build_kernel(integration_steps_fn=num_steps, next_random_arg_fn=lambda i: i + 1)

    def params(tuning, warm):
        eps = jnp.where(warm, jnp.exp(tuning.da.log_step_size), da_final(tuning.da))
        eps = jnp.where(jnp.isfinite(eps), eps, INITIAL_STEP_SIZE)
        # L ≤ 0: the first phase (or a warm-up too short to reach the second)
        L = jnp.where(tuning.L <= 0, jnp.where(warm, EARLY_STEPS * eps, float(options.tuning_factor) * jnp.sqrt(float(dim))), tuning.L)
        return eps, L / eps

    def run_kernel(key, chain, logdensity, step_size, imm, avg):
        return kernel(key, chain, logdensity, step_size, jnp.inf, imm, (avg,))

    def tune(tuning, old, new, info, imm, t):
        accept = jnp.mean(jnp.where(jnp.isfinite(info.acceptance_rate), info.acceptance_rate, 0.0))
        da = da_update(tuning.da, accept)
        # phase 2 starts after step half - 1: L from the whitened posterior size, dual averaging afresh
        switch = t + 1 == half
        eps_now = jnp.exp(da.log_step_size)
        da = jax.tree.map(lambda a, b: jnp.where(switch, a, b), da_init(eps_now), da)
        L = jnp.where(switch, float(options.tuning_factor) * jnp.sqrt(float(dim)), tuning.L)
        return MCLMCTuning(da, L)

    return Sampler(
        init_chain=lambda u, logdensity: adjusted_mclmc_dynamic.init(u, logdensity, jnp.zeros((), jnp.int32)),
        init_tuning=lambda: MCLMCTuning(da_init(jnp.float32(INITIAL_STEP_SIZE)), jnp.zeros(())),
        params=params,
        kernel=run_kernel,
        update=tune,
        window=(warmup // 4, half),
        threshold=float(max(2, int(options.num_chains) * (half - warmup // 4))),
        auxiliary=auxiliary,
    )


def build(model, x, y, options: MCLMCOptions, start: dict | None = None) -> Algorithm:
    """Adjusted MCLMC as an :class:`Algorithm` (module docstring). ``start``: site →
    unconstrained value where every chain starts (``bnnpp.fit``'s ``init``).

    Returns:
        The algorithm; draws ``(num_chains, num_samples, *site_shape)`` and per-draw
        ``sample_stats`` (:mod:`bnnpp.inference.manychain`).
    """
    require_blackjax("mclmc")
    options = options.resolve(int(x.shape[0]))
    dim = num_parameters(latent_sites(model, x, y))
    return build_many_chain(model, x, y, options, sampler(options, dim), name="mclmc", start=start)


register(
    Method(
        "mclmc",
        MCLMCOptions,
        build=build,
        summary="adjusted MCLMC / MAMS (BlackJAX): many chains in lock-step, step size and trajectory length tuned in warm-up",
        requires=functools.partial(blackjax_missing, "mclmc"),
        smoke={"num_chains": 2, "num_warmup": 20, "num_samples": 10, "init_loc": "uniform"},
    )
)
