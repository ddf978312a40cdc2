"""Checkpoints of a running fit, and stopping cleanly on Ctrl-C / SIGTERM.

The runner (:mod:`bnnpp.inference.runner`) saves, at the end of a compiled chunk, everything a
fit needs to continue — the runner's state (the algorithm's parameters and optimiser state,
the step counter, the epoch's row permutation, any PRNG key the algorithm carries), the
per-step records and kept draws so far, the validation log and the index of the next chunk —
with orbax-checkpoint (atomic per checkpoint; the last ``keep`` are kept). Resuming restores
them and runs the remaining chunks: chunk boundaries and every key are functions of the step
index, so on the same machine the final state is bit-identical to an uninterrupted run.

A checkpoint belongs to one configuration: its ``fingerprint`` (method, seed, options, data
shapes and a hash of the data, chunk size) is stored with it, and resuming with another raises
a one-line ``ValueError``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Checkpointer", "Checkpointing", "TrainingInterrupted", "fingerprint", "interruptible", "remove"]

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
"""The shell's exit status for a process stopped by each signal (128 + signal number)."""


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped at the end of a chunk on SIGINT (Ctrl-C) or SIGTERM.

    Attributes:
        signum: the signal; exit_code: 130 (SIGINT) or 143 (SIGTERM).
        step: steps done when it stopped.
        checkpoint_dir: where the checkpoint to resume from was written, or ``None`` when the
            fit was not checkpointing.
    """

    def __init__(self, signum: int, step: int, checkpoint_dir: str | None):
        self.signum, self.step, self.checkpoint_dir = signum, step, checkpoint_dir
        self.exit_code = EXIT_CODES.get(signum, 128 + int(signum))
        name = signal.Signals(signum).name
        where = f"; checkpoint in {checkpoint_dir}" if checkpoint_dir else " (no checkpoint: pass checkpoint_dir to resume)"
        super().__init__(f"{name}: training stopped after step {step}{where}")


@dataclass(frozen=True)
class Checkpointing:
    """When and where a fit saves checkpoints.

    Attributes:
        directory: the checkpoint folder (created).
        every_steps: save after the chunk in which this many steps have passed since the last
            save (``None``: not by steps).
        every_minutes: save after the chunk in which this many minutes have passed (``None``:
            not by time). A checkpoint is also written when a signal stops training.
        keep: how many of the latest checkpoints to keep.
    """

    directory: str
    every_steps: int | None = None
    every_minutes: float | None = 10.0
    keep: int = 2

    def __post_init__(self):
        if not isinstance(self.directory, (str, os.PathLike)) or not os.fspath(self.directory):
            raise ValueError("checkpoint_dir must be a folder path")
        for name in ("every_steps", "keep"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
                raise ValueError(f"checkpoint {name} must be an integer ≥ 1, got {v!r}")
        v = self.every_minutes
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
            raise ValueError(f"checkpoint every_minutes must be a positive number, got {v!r}")


def fingerprint(method: str, seed: int, options: dict, x: np.ndarray, y: np.ndarray, chunk_size: int) -> dict:
    """What a checkpoint must agree with to be resumed: JSON-safe."""
    digest = hashlib.sha256()
    for a in (x, y):
        a = np.ascontiguousarray(a)
        digest.update(str((a.shape, a.dtype.str)).encode())
        digest.update(a.tobytes())
    recorded = {k: v for k, v in options.items() if isinstance(v, (bool, int, float, str, type(None), list))}
    return {"method": method, "seed": int(seed), "options": recorded, "data": digest.hexdigest(), "chunk_size": int(chunk_size)}


def _leaves(prefix: str, tree) -> tuple[dict[str, np.ndarray], list[list]]:
    """Non-empty leaves as ``{prefix_i: array}`` (orbax refuses empty arrays) and every leaf's
    (shape, dtype) so that empty ones can be rebuilt."""
    saved, layout = {}, []
    for i, leaf in enumerate(jax.tree_util.tree_leaves(tree)):
        arr = np.asarray(leaf)
        layout.append([list(arr.shape), arr.dtype.str])
        if arr.size:
            saved[f"{prefix}_{i:04d}"] = arr
    return saved, layout


def _rebuild(prefix: str, treedef, layout: list[list], saved: dict) -> Any:
    leaves = []
    for i, (shape, dtype) in enumerate(layout):
        key = f"{prefix}_{i:04d}"
        leaves.append(np.asarray(saved[key]) if key in saved else np.zeros(shape, np.dtype(dtype)))
    return jax.tree_util.tree_unflatten(treedef, leaves)


class Checkpointer:
    """Saves and restores a fit's progress (see the module docstring).

    Args:
        config: :class:`Checkpointing`.
        fingerprint: from :func:`fingerprint`.
    """

    def __init__(self, config: Checkpointing, fingerprint: dict):
        import orbax.checkpoint as ocp

        self._ocp = ocp
        self.config = config
        self.directory = os.path.abspath(os.fspath(config.directory))
        self.fingerprint = fingerprint
        self._manager_ = None  # made on first use: a fit that never checkpoints leaves no folder
        self._last_time = time.monotonic()
        self._last_step = 0

    @property
    def _manager(self):
        if self._manager_ is None:
            ocp = self._ocp
            os.makedirs(self.directory, exist_ok=True)
            self._manager_ = ocp.CheckpointManager(
                self.directory,
                options=ocp.CheckpointManagerOptions(max_to_keep=self.config.keep, enable_async_checkpointing=False),
            )
        return self._manager_

    def due(self, step: int) -> bool:
        """Whether a checkpoint is due after ``step`` steps (by steps or by time)."""
        c = self.config
        if c.every_steps is not None and step - self._last_step >= c.every_steps:
            return True
        return c.every_minutes is not None and time.monotonic() - self._last_time >= 60 * c.every_minutes

    def save(self, step: int, next_unit: int, rs, pieces: list, val_log: list) -> None:
        """Write one checkpoint: the runner state ``rs``, the row pieces so far, the next unit."""
        rows = jax.tree_util.tree_map(lambda *a: np.concatenate(a), *pieces) if pieces else None
        state_saved, state_layout = _leaves("state", jax.device_get(rs))
        rows_saved, rows_layout = _leaves("rows", rows) if rows is not None else ({}, [])
        meta = {
            "fingerprint": self.fingerprint, "step": int(step), "next_unit": int(next_unit), "state_layout": state_layout,
            "rows_layout": rows_layout, "has_rows": rows is not None, "val_log": [[int(s), float(e)] for s, e in val_log],
        }
        ocp = self._ocp
        self._manager.save(
            int(step),
            args=ocp.args.Composite(arrays=ocp.args.StandardSave({**state_saved, **rows_saved, "step": np.int64(step)}),
                                    meta=ocp.args.JsonSave(meta)),
            force=True,
        )
        self._manager.wait_until_finished()
        self._last_time, self._last_step = time.monotonic(), step

    def latest(self) -> int | None:
        """The step of the newest checkpoint, or ``None``."""
        if not os.path.isdir(self.directory):
            return None
        return self._manager.latest_step()

    def restore(self, rs_treedef, rows_treedef) -> tuple[Any, list, int, list, int]:
        """The newest checkpoint as ``(rs, pieces, next_unit, val_log, step)``.

        Raises:
            ValueError: the checkpoint belongs to another configuration, or is unreadable.
        """
        ocp = self._ocp
        step = self.latest()
        try:
            restored = self._manager.restore(
                step, args=ocp.args.Composite(arrays=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore())
            )
        except Exception as e:  # orbax raises many types for a damaged folder
            raise ValueError(f"cannot read the checkpoint in {self.directory} ({type(e).__name__}: {e}); delete it to start over") from None
        meta, arrays = restored["meta"], restored["arrays"]
        if meta.get("fingerprint") != self.fingerprint:
            theirs = meta.get("fingerprint") or {}
            differ = sorted(k for k in set(theirs) | set(self.fingerprint) if theirs.get(k) != self.fingerprint.get(k))
            raise ValueError(
                f"the checkpoint in {self.directory} is from another fit (different {', '.join(differ)}); "
                "resume with the same method, options, seed and data, or delete the folder to start over"
            )
        rs = _rebuild("state", rs_treedef, meta["state_layout"], arrays)
        rs = jax.tree_util.tree_map(jnp.asarray, rs)
        pieces = [_rebuild("rows", rows_treedef, meta["rows_layout"], arrays)] if meta["has_rows"] else []
        self._last_time, self._last_step = time.monotonic(), int(meta["step"])
        return rs, pieces, int(meta["next_unit"]), [tuple(v) for v in meta["val_log"]], int(meta["step"])


@contextlib.contextmanager
def interruptible() -> Iterator[list[int]]:
    """Catch SIGINT and SIGTERM while training: yields a list that receives the signal
    number; the loop checks it after each chunk and stops there. A second signal acts
    immediately (the previous handlers are back after the first). Outside the main thread
    (where handlers cannot be installed) nothing is caught."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum, frame):
        received.append(signum)
        for s, h in previous.items():  # a second signal is not deferred
            signal.signal(s, h)

    for s in previous:
        signal.signal(s, handler)
    try:
        yield received
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def remove(directory: str) -> None:
    """Delete a checkpoint folder (after the fit it belongs to finished)."""
    shutil.rmtree(directory, ignore_errors=True)
