"""``chees``: ChEES-HMC (Hoffman, Radul & Sountsov 2021), many chains of jittered HMC in
lock-step, from BlackJAX's ``dynamic_hmc`` kernel and ``chees_adaptation`` tuner.

Experimental, and not registered by default: ``import bnnpp.inference.chees`` registers
``method="chees"``. With its defaults it need not converge on a network's posterior (R-hat
above 1.01, with divergences, on small classifiers and hierarchical regressions); ``mclmc`` is
the many-chain sampler to use.

All ``num_chains`` chains share one step size ε and one trajectory length T. A transition
runs ``ceil(h_i · T / ε)`` leapfrog steps, ``h_i`` the i-th Halton number in (0, 1) (the
same for every chain, so no chain waits for another), then a Metropolis correction.
During the ``num_warmup`` warm-up steps (BlackJAX's ``chees_adaptation.base``):

* ε follows dual averaging towards a harmonic-mean acceptance of ``target_accept_prob``
  over the chains (0.651, the optimum for HMC of Beskos et al. 2013);
* log T follows Adam on the ChEES criterion, the change in the chains' centred squared
  distance from their mean over a transition (Hoffman et al. 2021, eqs. 3–4), weighted by
  acceptance; T is capped at ``max_leapfrog_steps · ε``;
* with ``mass_matrix="diagonal"`` the chains' positions over the second half of the warm-up
  give a diagonal inverse mass matrix (the variances pooled over chains and steps, shrunk
  as Stan shrinks them), used once 64 pooled draws are in (the ChEES criterion is computed
  in the whitened coordinates it defines, as BlackJAX does).

The ``num_samples`` kept steps use the warm-up's moving averages of ε and T (and the last
mass matrix). Starts: ``init_loc="uniform"`` (default) starts every chain uniformly in
(−``init_radius``, ``init_radius``), as NUTS does; ``"pathfinder"`` draws the chains' starts
from a few Pathfinder paths' Gaussians (:func:`bnnpp.inference.pathfinder.starts`). It is
not the default: its L-BFGS program is a second, larger program to compile, and the chains
converge from uniform starts.
Statistics and extras: :mod:`bnnpp.inference.manychain`.

Two defaults depart from BlackJAX's ChEES, both for the posteriors of networks with
hierarchical scales:

* the chains run on the non-centred form of the model (``noncentered=True``, every
  location-scale weight ``w = loc + scale · z``, :func:`bnnpp.inference.nuts.noncentered`),
  which removes the funnel between a layer's weights and its scale;
* the trajectory length a transition uses is at least ``min_trajectory_length`` (π/2, a
  quarter period of a unit-variance direction in the whitened coordinates, the rule
  BlackJAX's own length floor applies to the slowest direction). On a network's posterior
  the criterion can tune T several times shorter than that, centred or not, and the chains
  then do not mix. The criterion measures the chains' spread about their common
  mean, so it assumes one mode, and a network's chains sit in different modes (its
  hidden-unit permutations); the few chains' noisy gradient of the criterion can shorten T as
  well. The floor acts on the trajectory used, not on the criterion's state.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from bnnpp.inference.algorithm import Algorithm
from bnnpp.inference.checks import blackjax_missing, require_blackjax
from bnnpp.inference.manychain import ManyChainOptions, Sampler, build_many_chain, halton, max_bits
from bnnpp.inference.options import fraction, option, positive_float, positive_int
from bnnpp.inference.registry import Method, register

__all__ = ["CheesOptions", "build"]

TRAJECTORY_LEARNING_RATE = 0.025
"""Adam's learning rate on log T (Hoffman et al. 2021, §4: 0.025)."""
INITIAL_STEP_SIZE = 0.1


@dataclass(frozen=True)
class CheesOptions(ManyChainOptions):
    """Options of ``method="chees"`` (module docstring)."""

    target_accept_prob: float = option(
        0.651,
        "target acceptance probability of the step-size adaptation (chees: harmonic mean over chains, mclmc: mean)",
        check=fraction(low_open=True, high_open=True),
    )
    max_leapfrog_steps: int = option(256, "most leapfrog steps of one transition (caps the trajectory length)", check=positive_int)
    min_trajectory_length: float = option(
        1.5707963,
        "chees: floor on the trajectory length T (a transition runs h*T, h in (0, 1) quasi-random) in the mass matrix's whitened units; default pi/2, a quarter period of a unit-variance direction",
        check=positive_float,
    )
    mass_matrix: str = option(
        "diagonal",
        "inverse mass matrix: diagonal (estimated over the second half of the warm-up) or identity",
        choices=("diagonal", "identity"),
    )

    refused: ClassVar[dict[str, str]] = {
        "epochs": "chees is not trained in epochs (every step uses all the data): pass num_steps "
        "(= num_warmup + num_samples per chain, split in half) or num_warmup and num_samples"
    }


def sampler(options: CheesOptions) -> Sampler:
    """ChEES-HMC as a :class:`~bnnpp.inference.manychain.Sampler`."""
    import optax
    from blackjax.adaptation import chees_adaptation
    from blackjax.mcmc import dynamic_hmc

    total = int(options.num_warmup) + int(options.num_samples)
    bits = max_bits(total)
    cap = int(options.max_leapfrog_steps)
    floor = float(options.min_trajectory_length)
    jitter = lambda i: halton(i, bits)
    init_tuning, update = chees_adaptation.base(
        jitter, lambda i: i + 1, optax.adam(TRAJECTORY_LEARNING_RATE), float(options.target_accept_prob), 0.5, cap
    )
    kernel = dynamic_hmc.build_kernel(
        next_random_arg_fn=lambda i: i + 1,
        integration_steps_fn=lambda i, n: jnp.clip(jnp.ceil(jitter(i) * n), 1, cap).astype(jnp.int32),
    )

    def params(tuning, warm):
        # after warm-up: the moving averages (a fit without warm-up keeps the first values)
        tuned = tuning.step > 1
        eps_avg = jnp.where(tuned, jnp.exp(tuning.log_step_size_moving_average), tuning.step_size)
        steps_avg = jnp.where(
            tuned,
            jnp.exp(tuning.log_trajectory_length_moving_average - tuning.log_step_size_moving_average),
            tuning.trajectory_length / tuning.step_size,
        )
        eps = jnp.where(warm, tuning.step_size, eps_avg)
        steps = jnp.where(warm, tuning.trajectory_length / tuning.step_size, steps_avg)
        # the floor acts on the trajectory used, not on the criterion's state (BlackJAX's length floor does the same)
        return eps, jnp.maximum(steps, floor / eps)

    def run_kernel(key, chain, logdensity, step_size, imm, steps):
        return kernel(key, chain, logdensity, step_size, imm, (steps,))

    def tune(tuning, old, new, info, imm, t):
        # flattened to (chains, D): BlackJAX's cross-chain means assume one-dimensional leaves
        flat = jax.vmap(lambda u: ravel_pytree(u)[0])
        return update(
            tuning,
            flat(info.proposal.position),
            flat(info.proposal.momentum),
            flat(old.position),
            info.acceptance_rate,
            info.is_divergent,
            imm,
        )

    warmup = int(options.num_warmup)
    window = (warmup // 2, warmup) if options.mass_matrix == "diagonal" else (0, 0)
    return Sampler(
        init_chain=lambda u, logdensity: dynamic_hmc.init(u, logdensity, jnp.zeros((), jnp.int32)),
        init_tuning=lambda: init_tuning(jnp.zeros((), jnp.int32), jnp.float32(INITIAL_STEP_SIZE)),
        params=params,
        kernel=run_kernel,
        update=tune,
        window=window,
        threshold=64.0,
    )


def build(model, x, y, options: CheesOptions, start: dict | None = None) -> Algorithm:
    """ChEES-HMC as an :class:`Algorithm` (module docstring). ``start``: site →
    unconstrained value where every chain starts (``bnnpp.fit``'s ``init``).

    Returns:
        The algorithm; draws ``(num_chains, num_samples, *site_shape)`` and per-draw
        ``sample_stats`` (:mod:`bnnpp.inference.manychain`).
    """
    require_blackjax("chees")
    options = options.resolve(int(x.shape[0]))
    return build_many_chain(model, x, y, options, sampler(options), name="chees", start=start)


register(
    Method(
        "chees",
        CheesOptions,
        build=build,
        summary="experimental ChEES-HMC (BlackJAX): many chains in lock-step, step size and trajectory length tuned in "
        "warm-up; need not converge with its defaults on a network's posterior",
        requires=functools.partial(blackjax_missing, "chees"),
        smoke={"num_chains": 2, "num_warmup": 20, "num_samples": 10, "init_loc": "uniform"},
    )
)
