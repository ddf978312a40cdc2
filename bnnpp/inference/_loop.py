"""The shared optimisation driver: one ``lax.scan`` chunk compiled once, run chunk after chunk
with a progress bar updated between chunks (no host round-trip per step)."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

__all__ = ["LoopResult", "run_chunked"]


@dataclass(frozen=True)
class LoopResult:
    """Outcome of :func:`run_chunked`.

    Attributes:
        state: the last state whose loss and parameters were finite.
        losses: ``(steps_run,)`` loss per step (the last one is the non-finite loss if stopped).
        steps_run: steps attempted (``num_steps`` unless stopped early).
        stopped_at: index of the first non-finite step, or ``None``.
        compile_seconds: seconds to compile the chunk.
        run_seconds: seconds spent running chunks.
    """

    state: Any
    losses: np.ndarray
    steps_run: int
    stopped_at: int | None
    compile_seconds: float
    run_seconds: float


def _all_finite(tree) -> jnp.ndarray:
    leaves = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(leaf.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.array(True)


def default_chunk_size(num_steps: int, updates: int = 20) -> int:
    """Steps per compiled chunk so that the bar updates about ``updates`` times."""
    return max(1, math.ceil(num_steps / updates))


def run_chunked(
    step: Callable[[Any], tuple[Any, jnp.ndarray]],
    state: Any,
    num_steps: int,
    *,
    progress: bool,
    desc: str,
    chunk_size: int | None = None,
    postfix: Callable[[np.ndarray], dict] = lambda losses: {"loss": f"{np.nanmean(losses):.4g}"},
) -> LoopResult:
    """Run ``step`` ``num_steps`` times inside compiled ``lax.scan`` chunks.

    Args:
        step: pure ``state -> (new_state, loss)``; any randomness lives in the state.
        state: initial state (a pytree).
        num_steps: total number of steps.
        progress: show a tqdm bar, updated once per chunk.
        desc: bar label.
        chunk_size: steps per chunk (default: ``num_steps / 20``). Every chunk has the same
            length — the tail of the last one is masked — so the chunk compiles exactly once.
        postfix: maps a chunk's losses to the bar's postfix.

    A step whose loss or new state is not finite is not applied: training stops, the previous
    (finite) state is kept and a warning names the step.
    """
    chunk_size = chunk_size or default_chunk_size(num_steps)
    loss_dtype = jax.eval_shape(step, state)[1].dtype

    def chunk(carry, start):
        def body(c, i):
            st, stopped, bad_step = c
            active = jnp.logical_and(~stopped, start + i < num_steps)

            def do(s):
                new, loss = step(s)
                return new, loss, jnp.logical_and(jnp.isfinite(loss), _all_finite(new))

            def skip(s):
                return s, jnp.full((), jnp.nan, loss_dtype), jnp.array(True)

            new, loss, ok = jax.lax.cond(active, do, skip, st)
            bad = jnp.logical_and(active, ~ok)
            st = jax.tree_util.tree_map(lambda a, b: jnp.where(bad, b, a), new, st)
            bad_step = jnp.where(bad, start + i, bad_step)
            return (st, jnp.logical_or(stopped, bad), bad_step), loss

        return jax.lax.scan(body, carry, jnp.arange(chunk_size, dtype=jnp.int32))

    carry = (state, jnp.array(False), jnp.array(-1, jnp.int32))
    t0 = time.perf_counter()
    compiled = jax.jit(chunk).lower(carry, jnp.int32(0)).compile()
    compile_seconds = time.perf_counter() - t0

    n_chunks = math.ceil(num_steps / chunk_size)
    pieces: list[np.ndarray] = []
    t0 = time.perf_counter()
    with tqdm(total=num_steps, desc=desc, disable=not progress, leave=False, dynamic_ncols=True) as bar:
        for c in range(n_chunks):
            start = c * chunk_size
            carry, losses = compiled(carry, jnp.int32(start))
            losses = np.asarray(losses)[: max(0, min(chunk_size, num_steps - start))]
            stopped = bool(carry[1])
            if stopped:
                losses = losses[: int(carry[2]) - start + 1]
            pieces.append(losses)
            bar.update(len(losses))
            finite = losses[np.isfinite(losses)]
            if finite.size:
                bar.set_postfix(postfix(finite), refresh=False)
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
