"""Inference backends, one per file, all returning a :class:`Posterior`.

``fit(model, data, method=...)`` dispatches by name through the registry in
:mod:`bnnpp.inference.base`; importing this package registers every backend.
"""

from __future__ import annotations

from typing import Any

from bnnpp.inference import advi, bbb, map, nuts, sgld  # noqa: F401  (importing registers each backend)
from bnnpp.inference.base import Posterior, Prediction, check_data, get_backend, load, registered

__all__ = ["Posterior", "Prediction", "fit", "load", "registered"]


def fit(model, data: Any, *, method: str = "advi", seed: int = 0, progress: bool = True, **options) -> Posterior:
    """Fit a NumPyro model ``model(x, y=None)`` to data with the chosen inference method.

    Args:
        model: a NumPyro model with signature ``model(x, y=None)`` whose observations are the
            site ``"y"`` (every :mod:`bnnpp.models` network qualifies).
        data: ``(x, y)`` arrays or a :class:`bnnpp.data.Dataset` (its training split is used).
        method: a registered method name (see :func:`registered`).
        seed: integer seed for everything random in the fit.
        progress: show a progress bar.
        **options: the method's options (``bnnpp.inference.get_backend(method).defaults``).

    Returns:
        A :class:`Posterior`.

    Raises:
        ValueError / TypeError: unknown method or option, bad option value, or bad data — all
        before anything compiles.
    """
    backend = get_backend(method)
    merged = backend.check_options(options)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if not callable(model):
        raise TypeError(f"model must be a NumPyro model function model(x, y=None), got {model!r}")
    x, y = check_data(data, model)
    if backend.validate_data is not None:
        backend.validate_data(merged, x, y)
    return backend.fit(model, x, y, seed=seed, progress=progress, **merged)
