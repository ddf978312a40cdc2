"""``nuts``: the No-U-Turn Sampler (Hoffman & Gelman 2014) — the exact reference.

NumPyro's functional NUTS kernel (``numpyro.infer.hmc.hmc(potential_fn_gen, algo="NUTS")``:
``init_kernel`` / ``sample_kernel``, with its warm-up adaptation) as an
:class:`~bnnpp.inference.algorithm.Algorithm` that the runner drives like every other method:
``num_warmup`` adaptation iterations (step size by dual averaging towards
``target_accept_prob``, a diagonal or ``dense_mass`` mass matrix in NumPyro's windows) followed
by ``num_samples`` kept draws in each of ``num_chains`` chains, all chains one state with a
leading chain axis. Every chain starts uniformly in (−``init_radius``, ``init_radius``) on the
unconstrained space, or at the values given as ``bnnpp.fit``'s ``init``. The runner gives it
compiled chunks, the progress bar, checkpoints and resume, the NaN guard, the device mesh and
the vmapped sweep.

Chains: ``chain_method="vectorized"`` (default) steps all chains together (``vmap``: each
iteration lasts as long as the chain with the deepest tree); on a CPU with several cores the
runner splits them into groups, one thread and core each (:mod:`bnnpp.inference.chain_threads`:
the same starts, not the same numbers); ``"sequential"`` steps them one
after another inside each iteration (``lax.map``); ``"parallel"`` splits the chain axis over
one device per chain (the runner's ``members`` mesh axis), which needs
``num_chains ≤ jax.device_count()`` — on a CPU set
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before jax is imported.
``bnnpp.fit(..., method="nuts", devices=N)`` or ``mesh="chains=N"`` does the same on N devices
(``num_chains`` divisible by N); NUTS has no data axis.

Sample statistics (``(chain, draw)`` arrays, ArviZ names, shown in ``to_arviz().sample_stats``):
``diverging``, ``acceptance_rate``, ``step_size``, ``tree_depth``, ``n_steps`` (leapfrog
steps), ``energy`` (Hamiltonian) and ``lp`` (the log joint density on the unconstrained space,
−potential energy). Divergences are counted over the kept draws only; any divergence emits a
``RuntimeWarning``.

Device: ``device="auto"`` (default) runs a small NUTS problem on the CPU even when JAX's default
device is a GPU: NUTS takes one small kernel launch after another inside its ``while_loop``, so
for a tiny network the launches, not the arithmetic, set the pace. "Small" is
``parameters × training rows ≤`` :data:`SMALL_NUTS_WORK` (an empirical crossover of one CPU
core against one GPU's launch latency). ``device="cpu"`` always uses the CPU, ``"default"`` JAX's default
device; with ``devices``/``mesh`` the chains go where the mesh says. ``extras["device"]``
records the platform.

NUTS costs a full-data gradient per leapfrog step and up to ``2**max_tree_depth − 1`` steps per
draw, so it is the gold standard for small networks only: above :data:`PARAMETER_WARNING`
parameters a ``UserWarning`` points to the methods that scale (``advi``, ``bbb``, ``sgld``).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.extend.core import Var
from numpyro import handlers
from numpyro.infer.hmc import hmc
from numpyro.infer.reparam import LocScaleReparam
from numpyro.infer.util import constrain_fn, potential_energy

from bnnpp.inference.algorithm import Algorithm, Hooks, Outcome, RunSpec
from bnnpp.inference.checks import require_blackjax
from bnnpp.inference.joint import init_uniform
from bnnpp.inference.model_info import ModelInfo
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
from bnnpp.inference.pathfinder import start_options, starts
from bnnpp.inference.registry import Method, register
from bnnpp.inference.sharding import mesh_axes
from bnnpp.inference.start import apply_start
from bnnpp.introspection import BATCH_WRAPPERS, is_tracer, latent_sites, num_parameters, probe_rows, shape_rows, unwrap

__all__ = ["DEFAULTS", "NUTSInfo", "NUTSOptions", "build", "device_for", "tree_depth"]

CHAIN_METHODS = ("vectorized", "parallel", "sequential")
MAX_TREE_DEPTH = 15
PARAMETER_WARNING = 5_000
"""Above this many latent parameters, :func:`build` warns that NUTS will be slow."""
DEVICES = ("auto", "cpu", "default")
SMALL_NUTS_WORK = 1_000_000
"""``device="auto"`` runs NUTS on the CPU when latent parameters × training rows is at most
this (module docstring)."""


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
    """Options of ``method="nuts"`` (see :func:`build`)."""

    num_chains: int = option(4, "independent chains", check=positive_int)
    num_warmup: int = option(1000, "NUTS warm-up (adaptation) iterations per chain", check=non_negative_int)
    num_samples: int = option(1000, "posterior draws kept (per chain for MCMC)", check=positive_int)
    num_steps: int | None = option(
        None,
        "NUTS iterations per chain, replacing num_warmup and num_samples: half warm-up, half kept",
        check=optional(positive_int),
        type=int,
    )
    target_accept_prob: float = option(0.8, "NUTS target acceptance probability", check=_accept_prob)
    max_tree_depth: int = option(10, "NUTS maximum tree depth", check=_tree_depth)
    chain_method: str = option("vectorized", "how NUTS runs its chains", choices=CHAIN_METHODS)
    init_radius: float = option(2.0, "start values uniform in (-r, r) on the unconstrained space", check=positive_float)
    init_loc: str
    pathfinder_paths: int
    pathfinder_maxiter: int
    init_loc, pathfinder_paths, pathfinder_maxiter = start_options()  # as the many-chain samplers'
    dense_mass: bool = option(False, "NUTS: adapt a dense mass matrix", check=boolean)
    noncentered: bool = option(
        False,
        "sample the weights whose scale is learned (a hierarchical prior) as loc + scale * z (non-centred; off: the weights themselves)",
        check=boolean,
    )
    device: str = option(
        "auto",
        "NUTS: where to run (auto: the CPU when parameters x rows is small, else JAX's default device; cpu; default)",
        choices=DEVICES,
    )
    temperature: float = temperature_option()

    exclusive = (("num_steps", "num_warmup"), ("num_steps", "num_samples"))
    refused: ClassVar[dict[str, str]] = {
        "epochs": "nuts is not trained in epochs (every iteration uses all the data): pass num_steps "
        "(= num_warmup + num_samples per chain, split in half) or num_warmup and num_samples"
    }

    def resolve(self, n: int) -> NUTSOptions:
        """With ``num_steps`` T: ``num_warmup = T // 2`` and ``num_samples = T − T // 2``."""
        if self.num_steps is None:
            return self
        return dataclasses.replace(self, num_warmup=self.num_steps // 2, num_samples=self.num_steps - self.num_steps // 2)

    def check(self) -> None:
        if self.init_loc == "pathfinder":
            require_blackjax("nuts with init_loc='pathfinder'")
        if self.chain_method == "parallel":
            devices = jax.device_count()
            if self.num_chains > devices:
                raise ValueError(
                    f'chain_method="parallel" needs one device per chain: num_chains={self.num_chains} but jax sees '
                    f'{devices} device(s); use chain_method="vectorized", or set '
                    f"XLA_FLAGS=--xla_force_host_platform_device_count={self.num_chains} before importing jax"
                )

    def placement(self, info, devices, mesh):
        """``chain_method="parallel"`` asks for one device per chain; ``device`` picks the CPU for
        a small problem (:func:`device_for`)."""
        placed = devices is not None or mesh is not None
        if placed and self.chain_method == "sequential":
            raise ValueError('devices/mesh run the NUTS chains side by side: leave chain_method="sequential" unset')
        if not placed and self.chain_method == "parallel" and self.num_chains > 1:
            devices, placed = self.num_chains, True
        axes = mesh_axes(devices, mesh, int(self.num_chains)) if placed else None
        if axes is not None and axes.get("data", 1) > 1:
            total = axes["data"] * axes.get("members", 1)
            raise ValueError(f"NUTS splits its chains over devices, not the data: use mesh='chains={total}' or fewer devices")
        return devices, mesh, device_for(self.device, num_parameters(info.sites), int(info.x.shape[0]), placed)


DEFAULTS = NUTSOptions.defaults()
"""Every option's default, as a dict (option name → value)."""


def noncentered(site) -> LocScaleReparam | None:
    """NumPyro reparam config: decentre every latent site whose prior is a location-scale
    family on the reals (Normal, Laplace, Cauchy, Student-t): w = loc + scale · z with z drawn
    from the standard member of the family (Papaspiliopoulos, Roberts & Sköld 2007). The
    geometry of z no longer depends on a hierarchical layer scale, which removes the funnel
    between a layer's weights and its scale when the data say little about the weights.

    It is off by default because with informative data the centred form is the better one
    (the classic trade-off; Papaspiliopoulos et al. 2007, Betancourt & Girolami 2015); on a
    network's weights neither form removes the divergences that come from the symmetries of
    hidden units. Try it when a layer's scale is weakly identified (little data, wide layers)."""
    if site["type"] != "sample" or site.get("is_observed") or site["name"].endswith("_decentered"):
        return None  # (the standardised site LocScaleReparam creates is left alone)
    base = unwrap(site["fn"], BATCH_WRAPPERS)
    if type(base) in (dist.Normal, dist.Laplace, dist.Cauchy):
        return LocScaleReparam(0)
    if type(base) is dist.StudentT:
        return LocScaleReparam(0, shape_params=("df",))
    return None


def learned_location_scale(model, x, y) -> frozenset[str]:
    """The latent sites :func:`noncentered` would decentre whose location or scale is learned,
    i.e. depends on other latent sites (the weights under a hierarchical prior such as
    ``normal(inverse_gamma(1, 1))``): found from the program that maps the latent values to
    each site's ``loc`` and ``scale`` (``jax.make_jaxpr``, nothing compiled or run), so it works
    inside ``jit``/``vmap`` too. A weight with a fixed prior scale is left out: decentring it is
    only a change of units."""
    # numpy rows, never tracers: the data's own rows (a model may use x as a scale), as many as give the latents
    # their shapes; zeros of that shape inside a jitted caller
    k = shape_rows(model, x, y)
    concrete = not any(is_tracer(a) for a in (x, y))
    xz, yz = (np.asarray(a[:k]) if concrete else np.zeros((k, *a.shape[1:]), np.dtype(a.dtype)) for a in (x, y))
    latent = {name: np.ones(site.shape, np.float32) for name, site in latent_sites(model, xz, yz).items()}
    names: list[str] = []

    def params(values):
        trace = handlers.trace(handlers.substitute(handlers.seed(model, 0), data=values)).get_trace(xz, yz)
        out = []
        for name, site in trace.items():
            if name in values and noncentered(site) is not None:
                fn = unwrap(site["fn"], BATCH_WRAPPERS)
                names.append(name)
                out.append((fn.loc, fn.scale))
        return out

    jaxpr = jax.make_jaxpr(params)(latent).jaxpr
    moved = set(jaxpr.invars)  # the variables that change with the latent values
    for eqn in jaxpr.eqns:
        if any(isinstance(v, Var) and v in moved for v in eqn.invars):
            moved.update(eqn.outvars)
    outs = [isinstance(v, Var) and v in moved for v in jaxpr.outvars]  # (loc, scale) per name, in order
    return frozenset(n for i, n in enumerate(names) if outs[2 * i] or outs[2 * i + 1])


def noncentered_model(model, x, y):
    """``model`` with its learned location-scale sites (:func:`learned_location_scale`)
    decentred (:func:`noncentered`), and whether any was: ``(model, decentred)``."""
    names = learned_location_scale(model, x, y)
    if not names:
        return model, False
    return handlers.reparam(model, config=lambda site: noncentered(site) if site["name"] in names else None), True


def decentred_start(model, sampled, z: dict, start: dict, x, y) -> dict:
    """A start of the decentred model ``sampled`` (:func:`noncentered_model`) from ``start``
    (site → unconstrained value, the sites of ``model``): the other sites as given (else as in
    ``z``), and a given decentred weight ``w`` as ``z = (w − loc) / scale`` under its prior at
    those values. Returns the unconstrained position of ``sampled``'s sites."""
    suffix = "_decentered"
    z = apply_start(z, {k: v for k, v in start.items() if k + suffix not in z})
    weights = {k: v for k, v in start.items() if k + suffix in z}
    if not weights:
        return z
    values = constrain_fn(sampled, (x, y), {}, z)  # constrained values of the sites that are not decentred
    prior = handlers.trace(handlers.substitute(handlers.seed(model, 0), data={**values, **weights})).get_trace(x, y)
    out = dict(z)
    for name, w in weights.items():
        fn = unwrap(prior[name]["fn"], BATCH_WRAPPERS)
        out[name + suffix] = jnp.asarray((w - fn.loc) / fn.scale, z[name + suffix].dtype)
    return out


def tree_depth(num_steps: np.ndarray) -> np.ndarray:
    """NUTS tree depth from the number of leapfrog steps: a tree of depth d takes at most
    2**d − 1 steps and more than 2**(d−1) − 1, so d = floor(log2(steps)) + 1."""
    steps = np.maximum(np.asarray(num_steps, dtype=np.int64), 1)
    return (np.floor(np.log2(steps)) + 1).astype(np.int64)


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


class NUTSInfo(NamedTuple):
    """loss: the potential energy (minus the log joint) of every chain after the step, ``(chains,)``."""

    loss: jax.Array


def build(model, x, y, options: NUTSOptions, start: dict | None = None, info: ModelInfo | None = None) -> Algorithm:
    """NUTS as an :class:`Algorithm` that emits every post-warm-up state: the posterior's draws
    are ``(num_chains, num_samples, *site_shape)`` of the model's latent sites (deterministic
    sites such as ``logits`` are left out) and its ``sample_stats`` the per-draw statistics of
    the module docstring; ``finalize`` adds ``num_parameters``, ``divergences``,
    ``divergences_per_chain`` and ``device`` to ``stats.extras``.

    ``start``: site → unconstrained start value for every chain (the other sites start uniform
    in ±``init_radius``). ``info``: the model's :class:`ModelInfo` (traced here when not given).

    Warns:
        UserWarning: above :data:`PARAMETER_WARNING` latent parameters (before anything runs).
    """
    sites = (info or ModelInfo.of(model, x, y)).sites
    n_params = num_parameters(sites)
    _warn_if_large(n_params)
    sampled, decentred = noncentered_model(model, x, y) if options.noncentered else (model, False)
    shapes = {name: s.shape for name, s in (latent_sites(sampled, x, y) if decentred else sites).items()}
    chains, warmup, draws = int(options.num_chains), int(options.num_warmup), int(options.num_samples)
    dense = [tuple(sorted(shapes))] if options.dense_mass else []
    init_kernel, sample_kernel = hmc(potential_fn_gen=lambda *data: lambda z: potential_energy(sampled, data, {}, z), algo="NUTS")
    x1, y1 = probe_rows(model, x, y)  # the rows that give the latents their shapes run the model

    def init(key, data):
        def one(k, found=None):
            k_hmc, k_start = jax.random.split(k)
            z = init_uniform(shapes, k_start, float(options.init_radius)) if found is None else found
            z = decentred_start(model, sampled, z, start, x1, y1) if decentred and start else apply_start(z, start)
            return init_kernel(
                z,
                num_warmup=warmup,
                dense_mass=dense,
                target_accept_prob=float(options.target_accept_prob),
                max_tree_depth=int(options.max_tree_depth),
                model_args=data,
                rng_key=k_hmc,
            )

        if options.init_loc == "pathfinder":  # draws of a few paths' Gaussians (Zhang et al. 2022, §4: MCMC starts)
            found = starts(
                lambda u: -potential_energy(sampled, data, {}, u),
                jax.random.fold_in(key, 1),
                shapes,
                chains,
                num_paths=min(int(options.pathfinder_paths), chains),
                radius=float(options.init_radius),
                maxiter=int(options.pathfinder_maxiter),
            )
            state = jax.vmap(one)(jax.random.split(key, chains), found)
        else:
            state = jax.vmap(one)(jax.random.split(key, chains))
        return jax.tree_util.tree_map(lambda a: jnp.asarray(a, a.dtype), state)  # strong dtypes, as sample_kernel returns

    def step(key, state, batch):  # the kernel carries its own key
        kernel = lambda s: sample_kernel(s, model_args=batch)  # noqa: E731
        new = jax.lax.map(kernel, state) if options.chain_method == "sequential" else jax.vmap(kernel)(state)
        new = jax.tree_util.tree_map(lambda a, b: jnp.asarray(a, b.dtype), new, state)
        return new, NUTSInfo(new.potential_energy)

    def values(z):
        out = constrain_fn(sampled, (x1, y1), {}, z, return_deterministic=decentred)
        return {k: out[k] for k in sites}

    def emit(key, state):
        stats = {
            "diverging": state.diverging,
            "acceptance_rate": state.accept_prob,
            "step_size": state.adapt_state.step_size,
            "n_steps": state.num_steps,
            "tree_depth": _depth(state.num_steps),
            "energy": state.energy,
            "lp": -state.potential_energy,
        }
        return jax.vmap(values)(state.z), stats

    return Algorithm(
        init,
        step,
        lambda key, state, num: jax.vmap(values)(state.z),
        RunSpec(
            num_steps=warmup + draws,
            name="nuts",
            num_chains=chains,
            emit=emit,
            emit_steps=np.arange(warmup, warmup + draws),
            # not with a dense mass matrix: its adaptation's batched LAPACK calls (Cholesky) from two
            # programs at once would share XLA's CPU thread pool, where batched LAPACK calls have
            # can wait on each other for ever
            independent_chains=options.chain_method == "vectorized" and not options.dense_mass,
        ),
        Hooks(finalize=functools.partial(_finalize, float(options.target_accept_prob), n_params)),
    )


def _warn_if_large(n_params: int) -> None:
    if n_params > PARAMETER_WARNING:
        warnings.warn(
            f"NUTS on {n_params:,} parameters (above {PARAMETER_WARNING:,}) will be slow: every leapfrog step "
            "takes a full-data gradient and a draw takes up to 2**max_tree_depth of them; for networks this "
            "size use a method that scales: method='advi', 'bbb' or 'sgld'",
            UserWarning,
            stacklevel=6,  # the caller of bnnpp.fit
        )


def _finalize(target_accept_prob: float, n_params: int, key, state, data, outcome: Outcome) -> Outcome:
    """The runner's last stage: warn about divergences; add ``num_parameters``, ``divergences``,
    ``divergences_per_chain`` and ``device`` to the extras."""
    per_chain = [int(v) for v in np.asarray(outcome.sample_stats["diverging"]).sum(axis=1)]
    if sum(per_chain):
        warnings.warn(
            f"{sum(per_chain)} of {outcome.sample_stats['diverging'].size} NUTS draws diverged (per chain: {per_chain}); "
            f"the posterior may be biased: raise target_accept_prob (now {target_accept_prob}, e.g. to 0.95) "
            "or reparameterise the model",
            RuntimeWarning,
            stacklevel=6,  # the caller of bnnpp.fit
        )
    platform = next(iter(jax.tree_util.tree_leaves(state)[0].devices())).platform
    extras = {
        **outcome.extras,
        "num_parameters": n_params,
        "divergences": sum(per_chain),
        "divergences_per_chain": per_chain,
        "device": platform,
    }
    return outcome._replace(extras=extras)


def _depth(num_steps: jax.Array) -> jax.Array:
    """:func:`tree_depth` on the device: the bit length of the leapfrog step count."""
    steps = jnp.maximum(num_steps, 1).astype(jnp.int32)
    return (32 - jax.lax.clz(steps)).astype(jnp.int32)


register(
    Method(
        "nuts",
        NUTSOptions,
        build=build,
        summary="No-U-Turn Sampler (NumPyro NUTS), multi-chain; exact but for small networks",
        smoke={"num_chains": 2, "num_warmup": 20, "num_samples": 10},
    )
)
