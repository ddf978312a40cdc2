"""Independent chains on a multi-core CPU: the chains in groups, one thread each.

XLA's CPU runtime runs one program on about one core, so a NUTS fit whose chains are
``vmap``-ped into one program leaves the other cores idle. The runner therefore
compiles the chunk for ``num_chains / groups`` chains and calls it on each group of chains from
its own thread; the groups' states and rows are joined again after every chunk, so the
progress bar, the checkpoints, the NaN guard and the posterior see one fit.

Only for algorithms whose chains never meet (``RunSpec.independent_chains``: NUTS with
``chain_method="vectorized"``, whose kernel carries its own random key per chain), or stop
meeting after a warm-up (``RunSpec.chains_from``: mclmc and chees, whose chains share the
step size, trajectory length and mass matrix tuned in the warm-up and read them only after
it; the warm-up runs as one program, the kept steps in groups, the shared parts of the state,
``RunSpec.chain_axes``, given whole to every group), that emit their draws, run unplaced (no
``devices``/``mesh``) on a CPU backend, on a machine with at least two cores. Every chain
starts where ``init`` put it, with its own key, but the draws need not be the one-program fit's
number for number: the vmapped width can change float32 rounding, which the samplers'
trajectories amplify (whether a grouping reproduces the one-program draws bit for bit depends on
the vector widths XLA picks for each program).
``tests/test_chain_threads.py`` checks grouped fits against a conjugate posterior, and the
join itself.

``BNNPP_CHAIN_THREADS``: the most threads to use (default: the cores this process may run
on); ``1`` turns the grouping off.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["MIN_GROUPED_STEPS", "chain_groups", "group_shape", "threaded"]

ENV = "BNNPP_CHAIN_THREADS"
MIN_GROUPED_STEPS = 500
"""The fewest steps after ``RunSpec.chains_from`` for which a sampler with a shared warm-up
gets its chains grouped: the grouped chunk is a second program, whose compile must be paid back
by the kept steps run on several cores. An empirical default: fewer steps rarely repay the
compile, more leave shorter runs on one core."""


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def _threads() -> int:
    given = os.environ.get(ENV)
    if given is None or given.strip() == "":
        return _cores()
    try:
        value = int(given)
    except ValueError:
        raise ValueError(f"{ENV} must be a positive integer (1 turns chain threads off), got {given!r}") from None
    if value < 1:
        raise ValueError(f"{ENV} must be a positive integer (1 turns chain threads off), got {given!r}")
    return value


def _axes(run):
    """``run.chain_axes``, a prefix of the state (``True``: the whole state is per chain)."""
    return True if run.chain_axes is None else run.chain_axes


def _per_chain(run, state) -> list:
    """The leaves of ``state`` that carry the chain axis (``RunSpec.chain_axes``)."""
    return jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda flag, sub: sub if flag else None, _axes(run), state))


def chain_groups(algorithm, placed: bool, rs_shape, platform: str | None = None) -> int:
    """How many groups (threads) the runner splits the chains into: the largest divisor of
    ``num_chains`` that is at most the threads allowed (module docstring), or 1 (no grouping)
    when the algorithm, the placement, the backend or the state does not allow it, or when a
    sampler whose chains are independent only after its warm-up keeps fewer than
    :data:`MIN_GROUPED_STEPS` steps (a second program's compile would cost more than the
    threads save). ``platform``: where the fit runs (its data's device: NUTS's ``device="auto"``
    runs a small problem on the CPU of a GPU machine); ``None``: JAX's default backend."""
    run = algorithm.run
    chains = int(run.num_chains)
    if not run.independent_chains or run.emit is None or placed or chains < 2 or (platform or jax.default_backend()) != "cpu":
        return 1
    if run.chains_from > 0 and int(run.num_steps) - int(run.chains_from) < MIN_GROUPED_STEPS:
        return 1
    leaves = _per_chain(run, rs_shape.state)
    if not leaves or any(len(leaf.shape) == 0 or leaf.shape[0] != chains for leaf in leaves):
        return 1  # a state with a leaf that is not per chain cannot be split
    most = min(_threads(), chains)
    return max(g for g in range(1, most + 1) if chains % g == 0)


def group_shape(run, rs_shape, groups: int):
    """The run state's abstract shape for one group: every per-chain leaf of ``rs_shape.state``
    (``run.chain_axes``) with its leading (chain) axis divided by ``groups``."""

    def part(flag, sub):
        if not flag:
            return sub
        return jax.tree_util.tree_map(lambda s: jax.ShapeDtypeStruct((s.shape[0] // groups, *s.shape[1:]), s.dtype), sub)

    return rs_shape._replace(state=jax.tree_util.tree_map(part, _axes(run), rs_shape.state))


def _split(run, state, groups: int) -> list:
    """``state`` as ``groups`` states: the per-chain parts cut on their chain axis, shared parts whole."""
    k = _per_chain(run, state)[0].shape[0] // groups

    def one(i):
        return jax.tree_util.tree_map(
            lambda flag, sub: jax.tree_util.tree_map(lambda a: a[i * k : (i + 1) * k], sub) if flag else sub, _axes(run), state
        )

    return [one(i) for i in range(groups)]


def _join(run, states: list):
    """The groups' states as one: per-chain parts concatenated, shared parts the first group's."""

    def part(flag, *subs):
        return jax.tree_util.tree_map(lambda *a: jnp.concatenate(a, axis=0), *subs) if flag else subs[0]

    return jax.tree_util.tree_map(part, _axes(run), *states)


def _first_bad(units: list):
    """Per unit, the earliest first-bad-step of any group (``-1`` where none is bad)."""
    a = np.stack([np.asarray(u) for u in units])
    return np.where((a >= 0).any(axis=0), np.where(a >= 0, a, np.iinfo(np.int32).max).min(axis=0), -1).astype(np.int32)


def threaded(program, groups: int, pool: ThreadPoolExecutor, run):
    """A chunk with the signature of the runner's (``(carry, start, data) -> (carry, rows)``)
    that runs ``program`` (compiled for one group) on each group of chains in ``pool``.

    The joined carry: the groups' states joined (per-chain parts concatenated on the chain
    axis, shared parts the first group's, ``run.chain_axes``), ``stopped`` when any group
    stopped, ``bad_unit`` the earliest group's. The joined rows ``(info, emitted, unit)``:
    ``info`` and ``emitted`` leaves concatenated on their chain axis (axis 1, after the
    chunk's unit axis), ``unit`` (a unit's first non-finite step) the earliest group's."""

    def call(carry, start, data):
        rs, stopped, bad_unit = carry

        def one(state):
            return jax.block_until_ready(program((rs._replace(state=state), stopped, bad_unit), start, data))

        outs = list(pool.map(one, _split(run, rs.state, groups)))
        state = _join(run, [o[0][0].state for o in outs])
        flags = np.array([bool(o[0][1]) for o in outs])
        bads = [int(o[0][2]) for o in outs if int(o[0][2]) >= 0]
        carry = (outs[0][0][0]._replace(state=state), np.bool_(flags.any()), np.int32(min(bads) if bads else -1))
        rows = [o[1] for o in outs]
        joined = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a, axis=1), *[(r[0], r[1]) for r in rows])
        return carry, (*joined, _first_bad([r[2] for r in rows]))

    return call
