"""The posterior's file and ArviZ side: :func:`to_arviz` builds the ArviZ container (0.x or 1.x) from a
posterior of any method; :func:`save` writes it as one netCDF file; :func:`read_netcdf`
reads one fully into memory. :func:`bnnpp.posterior.load` turns a file back into a
:class:`~bnnpp.Posterior`.

A posterior is read duck-typed here (this module does not import the class).
"""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata
from typing import Any

import jax
import numpy as np

from bnnpp.files import atomic_path
from bnnpp.posterior import arviz_compat
from bnnpp.posterior.arviz_compat import decode_name as _decode_name
from bnnpp.posterior.arviz_compat import encode_name as _encode_name
from bnnpp.posterior.arviz_compat import renamed as _renamed

__all__ = [
    "POINT_ESTIMATE_NOTE",
    "ROW_DIM",
    "ArvizNames",
    "arviz_names",
    "meta_json",
    "observed_name",
    "read_groups",
    "read_netcdf",
    "save",
    "to_arviz",
]

ROW_DIM = "obs"
"""The dimension of the data rows in the data and log_likelihood groups, unless the model
uses that name (then ``_obs``, ``__obs``, …: :func:`arviz_names`)."""
ARVIZ_DIMS = ("chain", "draw")
"""ArviZ's own dimensions: a site or dim of the model with one of these names is renamed."""

POINT_ESTIMATE_NOTE = (
    "a point estimate (one draw) has no log_likelihood group: PSIS-LOO (az.loo, az.compare) needs several posterior draws; "
    "use a method with draws (advi, bbb, laplace, ensemble, swag, sgld, nuts)"
)
"""Why a one-draw posterior's InferenceData has no ``log_likelihood`` group (its attribute
``bnnpp_no_log_likelihood``); :func:`bnnpp.diagnostics.loo` refuses such a fit with it."""


def observed_name(posterior) -> str:
    """The name of the model's observed site as the user wrote it (``"y"`` unless the fit was
    given ``observed=...``): the variable name of the ArviZ data groups."""
    return getattr(posterior.model, "observed", None) or getattr(posterior, "observed", None) or "y"


def _free(name: str, taken: set[str]) -> str:
    """``name``, or ``name`` with as many leading underscores as it takes to be outside ``taken``."""
    while name in taken:
        name = "_" + name
    return name


class ArvizNames:
    """The names :func:`to_arviz` gives a posterior's data: ``variables`` (site name → ArviZ
    variable; a site named ``chain``, ``draw`` or ``x`` becomes ``_chain`` / ``_draw`` / ``_x``), ``dims``
    (site → its dims, any named as ArviZ's or as a variable renamed the same way), ``row``
    (the data rows' dim: ``obs`` unless the model has a site or dim of that name)."""

    def __init__(self, posterior, deterministic=()):
        sites = posterior.sites
        observed = observed_name(posterior)
        names = {*sites, *deterministic, observed, "x"}
        taken = names | set(ARVIZ_DIMS)
        # ArviZ's dims, and "x": from_dict takes one dims mapping for every group, where
        # constant_data's "x" has its own
        self.variables = {k: _free(k, taken) if k in (*ARVIZ_DIMS, "x") else k for k in (*sites, *deterministic)}
        taken |= set(self.variables.values())
        dims_taken = taken | {d for site in sites.values() for d in site.dims}
        self.row = _free(ROW_DIM, dims_taken)
        self.dims = {k: [_free(d, taken) if d in taken else d for d in site.dims] for k, site in sites.items()}


def arviz_names(posterior, deterministic=()) -> ArvizNames:
    """The :class:`ArvizNames` of ``posterior`` (with its deterministic sites ``deterministic``)."""
    return ArvizNames(posterior, deterministic)


#: options that are Python objects, not settings to record
UNRECORDED_OPTIONS = ("optimizer", "validation_data")


def json_safe(value: Any) -> Any:
    """``value`` with numpy scalars as Python numbers, tuples as lists and anything else
    not JSON-serialisable as its ``repr``."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _versions() -> str:
    out = {"python": sys.version.split()[0]}
    for pkg in ("bnnpp", "jax", "numpyro", "optax", "arviz", "blackjax"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return json.dumps(out)


def _attrs(posterior) -> dict:
    stats = posterior.stats
    options = {k: v for k, v in stats.options.items() if k not in UNRECORDED_OPTIONS}
    seconds = {"compile_seconds": stats.compile_seconds, "run_seconds": stats.run_seconds, "sample_seconds": stats.sample_seconds}
    return {
        "bnnpp_method": str(stats.method),
        "bnnpp_seed": int(stats.seed),
        "bnnpp_options": json.dumps(options, default=repr),
        "bnnpp_seconds": json.dumps({k: float(v) for k, v in seconds.items()}),
        "versions": _versions(),
    }


def to_arviz(posterior, include_data: bool | None = None):
    """Build the ArviZ data of a posterior of any method.

    Groups:
        posterior: every latent site ``(chain, draw, *dims)`` with the model's dim names
            and integer coordinates (e.g. ``dense_0.w`` has dims ``chain, draw, dense_0.in,
            dense_0.out``);
        log_likelihood: ``y`` ``(chain, draw, obs)``, one value per row in float64, so
            ``az.loo``/``az.waic``/``az.compare`` work; left out for a one-draw posterior
            (MAP), where PSIS-LOO is undefined (attribute ``bnnpp_no_log_likelihood`` says so);
        posterior_predictive: ``y`` ``(chain, draw, obs, …)``, one replicated data set per draw;
        observed_data: ``y`` ``(obs, …)``; constant_data: ``x`` ``(obs, feature…)``.
            ``y`` is the observed site's name (``observed=`` of :func:`bnnpp.fit`), and
            targets ``(n, K)`` get a dim ``y_dim_0``;
        sample_stats: the fit's per-step traces (``stats.traces``: ``loss``, ``nll``, ``kl``,
            ``negative_elbo`` …) ``(chain, step)`` and per-draw sampler statistics
            ``(chain, draw)`` (``stats.sample_stats``: NUTS ``diverging``,
            ``acceptance_rate``, ``step_size``, ``tree_depth``, ``n_steps``, ``energy``,
            ``lp``; SG-MCMC ``step_size``, ``lp``);
        variational_params: the approximation's parameters (VI methods), so a saved fit keeps
            its variational posterior and not only the draws.
    The four data groups are left out when ``include_data`` resolves to False (see
    :meth:`bnnpp.Posterior.save`). Attributes carry the method, options, seed, seconds
    (compile, run, sample) and package versions; the posterior group's ``bnnpp`` attribute
    holds the JSON that :func:`bnnpp.load` reads back.

    Returns:
        The installed ArviZ's container: an ``arviz.InferenceData`` under ArviZ 0.x, an
        ``xarray.DataTree`` (one child per group) under ArviZ 1.x
        (:mod:`bnnpp.posterior.arviz_compat`).
    """
    return arviz_compat.build(_groups(posterior, include_data))


def _groups(posterior, include_data: bool | None) -> dict:
    """The groups of :func:`to_arviz` as ``{name: xarray.Dataset}``."""
    # xarray takes a while to import: it loads on first use, not with bnnpp
    import xarray as xr

    with_data = posterior.include_data(include_data)
    deterministic = posterior.deterministic() if with_data else {}
    names = arviz_names(posterior, deterministic)
    dims = {names.variables[name]: d for name, d in names.dims.items()}
    row = names.row
    x_dims = [row] + [f"feature_{i}" if i else "feature" for i in range(posterior.x.ndim - 1)]
    obs = observed_name(posterior)
    y_dims = [row] + [f"{obs}_dim_{i}" for i in range(np.ndim(posterior.y) - 1)]
    attrs = _attrs(posterior)
    kwargs: dict[str, Any] = {}
    point = posterior.num_chains * posterior.num_draws < 2
    if with_data:
        kwargs = {
            "posterior_predictive": {obs: posterior.posterior_predictive()},
            "observed_data": {obs: np.asarray(posterior.y)},
            "constant_data": {"x": np.asarray(posterior.x)},
        }
    # built with xarray, not az.from_dict: an ensemble's M chains of one draw each are taken as
    # (chain, draw) without ArviZ's guess that the axes were swapped
    idata = arviz_compat.from_dict(
        posterior={names.variables[k]: np.asarray(v) for k, v in {**posterior.samples, **deterministic}.items()},
        dims={**dims, obs: y_dims, "x": x_dims},
        attrs=attrs,
        **kwargs,
    )
    if with_data and not point:  # one log-density per row (an event's elements summed): its own dims
        # float64: PSIS exponentiates log-likelihood differences, which in float32 underflow
        # to 0 beyond ~88 nats and make az.loo's Pareto fit divide by zero (NaN elpd)
        ll = np.asarray(posterior.log_likelihood(), np.float64)
        idata["log_likelihood"] = xr.Dataset(
            {obs: (("chain", "draw", row), ll)},
            coords={"chain": np.arange(ll.shape[0]), "draw": np.arange(ll.shape[1]), row: np.arange(ll.shape[2])},
            attrs=attrs,
        )
    traces = {k: np.asarray(v) for k, v in posterior.stats.traces.items() if np.ndim(v) >= 1}
    per_draw = posterior.stats.sample_stats
    if traces or per_draw:
        # one optimisation run per fit: its traces carry the (single) chain axis when the
        # posterior has one chain, and only a step axis otherwise
        one_chain = posterior.num_chains == 1
        n_steps = len(traces["loss"]) if "loss" in traces else len(next(iter(traces.values()), []))
        variables = {}
        for k, v in traces.items():
            if len(v) == n_steps:
                trace_dims = ("chain", "step") if one_chain else ("step",)
                extra = tuple(f"{k}_dim_{i}" for i in range(v.ndim - 1))
                variables[k] = (trace_dims + extra, v[None] if one_chain else v)
            else:  # a shorter trace (e.g. one entry per chunk) gets its own axis
                variables[k] = ((f"{k}_index", *(f"{k}_dim_{i}" for i in range(v.ndim - 1))), v)
        variables.update({k: (("chain", "draw"), np.asarray(v)) for k, v in per_draw.items()})
        coords = {"chain": np.arange(posterior.num_chains)}
        if traces:
            coords["step"] = np.arange(n_steps)
        if per_draw:
            coords["draw"] = np.arange(posterior.num_draws)
        idata["sample_stats"] = xr.Dataset(variables, coords=coords, attrs=attrs)
    if posterior.approximation is not None:
        params = posterior.approximation.to_params()
        idata["variational_params"] = xr.Dataset(
            {k: ([f"{k}_dim_{i}" for i in range(np.ndim(v))], np.asarray(v)) for k, v in params.items()}
        )
    idata["posterior"].attrs["bnnpp"] = meta_json(posterior, names)
    if point:
        # PSIS-LOO needs draws to reweight: with one (MAP) az.loo fails on an index error, so
        # the group it reads is left out and this attribute says why
        idata["posterior"].attrs["bnnpp_no_log_likelihood"] = POINT_ESTIMATE_NOTE
    return idata


def meta_json(posterior, names: ArvizNames | None = None) -> str:
    """The JSON stored in a saved file's ``bnnpp`` attribute: ``info`` (the statistics
    without arrays: method, seed, options, seconds, extras), ``approximation`` (the family's
    name or ``None``), ``model`` (the spec of a bnnpp network, else ``None``), ``sites``
    (shape and dims), ``data`` (feature shape, rows, target dtype, a target row's shape,
    the observed site's name), ``variables`` (site → its ArviZ variable, for the sites
    :func:`arviz_names` renamed) and, for a calibrated posterior, ``calibration``
    (:meth:`bnnpp.calibrate.Calibration.to_dict`)."""
    names = names or arviz_names(posterior)
    info = {k: v for k, v in posterior.stats.as_info().items() if not isinstance(v, (np.ndarray, jax.Array)) and k != "sample_stats"}
    spec = posterior.model.spec() if hasattr(posterior.model, "spec") else None
    sites = {k: {"shape": list(v.shape), "dims": list(v.dims)} for k, v in posterior.sites.items()}
    data = {
        "feature_shape": list(posterior.x.shape[1:]),
        "n": int(posterior.x.shape[0]),
        "y_dtype": str(posterior.y.dtype),
        "y_shape": list(np.shape(posterior.y)[1:]),
        "observed": observed_name(posterior),
    }
    approximation = None if posterior.approximation is None else posterior.approximation.kind
    variables = {k: v for k, v in names.variables.items() if k != v and k in posterior.sites}
    meta = {"info": info, "approximation": approximation, "model": spec, "sites": sites, "data": data, "variables": variables}
    if getattr(posterior, "calibration", None) is not None:
        meta["calibration"] = posterior.calibration.to_dict()
    return json.dumps(json_safe(meta))


_OTHER_FORMATS = frozenset({".json", ".pkl", ".pickle", ".npz", ".npy", ".csv", ".txt", ".zarr", ".toml", ".png"})


def save(posterior, path: str | os.PathLike, include_data: bool | None = None) -> None:
    """Write ``posterior.to_arviz(include_data)`` to ``path`` atomically (see
    :meth:`bnnpp.Posterior.save`)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ValueError(f"{path} is a folder: give the file to write, e.g. {os.path.join(path, 'posterior.nc')}")
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise ValueError(f"{folder} is a file, not a folder: choose another path")
    suffix = os.path.splitext(path)[1].lower()
    if suffix in _OTHER_FORMATS:  # the file is netCDF whatever its name: a .json or .pkl name would mislead
        raise ValueError(f"{path}: save writes a netCDF file; name it {os.path.splitext(path)[0]}.nc")
    groups = _groups(posterior, include_data)
    os.makedirs(folder, exist_ok=True)
    with atomic_path(path) as tmp:
        arviz_compat.write_netcdf(_renamed(groups, _encode_name), tmp)


MAX_LOAD_BYTES = 8 * 2**30
"""A file whose arrays declare more than this many bytes is refused before they are read."""


def read_netcdf(path: str | os.PathLike, max_bytes: int = MAX_LOAD_BYTES):
    """:func:`read_groups` of ``path`` in the installed ArviZ's container (``InferenceData``
    under 0.x, ``DataTree`` under 1.x; see :func:`to_arviz`)."""
    return arviz_compat.build(read_groups(path, max_bytes))


def read_groups(path: str | os.PathLike, max_bytes: int = MAX_LOAD_BYTES) -> dict:
    """Read a file written by :func:`save` (or by ArviZ 0.x or 1.x) fully into memory (so the
    file is closed afterwards), after checking from its metadata that its arrays need at most
    ``max_bytes``.

    Returns:
        ``{group: xarray.Dataset}`` in memory, with the names as the posterior had them.

    Raises:
        ValueError: one line naming the file, when it is not a readable netCDF/HDF5 file or
            its arrays declare more than ``max_bytes``.
    """
    path = os.fspath(path)
    try:
        groups = arviz_compat.open_groups(path)  # lazy: reads the metadata only
    except Exception as e:  # h5py and xarray raise OSError, KeyError, ValueError, ... on a bad file
        raise ValueError(f"{path} is not a readable netCDF file ({type(e).__name__}: {e}): pass a file written by Posterior.save") from None
    declared = sum(int(ds.nbytes) for ds in groups.values())
    if declared > max_bytes:
        for ds in groups.values():
            ds.close()
        raise ValueError(
            f"{path} declares {declared / 2**30:.1f} GiB of arrays, more than the {max_bytes / 2**30:.0f} GiB limit: "
            "it is damaged or not a bnnpp posterior"
        )
    try:
        for ds in groups.values():
            ds.load()
            ds.close()
    except Exception as e:
        raise ValueError(f"{path} is damaged: its arrays cannot be read ({type(e).__name__}: {e})") from None
    return _renamed(groups, _decode_name)
