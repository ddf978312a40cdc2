"""Convergence of MCMC (and sanity of any set of draws): :func:`summary`."""

from __future__ import annotations

from typing import Any

import numpy as np

from bnnpp.diagnostics._common import RHAT_THRESHOLD, SCALE_SUFFIXES, _quiet_arviz
from bnnpp.posterior import arviz_compat

# --------------------------------------------------------------------------------------
# Convergence of MCMC (and sanity of any set of draws)
# --------------------------------------------------------------------------------------


def scale_sites(posterior) -> list[str]:
    """Names of the permutation-invariant scale sites: layer/network scales and variances
    (``<scope>.scale``, ``<scope>.variance``) and the observation ``noise``."""
    return [n for n in posterior.samples if n.endswith(SCALE_SUFFIXES) or n == "noise"]


def _weight_sites(posterior) -> list[str]:
    return [n for n in posterior.samples if n.endswith((".w", ".b", ".kernel", ".bias"))]  # bnnpp and Flax layers


def _posterior_only(posterior, names):
    """The installed ArviZ's container holding only the posterior draws of ``names``."""
    dims = {n: list(posterior.sites[n].dims) for n in names if n in posterior.sites}
    posterior_group = {n: np.asarray(posterior.samples[n]) for n in names}
    return arviz_compat.build(arviz_compat.from_dict(posterior=posterior_group, dims=dims, attrs={}))


def _entry_label(name: str, index: tuple[int, ...]) -> str:
    """ArviZ's row label of one entry of a site: ``name`` or ``name[i, j]``."""
    return f"{name}[{', '.join(map(str, index))}]" if index else name


def _none_if_nan(v) -> float | None:
    v = float(v)
    return None if not np.isfinite(v) else v


def _scale_stats(posterior) -> dict:
    """``{site[index]: {"mean", "sd", "r_hat", "ess_bulk", "ess_tail"}}`` for every entry of every scale site."""
    out = {}
    for name in scale_sites(posterior):
        draws = np.asarray(posterior.samples[name], np.float64)
        with _quiet_arviz():  # one chain: R-hat is NaN (→ None)
            rhat, bulk, tail = arviz_compat.rhat_ess(draws)
        mean, sd = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1), ddof=1)
        for index in np.ndindex(draws.shape[2:]):
            values = {"mean": mean[index], "sd": sd[index], "r_hat": rhat[index], "ess_bulk": bulk[index], "ess_tail": tail[index]}
            out[_entry_label(name, index)] = {k: _none_if_nan(v) for k, v in values.items()}
    return out


def _block(arrays: list[np.ndarray], multi: bool) -> dict:
    """``{"count", "max_r_hat", "min_ess_bulk", "min_ess_tail", "share_r_hat_above_…"}`` over every
    entry of ``arrays`` (each ``(chain, draw, ...)``); R-hat only with ``multi`` (two chains or more)."""
    stats = [arviz_compat.rhat_ess(a) for a in arrays]
    rhat = np.concatenate([np.ravel(r) for r, _, _ in stats]) if multi else np.zeros(0)
    bulk = np.concatenate([np.ravel(b) for _, b, _ in stats])
    tail = np.concatenate([np.ravel(t) for _, _, t in stats])
    finite = rhat[np.isfinite(rhat)]
    return {
        "count": int(bulk.size),
        "max_r_hat": _none_if_nan(finite.max()) if finite.size else None,
        "min_ess_bulk": _none_if_nan(np.nanmin(bulk)) if bulk.size else None,
        "min_ess_tail": _none_if_nan(np.nanmin(tail)) if tail.size else None,
        f"share_r_hat_above_{RHAT_THRESHOLD}": float(np.mean(finite > RHAT_THRESHOLD)) if finite.size else None,
    }


def summary(posterior, x_ref: np.ndarray | None = None, num_ref: int = 20) -> dict:
    """Convergence summary of a posterior's draws (any backend).

    Args:
        posterior: a :class:`~bnnpp.Posterior`.
        x_ref: the fixed inputs ``(m, features)`` whose predictive probabilities (or
            regression means) are checked; default: the first ``num_ref`` training rows.
        num_ref: see ``x_ref``.

    Returns:
        A JSON-safe dict:

        * ``scales``: ``{site[index]: {"r_hat", "ess_bulk", "ess_tail", "mean", "sd"}}`` for
          every entry of every scale site (permutation-invariant);
        * ``weights``: ``{"count", "max_r_hat", "min_ess_bulk", "min_ess_tail",
          "share_r_hat_above_1.01"}`` over every weight and bias entry (these can be high
          from label switching alone);
        * ``predictive``: the same four statistics over the predictive probabilities of every
          class at ``x_ref`` (permutation-invariant);
        * ``max_r_hat``/``min_ess_bulk``: the worst values over scales and predictive
          quantities, the headline numbers; ``divergences`` (NUTS) or ``None``;
          ``num_chains``, ``num_draws``.

        R-hat is rank-normalised split R-hat (Vehtari et al. 2021); it needs at least two
        chains, so it is ``None`` for the one-chain VI backends (their draws are independent
        by construction: judge them with :func:`psis_khat`). ESS is reported for every fit
        with at least 4 draws; with fewer (MAP) all statistics are ``None``.
    """
    out: dict[str, Any] = {
        "num_chains": posterior.num_chains,
        "num_draws": posterior.num_draws,
        "divergences": posterior.stats.extras.get("divergences"),
    }
    if posterior.num_draws < 4:
        out.update(
            {
                "scales": {},
                "weights": None,
                "predictive": None,
                "max_r_hat": None,
                "min_ess_bulk": None,
                "note": "fewer than 4 draws per chain: R-hat and ESS are undefined",
            }
        )
        return out
    out["scales"] = _scale_stats(posterior)
    multi = posterior.num_chains >= 2
    weights = _weight_sites(posterior)
    with _quiet_arviz():  # ESS of one chain is fine; ArviZ still logs a shape warning
        out["weights"] = _block([np.asarray(posterior.samples[n]) for n in weights], multi) if weights else None
    out["predictive"] = None
    if posterior.model is not None and (x_ref is not None or posterior.has_data):
        x_ref = np.asarray(posterior.x[:num_ref] if x_ref is None else x_ref, np.float32)
        pred = posterior.predict(x_ref)
        q = pred.probs if pred.task == "classification" else pred.draws
        q = q.reshape(posterior.num_chains, posterior.num_draws, *q.shape[1:])
        with _quiet_arviz():
            out["predictive"] = _block([np.asarray(q)], multi)
    heads_r = [v["r_hat"] for v in out["scales"].values() if v["r_hat"] is not None]
    heads_e = [v["ess_bulk"] for v in out["scales"].values() if v["ess_bulk"] is not None]
    if out["predictive"]:
        heads_r += [out["predictive"]["max_r_hat"]] if out["predictive"]["max_r_hat"] is not None else []
        heads_e += [out["predictive"]["min_ess_bulk"]] if out["predictive"]["min_ess_bulk"] is not None else []
    out["max_r_hat"] = max(heads_r) if heads_r else None
    out["min_ess_bulk"] = min(heads_e) if heads_e else None
    return out
