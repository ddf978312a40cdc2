"""Checkpoints of a running fit, and stopping cleanly on Ctrl-C / SIGTERM.

The runner (:mod:`bnnpp.inference.runner`) saves, at the end of a compiled chunk, everything a
fit needs to continue — the runner's state (the algorithm's parameters and optimiser state,
the step counter, the epoch's row permutation, any PRNG key the algorithm carries), the
per-step records and kept draws so far, the validation log and the index of the next chunk —
with orbax-checkpoint (atomic per checkpoint; the last ``keep`` are kept). Resuming restores
them and runs the remaining chunks: chunk boundaries and every key are functions of the step
index, so on the same machine the final state is bit-identical to an uninterrupted run.

A checkpoint belongs to one configuration: its ``fingerprint`` (method, seed, options, the
model — a bnnpp network's ``spec()``, else the function's name and its latent sites' shapes —
data shapes and a hash of the data, chunk size) is stored with it, and resuming with another
raises a one-line ``ValueError`` naming what differs. A SHA-256 digest over the checkpoint's
metadata and arrays is stored with them: a checkpoint edited by hand (its step, its next chunk)
or damaged is refused, never resumed. Once orbax has written a checkpoint, the size and SHA-256
of every file in its ``arrays/`` folder go to ``bnnpp_checksums.json`` in the step's folder
(written atomically); resuming checks them before orbax reads anything, so a truncated, changed
or missing array file is a one-line ``ValueError`` naming the file, never a storage-layer error
(a checkpoint without that file is checked by its digest once orbax has read it, and an error
orbax raises reading it is one line too). A checkpoint that cannot be written (a full disk) is
a one-line warning and the fit goes on; the previous checkpoint stays the one to resume from.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "Checkpointer",
    "Checkpointing",
    "TrainingInterrupted",
    "describe_model",
    "differences",
    "fingerprint",
    "interruptible",
    "remove",
]

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
        if os.path.lexists(self.directory) and not os.path.isdir(self.directory):
            raise ValueError(f"checkpoint_dir {os.fspath(self.directory)} is a file, not a folder: remove it or choose another folder")
        for name in ("every_steps", "keep"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
                raise ValueError(f"checkpoint {name} must be an integer ≥ 1, got {v!r}")
        v = self.every_minutes
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
            raise ValueError(f"checkpoint every_minutes must be a positive number, got {v!r}")


def _json(value):
    """``value`` as JSON gives it back (tuples as lists): what a stored fingerprint compares to."""
    return json.loads(json.dumps(value, default=repr))


def describe_model(model, x=None, y=None) -> dict:
    """What of ``model`` a checkpoint must agree with, JSON-safe: a bnnpp network's (or a
    wrapped one's) ``spec()`` — architecture, activation, prior, likelihood, standardisation —
    else the function's qualified name, the arguments a ``functools.partial`` binds, and, with
    ``x`` and ``y``, the shapes of its latent sites (an abstract trace)."""
    import functools

    base = model
    while not callable(getattr(base, "spec", None)) and callable(getattr(base, "model", None)):
        base = base.model  # bnnpp's wrappers (a renamed observed site) hold the user's model as .model
    observed = getattr(model, "observed", None)
    out: dict[str, Any] = {} if observed is None else {"observed": str(observed)}
    if callable(getattr(base, "spec", None)):
        out["spec"] = _json(base.spec())
        return out
    fn = base
    if isinstance(fn, functools.partial):
        out["args"] = _json([fn.args, fn.keywords])
        fn = fn.func
    out["function"] = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"
    if x is not None and y is not None:
        from bnnpp.introspection import check_model

        out["sites"] = {k: list(v.shape) for k, v in sorted(check_model(model, x, y).items())}
    return out


def fingerprint(method: str, seed: int, options: dict, x: np.ndarray, y: np.ndarray, chunk_size: int, model=None) -> dict:
    """What a checkpoint must agree with to be resumed (JSON-safe): method, seed, the options
    (tuples as lists), the model (:func:`describe_model`; ``None``: not checked), the data's
    shapes, dtypes and SHA-256, and the chunk size."""
    digest = hashlib.sha256()
    for a in (x, y):
        a = np.ascontiguousarray(a)
        digest.update(str((a.shape, a.dtype.str)).encode())
        digest.update(a.tobytes())
    recorded = {k: _json(v) for k, v in options.items() if isinstance(v, (bool, int, float, str, type(None), list, tuple))}
    out = {"method": method, "seed": int(seed), "options": recorded, "data": digest.hexdigest(), "chunk_size": int(chunk_size)}
    if model is not None:
        out["model"] = describe_model(model, x, y)
    return _json(out)


def _flat(value, prefix: str = "") -> dict[str, Any]:
    """A nested dict as ``{"a.b": leaf}``."""
    if isinstance(value, dict) and value:
        out = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def differences(stored: dict, current: dict) -> str:
    """The fields where two fingerprints differ, as ``"model.spec.activation: \"tanh\" in the
    checkpoint, \"relu\" now; ..."`` (the first three, and how many more)."""
    a, b = _flat(stored), _flat(current)
    keys = [k for k in sorted(set(a) | set(b)) if json.dumps(a.get(k), sort_keys=True) != json.dumps(b.get(k), sort_keys=True)]
    shown = []
    for k in keys[:3]:
        if k == "data":
            shown.append("data: another data set (its SHA-256 differs)")
        else:
            shown.append(
                f"{k}: {_short(a.get(k)) if k in a else 'absent'} in the checkpoint, {_short(b.get(k)) if k in b else 'absent'} now"
            )
    if len(keys) > 3:
        shown.append(f"and {len(keys) - 3} more")
    return "; ".join(shown)


def _digest(meta: dict, arrays: dict) -> str:
    """SHA-256 over the metadata (without its digest) and every array (name, shape, dtype, bytes)."""
    h = hashlib.sha256(json.dumps({k: v for k, v in meta.items() if k != "digest"}, sort_keys=True).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(np.asarray(arrays[name]))
        h.update(f"{name}{a.shape}{a.dtype.str}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


CHECKSUMS = "bnnpp_checksums.json"
"""The file, in a checkpoint's step folder, recording the size and SHA-256 of each array file."""

_ARRAYS = "arrays"  # the orbax item holding the arrays: a folder of the step folder


def _sha256(path: str) -> str:
    """The SHA-256 of a file's bytes, as hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _array_files(step_dir: str) -> list[str]:
    """The files under ``step_dir/arrays``, as sorted ``/``-separated paths relative to ``step_dir``."""
    out = []
    for root, _, names in os.walk(os.path.join(step_dir, _ARRAYS)):
        for name in names:
            out.append(os.path.relpath(os.path.join(root, name), step_dir).replace(os.sep, "/"))
    return sorted(out)


def _write_checksums(step_dir: str) -> None:
    """Record the size and SHA-256 of every array file of a written checkpoint in its
    :data:`CHECKSUMS` (a temporary file renamed into place). Returns ``None``; raises ``OSError``
    when the folder cannot be read or written (the temporary file is removed)."""
    files = {}
    for rel in _array_files(step_dir):
        path = os.path.join(step_dir, rel)
        files[rel] = {"bytes": os.path.getsize(path), "sha256": _sha256(path)}
    target = os.path.join(step_dir, CHECKSUMS)
    tmp = f"{target}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump({"format": 1, "files": files}, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _file_damage(step_dir: str) -> tuple[bool, str | None]:
    """Check a checkpoint's array files against its :data:`CHECKSUMS`, reading no file through
    orbax. Returns ``(recorded, problem)``: ``recorded`` is whether the checkpoint has the record
    (without it nothing is checked here), ``problem`` the first file
    that does not match, as ``"arrays/d/… is missing"``, ``"… has 10 bytes, 1006 expected"`` or
    ``"… does not match its checksum"``, or ``None`` when every file matches."""
    path = os.path.join(step_dir, CHECKSUMS)
    if not os.path.lexists(path):
        return False, None
    try:
        with open(path) as f:
            files = json.load(f)["files"]
        items = sorted((str(rel), int(v["bytes"]), str(v["sha256"])) for rel, v in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return True, f"{CHECKSUMS} cannot be read"
    if not items:
        return True, f"{CHECKSUMS} lists no array file"
    for rel, size, _ in items:  # sizes first: a truncated file is named without hashing the others
        full = os.path.join(step_dir, *rel.split("/"))
        if not os.path.isfile(full):
            return True, f"{rel} is missing"
        actual = os.path.getsize(full)
        if actual != size:
            return True, f"{rel} has {actual} bytes, {size} expected"
    for rel, _, digest in items:
        try:
            actual_digest = _sha256(os.path.join(step_dir, *rel.split("/")))
        except OSError as e:
            return True, f"{rel} cannot be read ({e.strerror or type(e).__name__})"
        if actual_digest != digest:
            return True, f"{rel} does not match its checksum"
    return True, None


def _storage_error(e: BaseException, step_dir: str) -> str:
    """A one-line account of an error orbax or tensorstore raised reading a checkpoint: the file
    it names (relative to the step folder) and the last clause of the message, without the
    storage spec tensorstore appends. Returns at most about 200 characters."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    text = lines[0] if lines else type(e).__name__
    for tail in (" [tensorstore_spec=", " [source locations="):
        text = text.split(tail, 1)[0]
    prefix = os.path.abspath(step_dir) + os.sep
    named = [f for f in re.findall(r'local file "([^"]+)"', text) if not f.endswith(("/", os.sep))]
    if named:
        rel = named[-1][len(prefix) :] if named[-1].startswith(prefix) else named[-1]
        return f"{rel.replace(os.sep, '/')} cannot be read: {text.rsplit(': ', 1)[-1][:120]}"
    text = text.replace(prefix, "")
    return f"{type(e).__name__}: {text if len(text) <= 160 else text[:157] + '...'}"


def _closed_loop_report(unraisable) -> bool:
    """Whether an unraisable exception is a storage read finishing after orbax closed its event
    loop: ``RuntimeError: Event loop is closed`` raised in ``call_soon_threadsafe``."""
    exc, tb = unraisable.exc_value, unraisable.exc_traceback
    if not isinstance(exc, RuntimeError) or str(exc) != "Event loop is closed" or tb is None:
        return False
    while tb is not None:
        if tb.tb_frame.f_code.co_name == "call_soon_threadsafe":
            return True
        tb = tb.tb_next
    return False


class _QuietClosedLoop:
    """``sys.unraisablehook`` while orbax restores: drops the reports of
    :func:`_closed_loop_report` (when a read fails, the reads still in flight finish on
    tensorstore's threads after orbax closed its loop, each printing a traceback) and passes
    every other to the hook it replaced."""

    def __init__(self, previous):
        self.previous = previous

    def __call__(self, unraisable) -> None:
        if not _closed_loop_report(unraisable):
            self.previous(unraisable)


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
        self.saved_step: int | None = None  # the step of the last checkpoint this fit wrote

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

    def save(self, step: int, next_unit: int, rs, pieces: list, val_log: list) -> bool:
        """Write one checkpoint: the runner state ``rs``, the row pieces so far, the next unit.
        Returns whether it was written: when it cannot be (``OSError`` such as a full disk, or
        orbax's error) a one-line ``RuntimeWarning`` says so and the previous checkpoint stays."""
        rows = jax.tree_util.tree_map(lambda *a: np.concatenate(a), *pieces) if pieces else None
        state_saved, state_layout = _leaves("state", jax.device_get(rs))
        rows_saved, rows_layout = _leaves("rows", rows) if rows is not None else ({}, [])
        meta = {
            "fingerprint": self.fingerprint,
            "step": int(step),
            "next_unit": int(next_unit),
            "state_layout": state_layout,
            "rows_layout": rows_layout,
            "has_rows": rows is not None,
            "val_log": [[int(s), float(e)] for s, e in val_log],
        }
        arrays = {**state_saved, **rows_saved, "step": np.int64(step)}
        meta["digest"] = _digest(meta, arrays)
        ocp = self._ocp
        try:
            self._manager.save(
                int(step), args=ocp.args.Composite(arrays=ocp.args.StandardSave(arrays), meta=ocp.args.JsonSave(meta)), force=True
            )
            self._manager.wait_until_finished()
        except Exception as e:  # noqa: BLE001  (a full disk, a folder gone read-only: orbax raises several types)
            self._manager_ = None  # a fresh manager for the next save
            self._remove_partial()
            reason = getattr(e, "strerror", None) or (str(e).strip().splitlines() or [type(e).__name__])[-1]
            warnings.warn(f"checkpoint at step {step} not written: {reason}", RuntimeWarning, stacklevel=2)
            self._last_time = time.monotonic()  # try again when the next one is due, not after every chunk
            self._last_step = step
            return False
        try:
            _write_checksums(os.path.join(self.directory, str(int(step))))
        except OSError as e:  # the checkpoint stands: resuming checks it by its digest, as one written without checksums
            warnings.warn(
                f"checkpoint at step {step} written without its file checksums: {e.strerror or type(e).__name__}",
                RuntimeWarning,
                stacklevel=2,
            )
        self._last_time, self._last_step = time.monotonic(), step
        self.saved_step = step
        return True

    def _remove_partial(self) -> None:
        """Remove what a failed save left: orbax's temporary folders (``*.orbax-checkpoint-tmp*``)."""
        with contextlib.suppress(OSError):
            for name in os.listdir(self.directory):
                if "orbax-checkpoint-tmp" in name:
                    shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)

    def _close_manager(self) -> None:
        """Close the orbax manager (its threads and files) and forget it; a later use makes a new one."""
        manager, self._manager_ = self._manager_, None
        if manager is not None:
            with contextlib.suppress(Exception):
                manager.close()

    def _damaged(self, step: int, problem: str) -> str:
        """The one-line refusal of the damaged checkpoint of ``step``: the file and what is wrong
        with it, and the choices (an undamaged copy, the previous checkpoint when it is intact,
        or starting over). Returns the message."""
        where = os.path.join(self.directory, str(step))
        earlier = ""
        with contextlib.suppress(OSError):
            steps = sorted((int(n) for n in os.listdir(self.directory) if n.isdigit() and int(n) < step), reverse=True)
            if steps and _file_damage(os.path.join(self.directory, str(steps[0]))) == (True, None):
                earlier = f" or from its step {steps[0]} checkpoint (delete {where} first)"
        return (
            f"the checkpoint {where} is damaged ({problem}): resume from an undamaged copy of {self.directory}{earlier}, "
            f"or delete {self.directory} to start over"
        )

    def latest(self) -> int | None:
        """The step of the newest checkpoint, or ``None``."""
        if not os.path.isdir(self.directory):
            return None
        return self._manager.latest_step()

    def restore(self, rs_treedef, rows_treedef) -> tuple[Any, list, int, list, int]:
        """The newest checkpoint as ``(rs, pieces, next_unit, val_log, step)``.

        Raises:
            ValueError: the checkpoint belongs to another configuration, or is damaged or
                unreadable: one line naming the file (an array file that does not match its
                recorded checksum is found before orbax reads anything) and the choices.
        """
        ocp = self._ocp
        step = self.latest()
        where = os.path.join(self.directory, str(step))
        _, problem = _file_damage(where)
        if problem is not None:  # before orbax reads a byte: a damaged file never reaches the storage layer
            raise ValueError(self._damaged(step, problem))
        previous = sys.unraisablehook
        quiet = previous if isinstance(previous, _QuietClosedLoop) else _QuietClosedLoop(previous)
        sys.unraisablehook = quiet
        try:
            restored = self._manager.restore(step, args=ocp.args.Composite(arrays=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore()))
        except Exception as e:  # orbax raises many types for a damaged folder
            # the hook stays: reads still in flight report the closed loop after this returns
            self._close_manager()
            raise ValueError(self._damaged(step, _storage_error(e, where))) from None
        if sys.unraisablehook is quiet:
            sys.unraisablehook = previous
        meta, arrays = restored["meta"], restored["arrays"]
        if not isinstance(meta, dict) or "digest" not in meta:
            raise ValueError(
                f"the checkpoint {where} was written by an older bnnpp (no model record, no checksum): it cannot be checked "
                "against this fit; delete the folder to start over"
            )
        if _digest(meta, arrays) != meta["digest"]:
            raise ValueError(f"the checkpoint {where} was edited or damaged (its checksum does not match): delete the folder to start over")
        if int(meta.get("step", -1)) != int(step) or int(np.asarray(arrays.get("step", -1))) != int(step):
            raise ValueError(
                f"the checkpoint {where} is inconsistent (its folder, metadata and arrays name different steps): "
                "delete the folder to start over"
            )
        theirs = meta.get("fingerprint") or {}
        if json.dumps(theirs, sort_keys=True) != json.dumps(self.fingerprint, sort_keys=True):
            if "model" in self.fingerprint and "model" not in theirs:
                raise ValueError(
                    f"the checkpoint in {self.directory} does not record its model (an older bnnpp): "
                    "it cannot be checked against this fit; delete the folder to start over"
                )
            raise ValueError(
                f"the checkpoint in {self.directory} is from another fit ({differences(theirs, self.fingerprint)}): "
                "resume with the same model, method, options, seed and data, or delete the folder to start over"
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


def has_checkpoint(directory: str) -> bool:
    """Whether ``directory`` holds a checkpoint to resume from (an orbax step folder)."""
    return os.path.isdir(directory) and any(name.isdigit() for name in os.listdir(directory))


def remove(directory: str) -> None:
    """Delete a checkpoint folder (after the fit it belongs to finished)."""
    shutil.rmtree(directory, ignore_errors=True)
