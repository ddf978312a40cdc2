"""Temperature scaling of a classifier's predictive (Guo et al. 2017): the temperature ``T``
that divides each draw's log-probabilities, fitted on a calibration split by the NLL or the
Brier score, or — ``temperature_loss="auto"`` — by whichever of the two gives the lower
cross-validated ECE on that split. Used by :mod:`bnnpp.calibrate` (which re-exports these
names); the module docstring there says when each loss is chosen and why."""

from __future__ import annotations

import math

import numpy as np

from bnnpp.metrics import ece

__all__ = [
    "AUTO_FOLDS",
    "AUTO_MIN_ROWS",
    "TEMPERATURE_BOUNDS",
    "TEMPERATURE_LOSSES",
    "TEMPERATURE_LOSS_CHOICES",
    "check_temperature_loss",
    "choose_temperature_loss",
    "fit_temperature",
    "log_probs",
    "scale_probs",
    "tempered_loss",
]

TEMPERATURE_LOSSES = ("nll", "brier")
"""What :func:`fit_temperature` minimises on the calibration split (and what a :class:`Calibration` records)."""
TEMPERATURE_LOSS_CHOICES = ("auto", *TEMPERATURE_LOSSES)
"""What :func:`fit` accepts: ``"auto"`` picks one of :data:`TEMPERATURE_LOSSES` (:func:`choose_temperature_loss`)."""
AUTO_FOLDS = 5
"""Folds of the calibration split that ``temperature_loss="auto"`` cross-validates over."""
AUTO_MIN_ROWS = 100
"""Calibration rows below which ``temperature_loss="auto"`` takes the NLL without cross-validating."""

TEMPERATURE_BOUNDS = (1e-2, 1e2)
"""The range :func:`fit_temperature` searches ``T`` in."""


def scale_probs(probs, temperature: float) -> np.ndarray:
    """Each draw's class probabilities at temperature ``T``: ``softmax(log p_s / T)`` over the
    last axis, same shape as ``probs`` (``(S, n, C)`` or ``(n, C)``), float32. ``T = 1``
    returns ``probs`` unchanged."""
    if temperature == 1.0:
        return probs
    logp = np.log(np.maximum(np.asarray(probs, np.float64), np.finfo(np.float64).tiny)) / temperature
    logp -= logp.max(axis=-1, keepdims=True)
    e = np.exp(logp)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def log_probs(probs) -> np.ndarray:
    """Per-draw class log-probabilities ``(S, n, C)`` float64 of ``probs`` ``(S, n, C)`` or
    ``(n, C)`` (one draw), floored at the smallest positive float64 before the log."""
    p = np.asarray(probs, np.float64)
    if p.ndim == 2:
        p = p[None]
    return np.log(np.maximum(p, np.finfo(np.float64).tiny))


def tempered_loss(loss: str):
    """The calibration loss ``f(logp, y, T) -> float`` of :data:`TEMPERATURE_LOSSES` ``loss`` at
    temperature ``T`` (``logp`` from :func:`log_probs`)."""
    return _tempered_nll if loss == "nll" else _tempered_brier


def _tempered_nll(logp: np.ndarray, y: np.ndarray, temperature: float) -> float:
    """Mean NLL of the draw-averaged, temperature-scaled predictive; ``logp`` ``(S, n, C)``."""
    from scipy.special import logsumexp

    z = logp / temperature
    log_draw = z - logsumexp(z, axis=-1, keepdims=True)  # (S, n, C)
    true = np.take_along_axis(log_draw, y[None, :, None], axis=-1)[..., 0]  # (S, n)
    return float(-(logsumexp(true, axis=0) - np.log(logp.shape[0])).mean())


def _tempered_brier(logp: np.ndarray, y: np.ndarray, temperature: float) -> float:
    """Mean Brier score of the draw-averaged, temperature-scaled predictive; ``logp`` ``(S, n, C)``."""
    from scipy.special import softmax

    mean = softmax(logp / temperature, axis=-1).mean(axis=0)  # (n, C)
    mean[np.arange(len(y)), y] -= 1.0
    return float(np.sum(mean**2, axis=-1).mean())


def check_temperature_loss(loss, choices: tuple[str, ...] = TEMPERATURE_LOSS_CHOICES) -> str:
    """``loss`` if it is one of ``choices``; else a one-line ValueError."""
    if not isinstance(loss, str) or loss not in choices:
        raise ValueError(f"temperature_loss must be one of {', '.join(choices)}, got {loss!r}")
    return loss


def fit_temperature(probs, y, loss: str = "nll") -> float:
    """Guo et al.'s temperature: the ``T`` in :data:`TEMPERATURE_BOUNDS` minimising the mean
    NLL (``loss="nll"``) or Brier score (``loss="brier"``) of the labels ``y`` ``(n,)`` under
    ``(1/S) Σ_s softmax(log p_s / T)``, by a bounded search over ``log T`` (scipy's
    ``minimize_scalar``).

    Args:
        probs: per-draw class probabilities ``(S, n, C)`` (or ``(n, C)`` for one draw).
        y: class indices ``(n,)``.
        loss: one of :data:`TEMPERATURE_LOSSES` (module docstring).

    Returns:
        ``T`` as a float.
    """
    from scipy.optimize import minimize_scalar

    objective = tempered_loss(check_temperature_loss(loss, TEMPERATURE_LOSSES))
    logp = log_probs(probs)
    y = np.asarray(y, np.int64)
    lo, hi = np.log(TEMPERATURE_BOUNDS)
    result = minimize_scalar(lambda t: objective(logp, y, math.exp(t)), bounds=(lo, hi), method="bounded", options={"xatol": 1e-5})
    return float(math.exp(result.x))


def choose_temperature_loss(probs, y, seed: int = 0) -> tuple[str, tuple[float, ...]]:
    """``temperature_loss="auto"``: the loss of :data:`TEMPERATURE_LOSSES` whose temperature
    calibrates best on held-out rows of the calibration split itself (module docstring).

    The ``n`` rows are permuted (seeded) and cut into :data:`AUTO_FOLDS` folds; for each loss,
    ``T`` is fitted (:func:`fit_temperature`) on all folds but one and scales the held-out one,
    and the ECE (:func:`bnnpp.metrics.ece`) of the ``n`` out-of-fold predictives is that loss's
    score. Below :data:`AUTO_MIN_ROWS` rows no folds are cut and the NLL is taken.

    Args:
        probs: per-draw class probabilities ``(S, n, C)`` (or ``(n, C)`` for one draw).
        y: class indices ``(n,)``.
        seed: seed of the fold assignment.

    Returns:
        ``(loss, eces)``: the chosen loss (``"nll"`` on ties) and the out-of-fold ECE of each
        of :data:`TEMPERATURE_LOSSES` in that order (``()`` below :data:`AUTO_MIN_ROWS` rows).
    """
    p = np.asarray(probs, np.float64)
    if p.ndim == 2:
        p = p[None]
    y = np.asarray(y, np.int64)
    n = p.shape[1]
    if n < AUTO_MIN_ROWS:
        return "nll", ()
    folds = np.array_split(np.random.default_rng(seed).permutation(n), AUTO_FOLDS)
    eces = []
    for loss in TEMPERATURE_LOSSES:
        held_out = np.empty(p.shape[1:])
        for fold in folds:
            rest = np.setdiff1d(np.arange(n), fold)
            t = fit_temperature(p[:, rest], y[rest], loss)
            held_out[fold] = np.asarray(scale_probs(p[:, fold], t), np.float64).mean(axis=0)
        eces.append(ece(held_out, y))
    return TEMPERATURE_LOSSES[int(np.argmin(eces))], tuple(float(e) for e in eces)
