"""The collapse check: a regression fit whose predictive explains the training targets as
noise — an observation sd near the targets' own sd where the data show structure — is flagged
with one line naming a fit that does use the inputs.

Structure is judged without a model by the nearest-neighbour difference estimate of the noise
variance, σ̂² = (1/2n) Σ_i (y_i − y_{j(i)})² with j(i) the nearest other training input on
standardised columns (Rice 1984 for sorted 1-d inputs; Devroye et al. 2018, "A nearest
neighbor estimate of the residual variance", in general). It is consistent for the noise
variance of a smooth regression function and tends to the targets' variance when y does not
depend on x, so a learned noise sd well above it means the fit left signal in the noise.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = [
    "SMALL_DATA_ROWS", "COLLAPSE_NEIGHBOUR_RATIO", "COLLAPSE_NOISE_RATIO", "CollapseWarning", "collapse_message", "neighbour_noise_sd",
    "warn_if_collapsed",
]

COLLAPSE_NOISE_RATIO = 0.7
"""A fit collapsed when its root mean observation variance is at least this share of the
targets' sd (on the 20-point cubic of ``benchmarks/small_data.py`` an ensemble whose mean has
R² 0.84 has a noise sd of 0.63 of the targets') ..."""
COLLAPSE_NEIGHBOUR_RATIO = 2.0
"""... and at least this many times the nearest-neighbour noise estimate
(:func:`neighbour_noise_sd`). On the issue-35 sinusoid (true noise sd 1, targets' sd 6.5) the
estimate is 0.90: a collapsed fit's noise sd of 5–7 is 6–8 times it, a good fit's about 1.
On targets that do not depend on the inputs the estimate is near the targets' sd and the
check stays quiet."""
MAX_ROWS = 2000
"""The check reads at most this many training rows (the first ones) ..."""
MAX_DRAWS = 100
"""... and this many posterior draws."""
MAX_NEIGHBOUR_ROWS = 1000
"""The nearest-neighbour estimate reads at most this many rows (its cost grows as rows²)."""


SMALL_DATA_ROWS = 200
"""Issue 35's small data (20–200 training rows): a fit on at most this many rows under a
hierarchical prior by a method that does not suit the case says so after the fit (``swag`` and
``multiswag``: no within-member spread; ``bbb``: the predictive sd grows too little away from
the data; ``benchmarks/README.md``, small regression data)."""


class CollapseWarning(UserWarning):
    """A regression fit explained its training targets as noise."""


def neighbour_noise_sd(x, y) -> float:
    """The nearest-neighbour estimate of the noise sd of ``y`` ``(n,)`` or ``(n, K)`` given
    ``x`` ``(n, ...)`` (module docstring): sqrt of half the mean squared difference between
    each row's targets and those of its nearest other row (Euclidean on standardised, flattened
    inputs), averaged over the K targets. Returns a float (``n ≥ 2``)."""
    x = np.asarray(x, np.float64).reshape(np.shape(x)[0], -1)
    sd = x.std(axis=0)
    x = (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    sq = np.sum(x**2, axis=1)
    d = sq[:, None] + sq[None, :] - 2.0 * x @ x.T
    np.fill_diagonal(d, np.inf)
    y = np.asarray(y, np.float64).reshape(np.shape(y)[0], -1)
    diff = y - y[np.argmin(d, axis=1)]
    return float(np.sqrt(0.5 * np.mean(diff**2)))


def collapse_message(posterior) -> str | None:
    """One line when ``posterior`` (a regression fit with a gaussian or student_t likelihood and
    its training data) predicts its training targets with an observation sd of at least
    :data:`COLLAPSE_NOISE_RATIO` of the targets' sd and :data:`COLLAPSE_NEIGHBOUR_RATIO` times
    the nearest-neighbour noise estimate; ``None`` otherwise (a good fit, targets that do not
    depend on the inputs, classification, counts, no data)."""
    if not posterior.has_data or posterior.model is None or np.ndim(posterior.y) < 1:
        return None
    if getattr(posterior.model, "task", "regression") != "regression" or not np.issubdtype(np.asarray(posterior.y).dtype, np.floating):
        return None
    x, y = posterior.x[:MAX_ROWS], np.asarray(posterior.y[:MAX_ROWS], np.float64)
    if y.shape[0] < 5:
        return None
    draws = posterior.num_chains * posterior.num_draws
    pred = posterior.predict(x, num_samples=min(MAX_DRAWS, draws))
    if pred.task != "regression" or pred.likelihood == "poisson" or pred.noise is None:
        return None
    spread = float(np.sum((y - y.mean(axis=0)) ** 2))
    if not spread > 0:
        return None
    r2 = 1.0 - float(np.sum((y - pred.mean) ** 2)) / spread
    noise = float(np.sqrt(np.mean(np.asarray(pred.noise, np.float64) ** 2)))
    target_sd = float(np.sqrt(spread / y.size))
    if not noise >= COLLAPSE_NOISE_RATIO * target_sd:
        return None
    reference = neighbour_noise_sd(x[:MAX_NEIGHBOUR_ROWS], y[:MAX_NEIGHBOUR_ROWS])
    if not noise >= COLLAPSE_NEIGHBOUR_RATIO * reference:
        return None
    standardize = getattr(posterior.model, "standardize", None)
    if standardize is False:
        fix = "fit with standardize=True (bnnpp.models.mlp's default; the CLI without --no-standardize), or method='nuts'"
    elif standardize is None:  # a custom model sees the data as given
        fix = "standardise x and y to unit scale before fitting, or fit with method='nuts'"
    else:
        others = " or ".join(f"method='{m}'" for m in ("laplace", "ensemble") if m != posterior.method)
        fix = f"fit with {others} (they keep the data on small sets), or method='nuts' (exact on small data)"
    return (
        f"the {posterior.method} fit explains the training targets as noise (noise sd {noise:.3g} against the targets' "
        f"sd {target_sd:.3g} and a nearest-neighbour noise estimate of {reference:.3g}; R² of the mean {r2:.2f}): {fix}"
    )


def warn_if_collapsed(posterior) -> str | None:
    """Warn (:class:`CollapseWarning`) with :func:`collapse_message` and record the line in
    ``posterior.stats.extras["collapse_warning"]``; returns the line or ``None``."""
    message = collapse_message(posterior)
    if message is not None:
        posterior.stats.extras["collapse_warning"] = message
        warnings.warn(message, CollapseWarning, stacklevel=3)
    return message
