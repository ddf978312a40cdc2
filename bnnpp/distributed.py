"""Several processes (hosts) in one fit, with JAX's multi-controller runtime.

Every process runs the same program; :func:`initialize` joins them through
``jax.distributed.initialize``, after which ``jax.devices()`` lists every process's devices
and a fit with ``devices``/``mesh`` (:mod:`bnnpp.inference.sharding`) builds its mesh over
all of them. Each process loads only its block of the training rows (a loader's
``shard=(jax.process_index(), jax.process_count())``, :mod:`bnnpp.data`; ``bnnpp fit
--distributed`` does this itself), the global arrays are assembled from the blocks with
``jax.make_array_from_process_local_data``, every device draws its part of each minibatch from
its own rows, the compiler inserts the collectives, and every process ends with the same
:class:`~bnnpp.Posterior`. Only process 0 writes files (:func:`is_writer`): ``bnnpp fit
--distributed`` writes one run folder.

Where the coordinator comes from, in order: the arguments; the environment
(``JAX_COORDINATOR_ADDRESS`` — read by JAX itself — with ``BNNPP_NUM_PROCESSES`` and
``BNNPP_PROCESS_ID``); else JAX's cluster auto-detection (Slurm, Open MPI, mpi4py,
Kubernetes, Cloud TPU; ``jax/_src/clusters``). On CPU the cross-process collectives are
JAX's default, gloo (``jax_cpu_collectives_implementation``).

It must run before anything starts the XLA backend (any JAX computation, ``jax.devices()``);
``import bnnpp`` does not.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import jax

__all__ = ["initialize", "is_writer"]


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    local_device_ids: int | Sequence[int] | None = None,
    cluster_detection_method: str | None = None,
    initialization_timeout: int = 300,
) -> tuple[int, int]:
    """Join this process to a multi-process JAX run (``jax.distributed.initialize``).

    Args:
        coordinator_address: ``host:port`` of process 0 (default ``$JAX_COORDINATOR_ADDRESS``
            or auto-detected).
        num_processes: processes in the run (default ``$BNNPP_NUM_PROCESSES`` or auto-detected).
        process_id: this process, ``0 .. num_processes - 1`` (default ``$BNNPP_PROCESS_ID``
            or auto-detected).
        local_device_ids, cluster_detection_method, initialization_timeout: passed to
            ``jax.distributed.initialize``.

    Returns:
        ``(process_index, process_count)`` after joining. Calling it again once joined
        returns the same without rejoining.

    Raises:
        RuntimeError: the XLA backend already started in this process (call this first).
        ValueError: a bad environment variable, or too little to find the coordinator.
    """
    from jax._src import xla_bridge  # backends_are_initialized has no public name

    if jax.distributed.is_initialized():
        return jax.process_index(), jax.process_count()
    if xla_bridge.backends_are_initialized():
        raise RuntimeError(
            "bnnpp.distributed.initialize must run before any JAX computation or jax.devices() in this process: "
            "call it first (right after import bnnpp)"
        )
    if num_processes is None:
        num_processes = _env_int("BNNPP_NUM_PROCESSES")
    if process_id is None:
        process_id = _env_int("BNNPP_PROCESS_ID")
    try:
        jax.distributed.initialize(
            coordinator_address,
            num_processes,
            process_id,
            local_device_ids=local_device_ids,
            cluster_detection_method=cluster_detection_method,
            initialization_timeout=initialization_timeout,
        )
    except ValueError as e:
        raise ValueError(
            f"{e} (give coordinator_address/num_processes/process_id, or set JAX_COORDINATOR_ADDRESS, "
            "BNNPP_NUM_PROCESSES and BNNPP_PROCESS_ID, or run under a cluster JAX detects: Slurm, Open MPI)"
        ) from None
    return jax.process_index(), jax.process_count()


def is_writer() -> bool:
    """True in the process that writes files: process 0 (also when not distributed)."""
    return jax.process_index() == 0
