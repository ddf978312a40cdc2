"""The contract every iterative method shares, after BlackJAX's ``SamplingAlgorithm`` /
``VIAlgorithm`` and optax's ``GradientTransformation``: an :class:`Algorithm` is a tuple of
pure functions over a typed state, and one runner (:mod:`bnnpp.inference.runner`) owns
everything around them — compiling, chunked ``lax.scan``, minibatches, the NaN guard,
progress bars, validation and building the :class:`~bnnpp.Posterior`.

A method is one file that declares its options (:mod:`bnnpp.inference.options`) and a
``build(model, x, y, options) -> Algorithm``; it registers itself with
:func:`bnnpp.inference.registry.register`. ``Algorithm`` functions must trace inside
``jit`` and ``vmap`` (the sweep vmaps them over seeds and prior hyperparameters), so they
close over nothing but the model, static sizes and options.

Why five fields. The runner reads an algorithm in three groups, so it is three functions and two
typed records: ``init``/``step``/``sample`` (what every method writes); a :class:`RunSpec`
with the facts of the run and its output description — the steps, the batch, the name, and
whether the draws come from ``sample`` (``num_samples`` per chain) or are emitted after
``emit_steps`` — all of which the runner's plan reads together (the segments of an emitting
sampler are cut from ``num_steps`` and ``emit_steps``; the draw program's shape is
``num_samples`` × ``num_chains``); and :class:`Hooks`, the stages that only some methods add
and only one stage of the runner calls each (approximation, point, extras, postfix,
member_step, finalize, keys).

``Hooks.keys`` stays for four methods: advi, map (and laplace, which runs the MAP) and sgld
split the seed's root key their own way (``split(root)`` then ``fold_in``), not as
:func:`default_keys` does (``split(root, 4)``). Their keys cannot be recovered inside
``init``/``step``/``sample`` from the ones :func:`default_keys` hands out, and the minibatch
permutation key is the runner's, so without the hook a seed would give those methods other fits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

__all__ = ["Algorithm", "Hooks", "Keys", "Outcome", "RunSpec", "default_keys"]

ArrayTree = Any


class Keys(NamedTuple):
    """The PRNG keys of one fit, all derived from its seed.

    Attributes:
        init: for ``init``.
        steps: step ``t`` gets ``jax.random.fold_in(steps, t)``.
        data: epoch ``e``'s minibatch permutation uses ``jax.random.fold_in(data, e)``.
        sample: for ``sample`` (or the first ``emit``).
    """

    init: jax.Array
    steps: jax.Array
    data: jax.Array
    sample: jax.Array


def default_keys(root: jax.Array) -> Keys:
    """``Keys(*jax.random.split(root, 4))``."""
    return Keys(*jax.random.split(root, 4))


class Outcome(NamedTuple):
    """What the runner assembled from a fit's final state, before it builds the
    :class:`~bnnpp.Posterior` (host values).

    Attributes:
        samples: ``{site: (chains, draws, *site_shape)}`` constrained draws.
        approximation: the typed approximation, or ``None``.
        sample_stats: ``{name: (chains, draws)}`` per-draw statistics.
        extras: JSON-safe facts for ``stats.extras``.
    """

    samples: dict
    approximation: Any
    sample_stats: dict
    extras: dict


class RunSpec(NamedTuple):
    """What the runner runs and what comes out of it: the facts of one fit and its output
    description.

    Facts:
        num_steps: steps to run. batch_size: rows per step (``None``: the full data).
        name: shown on the progress bar.

    Output (draws from ``sample``, or emitted steps):
        num_samples: draws ``sample`` returns (per chain).
        num_chains: chains of ``emit``, or members whose draws ``sample`` returns per member
            (1 otherwise).
        emit: ``emit(key, state) -> (draws, stats)`` for samplers whose draws are the chain's
            states: ``draws`` ``{site: (chains, *site_shape)}`` and ``stats``
            ``{name: (chains,)}``, taken after every step listed in ``emit_steps`` (a
            sorted int array) — an output channel, not a loss. The posterior's draws are
            then these outputs ``(chains, len(emit_steps), ...)`` and ``sample`` is not used.
            ``None``: the draws come from ``sample`` on the final state.
        emit_steps: the steps after which ``emit`` is called.
        kept_stats: ``kept_stats(steps) -> {name: (draws,)}``, per-draw statistics computed on
            the host from the indices of the kept steps (e.g. a schedule's step size in
            float64), added to the emitted ones for every chain.
        independent_chains: the chains never meet from step ``chains_from`` on (no shared
            adaptation; each chain's random numbers depend on the chain, not on which group it
            runs in): on a multi-core CPU the runner may then run them in groups, one thread
            each (:mod:`bnnpp.inference.chain_threads`).
        chains_from: the first step from which the chains are independent (0: all of them;
            a sampler with a warm-up shared by its chains: its first kept step).
        chain_axes: a pytree prefix of the state with ``True`` on the parts that carry the
            chain axis first and ``False`` on shared parts, which every group gets whole and
            must leave the same in every group from ``chains_from`` on (``None``: every leaf
            is per chain).
    """

    num_steps: int
    num_samples: int = 1
    batch_size: int | None = None
    name: str = ""
    num_chains: int = 1
    emit: Callable[[jax.Array, ArrayTree], tuple[dict, dict]] | None = None
    emit_steps: np.ndarray | None = None
    kept_stats: Callable[[np.ndarray], dict] | None = None
    independent_chains: bool = False
    chains_from: int = 0
    chain_axes: Any = None


class Hooks(NamedTuple):
    """The optional stages a few methods add; every field ``None`` by default.

    Attributes:
        approximation: ``approximation(state) -> Approximation`` (a pytree, e.g. a mean-field
            Gaussian's loc/scale), compiled with the other programs and run once on the final
            state.
        point: ``point(state) -> {site: unconstrained value}``, the position the runner's
            validation evaluates (variational means, the MAP).
        extras: ``extras(state) -> dict`` of JSON-safe facts from the final host state.
        postfix: ``postfix(traces) -> dict`` of progress-bar entries from a chunk's ``info``
            (host arrays); default: the mean loss.
        member_step: for ``num_chains = M`` independent members (no ``emit``) whose state
            leaves all carry a leading ``(M,)`` axis and whose ``step`` is this function
            ``vmap``-ped over members (member ``m`` gets ``fold_in(key, m)``, every member the
            same batch): ``member_step(key, member_state, batch) -> (member_state, info)``.
            When given, the runner's fast chunks step the members **in turn** — member 0
            through the whole chunk, then member 1, ... — in the same program, instead of all
            members every step: the same updates (up to float reassociation), with only one
            member's state in use at a time (what keeps it in cache on a CPU; see
            :mod:`bnnpp.inference.ensemble`). Not used on a device mesh, where the members
            are split over the ``members`` axis and stepped together; the runner records
            which in ``extras["layout"]`` (``"in_turn"`` or ``"vmap"``, for every algorithm with
            independent members).
        finalize: ``finalize(key, state, data, outcome) -> Outcome``, a stage the runner runs on
            the host after the last step (``key``: ``keys.sample``; ``state`` the final state on
            the device; ``data`` the training arrays): it may replace the draws, the
            approximation, the per-draw statistics and add facts (Laplace's curvature around
            the MAP; NUTS's divergence count). :func:`~bnnpp.inference.runner.trace_fit` does not
            run it: there ``sample`` gives the draws.
        keys: ``keys(root) -> Keys`` when a method derives its keys from the seed otherwise than
            :func:`default_keys` (module docstring: why advi, map, laplace and sgld keep one).
        periodic: ``periodic(t, state, batch) -> state``, run by the runner right after step
            ``t`` (0-based) on the same batch, for an update that is due only now and then
            (map's evidence update of the hyperparameters every ``evidence_every`` steps). The
            runner passes ``t`` from its loop index, never from the (possibly batched) state,
            so a ``lax.cond`` on ``t`` stays a branch when fits or members are ``vmap``-ped
            (the sweep, an ensemble); inside ``step`` the same cond on a counter in the state
            would become a select that runs the update at every step.
        member_periodic: ``periodic`` for one member's state, for ``member_step``'s chunks.
    """

    approximation: Callable[[ArrayTree], Any] | None = None
    point: Callable[[ArrayTree], dict] | None = None
    extras: Callable[[ArrayTree], dict] | None = None
    postfix: Callable[[NamedTuple], dict] | None = None
    member_step: Callable[[jax.Array, ArrayTree, Any], tuple[ArrayTree, NamedTuple]] | None = None
    finalize: Callable[[jax.Array, ArrayTree, Any, Outcome], Outcome] | None = None
    keys: Callable[[jax.Array], Keys] | None = None
    periodic: Callable[[jax.Array, ArrayTree, Any], ArrayTree] | None = None
    member_periodic: Callable[[jax.Array, ArrayTree, Any], ArrayTree] | None = None


class Algorithm(NamedTuple):
    """One inference method as pure functions, what to run, and its rare hooks.

    Fields (``data`` is ``(x, y)``, the full training set; a ``batch`` is ``(x_b, y_b)``):
        init: ``init(key, data) -> state``, any pytree of arrays (typically a NamedTuple).
        step: ``step(key, state, batch) -> (state, info)``; ``info`` is a NamedTuple of
            arrays whose first field ``loss`` is the step's objective (its finiteness is what
            the NaN guard checks per step); every field is kept per step as a trace.
        sample: ``sample(key, state, num_samples) -> {site: (num_samples, *site_shape)}``,
            constrained latent values drawn from the approximation in ``state`` (a point
            estimate repeats its point). With ``run.num_chains > 1`` and no ``run.emit``
            (independent members trained side by side, e.g. a deep ensemble) it returns
            ``{site: (num_chains, num_samples, *site_shape)}``.
        run: the :class:`RunSpec`: steps, batch size, name, and where the draws come from.
        hooks: the :class:`Hooks` a few methods add (default: none).
    """

    init: Callable[[jax.Array, Any], ArrayTree]
    step: Callable[[jax.Array, ArrayTree, Any], tuple[ArrayTree, NamedTuple]]
    sample: Callable[[jax.Array, ArrayTree, int], dict[str, jax.Array]]
    run: RunSpec
    hooks: Hooks = Hooks()
