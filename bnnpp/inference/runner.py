"""The one driver around every :class:`~bnnpp.inference.algorithm.Algorithm`.

It owns, once for all methods:

* **compiling**: ``init``, one training chunk and ``sample`` (and the validation pass) are
  traced first and compiled side by side; nothing runs eagerly and nothing compiles twice.
  Compilation dominates small BNN fits, so one program per phase matters more than any
  per-step tuning.
* **chunked ``lax.scan``**: steps run in compiled chunks of ``chunk_size``; the progress bar
  moves between chunks, so there is no host round-trip per step. Every chunk has the same
  shape (steps past the end are masked), so it compiles once. Independent members with an
  ``Algorithm.hooks.member_step`` (a deep ensemble on a CPU) are stepped in turn within a chunk,
  each member through all of its steps, instead of all members every step.
* **independent chains in threads**: on a multi-core CPU, the chains of an algorithm whose
  chains never meet (NUTS; mclmc and chees after their shared warm-up) run in groups, the chunk
  compiled for one group and called on each from its own thread, the states and rows joined
  after every chunk (:mod:`bnnpp.inference.chain_threads`): XLA runs one CPU program on about
  one core.
* **minibatches on the device** and **an output channel** for samplers that emit their draws
  (:mod:`bnnpp.inference.chunks`).
* **the NaN guard**: each step's ``info.loss`` is checked, and the whole state once per
  chunk. A chunk that fails either check is re-run from its input by a chunk that checks
  the whole state after every step (compiled only then), so training stops at the first
  non-finite step and keeps the state before it, with a warning.
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
:func:`bnnpp.sweep.sweep` and other batch drivers ``vmap`` over seeds, hyperparameters and splits.
Both, with the unit of work and the chunk, live in :mod:`bnnpp.inference.chunks`.

:func:`run` reads top to bottom in five stages: **plan** (where the fit runs, its keys, units
and chunk size), **compile**, **drive** (the chunk loop with its checkpoints and signals),
**collect** (draws, statistics, approximation, extras; then the algorithm's ``finalize``) and
**assemble** (the :class:`Posterior`). Where it runs is a :class:`~bnnpp.inference.sharding.Placement`
on a mesh, or its null object :class:`~bnnpp.inference.sharding.OneDevice`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, NamedTuple

import jax
import numpy as np
from tqdm.auto import tqdm

from bnnpp.inference import chain_threads, sharding
from bnnpp.inference.algorithm import Algorithm, default_keys
from bnnpp.inference.checkpoints import (
    Checkpointer,
    Checkpointing,
    TrainingInterrupted,
    fingerprint,
    interruptible,
    remove,
)
from bnnpp.inference.chunks import (  # noqa: F401  (_keys_of, _minibatch: used by tests and the 0.1 loop)
    RunState,
    _init,
    _keys_of,
    _lower_chunk,
    _minibatch,
    _num_units,
    _Plan,
    _plan,
    _row_shape,
    _seed_keys,
    all_finite,
    compile_all,
    guarded_trace_fit,
    segments,
    trace_fit,
)
from bnnpp.inference.collect import _assemble, _collect, _placement_facts, _traces
from bnnpp.inference.validation import validation_batches, validation_error
from bnnpp.posterior import FitStats, Posterior

__all__ = ["RunState", "all_finite", "default_chunk_size", "guarded_trace_fit", "run", "segments", "trace_fit"]


def default_chunk_size(num_units: int, updates: int = 20, minimum: int = 10, maximum: int = 10_000) -> int:
    """Steps per compiled chunk so that the bar updates about ``updates`` times, but at least
    ``minimum`` steps (or all of them): every chunk call returns a fresh copy of the state
    and checks it, which on a wide net costs about as much as a step. At most ``maximum``
    steps, so that a long run's bar moves and Ctrl-C (which stops after the current chunk)
    answers promptly on a long run, where a fixed share of the steps would grow with its length."""
    return max(1, min(num_units, maximum, max(minimum, math.ceil(num_units / updates))))


def _mean_loss(info) -> dict:
    return {"loss": f"{np.nanmean(np.asarray(info.loss)):.4g}"}


def _drive(
    chunk,
    recover: Callable[[], Any],
    rs,
    data,
    num_units: int,
    chunk_size: int,
    *,
    progress: bool,
    desc: str,
    postfix: Callable,
    after_chunk: Callable | None,
    total_steps: Callable[[int], int],
    start_unit: int = 0,
    pieces: list | None = None,
    checkpointer: Checkpointer | None = None,
    val_log: list | None = None,
):
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
        tqdm(total=total_steps(num_units), initial=done_steps, desc=desc, disable=not progress, leave=False, dynamic_ncols=True) as bar,
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
    sites: dict | None = None,
) -> Posterior:
    """Fit ``model`` to ``(x, y)`` with ``algorithm`` and return the :class:`Posterior`.

    Args:
        algorithm: from a method's ``build``.
        model, x, y: the NumPyro model and the checked training data.
        method, seed, options: recorded in the posterior's statistics (``options`` as a dict).
        progress: show a tqdm bar (updated between chunks).
        chunk_size: units per compiled chunk (steps; segments for emitting samplers).
            Default: about 20 bar updates, rounded to whole epochs with minibatches.
        validation_data: ``(x_val, y_val)`` scored at ``algorithm.hooks.point`` after every chunk (with
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
        sites: the model's latent sites for the posterior (``ModelInfo.sites``; traced when not given).

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
    fit = _plan_fit(algorithm, x, y, method, seed, chunk_size, devices, mesh, rows, checkpoint, progress, validation_data)
    t0 = time.perf_counter()
    fit, programs, val_args = _compile(fit, model, validation_data)
    compile_seconds = time.perf_counter() - t0
    rs0, start_unit, pieces, val_log, checkpointer = _start(fit, programs, model, x, y, seed, options, checkpoint, resume)
    plan, ends = fit.plan, fit.plan.ends
    total_steps = (lambda u: u) if ends is None else (lambda u: int(ends[min(u, len(ends)) - 1]) if u else 0)
    pool = ThreadPoolExecutor(fit.groups) if fit.groups > 1 else None
    chunk = _chunk_caller(fit, programs, pool, total_steps)

    def recover():  # the chunk with the per-step guard, compiled only when a chunk fails
        careful = compile_all(
            {k: _lower_chunk(fit.plan, v, fit.chunk_size, fit.data, "step", fit.shardings) for k, v in _chunk_shapes(fit).items()}
        )
        return _chunk_caller(fit, careful, pool, total_steps)

    def after_chunk(rs) -> dict:
        err = float(programs["val"](rs.state, *val_args))
        val_log.append((int(rs.t), err))
        return {"val_err": f"{err:.4g}"}

    t0 = time.perf_counter()
    try:
        rs, unit_rows, units_run, bad_unit, recompile = _drive(
            chunk,
            recover,
            rs0,
            fit.data,
            fit.num_units,
            fit.chunk_size,
            progress=fit.progress,
            desc=algorithm.run.name or method,
            postfix=algorithm.hooks.postfix or _mean_loss,
            after_chunk=after_chunk if validation_data is not None else None,
            total_steps=total_steps,
            start_unit=start_unit,
            pieces=pieces,
            checkpointer=checkpointer,
            val_log=val_log,
        )
    finally:
        if pool is not None:
            pool.shutdown()
    compile_seconds += recompile
    run_seconds = time.perf_counter() - t0 - recompile
    t0 = time.perf_counter()
    outcome, steps_run, stopped_at = _collect(fit, programs, rs, unit_rows, units_run, bad_unit)
    if fit.groups > 1:
        outcome.extras["chain_threads"] = fit.groups
    if fit.place.placed:
        outcome.extras["placement"] = _placement_facts(fit, rs, x, compile_seconds, run_seconds / max(steps_run, 1))
    if validation_data is not None:
        outcome.extras["val_step"] = [s for s, _ in val_log]
        outcome.extras["val_error"] = [e for _, e in val_log]
    if algorithm.hooks.finalize is not None:  # the method's own last stage (Laplace's curvature, NUTS's divergences)
        outcome = algorithm.hooks.finalize(plan.keys.sample, rs.state, fit.data, outcome)
    stats = FitStats(
        method=method,
        seed=seed,
        options=options,
        traces=_traces(unit_rows, ends),
        sample_stats=outcome.sample_stats,
        steps_run=steps_run,
        stopped_at=stopped_at,
        compile_seconds=compile_seconds,
        run_seconds=run_seconds,
        sample_seconds=time.perf_counter() - t0,
        extras=outcome.extras,
    )
    return _assemble(fit, model, x, y, outcome, stats, sites)


def _chunk_shapes(fit) -> dict:
    """The run states the chunk programs are compiled for: ``"chunk"``, one group's (or all
    chains'), and for a sampler whose chains share a warm-up and run in groups after it,
    ``"warmup"``, all chains'."""
    shapes = {"chunk": fit.chunk_shape}
    if fit.groups > 1 and fit.algorithm.run.chains_from > 0:
        shapes["warmup"] = fit.rs_shape
    return shapes


def _chunk_caller(fit, programs: dict, pool, total_steps):
    """The chunk :func:`_drive` calls: ``programs["chunk"]``, or with chain groups that program
    on each group in ``pool`` (:func:`chain_threads.threaded`); for a sampler whose chains share
    a warm-up, ``programs["warmup"]`` (all chains, one program) on chunks that start before
    ``RunSpec.chains_from``."""
    if pool is None:
        return programs["chunk"]
    run = fit.algorithm.run
    grouped = chain_threads.threaded(programs["chunk"], fit.groups, pool, run)
    if "warmup" not in programs:
        return grouped
    warmup = programs["warmup"]
    return lambda carry, start, data: (grouped if total_steps(int(start)) >= run.chains_from else warmup)(carry, start, data)


class _Fit(NamedTuple):
    """What the stages of :func:`run` share: the plan, where it runs and its compiled shapes."""

    algorithm: Algorithm
    plan: _Plan
    place: Any  # sharding.Placement, or sharding.OneDevice (the null object)
    data: tuple  # the training arrays on the device(s)
    n: int
    share: Any  # a bnnpp.data.Rows, or None
    chunk_size: int
    num_units: int
    progress: bool
    method: str
    rs_shape: Any = None
    shardings: Any = None
    groups: int = 1  # chain groups run in threads (chain_threads), 1: one program for all chains
    chunk_shape: Any = None  # the run state a chunk is compiled for: rs_shape, or one group's


def _plan_fit(algorithm, x, y, method, seed, chunk_size, devices, mesh, share, checkpoint, progress, validation_data) -> _Fit:
    """Plan: where the fit runs, its keys, its units and the steps per compiled chunk."""
    n = int(x.shape[0]) if share is None else int(share.total)
    place = sharding.where(devices, mesh, batch=algorithm.run.batch_size or n, n=n, num_chains=algorithm.run.num_chains, name=method)
    if share is not None:
        sharding.check_rows(place if place.placed else None, share, int(x.shape[0]))
    if place.placed:
        if checkpoint is not None and jax.process_count() > 1:
            raise ValueError("checkpoints are not written by multi-process fits: pass checkpoint_dir=None")
        progress = progress and jax.process_index() == 0
    keys = _seed_keys(algorithm.hooks.keys or default_keys, np.uint32(seed))
    keys, batch_sharding, local = place.plan_args(keys, jax.process_count() > 1 and place.placed and place.data > 1)
    plan = _plan(algorithm, keys, n, batch_sharding, local)
    num_units = _num_units(plan)
    if chunk_size is None:
        chunk_size = default_chunk_size(num_units)
        if plan.ends is None and plan.num_batches > 1:  # whole epochs per chunk
            chunk_size = plan.num_batches * max(1, round(chunk_size / plan.num_batches))
            if validation_data is not None:  # one epoch per chunk: the validation error of every epoch
                chunk_size = plan.num_batches
    return _Fit(algorithm, plan, place, place.put_data(x, y, n, share), n, share, min(chunk_size, num_units), num_units, progress, method)


def _compile(fit: _Fit, model, validation_data):
    """Compile: ``init``, the guarded chunk, the draws (with the approximation) and the
    validation pass, lowered first and compiled side by side. Returns ``(fit, programs,
    val_args)``, ``fit`` with its run state's shapes and layouts."""
    algorithm, plan, place = fit.algorithm, fit.plan, fit.place
    # init is lowered first: some methods set up objects on their first trace
    lowered_init = place.lower_init(lambda d: _init(plan, d), fit.data)
    rs_shape = place.state_shape(lowered_init)
    layouts = place.layouts(rs_shape, plan.local is not None)
    shardings = None if layouts is None else (RunState(*layouts[0]), *layouts[1:])
    lower = partial(place.lower, shardings)
    platform = next(iter(jax.tree_util.tree_leaves(fit.data)[0].devices())).platform  # where the fit runs
    groups = chain_threads.chain_groups(algorithm, place.placed, rs_shape, platform)
    chunk_shape = rs_shape if groups == 1 else chain_threads.group_shape(algorithm.run, rs_shape, groups)
    fit = fit._replace(rs_shape=rs_shape, shardings=shardings, groups=groups, chunk_shape=chunk_shape)
    chunks = {k: _lower_chunk(plan, v, fit.chunk_size, fit.data, "loss", shardings) for k, v in _chunk_shapes(fit).items()}
    # with a shared warm-up (one program for all chains), the groups' program is compiled in the
    # background while the warm-up runs (on the core it leaves idle), waited for before the first grouped chunk
    later = chunks.pop("chunk") if "warmup" in chunks else None
    lowered = {"init": lowered_init, **chunks}
    approximate = algorithm.hooks.approximation or (lambda state: None)
    if algorithm.run.emit is None:  # the draws and the approximation in one program (finalize gives its own draws)
        draw = algorithm.sample if algorithm.hooks.finalize is None else (lambda k, s, num: {})
        lowered["sample"] = lower(lambda k, s: (draw(k, s, algorithm.run.num_samples), approximate(s)), 1, plan.keys.sample, rs_shape.state)
    elif algorithm.hooks.approximation is not None:
        lowered["approximation"] = lower(approximate, 0, rs_shape.state)
    val_args = ()
    if validation_data is not None:
        if algorithm.hooks.point is None:
            raise ValueError(f"method {fit.method!r} has no point estimate to validate: pass validation_data=None")
        val_args = tuple(place.put(a) for a in validation_batches(*validation_data))
        score = validation_error(model, int(validation_data[0].shape[0]))
        lowered["val"] = lower(lambda s, *a: score(algorithm.hooks.point(s), *a), 0, rs_shape.state, *val_args)
    programs = compile_all(lowered)
    if later is not None:
        programs["chunk"] = _in_background(later.compile)
    return fit, programs, val_args


def _in_background(compile_program):
    """A program compiled in a background thread: called like the program, the first call waits
    for the compile."""
    pool = ThreadPoolExecutor(1)
    future = pool.submit(compile_program)
    pool.shutdown(wait=False)
    return lambda *args: future.result()(*args)


def _start(fit: _Fit, programs, model, x, y, seed, options, checkpoint, resume):
    """The state to drive from: ``init``'s, or the newest checkpoint's when resuming. Returns
    ``(rs, start_unit, pieces, val_log, checkpointer)``."""
    rs0, start_unit, pieces, val_log, checkpointer = programs["init"](fit.data), 0, [], [], None
    if checkpoint is not None:
        if not resume:
            remove(os.fspath(checkpoint.directory))
        checkpointer = Checkpointer(checkpoint, fingerprint(fit.method, seed, options, x, y, fit.chunk_size, model=model))
        if resume and checkpointer.latest() is not None:
            row_shape = _row_shape(fit.plan, fit.rs_shape, fit.data)
            rs0, pieces, start_unit, restored_log, _ = checkpointer.restore(
                jax.tree_util.tree_structure(rs0), jax.tree_util.tree_structure(row_shape)
            )
            val_log.extend(restored_log)
    return fit.place.arrange(rs0, fit.shardings), start_unit, pieces, val_log, checkpointer
