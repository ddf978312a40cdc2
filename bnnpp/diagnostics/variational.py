"""Variational fits: did the optimiser converge, and is q any good? (Yao, Vehtari, Simpson &
Gelman 2018, "Yes, but did it work?")"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bnnpp.diagnostics._common import _Result
from bnnpp.inference.joint import gaussian_log_weights
from bnnpp.posterior import MeanFieldGaussian, arviz_compat

# --------------------------------------------------------------------------------------
# Variational fits: did the optimiser converge, and is q any good?
# --------------------------------------------------------------------------------------


def _negative_elbo_trace(posterior) -> np.ndarray:
    trace = posterior.stats.negative_elbo
    if trace is None:
        raise ValueError(
            f"method {posterior.method!r} has no loss trace to read as a negative ELBO: ELBO convergence is for variational fits (advi, bbb)"
        )
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
