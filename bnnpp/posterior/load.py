"""Read a posterior written by :meth:`bnnpp.Posterior.save`. Nothing in a file is executed
or imported: a bnnpp network is rebuilt from its JSON spec, a custom model is passed in."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable

import numpy as np

from bnnpp import calibrate, models
from bnnpp.introspection import SiteInfo, check_sites, probe_rows, refuse_flax_module, rename_observed
from bnnpp.posterior.approximation import FitStats
from bnnpp.posterior.core import Posterior
from bnnpp.posterior.families import from_guide_params
from bnnpp.posterior.io import read_groups

__all__ = ["load"]


def load(path: str | os.PathLike, model: Callable | None = None) -> Posterior:
    """Read a posterior written by :meth:`Posterior.save`.

    Args:
        path: the ``.nc`` file, or a ``bnnpp fit`` run folder (its ``posterior.nc``).
        model: the NumPyro model, needed only when the file came from a custom model (a
            ``bnnpp.models`` network is rebuilt from the spec stored in the file). Its latent
            sites are checked against the file's (names and shapes, by one abstract trace);
            a fit given ``observed="Y"`` is read back with the same observed site.

    Returns:
        A :class:`Posterior` whose ``predict`` and ``to_arviz`` work as before saving.

    Raises:
        ValueError: one line, for a file that is not a bnnpp posterior, or a ``model`` whose
            sites differ from the file's.
    """
    path = os.fspath(path)
    refuse_flax_module(model)  # a bare Flax module is not a model: wrap it with from_flax
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "posterior.nc")):  # a `bnnpp fit` run folder
        path = os.path.join(path, "posterior.nc")
    if not os.path.isfile(path):
        raise ValueError(f"no posterior file at {path}: pass the .nc file written by Posterior.save (or a bnnpp fit run folder)")
    if os.path.getsize(path) == 0:
        raise ValueError(f"{path} is empty (0 bytes): pass a file written by Posterior.save")
    groups = read_groups(path)
    meta, sites = _checked_meta(groups, path)
    variables = {k: meta["variables"].get(k, k) for k in sites}
    samples = {k: np.asarray(groups["posterior"][variables[k]].values) for k in sites}
    bad = [k for k, v in samples.items() if v.dtype.kind == "f" and not np.all(np.isfinite(v))]
    if bad:
        warnings.warn(f"{path}: non-finite values in the draws of {', '.join(bad)}", RuntimeWarning, stacklevel=2)
    info = dict(meta["info"])
    if "sample_stats" in groups:
        for name, var in groups["sample_stats"].data_vars.items():
            if "draw" in var.dims:
                info.setdefault("sample_stats", {})[name] = np.asarray(var.values)
            else:  # a per-step trace, (chain=1, step, ...) or (step, ...)
                info[name] = np.asarray(var.values[0] if "chain" in var.dims else var.values)
    params = None
    if "variational_params" in groups:
        params = {k: np.asarray(v.values) for k, v in groups["variational_params"].data_vars.items()}
    try:
        approximation = from_guide_params(params, list(sites), meta.get("approximation"))
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    data = meta.get("data") or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: its bnnpp metadata is damaged (data is a {type(data).__name__}, not an object)")
    observed = str(data.get("observed", "y"))
    given = model is not None  # a model passed in is checked against the file; one rebuilt from its spec matches it
    if model is None and meta["model"] is not None:
        try:
            model = models.from_spec(meta["model"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: its model spec cannot be rebuilt ({type(e).__name__}: {e})") from None
    elif model is not None:
        model = rename_observed(model, observed)
    if "constant_data" in groups:
        if "x" not in groups["constant_data"]:
            raise ValueError(f"{path}: its constant_data group has no inputs 'x': the file is damaged; save the posterior again")
        if "observed_data" not in groups or observed not in groups["observed_data"]:
            held = ", ".join(map(str, groups["observed_data"].data_vars)) if "observed_data" in groups else "no observed_data group"
            raise ValueError(
                f"{path}: its metadata names the observed variable {observed!r}, but the file holds {held or 'none'}: "
                "the file is damaged; save the posterior again"
            )
        x = np.asarray(groups["constant_data"]["x"].values)
        y = np.asarray(groups["observed_data"][observed].values)
    else:  # saved without its training data
        x = np.zeros((0, *data.get("feature_shape", ())), np.float32)
        y = np.zeros((0, *data.get("y_shape", ())), data.get("y_dtype", "int32"))
    if given:
        if x.shape[0]:  # the rows that give the latents their shapes (every row for per-row latents)
            check_sites(model, sites, probe_rows(model, x)[0], path)
        else:
            try:
                check_sites(model, sites, np.zeros((1, *x.shape[1:]), np.float32), path)
            except ValueError:
                # per-row latents (one effect per school): the fit's row count, at inputs of ones (a scale may be read from x)
                n = int(data.get("n", 1))
                if n <= 1:
                    raise
                check_sites(model, sites, np.ones((n, *x.shape[1:]), np.float32), path)
    if "constant_data" in groups and (x.shape[0] != y.shape[0] or tuple(x.shape[1:]) != tuple(data.get("feature_shape", x.shape[1:]))):
        raise ValueError(f"{path}: its training data has shapes x {x.shape}, y {y.shape} that contradict its metadata")
    calibration = None
    if meta.get("calibration") is not None:
        try:
            calibration = calibrate.Calibration.from_dict(meta["calibration"])
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
    return Posterior(samples, FitStats.from_info(info), model, x, y, sites, approximation, calibration)


def _checked_meta(groups: dict, path: str) -> tuple[dict, dict[str, SiteInfo]]:
    """The ``bnnpp`` metadata of a file, checked against its arrays; ValueError naming what is wrong."""
    if "posterior" not in groups:
        raise ValueError(f"{path} has no posterior group: it is not a bnnpp posterior; save one with Posterior.save")
    meta_text = groups["posterior"].attrs.get("bnnpp")
    if meta_text is None:
        raise ValueError(f"{path} is not a bnnpp posterior (no 'bnnpp' attribute); save it with Posterior.save")
    try:
        meta = json.loads(meta_text)
        sites = {k: SiteInfo(tuple(int(d) for d in v["shape"]), tuple(v["dims"])) for k, v in meta["sites"].items()}
        meta["info"], meta["data"], meta["model"]
        meta.setdefault("variables", {})  # older files have no renamed sites
        variables = {k: str(meta["variables"].get(k, k)) for k in sites}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: its bnnpp metadata is damaged ({type(e).__name__}: {e})") from None
    if not sites:
        raise ValueError(f"{path}: its metadata lists no latent sites")
    lead = None
    for name, site in sites.items():
        if variables[name] not in groups["posterior"]:
            raise ValueError(f"{path}: site {name!r} of its metadata has no draws in the posterior group")
        shape = tuple(groups["posterior"][variables[name]].shape)
        if shape[2:] != site.shape or len(shape) != 2 + len(site.shape):
            raise ValueError(f"{path}: site {name!r} has draws of shape {shape}, but its metadata says (chain, draw, *{site.shape})")
        if lead is not None and shape[:2] != lead:
            raise ValueError(f"{path}: sites disagree on (chain, draw): {lead} and {shape[:2]} ({name!r})")
        lead = shape[:2]
    return meta, sites
