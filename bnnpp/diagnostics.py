"""The one door to ArviZ: convert a :class:`~bnnpp.Posterior` to ``InferenceData`` and read it
back. Nothing else in bnnpp imports ArviZ."""

from __future__ import annotations

import json
import sys
from importlib import metadata

import arviz as az
import numpy as np
import xarray as xr

__all__ = ["read_netcdf", "to_arviz"]


def _versions() -> str:
    out = {"python": sys.version.split()[0]}
    for pkg in ("bnnpp", "jax", "numpyro", "optax", "arviz"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return json.dumps(out)


def to_arviz(posterior) -> az.InferenceData:
    """Build an ``az.InferenceData`` from a posterior.

    Groups:
        posterior: every latent site ``(chain, draw, *dims)`` with the model's dim names
            (e.g. ``dense_0.w`` has dims ``chain, draw, dense_0.in, dense_0.out``);
        log_likelihood: ``y`` ``(chain, draw, obs)``, so ``az.loo``/``az.waic`` work;
        observed_data: ``y`` ``(obs,)``; constant_data: ``x`` ``(obs, feature…)``;
        sample_stats: optimisation traces such as ``loss``, ``nll``, ``kl`` ``(chain, step)``
            (VI and MAP), and per-draw sampler statistics ``(chain, draw)`` from
            ``info["sample_stats"]`` (NUTS: ``diverging``, ``acceptance_rate``, ``step_size``,
            ``tree_depth``, ``n_steps``, ``energy``; SG-MCMC: ``step_size``);
        variational_params: the fitted guide's parameters (VI backends), so a saved fit keeps
            its variational posterior and not only the draws.
    Attributes carry the method, seed and package versions; the posterior group's ``bnnpp``
    attribute holds the JSON that :func:`bnnpp.load` reads back.
    """
    dims = {name: list(site.dims) for name, site in posterior.sites.items()}
    x_dims = ["obs"] + [f"feature_{i}" if i else "feature" for i in range(posterior.x.ndim - 1)]
    attrs = {
        "bnnpp_method": str(posterior.info.get("method")),
        "bnnpp_seed": int(posterior.info.get("seed", 0)),
        "versions": _versions(),
    }
    idata = az.from_dict(
        posterior={k: np.asarray(v) for k, v in posterior.samples.items()},
        log_likelihood={"y": posterior.log_likelihood()},
        observed_data={"y": np.asarray(posterior.y)},
        constant_data={"x": np.asarray(posterior.x)},
        dims={**dims, "y": ["obs"], "x": x_dims},
        attrs=attrs,
    )
    traces = {
        k: v for k, v in posterior.info.items() if isinstance(v, np.ndarray) and v.ndim == 1
    }
    per_draw = posterior.info.get("sample_stats") or {}
    if traces or per_draw:
        # one optimisation run per fit: its traces carry the (single) chain axis when the
        # posterior has one chain, and only a step axis otherwise
        trace_dims = ("chain", "step") if posterior.num_chains == 1 else ("step",)
        variables = {
            k: (trace_dims, np.asarray(v)[None] if len(trace_dims) == 2 else np.asarray(v)) for k, v in traces.items()
        }
        variables.update({k: (("chain", "draw"), np.asarray(v)) for k, v in per_draw.items()})
        coords = {"chain": np.arange(posterior.num_chains)}
        if traces:
            coords["step"] = np.arange(len(next(iter(traces.values()))))
        if per_draw:
            coords["draw"] = np.arange(posterior.num_draws)
        idata.add_groups({"sample_stats": xr.Dataset(variables, coords=coords, attrs=attrs)})
    params = posterior.info.get("guide_params")
    if params:
        idata.add_groups(
            {
                "variational_params": xr.Dataset(
                    {k: ([f"{k}_dim_{i}" for i in range(np.ndim(v))], np.asarray(v)) for k, v in params.items()}
                )
            }
        )
    idata.posterior.attrs["bnnpp"] = posterior.meta_json()
    return idata


def read_netcdf(path: str) -> az.InferenceData:
    """Read an InferenceData file fully into memory (so the file is closed afterwards)."""
    idata = az.from_netcdf(path)
    for group in idata.groups():
        getattr(idata, group).load()
    return idata
