"""Deprecated: bnnpp 0.1's chunked training loop. The runner (:mod:`bnnpp.inference.runner`)
replaced it; :func:`run_chunked` and :func:`lower_guarded` keep working for one release on top
of the runner, for code that drove a bare ``step(state) -> (state, loss)``."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bnnpp.inference import runner
from bnnpp.inference.algorithm import Algorithm, Keys, RunSpec
from bnnpp.inference.collect import warn_nan_stop

__all__ = ["LoopResult", "lower_guarded", "run_chunked"]

warnings.warn(
    "bnnpp.inference._loop is deprecated: iterative methods are Algorithms driven by bnnpp.inference.runner",
    DeprecationWarning,
    stacklevel=2,
)


@dataclass(frozen=True)
class LoopResult:
    """Outcome of :func:`run_chunked`: the last finite ``state``, ``losses`` per step (the last
    one the non-finite one if stopped), ``steps_run``, ``stopped_at`` (or ``None``) and seconds."""

    state: Any
    losses: np.ndarray
    steps_run: int
    stopped_at: int | None
    compile_seconds: float
    run_seconds: float


class _Info(NamedTuple):
    loss: jax.Array


def _plan(step: Callable, state: Any, num_steps: int):
    algorithm = Algorithm(
        lambda key, data: state,
        lambda key, s, batch: (lambda out: (out[0], _Info(out[1])))(step(s)),
        lambda key, s, n: {},
        RunSpec(num_steps=num_steps),
    )
    zero = jnp.zeros(2, jnp.uint32)
    plan = runner._plan(algorithm, Keys(zero, zero, zero, zero), 1)
    data = (jnp.zeros((1,)), jnp.zeros((1,)))
    return plan, data, runner.RunState(state, jnp.zeros((), jnp.int32), jnp.zeros((0,), jnp.int32))


def lower_guarded(step: Callable, state: Any, num_steps: int, chunk_size: int, consts: Any = None):
    """The fast training chunk of ``step(state) -> (state, loss)`` and a ``recover()`` that
    compiles the exact per-step-guarded one: ``(lowered, recover)``."""
    plan, data, rs = _plan(step, state, num_steps)
    lowered = runner._lower_chunk(plan, rs, chunk_size, data, "loss")
    return lowered, lambda: runner._lower_chunk(plan, rs, chunk_size, data, "step").compile()


def run_chunked(
    step: Callable, state: Any, num_steps: int, *, progress: bool, desc: str, chunk_size: int | None = None, postfix: Callable | None = None
) -> LoopResult:
    """Run ``step(state) -> (state, loss)`` ``num_steps`` times in compiled chunks with the
    runner's NaN guard; warns with the step index when training stops early."""
    chunk_size = chunk_size or runner.default_chunk_size(num_steps)
    plan, data, rs = _plan(step, state, num_steps)
    t0 = time.perf_counter()
    lowered, recover = lower_guarded(step, state, num_steps, chunk_size)
    compiled = lowered.compile()
    compile_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    rs, rows, units_run, bad_unit, _ = runner._drive(
        compiled,
        recover,
        rs,
        data,
        num_steps,
        chunk_size,
        progress=progress,
        desc=desc,
        postfix=runner._mean_loss,
        after_chunk=None,
        total_steps=lambda u: u,
    )
    if bad_unit is not None:
        warn_nan_stop(desc, bad_unit, stacklevel=2)
    return LoopResult(rs.state, np.asarray(rows[0].loss), units_run, bad_unit, compile_seconds, time.perf_counter() - t0)
