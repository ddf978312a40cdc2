"""bnnpp: Bayesian neural networks on JAX and NumPyro.

Define a network as a NumPyro model with hierarchical priors, fit it with one flag
(``bnnpp.fit(..., method=...)``), and analyse every posterior the same way in ArviZ.
"""

import importlib
import importlib.util
import time as _time

_IMPORT_START = _time.perf_counter()
"""When the package began to load (``time.perf_counter``): the CLI reports its start-up time from it."""

from bnnpp.lazy_modules import load_whole as _load_whole  # noqa: E402 - after the start time, before any NumPyro import

_load_whole()  # a NumPyro that ArviZ 1.x imported lazily, loaded whole before bnnpp imports its submodules

__all__ = ["Posterior", "Prediction", "data", "fit", "load", "metrics", "models", "priors", "registered"]
__version__ = "0.1.0"

# Lazy loading, for start-up time only (not to dodge an import cycle): JAX, NumPyro and the
# method registry take about a second to import, which `bnnpp --help` and every command that
# fails on its flags would pay for nothing. Each public name is imported on first access.
_LAZY = {
    "data": "bnnpp.data",
    "metrics": "bnnpp.metrics",
    "models": "bnnpp.models",
    "priors": "bnnpp.priors",
    "fit": "bnnpp.inference",
    "registered": "bnnpp.inference",
    "Posterior": "bnnpp.posterior",
    "Prediction": "bnnpp.posterior",
    "load": "bnnpp.posterior",
}


def __getattr__(name: str):
    _load_whole()  # ArviZ may have been imported, with its lazy NumPyro, since bnnpp was
    if name not in _LAZY:
        # any submodule on first use (bnnpp.diagnostics, bnnpp.inference, bnnpp.plots, ...)
        if not name.startswith("_") and importlib.util.find_spec(f"bnnpp.{name}") is not None:
            module = importlib.import_module(f"bnnpp.{name}")
            globals()[name] = module
            return module
        raise AttributeError(f"module 'bnnpp' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])
    value = module if module.__name__ == f"bnnpp.{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
