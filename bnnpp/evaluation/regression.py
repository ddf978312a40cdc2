"""Regression checks: predictions mapped back to the targets' original units, the
posterior-predictive mixture's CDF and quantiles, and the calibration of its central intervals."""

from __future__ import annotations

import numpy as np

from bnnpp.posterior import Prediction


def in_original_units(prediction: Prediction, shift: float = 0.0, scale: float = 1.0) -> Prediction:
    """A regression :class:`~bnnpp.posterior.Prediction` of standardised targets mapped back to
    the original units ``y * scale + shift`` (a :class:`~bnnpp.data.Dataset`'s ``y_shift`` and
    ``y_scale``): ``draws`` shifted and scaled, ``noise`` scaled; the same ``(S, n, ...)`` shapes."""
    if prediction.task != "regression":
        raise ValueError("in_original_units maps regression predictions; this one is classification")
    if (shift, scale) == (0.0, 1.0):
        return prediction
    if prediction.likelihood == "poisson":
        raise ValueError("Poisson counts are not standardised: there are no original units to map back to")
    return Prediction(
        "regression",
        draws=np.asarray(prediction.draws) * scale + shift,
        noise=np.asarray(prediction.noise) * scale,
        likelihood=prediction.likelihood,
        df=prediction.df,
    )


def predictive_cdf(prediction: Prediction, y) -> np.ndarray:
    """The posterior-predictive CDF at the targets, ``F_i(y_i) = (1/S) Σ_s F(y_i | draw s)``
    (:meth:`bnnpp.posterior.Prediction.cdf`): the probability integral transform of each target
    under the mixture over the ``S`` draws (uniform on (0, 1) for a calibrated model; Gneiting,
    Balabdaoui & Raftery 2007).

    Returns:
        ``(n, ...)`` float64 values in [0, 1].
    """
    if prediction.task != "regression":
        raise ValueError("predictive_cdf needs a regression prediction")
    return prediction.cdf(y)


def predictive_quantiles(prediction: Prediction, q, *, iterations: int = 60) -> np.ndarray:
    """Quantiles of the posterior-predictive mixture over draws, per row
    (:meth:`bnnpp.posterior.Prediction.quantiles`).

    Returns:
        ``(k, n, ...)`` float64 (``(n, ...)`` for a scalar ``q``).
    """
    if prediction.task != "regression":
        raise ValueError("predictive_quantiles needs a regression prediction")
    return prediction.quantiles(q, iterations=iterations)


def central_interval_coverage(pit: np.ndarray, levels) -> np.ndarray:
    """Share of targets inside the central predictive interval at each nominal level, from
    their :func:`predictive_cdf` values: a target lies in the central ``level`` interval when
    ``|F(y) − 1/2| ≤ level / 2``. A calibrated model gives about ``level`` (the calibration
    curve of Kuleshov, Fenner & Ermon 2018, with central rather than one-sided intervals).

    Returns:
        ``(len(levels),)`` float64 shares.
    """
    pit = np.ravel(np.asarray(pit, np.float64))
    levels = np.asarray(levels, np.float64)
    return (np.abs(pit[None, :] - 0.5) <= levels[:, None] / 2).mean(1)


CALIBRATION_LEVELS = tuple(round(0.05 * k, 2) for k in range(1, 20))
"""Nominal levels of the central intervals in a calibration curve: 0.05, 0.10, ..., 0.95."""


def regression_checks(prediction: Prediction, y, *, level: float = 0.9, levels=CALIBRATION_LEVELS) -> dict:
    """What the regression figures draw, for one fit at ``n`` rows with one target each.

    Args:
        prediction: a regression Prediction ``(S, n)``, in the units of ``y``
            (:func:`in_original_units`).
        y: observed targets ``(n,)``.
        level: the central interval drawn as error bars.
        levels: the nominal levels of the calibration curve.

    Returns:
        ``{"mean", "lower", "upper", "residual" (y − mean), "pit" (:func:`predictive_cdf`)}``,
        each ``(n,)``; ``"level"``; ``"levels"`` and ``"coverage"`` (:func:`central_interval_coverage`),
        each ``(len(levels),)``.
    """
    y = np.asarray(y, np.float64)
    if y.ndim != 1:
        raise ValueError(f"regression_checks takes one target per row, y of shape (n,), got {y.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level!r}")
    lower, upper = predictive_quantiles(prediction, [(1 - level) / 2, (1 + level) / 2])
    mean = np.asarray(prediction.mean, np.float64)
    pit = predictive_cdf(prediction, y)
    levels = np.asarray(levels, np.float64)
    return {
        "mean": mean,
        "lower": lower,
        "upper": upper,
        "residual": y - mean,
        "pit": pit,
        "level": float(level),
        "levels": levels,
        "coverage": central_interval_coverage(pit, levels),
    }
