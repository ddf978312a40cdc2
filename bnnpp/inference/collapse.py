"""The collapse check: a regression fit whose predictive explains the training targets as
noise — a nearly flat mean with an observation sd near the targets' own sd — is flagged with
one line naming a fit that does use the inputs."""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["COLLAPSE_NOISE_RATIO", "COLLAPSE_R2", "CollapseWarning", "collapse_message", "warn_if_collapsed"]

COLLAPSE_R2 = 0.2
"""A fit collapsed when the R² of its predictive mean on the training targets is below this ..."""
COLLAPSE_NOISE_RATIO = 0.7
"""... and its root mean observation variance is at least this share of the targets' sd."""
MAX_ROWS = 2000
"""The check reads at most this many training rows (the first ones) ..."""
MAX_DRAWS = 100
"""... and this many posterior draws."""


class CollapseWarning(UserWarning):
    """A regression fit explained its training targets as noise."""


def collapse_message(posterior) -> str | None:
    """One line when ``posterior`` (a regression fit with a gaussian or student_t likelihood and
    its training data) predicts its training targets with a mean whose R² is below
    :data:`COLLAPSE_R2` and an observation sd of at least :data:`COLLAPSE_NOISE_RATIO` of the
    targets' sd; ``None`` otherwise (a good fit, classification, counts, no data)."""
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
    if not (r2 < COLLAPSE_R2 and noise >= COLLAPSE_NOISE_RATIO * target_sd):
        return None
    standardize = getattr(posterior.model, "standardize", None)
    if standardize is False:
        fix = "fit with standardize=True (bnnpp.models.mlp's default; the CLI without --no-standardize), or method='nuts'"
    elif standardize is None:  # a custom model sees the data as given
        fix = "standardise x and y to unit scale before fitting, or fit with method='nuts'"
    else:
        fix = "if y depends on x, fit with method='nuts' (exact on small data), or with a fixed prior scale such as priors.normal(1.0)"
    return (
        f"the {posterior.method} fit explains the training targets as noise (R² of the predictive mean {r2:.2f}, "
        f"noise sd {noise:.3g} against the targets' sd {target_sd:.3g}): {fix}"
    )


def warn_if_collapsed(posterior) -> str | None:
    """Warn (:class:`CollapseWarning`) with :func:`collapse_message` and record the line in
    ``posterior.stats.extras["collapse_warning"]``; returns the line or ``None``."""
    message = collapse_message(posterior)
    if message is not None:
        posterior.stats.extras["collapse_warning"] = message
        warnings.warn(message, CollapseWarning, stacklevel=3)
    return message
