"""The runner's unit of work as pure functions: the plan of a fit, one step (or one segment of
steps for samplers that emit draws) on its minibatch, the compiled chunk of units in a
``lax.scan`` with its NaN guard, and the whole fit as one traceable function
(:func:`trace_fit`, :func:`guarded_trace_fit`: what :func:`bnnpp.sweep.sweep` ``vmap``s).
:mod:`bnnpp.inference.runner` drives them (its module docstring describes the guard).

* **minibatches on the device**: with ``batch_size = B < N`` the rows are reshuffled at the
  start of every epoch of ``M = N // B`` steps (``jax.random.permutation`` with the key
  ``fold_in(keys.data, epoch)``) and step ``t`` takes the ``t mod M``-th block of ``B``
  rows; the ``N mod B`` rows left over are skipped for that epoch. Each batch is a uniformly
  random subset drawn without replacement. In a multi-process fit with a data axis of D > 1
  devices, each device instead draws its ``B/D`` rows from its own ``N/D`` rows (a
  permutation per device and epoch, in ``shard_map``): no step gathers rows across
  processes, and the minibatch stream differs from the one-process fit's
  (:mod:`bnnpp.inference.sharding`).
* **an output channel** for samplers (``RunSpec.emit``): the steps are grouped into
  segments that end at the kept steps, each segment a ``fori_loop`` of steps; a segment's
  row carries the emitted draws, which leave the device once per chunk as scan outputs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bnnpp.inference.algorithm import Algorithm, Keys, default_keys

__all__ = ["PIECES", "RunState", "all_finite", "compile_all", "guarded_trace_fit", "segments", "trace_fit"]

PIECES = 100
"""Runs of steps between kept draws are cut so that they take at most about this many segments."""


class RunState(NamedTuple):
    """The runner's loop state around the algorithm's.

    Attributes:
        state: the algorithm's state.
        t: steps done, int32 scalar.
        perm: this epoch's row permutation ``(N,)`` int32 (``(0,)`` without minibatches).
    """

    state: Any
    t: jax.Array
    perm: jax.Array


def all_finite(tree) -> jax.Array:
    """True when every floating-point leaf of ``tree`` is finite (a scalar bool array)."""
    leaves = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(leaf.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


def segments(num_steps: int, emit_steps: np.ndarray, pieces: int = PIECES) -> tuple[np.ndarray, np.ndarray]:
    """Segment ends (exclusive) ``(num_segments,)`` and whether each ends at an emitted step.

    Every emitted step ends a segment; a longer run of steps between them is cut into
    pieces of at most ``max(gap, ceil(num_steps / pieces))`` steps, where ``gap`` is the
    smallest distance between emitted steps, so that the bar moves during burn-in.
    """
    emit_steps = np.asarray(emit_steps, np.int64)
    gap = int(np.min(np.diff(emit_steps))) if emit_steps.size > 1 else 1
    piece = max(gap, math.ceil(num_steps / pieces))
    ends: list[int] = []
    keep: list[bool] = []
    start = 0
    for end in emit_steps + 1:
        while end - start > piece:
            start += piece
            ends.append(start)
            keep.append(False)
        ends.append(int(end))
        keep.append(True)
        start = int(end)
    return np.asarray(ends, np.int64), np.asarray(keep, bool)


# --------------------------------------------------------------------------------------
# One unit of work (a step, or a segment of steps for emitting samplers), as pure functions
# --------------------------------------------------------------------------------------


class _Plan(NamedTuple):
    algorithm: Algorithm
    keys: Keys
    n: int
    batch: int
    num_batches: int
    ends: np.ndarray | None  # segment ends (emitting algorithms), else None
    keep: np.ndarray | None
    batch_sharding: Any = None  # with a data axis: every batch is split over it
    local: Any = None  # a Mesh: each device draws its part of every minibatch from its own rows


def _keys_of(algorithm: Algorithm, root: jax.Array) -> Keys:
    return (algorithm.hooks.keys or default_keys)(root)


@partial(jax.jit, static_argnums=0)
def _seed_keys(derive: Callable, seed) -> Keys:
    """A seed's keys in one small program, compiled once per derivation (eager key arithmetic
    would compile one program per operation)."""
    return derive(jax.random.PRNGKey(seed))


def _plan(algorithm: Algorithm, keys: Keys, n: int, batch_sharding=None, local=None) -> _Plan:
    batch = algorithm.run.batch_size or n
    ends = keep = None
    if algorithm.run.emit is not None:
        ends, keep = segments(algorithm.run.num_steps, algorithm.run.emit_steps)
    return _Plan(algorithm, keys, n, batch, n // batch, ends, keep, batch_sharding, local if batch < n else None)


def _num_units(plan: _Plan) -> int:
    return plan.algorithm.run.num_steps if plan.ends is None else len(plan.ends)


def _init(plan: _Plan, data) -> RunState:
    perm = jnp.arange(plan.n, dtype=jnp.int32) if plan.batch < plan.n else jnp.zeros((0,), jnp.int32)
    return RunState(plan.algorithm.init(plan.keys.init, data), jnp.zeros((), jnp.int32), perm)


def _one_step(plan: _Plan, rs: RunState, data, index=None):
    """One step of the algorithm on this step's minibatch, then its ``periodic`` hook.
    ``index``: the step's number from the caller's loop (unbatched under ``vmap``, unlike
    ``rs.t``), given where the loop counts steps."""
    batch, perm = _minibatch(plan, rs.t, rs.perm, data)
    state, info = plan.algorithm.step(jax.random.fold_in(plan.keys.steps, rs.t), rs.state, batch)
    if plan.algorithm.hooks.periodic is not None:
        state = plan.algorithm.hooks.periodic(rs.t if index is None else index, state, batch)
    return RunState(state, rs.t + 1, perm), info


def _minibatch(plan: _Plan, t, perm, data):
    """Step ``t``'s batch and the epoch's permutation: ``(batch, perm)``."""
    if plan.batch == plan.n:
        batch = data
    elif plan.local is not None:  # several processes: every device samples from its own rows
        batch, perm = _local_minibatch(plan, t, perm, data)
    else:  # reshuffle on the device at the start of each epoch, then gather the minibatch
        i = t % plan.num_batches
        perm = jax.lax.cond(
            i == 0,
            lambda: jax.random.permutation(jax.random.fold_in(plan.keys.data, t // plan.num_batches), plan.n).astype(jnp.int32),
            lambda: perm,
        )
        idx = jax.lax.dynamic_slice(perm, (i * plan.batch,), (plan.batch,))
        batch = jax.tree_util.tree_map(lambda a: a[idx], data)
    if plan.batch_sharding is not None:  # data parallel: the compiler splits the step over the batch
        batch = jax.tree_util.tree_map(lambda a: jax.lax.with_sharding_constraint(a, plan.batch_sharding), batch)
    return batch, perm


def varying_over(x, axis: str):
    """``x`` typed as varying over the mesh axis ``axis`` inside ``shard_map``: ``jax.lax.pcast``
    unless its type already says so (newer JAX propagates it, and refuses a second cast)."""
    aval = jax.typeof(x)
    mat = getattr(aval, "mat", None)  # jax >= 0.12.1 keeps the varying axes in aval.mat.varying, before in aval.vma
    varying = mat.varying if mat is not None else getattr(aval, "vma", frozenset())
    return x if axis in varying else jax.lax.pcast(x, (axis,), to="varying")


def _local_minibatch(plan: _Plan, t, perm, data):
    """This step's minibatch when each of the D devices of the data axis draws its ``B/D``
    rows from its own block of ``N/D`` rows: a permutation of the block at the start of each
    epoch (key ``fold_in(fold_in(keys.data, epoch), device)``), then its ``t mod M``-th slice
    (``M = N // B`` steps an epoch, as with one permutation). Returns ``(batch, perm)``, both
    split over ``data`` (``perm`` holds every block's local permutation, ``(N,)``)."""
    d = plan.local.shape["data"]
    b, block = plan.batch // d, plan.n // d
    leaves, tree = jax.tree_util.tree_flatten(data)

    def per_device(t, device, perm, *arrays):  # device: (1,) this device's index on the data axis
        i = t % plan.num_batches
        key = jax.random.fold_in(jax.random.fold_in(plan.keys.data, t // plan.num_batches), device[0])
        # the permutation depends on `device`; where jax.random does not type it as varying over
        # `data` (before jax 0.12.1), pcast says so, to match the carried per-device permutation
        fresh = lambda: varying_over(jax.random.permutation(key, block).astype(jnp.int32), "data")
        perm = jax.lax.cond(i == 0, fresh, lambda: perm)
        idx = jax.lax.dynamic_slice(perm, (i * b,), (b,))
        return (perm, *(a[idx] for a in arrays))

    split = jax.sharding.PartitionSpec("data")
    out = jax.shard_map(
        per_device,
        mesh=plan.local,
        in_specs=(jax.sharding.PartitionSpec(), split, split, *[split] * len(leaves)),
        out_specs=(split,) * (1 + len(leaves)),
    )(t, jnp.arange(d, dtype=jnp.int32), perm, *leaves)
    return jax.tree_util.tree_unflatten(tree, list(out[1:])), out[0]


def _unit(plan: _Plan, rs: RunState, index, data, info_shape=None):
    """Unit ``index``: one step (``row = (info, None, -1)``), or for emitting algorithms the
    segment of steps up to ``ends[index]`` (``row = (last info, emitted, first bad step or
    -1)``). Returns ``(rs, row, ok)``; ``ok`` is False when a loss or an output is not finite.
    ``info_shape``: the abstract info of one step (``_row_shape(...)[0]``) where the caller has
    it, so that the step is not traced once more for its shape."""
    if plan.ends is None:  # a unit is a step: its index is the step's
        rs, info = _one_step(plan, rs, data, index)
        row = (info, None, jnp.int32(-1))
        return rs, row, all_finite(info)
    if info_shape is None:
        info_shape = _info_shape(plan, rs, data)
    info0 = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), info_shape)

    def body(_, carry):
        r, _info, bad = carry
        r_new, info = _one_step(plan, r, data)
        bad = jnp.where((bad < 0) & ~all_finite(info.loss), r.t, bad)
        return r_new, info, bad

    end = jnp.asarray(plan.ends, jnp.int32)[index]
    rs, info, bad = jax.lax.fori_loop(rs.t, end, body, (rs, info0, jnp.int32(-1)))
    emitted = plan.algorithm.run.emit(jax.random.fold_in(plan.keys.sample, index), rs.state)
    return rs, (info, emitted, bad), all_finite((info, emitted)) & (bad < 0)


def _blank(shapes):
    """The row of a unit that did not run: NaN (-1 for integers) in every leaf of ``shapes``."""
    return jax.tree_util.tree_map(lambda s: jnp.full(s.shape, jnp.nan if jnp.issubdtype(s.dtype, jnp.inexact) else -1, s.dtype), shapes)


def _lower_chunk(plan: _Plan, rs_shape, chunk_size: int, data, guard: str, shardings=None):
    """Lower (not compile) one chunk of ``chunk_size`` units in a ``lax.scan``:
    ``((rs, stopped, bad_unit), start, data) -> (carry, rows)``. ``shardings``: ``(rs, data,
    replicated)`` layouts on a mesh (the carry keeps its layout, the rows come back replicated).

    ``guard="loss"``: a unit is checked by its outputs only and the whole state once at the
    chunk's end (a failed chunk's state is unusable: :func:`_drive` re-runs it with
    ``guard="step"``). ``guard="step"``: the whole new state is checked after every unit and
    a failing unit is not applied, so the carry holds the last finite state.
    """
    num_units = _num_units(plan)
    rs_shape, data_shape = _abstract(rs_shape), _abstract(data)
    row_shape = _row_shape(plan, rs_shape, data_shape)

    def chunk(carry, start, data):
        if guard == "loss" and shardings is None and plan.ends is None and plan.algorithm.hooks.member_step is not None:
            carry, rows = _members_in_turn(plan, carry, start, data, chunk_size, num_units, row_shape)
        else:
            carry, rows = _scan_units(plan, carry, start, data, chunk_size, num_units, row_shape, guard)
        if guard == "loss":  # one whole-state check per chunk instead of one per step
            rs, stopped, bad_unit = carry
            broken = ~all_finite(rs.state)
            carry = (rs, jnp.logical_or(stopped, broken), jnp.where(broken & (bad_unit < 0), start, bad_unit))
        return carry, rows

    carry = (rs_shape, jax.ShapeDtypeStruct((), jnp.bool_), jax.ShapeDtypeStruct((), jnp.int32))
    if shardings is None:
        return jax.jit(chunk).lower(carry, jax.ShapeDtypeStruct((), jnp.int32), data_shape)
    rs_sh, data_sh, rep = shardings
    carry_sh = (rs_sh, rep, rep)
    return jax.jit(chunk, in_shardings=(carry_sh, rep, data_sh), out_shardings=(carry_sh, rep)).lower(
        carry, jax.ShapeDtypeStruct((), jnp.int32), data_shape
    )


def _abstract(tree):
    """Each array leaf of ``tree`` (concrete, traced or abstract) as a ``ShapeDtypeStruct``."""
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), tree)


def _info_shape(plan: _Plan, rs, data):
    """The abstract info of one step from run state ``rs`` on ``data`` (traces the step once)."""
    return jax.eval_shape(lambda r, d: _one_step(plan, r, d)[1], _abstract(rs), _abstract(data))


def _row_shape(plan: _Plan, rs, data):
    """The abstract rows (info, emitted, …) one unit returns for run state ``rs`` and ``data``;
    compiles nothing. An emitting algorithm's row is built from one trace of its step and one of
    ``emit`` (tracing the whole unit would trace the step twice: a NUTS step takes seconds)."""
    if plan.ends is None:
        return jax.eval_shape(lambda r, d: _unit(plan, r, jnp.int32(0), d)[1], _abstract(rs), _abstract(data))
    info = jax.tree_util.tree_map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype), _info_shape(plan, rs, data))
    emitted = jax.eval_shape(lambda s: plan.algorithm.run.emit(jax.random.fold_in(plan.keys.sample, 0), s), _abstract(rs).state)
    return info, emitted, jax.ShapeDtypeStruct((), jnp.int32)


def _scan_units(plan: _Plan, carry, start, data, chunk_size: int, num_units: int, row_shape, guard: str, select_stop: bool = False):
    """``chunk_size`` units from ``start`` in a ``lax.scan``, each checked as ``guard`` says
    (:func:`_lower_chunk`): ``(carry, rows)``.

    ``select_stop``: a stopped fit still computes each unit and discards it (a select) instead of
    branching around it. For traces that are ``vmap``-ped over fits (the sweep): there ``stopped``
    is batched, and a ``lax.cond`` on it becomes a select whose branches see every operand
    batched — the step index too, so a ``periodic`` hook's cond on it would run at every step."""

    def body(c, i):
        rs, stopped, bad_unit = c
        index = start + i

        def do(r):
            new, row, ok = _unit(plan, r, index, data, row_shape[0])
            return new, row, (ok & all_finite(new.state)) if guard == "step" else ok

        def skip(r):
            return r, _blank(row_shape), jnp.array(True)

        if select_stop:
            new, row, ok = jax.lax.cond(index < num_units, do, skip, rs)
            keep = lambda a, b: jnp.where(stopped, b, a)
            new, row = jax.tree_util.tree_map(keep, new, rs), jax.tree_util.tree_map(keep, row, _blank(row_shape))
            active = ~stopped & (index < num_units)
        else:
            active = jnp.logical_and(~stopped, index < num_units)
            new, row, ok = jax.lax.cond(active, do, skip, rs)
        bad = jnp.logical_and(active, ~ok)
        if guard == "step":
            new = jax.tree_util.tree_map(lambda a, b: jnp.where(bad, b, a), new, rs)
        return (new, jnp.logical_or(stopped, bad), jnp.where(bad, index, bad_unit)), row

    return jax.lax.scan(body, carry, jnp.arange(chunk_size, dtype=jnp.int32))


def _members_in_turn(plan: _Plan, carry, start, data, chunk_size: int, num_units: int, row_shape):
    """The fast (``guard="loss"``) chunk of an algorithm with ``member_step``: member 0 takes
    every step of the chunk, then member 1, ... (``lax.map`` over members of
    :func:`_scan_units` with ``member_step`` as the step), each on the batches and with the
    keys the all-members ``step`` would give it (``fold_in(step key, m)``). Returns ``(carry,
    rows)`` shaped as the all-members chunk's: rows ``(chunk, M, ...)``; a member that meets a
    non-finite loss stops there, the chunk is flagged at the earliest such step over members
    and :func:`_drive` re-runs it with every member stepped together under the exact
    per-step guard."""
    algorithm = plan.algorithm
    rs, stopped, bad_unit = carry
    info_shape, *rest = row_shape
    member_rows = (jax.tree_util.tree_map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), info_shape), *rest)

    def one_member(args):
        m, state = args
        step = lambda key, st, batch: algorithm.hooks.member_step(jax.random.fold_in(key, m), st, batch)
        hooks = algorithm.hooks._replace(periodic=algorithm.hooks.member_periodic)
        member_plan = plan._replace(algorithm=algorithm._replace(step=step, hooks=hooks))
        (r, halted, bad), rows = _scan_units(
            member_plan, (rs._replace(state=state), stopped, bad_unit), start, data, chunk_size, num_units, member_rows, "loss"
        )
        return r.state, r.t, r.perm, rows, halted, jnp.where(halted, bad, jnp.iinfo(jnp.int32).max)

    members = jnp.arange(algorithm.run.num_chains, dtype=jnp.int32)
    states, ts, perms, rows, halted, bads = jax.lax.map(one_member, (members, rs.state))
    infos, _, flags = rows
    infos = jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, 0, 1), infos)  # (M, chunk, ...) -> (chunk, M, ...)
    failed = jnp.any(halted) & ~stopped
    return (RunState(states, ts[0], perms[0]), stopped | failed, jnp.where(failed, jnp.min(bads), bad_unit)), (infos, None, flags[0])


def compile_all(lowered: dict[str, Any]) -> dict[str, Any]:
    """Compile several lowered programs at once, one thread each, so that they overlap on a
    multi-core machine. Returns the compiled programs under the same keys."""
    with ThreadPoolExecutor(max_workers=max(1, min(len(lowered), os.cpu_count() or 1))) as pool:
        futures = {k: pool.submit(v.compile) for k, v in lowered.items()}
        return {k: f.result() for k, f in futures.items()}


def trace_fit(algorithm: Algorithm, root: jax.Array, x, y) -> tuple[dict, Any]:
    """The whole fit as one pure function (no guard, bar or host): init, every step in a
    ``lax.scan`` and the draws. Traces inside ``jit``/``vmap`` (``root`` may be traced).

    Returns:
        ``(draws, info)``: draws ``{site: (S, *site_shape)}`` (chains pooled for emitting
        samplers) and the last unit's ``info``.
    """
    draws, info, _ = _trace(algorithm, root, x, y, guard=False)
    return draws, info


def guarded_trace_fit(algorithm: Algorithm, root: jax.Array, x, y) -> tuple[dict, Any, jax.Array]:
    """:func:`trace_fit` with :func:`run`'s guard: a step whose loss, outputs or new state are
    not finite is not applied and the fit stops there, keeping the state before it (what
    :func:`run` keeps, with its warning; here the caller reads ``stopped_at``). A sampler that
    emits draws keeps NaN rows for the units it did not run.

    Returns:
        ``(draws, info, stopped_at)``: as :func:`trace_fit` (``info`` the last unit attempted),
        and the int32 index of the first non-finite unit (a step, for non-emitting algorithms),
        -1 when every unit ran.
    """
    return _trace(algorithm, root, x, y, guard=True)


def _trace(algorithm: Algorithm, root, x, y, guard: bool):
    n = int(x.shape[0])
    plan = _plan(algorithm, _keys_of(algorithm, root), n)
    data = (x, y)
    num_units = _num_units(plan)
    if guard:
        rs0 = _init(plan, data)
        carry = (rs0, jnp.bool_(False), jnp.int32(-1))
        (rs, _, stopped_at), (info, emitted, _) = _scan_units(
            plan, carry, jnp.int32(0), data, num_units, num_units, _row_shape(plan, rs0, data), "step", select_stop=True
        )
        # the last unit attempted: the bad one when stopped (the later rows are blanks)
        last = jnp.where(stopped_at >= 0, stopped_at, num_units - 1)
        last_info = jax.tree_util.tree_map(lambda a: a[last], info)
    else:

        def body(rs, index):
            rs, row, _ = _unit(plan, rs, index, data)
            return rs, row

        rs, (info, emitted, _) = jax.lax.scan(body, _init(plan, data), jnp.arange(num_units, dtype=jnp.int32))
        last_info, stopped_at = jax.tree_util.tree_map(lambda a: a[-1], info), jnp.int32(-1)
    if plan.ends is None:
        draws = algorithm.sample(plan.keys.sample, rs.state, algorithm.run.num_samples)
        if algorithm.run.num_chains > 1:  # (chains, draws, ...) pooled
            draws = jax.tree_util.tree_map(lambda a: a.reshape(-1, *a.shape[2:]), draws)
        return draws, last_info, stopped_at
    kept = np.flatnonzero(plan.keep)
    draws = jax.tree_util.tree_map(lambda a: a[kept].reshape(-1, *a.shape[2:]), emitted[0])
    return draws, last_info, stopped_at
