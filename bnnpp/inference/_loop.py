"""The shared optimisation driver: one ``lax.scan`` chunk compiled once, run chunk after chunk
with a progress bar updated between chunks (no host round-trip per step)."""

from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

__all__ = [
    "LoopResult", "all_finite", "compile_all", "default_chunk_size", "drive", "lower_chunk", "lower_guarded", "run_chunked",
]


@dataclass(frozen=True)
class LoopResult:
    """Outcome of :func:`run_chunked`.

    Attributes:
        state: the last state whose loss and parameters were finite.
        losses: ``(steps_run,)`` loss per step, or ``(steps_run, k)`` when the step returns
            several terms (e.g. Bayes-by-Backprop's loss, NLL, KL); the last row is the
            non-finite one if stopped.
        steps_run: steps attempted (``num_steps`` unless stopped early).
        stopped_at: index of the first non-finite step, or ``None``.
        compile_seconds: compile seconds reported by the caller (the chunk alone, or every program of the fit).
        run_seconds: seconds spent running chunks.
    """

    state: Any
    losses: np.ndarray
    steps_run: int
    stopped_at: int | None
    compile_seconds: float
    run_seconds: float


def all_finite(tree) -> jnp.ndarray:
    """True when every floating-point leaf of ``tree`` is finite (a scalar bool array)."""
    leaves = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(leaf.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


def _mean_loss(losses: np.ndarray) -> dict:
    return {"loss": f"{np.nanmean(losses):.4g}"}


def default_chunk_size(num_steps: int, updates: int = 20, minimum: int = 10) -> int:
    """Steps per compiled chunk so that the bar updates about ``updates`` times, but at least
    ``minimum`` steps (or all of them): every chunk call returns a fresh copy of the state and
    checks it, which on a 2×1200 net cost about 30 ms, as much as half a step, so a 20-step
    fit in chunks of one step ran 1.66× slower per step (benchmarks/probes.py)."""
    return max(1, min(num_steps, max(minimum, math.ceil(num_steps / updates))))


def compile_all(lowered: dict[str, Any]) -> dict[str, Any]:
    """Compile several lowered programs at once, one thread each, so that they can overlap
    on a multi-core machine. Compilation dominates small BNN fits (shared/PERFORMANCE-NOTES.md);
    on the 2-core CI machine this saved about 10% of the compile time of ADVI's init + chunk
    (5.4 s against 6.0 s, two runs each), because XLA already uses more than one core.

    Returns:
        The compiled programs under the same keys.
    """
    with ThreadPoolExecutor(max_workers=max(1, min(len(lowered), os.cpu_count() or 1))) as pool:
        futures = {k: pool.submit(v.compile) for k, v in lowered.items()}
        return {k: f.result() for k, f in futures.items()}


def _abstract(tree):
    return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), tree)


def lower_chunk(
    step: Callable[..., tuple[Any, jnp.ndarray]],
    state: Any,
    num_steps: int,
    chunk_size: int,
    consts: Any = None,
    *,
    guard: str = "step",
):
    """Lower (trace, not compile) one training chunk: ``chunk_size`` steps of ``step`` in a
    ``lax.scan``. ``state`` may be concrete or abstract (``jax.ShapeDtypeStruct`` leaves).

    ``consts`` (a pytree, e.g. the training data) are arrays the step reads but never changes:
    with them ``step(state, consts)`` is called and the chunk takes them as a third argument,
    ``(carry, start, consts)``. Arrays a step closes over are instead embedded in the program
    as constants: 20,000 MNIST rows made 125 MB of HLO and tripled the compile time.

    The compiled chunk maps ``((state, stopped, bad_step), start) -> (carry, losses)``: steps
    at index ≥ ``num_steps`` are masked, so every chunk has the same shape and the chunk
    compiles once.

    ``guard="step"``: a step whose loss or new state is not finite is not applied: ``stopped``
    becomes true, ``bad_step`` records its index and the previous state is kept. Checking the
    whole new state and selecting between two states on every step costs 20–30% of a step
    on a 2×400 MNIST MLP (benchmarks/README.md, speed).
    ``guard="loss"``: only the loss is checked per step, and the whole state once at the
    end of the chunk; a chunk that fails either check reports ``stopped`` but its state is
    not usable: :func:`drive` re-runs it from its input with a ``guard="step"`` chunk (see
    :func:`lower_guarded`), so the outcome is the same as with ``guard="step"``.
    """
    if guard not in ("step", "loss"):
        raise ValueError(f"guard must be 'step' or 'loss', got {guard!r}")
    state = _abstract(state)
    extra = () if consts is None else (_abstract(consts),)
    loss_info = jax.eval_shape(step, state, *extra)[1]  # a scalar loss, or a vector of loss terms

    def chunk(carry, start, *const):
        def body(c, i):
            st, stopped, bad_step = c
            active = jnp.logical_and(~stopped, start + i < num_steps)

            def do(s):
                new, loss = step(s, *const)
                ok = jnp.all(jnp.isfinite(loss))
                return new, loss, jnp.logical_and(ok, all_finite(new)) if guard == "step" else ok

            def skip(s):
                return s, jnp.full(loss_info.shape, jnp.nan, loss_info.dtype), jnp.array(True)

            new, loss, ok = jax.lax.cond(active, do, skip, st)
            bad = jnp.logical_and(active, ~ok)
            if guard == "step":
                new = jax.tree_util.tree_map(lambda a, b: jnp.where(bad, b, a), new, st)
            bad_step = jnp.where(bad, start + i, bad_step)
            return (new, jnp.logical_or(stopped, bad), bad_step), loss

        carry, losses = jax.lax.scan(body, carry, jnp.arange(chunk_size, dtype=jnp.int32))
        if guard == "loss":  # one whole-state check per chunk instead of one per step
            st, stopped, bad_step = carry
            broken = ~all_finite(st)
            carry = (st, jnp.logical_or(stopped, broken), jnp.where(broken & (bad_step < 0), start, bad_step))
        return carry, losses

    carry = (state, jax.ShapeDtypeStruct((), jnp.bool_), jax.ShapeDtypeStruct((), jnp.int32))
    return jax.jit(chunk).lower(carry, jax.ShapeDtypeStruct((), jnp.int32), *extra)


def lower_guarded(
    step: Callable[..., tuple[Any, jnp.ndarray]], state: Any, num_steps: int, chunk_size: int, consts: Any = None
):
    """The fast training chunk and its fallback: returns ``(lowered, recover)``, where
    ``lowered`` is :func:`lower_chunk` with ``guard="loss"`` and ``recover()`` lowers and
    compiles the exact ``guard="step"`` chunk (only called, once, if a chunk fails; pass it
    to :func:`drive`)."""
    lowered = lower_chunk(step, state, num_steps, chunk_size, consts, guard="loss")

    def recover():
        return lower_chunk(step, state, num_steps, chunk_size, consts, guard="step").compile()

    return lowered, recover


def drive(
    compiled_chunk,
    state: Any,
    num_steps: int,
    chunk_size: int,
    *,
    progress: bool,
    desc: str,
    postfix: Callable[[np.ndarray], dict] = _mean_loss,
    compile_seconds: float = 0.0,
    after_chunk: Callable[[Any], dict] | None = None,
    consts: Any = None,
    recover: Callable[[], Any] | None = None,
) -> LoopResult:
    """Run a chunk compiled from :func:`lower_chunk` until ``num_steps`` steps are done or a
    step is not finite; the tqdm bar (``progress``) advances once per chunk with ``postfix``
    of that chunk's losses. ``after_chunk(state) -> dict``, if given, runs after every chunk
    on the last finite state (e.g. a compiled validation pass) and its dict joins the postfix.
    ``consts`` are passed to a chunk lowered with them. ``recover`` (from
    :func:`lower_guarded`) gives the exact per-step-guarded chunk, which re-runs a chunk that
    failed; its compile time is added to ``compile_seconds``. Warns with the step index
    when training stops early."""
    carry = (state, jnp.array(False), jnp.array(-1, jnp.int32))
    n_chunks = math.ceil(num_steps / chunk_size)
    pieces: list[np.ndarray] = []
    t0 = time.perf_counter()
    with tqdm(total=num_steps, desc=desc, disable=not progress, leave=False, dynamic_ncols=True) as bar:
        for c in range(n_chunks):
            start = c * chunk_size
            args = (jnp.int32(start), *(() if consts is None else (consts,)))
            carry_in = carry  # not donated, so still valid after the call
            carry, losses = compiled_chunk(carry, *args)
            if recover is not None and bool(carry[1]):
                t_c = time.perf_counter()
                careful = recover()
                recompile = time.perf_counter() - t_c
                compile_seconds += recompile
                t0 += recompile  # run_seconds counts running only
                carry, losses = careful(carry_in, *args)
            losses = np.asarray(losses)[: max(0, min(chunk_size, num_steps - start))]
            stopped = bool(carry[1])
            if stopped:
                losses = losses[: int(carry[2]) - start + 1]
            pieces.append(losses)
            bar.update(len(losses))
            finite = losses[np.all(np.isfinite(losses.reshape(len(losses), -1)), axis=1)]
            shown = postfix(finite) if finite.size else {}
            if after_chunk is not None:
                shown = {**shown, **after_chunk(carry[0])}
            if shown:
                bar.set_postfix(shown, refresh=False)
            if stopped:
                break
    run_seconds = time.perf_counter() - t0
    all_losses = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
    stopped_at = int(carry[2]) if bool(carry[1]) else None
    if stopped_at is not None:
        warnings.warn(
            f"{desc}: the loss or parameters became NaN/inf at step {stopped_at}; training stopped there and "
            f"kept the parameters after step {stopped_at - 1}. Lower the learning rate or use a tighter prior.",
            RuntimeWarning,
            stacklevel=3,
        )
    return LoopResult(carry[0], all_losses, len(all_losses), stopped_at, compile_seconds, run_seconds)


def run_chunked(
    step: Callable[[Any], tuple[Any, jnp.ndarray]],
    state: Any,
    num_steps: int,
    *,
    progress: bool,
    desc: str,
    chunk_size: int | None = None,
    postfix: Callable[[np.ndarray], dict] = _mean_loss,
) -> LoopResult:
    """Lower, compile and drive a training chunk in one call (see :func:`lower_chunk` and
    :func:`drive`); ``chunk_size`` defaults to ``num_steps / 20``."""
    chunk_size = chunk_size or default_chunk_size(num_steps)
    t0 = time.perf_counter()
    lowered, recover = lower_guarded(step, state, num_steps, chunk_size)
    compiled = lowered.compile()
    return drive(
        compiled, state, num_steps, chunk_size, progress=progress, desc=desc, postfix=postfix,
        compile_seconds=time.perf_counter() - t0, recover=recover,
    )
