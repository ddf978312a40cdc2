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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

__all__ = ["Algorithm", "Keys", "Outcome", "default_keys"]

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


class Algorithm(NamedTuple):
    """One inference method as pure functions, and the few facts the runner needs.

    Functions (``data`` is ``(x, y)``, the full training set; a ``batch`` is ``(x_b, y_b)``):
        init: ``init(key, data) -> state``, any pytree of arrays (typically a NamedTuple).
        step: ``step(key, state, batch) -> (state, info)``; ``info`` is a NamedTuple of
            arrays whose first field ``loss`` is the step's objective (its finiteness is what
            the NaN guard checks per step); every field is kept per step as a trace.
        sample: ``sample(key, state, num_samples) -> {site: (num_samples, *site_shape)}``,
            constrained latent values drawn from the approximation in ``state`` (a point
            estimate repeats its point). With ``num_chains > 1`` and no ``emit`` (independent
            members trained side by side, e.g. a deep ensemble) it returns
            ``{site: (num_chains, num_samples, *site_shape)}``.

    Optional:
        emit: ``emit(key, state) -> (draws, stats)`` for samplers whose draws are the chain's
            states: ``draws`` ``{site: (chains, *site_shape)}`` and ``stats``
            ``{name: (chains,)}``, taken after every step listed in ``emit_steps`` (a
            sorted int array) — an output channel, not a loss. The posterior's draws are
            then these outputs ``(chains, len(emit_steps), ...)`` and ``sample`` is not used.
        kept_stats: ``kept_stats(steps) -> {name: (draws,)}``, per-draw statistics computed on
            the host from the indices of the kept steps (e.g. a schedule's step size in
            float64), added to the emitted ones for every chain.
        approximation: ``approximation(state) -> Approximation`` (a pytree, e.g. a mean-field
            Gaussian's loc/scale), compiled with the other programs and run once on the final
            state.
        point: ``point(state) -> {site: unconstrained value}``, the position the runner's
            validation evaluates (variational means, the MAP).
        extras: ``extras(state) -> dict`` of JSON-safe facts from the final host state.
        keys: ``keys(root) -> Keys`` when a method derives its keys differently from
            :func:`default_keys`.
        postfix: ``postfix(traces) -> dict`` of progress-bar entries from a chunk's ``info``
            (host arrays); default: the mean loss.
        finalize: ``finalize(key, state, data, outcome) -> Outcome``, a stage the runner runs on
            the host after the last step (``key``: ``keys.sample``; ``state`` the final state on
            the device; ``data`` the training arrays): it may replace the draws, the
            approximation, the per-draw statistics and add facts (Laplace's curvature around
            the MAP; NUTS's divergence count). :func:`~bnnpp.inference.runner.trace_fit` does not
            run it: there ``sample`` gives the draws.
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

    Facts:
        num_steps: steps to run. batch_size: rows per step (``None``: the full data).
        num_samples: draws ``sample`` returns (per chain). num_chains: chains of ``emit``, or
            members whose draws ``sample`` returns per member (1 otherwise).
        name: shown on the progress bar.
    """

    init: Callable[[jax.Array, Any], ArrayTree]
    step: Callable[[jax.Array, ArrayTree, Any], tuple[ArrayTree, NamedTuple]]
    sample: Callable[[jax.Array, ArrayTree, int], dict[str, jax.Array]]
    num_steps: int
    num_samples: int = 1
    batch_size: int | None = None
    name: str = ""
    num_chains: int = 1
    emit: Callable[[jax.Array, ArrayTree], tuple[dict, dict]] | None = None
    emit_steps: np.ndarray | None = None
    kept_stats: Callable[[np.ndarray], dict] | None = None
    approximation: Callable[[ArrayTree], Any] | None = None
    point: Callable[[ArrayTree], dict] | None = None
    extras: Callable[[ArrayTree], dict] | None = None
    keys: Callable[[jax.Array], Keys] | None = None
    postfix: Callable[[NamedTuple], dict] | None = None
    member_step: Callable[[jax.Array, ArrayTree, Any], tuple[ArrayTree, NamedTuple]] | None = None
    finalize: Callable[[jax.Array, ArrayTree, Any, Outcome], Outcome] | None = None
