"""``sgld``: stochastic-gradient MCMC — SGLD (Welling & Teh 2011), preconditioned SGLD
(Li et al. 2016) and SGHMC (Chen et al. 2014), with constant, polynomial or cyclical
(Zhang et al. 2020) step sizes.

Target. Every variant samples the model's posterior on the unconstrained space: weights as
they are, hierarchical scale and noise sites as ``log σ`` (or whatever NumPyro's
``biject_to`` gives), with the log-Jacobian in the prior term (:func:`joint.joint_terms`).
The stochastic gradient is the one of Welling & Teh (2011)::

    ĝ(u) = ∇ log p(u) + (N / B) · Σ_{i ∈ batch} ∇ log p(y_i | x_i, u)

an unbiased estimate of ∇ log p(u | data) (:func:`grad_estimator`; ``B = N`` without a
``batch_size``, which makes ĝ the exact gradient).

Step-size convention. ``step_size`` is BlackJAX's ``h``: the overdamped Langevin update is
``u ← u + h·ĝ(u) + sqrt(2h)·ξ``, ξ ~ N(0, I) — Welling & Teh's ``ε_t / 2 · ĝ + N(0, ε_t)``
with ``h = ε_t / 2``. For ``psgld`` ``h`` plays the same role with the preconditioner in
front (so it is RMSprop's learning rate: each coordinate drifts about ``h`` per step); for
``sghmc`` it is the integrator's time step (``u ← u + h·p``, see below).

Variants (option ``variant``; the default is ``"psgld"``, whose steps do not grow with the
data size N: plain SGLD's h must shrink like 1/(N · curvature), so no one default h serves
moons and MNIST; the chains start from Glorot-scaled layer weights, ``init_loc="glorot"``):

* ``"sgld"``: BlackJAX's overdamped Langevin integrator
  (``blackjax.sgmcmc.diffusions.overdamped_langevin``, the update of ``blackjax.sgld``) with
  the gradient of :func:`logdensity_estimator`.
* ``"psgld"``: RMSprop-preconditioned SGLD, Li et al. (2016), Algorithm 1: per step
  ``V ← ρV + (1 − ρ) ĝ⊙ĝ``, ``G = 1 / (λ + sqrt V)``, ``u ← u + h·G⊙ĝ + sqrt(2h·G)⊙ξ``
  (ρ = ``rms_decay``, λ = ``rms_eps``). BlackJAX 1.7 has no pSGLD kernel (its
  ``sgmcmc`` module offers SGLD, SGHMC, SGNHT and contour SGLD only), so this one update is
  written here. Two choices differ from the paper and are deliberate: V is built from the
  full-scale estimate ĝ (the paper uses the mean per-datum gradient, N times smaller, which
  would make ``h`` a step in units of 1/N), so ``step_size`` is an RMSprop learning rate;
  and V starts at the first ĝ⊙ĝ instead of 0 (RMSprop's start-up bias would make the first
  steps about 10× larger). The Γ(θ) correction term is dropped, as in Li et al.'s
  experiments (it is small when ρ is close to 1). Because a coordinate drifts about ``h``
  per step whatever its gradient, reaching the posterior from a start ``d`` away takes about
  ``d / h`` steps: give psgld a larger ``step_size`` (e.g. 1e-2) or a longer ``burn_in``
  than sgld when the start is far from the posterior.
  The metric (option ``preconditioner``): ``"adaptive"`` is Li et al.'s, V updated at every
  step; its G changes with the chain's own gradients, so the chain's stationary law is not the
  posterior (the dropped Γ term), which matters little for a network's predictive but biases
  a hierarchical model's scales, whose gradients change by orders of magnitude along the chain. ``"frozen"`` holds
  V from the end of the burn-in, a constant metric, for which the Langevin diffusion is exact.
  ``"fisher"`` holds V too and samples with ``G = 1 / (λ + V)``, the inverse diagonal
  empirical Fisher (the diagonal form of Ahn, Korattikara & Welling 2012's stochastic
  gradient Fisher scoring): since E[ĝ²] is about the posterior precision, every coordinate
  then moves in units of its own posterior sd, and the step after the burn-in,
  ``fisher_step_size`` = h, is dimensionless; on a Gaussian posterior the unadjusted chain's
  sd comes out ``1 / sqrt(1 − h/2)`` too wide (1.3% at the default 0.05) and its
  autocorrelation time is about 1/h steps. The burn-in runs RMSprop's metric in every case
  (it travels a fixed distance per step, the quickest way from a far start). ``"auto"``:
  fisher for models without bnnpp layers, adaptive for networks.
* ``"sghmc"``: BlackJAX's SGHMC integrator (``blackjax.sgmcmc.diffusions.sghmc``, driven as
  ``blackjax.sghmc``'s kernel drives it; Chen et al. 2014, in the parameterisation of Ma et
  al. 2015): each step draws a momentum p ~ N(0, I), then runs
  ``num_integration_steps`` updates ``u ← u + h·p``,
  ``p ← (1 − α h) p + h·ĝ(u) + sqrt(2αh)·ξ`` on one minibatch (α = ``friction``). A step
  of sghmc therefore costs ``num_integration_steps`` gradients; ``burn_in`` and
  ``thinning`` count such steps.

Schedules (option ``schedule``; ``t`` is the 0-based step index of a chain, burn-in
included; :class:`Schedule` implements them):

* ``"constant"``: ``h_t = step_size``.
* ``"polynomial"``: ``h_t = step_size · (1 + t / decay_steps) ** (−gamma)``, Welling &
  Teh's ``ε_t = a (b + t)^(−γ)`` with ``b = decay_steps``; ``gamma`` in (0.5, 1] satisfies
  their Robbins–Monro conditions.
* ``"cyclical"`` (cSG-MCMC, Zhang et al. 2020, their eq. 1 with ``α_0 = step_size``): after
  ``burn_in`` steps at ``step_size``, ``num_cycles`` cycles of ``L`` steps each; at step
  ``j = (t − burn_in) mod L`` of a cycle ``h_t = step_size / 2 · (cos(π j / L) + 1)``. The
  first ``E`` steps of a cycle are the exploration stage, run without noise (temperature 0,
  as in Zhang et al.'s Algorithm 1: plain stochastic-gradient ascent); the remaining
  ``S = (num_samples / num_cycles) · thinning`` steps are the sampling stage, with noise.
  ``L = S + ceil(exploration · S / (1 − exploration))`` so that the exploration stage is
  the fraction ``exploration`` of the cycle (rounded up to whole steps).

Kept draws. Without cycles, step ``t`` is kept when ``t ≥ burn_in`` and
``(t − burn_in + 1) % thinning == 0`` (the last step of every block of ``thinning`` steps
after burn-in): ``burn_in + num_samples · thinning`` steps per chain. With
``schedule="cyclical"`` step ``t`` is kept when it lies in a sampling stage (``j ≥ E``) and
``(j − E + 1) % thinning == 0``: ``num_samples / num_cycles`` draws per cycle, never from an
exploration stage, ``burn_in + num_cycles · L`` steps per chain. A draw is the position
after the kept step.

Minibatches (``batch_size=B``): drawn on the device by the runner
(:mod:`bnnpp.inference.runner`): the rows are reshuffled every epoch and each step takes the
next ``B`` of them, so every batch is a uniformly random subset drawn without replacement and
ĝ is unbiased. All chains see the same batch at a step; each has its own noise.
``batch_size=None`` (or ``N``) uses every row at every step.

Chains. ``num_chains`` chains run side by side (``vmap``), each started uniformly in
(−``init_radius``, ``init_radius``) on the unconstrained space. With ``noncentered`` (``None``, the
default: for models without bnnpp layers) they run on the non-centred form of every learned
location-scale site, ``w = loc + scale · z`` (:func:`bnnpp.inference.nuts.noncentered_model`),
which removes the funnel between a group's effects and their scale; the draws are of the
model's own sites.

Running. The kept draws are the algorithm's outputs (``RunSpec.emit``), not losses: the
runner groups the steps into segments that end at the kept steps and takes the chains'
constrained values after each. ``sample_stats``: ``step_size`` of the kept step and ``lp``,
the minibatch estimate of the log joint on the unconstrained space at the position the kept
step started from (computed with that step's gradient, at no extra cost; the exact log joint
without ``batch_size``).

References:
    Welling, M. & Teh, Y. W. (2011). Bayesian learning via stochastic gradient Langevin
    dynamics. ICML.
    Chen, T., Fox, E. & Guestrin, C. (2014). Stochastic gradient Hamiltonian Monte Carlo. ICML.
    Ma, Y.-A., Chen, T. & Fox, E. (2015). A complete recipe for stochastic gradient MCMC. NeurIPS.
    Li, C., Chen, C., Carlson, D. & Carin, L. (2016). Preconditioned stochastic gradient
    Langevin dynamics for deep neural networks. AAAI.
    Zhang, R., Li, C., Zhang, J., Chen, C. & Wilson, A. G. (2020). Cyclical stochastic
    gradient MCMC for Bayesian deep learning. ICLR.
    Ahn, S., Korattikara, A. & Welling, M. (2012). Bayesian posterior sampling via stochastic
    gradient Fisher scoring. ICML.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bnnpp.inference.algorithm import Algorithm, Hooks, Keys, RunSpec
from bnnpp.inference.joint import glorot_limits, init_glorot, joint_terms
from bnnpp.inference.nuts import decentred_start, noncentered_model
from bnnpp.inference.options import (
    Options,
    boolean,
    fraction,
    non_negative_int,
    option,
    optional,
    positive_float,
    positive_int,
    steps_for,
    temperature_option,
)
from bnnpp.inference.registry import Method, register
from bnnpp.inference.sgld_schedule import STEP_SIZES, Schedule, step_size_of
from bnnpp.inference.start import apply_start
from bnnpp.inference.variational_layers import find_layers, is_network
from bnnpp.introspection import latent_sites, probe_rows

__all__ = [
    "DEFAULTS",
    "SCHEDULES",
    "STEP_SIZES",
    "VARIANTS",
    "SGLDInfo",
    "SGLDOptions",
    "SGLDState",
    "Schedule",
    "build",
    "grad_estimator",
    "logdensity_estimator",
]

VARIANTS = ("sgld", "psgld", "sghmc")
SCHEDULES = ("constant", "polynomial", "cyclical")
PRECONDITIONERS = ("auto", "adaptive", "frozen", "fisher")


@dataclass(frozen=True)
class SGLDOptions(Options):
    """Options of ``method="sgld"`` (formulas in the module docstring)."""

    variant: str = option("psgld", "stochastic-gradient MCMC variant (the default psgld's steps do not grow with N)", choices=VARIANTS)
    step_size: float | None = option(
        None,
        "SG-MCMC base step size h (BlackJAX's: h = eps/2 of Welling & Teh; psgld: RMSprop's learning rate); default 1e-2 for psgld, 1e-3 for sgld and sghmc",
        check=optional(positive_float),
        type=float,
    )
    learning_rate: float | None = option(None, "the common name of step_size (replaces it)", check=optional(positive_float), type=float)
    schedule: str = option("constant", "SG-MCMC step-size schedule", choices=SCHEDULES)
    decay_steps: float = option(1000.0, "polynomial schedule: h0 (1 + t/decay_steps)^-gamma", check=positive_float)
    gamma: float = option(0.55, "polynomial schedule exponent, in (0.5, 1]", check=fraction(0.5, 1.0, low_open=True, high_open=False))
    num_cycles: int = option(4, "cycles of the cyclical schedule", check=positive_int)
    exploration: float = option(
        0.25, "cyclical schedule: share of each cycle without noise", check=fraction(low_open=False, high_open=True)
    )
    batch_size: int | None = option(None, "minibatch rows per step (None: full batch)", check=optional(positive_int), type=int)
    num_samples: int = option(1000, "posterior draws kept (per chain for MCMC)", check=positive_int)
    burn_in: int = option(2000, "SG-MCMC steps discarded before keeping draws", check=non_negative_int)
    thinning: int = option(10, "keep every k-th SG-MCMC step", check=positive_int)
    num_steps: int | None = option(
        None,
        "steps per chain, replacing burn_in and thinning: the first half burn-in, num_samples draws (at most one a step) spread over the rest",
        check=optional(positive_int),
        type=int,
    )
    epochs: int | None = option(
        None, "the same length in passes over the data: num_steps = epochs x (N // batch_size)", check=optional(positive_int), type=int
    )
    num_chains: int = option(4, "independent chains", check=positive_int)
    init_loc: str = option(
        "glorot",
        "start values: glorot (layer weights U(±sqrt(6/(fan_in+fan_out))), biases 0, other sites U(±init_radius)) or uniform (every site U(±init_radius))",
        choices=("glorot", "uniform"),
    )
    init_radius: float = option(2.0, "start values uniform in (-r, r) on the unconstrained space", check=positive_float)
    num_integration_steps: int = option(10, "SGHMC steps per transition", check=positive_int)
    friction: float = option(0.01, "SGHMC friction", check=positive_float)
    rms_decay: float = option(0.99, "pSGLD RMSprop decay", check=fraction(low_open=True, high_open=True))
    rms_eps: float = option(1e-5, "pSGLD RMSprop epsilon", check=positive_float)
    preconditioner: str = option(
        "auto",
        "psgld's metric: adaptive (RMSprop's running estimate, Li et al. 2016), frozen (RMSprop's, held after the burn-in), "
        "fisher (the diagonal empirical Fisher estimated over the burn-in, then held; Ahn et al. 2012) or auto (fisher for "
        "models without bnnpp layers, adaptive for networks)",
        choices=PRECONDITIONERS,
    )
    fisher_step_size: float = option(
        0.05,
        "preconditioner fisher: step after the burn-in in units of the metric (the sd of a Gaussian posterior comes out "
        "1/sqrt(1 - h/2) too wide: by 1.3 percent at 0.05)",
        check=fraction(low_open=True, high_open=True),
    )
    noncentered: bool | None = option(
        None,
        "sample learned location-scale sites as loc + scale * z (non-centred); None: on for models without bnnpp layers, off for networks",
        check=optional(boolean),
        type=bool,
    )
    chunk_size: int | None = option(None, "segments (about draws) per compiled chunk", check=optional(positive_int), flag=False, type=int)
    temperature: float = temperature_option()

    exclusive = (
        ("epochs", "num_steps"),
        ("num_steps", "burn_in"),
        ("num_steps", "thinning"),
        ("epochs", "burn_in"),
        ("epochs", "thinning"),
        ("learning_rate", "step_size"),
    )

    def resolve(self, n: int) -> SGLDOptions:
        """With ``num_steps`` or ``epochs`` (T steps per chain): ``burn_in = T // 2``, and
        ``num_samples`` (cut to the steps there are; a multiple of ``num_cycles`` when
        cyclical) draws at ``thinning = max(1, steps // num_samples)`` over the rest — where
        "the rest" is the sampling share ``1 − exploration`` of it for the cyclical schedule,
        so that the run is about T steps long. ``learning_rate``, when given, is the step size."""
        if self.learning_rate is not None and self.step_size != self.learning_rate:
            return dataclasses.replace(self, step_size=self.learning_rate).resolve(n)
        if self.num_steps is None and self.epochs is None:
            return self
        total = steps_for(self, n)
        burn_in = total // 2
        usable = total - burn_in
        if self.schedule == "cyclical":
            usable = max(1, int(usable * (1.0 - self.exploration)))
        draws = max(1, min(self.num_samples, usable))
        if self.schedule == "cyclical":
            draws = max(self.num_cycles, draws - draws % self.num_cycles)
        return dataclasses.replace(self, burn_in=burn_in, thinning=max(1, usable // draws), num_samples=draws)

    def check(self) -> None:
        if self.schedule == "cyclical" and self.num_samples % self.num_cycles:
            k, c = self.num_samples, self.num_cycles
            raise ValueError(
                f"with schedule='cyclical' num_samples ({k}) must be a multiple of num_cycles ({c}): "
                f"e.g. num_samples={max(c, k - k % c)} or num_cycles=1"
            )
        step = step_size_of(self.variant, self.step_size)
        if self.variant == "sghmc" and self.friction * step >= 1:
            raise ValueError(f"friction × step_size must be < 1 for sghmc (got {self.friction} × {step}): lower either")


DEFAULTS = SGLDOptions.defaults()
"""Every option's default, as a dict (option name → value)."""


# --------------------------------------------------------------------------------------
# Stochastic gradient
# --------------------------------------------------------------------------------------


def logdensity_estimator(model: Callable, data_size: int, key) -> Callable:
    """The minibatch estimate of the log joint on the unconstrained space,
    ``log p(u) + (N / B) · log p(y_batch | x_batch, u)`` (log-Jacobian in the prior part).

    Returns:
        ``f(position, (x_batch, y_batch)) -> (estimate, trace)``: a scalar and the NumPyro
        trace (its latent sites' ``"value"`` are the constrained values).

    BlackJAX's ``sgmcmc.gradients.logdensity_estimator`` is not used: it ``vmap``s a
    per-example log-likelihood over the rows, whereas a NumPyro model gives the
    log-likelihood of a whole batch from one trace.
    """

    def f(position, batch):
        xb, yb = batch
        log_prior, log_lik, trace = joint_terms(model, position, xb, yb, key)
        return log_prior + (data_size / xb.shape[0]) * log_lik, trace

    return f


def grad_estimator(model: Callable, data_size: int, key) -> Callable:
    """Welling & Teh's unbiased gradient estimate ``∇ log p(u) + (N / B) Σ_batch ∇ log p(y_i | u)``.

    Returns:
        ``g(position, (x_batch, y_batch)) -> gradient``, a dict shaped like ``position`` —
        the callable BlackJAX's SG-MCMC kernels take as ``grad_estimator``.
    """
    f = logdensity_estimator(model, data_size, key)
    return jax.grad(lambda u, batch: f(u, batch)[0])


def _preconditioner(options: SGLDOptions, model, x, y) -> str | None:
    """psgld's metric (``"adaptive"``, ``"frozen"`` or ``"fisher"``; ``"auto"`` resolved on the
    model), ``None`` for the other variants."""
    if options.variant != "psgld":
        return None
    if options.preconditioner == "auto":
        return "adaptive" if is_network(model, x, y) else "fisher"
    return options.preconditioner


def _sampled_model(model, x, y, noncentered: bool | None):
    """The model the chains run on: ``model``, or its non-centred form
    (:func:`bnnpp.inference.nuts.noncentered_model`) for ``True``, and for ``None`` when the
    model is not a network (:func:`bnnpp.inference.variational_layers.is_network`)."""
    if noncentered is False or (noncentered is None and is_network(model, x, y)):
        return model
    return noncentered_model(model, x, y)[0]


# --------------------------------------------------------------------------------------
# The algorithm
# --------------------------------------------------------------------------------------


class SGLDState(NamedTuple):
    """position: site → ``(chains, *site_shape)`` unconstrained values; t: steps done (int32,
    sets the schedule); lp: ``(chains,)`` the log-density estimate at the position the last
    step started from; v: pSGLD's running mean of ĝ⊙ĝ, shaped like ``position`` (``None``
    for the other variants); key: the chains' noise key, split on every step (the runner's
    per-step key is not used)."""

    position: dict
    t: jax.Array
    lp: jax.Array
    v: dict | None
    key: jax.Array


class SGLDInfo(NamedTuple):
    """loss: minus the mean over chains of the step's log-density estimate, scalar."""

    loss: jax.Array


def _keys(root) -> Keys:
    key_init, key_model = jax.random.split(root)
    return Keys(init=key_init, steps=jax.random.fold_in(key_model, 1), data=jax.random.fold_in(key_model, 2), sample=key_model)


def build(model, x, y, options: SGLDOptions, start: dict | None = None) -> Algorithm:
    """Stochastic-gradient MCMC as an :class:`Algorithm` whose draws are emitted after every
    kept step (module docstring). ``start``: every chain starts at these sites' values
    (:func:`bnnpp.inference.start.start_position`; the noise separates the chains).

    Returns:
        The algorithm; its posterior has samples ``(num_chains, num_samples, *site_shape)``
        of the latent sites (constrained values; fewer draws if the run stopped at a NaN)
        and ``sample_stats`` ``step_size`` and ``lp`` ``(num_chains, num_samples)``.
    """
    # imported here: importing BlackJAX runs a JAX computation, which would start the XLA
    # backend at `import bnnpp`, before bnnpp.distributed.initialize can run
    from blackjax.sgmcmc import diffusions
    from blackjax.util import generate_gaussian_noise

    n = int(x.shape[0])
    options = options.resolve(int(x.shape[0]))  # num_steps / epochs → burn_in, thinning (idempotent)
    variant, num_chains = options.variant, int(options.num_chains)
    sched = Schedule.from_options(options)
    names = list(latent_sites(model, x, y))  # the draws are the model's sites, whatever form the chains run on
    sampled = _sampled_model(model, x, y, options.noncentered)
    sites = latent_sites(sampled, x, y)
    key_model = np.zeros(2, np.uint32)  # the models draw nothing random at a fixed position (PRNGKey(0))
    logdensity = logdensity_estimator(sampled, n, key_model)
    burn_in = int(options.burn_in)
    held = _preconditioner(options, model, x, y)
    frozen, fisher = held in ("frozen", "fisher"), held == "fisher"
    # under "fisher" the sampling steps are fisher_step_size in units of the metric, the schedule's shape kept
    sampling_scale = float(options.fisher_step_size) / sched.step_size if fisher else 1.0
    value_and_grad = jax.value_and_grad(lambda u, b: logdensity(u, b)[0])
    langevin = diffusions.overdamped_langevin()
    sghmc = diffusions.sghmc(alpha=float(options.friction))

    # U(±2) weights start a wide layer saturated or exploding (pre-activation sd ≈ 8 at 50
    # inputs); the first Langevin steps then overflow on a CNN (LeNet-5 on MNIST, h = 1e-3)
    limits, biases = glorot_limits(find_layers(model, *probe_rows(model, x, y))) if options.init_loc == "glorot" else ({}, frozenset())
    draw_start = functools.partial(init_glorot, radius=options.init_radius, limits=limits, biases=biases)

    def init(key, data):
        k_position, k_noise = jax.random.split(key)
        shapes = {name: s.shape for name, s in sites.items()}
        rows = probe_rows(model, x, y)
        u = jax.vmap(
            lambda k: (
                decentred_start(model, sampled, draw_start(shapes, k), start, *rows)
                if sampled is not model and start
                else apply_start(draw_start(shapes, k), start)
            )
        )(jax.random.split(k_position, num_chains))
        v = jax.tree.map(jnp.zeros_like, u) if variant == "psgld" else None
        return SGLDState(u, jnp.zeros((), jnp.int32), jnp.zeros((num_chains,), jnp.float32), v, k_noise)

    def one_chain(key, u, v, batch_data, h, temperature, first, adapt):
        if variant == "sghmc":  # as blackjax.sghmc's kernel: fresh momentum, L integrator steps

            def body(carry, k):
                position, momentum, _ = carry
                lp, grad = value_and_grad(position, batch_data)
                position, momentum = sghmc(k, position, momentum, grad, h, temperature)
                return (position, momentum, lp), None

            momentum = generate_gaussian_noise(key, u)
            keys = jax.random.split(key, options.num_integration_steps)
            (u, _, lp), _ = jax.lax.scan(body, (u, momentum, jnp.zeros(())), keys)
            return u, v, lp
        lp, grad = value_and_grad(u, batch_data)
        if variant == "sgld":
            return langevin(key, u, grad, h, temperature), v, lp
        # pSGLD (Li et al. 2016, Algorithm 1; Γ dropped): RMSprop preconditioner from ĝ⊙ĝ
        decay, eps = options.rms_decay, options.rms_eps
        v = jax.tree.map(lambda vi, gi: jnp.where(first, gi * gi, jnp.where(adapt, decay * vi + (1 - decay) * gi * gi, vi)), v, grad)
        if fisher:  # after the burn-in: the held diagonal empirical Fisher as the metric (Ahn et al. 2012)
            precond = jax.tree.map(lambda vi: jnp.where(adapt, 1.0 / (eps + jnp.sqrt(vi)), 1.0 / (eps + vi)), v)
        else:
            precond = jax.tree.map(lambda vi: 1.0 / (eps + jnp.sqrt(vi)), v)
        noise = generate_gaussian_noise(key, u)
        u = jax.tree.map(lambda ui, gi, pi, ni: ui + h * pi * gi + jnp.sqrt(2.0 * h * pi * temperature) * ni, u, grad, precond, noise)
        return u, v, lp

    def step(key, state, batch_data):
        next_key, _, key = jax.random.split(state.key, 3)
        t = state.t
        h = jnp.asarray(sched.step_size_at(t), jnp.float32) * jnp.where(t < burn_in, 1.0, sampling_scale)
        temperature = jnp.where(sched.explores(t), 0.0, 1.0)
        v_axis = 0 if variant == "psgld" else None
        adapt = (t < burn_in) if frozen else True  # a frozen preconditioner is a constant metric after the burn-in
        u, v, lp = jax.vmap(one_chain, in_axes=(0, 0, v_axis, None, None, None, None, None), out_axes=(0, v_axis, 0))(
            jax.random.split(key, num_chains), state.position, state.v, batch_data, h, temperature, t == 0, adapt
        )
        return SGLDState(u, t + 1, lp, v, next_key), SGLDInfo(-jnp.mean(lp))

    def constrained(key, state):
        x1, y1 = probe_rows(model, x, y)

        def values(u):
            _, trace = logdensity(u, (x1, y1))
            return {name: trace[name]["value"] for name in names}

        return jax.vmap(values)(state.position)

    def emit(key, state):
        return constrained(key, state), {"lp": state.lp}

    def sample(key, state, num_samples):
        """The chains' current positions (the posterior's draws are the emitted ones)."""
        return constrained(key, state)

    return Algorithm(
        init,
        step,
        sample,
        RunSpec(
            num_steps=sched.num_steps,
            num_samples=num_chains,
            batch_size=options.batch_size,
            name=f"sgld ({variant})",
            num_chains=num_chains,
            emit=emit,
            emit_steps=sched.kept_steps(),
            kept_stats=lambda steps: {"step_size": np.asarray(sched.step_size_at(steps), np.float64) * sampling_scale},
        ),
        Hooks(keys=_keys, postfix=lambda info: {"log density": f"{-info.loss.mean():.4g}"}),
    )


register(
    Method(
        "sgld",
        SGLDOptions,
        build=build,
        summary="stochastic-gradient MCMC: SGLD, preconditioned SGLD, SGHMC (BlackJAX), multi-chain, minibatched",
        smoke={"num_chains": 2, "burn_in": 20, "num_samples": 10, "thinning": 2},
    )
)
