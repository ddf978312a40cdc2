"""The one driver around every :class:`~bnnpp.inference.algorithm.Algorithm`.

It owns, once for all methods:

* **compiling**: ``init``, one training chunk and ``sample`` (and the validation pass) are
  traced first and compiled side by side; nothing runs eagerly and nothing compiles twice.
  Compilation dominates small BNN fits, so one program per phase matters more than any
  per-step tuning.
* **chunked ``lax.scan``**: steps run in compiled chunks of ``chunk_size``; the progress bar
  moves between chunks, so there is no host round-trip per step. Every chunk has the same
  shape (steps past the end are masked), so it compiles once. Independent members with an
  ``Algorithm.member_step`` (a deep ensemble on a CPU) are stepped in turn within a chunk,
  each member through all of its steps, instead of all members every step.
* **minibatches on the device**: with ``batch_size = B < N`` the rows are reshuffled at the
  start of every epoch of ``M = N // B`` steps (``jax.random.permutation`` with the key
  ``fold_in(keys.data, epoch)``) and step ``t`` takes the ``t mod M``-th block of ``B``
  rows; the ``N mod B`` rows left over are skipped for that epoch. Each batch is a uniformly
  random subset drawn without replacement. In a multi-process fit with a data axis of D > 1
  devices, each device instead draws its ``B/D`` rows from its own ``N/D`` rows (a
  permutation per device and epoch, in ``shard_map``): no step gathers rows across
  processes, and the minibatch stream differs from the one-process fit's
  (:mod:`bnnpp.inference.sharding`).
* **the NaN guard**: each step's ``info.loss`` is checked, and the whole state once per
  chunk. A chunk that fails either check is re-run from its input by a chunk that checks
  the whole state after every step (compiled only then), so training stops at the first
  non-finite step and keeps the state before it, with a warning.
* **an output channel** for samplers (``Algorithm.emit``): the steps are grouped into
  segments that end at the kept steps, each segment a ``fori_loop`` of steps; a segment's
  row carries the emitted draws, which leave the device once per chunk as scan outputs.
* **validation**: with ``validation_data=(x_val, y_val)`` (an option of methods whose
  algorithm has a ``point``), the network at that point is scored on the device after
  every chunk: error rate for classifiers, RMSE for Gaussian regression.
* **checkpoints and signals** (:mod:`bnnpp.inference.checkpoints`): with a checkpoint folder
  the state, the rows so far and the next chunk are saved with orbax-checkpoint when due, and
  ``resume`` continues bit-identically; SIGINT/SIGTERM stop training after the current chunk.
* **building the Posterior**: draws, the typed approximation, traces, sample statistics,
  seconds.

:func:`trace_fit` is the same fit as one pure function, without the guard, the bar or the
host; :func:`guarded_trace_fit` adds the guard's stop at the first non-finite step: what
:func:`bnnpp.sweep.sweep` and ``benchmarks/uci.py`` ``vmap`` over seeds, hyperparameters and splits.

The file is about 700 lines because it is the one driver: the unit of work, the chunk and its
guard, the loop with its checkpoints and signals, and the construction of the Posterior are
kept together so that the whole path of a fit reads top to bottom (checkpoint storage and
validation live in their own modules).
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from bnnpp.inference import health, sharding
from bnnpp.inference.algorithm import Algorithm, Keys, Outcome, default_keys
from bnnpp.inference.checkpoints import (
    Checkpointer,
    Checkpointing,
    TrainingInterrupted,
    fingerprint,
    interruptible,
    remove,
)
from bnnpp.inference.validation import validation_batches, validation_error
from bnnpp.introspection import latent_sites
from bnnpp.posterior import MAX_SAVED_DATA, FitStats, Posterior

__all__ = ["RunState", "all_finite", "default_chunk_size", "guarded_trace_fit", "run", "segments", "trace_fit"]

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


def default_chunk_size(num_units: int, updates: int = 20, minimum: int = 10, maximum: int = 10_000) -> int:
    """Steps per compiled chunk so that the bar updates about ``updates`` times, but at least
    ``minimum`` steps (or all of them): every chunk call returns a fresh copy of the state
    and checks it, which on a wide net costs about as much as a step. At most ``maximum``
    steps, so that a long run's bar moves and Ctrl-C (which stops after the current chunk)
    answers within seconds: 10,000 steps of the moons net are about a second here, where a
    twentieth of a 5-million-step run was half a minute."""
    return max(1, min(num_units, maximum, max(minimum, math.ceil(num_units / updates))))


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
    return (algorithm.keys or default_keys)(root)


@partial(jax.jit, static_argnums=0)
def _seed_keys(derive: Callable, seed) -> Keys:
    """A seed's keys in one small program, compiled once per derivation (eager key arithmetic
    would compile one program per operation)."""
    return derive(jax.random.PRNGKey(seed))


def _plan(algorithm: Algorithm, keys: Keys, n: int, batch_sharding=None, local=None) -> _Plan:
    batch = algorithm.batch_size or n
    ends = keep = None
    if algorithm.emit is not None:
        ends, keep = segments(algorithm.num_steps, algorithm.emit_steps)
    return _Plan(algorithm, keys, n, batch, n // batch, ends, keep, batch_sharding, local if batch < n else None)


def _num_units(plan: _Plan) -> int:
    return plan.algorithm.num_steps if plan.ends is None else len(plan.ends)


def _init(plan: _Plan, data) -> RunState:
    perm = jnp.arange(plan.n, dtype=jnp.int32) if plan.batch < plan.n else jnp.zeros((0,), jnp.int32)
    return RunState(plan.algorithm.init(plan.keys.init, data), jnp.zeros((), jnp.int32), perm)


def _one_step(plan: _Plan, rs: RunState, data):
    """One step of the algorithm on this step's minibatch."""
    batch, perm = _minibatch(plan, rs.t, rs.perm, data)
    state, info = plan.algorithm.step(jax.random.fold_in(plan.keys.steps, rs.t), rs.state, batch)
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
        # the permutation depends on `device` but jax.random does not type it as varying over
        # `data`: pcast says so, to match the carried per-device permutation
        fresh = lambda: jax.lax.pcast(jax.random.permutation(key, block).astype(jnp.int32), ("data",), to="varying")
        perm = jax.lax.cond(i == 0, fresh, lambda: perm)
        idx = jax.lax.dynamic_slice(perm, (i * b,), (b,))
        return (perm, *(a[idx] for a in arrays))

    split = jax.sharding.PartitionSpec("data")
    out = jax.shard_map(per_device, mesh=plan.local, in_specs=(jax.sharding.PartitionSpec(), split, split, *[split] * len(leaves)),
                        out_specs=(split,) * (1 + len(leaves)))(t, jnp.arange(d, dtype=jnp.int32), perm, *leaves)
    return jax.tree_util.tree_unflatten(tree, list(out[1:])), out[0]


def _unit(plan: _Plan, rs: RunState, index, data):
    """Unit ``index``: one step (``row = (info, None, -1)``), or for emitting algorithms the
    segment of steps up to ``ends[index]`` (``row = (last info, emitted, first bad step or
    -1)``). Returns ``(rs, row, ok)``; ``ok`` is False when a loss or an output is not finite."""
    if plan.ends is None:
        rs, info = _one_step(plan, rs, data)
        row = (info, None, jnp.int32(-1))
        return rs, row, all_finite(info)
    info_shape = jax.eval_shape(lambda r: _one_step(plan, r, data)[1], rs)
    info0 = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), info_shape)

    def body(_, carry):
        r, _info, bad = carry
        r_new, info = _one_step(plan, r, data)
        bad = jnp.where((bad < 0) & ~all_finite(info.loss), r.t, bad)
        return r_new, info, bad

    end = jnp.asarray(plan.ends, jnp.int32)[index]
    rs, info, bad = jax.lax.fori_loop(rs.t, end, body, (rs, info0, jnp.int32(-1)))
    emitted = plan.algorithm.emit(jax.random.fold_in(plan.keys.sample, index), rs.state)
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
        if guard == "loss" and shardings is None and plan.ends is None and plan.algorithm.member_step is not None:
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


def _row_shape(plan: _Plan, rs, data):
    """The abstract rows (info, emitted, …) one unit returns for run state ``rs`` and ``data``; compiles nothing."""
    return jax.eval_shape(lambda r, d: _unit(plan, r, jnp.int32(0), d)[1], _abstract(rs), _abstract(data))


def _scan_units(plan: _Plan, carry, start, data, chunk_size: int, num_units: int, row_shape, guard: str):
    """``chunk_size`` units from ``start`` in a ``lax.scan``, each checked as ``guard`` says
    (:func:`_lower_chunk`): ``(carry, rows)``."""

    def body(c, i):
        rs, stopped, bad_unit = c
        index = start + i
        active = jnp.logical_and(~stopped, index < num_units)

        def do(r):
            new, row, ok = _unit(plan, r, index, data)
            return new, row, (ok & all_finite(new.state)) if guard == "step" else ok

        def skip(r):
            return r, _blank(row_shape), jnp.array(True)

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
        step = lambda key, st, batch: algorithm.member_step(jax.random.fold_in(key, m), st, batch)
        member_plan = plan._replace(algorithm=algorithm._replace(step=step))
        (r, halted, bad), rows = _scan_units(member_plan, (rs._replace(state=state), stopped, bad_unit), start, data,
                                             chunk_size, num_units, member_rows, "loss")
        return r.state, r.t, r.perm, rows, halted, jnp.where(halted, bad, jnp.iinfo(jnp.int32).max)

    members = jnp.arange(algorithm.num_chains, dtype=jnp.int32)
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


def _mean_loss(info) -> dict:
    return {"loss": f"{np.nanmean(np.asarray(info.loss)):.4g}"}


def _drive(chunk, recover: Callable[[], Any], rs, data, num_units: int, chunk_size: int, *, progress: bool, desc: str,
           postfix: Callable, after_chunk: Callable | None, total_steps: Callable[[int], int], start_unit: int = 0,
           pieces: list | None = None, checkpointer: Checkpointer | None = None, val_log: list | None = None):
    """Run compiled chunks from unit ``start_unit`` until every unit is done or one is not
    finite. ``pieces`` are the rows of the units before ``start_unit`` (when resuming). With a
    ``checkpointer``, a checkpoint is written after the chunks where one is due; on SIGINT or
    SIGTERM the loop stops after the current chunk, writes one and raises
    :class:`~bnnpp.inference.checkpoints.TrainingInterrupted`.

    Returns ``(rs, rows, units_run, bad_unit, seconds_recompiling)``: the last finite state,
    the rows of every unit attempted (host arrays, the last one the bad one if stopped), and
    the index of the first non-finite unit or ``None``."""
    carry = (rs, np.bool_(False), np.int32(-1))  # host values: valid inputs on any mesh
    pieces = list(pieces or [])
    careful = None
    recompile = 0.0
    done_steps = total_steps(start_unit)
    with (
        tqdm(total=total_steps(num_units), initial=done_steps, desc=desc, disable=not progress, leave=False,
             dynamic_ncols=True) as bar,
        interruptible() as signals,
    ):
        for start in range(start_unit, num_units, chunk_size):
            carry_in = carry  # not donated, so still valid after the call
            carry, rows = chunk(carry, np.int32(start), data)
            if bool(carry[1]):  # re-run the chunk with the exact per-unit guard
                if careful is None:
                    t0 = time.perf_counter()
                    careful = recover()
                    recompile += time.perf_counter() - t0
                carry, rows = careful(carry_in, np.int32(start), data)
            valid = max(0, min(chunk_size, num_units - start))
            stopped = bool(carry[1])
            if stopped:
                valid = int(carry[2]) - start + 1
            rows = jax.tree_util.tree_map(lambda a: np.asarray(a)[:valid], jax.device_get(rows))  # noqa: B023  (used at once)
            pieces.append(rows)
            steps_now = total_steps(start + valid)
            bar.update(steps_now - done_steps)
            done_steps = steps_now
            info = rows[0]
            finite = np.all(np.isfinite(np.asarray(info.loss).reshape(valid, -1)), axis=1) if valid else np.zeros(0, bool)
            shown = postfix(jax.tree_util.tree_map(lambda a: a[finite], info)) if finite.any() else {}  # noqa: B023  (used at once)
            if after_chunk is not None:
                shown = {**shown, **after_chunk(carry[0])}
            if shown:
                bar.set_postfix(shown, refresh=False)
            if stopped:
                break
            if signals or (checkpointer is not None and checkpointer.due(steps_now)):
                if checkpointer is not None:
                    checkpointer.save(steps_now, start + chunk_size, carry[0], pieces, val_log or [])
                if signals:
                    resumable = checkpointer is not None and checkpointer.latest() is not None  # a save can fail (full disk)
                    raise TrainingInterrupted(signals[0], steps_now, checkpointer.directory if resumable else None)
    rows = jax.tree_util.tree_map(lambda *a: np.concatenate(a), *pieces)
    units_run = len(np.asarray(rows[2]))
    return carry[0], rows, units_run, (int(carry[2]) if bool(carry[1]) else None), recompile


# --------------------------------------------------------------------------------------
# run: the fit with everything around it
# --------------------------------------------------------------------------------------


def run(
    algorithm: Algorithm,
    model: Callable,
    x: np.ndarray,
    y: np.ndarray,
    *,
    method: str,
    seed: int,
    options: dict,
    progress: bool = True,
    chunk_size: int | None = None,
    validation_data: tuple[np.ndarray, np.ndarray] | None = None,
    checkpoint: Checkpointing | None = None,
    resume: bool = False,
    devices: int | None = None,
    mesh: str | dict | None = None,
    rows=None,
) -> Posterior:
    """Fit ``model`` to ``(x, y)`` with ``algorithm`` and return the :class:`Posterior`.

    Args:
        algorithm: from a method's ``build``.
        model, x, y: the NumPyro model and the checked training data.
        method, seed, options: recorded in the posterior's statistics (``options`` as a dict).
        progress: show a tqdm bar (updated between chunks).
        chunk_size: units per compiled chunk (steps; segments for emitting samplers).
            Default: about 20 bar updates, rounded to whole epochs with minibatches.
        validation_data: ``(x_val, y_val)`` scored at ``algorithm.point`` after every chunk (with
            minibatches and no ``chunk_size``: a chunk is one epoch, so every epoch is scored).
        checkpoint: save progress as :class:`~bnnpp.inference.checkpoints.Checkpointing` says
            (and on SIGINT/SIGTERM); without it a signal still stops cleanly after the chunk.
        resume: continue from the newest checkpoint in ``checkpoint.directory`` (a fresh start
            when there is none); without ``resume`` old checkpoints there are deleted first.
        devices, mesh: run on a device mesh (:mod:`bnnpp.inference.sharding`): the batch split
            over a ``data`` axis, chains/members over a ``members`` axis; ``None`` for both:
            the default device, unsharded. The layout is recorded in ``extras["placement"]``,
            with ``rows_loaded`` (the training rows ``[start, stop)`` each process held).
        rows: a :class:`bnnpp.data.Rows` when ``x``, ``y`` are only this process's block of
            a multi-process fit's rows (``None``: all of them). The global arrays are then
            built from every process's block, and the posterior's ``x``, ``y`` are the whole
            training set gathered once after training when it has at most
            :data:`~bnnpp.posterior.MAX_SAVED_DATA` values (what a run folder saves), else
            empty ``(0, ...)`` arrays (as a posterior loaded without its data).

    Returns:
        A :class:`Posterior`: draws ``(1, num_samples, *site)`` from ``sample`` or
        ``(chains, kept, *site)`` from ``emit``; ``stats.traces`` the ``info`` fields per
        step (not for emitting samplers, whose per-draw ``stats`` are ``sample_stats``);
        ``stats.extras`` holds ``num_batches`` (with minibatches), ``val_step``/``val_error``
        (with validation) and the algorithm's ``extras``.

    Raises:
        RuntimeError: an emitting sampler became non-finite before its first kept draw.
        TrainingInterrupted: SIGINT or SIGTERM arrived (a ``KeyboardInterrupt``).
        ValueError: ``resume`` found a checkpoint of another fit.
    """
    share = rows  # `rows` names the chunks' output rows below
    n = int(x.shape[0]) if share is None else int(share.total)
    place = sharding.placement(devices, mesh, batch=algorithm.batch_size or n, n=n, num_chains=algorithm.num_chains,
                               name=method)
    if share is not None:
        sharding.check_rows(place, share, int(x.shape[0]))
    keys = _seed_keys(algorithm.keys or default_keys, np.uint32(seed))
    if place is None:
        plan = _plan(algorithm, keys, n)
        data = (jax.device_put(x), jax.device_put(y))  # chunk arguments, not program constants
    else:
        if checkpoint is not None and jax.process_count() > 1:
            raise ValueError("checkpoints are not written by multi-process fits: pass checkpoint_dir=None")
        keys = Keys(*(np.asarray(k) for k in keys))  # host constants: valid on every process and mesh
        local = jax.process_count() > 1 and place.data > 1  # minibatches from each device's own rows
        plan = _plan(algorithm, keys, n, place.batch, place.mesh if local else None)
        if share is not None:  # this process's block only: the global arrays from every process's block
            data = (sharding.put_local(x, place.rows, n), sharding.put_local(y, place.rows, n))
        else:
            data = (sharding.put(x, place.rows), sharding.put(y, place.rows))
        progress = progress and jax.process_index() == 0
    num_units = _num_units(plan)
    if chunk_size is None:
        chunk_size = default_chunk_size(num_units)
        if plan.ends is None and plan.num_batches > 1:  # whole epochs per chunk
            chunk_size = plan.num_batches * max(1, round(chunk_size / plan.num_batches))
            if validation_data is not None:  # one epoch per chunk: the validation error of every epoch
                chunk_size = plan.num_batches
    chunk_size = min(chunk_size, num_units)

    t0 = time.perf_counter()
    shardings = None
    lower = lambda fn, state_arg, *args: jax.jit(fn).lower(*args)
    if place is None:
        lowered_init = jax.jit(lambda d: _init(plan, d)).lower(data)
        rs_shape = lowered_init.out_info
    else:  # the state's layout: chains/members split over their axis, everything else replicated
        # (init is lowered first, as above: some methods set up objects on their first trace)
        rep = place.replicated
        lowered_init = jax.jit(lambda d: _init(plan, d), in_shardings=((place.rows, place.rows),), out_shardings=rep).lower(data)
        rs_shape = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), lowered_init.out_info)
        rs_sh = RunState(place.state(rs_shape.state), rep, place.batch if plan.local is not None else rep)
        shardings = (rs_sh, (place.rows, place.rows), rep)
        lower = partial(_lower_on, place, rs_sh.state)
    lowered = {"init": lowered_init, "chunk": _lower_chunk(plan, rs_shape, chunk_size, data, "loss", shardings)}
    approximate = algorithm.approximation or (lambda state: None)
    if algorithm.emit is None:  # the draws and the approximation in one program (finalize gives its own draws)
        draw = algorithm.sample if algorithm.finalize is None else (lambda k, s, num: {})
        lowered["sample"] = lower(
            lambda k, s: (draw(k, s, algorithm.num_samples), approximate(s)), 1, plan.keys.sample, rs_shape.state
        )
    elif algorithm.approximation is not None:
        lowered["approximation"] = lower(approximate, 0, rs_shape.state)
    if validation_data is not None:
        if algorithm.point is None:
            raise ValueError(f"method {method!r} has no point estimate to validate: pass validation_data=None")
        val_args = validation_batches(*validation_data)
        if place is not None:
            val_args = tuple(sharding.put(a, place.replicated) for a in val_args)
        score = validation_error(model, int(validation_data[0].shape[0]))
        lowered["val"] = lower(lambda s, *a: score(algorithm.point(s), *a), 0, rs_shape.state, *val_args)
    programs = compile_all(lowered)
    compile_seconds = time.perf_counter() - t0

    val_log: list[tuple[int, float]] = []
    checkpointer = None
    rs0, start_unit, pieces = programs["init"](data), 0, []
    if place is not None:  # from init's replicated output to the state's layout
        rs0 = jax.device_put(rs0, shardings[0])
    if checkpoint is not None:
        if not resume:
            remove(os.fspath(checkpoint.directory))
        checkpointer = Checkpointer(checkpoint, fingerprint(method, seed, options, x, y, chunk_size, model=model))
        if resume and checkpointer.latest() is not None:
            row_shape = jax.eval_shape(lambda r, d: _unit(plan, r, jnp.int32(0), d)[1], rs_shape, data)
            rs0, pieces, start_unit, restored_log, _ = checkpointer.restore(
                jax.tree_util.tree_structure(rs0), jax.tree_util.tree_structure(row_shape)
            )
            val_log.extend(restored_log)
            if place is not None:
                rs0 = jax.device_put(rs0, shardings[0])

    def after_chunk(rs) -> dict:
        err = float(programs["val"](rs.state, *val_args))
        val_log.append((int(rs.t), err))
        return {"val_err": f"{err:.4g}"}

    def recover():
        return _lower_chunk(plan, rs_shape, chunk_size, data, "step", shardings).compile()

    ends = plan.ends
    t0 = time.perf_counter()
    rs, rows, units_run, bad_unit, recompile = _drive(
        programs["chunk"], recover, rs0, data, num_units, chunk_size, progress=progress,
        desc=algorithm.name or method, postfix=algorithm.postfix or _mean_loss,
        after_chunk=after_chunk if validation_data is not None else None,
        total_steps=(lambda u: u) if ends is None else (lambda u: int(ends[min(u, len(ends)) - 1]) if u else 0),
        start_unit=start_unit, pieces=pieces, checkpointer=checkpointer, val_log=val_log,
    )
    compile_seconds += recompile
    run_seconds = time.perf_counter() - t0 - recompile

    t0 = time.perf_counter()
    info_rows, emitted, bad_steps = rows
    name = algorithm.name or method
    extras: dict[str, Any] = {}
    if plan.num_batches > 1 or algorithm.batch_size is not None:
        extras["num_batches"] = plan.num_batches
    if ends is None:
        steps_run, stopped_at = units_run, bad_unit
        samples, approximation = sharding.to_host(programs["sample"](plan.keys.sample, rs.state))
        # one chain: sample gives (num_samples, ...); several (members): (num_chains, num_samples, ...)
        samples = {k: np.asarray(v)[None] if algorithm.num_chains == 1 else np.asarray(v) for k, v in samples.items()}
        overflow = [k for k, v in samples.items() if v.dtype.kind == "f" and not np.all(np.isfinite(v))]
        if overflow:  # finite parameters whose draws are not (e.g. exp of a huge log-scale)
            warnings.warn(
                f"{algorithm.name or method}: the draws of {', '.join(overflow)} overflow to NaN/inf from the parameters "
                f"after step {units_run - 1 if bad_unit is None else bad_unit - 1}; lower the learning rate or use a tighter prior",
                RuntimeWarning,
                stacklevel=4,  # the caller of bnnpp.fit
            )
        traces = {k: np.asarray(v) for k, v in info_rows._asdict().items()}
        sample_stats: dict = {}
    else:
        done = units_run - (bad_unit is not None)  # segments whose results were kept
        stopped_at = None
        if bad_unit is not None:  # the step that went bad, else the failed segment's last step
            first_bad = int(bad_steps[-1])
            stopped_at = first_bad if first_bad >= 0 else int(ends[bad_unit]) - 1
        steps_run = int(ends[done - 1]) if done else 0
        kept = plan.keep[:done]
        draws, stats = jax.tree_util.tree_map(lambda a: a[:done][kept], emitted)
        # (draws, chains, ...) -> (chains, draws, ...)
        samples = {k: np.ascontiguousarray(np.swapaxes(v, 0, 1)) for k, v in draws.items()}
        sample_stats = {k: np.ascontiguousarray(np.swapaxes(v, 0, 1)) for k, v in stats.items()}
        if algorithm.kept_stats is not None:
            kept_steps = np.asarray(algorithm.emit_steps)[: samples[next(iter(samples))].shape[1]]
            for k, v in algorithm.kept_stats(kept_steps).items():
                sample_stats[k] = np.broadcast_to(np.asarray(v), (algorithm.num_chains, len(kept_steps))).copy()
        traces = {}
        approximation = None
    if stopped_at is not None:
        warnings.warn(
            f"{name}: the loss or parameters became NaN/inf at step {stopped_at}; training stopped there and kept the "
            f"parameters after step {stopped_at - 1}. Lower the learning rate or use a tighter prior.",
            RuntimeWarning,
            stacklevel=4,  # the caller of bnnpp.fit
        )
    if ends is not None and samples[next(iter(samples))].shape[1] == 0:
        raise RuntimeError(
            f"{name}: the chains became NaN/inf at step {stopped_at}, before the first kept draw; lower step_size "
            "or use a tighter prior"
        )
    host_state = sharding.to_host(rs.state)
    if "approximation" in programs:
        approximation = sharding.to_host(programs["approximation"](rs.state))
    if approximation is not None:
        approximation = jax.tree_util.tree_map(np.asarray, approximation)
    if algorithm.extras is not None:
        extras.update(algorithm.extras(host_state))
    if algorithm.num_chains > 1 and algorithm.emit is None:  # how the independent members were stepped
        extras["layout"] = "in_turn" if algorithm.member_step is not None and place is None else "vmap"
    if place is not None:
        held = (0, int(x.shape[0])) if share is None else (share.start, share.stop)
        extras["placement"] = {
            **place.facts(plan.batch), "compile_seconds": compile_seconds, "seconds_per_step": run_seconds / max(steps_run, 1),
            "chains_per_device": sharding.chains_per_device(rs.state, algorithm.num_chains) if algorithm.num_chains > 1 else {},
            "training_rows": n, "rows_loaded": sharding.rows_loaded(*held),
            "minibatches": "full batch" if plan.batch == n else "each device from its own rows" if plan.local is not None
            else "one permutation of all rows",
        }
    if algorithm.finalize is not None:  # the method's own last stage (Laplace's curvature, NUTS's divergences)
        samples, approximation, sample_stats, extras = algorithm.finalize(
            plan.keys.sample, rs.state, data, Outcome(samples, approximation, sample_stats, extras)
        )
    x_post, y_post = x, y
    if share is not None:  # the whole (small) training set for the posterior, gathered once
        small = n * int(np.prod(x.shape[1:])) <= MAX_SAVED_DATA
        x_post, y_post = (tuple(np.asarray(a) for a in sharding.to_host(data)) if small else (x[:0], y[:0]))
    if validation_data is not None:
        extras["val_step"] = [s for s, _ in val_log]
        extras["val_error"] = [e for _, e in val_log]
    stats = FitStats(
        method=method, seed=seed, options=options, traces=traces, sample_stats=sample_stats, steps_run=steps_run,
        stopped_at=stopped_at, compile_seconds=compile_seconds, run_seconds=run_seconds,
        sample_seconds=time.perf_counter() - t0, extras=extras,
    )
    posterior = Posterior(samples, stats, model, x_post, y_post, latent_sites(model, x, y), approximation)
    health.warn(posterior, stacklevel=4)  # not converged, or a q that PSIS rejects: one line each
    return posterior


def _lower_on(place: sharding.Placement, state_sharding, fn: Callable, state_arg: int, *args):
    """``jax.jit(fn).lower(*args)`` on the mesh: argument ``state_arg`` is the algorithm's
    state in its layout, the other arguments and every output replicated (so that every
    process can read them)."""
    in_sh = tuple(state_sharding if i == state_arg else place.replicated for i in range(len(args)))
    return jax.jit(fn, in_shardings=in_sh, out_shardings=place.replicated).lower(*args)


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
            plan, carry, jnp.int32(0), data, num_units, num_units, _row_shape(plan, rs0, data), "step"
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
        draws = algorithm.sample(plan.keys.sample, rs.state, algorithm.num_samples)
        if algorithm.num_chains > 1:  # (chains, draws, ...) pooled
            draws = jax.tree_util.tree_map(lambda a: a.reshape(-1, *a.shape[2:]), draws)
        return draws, last_info, stopped_at
    kept = np.flatnonzero(plan.keep)
    draws = jax.tree_util.tree_map(lambda a: a[kept].reshape(-1, *a.shape[2:]), emitted[0])
    return draws, last_info, stopped_at
