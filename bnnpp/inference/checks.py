"""Training data checked against a model before anything compiles."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["BLACKJAX_MIN", "blackjax_missing", "check_data", "require_blackjax"]


def check_data(data: Any, model: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate training data for ``model`` before anything compiles.

    Args:
        data: ``(x, y)`` or a :class:`bnnpp.data.Dataset` (its training part is used).
        model: the NumPyro model; its optional attributes ``likelihood``, ``num_classes`` and
            ``input_rank`` sharpen the checks.

    Returns:
        ``x`` as float32 ``(n, ...)`` and ``y`` as int32 (classification) or float32 ``(n,)``;
        a model of its own may take targets ``(n, K)`` (one event per row, checked against the
        model by :func:`bnnpp.introspection.check_model`).
    """
    if hasattr(data, "x_train") and hasattr(data, "y_train"):
        x, y = data.x_train, data.y_train
    elif isinstance(data, (tuple, list)) and len(data) == 2:
        x, y = data
    else:
        raise TypeError("data must be (x, y) or a bnnpp.data.Dataset")
    for name, a in (("x", x), ("y", y)):
        if np.ma.isMaskedArray(a) and np.ma.is_masked(a):
            raise ValueError(
                f"{name} is a masked array with masked entries: drop or impute those rows (the values under the mask would be used)"
            )
        if hasattr(a, "dtype") and np.iscomplexobj(a):  # (a list's numbers are cast below, where a complex one fails)
            raise TypeError(f"{name} is complex ({a.dtype}): pass real numbers")
    try:
        with np.errstate(over="ignore"):  # beyond float32 becomes inf, refused below
            x = np.asarray(x, dtype=np.float32)
        y = np.asarray(y)
    except (TypeError, ValueError) as e:
        raise TypeError(f"x and y must be numeric arrays ({e})") from None
    if y.dtype.kind not in "biuf":
        raise TypeError(f"y must be numeric, got dtype {y.dtype}")
    if x.ndim == 0 or x.shape[0] == 0:
        raise ValueError("data is empty: x needs at least one row")
    if 0 in x.shape[1:]:
        raise ValueError(f"x has no features (shape {x.shape}): give every row at least one input")
    rank = getattr(model, "input_rank", None)
    if rank is not None and x.ndim != rank:
        hint = "; reshape a single feature with x.reshape(-1, 1)" if x.ndim == 1 and rank == 2 else ""
        layout = "(n, features)" if rank == 2 else "(n, height, width, channels)" if rank == 4 else f"rank {rank}"
        raise ValueError(f"x must have rank {rank} {layout}, got shape {x.shape}{hint}")
    likelihood = getattr(model, "likelihood", None)
    if y.ndim == 0 or (y.ndim != 1 and likelihood in ("categorical", "bernoulli")):
        raise ValueError(f"y must be 1-D with one label per row of x, got shape {y.shape}")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x has {x.shape[0]} rows but y has {y.shape[0]}: pass one target per row")
    if not np.all(np.isfinite(x)):
        raise ValueError("x contains NaN or inf: drop or impute those rows before fitting")
    if not np.all(np.isfinite(y.astype(np.float64))):
        raise ValueError("y contains NaN or inf: drop or impute those rows before fitting")
    with np.errstate(over="ignore"):
        if not np.all(np.isfinite(y.astype(np.float32))):
            raise ValueError("y holds values beyond float32's range (±3.4e38), which the fit computes in: rescale the targets")
    if likelihood in ("categorical", "bernoulli"):
        k = int(getattr(model, "num_classes", 2) or 2)
        if np.any(y != np.round(y)):
            raise ValueError("classification labels must be integers 0..num_classes-1")
        if y.min() < 0 or y.max() >= k:
            raise ValueError(
                f"labels must lie in [0, {k}) for num_classes={k}, got range [{y.min()}, {y.max()}]; re-code the labels or set num_classes"
            )
        return x, y.astype(np.int32)
    if likelihood == "poisson" and (np.any(y < 0) or np.any(y != np.round(y))):
        raise ValueError("likelihood='poisson' models counts: y must hold non-negative integers")
    if likelihood in ("gaussian", "student_t", "heteroscedastic", "poisson"):
        return x, y.astype(np.float32)
    return x, (y.astype(np.int32) if y.dtype.kind in "biu" else y.astype(np.float32))


BLACKJAX_MIN = (1, 4)
"""The oldest BlackJAX that pathfinder, mclmc and chees run on (``adjusted_mclmc.rescale``,
the ChEES kernel's signature, a Pathfinder that does not stop at a NaN on its first step;
BlackJAX 1.4 needs jax >= 0.9)."""


def blackjax_missing(method: str) -> str | None:
    """Why ``method`` cannot run with the installed BlackJAX: one line naming the upgrade when
    it is older than :data:`BLACKJAX_MIN`, else ``None`` (reads the package's metadata only)."""
    from importlib.metadata import version

    have = version("blackjax")
    parts = tuple(int(p) for p in have.split(".")[:2] if p.isdigit())
    if parts < BLACKJAX_MIN:
        need = ".".join(map(str, BLACKJAX_MIN))
        return f"method={method!r} needs blackjax >= {need} (installed: {have}): pip install -U 'blackjax>={need}'"
    return None


def require_blackjax(method: str) -> None:
    """Raise :func:`blackjax_missing`'s one-line ImportError when the installed BlackJAX is
    older than :data:`BLACKJAX_MIN` (before anything is traced or compiled)."""
    missing = blackjax_missing(method)
    if missing is not None:
        raise ImportError(missing)
