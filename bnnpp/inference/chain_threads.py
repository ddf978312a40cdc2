"""Independent chains on a multi-core CPU: the chains in groups, one thread each.

XLA's CPU runtime runs one program on about one core, so a NUTS fit whose chains are
``vmap``-ped into one program leaves the other cores idle (on this project's 2-core machine the
4 moons chains ran at 94 µs a gradient step together, 54 µs as two groups of two, each in its
own thread: ``benchmarks/results/chain_threads_micro.md``; the NUTS moons defaults went from 230 to
141 s, ``benchmarks/README.md``, "NUTS's chains on both cores"). The runner therefore
compiles the chunk for ``num_chains / groups`` chains and calls it on each group of chains from
its own thread; the groups' states and rows are joined again after every chunk, so the
progress bar, the checkpoints, the NaN guard and the posterior see one fit.

Only for algorithms whose chains never meet (``RunSpec.independent_chains``: NUTS with
``chain_method="vectorized"``, whose kernel carries its own random key per chain), that emit
their draws, run unplaced (no ``devices``/``mesh``) on a CPU backend, on a machine with at
least two cores. Every chain starts where ``init`` put it, with its own key, but the draws are
not the one-program fit's number for number: the vmapped width changes float32 rounding, which
NUTS's trajectories amplify. ``tests/test_chain_threads.py`` checks a grouped fit against a
conjugate posterior, and the join itself.

``BNNPP_CHAIN_THREADS``: the most threads to use (default: the cores this process may run
on); ``1`` turns the grouping off.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["chain_groups", "group_shape", "threaded"]

ENV = "BNNPP_CHAIN_THREADS"


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


def chain_groups(algorithm, placed: bool, rs_shape) -> int:
    """How many groups (threads) the runner splits the chains into: the largest divisor of
    ``num_chains`` that is at most the threads allowed (module docstring), or 1 (no grouping)
    when the algorithm, the placement, the backend or the state does not allow it."""
    run = algorithm.run
    chains = int(run.num_chains)
    if not run.independent_chains or run.emit is None or placed or chains < 2 or jax.default_backend() != "cpu":
        return 1
    leaves = jax.tree_util.tree_leaves(rs_shape.state)
    if not leaves or any(len(leaf.shape) == 0 or leaf.shape[0] != chains for leaf in leaves):
        return 1  # a state with a leaf that is not per chain cannot be split
    most = min(_threads(), chains)
    return max(g for g in range(1, most + 1) if chains % g == 0)


def group_shape(rs_shape, groups: int):
    """The run state's abstract shape for one group: every leaf of ``rs_shape.state`` with its
    leading (chain) axis divided by ``groups``."""
    state = jax.tree_util.tree_map(lambda s: jax.ShapeDtypeStruct((s.shape[0] // groups, *s.shape[1:]), s.dtype), rs_shape.state)
    return rs_shape._replace(state=state)


def threaded(program, groups: int, pool: ThreadPoolExecutor):
    """A chunk with the signature of the runner's (``(carry, start, data) -> (carry, rows)``)
    that runs ``program`` (compiled for one group) on each group of chains in ``pool``.

    The joined carry: the groups' states concatenated on the chain axis, ``stopped`` when any
    group stopped, ``bad_unit`` the earliest group's. The joined rows ``(info, emitted,
    unit)``: ``info`` and ``emitted`` leaves concatenated on their chain axis (axis 1, after
    the chunk's unit axis), ``unit`` the first group's (the same in every group)."""

    def call(carry, start, data):
        rs, stopped, bad_unit = carry
        k = jax.tree_util.tree_leaves(rs.state)[0].shape[0] // groups
        parts = [jax.tree_util.tree_map(lambda a, i=i: a[i * k : (i + 1) * k], rs.state) for i in range(groups)]

        def one(state):
            return jax.block_until_ready(program((rs._replace(state=state), stopped, bad_unit), start, data))

        outs = list(pool.map(one, parts))
        state = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a, axis=0), *[o[0][0].state for o in outs])
        flags = np.array([bool(o[0][1]) for o in outs])
        bads = [int(o[0][2]) for o in outs if int(o[0][2]) >= 0]
        carry = (outs[0][0][0]._replace(state=state), np.bool_(flags.any()), np.int32(min(bads) if bads else -1))
        rows = [o[1] for o in outs]
        joined = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a, axis=1), *[(r[0], r[1]) for r in rows])
        return carry, (*joined, rows[0][2])

    return call
