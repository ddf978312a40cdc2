"""The Laplace approximation's family and predictives, defined in
:mod:`bnnpp.posterior.laplace` (beside the posterior, so that a saved fit rebuilds it in any
process); re-exported here for the method's modules."""

from bnnpp.posterior.laplace import _KEY, LaplaceGaussian, _likelihood_kind, _linearised, _observation

__all__ = ["_KEY", "LaplaceGaussian", "_likelihood_kind", "_linearised", "_observation"]
