"""The result of every inference method: :class:`Posterior` (draws, typed approximation and
fit statistics), :class:`Prediction`, ArviZ conversion and save/load."""

from bnnpp.posterior.approximation import (
    Approximation,
    FitStats,
    GuideParameters,
    MeanFieldGaussian,
    VariationalDropout,
)
from bnnpp.posterior.core import MAX_SAVED_DATA, Posterior
from bnnpp.posterior.families import FAMILIES
from bnnpp.posterior.io import read_netcdf, to_arviz
from bnnpp.posterior.laplace import LaplaceGaussian
from bnnpp.posterior.load import load
from bnnpp.posterior.prediction import Prediction

__all__ = [
    "FAMILIES",
    "MAX_SAVED_DATA",
    "Approximation",
    "FitStats",
    "GuideParameters",
    "LaplaceGaussian",
    "MeanFieldGaussian",
    "Posterior",
    "Prediction",
    "VariationalDropout",
    "load",
    "read_netcdf",
    "to_arviz",
]
