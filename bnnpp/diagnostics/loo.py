"""Out-of-sample fit: PSIS-LOO and the comparison of fits (Vehtari, Gelman & Gabry 2017)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from bnnpp.diagnostics._common import _quiet_arviz, _Result
from bnnpp.posterior import arviz_compat
from bnnpp.posterior.io import POINT_ESTIMATE_NOTE

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
            raise ValueError(
                "loo needs a log_likelihood group: this posterior was saved without its training data; save with include_data=True"
            )
        if posterior.num_chains * posterior.num_draws < 2:
            raise ValueError(f"loo of method {posterior.method!r}: {POINT_ESTIMATE_NOTE}")
    idata = _idata(posterior)
    groups = arviz_compat.groups(idata)
    if "log_likelihood" not in groups:
        note = groups["posterior"].attrs.get("bnnpp_no_log_likelihood")
        raise ValueError(
            f"loo: {note}" if note else "loo needs a log_likelihood group: build it with Posterior.to_arviz() (training data included)"
        )
    ll = groups["log_likelihood"]
    draws = ll.sizes.get("chain", 1) * ll.sizes.get("draw", 1)
    if draws < 2:
        raise ValueError(f"loo: {POINT_ESTIMATE_NOTE}")
    with _quiet_arviz():  # one chain (VI): ArviZ logs a shape warning computing the relative ESS
        res = arviz_compat.loo(idata)
    k = np.asarray(res.pareto_k)
    bad = int(np.sum(~(k <= 0.7)))  # inf and NaN count as unreliable
    if bad:
        few = (
            f"; {draws} draws are too few for Pareto smoothing (an ensemble has one per member): compare such fits on "
            "held-out data (Prediction.scores)"
            if draws < LOO_MIN_DRAWS
            else ""
        )
        warnings.warn(
            f"loo: Pareto k̂ > 0.7 for {bad} of {k.size} observations, whose LOO terms are unreliable (Loo.pareto_k){few}",
            UserWarning,
            stacklevel=2,
        )
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
            "compare such fits on held-out data (Prediction.scores)",
            UnreliableComparisonWarning,
            stacklevel=2,
        )
    return table


class UnreliableComparisonWarning(UserWarning):
    """A LOO comparison ranks a fit whose Pareto k̂ exceed 0.7 (Vehtari, Gelman & Gabry 2017):
    its elpd_loo is unreliable, and so is the ranking."""
