"""One conversion layer between bnnpp and whichever ArviZ is installed: 0.x (``InferenceData``)
or 1.x (``xarray.DataTree``, with the statistics in arviz-stats).

bnnpp builds a posterior's groups as plain ``xarray.Dataset`` objects (:func:`from_dict`), and
only :func:`build` turns them into the installed ArviZ's container. Files are written and read
group by group with xarray and h5netcdf (:func:`write_netcdf`, :func:`open_groups`), the netCDF
layout both ArviZ generations use (one netCDF group per ArviZ group), so a file saved under
one loads under the other. The statistics bnnpp needs (:func:`loo`, :func:`compare`,
:func:`rhat_ess`, :func:`pareto_khat`) answer in one shape whatever the version.

ArviZ itself is imported on first use, never with this module. ArviZ 0.23 announces its coming
refactor with a four-line ``FutureWarning`` when it is imported (once a day per user cache, or
on every import where that cache is not kept); when bnnpp is the one importing it that notice is
about no call of the user's, so this module ignores that one message (:data:`REFACTOR_NOTICE`).
Every other ArviZ warning, including those of the user's own ArviZ calls, is shown as before.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import metadata
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "REFACTOR_NOTICE",
    "LooResult",
    "arviz_major",
    "build",
    "compare",
    "decode_name",
    "encode_name",
    "from_dict",
    "group_names",
    "groups",
    "is_arviz_data",
    "loo",
    "open_groups",
    "pareto_khat",
    "renamed",
    "rhat_ess",
    "write_netcdf",
]

REFACTOR_NOTICE = r"\s*ArviZ is undergoing a major refactor"
"""The start of the ``FutureWarning`` ArviZ 0.23 emits at import (see the module docstring)."""
warnings.filterwarnings("ignore", message=REFACTOR_NOTICE, category=FutureWarning, module="arviz")


@cache
def arviz_major() -> int:
    """The installed ArviZ's major version (0 or 1), read from its metadata (no import)."""
    return int(metadata.version("arviz").split(".")[0])


def _coords(dims: Iterable[str], shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {d: np.arange(n) for d, n in zip(dims, shape, strict=True)}


def _dataset(variables: Mapping[str, Any], dims: Mapping[str, list[str]], sample_dims: list[str], attrs: dict):
    """One group as ArviZ's ``from_dict`` builds it: ``sample_dims`` then each variable's
    ``dims`` (default ``<name>_dim_<i>``), with integer coordinates on every dimension."""
    import xarray as xr

    data_vars, coords = {}, {}
    for name, value in variables.items():
        value = np.asarray(value)
        rest = value.ndim - len(sample_dims)
        named = list(dims.get(name, []))[:rest]
        var_dims = [*sample_dims, *named, *(f"{name}_dim_{i}" for i in range(len(named), rest))]
        data_vars[name] = (var_dims, value)
        coords.update(_coords(var_dims, value.shape))
    return xr.Dataset(data_vars, coords=coords, attrs=dict(attrs))


def from_dict(*, posterior: Mapping[str, Any], dims: Mapping[str, list[str]], attrs: dict, **data_groups: Mapping[str, Any]) -> dict:
    """The groups of ArviZ 0.x's ``az.from_dict`` as ``{group: xarray.Dataset}``, built with
    xarray alone. ``posterior`` and ``posterior_predictive`` arrays are ``(chain, draw, ...)``;
    ``observed_data`` and ``constant_data`` have no sample dims. ``dims`` names the other
    dimensions per variable. Every group gets ``attrs``."""
    out = {"posterior": _dataset(posterior, dims, ["chain", "draw"], attrs)}
    for group, variables in data_groups.items():
        sample_dims = ["chain", "draw"] if group in ("posterior_predictive", "prior", "prior_predictive") else []
        out[group] = _dataset(variables, dims, sample_dims, attrs)
    return out


_ESCAPES = {"%": "%25", "/": "%2F"}


def encode_name(name):
    """netCDF and ``DataTree`` forbid '/' in names (NumPyro's ``random_flax_module`` sites have
    them): escape '%' and '/' as ``%25`` / ``%2F``, reversibly (:func:`decode_name`)."""
    return "".join(_ESCAPES.get(c, c) for c in name) if isinstance(name, str) else name


def decode_name(name):
    """Inverse of :func:`encode_name`."""
    return re.sub("%(25|2F)", lambda m: {"25": "%", "2F": "/"}[m.group(1)], name) if isinstance(name, str) else name


def renamed(groups: Mapping[str, Any], fn) -> dict:
    """``{group: Dataset}`` with every variable, coordinate and dimension name mapped through ``fn``."""

    def one(ds):
        mapping = {n: fn(n) for n in {*ds.data_vars, *ds.coords, *ds.dims} if fn(n) != n}
        return ds.rename(mapping) if mapping else ds

    return {name: one(ds) for name, ds in groups.items()}


def build(groups: Mapping[str, Any]):
    """The installed ArviZ's container of ``groups`` (``{name: xarray.Dataset}``): an
    ``az.InferenceData`` under ArviZ 0.x, an ``xarray.DataTree`` (children named by group)
    under 1.x, where a name with '/' is escaped as in a file (:func:`encode_name`)."""
    import xarray as xr

    # the container's own attrs: the run's (method, options, ...) as az.from_dict set them, not
    # the posterior group's file metadata
    attrs = {k: v for k, v in getattr(groups.get("posterior"), "attrs", {}).items() if k not in _GROUP_ONLY_ATTRS}
    if arviz_major() >= 1:
        escaped = renamed(groups, lambda n: encode_name(n) if isinstance(n, str) and "/" in n else n)
        tree = xr.DataTree.from_dict({f"/{g}": ds for g, ds in escaped.items()})
        tree.attrs.update(attrs)
        return tree
    import arviz as az

    return az.InferenceData(attrs=attrs, **dict(groups))


_GROUP_ONLY_ATTRS = ("bnnpp", "bnnpp_no_log_likelihood")


def is_arviz_data(obj) -> bool:
    """Is ``obj`` an ArviZ container (``InferenceData`` or ``DataTree``) rather than a posterior?"""
    kind = type(obj).__name__
    return kind in ("InferenceData", "DataTree")


def group_names(data) -> list[str]:
    """The group names of an ``InferenceData`` or a ``DataTree`` (its children)."""
    if type(data).__name__ == "DataTree":
        return list(data.children)
    return list(data.groups())


def groups(data) -> dict:
    """``{group: xarray.Dataset}`` of an ``InferenceData`` or a ``DataTree``."""
    if type(data).__name__ == "DataTree":
        return {name: node.to_dataset() for name, node in data.children.items()}
    return {name: getattr(data, name) for name in data.groups()}


def _compressible(dtype) -> bool:
    return dtype.kind in {"b", "i", "u", "f", "c", "S"}


def write_netcdf(groups: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Write ``{group: xarray.Dataset}`` to ``path`` as ArviZ does: an HDF5 netCDF file
    (h5netcdf) with one netCDF group per ArviZ group, numeric variables zlib-compressed."""
    mode = "w"
    for name, ds in groups.items():
        encoding = {k: {"zlib": True} for k, v in ds.variables.items() if _compressible(v.dtype)}
        ds.to_netcdf(path, mode=mode, group=name, engine="h5netcdf", encoding=encoding)
        mode = "a"


def open_groups(path: str | os.PathLike) -> dict:
    """``{group: xarray.Dataset}`` of a netCDF file written by either ArviZ (or
    :func:`write_netcdf`), opened lazily (metadata only): the caller loads and closes them.

    Raises:
        OSError, KeyError, ValueError: as h5py / xarray raise them on a file that is not netCDF.
    """
    import h5netcdf
    import xarray as xr

    with h5netcdf.File(path, mode="r") as f:
        names = list(f.groups)
    return {name: xr.open_dataset(path, group=name, engine="h5netcdf") for name in names}


class LooResult(NamedTuple):
    """PSIS-LOO in one shape for both ArviZ generations."""

    elpd: float
    se: float
    p_loo: float
    pareto_k: np.ndarray  # (n,)
    warning: bool
    elpd_i: np.ndarray | None = None  # (n,), filled by _unsmoothed_loo


MIN_SMOOTHED_DRAWS = 21
"""Below this many draws the Pareto tail has at most 4 draws (``ceil(0.2 S)``): ArviZ 0.x then
leaves the importance weights unsmoothed with k̂ = inf, and arviz-stats 1.x fails; :func:`loo`
answers as 0.x does under both."""


def _unsmoothed_loo(log_lik: np.ndarray) -> LooResult:
    """Importance-sampling LOO with raw weights 1/p(y_i | θ_s) and k̂ = inf, ArviZ 0.x's answer
    for fewer than :data:`MIN_SMOOTHED_DRAWS` draws; ``log_lik`` ``(S, n)``."""
    from scipy.special import logsumexp

    s = log_lik.shape[0]
    elpd_i = np.log(s) - logsumexp(-log_lik, axis=0)
    lpd = float(np.sum(logsumexp(log_lik, axis=0) - np.log(s)))
    elpd = float(np.sum(elpd_i))
    se = float(np.sqrt(elpd_i.size * np.var(elpd_i)))
    return LooResult(elpd, se, lpd - elpd, np.full(elpd_i.size, np.inf), True, elpd_i)


def _few_draws(data) -> np.ndarray | None:
    """The log-likelihood ``(S, n)`` of ``data`` when it has fewer than
    :data:`MIN_SMOOTHED_DRAWS` draws, else ``None``."""
    (ll,) = groups(data)["log_likelihood"].data_vars.values()
    if ll.sizes["chain"] * ll.sizes["draw"] >= MIN_SMOOTHED_DRAWS:
        return None
    values = np.asarray(ll.transpose("chain", "draw", ...).values, np.float64)
    return values.reshape(values.shape[0] * values.shape[1], -1)


def loo(data) -> LooResult:
    """PSIS-LOO (Vehtari, Gelman & Gabry 2017) of an ArviZ container with one
    ``log_likelihood`` variable ``(chain, draw, obs)``, through ``az.loo`` (0.x) or
    ``arviz_stats.loo`` (1.x); with fewer than :data:`MIN_SMOOTHED_DRAWS` draws under 1.x,
    :func:`_unsmoothed_loo` (what 0.x computes then)."""
    import arviz as az

    if arviz_major() >= 1:
        few = _few_draws(data)
        if few is not None:
            return _unsmoothed_loo(few)
        res = az.loo(data, pointwise=True)
        k = np.asarray(res.pareto_k, np.float64)
        k = np.where(np.isnan(k), np.inf, k)  # a tail arviz-stats cannot fit: unreliable, as 0.x's inf says
        return LooResult(float(res.elpd), float(res.se), float(res.p), k, bool(res.warning))
    res = az.loo(data, pointwise=True)
    return LooResult(float(res.elpd_loo), float(res.se), float(res.p_loo), np.asarray(res.pareto_k), bool(res.warning))


def compare(datas: Mapping[str, Any]):
    """``az.compare`` by PSIS-LOO with stacking weights, as a ``pandas.DataFrame`` best first
    with ArviZ 0.x's column names (``rank, elpd_loo, p_loo, elpd_diff, weight, se, dse,
    warning``, …) under either version: 1.x's ``elpd`` / ``p`` renamed, its ``elpd_diff``
    negated to 0.x's sign (best − model, ≥ 0), unrounded; a fit with fewer than
    :data:`MIN_SMOOTHED_DRAWS` draws enters as :func:`_unsmoothed_loo` under 1.x."""
    import arviz as az

    if arviz_major() >= 1:
        table = az.compare({k: _elpd_data(v) for k, v in datas.items()}, round_to="none")
        table = table.rename(columns={"elpd": "elpd_loo", "p": "p_loo"})
        table["elpd_diff"] = 0.0 - table["elpd_diff"]  # 1.x: model − best (≤ 0); 0.x: best − model (≥ 0)
        if "warning" not in table.columns and "diag_elpd" in table.columns:
            table["warning"] = table["diag_elpd"].astype(str).str.len() > 0
        return table
    return az.compare(dict(datas), ic="loo")


def _elpd_data(data):
    """ArviZ 1.x: ``data`` itself, or for fewer than :data:`MIN_SMOOTHED_DRAWS` draws its
    :func:`_unsmoothed_loo` as arviz-stats' ``ELPDDataLOO`` (which ``az.compare`` accepts)."""
    few = _few_draws(data)
    if few is None:
        return data
    import xarray as xr
    from arviz_stats.utils import ELPDDataLOO

    res = _unsmoothed_loo(few)
    return ELPDDataLOO(
        elpd=res.elpd,
        se=res.se,
        p=res.p_loo,
        n_samples=few.shape[0],
        n_data_points=few.shape[1],
        scale="log",
        warning=True,
        good_k=0.7,
        elpd_i=xr.DataArray(res.elpd_i, dims=["obs"]),
        pareto_k=xr.DataArray(res.pareto_k, dims=["obs"]),
        approx_posterior=False,
    )


def rhat_ess(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rank-normalised split R-hat, bulk ESS and tail ESS (Vehtari et al. 2021) of every entry
    of ``draws`` ``(chain, draw, *shape)``: three arrays of ``shape``. R-hat is NaN with fewer
    than two chains."""
    import arviz as az
    import xarray as xr

    draws = np.asarray(draws, np.float64)
    dims = ["chain", "draw", *(f"d{i}" for i in range(draws.ndim - 2))]
    ds = xr.Dataset({"v": (dims, draws)})
    bulk = np.asarray(az.ess(ds, method="bulk")["v"].values)
    tail = np.asarray(az.ess(ds, method="tail")["v"].values)
    rhat = np.asarray(az.rhat(ds)["v"].values) if draws.shape[0] >= 2 else np.full(draws.shape[2:], np.nan)
    return rhat, bulk, tail


def pareto_khat(log_weights: np.ndarray) -> float:
    """The generalised-Pareto shape k̂ of the tail of the importance log-weights
    ``log_weights`` ``(S,)`` (PSIS; Vehtari et al. 2024)."""
    if arviz_major() >= 1:
        from arviz_stats.base import array_stats

        _, k = array_stats.psislw(np.asarray(log_weights, np.float64), r_eff=1, axis=-1)
    else:
        import arviz as az

        _, k = az.psislw(np.asarray(log_weights, np.float64))
    return float(np.asarray(k))
