"""``sgld``: stochastic-gradient MCMC — SGLD (Welling & Teh 2011), preconditioned SGLD
(Li et al. 2016) and SGHMC (Chen et al. 2014), with constant, polynomial or cyclical
(Zhang et al. 2020) step sizes.

Target. Every variant samples the model's posterior on the unconstrained space: weights as
they are, hierarchical scale and noise sites as ``log σ`` (or whatever NumPyro's
``biject_to`` gives), with the log-Jacobian in the prior term (:func:`_joint.joint_terms`).
The stochastic gradient is the one of Welling & Teh (2011)::

    ĝ(u) = ∇ log p(u) + (N / B) · Σ_{i ∈ batch} ∇ log p(y_i | x_i, u)

an unbiased estimate of ∇ log p(u | data) (:func:`grad_estimator`; ``B = N`` without a
``batch_size``, which makes ĝ the exact gradient).

Step-size convention. ``step_size`` is BlackJAX's ``h``: the overdamped Langevin update is
``u ← u + h·ĝ(u) + sqrt(2h)·ξ``, ξ ~ N(0, I) — Welling & Teh's ``ε_t / 2 · ĝ + N(0, ε_t)``
with ``h = ε_t / 2``. For ``psgld`` ``h`` plays the same role with the preconditioner in
front (so it is RMSprop's learning rate: each coordinate drifts about ``h`` per step); for
``sghmc`` it is the integrator's time step (``u ← u + h·p``, see below).

Variants (option ``variant``):

* ``"sgld"``: BlackJAX's ``blackjax.sgld`` kernel with :func:`grad_estimator`.
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
* ``"sghmc"``: BlackJAX's ``blackjax.sghmc`` kernel (Chen et al. 2014, in the
  parameterisation of Ma et al. 2015): each step draws a momentum p ~ N(0, I), then runs
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

Minibatches (``batch_size=B``): drawn on the device inside the compiled step. Each chain
shuffles the rows once per epoch (a fresh ``jax.random.permutation``) and takes ``N // B``
consecutive disjoint batches of that permutation; when ``B`` does not divide ``N`` the
``N mod B`` rows left at the end of a permutation are skipped for that epoch. Every batch is
then a uniformly random subset drawn without replacement, so ĝ is unbiased.
``batch_size=None`` (or ``N``) uses every row at every step.

Chains. ``num_chains`` chains run side by side (``vmap``), each started uniformly in
(−``init_radius``, ``init_radius``) on the unconstrained space with its own noise and
batches.

Running. Nothing goes back to the host per step. The steps are grouped into segments, each
ending at a kept step (long runs of unkept steps — burn-in, exploration stages — are cut
into pieces of at most ``max(thinning, ceil(total steps / 100))`` steps so the progress bar
moves); one segment is one step of the shared driver (:mod:`bnnpp.inference._loop`): a
while-loop of SG steps compiled once into a ``lax.scan`` chunk and run chunk after chunk
with a progress bar. A segment emits one row: the log-density estimate of each chain and
the constrained values of every latent site at the segment's end. Draws thus leave the
device as scan outputs, once per chunk; keeping them in a buffer in the loop state instead
would cost a pass over the whole buffer per step (the driver's NaN guard checks and copies
its state every step). The NaN guard stops the run at the first segment whose positions or
log-density estimate are not finite and keeps the draws before it (with a warning).

References:
    Welling, M. & Teh, Y. W. (2011). Bayesian learning via stochastic gradient Langevin
    dynamics. ICML.
    Chen, T., Fox, E. & Guestrin, C. (2014). Stochastic gradient Hamiltonian Monte Carlo. ICML.
    Ma, Y.-A., Chen, T. & Fox, E. (2015). A complete recipe for stochastic gradient MCMC. NeurIPS.
    Li, C., Chen, C., Carlson, D. & Carin, L. (2016). Preconditioned stochastic gradient
    Langevin dynamics for deep neural networks. AAAI.
    Zhang, R., Li, C., Zhang, J., Chen, C. & Wilson, A. G. (2020). Cyclical stochastic
    gradient MCMC for Bayesian deep learning. ICLR.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import blackjax
import jax
import jax.numpy as jnp
import numpy as np

from bnnpp.inference._joint import init_uniform, joint_terms
from bnnpp.inference._loop import all_finite, compile_all, default_chunk_size, drive, lower_chunk
from bnnpp.inference.base import (
    Backend,
    Posterior,
    check_batch_size,
    latent_sites,
    non_negative_int,
    one_of,
    positive_float,
    positive_int,
    register,
)

__all__ = ["DEFAULTS", "SCHEDULES", "VARIANTS", "Schedule", "fit", "grad_estimator", "logdensity_estimator", "validate"]

VARIANTS = ("sgld", "psgld", "sghmc")
SCHEDULES = ("constant", "polynomial", "cyclical")

DEFAULTS = {
    "variant": "sgld",
    "step_size": 1e-3,
    "schedule": "constant",
    "decay_steps": 1000.0,
    "gamma": 0.55,
    "num_cycles": 4,
    "exploration": 0.25,
    "batch_size": None,
    "num_samples": 1000,
    "burn_in": 2000,
    "thinning": 10,
    "num_chains": 4,
    "init_radius": 2.0,
    "num_integration_steps": 10,
    "friction": 0.01,
    "rms_decay": 0.99,
    "rms_eps": 1e-5,
    "chunk_size": None,
}

PIECES = 100
"""Runs of unkept steps are cut so that they take at most about this many driver steps."""


# --------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------


def _fraction(o: dict, name: str, low_open: bool, high_open: bool, low: float = 0.0, high: float = 1.0) -> None:
    v = o[name]
    ok = (
        not isinstance(v, bool)
        and isinstance(v, (int, float, np.floating, np.integer))
        and math.isfinite(v)
        and (v > low if low_open else v >= low)
        and (v < high if high_open else v <= high)
    )
    if not ok:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ValueError(f"{name} must be a number in {interval}, got {v!r}")


def validate(o: dict) -> None:
    """Reject bad SG-MCMC options with a one-line error (data-dependent checks, such as a
    ``batch_size`` larger than the data, are in ``check_batch_size``, run by ``bnnpp.fit``)."""
    one_of(o, "variant", VARIANTS)
    one_of(o, "schedule", SCHEDULES)
    positive_float(o, "step_size")
    positive_int(o, "num_chains")
    positive_int(o, "num_samples")
    positive_int(o, "thinning")
    non_negative_int(o, "burn_in")
    if o["batch_size"] is not None:
        positive_int(o, "batch_size")
    positive_float(o, "init_radius")
    positive_float(o, "decay_steps")
    _fraction(o, "gamma", low_open=True, high_open=False, low=0.5)
    positive_int(o, "num_cycles")
    _fraction(o, "exploration", low_open=False, high_open=True)
    positive_int(o, "num_integration_steps")
    positive_float(o, "friction")
    _fraction(o, "rms_decay", low_open=True, high_open=True)
    positive_float(o, "rms_eps")
    if o["chunk_size"] is not None:
        positive_int(o, "chunk_size")
    if o["schedule"] == "cyclical" and o["num_samples"] % o["num_cycles"]:
        k, c = o["num_samples"], o["num_cycles"]
        raise ValueError(
            f"with schedule='cyclical' num_samples ({k}) must be a multiple of num_cycles ({c}): "
            f"e.g. num_samples={max(c, k - k % c)} or num_cycles=1"
        )
    if o["variant"] == "sghmc" and o["friction"] * o["step_size"] >= 1:
        raise ValueError(
            f"friction × step_size must be < 1 for sghmc (got {o['friction']} × {o['step_size']}): lower either"
        )


# --------------------------------------------------------------------------------------
# Step-size schedule and kept steps
# --------------------------------------------------------------------------------------


def _xp(t):
    return np if isinstance(t, (int, np.integer, np.ndarray)) else jnp


@dataclass(frozen=True)
class Schedule:
    """Step size, exploration stages and kept draws as functions of the step index ``t``
    (0-based, burn-in included); see the module docstring for the formulas.

    The methods take an integer or an integer array (NumPy on the host, JAX inside the
    compiled step) and return the same kind.
    """

    kind: str
    step_size: float
    burn_in: int
    thinning: int
    num_samples: int
    decay_steps: float = 1000.0
    gamma: float = 0.55
    num_cycles: int = 1
    exploration: float = 0.0

    @classmethod
    def from_options(cls, o: dict) -> Schedule:
        """The schedule of a full option dict (as ``DEFAULTS``)."""
        return cls(
            o["schedule"], float(o["step_size"]), int(o["burn_in"]), int(o["thinning"]), int(o["num_samples"]),
            float(o["decay_steps"]), float(o["gamma"]), int(o["num_cycles"]), float(o["exploration"]),
        )

    @property
    def sampling_steps(self) -> int:
        """Steps in the sampling stage of a cycle: ``(num_samples / num_cycles) · thinning``."""
        return self.num_samples // self.num_cycles * self.thinning

    @property
    def cycle_length(self) -> int:
        """Steps per cycle ``L`` (cyclical schedule)."""
        s = self.sampling_steps
        return s + math.ceil(self.exploration * s / (1.0 - self.exploration) - 1e-9)

    @property
    def exploration_steps(self) -> int:
        """Noise-free steps at the start of each cycle ``E = L − S`` (cyclical schedule)."""
        return self.cycle_length - self.sampling_steps

    @property
    def num_steps(self) -> int:
        """Steps per chain, burn-in included."""
        if self.kind == "cyclical":
            return self.burn_in + self.num_cycles * self.cycle_length
        return self.burn_in + self.num_samples * self.thinning

    def step_size_at(self, t):
        """Step size ``h_t``."""
        xp = _xp(t)
        h0 = self.step_size
        if self.kind == "constant":
            return h0 * xp.ones_like(t, dtype=float if xp is np else jnp.float32)
        if self.kind == "polynomial":
            return h0 * (1.0 + t / self.decay_steps) ** (-self.gamma)
        j = xp.maximum(t - self.burn_in, 0) % self.cycle_length
        return xp.where(t < self.burn_in, h0, h0 / 2 * (xp.cos(math.pi * j / self.cycle_length) + 1))

    def explores(self, t):
        """Whether step ``t`` is in an exploration stage (run without noise)."""
        xp = _xp(t)
        if self.kind != "cyclical":
            return xp.zeros_like(t, dtype=bool)
        j = xp.maximum(t - self.burn_in, 0) % self.cycle_length
        return (t >= self.burn_in) & (j < self.exploration_steps)

    def draw_index(self, t):
        """Index of the draw kept after step ``t``, or −1 when ``t`` is not kept."""
        xp = _xp(t)
        s = xp.maximum(t - self.burn_in, 0)
        inside = (t >= self.burn_in) & (t < self.num_steps)
        if self.kind != "cyclical":
            keep = inside & ((s + 1) % self.thinning == 0)
            return xp.where(keep, (s + 1) // self.thinning - 1, -1)
        cycle, j = s // self.cycle_length, s % self.cycle_length
        k = j - self.exploration_steps + 1  # 1-based step of the sampling stage
        keep = inside & (k >= 1) & (k % self.thinning == 0)
        per_cycle = self.num_samples // self.num_cycles
        return xp.where(keep, cycle * per_cycle + k // self.thinning - 1, -1)

    def kept_steps(self) -> np.ndarray:
        """The kept step indices ``(num_samples,)``, ascending."""
        return np.flatnonzero(self.draw_index(np.arange(self.num_steps)) >= 0)

    def segments(self) -> tuple[np.ndarray, np.ndarray]:
        """Segment ends (exclusive) ``(num_segments,)`` and whether each ends at a kept step.

        Every kept step ends a segment; a longer run of unkept steps is cut into pieces of at
        most ``max(thinning, ceil(num_steps / PIECES))`` steps.
        """
        piece = max(self.thinning, math.ceil(self.num_steps / PIECES))
        ends: list[int] = []
        keep: list[bool] = []
        start = 0
        for end in self.kept_steps() + 1:
            while end - start > piece:
                start += piece
                ends.append(start)
                keep.append(False)
            ends.append(int(end))
            keep.append(True)
            start = int(end)
        return np.asarray(ends, np.int64), np.asarray(keep, bool)


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
        log_prior, log_lik, tr = joint_terms(model, position, xb, yb, key)
        return log_prior + (data_size / xb.shape[0]) * log_lik, tr

    return f


def grad_estimator(model: Callable, data_size: int, key) -> Callable:
    """Welling & Teh's unbiased gradient estimate ``∇ log p(u) + (N / B) Σ_batch ∇ log p(y_i | u)``.

    Returns:
        ``g(position, (x_batch, y_batch)) -> gradient``, a dict shaped like ``position`` —
        the callable BlackJAX's SG-MCMC kernels take as ``grad_estimator``.
    """
    f = logdensity_estimator(model, data_size, key)
    return jax.grad(lambda u, batch: f(u, batch)[0])


def _psgld_update(g: Callable, rms_decay: float, rms_eps: float) -> Callable:
    """One pSGLD step (Li et al. 2016, Algorithm 1, Γ term dropped; see the module docstring).

    Returns ``update(key, u, v, batch, h, temperature, first) -> (u, v)``.
    """

    def update(key, u, v, batch, h, temperature, first):
        grad = g(u, batch)
        v = jax.tree.map(lambda vi, gi: jnp.where(first, gi * gi, rms_decay * vi + (1 - rms_decay) * gi * gi), v, grad)
        leaves, tree = jax.tree.flatten(u)
        keys = jax.tree.unflatten(tree, list(jax.random.split(key, len(leaves))))

        def move(ui, gi, vi, ki):
            precond = 1.0 / (rms_eps + jnp.sqrt(vi))
            noise = jax.random.normal(ki, ui.shape, ui.dtype)
            return ui + h * precond * gi + jnp.sqrt(2.0 * h * precond * temperature) * noise

        return jax.tree.map(move, u, grad, v, keys), v

    return update


# --------------------------------------------------------------------------------------
# Fit
# --------------------------------------------------------------------------------------


def fit(model, x, y, *, seed: int, progress: bool, **o) -> Posterior:
    """Sample the posterior of ``model`` given ``(x, y)`` by stochastic-gradient MCMC.

    Options (defaults in ``DEFAULTS``; formulas in the module docstring):
    ``variant`` ``"sgld"`` | ``"psgld"`` | ``"sghmc"``; ``step_size`` the base step size
    ``h`` (BlackJAX's convention: ``h = ε/2`` of Welling & Teh); ``schedule``
    ``"constant"`` | ``"polynomial"`` (``decay_steps``, ``gamma``) | ``"cyclical"``
    (``num_cycles``, ``exploration`` — the noise-free fraction of each cycle);
    ``batch_size`` rows per minibatch (``None``: all rows); ``num_samples`` kept draws per
    chain; ``burn_in`` steps discarded first; ``thinning`` steps per kept draw;
    ``num_chains`` (vmapped); ``init_radius``: start uniform in (−r, r) on the unconstrained
    space; sghmc: ``num_integration_steps``, ``friction`` (α); psgld: ``rms_decay`` (ρ),
    ``rms_eps`` (λ); ``chunk_size``: segments (≈ draws) per compiled chunk.

    Returns:
        A :class:`Posterior` with samples ``(num_chains, num_samples, *site_shape)`` of the
        latent sites (constrained values; fewer draws if the run stopped at a NaN).
        ``info["sample_stats"]``: ``step_size`` — the step size of the step each draw was
        kept after — and ``lp`` — the minibatch estimate of the log joint on the
        unconstrained space at each draw (the exact log joint when ``batch_size`` is
        ``None``) — both ``(num_chains, num_samples)``. ``info["steps_run"]`` counts the SG
        steps per chain whose results were kept; ``info["stopped_at"]`` is the first step
        after which a position (or the log-density estimate at a segment's end) was not
        finite, or ``None``.

    Raises:
        RuntimeError: the chains became non-finite before the first kept draw.
    """
    n = int(x.shape[0])
    batch_size = o["batch_size"]  # ≤ n: checked by check_batch_size before fit is called
    minibatch = batch_size is not None and batch_size < n
    b = batch_size if minibatch else n
    batches_per_epoch = n // b
    variant, num_chains = o["variant"], int(o["num_chains"])
    sched = Schedule.from_options(o)
    ends, keep = sched.segments()
    starts = np.concatenate([[0], ends[:-1]])
    kept_steps = sched.kept_steps()

    sites = latent_sites(model, x, y)
    names = list(sites)
    sizes = [math.prod(sites[k].shape) for k in names]
    xj, yj = jax.device_put(x), jax.device_put(y)
    key_init, key_model = jax.random.split(jax.random.PRNGKey(seed))

    logdensity = logdensity_estimator(model, n, key_model)
    grad = grad_estimator(model, n, key_model)
    if variant == "sgld":
        kernel = blackjax.sgld(grad)
    elif variant == "sghmc":
        kernel = blackjax.sghmc(grad, int(o["num_integration_steps"]), alpha=float(o["friction"]))
    else:
        psgld = _psgld_update(grad, float(o["rms_decay"]), float(o["rms_eps"]))
    batch_axis = 0 if minibatch else None

    def init_fn(key):
        k_pos, k_run = jax.random.split(key)
        shapes = {name: s.shape for name, s in sites.items()}
        u = jax.vmap(lambda k: init_uniform(shapes, k, o["init_radius"]))(jax.random.split(k_pos, num_chains))
        state = {"t": jnp.int32(0), "segment": jnp.int32(0), "key": k_run, "u": u}
        if variant == "psgld":
            state["v"] = jax.tree.map(jnp.zeros_like, u)
        if minibatch:
            state["perm"] = jnp.zeros((num_chains, n), jnp.int32)
        return state

    def batch_at(perm, t):
        """Rows of step ``t`` for every chain: ``(C, B, ...)``."""
        idx = jax.lax.dynamic_slice_in_dim(perm, (t % batches_per_epoch) * b, b, axis=1)
        return xj[idx], yj[idx]

    def sg_step(t, carry):
        state, bad = carry
        key, k_perm, k_step = jax.random.split(state["key"], 3)
        h = jnp.asarray(sched.step_size_at(t), jnp.float32)
        temperature = jnp.where(sched.explores(t), 0.0, 1.0)
        new = dict(state, key=key)
        if minibatch:
            new["perm"] = jax.lax.cond(
                t % batches_per_epoch == 0,
                lambda: jax.vmap(lambda k: jax.random.permutation(k, n).astype(jnp.int32))(
                    jax.random.split(k_perm, num_chains)
                ),
                lambda: state["perm"],
            )
            batch = batch_at(new["perm"], t)
        else:
            batch = (xj, yj)
        keys = jax.random.split(k_step, num_chains)
        if variant == "psgld":
            new["u"], new["v"] = jax.vmap(psgld, in_axes=(0, 0, 0, batch_axis, None, None, None))(
                keys, state["u"], state["v"], batch, h, temperature, t == 0
            )
        else:
            new["u"] = jax.vmap(kernel.step, in_axes=(0, 0, batch_axis, None, None))(
                keys, state["u"], batch, h, temperature
            )
        finite = all_finite(new["u"])
        bad = jnp.where((bad < 0) & ~finite, t, bad)
        return new, bad

    ends_j = jnp.asarray(ends, jnp.int32)

    def segment(state):
        start, end = state["t"], ends_j[state["segment"]]
        state, bad = jax.lax.fori_loop(start, end, sg_step, (state, jnp.int32(-1)))
        batch = batch_at(state["perm"], end - 1) if minibatch else (xj, yj)
        def at_end(u, batch):
            est, tr = logdensity(u, batch)
            return est, [tr[name]["value"] for name in names]

        lp, values = jax.vmap(at_end, in_axes=(0, batch_axis))(state["u"], batch)
        values = [v.reshape(num_chains, -1) for v in values]
        # one row per segment: lp per chain, the step offset of the first non-finite
        # position (−1: none), then every chain's constrained values
        offset = jnp.where(bad < 0, -1, bad - start).astype(lp.dtype)
        row = jnp.concatenate([lp, offset[None], jnp.concatenate(values, axis=1).ravel().astype(lp.dtype)])
        return dict(state, t=end, segment=state["segment"] + 1), row

    num_segments = len(ends)
    chunk_size = o["chunk_size"] or default_chunk_size(num_segments)
    t0 = time.perf_counter()
    lowered_init = jax.jit(init_fn).lower(key_init)
    programs = compile_all(
        {"init": lowered_init, "chunk": lower_chunk(segment, lowered_init.out_info, num_segments, chunk_size)}
    )
    compile_seconds = time.perf_counter() - t0

    def postfix(rows):
        return {"log density": f"{rows[:, :num_chains].mean():.4g}"}

    res = drive(
        programs["chunk"], programs["init"](key_init), num_segments, chunk_size, progress=progress,
        desc=f"sgld ({variant})", postfix=postfix, compile_seconds=compile_seconds,
    )

    t0 = time.perf_counter()
    rows = np.asarray(res.losses)
    done = res.steps_run - (res.stopped_at is not None)  # segments whose results were kept
    stopped_at = None
    if res.stopped_at is not None:
        # the step after which a position became non-finite, else the segment's last step
        # (its positions were finite, their log-density estimate was not)
        offset, seg = rows[-1, num_chains], res.stopped_at
        stopped_at = int(starts[seg]) + int(offset) if np.isfinite(offset) and offset >= 0 else int(ends[seg]) - 1
    rows = rows[:done][keep[:done]]
    num_draws = rows.shape[0]
    if num_draws == 0:
        raise RuntimeError(
            f"sgld ({variant}): the chains became NaN/inf at step {stopped_at}, before the first kept draw; "
            f"lower step_size (now {o['step_size']}) or use a tighter prior"
        )
    lp = rows[:, :num_chains].T
    flat = rows[:, num_chains + 1 :].reshape(num_draws, num_chains, -1)
    samples = {}
    for name, part in zip(names, np.split(flat, np.cumsum(sizes)[:-1], axis=2), strict=True):
        samples[name] = np.ascontiguousarray(np.swapaxes(part, 0, 1)).reshape(num_chains, num_draws, *sites[name].shape)
    step_sizes = np.asarray(sched.step_size_at(kept_steps[:num_draws]), np.float64)
    info = {
        "method": "sgld",
        "seed": seed,
        "options": dict(o),
        "steps_run": int(ends[done - 1]) if done else 0,
        "stopped_at": stopped_at,
        "compile_seconds": compile_seconds,  # tracing + compiling init and the chunk (wall)
        "run_seconds": res.run_seconds,
        "sample_stats": {"step_size": np.broadcast_to(step_sizes, (num_chains, num_draws)).copy(), "lp": lp},
    }
    info["sample_seconds"] = time.perf_counter() - t0
    return Posterior(samples, info, model, x, y, sites)


register(
    Backend(
        "sgld",
        fit,
        DEFAULTS,
        validate,
        "stochastic-gradient MCMC: SGLD, preconditioned SGLD, SGHMC (BlackJAX), multi-chain, minibatched",
        validate_data=check_batch_size,
    )
)
