"""The :class:`Dataset` record every loader returns, and one process's share of its training
rows (:class:`Rows`, :func:`shard_rows`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from bnnpp.data.tables import FileTransform


@dataclass(frozen=True)
class Dataset:
    """Train and test arrays plus what the task is.

    Attributes:
        x_train: ``(n_train, features)`` float32, or ``(n_train, 28, 28, 1)`` for images.
        y_train: ``(n_train,)`` int32 labels (classification) or float32 targets (regression).
        x_test: ``(n_test, ...)``, same trailing shape as ``x_train``.
        y_test: ``(n_test,)``.
        task: ``"classification"`` or ``"regression"``.
        num_classes: number of classes, ``None`` for regression.
        name: short name, e.g. ``"moons"``.
        x_val: ``(n_val, ...)`` validation inputs, or ``None`` when there is no validation split.
        y_val: ``(n_val,)`` validation targets, or ``None``.
        y_shift, y_scale: regression targets were standardised: a target in the original
            units is ``y * y_scale + y_shift`` (0 and 1 when they were not; see :func:`uci`).
        transform: for data read by :func:`from_file`, how rows of the file become model
            inputs (:class:`FileTransform`); ``None`` for the built-in sets.
        rows: which of the training rows ``x_train``/``y_train`` hold (:class:`Rows`): set
            when a loader was asked for one process's share (``shard=``); ``None``: all.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    task: str
    num_classes: int | None
    name: str = ""
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None
    y_shift: float = 0.0
    y_scale: float = 1.0
    transform: FileTransform | None = field(default=None, compare=False)
    rows: Rows | None = None


@dataclass(frozen=True)
class Rows:
    """Training rows ``[start, stop)`` of ``total``: one process's share of a multi-process fit."""

    start: int
    stop: int
    total: int

    @property
    def count(self) -> int:
        """Rows held: ``stop - start``."""
        return self.stop - self.start


def shard_rows(total: int, shard: tuple[int, int]) -> Rows:
    """Process ``p``'s contiguous block of ``total`` training rows among ``P`` processes:
    ``Rows(p·total/P, (p+1)·total/P, total)``, the order of the mesh's ``data`` axis.

    Args:
        total: the training rows of the whole fit.
        shard: ``(process, processes)``, e.g. ``(jax.process_index(), jax.process_count())``.

    Raises:
        ValueError: a bad ``shard``, or ``total`` not divisible by ``P`` (one line, naming a fix).
    """
    if not (
        isinstance(shard, (tuple, list))
        and len(shard) == 2
        and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in shard)
    ):
        raise TypeError(f"shard must be (process, processes), two integers, got {shard!r}")
    p, procs = int(shard[0]), int(shard[1])
    if procs < 1 or not 0 <= p < procs:
        raise ValueError(f"shard=(process, processes) needs 0 ≤ process < processes, got {shard!r}")
    if total % procs:
        raise ValueError(
            f"{total} training rows do not split evenly over {procs} processes: use a multiple of {procs} rows "
            f"(e.g. {total - total % procs}; CLI: --train-subset for mnist)"
        )
    block = total // procs
    return Rows(p * block, (p + 1) * block, int(total))


def _take(ds: Dataset, shard: tuple[int, int] | None) -> Dataset:
    """``ds`` with only this process's training rows (copies, so the whole arrays can be freed)."""
    if shard is None:
        return ds
    r = shard_rows(len(ds.x_train), shard)
    return replace(ds, x_train=ds.x_train[r.start : r.stop].copy(), y_train=ds.y_train[r.start : r.stop].copy(), rows=r)
