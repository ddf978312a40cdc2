"""``nuts``: the No-U-Turn Sampler (Hoffman & Gelman 2014) with NumPyro — the exact reference.

Runs ``numpyro.infer.MCMC`` with a ``NUTS`` kernel on the model's unconstrained space:
``num_warmup`` adaptation iterations (step size by dual averaging towards
``target_accept_prob``, diagonal or ``dense_mass`` mass matrix) followed by ``num_samples``
kept draws in each of ``num_chains`` chains. Every chain starts uniformly in
(−``init_radius``, ``init_radius``) on the unconstrained space (``init_to_uniform``).

Chains: ``chain_method="vectorized"`` (default) runs all chains in one program on one device
(``vmap``); ``"parallel"`` puts one chain on each device and needs
``num_chains ≤ jax.device_count()`` — on a CPU set
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before jax is imported;
``"sequential"`` runs the chains one after another. ``"parallel"`` is not NumPyro's ``pmap``:
the chains are ``vmap``ped in one ``jit`` program whose chain axis is split over the
``members`` axis of a :class:`jax.sharding.Mesh` with ``NamedSharding`` (:func:`sharded_chains`,
passed to ``MCMC`` as its ``chain_method`` callable): the same keys and starts as
``"vectorized"``, and the same draws up to float reassociation (which long NUTS runs amplify).
``bnnpp.fit(..., method="nuts", devices=N)`` or ``mesh="chains=N"`` does the same on N
devices (``num_chains`` divisible by N); NUTS has no data axis.

Progress bar: with ``progress=True`` NumPyro drives the sampler from a Python loop, one
dispatch per iteration instead of the single compiled loop used with ``progress=False`` (a few
tenths of a second per 1,000 iterations: it matters only for tiny models). It works with
``"vectorized"``: one bar for all chains together, without the step-size / acceptance postfix;
``"sequential"`` shows one bar per chain with that postfix; ``"parallel"`` one bar per chain.
NumPyro turns the bar off by itself when the ``CI`` environment variable is set.

Sample statistics (``info["sample_stats"]``, ``(chain, draw)`` arrays, ArviZ names, shown in
``to_arviz().sample_stats``): ``diverging``, ``acceptance_rate``, ``step_size``,
``tree_depth``, ``n_steps`` (leapfrog steps), ``energy`` (Hamiltonian) and ``lp`` (the log
joint density on the unconstrained space, −potential energy). Divergences are counted over
the kept draws only; any divergence emits a ``RuntimeWarning``.

Timing: ``compile_seconds`` is the XLA backend compilation time, summed from JAX's
``/jax/core/compile/backend_compile_duration`` monitoring events during the fit (NumPyro
compiles lazily inside ``MCMC.run``, so compilation cannot be timed as a separate phase; with
JAX's persistent compilation cache on, a cache hit counts its loading time here instead);
``run_seconds`` is the rest of the wall time of the run (tracing, lowering, warmup and
sampling); ``sample_seconds`` is the time to copy the draws and statistics to the host.

Device: ``device="auto"`` (default) runs a small NUTS problem on the CPU even when JAX's default
device is a GPU: NumPyro's NUTS takes one small kernel launch after another inside its
``while_loop``, so for a tiny network the launches, not the arithmetic, set the pace. On an H100
the 2-5-5-2 moons network (57 parameters × 700 rows) drew 6 samples/s against 23/s on a 2-core
CPU. "Small" is ``parameters × training rows ≤`` :data:`SMALL_NUTS_WORK`; that threshold is
extrapolated from this one measurement (GPU time per leapfrog step taken as flat, CPU time as
proportional to parameters × rows, with the GPU host's CPU cores to spare), not measured at the
crossover. ``device="cpu"`` always uses the CPU, ``"default"`` JAX's default device; with
``devices``/``mesh`` the chains go where the mesh says. ``extras["device"]`` records the platform.

NUTS costs a full-data gradient per leapfrog step and up to ``2**max_tree_depth − 1`` steps per
draw, so it is the gold standard for small networks only: above
:data:`PARAMETER_WARNING` parameters a ``UserWarning`` points to the methods that scale
(``advi``, ``bbb``, ``sgld``).
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import jax
import jax.monitoring
import numpy as np
import numpyro.distributions as dist
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from numpyro import handlers
from numpyro.infer import MCMC, NUTS
from numpyro.infer.initialization import init_to_uniform
from numpyro.infer.reparam import LocScaleReparam
from numpyro.infer.util import constrain_fn

from bnnpp.inference import health
from bnnpp.inference.checkpoints import (
    Checkpointer,
    Checkpointing,
    TrainingInterrupted,
    fingerprint,
    interruptible,
    remove,
)
from bnnpp.inference.options import (
    Options,
    boolean,
    non_negative_int,
    option,
    optional,
    positive_float,
    positive_int,
    temperature_option,
)
from bnnpp.inference.registry import Method, register
from bnnpp.inference.sharding import Placement, placement, put
from bnnpp.introspection import BATCH_WRAPPERS, latent_sites, num_parameters, unwrap
from bnnpp.posterior import FitStats, Posterior

CHAIN_METHODS = ("vectorized", "parallel", "sequential")
MAX_TREE_DEPTH = 15
PARAMETER_WARNING = 5_000
"""Above this many latent parameters, :func:`fit` warns that NUTS will be slow."""
DEVICES = ("auto", "cpu", "default")
SMALL_NUTS_WORK = 1_000_000
"""``device="auto"`` runs NUTS on the CPU when latent parameters × training rows is at most
this (module docstring: extrapolated from one GPU measurement, not measured at the crossover)."""

# NumPyro state field → ArviZ sample_stats name
_FIELDS = {
    "diverging": "diverging",
    "accept_prob": "acceptance_rate",
    "adapt_state.step_size": "step_size",
    "num_steps": "n_steps",
    "energy": "energy",
    "potential_energy": "lp",
}

# --------------------------------------------------------------------------------------
# XLA compile time: one process-wide listener keeps a running total; a fit takes the
# difference between its end and its start.
# --------------------------------------------------------------------------------------

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_compile_total = [0.0]


def _on_duration(event: str, duration: float, **kwargs) -> None:
    if event == _COMPILE_EVENT:
        _compile_total[0] += duration


jax.monitoring.register_event_duration_secs_listener(_on_duration)


# --------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------


def _accept_prob(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not 0 < value < 1:
        raise ValueError(f"{name} must be a number strictly between 0 and 1 (e.g. 0.8 or 0.95), got {value!r}")


def _tree_depth(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_TREE_DEPTH:
        raise ValueError(f"{name} must be an integer from 1 to {MAX_TREE_DEPTH} (default 10), got {value!r}")


@dataclass(frozen=True)
class NUTSOptions(Options):
    """Options of ``method="nuts"`` (see :func:`fit`)."""

    num_chains: int = option(4, "independent chains", check=positive_int)
    num_warmup: int = option(1000, "NUTS warm-up (adaptation) iterations per chain", check=non_negative_int)
    num_samples: int = option(1000, "posterior draws kept (per chain for MCMC)", check=positive_int)
    num_steps: int | None = option(None, "NUTS iterations per chain, replacing num_warmup and num_samples: half warm-up, half kept", check=optional(positive_int), type=int)
    target_accept_prob: float = option(0.8, "NUTS target acceptance probability", check=_accept_prob)
    max_tree_depth: int = option(10, "NUTS maximum tree depth", check=_tree_depth)
    chain_method: str = option("vectorized", "how NUTS runs its chains", choices=CHAIN_METHODS)
    init_radius: float = option(2.0, "start values uniform in (-r, r) on the unconstrained space", check=positive_float)
    dense_mass: bool = option(False, "NUTS: adapt a dense mass matrix", check=boolean)
    noncentered: bool = option(False, "NUTS: sample location-scale weights as loc + scale * z", check=boolean)
    device: str = option("auto", "NUTS: where to run (auto: the CPU when parameters x rows is small, else JAX's default "
                         "device; cpu; default)", choices=DEVICES)
    temperature: float = temperature_option()

    exclusive = (("num_steps", "num_warmup"), ("num_steps", "num_samples"))
    refused: ClassVar[dict[str, str]] = {"epochs": "nuts is not trained in epochs (every iteration uses all the data): pass num_steps "
               "(= num_warmup + num_samples per chain, split in half) or num_warmup and num_samples"}

    def resolve(self, n: int) -> NUTSOptions:
        """With ``num_steps`` T: ``num_warmup = T // 2`` and ``num_samples = T − T // 2``."""
        if self.num_steps is None:
            return self
        return dataclasses.replace(self, num_warmup=self.num_steps // 2, num_samples=self.num_steps - self.num_steps // 2)

    def check(self) -> None:
        if self.chain_method == "parallel":
            devices = jax.device_count()
            if self.num_chains > devices:
                raise ValueError(
                    f'chain_method="parallel" needs one device per chain: num_chains={self.num_chains} but jax sees '
                    f'{devices} device(s); use chain_method="vectorized", or set '
                    f"XLA_FLAGS=--xla_force_host_platform_device_count={self.num_chains} before importing jax"
                )


DEFAULTS = NUTSOptions.defaults()
"""Every option's default (the dict of bnnpp 0.1)."""


def _noncentered(site) -> LocScaleReparam | None:
    """NumPyro reparam config: decentre every latent site whose prior is a location-scale
    family on the reals (Normal, Laplace, Cauchy, Student-t): w = loc + scale · z with z drawn
    from the standard member of the family (Papaspiliopoulos, Roberts & Sköld 2007). The
    geometry of z no longer depends on a hierarchical layer scale, which removes the funnel
    between a layer's weights and its scale when the data say little about the weights.

    It is off by default because with informative data the centred form is the better one
    (the classic trade-off); on the moons and circles nets neither form removes the
    divergences, whose posteriors also have the symmetries of hidden units
    (``benchmarks/README.md`` has the counts). Try it when a
    layer's scale is weakly identified (little data, wide layers)."""
    if site["type"] != "sample" or site.get("is_observed") or site["name"].endswith("_decentered"):
        return None  # (the standardised site LocScaleReparam creates is left alone)
    base = unwrap(site["fn"], BATCH_WRAPPERS)
    if type(base) in (dist.Normal, dist.Laplace, dist.Cauchy):
        return LocScaleReparam(0)
    if type(base) is dist.StudentT:
        return LocScaleReparam(0, shape_params=("df",))
    return None


def sharded_chains(mesh) -> Callable:
    """A ``chain_method`` for NumPyro's ``MCMC``: ``chain_method(f)(args)`` runs the
    one-chain function ``f`` on every chain at once as ``jit(vmap(f))``, with the leading
    (chain) axis of every input and output split over the ``members`` axis of ``mesh``
    (``NamedSharding``; XLA partitions the vmapped sampler, one block of chains per device)."""
    chains = NamedSharding(mesh, P("members"))

    def method(f):
        return jax.jit(jax.vmap(f), in_shardings=chains, out_shardings=chains)

    return method


def tree_depth(num_steps: np.ndarray) -> np.ndarray:
    """NUTS tree depth from the number of leapfrog steps: a tree of depth d takes at most
    2**d − 1 steps and more than 2**(d−1) − 1, so d = floor(log2(steps)) + 1."""
    steps = np.maximum(np.asarray(num_steps, dtype=np.int64), 1)
    return (np.floor(np.log2(steps)) + 1).astype(np.int64)


# --------------------------------------------------------------------------------------
# Fit
# --------------------------------------------------------------------------------------


def device_for(choice: str, num_params: int, num_rows: int, placed: bool):
    """The device NUTS runs on for option ``device=choice`` (module docstring): a CPU
    ``jax.Device``, or ``None`` for JAX's default device (or the mesh's, when ``placed``)."""
    if choice == "cpu" and placed:
        raise ValueError('device="cpu" runs NUTS on one CPU device: leave devices/mesh unset, or pass device="default"')
    if choice == "default" or placed or jax.default_backend() == "cpu":
        return None
    if choice == "auto" and num_params * num_rows > SMALL_NUTS_WORK:
        return None
    return jax.devices("cpu")[0]


def fit(
    model, x, y, options: NUTSOptions, *, seed: int, progress: bool, checkpoint: Checkpointing | None = None,
    resume: bool = False, devices: int | None = None, mesh: str | dict | None = None,
) -> Posterior:
    """Sample the posterior of ``model`` given ``(x, y)`` with NUTS on the device that
    ``options.device`` chooses (:func:`device_for`); see :func:`_fit`."""
    n_params = num_parameters(latent_sites(model, x, y))
    where = device_for(options.device, n_params, int(x.shape[0]), devices is not None or mesh is not None)
    kwargs = {"seed": seed, "progress": progress, "checkpoint": checkpoint, "resume": resume, "devices": devices, "mesh": mesh}
    if where is None:
        post = _fit(model, x, y, options, **kwargs)
    else:
        with jax.default_device(where):
            post = _fit(model, x, y, options, **kwargs)
    post.stats.extras["device"] = jax.default_backend() if where is None else where.platform
    return post


def _fit(
    model, x, y, options: NUTSOptions, *, seed: int, progress: bool, checkpoint: Checkpointing | None = None,
    resume: bool = False, devices: int | None = None, mesh: str | dict | None = None,
) -> Posterior:
    """Sample the posterior of ``model`` given ``(x, y)`` with NUTS.

    Options (defaults in ``DEFAULTS``): ``num_chains``; ``num_warmup`` adaptation iterations
    per chain (discarded); ``num_samples`` kept draws per chain; ``target_accept_prob`` for
    step-size adaptation (raise it, e.g. to 0.95, when there are divergences);
    ``max_tree_depth`` (at most ``2**max_tree_depth − 1`` leapfrog steps per draw);
    ``chain_method`` ``"vectorized"`` | ``"parallel"`` | ``"sequential"``; ``init_radius``;
    ``dense_mass`` (adapt a full mass matrix: quadratic memory in the parameter count);
    ``noncentered``: sample location-scale weight sites as ``loc + scale · z`` (see
    :func:`_noncentered`); the samples are still the weights themselves.

    With ``checkpoint`` the warm-up runs first and its final state is checkpointed, then the
    draws are taken in blocks of ``checkpoint.every_steps`` draws (default: all at once), each
    continuing from the last state (NumPyro's ``post_warmup_state``) and checkpointed with the
    draws so far; SIGINT/SIGTERM stop after the current block. ``resume`` continues from the
    newest checkpoint: the result equals the uninterrupted checkpointed fit.

    ``devices`` / ``mesh`` (``"chains=N"``): the chains split over N devices as with
    ``chain_method="parallel"`` (module docstring); ``extras["placement"]`` records the mesh.

    Returns:
        A :class:`Posterior` with samples ``(num_chains, num_samples, *site_shape)`` of the
        latent sites (deterministic sites such as ``logits`` are left out);
        ``info["sample_stats"]`` holds the per-draw sampler statistics, ``info["divergences"]``
        their total and ``info["divergences_per_chain"]`` a list per chain.

    Warns:
        UserWarning: above :data:`PARAMETER_WARNING` latent parameters (before anything runs).
        RuntimeWarning: when any kept draw diverged.
    """
    options = options.resolve(int(x.shape[0]))  # num_steps → num_warmup + num_samples (idempotent)
    sites = latent_sites(model, x, y)
    n_params = num_parameters(sites)
    if n_params > PARAMETER_WARNING:
        warnings.warn(
            f"NUTS on {n_params:,} parameters (above {PARAMETER_WARNING:,}) will be slow: every leapfrog step "
            "takes a full-data gradient and a draw takes up to 2**max_tree_depth of them; for networks this "
            "size use a method that scales: method='advi', 'bbb' or 'sgld'",
            UserWarning,
            stacklevel=5,  # the caller of bnnpp.fit (through fit and _fit)
        )
    place = _placement(options, devices, mesh, len(x))
    if place is None:
        xj, yj = jax.device_put(x), jax.device_put(y)
    else:  # the data replicated on the mesh the chains are split over
        xj, yj = put(x, place.replicated), put(y, place.replicated)

    sampled = handlers.reparam(model, config=_noncentered) if options.noncentered else model

    def postprocess(z):
        # constrained values of the latent sites only: deterministic sites (e.g. the
        # (n, C) logits) are not stored for every draw; a decentred site's original value
        # is the deterministic site of its name
        values = constrain_fn(sampled, (xj, yj), {}, z, return_deterministic=bool(options.noncentered))
        return {k: values[k] for k in sites}

    kernel = NUTS(
        sampled,
        target_accept_prob=float(options.target_accept_prob),
        max_tree_depth=int(options.max_tree_depth),
        dense_mass=bool(options.dense_mass),
        init_strategy=init_to_uniform(radius=float(options.init_radius)),
    )
    mcmc = MCMC(
        kernel,
        num_warmup=int(options.num_warmup),
        num_samples=int(options.num_samples),
        num_chains=int(options.num_chains),
        chain_method=options.chain_method if place is None else sharded_chains(place.mesh),
        postprocess_fn=postprocess,
        progress_bar=progress and place is None,  # NumPyro has no bar for a callable chain_method
    )

    compiled_before = _compile_total[0]
    t0 = time.perf_counter()
    if checkpoint is None:
        mcmc.run(jax.random.PRNGKey(seed), xj, yj, extra_fields=tuple(_FIELDS))
        draws = mcmc.get_samples(group_by_chain=True)
        if place is not None:
            placed = {**place.facts(len(x)), "draws_sharding": [None if a is None else str(a) for a in draws[next(iter(sites))].sharding.spec]}
        fields = mcmc.get_extra_fields(group_by_chain=True)
    else:
        draws, fields = _run_in_blocks(mcmc, kernel, sites, options, seed, x, y, xj, yj, checkpoint, resume, model)
        placed = None if place is None else place.facts(len(x))
    jax.block_until_ready((draws, fields))
    wall = time.perf_counter() - t0
    compile_seconds = _compile_total[0] - compiled_before

    t0 = time.perf_counter()
    draws, fields = jax.device_get((draws, fields))
    samples = {k: np.asarray(draws[k]) for k in sites}
    stats = {name: np.asarray(fields[field]) for field, name in _FIELDS.items()}
    stats["diverging"] = stats["diverging"].astype(bool)
    stats["lp"] = -stats["lp"]
    stats["tree_depth"] = tree_depth(stats["n_steps"])
    sample_seconds = time.perf_counter() - t0

    per_chain = [int(v) for v in stats["diverging"].sum(axis=1)]
    divergences = sum(per_chain)
    if divergences:
        warnings.warn(
            f"{divergences} of {stats['diverging'].size} NUTS draws diverged (per chain: {per_chain}); the "
            f"posterior may be biased: raise target_accept_prob (now {options.target_accept_prob}, e.g. to 0.95) "
            "or reparameterise the model",
            RuntimeWarning,
            stacklevel=5,  # the caller of bnnpp.fit (through fit and _fit)
        )
    stats = FitStats(
        method="nuts", seed=seed, options=options.as_dict(), sample_stats=stats, compile_seconds=compile_seconds,
        run_seconds=max(wall - compile_seconds, 0.0),  # compile: XLA backend compilation only (module docstring)
        sample_seconds=sample_seconds,
        extras={"num_parameters": n_params, "divergences": divergences, "divergences_per_chain": per_chain,
                **({} if place is None else {"placement": {k: v for k, v in placed.items() if k != "per_device_batch"}})},
    )
    posterior = Posterior(samples, stats, model, x, y, sites)
    health.warn(posterior, stacklevel=5)  # chains that disagree (R-hat): one line, as every runner-driven fit
    return posterior


def _placement(options: NUTSOptions, devices, mesh, n: int) -> Placement | None:
    """The mesh the chains are split over: from ``devices``/``mesh``, or one chain per device
    for ``chain_method="parallel"``; ``None`` otherwise."""
    if devices is None and mesh is None:
        if options.chain_method != "parallel" or options.num_chains == 1:
            return None
        devices = options.num_chains
    elif options.chain_method == "sequential":
        raise ValueError('devices/mesh run the NUTS chains side by side: leave chain_method="sequential" unset')
    place = placement(devices, mesh, batch=n, n=n, num_chains=int(options.num_chains), name="nuts")
    if place is not None and place.data > 1:
        raise ValueError(f"NUTS splits its chains over devices, not the data: use mesh='chains={place.members * place.data}' or fewer devices")
    return place


def _run_in_blocks(mcmc, kernel, sites, options: NUTSOptions, seed: int, x, y, xj, yj, checkpoint: Checkpointing, resume: bool,
                   model=None):
    """Warm-up, then the draws in checkpointed blocks (see :func:`fit`).

    Returns:
        ``(draws, fields)`` grouped by chain, as ``mcmc.get_samples`` / ``get_extra_fields``.
    """
    block = int(checkpoint.every_steps or options.num_samples)
    if not resume:
        remove(os.fspath(checkpoint.directory))
    keeper = Checkpointer(checkpoint, fingerprint("nuts", seed, options.as_dict(), x, y, block, model=model))
    state, pieces, done = None, [], 0
    if resume and keeper.latest() is not None:
        # the kernel set up on the data gives the state's structure (and is then ready to sample)
        key = jax.random.PRNGKey(seed)
        if options.chain_method == "vectorized" and options.num_chains > 1:  # the kernel is set up batched over chains
            key = jax.random.split(key, options.num_chains)
        template = kernel.init(key, options.num_warmup, None, (xj, yj), {})
        rows = jax.tree_util.tree_structure(({name: 0 for name in sites}, {field: 0 for field in _FIELDS}))
        state, pieces, done, _, _ = keeper.restore(jax.tree_util.tree_structure(template), rows)
    with interruptible() as signals:
        if state is None:
            mcmc.warmup(jax.random.PRNGKey(seed), xj, yj, collect_warmup=False)
            state = mcmc.post_warmup_state
            keeper.save(options.num_warmup, 0, state, [], [])
        while done < options.num_samples and not signals:
            mcmc.num_samples = min(block, options.num_samples - done)
            mcmc.post_warmup_state = state
            mcmc.run(state.rng_key, xj, yj, extra_fields=tuple(_FIELDS))
            piece = jax.device_get((mcmc.get_samples(group_by_chain=True), mcmc.get_extra_fields(group_by_chain=True)))
            pieces = [_concat_draws(pieces[0], piece)] if pieces else [piece]
            state, done = mcmc.last_state, done + mcmc.num_samples
            keeper.save(options.num_warmup + done, done, state, pieces, [])
        if done < options.num_samples:
            raise TrainingInterrupted(signals[0], options.num_warmup + done, keeper.directory)
    return pieces[0]


def _concat_draws(a, b):
    """Two ``(draws, fields)`` pieces grouped by chain, joined along the draw axis (1)."""
    return jax.tree_util.tree_map(lambda u, v: np.concatenate([u, v], axis=1), a, b)


register(Method("nuts", NUTSOptions, fit=fit, summary="No-U-Turn Sampler (NumPyro NUTS), multi-chain; exact but for small networks"))
