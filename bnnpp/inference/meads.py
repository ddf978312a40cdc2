"""``meads``: generalised HMC tuned by MEADS (Hoffman & Sountsov 2022, "Tuning-Free Generalized
Hamiltonian Monte Carlo"), many chains in lock-step, from BlackJAX's ``ghmc`` kernel.

Each transition is one leapfrog step of generalised HMC (Horowitz 1991): the momentum is only
partly refreshed (persistence ``1 − α``), and the Metropolis test uses a persistent slice
variable shifted by ``δ`` per step (Neal 2020's non-reversible acceptance), so the chains move
in long, straight runs without a trajectory length to tune. During the ``num_warmup`` steps the
parameters follow the chains' current positions and gradients (Algorithm 3 of the paper, with
every chain as one fold; the statistics are pooled over the chains):

* the inverse momentum scale σ: every coordinate's sd over the chains (the diagonal
  preconditioner);
* ε = min(1, 0.5 / √λ̂_max(g)), g the chains' gradients times σ (a stable step for the
  stiffest preconditioned direction; λ̂_max :func:`maximum_eigenvalue`);
* γ = max(1 / √λ̂_max(z), 1 / ((t + 1) ε)), z the chains' standardised positions (damping on the
  scale of the slowest direction, strong early in the warm-up), α = 1 − exp(−2εγ), δ = α / 2.

The kept steps use the parameters averaged over the warm-up's second half (the geometric mean of
ε and of σ, the mean of α): a fixed kernel, so the kept draws are an ordinary Markov chain, and
not one step's estimate, which a single chain deep in a funnel's neck can shrink a hundredfold. A transition costs one gradient, so ``thinning`` (default 10)
steps are run per kept draw. Starts, the non-centred form (``noncentered=True``), statistics
and extras: :mod:`bnnpp.inference.manychain`.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from bnnpp.inference.algorithm import Algorithm
from bnnpp.inference.checks import blackjax_missing, require_blackjax
from bnnpp.inference.manychain import ManyChainOptions, Sampler, build_many_chain
from bnnpp.inference.options import non_negative_int, option, optional, positive_float, positive_int
from bnnpp.inference.registry import Method, register

__all__ = ["MEADSOptions", "MEADSTuning", "build", "default_num_chains", "maximum_eigenvalue"]


@dataclass(frozen=True)
class MEADSOptions(ManyChainOptions):
    """Options of ``method="meads"`` (module docstring)."""

    num_chains: int | None = option(
        None,
        "chains in lock-step (unset: 32 on a CPU, 128 on an accelerator; MEADS tunes from their spread, so at least 2)",
        check=optional(positive_int),
        type=int,
    )
    num_warmup: int = option(1000, "warm-up (tuning) transitions, discarded", check=non_negative_int)
    step_size_multiplier: float = option(
        0.5, "meads: the step size is this over the root of the largest preconditioned curvature", check=positive_float
    )
    thinning: int = option(10, "meads: transitions (one gradient each) per kept draw", check=positive_int)

    def resolve(self, n: int) -> MEADSOptions:
        """As :meth:`ManyChainOptions.resolve`, with MEADS's own chain count when unset
        (:func:`default_num_chains`)."""
        if self.num_chains is None:
            self = dataclasses.replace(self, num_chains=default_num_chains())
        return super().resolve(n)

    def check(self) -> None:
        if self.num_chains is not None and self.num_chains < 2:
            raise ValueError(f"meads tunes its steps from the spread of its chains: num_chains must be at least 2, got {self.num_chains}")

    refused: ClassVar[dict[str, str]] = {
        "epochs": "meads is not trained in epochs (every step uses all the data): pass num_steps "
        "(= num_warmup + num_samples per chain, split in half) or num_warmup and num_samples"
    }


class MEADSTuning(NamedTuple):
    """The shared parameters: step_size, alpha, delta (scalars) and sigma ``(D,)``, the inverse
    momentum scale in the flat (``ravel_pytree``) order of a position; and their sums over the
    second half of the warm-up (``count`` steps: log step size, alpha, log sigma), whose means
    the kept steps use."""

    step_size: jax.Array
    alpha: jax.Array
    delta: jax.Array
    sigma: jax.Array
    count: jax.Array
    sum_log_step: jax.Array
    sum_alpha: jax.Array
    sum_log_sigma: jax.Array


def default_num_chains() -> int:
    """Chains when ``num_chains`` is not given: 32 on a CPU, 128 on an accelerator. MEADS reads its
    step size, damping and preconditioner off the chains' spread at each warm-up step, and with 8
    chains that estimate was too noisy: on the reference suite's stochastic-volatility and Rasch
    models 8 chains ended the warm-up with step sizes 100 times too small, 32 passed (the paper
    runs 128 or more; Hoffman & Sountsov 2022, §5)."""
    return 32 if jax.default_backend() == "cpu" else 128


def maximum_eigenvalue(rows: jax.Array) -> jax.Array:
    """An estimate of the largest eigenvalue of ``rows``' second-moment matrix (``rows``
    ``(n, D)``, n ≥ 2): Σλ² / Σλ from unbiased estimates of both (Hoffman & Sountsov 2022, §3.2),
    which is close to λ_max unless many eigenvalues are small but not negligible."""
    n = rows.shape[0]
    s = rows @ rows.T
    diag = jnp.diag(s)
    mean = jnp.sum(diag) / n
    mean_sq = (jnp.sum(s**2) - jnp.sum(diag**2)) / (n * (n - 1))
    return mean_sq / mean


def sampler(options: MEADSOptions, dim: int) -> Sampler:
    """Generalised HMC with MEADS's tuning as a :class:`~bnnpp.inference.manychain.Sampler` for
    a model of ``dim`` parameters."""
    from blackjax.mcmc import ghmc

    kernel = ghmc.build_kernel()
    multiplier = float(options.step_size_multiplier)

    half = int(options.num_warmup) // 2

    def tuned(tuning: MEADSTuning, positions: jax.Array, grads: jax.Array, t) -> MEADSTuning:
        sd = jnp.std(positions, axis=0)
        sd = jnp.where(sd > 0, sd, 1.0)
        z = (positions - jnp.mean(positions, axis=0)) / sd
        eps = jnp.minimum(multiplier / jnp.sqrt(maximum_eigenvalue(grads * sd)), 1.0)
        gamma = jnp.maximum(1.0 / jnp.sqrt(maximum_eigenvalue(z)), 1.0 / ((t + 1.0) * eps))
        alpha = 1.0 - jnp.exp(-2.0 * eps * gamma)
        ok = jnp.isfinite(eps) & jnp.isfinite(alpha) & jnp.all(jnp.isfinite(sd))  # e.g. chains at one point
        eps, alpha, sd = jnp.where(ok, eps, tuning.step_size), jnp.where(ok, alpha, tuning.alpha), jnp.where(ok, sd, tuning.sigma)
        # the kept steps use the means over the warm-up's second half: one step's estimate follows the chains'
        # current spread, and one chain deep in a funnel's neck can shrink it a hundredfold for that step
        late = (t >= half) & ok
        return MEADSTuning(
            eps,
            alpha,
            alpha / 2,
            sd,
            tuning.count + late,
            tuning.sum_log_step + jnp.where(late, jnp.log(eps), 0.0),
            tuning.sum_alpha + jnp.where(late, alpha, 0.0),
            tuning.sum_log_sigma + jnp.where(late, jnp.log(sd), 0.0),
        )

    def params(tuning: MEADSTuning, warm):
        n = jnp.maximum(tuning.count, 1.0)
        averaged = tuning.count > 0
        eps = jnp.where(warm | ~averaged, tuning.step_size, jnp.exp(tuning.sum_log_step / n))
        alpha = jnp.where(warm | ~averaged, tuning.alpha, tuning.sum_alpha / n)
        sigma = jnp.where(warm | ~averaged, tuning.sigma, jnp.exp(tuning.sum_log_sigma / n))
        return eps, (alpha, alpha / 2, sigma)

    def flat(tree) -> jax.Array:
        return jax.vmap(lambda u: ravel_pytree(u)[0])(tree)

    def run_kernel(key, chain, logdensity, step_size, imm, param):
        alpha, delta, sigma = param
        scale = ravel_pytree(chain.position)[1](sigma)
        return kernel(key, chain, logdensity, step_size, scale, alpha, delta)

    def update(tuning, old, new, info, imm, t):
        return tuned(tuning, flat(new.position), flat(new.logdensity_grad), t.astype(jnp.float32))

    zero = jnp.zeros((), jnp.float32)
    return Sampler(
        init_chain=lambda u, logdensity, key: ghmc.init(u, logdensity, key),
        init_tuning=lambda: MEADSTuning(
            jnp.float32(1e-3),
            jnp.float32(1.0),
            jnp.float32(0.5),
            jnp.ones((dim,), jnp.float32),
            zero,
            zero,
            zero,
            jnp.zeros((dim,), jnp.float32),
        ),
        params=params,
        kernel=run_kernel,
        update=update,
        window=(0, 0),  # σ is MEADS's own, not the runner's moments
        threshold=float("inf"),
        keyed_init=True,
    )


def build(model, x, y, options: MEADSOptions, start: dict | None = None) -> Algorithm:
    """MEADS-tuned generalised HMC as an :class:`Algorithm` (module docstring). ``start``: site →
    unconstrained value where every chain starts (``bnnpp.fit``'s ``init``).

    Returns:
        The algorithm; draws ``(num_chains, num_samples, *site_shape)`` (every ``thinning``-th
        kept transition) and per-draw ``sample_stats`` (:mod:`bnnpp.inference.manychain`).
    """
    require_blackjax("meads")
    options = options.resolve(int(x.shape[0]))
    from bnnpp.introspection import latent_sites, num_parameters

    dim = num_parameters(latent_sites(model, x, y))
    return build_many_chain(model, x, y, options, sampler(options, dim), name="meads", start=start, thinning=int(options.thinning))


register(
    Method(
        "meads",
        MEADSOptions,
        build=build,
        summary="generalised HMC tuned by MEADS (BlackJAX ghmc): many chains in lock-step, one leapfrog step a transition",
        requires=functools.partial(blackjax_missing, "meads"),
        smoke={"num_chains": 4, "num_warmup": 20, "num_samples": 10, "thinning": 2, "init_loc": "uniform"},
    )
)
