"""The result of every inference method: :class:`Posterior` (draws, typed approximation and
fit statistics), :class:`Prediction`, ArviZ conversion and save/load."""

from bnnpp.posterior.approximation import Approximation, FitStats, GuideParameters, MeanFieldGaussian
from bnnpp.posterior.core import MAX_SAVED_DATA, Posterior
from bnnpp.posterior.io import read_netcdf, to_arviz
from bnnpp.posterior.load import load
from bnnpp.posterior.prediction import Prediction

__all__ = [
    "MAX_SAVED_DATA",
    "Approximation",
    "FitStats",
    "GuideParameters",
    "MeanFieldGaussian",
    "Posterior",
    "Prediction",
    "load",
    "read_netcdf",
    "to_arviz",
]
