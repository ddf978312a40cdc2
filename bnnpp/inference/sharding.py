"""Where a fit runs: a device mesh with a ``data`` axis and a ``members`` axis, built on
``jax.sharding`` (``Mesh``, ``NamedSharding``) and used by the one runner
(:mod:`bnnpp.inference.runner`), so every runner-driven method gets it.

* **data parallel** (axis ``data`` of size D): each step's minibatch is split into D blocks of
  ``batch_size / D`` rows, one per device (a sharding constraint on the batch); the parameters
  are replicated, and the compiler partitions the forward and backward pass and inserts the
  all-reduce of the gradient and the loss. The program is the same ``jit`` program, so the fit
  is the one-device fit up to float reassociation of those sums.
* **member / chain parallel** (axis ``members`` of size K): the state's leaves whose leading
  axis is the algorithm's ``num_chains`` (ensemble and MultiSWAG members, SG-MCMC chains) are
  split over K devices. NUTS chains use the same axis (:mod:`bnnpp.inference.nuts`).
* both at once: a 2-D mesh ``data=D, members=K`` on ``D·K`` devices.

The mesh is given as ``devices=N`` (the first N of ``jax.devices()``: on the members axis when
the algorithm has ``num_chains`` divisible by N, else on the data axis) and/or
``mesh="data=2,members=2"`` (or a dict). With several processes
(:func:`bnnpp.distributed.initialize`) ``jax.devices()`` lists every process's devices and
the mesh spans them; the training rows are then split over the data axis, so that process
``p`` of ``P`` needs only block ``p`` of the rows (:func:`process_share`): a
:class:`bnnpp.data.Dataset` loaded with ``shard=(p, P)`` holds just those (``rows``), and
the global arrays are assembled from each process's rows with
``jax.make_array_from_process_local_data`` (:func:`put_local`).

**Minibatches across processes.** With one process the runner draws every minibatch from
one permutation of all N rows (each device then holds its slice of the batch). With several
processes and a data axis of D > 1, each device draws its ``B/D`` rows of the batch from its
own ``N/D`` rows instead (a permutation per epoch keyed with ``fold_in(fold_in(keys.data,
epoch), device)``, inside ``shard_map``), so no step moves training rows between processes.
Every batch is still a uniform draw without replacement within each device's block and an
epoch still visits every row once, but the minibatch stream differs from the one-process
fit's: minibatch fits agree with it in distribution, not draw for draw (full-batch fits
still agree up to float reassociation).

Every check here is a one-line ``ValueError`` raised before anything compiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

__all__ = [
    "AXES",
    "OneDevice",
    "Placement",
    "chains_per_device",
    "check_request",
    "check_rows",
    "global_rows",
    "mesh_axes",
    "parse_mesh",
    "placement",
    "process_share",
    "put",
    "put_local",
    "rows_loaded",
    "to_host",
    "where",
]

AXES = ("data", "members")
"""The mesh axes, in this order. ``chains`` is accepted as another name of ``members``."""

_ALIASES = {"data": "data", "members": "members", "chains": "members"}


def parse_mesh(mesh: str | dict | None) -> dict[str, int] | None:
    """``"data=2,members=2"`` or ``{"data": 2, "members": 2}`` → ``{"data": 2, "members": 2}``
    (missing axes 1; ``chains`` means ``members``); ``None`` → ``None``."""
    if mesh is None:
        return None
    if isinstance(mesh, str):
        pairs = {}
        for part in filter(None, (p.strip() for p in mesh.split(","))):
            name, eq, size = part.partition("=")
            if not eq:
                raise ValueError(f"mesh takes axis=size pairs such as data=2,members=2, got {mesh!r}")
            try:
                pairs[name.strip()] = int(size)
            except ValueError:
                raise ValueError(f"mesh axis {name.strip()!r} needs an integer size, got {size!r}") from None
        mesh = pairs
    if not isinstance(mesh, dict) or not mesh:
        raise ValueError(f"mesh must be a string such as 'data=2,members=2' or a dict of axis sizes, got {mesh!r}")
    out = dict.fromkeys(AXES, 1)
    for name, size in mesh.items():
        if name not in _ALIASES:
            raise ValueError(f"unknown mesh axis {name!r}: the axes are data and members (or chains)")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"mesh axis {name!r} needs a positive integer size, got {size!r}")
        out[_ALIASES[name]] = int(size)
    return out


def check_request(devices: int | None, mesh: str | dict | None) -> tuple[int | None, dict[str, int] | None]:
    """Check ``devices`` / ``mesh`` on their own (before the method is built): their types,
    that they agree, and that this many devices exist. Returns ``(devices, axis sizes)``."""
    axes = parse_mesh(mesh)
    if devices is not None and (isinstance(devices, bool) or not isinstance(devices, (int, np.integer)) or devices < 1):
        raise ValueError(f"devices must be a positive integer, got {devices!r}")
    wanted = int(np.prod(list(axes.values()))) if axes is not None else devices
    if devices is not None and axes is not None and wanted != devices:
        raise ValueError(f"mesh {axes} has {wanted} devices but devices={devices}: give one of them, or make them agree")
    available = jax.device_count()
    if wanted is not None and wanted > available:
        raise ValueError(
            f"{wanted} devices asked for but jax sees {available} ({jax.default_backend()}); on a CPU set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={wanted} before jax is imported"
        )
    return (None if devices is None else int(devices)), axes


@dataclass(frozen=True)
class Placement:
    """A fit's mesh and how its arrays are laid out on it.

    Attributes:
        mesh: a 2-D :class:`jax.sharding.Mesh` with axes ``("data", "members")``.
        num_chains: the algorithm's chains/members (leaves with this leading size are split
            over ``members``).
        shard_rows: whether the training rows are split over ``data`` (full-batch fits and
            several processes) instead of replicated (one process with minibatches: every
            device then gathers its own rows of the batch locally).
    """

    mesh: Mesh
    num_chains: int = 1
    shard_rows: bool = False

    @property
    def data(self) -> int:
        """Size of the data axis."""
        return int(self.mesh.shape["data"])

    @property
    def members(self) -> int:
        """Size of the members axis."""
        return int(self.mesh.shape["members"])

    @property
    def replicated(self) -> NamedSharding:
        """Every device holds the whole array."""
        return NamedSharding(self.mesh, P())

    @property
    def batch(self) -> NamedSharding:
        """Leading (row) axis split over ``data``."""
        return NamedSharding(self.mesh, P("data"))

    @property
    def rows(self) -> NamedSharding:
        """The training data's layout (see ``shard_rows``)."""
        return self.batch if self.shard_rows else self.replicated

    def leaf(self, shape) -> NamedSharding:
        """A state leaf's layout: split over ``members`` when its leading axis is the chains'."""
        if self.members > 1 and len(shape) >= 1 and shape[0] == self.num_chains:
            return NamedSharding(self.mesh, P("members"))
        return self.replicated

    def state(self, shapes) -> Any:
        """The layouts of a pytree of shapes (``jax.eval_shape`` output)."""
        return jax.tree_util.tree_map(lambda s: self.leaf(s.shape), shapes)

    placed = True

    def plan_args(self, keys, local: bool):
        """``(keys, batch_sharding, local_mesh)`` for the runner's plan: the keys as host
        constants (valid on every process and mesh), every batch split over ``data``, and the
        mesh when each device draws its minibatches from its own rows (``local``)."""
        return type(keys)(*(np.asarray(k) for k in keys)), self.batch, self.mesh if local else None

    def put_data(self, x, y, n: int, share) -> tuple:
        """The global training arrays: from this process's block of rows (``share``) or whole."""
        if share is not None:
            return put_local(x, self.rows, n), put_local(y, self.rows, n)
        return put(x, self.rows), put(y, self.rows)

    def put(self, array) -> jax.Array:
        """``array`` replicated on the mesh."""
        return put(array, self.replicated)

    def lower_init(self, fn, data):
        """``fn(data)`` lowered with the data in their layout and the output replicated."""
        return jax.jit(fn, in_shardings=((self.rows, self.rows),), out_shardings=self.replicated).lower(data)

    def state_shape(self, lowered_init):
        return jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), lowered_init.out_info)

    def layouts(self, rs_shape, local: bool):
        """``((state, t, perm), data, replicated)`` layouts of the runner's carry: chains/members
        split over their axis, everything else replicated (the permutation split over ``data``
        when each device draws from its own rows)."""
        rep = self.replicated
        state = (self.state(rs_shape.state), rep, self.batch if local else rep)
        return state, (self.rows, self.rows), rep

    def lower(self, layouts, fn, state_arg: int, *args):
        """``jax.jit(fn).lower(*args)`` on the mesh: argument ``state_arg`` is the algorithm's
        state in its layout, the other arguments and every output replicated (so that every
        process can read them)."""
        in_sh = tuple(layouts[0][0] if i == state_arg else self.replicated for i in range(len(args)))
        return jax.jit(fn, in_shardings=in_sh, out_shardings=self.replicated).lower(*args)

    def arrange(self, rs, layouts):
        """The run state moved to its layout (``layouts[0]``, structured as ``rs``)."""
        return jax.device_put(rs, layouts[0])

    def facts(self, batch: int) -> dict:
        """JSON-safe facts for the run folder: devices, mesh, per-device batch, processes."""
        return {
            "devices": int(self.mesh.devices.size),
            "platform": str(self.mesh.devices.flat[0].platform),
            "processes": int(jax.process_count()),
            "mesh": {"data": self.data, "members": self.members},
            "per_device_batch": batch // self.data,
            "members_per_device": self.num_chains // self.members,
            "rows": "split over data" if self.shard_rows else "replicated",
        }


class OneDevice:
    """The placement of a fit on JAX's default device, unsharded: the null object of
    :class:`Placement` (same methods), so that the runner has no branch on placement."""

    placed = False

    def plan_args(self, keys, local: bool):
        """``(keys, batch_sharding, local_mesh)`` for the runner's plan."""
        return keys, None, None

    def put_data(self, x, y, n: int, share) -> tuple:
        """The training arrays on the device: chunk arguments, not program constants."""
        return jax.device_put(x), jax.device_put(y)

    def put(self, array):
        return array

    def lower_init(self, fn, data):
        return jax.jit(fn).lower(data)

    def state_shape(self, lowered_init):
        return lowered_init.out_info

    def layouts(self, rs_shape, local: bool):
        """The run state's layouts on the mesh: none here."""
        return None

    def lower(self, layouts, fn, state_arg: int, *args):
        """``jax.jit(fn).lower(*args)``."""
        return jax.jit(fn).lower(*args)

    def arrange(self, rs, layouts):
        return rs

    def facts(self, batch: int) -> dict:
        return {}


def where(devices: int | None, mesh: str | dict | None, *, batch: int, n: int, num_chains: int, name: str) -> Placement | OneDevice:
    """:func:`placement`, with :class:`OneDevice` instead of ``None`` when neither ``devices``
    nor ``mesh`` is given."""
    place = placement(devices, mesh, batch=batch, n=n, num_chains=num_chains, name=name)
    return OneDevice() if place is None else place


def placement(devices: int | None, mesh: str | dict | None, *, batch: int, n: int, num_chains: int, name: str) -> Placement | None:
    """The :class:`Placement` of a fit, or ``None`` when neither ``devices`` nor ``mesh`` is
    given (the runner's unsharded path).

    Args:
        devices, mesh: as :func:`bnnpp.fit` takes them.
        batch: rows per step; n: training rows; num_chains: the algorithm's chains/members;
        name: the method, for messages.

    Raises:
        ValueError: more devices than exist, a batch not divisible by the data axis, chains
            not divisible by the members axis, a members axis for a one-chain method.
    """
    axes = mesh_axes(devices, mesh, num_chains)
    if axes is None:
        return None
    d, k = axes["data"], axes["members"]
    if k > 1 and num_chains == 1:
        raise ValueError(
            f"method {name!r} has one chain: a members axis of {k} needs an ensemble or several chains; use mesh='data={d * k}'"
        )
    if num_chains % k:
        raise ValueError(f"{num_chains} chains/members of {name!r} do not split over a members axis of {k}: use a divisor of {num_chains}")
    if batch % d:
        raise ValueError(
            f"batch size {batch} does not split over a data axis of {d} devices: use a batch_size divisible by {d} "
            f"(e.g. {max(d, batch - batch % d)})"
        )
    several = jax.process_count() > 1
    if several and n % d:
        raise ValueError(f"{n} training rows do not split over a data axis of {d} devices across processes: use a multiple of {d} rows")
    grid = np.asarray(jax.devices()[: d * k], dtype=object).reshape(d, k)
    return Placement(Mesh(grid, AXES), num_chains, shard_rows=(batch == n or several) and n % d == 0 and d > 1)


def mesh_axes(devices: int | None, mesh: str | dict | None, num_chains: int) -> dict[str, int] | None:
    """The mesh's axis sizes ``{"data": D, "members": K}`` a fit will use (``None``: unsharded).
    ``devices`` alone puts chains one block per device when they divide evenly, else the batch."""
    devices, axes = check_request(devices, mesh)
    if devices is None and axes is None:
        return None
    if axes is None:
        axes = {"data": 1, "members": devices} if num_chains > 1 and num_chains % devices == 0 else {"data": devices, "members": 1}
    return axes


def process_share(devices: int | None, mesh: str | dict | None, num_chains: int = 1) -> tuple[int, int] | None:
    """``(process, processes)`` when this process of a multi-process fit needs only its block
    of the training rows (pass it as a loader's ``shard=``), else ``None`` (one process, or a
    mesh whose data axis does not split the rows over the processes — e.g. members only — so
    that every process needs every row). Needs the mesh to span every device, with a data axis
    that is a multiple of the process count."""
    procs = jax.process_count()
    axes = mesh_axes(devices, mesh, num_chains)
    if procs == 1 or axes is None:
        return None
    d, k = axes["data"], axes["members"]
    if d % procs or d * k != jax.device_count():
        return None
    return jax.process_index(), procs


def data_block(place: Placement, n: int) -> tuple[int, int]:
    """The rows ``[start, stop)`` of ``n`` that this process's devices hold on the data axis."""
    spans = [idx[0] for idx in place.batch.addressable_devices_indices_map((n,)).values()]
    starts = [0 if s.start is None else s.start for s in spans]
    stops = [n if s.stop is None else s.stop for s in spans]
    return min(starts), max(stops)


def check_rows(place: Placement | None, rows, n_local: int) -> None:
    """Check a process's share of the rows (``rows``: a :class:`bnnpp.data.Rows`) against the
    mesh before anything compiles: it must be a multi-process fit on a mesh, and the rows held
    must be exactly the block of the data axis this process's devices hold.

    Raises:
        ValueError: one line naming the fix.
    """
    if rows.count != n_local:
        raise ValueError(f"the data says it holds training rows [{rows.start}, {rows.stop}) but has {n_local} rows")
    if place is None or jax.process_count() == 1:
        raise ValueError(
            f"this data holds training rows [{rows.start}, {rows.stop}) of {rows.total}, one process's share: fit it in a "
            "multi-process run (bnnpp.distributed.initialize) with devices/mesh, or load every row (shard=None)"
        )
    want = data_block(place, rows.total)
    if want != (rows.start, rows.stop):
        raise ValueError(
            f"this process's devices hold training rows [{want[0]}, {want[1]}) of the mesh {dict(place.mesh.shape)} but it loaded "
            f"[{rows.start}, {rows.stop}): use a mesh whose data axis is a multiple of the {jax.process_count()} processes over "
            "every device (e.g. mesh='data=N'), or load every row (shard=None)"
        )


def global_rows(x: np.ndarray, y: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Stand-ins of the global training arrays for code that needs their row count only (a
    method's ``build`` reads ``n`` and traces the model on ``x[:1]``; option checks compare
    the batch with ``n``): this process's first row repeated ``total`` times as a read-only
    ``np.broadcast_to`` view (no memory)."""
    return (np.broadcast_to(x[:1], (total, *x.shape[1:])), np.broadcast_to(y[:1], (total, *y.shape[1:])))


def put_local(array, sharding: NamedSharding, total: int) -> jax.Array:
    """The global ``(total, ...)`` array split over ``data`` from this process's block of its
    rows (``jax.make_array_from_process_local_data``): no process holds the other rows."""
    array = np.asarray(array)
    return jax.make_array_from_process_local_data(sharding, array, (total, *array.shape[1:]))


def rows_loaded(start: int, stop: int) -> list[list[int]]:
    """``[[start, stop], ...]``: the training rows each process holds, by process index (an
    all-gather across processes; ``[[start, stop]]`` with one)."""
    mine = np.asarray([start, stop], np.int64)
    if jax.process_count() == 1:
        return [mine.tolist()]
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(mine)).reshape(-1, 2).tolist()


def chains_per_device(state, num_chains: int) -> dict[str, int]:
    """How many chains/members each device holds, read from the shards of the first leaf of
    ``state`` whose leading axis is the chains' (``{}`` when none is): ``{device: count}``
    over this process's devices."""
    for leaf in jax.tree_util.tree_leaves(state):
        if isinstance(leaf, jax.Array) and leaf.ndim >= 1 and leaf.shape[0] == num_chains:
            return {str(s.device): int(s.data.shape[0]) for s in leaf.addressable_shards}
    return {}


def put(array, sharding: NamedSharding) -> jax.Array:
    """A global array laid out as ``sharding`` from a host array every process holds whole:
    each process builds only the shards of its own devices (``jax.make_array_from_callback``)."""
    array = np.asarray(array)
    return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])


def to_host(tree) -> Any:
    """NumPy copies of a pytree of (possibly sharded, possibly multi-process) arrays: one
    ``device_get`` when this process can see every value, else an all-gather across
    processes (``jax.experimental.multihost_utils.process_allgather``)."""
    leaves = jax.tree_util.tree_leaves(tree)
    local = all(not isinstance(a, jax.Array) or a.is_fully_addressable or a.is_fully_replicated for a in leaves)
    if local:
        return jax.device_get(tree)
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(tree, tiled=True)
