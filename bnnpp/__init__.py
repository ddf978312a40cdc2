"""bnnpp: Bayesian neural networks on JAX and NumPyro.

Define a network as a NumPyro model with hierarchical priors, fit it with one flag
(``bnnpp.fit(..., method=...)``), and analyse every posterior the same way in ArviZ.
"""

import time as _time

_IMPORT_START = _time.perf_counter()

from bnnpp import data, metrics, models, priors
from bnnpp.inference import fit, registered
from bnnpp.posterior import Posterior, Prediction, load

__all__ = ["Posterior", "Prediction", "data", "fit", "load", "metrics", "models", "priors", "registered"]
__version__ = "0.1.0"

IMPORT_SECONDS = _time.perf_counter() - _IMPORT_START
