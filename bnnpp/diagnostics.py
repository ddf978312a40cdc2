"""The one door to ArviZ's analyses: convert a :class:`~bnnpp.Posterior` to ``InferenceData``, check
convergence (MCMC and variational), estimate out-of-sample fit (PSIS-LOO), compare fits and
draw ArviZ's figures. Only this module and :mod:`bnnpp.posterior.arviz_compat` call ArviZ.

Every function takes a :class:`~bnnpp.Posterior` from any backend, so MCMC and variational
fits are read the same way:

* :func:`summary`: R-hat (rank-normalised, split) and bulk/tail ESS of every scale
  hyperparameter; over the weights the max R-hat, min ESS and the share with R-hat > 1.01;
  divergences; and, because hidden units can swap places between chains (the weights are
  symmetric under permutation, so their R-hat flags label switching rather than a
  non-converged function), R-hat and ESS of permutation-invariant quantities: the layer
  scales and the predictive probabilities at a fixed set of inputs.
* :func:`elbo_convergence` and :func:`psis_khat` for variational fits (Yao, Vehtari, Simpson &
  Gelman 2018, "Yes, but did it work?").
* :func:`loo` and :func:`compare` (Vehtari, Gelman & Gabry 2017).

ArviZ 0.x and 1.x both work: every ArviZ call goes through :mod:`bnnpp.posterior.arviz_compat`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from matplotlib.figure import Figure

from bnnpp import metrics
from bnnpp.inference.joint import gaussian_log_weights
from bnnpp.posterior import MeanFieldGaussian, arviz_compat
from bnnpp.posterior.io import POINT_ESTIMATE_NOTE, read_netcdf, to_arviz

__all__ = [
    "ElboConvergence",
    "KhatSummary",
    "Loo",
    "PsisKhat",
    "UnreliableComparisonWarning",
    "compare",
    "elbo_convergence",
    "forest_plot",
    "khat_reading",
    "loo",
    "psis_khat",
    "read_netcdf",
    "reference",
    "scale_sites",
    "summary",
    "to_arviz",
    "trace_plot",
    "vi_check",
]

#: Suffixes of the latent sites that hold a layer's prior scale (see bnnpp.models.layers).
SCALE_SUFFIXES = (".scale", ".variance")
RHAT_THRESHOLD = 1.01  # Vehtari et al. (2021): R-hat below 1.01 before trusting a chain


@contextlib.contextmanager
def _quiet_arviz():
    """Silence ArviZ's one-chain shape warnings (its logger and UserWarnings) for a block."""
    logger = logging.getLogger("arviz")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        logger.setLevel(level)


class _Result(Mapping):
    """A small frozen result: attributes, plus read-only dict access (``r["elpd"]``,
    ``dict(r)``) over its fields and :attr:`_aliases` (keys that are not identifiers), as
    bnnpp 0.1's dicts were read."""

    _aliases: ClassVar[dict[str, str]] = {}

    def _keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self)] + list(self._aliases)

    def __getitem__(self, key: str):
        if key in self._aliases:
            return getattr(self, self._aliases[key])
        if key not in {f.name for f in dataclasses.fields(self)}:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())


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
        out.update({"scales": {}, "weights": None, "predictive": None, "max_r_hat": None, "min_ess_bulk": None,
                    "note": "fewer than 4 draws per chain: R-hat and ESS are undefined"})
        return out
    scales = scale_sites(posterior)
    out["scales"] = {}
    for name in scales:
        draws = np.asarray(posterior.samples[name], np.float64)
        with _quiet_arviz():  # one chain: R-hat is NaN (→ None)
            rhat, bulk, tail = arviz_compat.rhat_ess(draws)
        mean, sd = draws.mean(axis=(0, 1)), draws.std(axis=(0, 1), ddof=1)
        for index in np.ndindex(draws.shape[2:]):
            values = {"mean": mean[index], "sd": sd[index], "r_hat": rhat[index], "ess_bulk": bulk[index], "ess_tail": tail[index]}
            out["scales"][_entry_label(name, index)] = {k: _none_if_nan(v) for k, v in values.items()}

    multi = posterior.num_chains >= 2

    def block(arrays: list[np.ndarray]) -> dict:  # each (chain, draw, ...)
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

    weights = _weight_sites(posterior)
    with _quiet_arviz():  # ESS of one chain is fine; ArviZ still logs a shape warning
        out["weights"] = block([np.asarray(posterior.samples[n]) for n in weights]) if weights else None
    out["predictive"] = None
    if posterior.model is not None and (x_ref is not None or posterior.has_data):
        x_ref = np.asarray(posterior.x[:num_ref] if x_ref is None else x_ref, np.float32)
        pred = posterior.predict(x_ref)
        q = pred.probs if pred.task == "classification" else pred.draws
        q = q.reshape(posterior.num_chains, posterior.num_draws, *q.shape[1:])
        with _quiet_arviz():
            out["predictive"] = block([np.asarray(q)])
    heads_r = [v["r_hat"] for v in out["scales"].values() if v["r_hat"] is not None]
    heads_e = [v["ess_bulk"] for v in out["scales"].values() if v["ess_bulk"] is not None]
    if out["predictive"]:
        heads_r += [out["predictive"]["max_r_hat"]] if out["predictive"]["max_r_hat"] is not None else []
        heads_e += [out["predictive"]["min_ess_bulk"]] if out["predictive"]["min_ess_bulk"] is not None else []
    out["max_r_hat"] = max(heads_r) if heads_r else None
    out["min_ess_bulk"] = min(heads_e) if heads_e else None
    return out


# --------------------------------------------------------------------------------------
# Variational fits: did the optimiser converge, and is q any good?
# --------------------------------------------------------------------------------------


def _negative_elbo_trace(posterior) -> np.ndarray:
    trace = posterior.stats.negative_elbo
    if trace is None:
        raise ValueError(f"method {posterior.method!r} has no loss trace to read as a negative ELBO: ELBO convergence is for variational fits (advi, bbb)")
    return np.asarray(trace, np.float64)


@dataclass(frozen=True, repr=False)
class ElboConvergence(_Result):
    """:func:`elbo_convergence`'s answer (also readable as a dict)."""

    relative_change: float
    final_elbo: float
    window_steps: int
    converged: bool
    tol: float

    def __repr__(self) -> str:
        verdict = "converged" if self.converged else "not converged"
        return (
            f"ElboConvergence({verdict}: ELBO {self.final_elbo:.4g}, relative change {self.relative_change:.2%} over the "
            f"last {self.window_steps} steps, tol {self.tol:.0%})"
        )


def elbo_convergence(posterior, window: float = 0.1, tol: float = 0.01) -> ElboConvergence:
    """Has the ELBO stopped improving? Compares the mean negative ELBO over the two halves
    of the last ``window`` share of the steps.

    Returns:
        An :class:`ElboConvergence`: ``relative_change`` |m₂ − m₁| / |m|, ``final_elbo`` −m₂,
        ``window_steps`` k, ``converged`` (relative_change < tol) and ``tol``, with m₁, m₂
        the means of the two halves and m the mean of the whole window (also readable as a
        dict, ``r["converged"]``). Monte-Carlo noise in the ELBO averages out over the
        window; a trace still falling by more than ``tol`` (1%) is not done.
    """
    if not 0 < window <= 1:
        raise ValueError(f"window must be a share of the steps in (0, 1], got {window!r}")
    loss = _negative_elbo_trace(posterior)
    loss = loss[np.isfinite(loss)]
    if loss.size < 4:
        raise ValueError(f"the loss trace has {loss.size} finite steps; run at least 4 steps to judge convergence")
    k = max(4, round(window * loss.size))
    last = loss[-k:]
    m1, m2 = last[: k // 2].mean(), last[k // 2 :].mean()
    rel = float(abs(m2 - m1) / max(abs(last.mean()), 1e-12))
    return ElboConvergence(rel, float(-m2), int(k), bool(rel < tol), float(tol))


def khat_reading(k: float | None) -> str:
    """Yao et al. (2018)'s reading of a PSIS k̂ (also Vehtari et al. 2024 for LOO)."""
    if k is None or not np.isfinite(k):
        return "undefined"
    if k < 0.5:
        return "good (k < 0.5)"
    if k < 0.7:
        return "usable (0.5 ≤ k < 0.7)"
    return "not trustworthy (k ≥ 0.7)"


def _gaussian_factors(posterior) -> tuple[dict, dict]:
    """The mean-field Gaussian q on the unconstrained space of a variational posterior."""
    q = posterior.approximation
    if not isinstance(q, MeanFieldGaussian):
        raise ValueError(
            f"PSIS k̂ needs a mean-field Gaussian variational posterior (bbb, or advi with guide='normal'); "
            f"method {posterior.method!r} has none"
        )
    names = list(posterior.sites)
    return ({n: np.asarray(q.loc[n], np.float32) for n in names}, {n: np.asarray(q.scale[n], np.float32) for n in names})


@dataclass(frozen=True, repr=False)
class PsisKhat(_Result):
    """:func:`psis_khat`'s answer (also readable as a dict)."""

    khat: float
    reading: str
    num_draws: int

    def __repr__(self) -> str:
        return f"PsisKhat(k̂ = {self.khat:.3f}, {self.reading}, from {self.num_draws} draws of q)"


def psis_khat(posterior, num_draws: int = 1000, seed: int = 0) -> PsisKhat:
    """Pareto-smoothed importance sampling diagnostic of a variational approximation
    (Yao, Vehtari, Simpson & Gelman 2018, §3): the shape k̂ of the generalised Pareto fit to
    the tail of the importance ratios p(θ, y) / q(θ) over ``num_draws`` draws from q.

    Returns:
        A :class:`PsisKhat` with ``khat``, ``reading`` and ``num_draws`` (also readable as a
        dict): k̂ < 0.5 good, 0.5–0.7 usable, > 0.7 the approximation is not trustworthy
        (importance weights with infinite variance).
    """
    if isinstance(num_draws, bool) or not isinstance(num_draws, int) or num_draws < 100:
        raise ValueError(f"num_draws must be an integer ≥ 100 (the Pareto fit needs a tail), got {num_draws!r}")
    loc, scale = _gaussian_factors(posterior)
    if not posterior.has_data:
        raise ValueError("PSIS k̂ needs the training data: this posterior was saved without it (include_data=True)")
    model = posterior.model_or_raise()
    lw = gaussian_log_weights(model, loc, scale, posterior.x, posterior.y, num_draws, seed)
    if not np.all(np.isfinite(lw)):
        return PsisKhat(float("inf"), khat_reading(float("inf")), num_draws)
    k = arviz_compat.pareto_khat(lw)
    return PsisKhat(k, khat_reading(k), num_draws)


def vi_check(posterior, num_draws: int = 1000, seed: int = 0) -> dict:
    """Both checks of a variational fit: ``{"elbo": elbo_convergence(...), "psis": psis_khat(...)}``."""
    return {"elbo": elbo_convergence(posterior), "psis": psis_khat(posterior, num_draws, seed)}


# --------------------------------------------------------------------------------------
# Out-of-sample fit
# --------------------------------------------------------------------------------------


def _idata(obj):
    """``obj`` if it is ArviZ data already (``InferenceData`` or ``DataTree``), else ``obj.to_arviz()``."""
    return obj if arviz_compat.is_arviz_data(obj) else obj.to_arviz()


@dataclass(frozen=True, repr=False)
class KhatSummary:
    """The Pareto k̂ of every observation of a LOO estimate, counted in the bins of Vehtari et
    al. (2024): ``good`` k ≤ 0.5, ``ok`` 0.5 < k ≤ 0.7, ``bad`` 0.7 < k ≤ 1, ``very_bad``
    k > 1 (the LOO estimate of those observations is unreliable above 0.7)."""

    max: float
    good: int
    ok: int
    bad: int
    very_bad: int

    @classmethod
    def of(cls, k: np.ndarray) -> KhatSummary:
        """The summary of the k̂ values ``k`` ``(n,)``."""
        k = np.asarray(k, np.float64)
        counts = np.histogram(k, bins=[-np.inf, 0.5, 0.7, 1.0, np.inf])[0]
        return cls(float(np.max(k)), *(int(c) for c in counts))

    def __repr__(self) -> str:
        return f"k̂ max {self.max:.2f}: {self.good} good (≤ 0.5), {self.ok} ok (≤ 0.7), {self.bad} bad (≤ 1), {self.very_bad} very bad"


@dataclass(frozen=True, repr=False)
class Loo(_Result):
    """A PSIS-LOO estimate (:func:`loo`). Attributes: ``elpd`` (expected log pointwise
    predictive density), its standard error ``se``, the effective number of parameters
    ``p_loo``, the number of observations ``n``, every observation's Pareto k̂
    ``pareto_k`` ``(n,)`` and ArviZ's ``warning`` flag; :attr:`khat` counts the k̂ values
    and its repr is one line. Also readable as a dict (``r["elpd"]``,
    ``r["share_khat_above_0.7"]``)."""

    elpd: float
    se: float
    p_loo: float
    n: int
    pareto_k: np.ndarray
    warning: bool

    _aliases: ClassVar[dict[str, str]] = {"max_khat": "max_khat", "share_khat_above_0.7": "share_khat_above"}

    @property
    def khat(self) -> KhatSummary:
        """The k̂ values counted in Vehtari et al.'s bins, with their maximum."""
        return KhatSummary.of(self.pareto_k)

    @property
    def max_khat(self) -> float:
        """The largest Pareto k̂."""
        return float(np.max(self.pareto_k))

    @property
    def share_khat_above(self) -> float:
        """The share of observations with k̂ > 0.7."""
        return float(np.mean(np.asarray(self.pareto_k) > 0.7))

    def __repr__(self) -> str:
        return f"Loo(elpd {self.elpd:.2f} ± {self.se:.2f} (se), p_loo {self.p_loo:.2f}, n {self.n}; {self.khat!r})"


LOO_MIN_DRAWS = 100
"""Below this many draws :func:`loo` says that PSIS has too few draws to smooth when k̂ is high."""


def loo(posterior) -> Loo:
    """PSIS leave-one-out cross-validation (Vehtari, Gelman & Gabry 2017).

    Args:
        posterior: a :class:`~bnnpp.Posterior`, or ArviZ data (``InferenceData`` or
            ``DataTree``) with a ``log_likelihood`` group, with at least two draws.

    Returns:
        A :class:`Loo`: ``elpd`` and its ``se``, ``p_loo``, ``n``, the Pareto k̂ of every
        observation (``pareto_k``, ``(n,)``; above 0.7 an observation's LOO estimate is
        unreliable) summarised by ``khat``; a one-line repr. A ``UserWarning`` names how many
        observations have k̂ > 0.7 (and, below :data:`LOO_MIN_DRAWS` draws, that there are too
        few draws: an ensemble's five members give five).

    Raises:
        ValueError: one line, for a point estimate (MAP: one draw) or a fit without its data.
    """
    if not arviz_compat.is_arviz_data(posterior):
        if not posterior.has_data:
            raise ValueError("loo needs a log_likelihood group: this posterior was saved without its training data; save with include_data=True")
        if posterior.num_chains * posterior.num_draws < 2:
            raise ValueError(f"loo of method {posterior.method!r}: {POINT_ESTIMATE_NOTE}")
    idata = _idata(posterior)
    groups = arviz_compat.groups(idata)
    if "log_likelihood" not in groups:
        note = groups["posterior"].attrs.get("bnnpp_no_log_likelihood")
        raise ValueError(f"loo: {note}" if note else "loo needs a log_likelihood group: build it with Posterior.to_arviz() (training data included)")
    ll = groups["log_likelihood"]
    draws = ll.sizes.get("chain", 1) * ll.sizes.get("draw", 1)
    if draws < 2:
        raise ValueError(f"loo: {POINT_ESTIMATE_NOTE}")
    with _quiet_arviz():  # one chain (VI): ArviZ logs a shape warning computing the relative ESS
        res = arviz_compat.loo(idata)
    k = np.asarray(res.pareto_k)
    bad = int(np.sum(~(k <= 0.7)))  # inf and NaN count as unreliable
    if bad:
        few = (f"; {draws} draws are too few for Pareto smoothing (an ensemble has one per member): compare such fits on "
               "held-out data (Prediction.scores)" if draws < LOO_MIN_DRAWS else "")
        warnings.warn(f"loo: Pareto k̂ > 0.7 for {bad} of {k.size} observations, whose LOO terms are unreliable "
                      f"(Loo.pareto_k){few}", UserWarning, stacklevel=2)
    return Loo(res.elpd, res.se, res.p_loo, int(k.size), k, res.warning)


def compare(posteriors: dict[str, Any]):
    """Rank fits by PSIS-LOO with ``az.compare`` (stacking weights).

    Args:
        posteriors: name → :class:`~bnnpp.Posterior` or ArviZ data; each needs a
            log-likelihood and at least two draws (MAP is left out by the caller).

    Returns:
        ArviZ's comparison ``pandas.DataFrame`` (rank, elpd_loo, p_loo, elpd_diff, weight,
        se, dse, warning), best first (these column names under ArviZ 0.x and 1.x), with two more columns: ``khat_above_0.7`` (how many
        observations of the fit have Pareto k̂ > 0.7) and ``unreliable`` (any has, or ArviZ
        flagged the fit: its elpd_loo, and so its place in the ranking, cannot be trusted).
        When a fit is unreliable an :class:`UnreliableComparisonWarning` says which, in one line.
    """
    if len(posteriors) < 2:
        raise ValueError(f"compare needs at least two fits with several draws each, got {len(posteriors)}")
    given = {k: arviz_compat.is_arviz_data(v) for k, v in posteriors.items()}
    point = [k for k, v in posteriors.items() if not given[k] and v.num_chains * v.num_draws < 2]
    point += [k for k, v in posteriors.items() if given[k] and "log_likelihood" not in arviz_compat.group_names(v)]
    if point:
        raise ValueError(f"compare: {', '.join(map(str, point))} has no log-likelihood draws ({POINT_ESTIMATE_NOTE})")
    idatas = {k: _idata(v) for k, v in posteriors.items()}
    with _quiet_arviz():
        table = arviz_compat.compare(idatas)
        above = {}
        for name, idata in idatas.items():
            k = np.asarray(arviz_compat.loo(idata).pareto_k)
            above[name] = (int(np.sum(~(k <= 0.7))), int(k.size))  # inf and NaN count as unreliable
    table["khat_above_0.7"] = [above[name][0] for name in table.index]
    table["unreliable"] = [bool(above[name][0] or row["warning"]) for name, row in table.iterrows()]
    bad = [f"{name} ({above[name][0]} of {above[name][1]} observations)" for name in table.index if table.loc[name, "unreliable"]]
    if bad:
        warnings.warn(
            f"compare: Pareto k̂ > 0.7 for {', '.join(bad)}: their LOO estimates are unreliable, and so is the ranking; "
            "compare such fits on held-out data (Prediction.scores)", UnreliableComparisonWarning, stacklevel=2,
        )
    return table


class UnreliableComparisonWarning(UserWarning):
    """A LOO comparison ranks a fit whose Pareto k̂ exceed 0.7 (Vehtari, Gelman & Gabry 2017):
    its elpd_loo is unreliable, and so is the ranking."""


# --------------------------------------------------------------------------------------
# ArviZ figures (returned as matplotlib Figures, no pyplot state)
# --------------------------------------------------------------------------------------


def forest_plot(posteriors: dict[str, Any], var_names: list[str] | None = None, *, title: str = "") -> Figure:
    """ArviZ forest plot of the scale sites across fits: one row per site entry, one
    colour per fit (94% HDI and quartiles). Under ArviZ 1.x, whose plots draw into figures of
    their own, the same rows are drawn here with matplotlib (94% equal-tailed interval,
    quartiles, median).

    Args:
        posteriors: name → :class:`~bnnpp.Posterior`.
        var_names: sites to show (default: the scale sites common to all fits).
    """
    names = list(posteriors)
    if var_names is None:
        common = [set(scale_sites(p)) for p in posteriors.values()]
        var_names = sorted(set.intersection(*common)) if common else []
    if not var_names:
        raise ValueError("no scale sites to plot: the models have fixed prior scales (use a hyperprior)")
    datas = [_posterior_only(posteriors[n], var_names) for n in names]
    n_rows = sum(int(np.prod(posteriors[names[0]].samples[v].shape[2:], dtype=int)) for v in var_names)
    fig = Figure(figsize=(7, 1.2 + 0.35 * n_rows * len(names)), layout="constrained")
    ax = fig.subplots()
    if arviz_compat.arviz_major() >= 1:
        _forest_rows(ax, {n: posteriors[n] for n in names}, var_names)
        ax.set_title(title or "layer scales across methods (94% interval)")
        return fig
    import arviz as az

    az.plot_forest(datas, model_names=names, var_names=var_names, combined=True, ax=ax)
    ax.set_title(title or "layer scales across methods (94% HDI)")
    return fig


def _forest_rows(ax, posteriors: dict[str, Any], var_names: list[str]) -> None:
    """Forest rows drawn with matplotlib: per site entry and fit, the 94% equal-tailed
    interval (thin), the quartiles (thick) and the median (dot), chains combined."""
    labels, y = [], 0
    for var in reversed(var_names):
        shape = np.shape(next(iter(posteriors.values())).samples[var])[2:]
        for index in reversed(list(np.ndindex(shape))):
            for i, (name, post) in enumerate(posteriors.items()):
                draws = np.asarray(post.samples[var], np.float64).reshape(-1, *shape)[(slice(None), *index)]
                lo, q1, med, q3, hi = np.quantile(draws, [0.03, 0.25, 0.5, 0.75, 0.97])
                colour = f"C{i}"
                ax.plot([lo, hi], [y, y], color=colour, lw=1)
                ax.plot([q1, q3], [y, y], color=colour, lw=3)
                ax.plot([med], [y], "o", color=colour, ms=4, label=name if not labels else None)
                y += 1
            labels.append((y - (len(posteriors) + 1) / 2, _entry_label(var, index)))
            y += 1
    ax.set_yticks([t for t, _ in labels], [text for _, text in labels])
    ax.legend(loc="best", fontsize="small")


def trace_plot(posterior, var_names: list[str] | None = None, *, title: str = "") -> Figure:
    """ArviZ trace plot (per-chain densities and traces) of the scale sites of one fit."""
    var_names = var_names or scale_sites(posterior)
    if not var_names:
        raise ValueError("no scale sites to plot: the model has fixed prior scales (use a hyperprior)")
    fig = Figure(figsize=(10, 2.0 * len(var_names)), layout="constrained")
    axes = fig.subplots(len(var_names), 2, squeeze=False)
    if arviz_compat.arviz_major() >= 1:  # ArviZ 1.x plots into figures of its own: the same panels here
        for (left, right), var in zip(axes, var_names, strict=True):
            draws = np.asarray(posterior.samples[var], np.float64)
            for c, chain in enumerate(draws.reshape(draws.shape[0], draws.shape[1], -1)):
                left.hist(chain.ravel(), bins=30, density=True, histtype="step", color=f"C{c}")
                right.plot(chain, color=f"C{c}", lw=0.5)
            left.set_title(var)
            right.set_title(var)
    else:
        import arviz as az

        az.plot_trace(_posterior_only(posterior, var_names), var_names=var_names, axes=axes, compact=True)
    if title:
        fig.suptitle(title)
    return fig


# --------------------------------------------------------------------------------------
# How far is an approximation from a reference posterior (e.g. long NUTS)?
# --------------------------------------------------------------------------------------


def reference_check(reference_post, x: np.ndarray, num_ref: int = 20) -> dict:
    """Is ``reference_post`` fit to serve as the exact posterior? Its convergence on the
    permutation-invariant quantities (:func:`summary` at the first ``num_ref`` rows of ``x``).

    Returns:
        ``{"method", "num_chains", "num_draws", "max_r_hat", "min_ess_bulk", "divergences",
        "converged"}``; ``converged`` is True when max R-hat < :data:`RHAT_THRESHOLD` (1.01).

    Raises:
        ValueError: the reference has fewer than 2 chains (R-hat cannot be checked).
    """
    if reference_post.num_chains < 2:
        raise ValueError(
            f"the reference posterior ({reference_post.method}) has {reference_post.num_chains} chain: R-hat needs ≥ 2; "
            "fit it with num_chains=4 (e.g. method='nuts', num_chains=4)"
        )
    s = summary(reference_post, x_ref=np.asarray(x[:num_ref], np.float32))
    r = s["max_r_hat"]
    return {
        "method": reference_post.method, "num_chains": reference_post.num_chains, "num_draws": reference_post.num_draws,
        "max_r_hat": r, "min_ess_bulk": s["min_ess_bulk"], "divergences": s["divergences"],
        "converged": r is not None and r < RHAT_THRESHOLD,
    }


def reference(post, reference_post, x: np.ndarray, *, check: dict | None = None, num_ref: int = 20) -> dict:
    """The predictive agreement of ``post`` with a reference posterior (normally a long
    NUTS run) at the inputs ``x`` ``(n, ...)``, as Izmailov et al. (2021, sec. 5) measure
    approximate inference against HMC.

    Classification (per point, then averaged over ``x``): ``agreement`` — the share of points
    where both predictive distributions pick the same class; ``total_variation`` —
    ½ Σ_c |p_c − p_ref,c| of the posterior-predictive probabilities.
    Regression: ``w2`` — the 2-Wasserstein distance between the two predictive marginals
    (mixtures over draws of N(mean, noise²); :func:`bnnpp.metrics.wasserstein2`), mean over
    points; ``sd_ratio`` and ``epistemic_sd_ratio`` — the geometric mean over points of
    predictive sd / the reference's (total, and of the mean function only): 1 is right,
    below 1 overconfident, above 1 underconfident.

    Args:
        post: the approximation (any :class:`~bnnpp.Posterior`).
        reference_post: the reference; its R-hat is checked (:func:`reference_check`) unless
            ``check`` (that function's result, computed once for many methods) is given.
        x: inputs to compare at (test points, or a grid reaching out of the data).
        num_ref: rows of ``x`` used for the reference's R-hat.

    Returns:
        A JSON-safe dict: ``task``, the numbers above, ``per_point`` (lists ``(n,)``: the
        per-point agreement and total variation, or W2 and sd ratio), and ``reference``
        (:func:`reference_check`'s dict). A non-converged reference gives a UserWarning.
    """
    x = np.asarray(x, np.float32)
    if x.ndim < 2 or x.shape[0] == 0:
        raise ValueError(f"x must be a non-empty batch of inputs (n, features...), got shape {x.shape}")
    check = reference_check(reference_post, x, num_ref) if check is None else check
    if not check["converged"]:
        warnings.warn(
            f"the reference posterior has max R-hat {check['max_r_hat']} (≥ {RHAT_THRESHOLD}): run it longer "
            "(more warm-up and draws) before trusting the agreement numbers",
            UserWarning,
            stacklevel=2,
        )
    p, q = post.predict(x), reference_post.predict(x)
    if p.task != q.task:
        raise ValueError(f"the posterior is {p.task} and the reference {q.task}: fit both to the same model")
    out: dict[str, Any] = {"task": p.task, "reference": check, "num_points": int(x.shape[0])}
    if p.task == "classification":
        agree = metrics.top1_agreement(p.mean, q.mean)
        tv = metrics.total_variation(p.mean, q.mean)
        out.update({"agreement": float(agree.mean()), "total_variation": float(tv.mean()),
                    "per_point": {"agreement": agree.tolist(), "total_variation": tv.tolist()}})
        return out
    if p.likelihood != "gaussian" or q.likelihood != "gaussian" or p.draws.ndim != 2:
        raise ValueError(
            f"reference compares 1-D Gaussian predictives; got {p.likelihood} and {q.likelihood} with targets "
            f"{p.draws.shape[1:]}: compare test scores (Prediction.scores) instead"
        )
    w2 = metrics.wasserstein2(metrics.predictive_quantiles(p.draws, p.noise), metrics.predictive_quantiles(q.draws, q.noise))
    ratio = p.std / q.std
    epi = p.epistemic_std / np.maximum(q.epistemic_std, 1e-12)
    out.update({
        "w2": float(w2.mean()), "sd_ratio": float(np.exp(np.mean(np.log(ratio)))),
        "epistemic_sd_ratio": float(np.exp(np.mean(np.log(np.maximum(epi, 1e-12))))),
        "per_point": {"w2": w2.tolist(), "sd_ratio": ratio.tolist()},
    })
    return out
