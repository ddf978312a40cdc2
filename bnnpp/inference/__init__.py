"""Inference methods, one per file, all returning a :class:`~bnnpp.Posterior`.

Every iterative method is an :class:`~bnnpp.inference.algorithm.Algorithm` — pure
``init``/``step``/``sample`` functions over a typed state — driven by the one runner in
:mod:`bnnpp.inference.runner`; its options are a frozen dataclass
(:mod:`bnnpp.inference.options`). ``fit(model, data, method=...)`` dispatches by name through
:mod:`bnnpp.inference.registry`; importing this package registers every method.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from bnnpp.inference import advi, bbb, map_estimate, nuts, sgld  # noqa: F401  (importing registers each method)
from bnnpp.inference.algorithm import Algorithm, Keys
from bnnpp.inference.checks import check_data
from bnnpp.inference.options import Options, option
from bnnpp.inference.registry import Method, get_backend, get_method, register, registered
from bnnpp.posterior import Posterior, Prediction, load

__all__ = [
    "Algorithm",
    "Keys",
    "Method",
    "Options",
    "Posterior",
    "Prediction",
    "check_data",
    "fit",
    "get_backend",
    "get_method",
    "load",
    "option",
    "register",
    "registered",
]


def fit(model, data: Any, *, method: str = "advi", seed: int = 0, progress: bool = True, **options) -> Posterior:
    """Fit a NumPyro model ``model(x, y=None)`` to data with the chosen inference method.

    Args:
        model: a NumPyro model with signature ``model(x, y=None)`` whose observations are the
            site ``"y"`` (every :mod:`bnnpp.models` network qualifies).
        data: ``(x, y)`` arrays or a :class:`bnnpp.data.Dataset` (its training split is used).
        method: a registered method name (see :func:`registered`).
        seed: integer seed for everything random in the fit.
        progress: show a progress bar.
        **options: the method's options (its options dataclass, e.g.
            ``bnnpp.inference.get_method("bbb").options``; defaults in ``.defaults``).

    Returns:
        A :class:`Posterior`.

    Raises:
        ValueError / TypeError: unknown method or option, bad option value, or bad data — all
        before anything compiles.
    """
    chosen = get_method(method)
    parsed = chosen.parse(options)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if not callable(model):
        raise TypeError(f"model must be a NumPyro model function model(x, y=None), got {model!r}")
    x, y = check_data(data, model)
    parsed.check_data(x, y)
    return chosen.run(model, x, y, parsed, seed=seed, progress=progress)


def __getattr__(name: str):
    # the module of method "map" was bnnpp.inference.map, which shadowed a builtin
    if name == "map":
        warnings.warn(
            "bnnpp.inference.map is now bnnpp.inference.map_estimate (method='map' is unchanged); "
            "the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module("bnnpp.inference.map_estimate")
    raise AttributeError(f"module 'bnnpp.inference' has no attribute {name!r}")
