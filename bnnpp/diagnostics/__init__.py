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

from bnnpp.diagnostics._common import RHAT_THRESHOLD, SCALE_SUFFIXES
from bnnpp.diagnostics.convergence import scale_sites, summary
from bnnpp.diagnostics.figures import forest_plot, trace_plot
from bnnpp.diagnostics.loo import LOO_MIN_DRAWS, KhatSummary, Loo, UnreliableComparisonWarning, compare, loo
from bnnpp.diagnostics.reference import MEAN_SQ_Z_PASS, SD_RATIO_PASS, moment_error, reference, reference_check
from bnnpp.diagnostics.variational import ElboConvergence, PsisKhat, elbo_convergence, khat_reading, psis_khat, vi_check
from bnnpp.posterior.io import read_netcdf, to_arviz

__all__ = [
    "LOO_MIN_DRAWS",
    "RHAT_THRESHOLD",
    "SCALE_SUFFIXES",
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
    "MEAN_SQ_Z_PASS",
    "SD_RATIO_PASS",
    "moment_error",
    "reference",
    "reference_check",
    "scale_sites",
    "summary",
    "to_arviz",
    "trace_plot",
    "vi_check",
]
