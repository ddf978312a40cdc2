"""Selective prediction: refuse the least certain inputs and score the rest (risk–coverage
curves, Geifman & El-Yaniv 2017)."""

from __future__ import annotations

import numpy as np

SELECTIVE_COVERAGES = (0.5, 0.8, 0.9, 0.95, 1.0)
"""Coverages (shares of inputs kept) at which :func:`selective_prediction` reports the score."""


def selective_curve(loss, uncertainty) -> tuple[np.ndarray, np.ndarray]:
    """The risk–coverage curve (Geifman & El-Yaniv 2017; El-Yaniv & Wiener 2010): the inputs
    sorted by ``uncertainty``, most certain first (ties by index), and the mean ``loss`` of the
    ``k`` kept for every ``k = 1..n``.

    Args:
        loss: per-input loss ``(n,)`` (0/1 error, squared error, ...).
        uncertainty: per-input uncertainty ``(n,)``; larger is refused first.

    Returns:
        ``(coverage, risk)``, each ``(n,)`` float64: ``k / n`` and the mean loss of the kept.
    """
    loss = np.asarray(loss, np.float64)
    uncertainty = np.asarray(uncertainty, np.float64)
    if loss.shape != uncertainty.shape or loss.ndim != 1 or len(loss) == 0:
        raise ValueError(f"loss and uncertainty must be (n,) arrays of one shape, got {loss.shape} and {uncertainty.shape}")
    order = np.argsort(uncertainty, kind="stable")
    k = np.arange(1, len(loss) + 1)
    return k / len(loss), np.cumsum(loss[order]) / k


def selective_prediction(loss, measures: dict[str, np.ndarray], *, score: str = "accuracy") -> dict[str, dict]:
    """Selective prediction by each uncertainty measure: the score of the kept inputs as the
    most uncertain are refused, and the area under its curve over coverage.

    Args:
        loss: per-input loss ``(n,)``: the 0/1 error (``score="accuracy"``: the score is
            ``1 − mean error`` of the kept, higher is better) or the squared error
            (``score="rmse"``: the root mean squared error of the kept, lower is better).
        measures: name → per-input uncertainty ``(n,)`` (entropy, mutual information,
            1 − max probability, predictive sd, ...). A measure constant over the inputs (the
            mutual information of one draw) refuses in index order: reported with
            ``"constant": True``. ``"oracle"`` (sorted by the loss itself) is added as the bound.

    Returns:
        measure → ``{"area": mean score over the coverages k/n (the area under the
        score–coverage curve), "at": {"50%": score at that coverage, ...}, "constant": bool}``.
    """
    if score not in ("accuracy", "rmse"):
        raise ValueError(f"score must be 'accuracy' or 'rmse', got {score!r}")
    loss = np.asarray(loss, np.float64)
    out = {}
    for name, u in {**measures, "oracle": loss}.items():
        coverage, risk = selective_curve(loss, u)
        values = 1.0 - risk if score == "accuracy" else np.sqrt(risk)
        idx = np.maximum(np.ceil(np.asarray(SELECTIVE_COVERAGES) * len(loss)).astype(int) - 1, 0)
        out[name] = {
            "area": float(values.mean()),
            "at": {f"{100 * c:g}%": float(values[i]) for c, i in zip(SELECTIVE_COVERAGES, idx, strict=True)},
            "constant": bool(np.ptp(np.asarray(u, np.float64)) == 0),
        }
    return out


def selective_curves(loss, measures: dict[str, np.ndarray], *, score: str = "accuracy") -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """measure → ``(coverage, score)`` curves of :func:`selective_prediction` (for the figure)."""
    loss = np.asarray(loss, np.float64)
    curves = {}
    for name, u in {**measures, "oracle": loss}.items():
        coverage, risk = selective_curve(loss, u)
        curves[name] = (coverage, 1.0 - risk if score == "accuracy" else np.sqrt(risk))
    return curves


def classification_measures(probs_mean: np.ndarray, s: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The uncertainty measures selective prediction ranks a classifier's inputs by, from
    :func:`_uncertainty_scores`: entropy, mutual information, 1 − max probability."""
    return {"entropy": s["entropy"], "mutual_information": s["mutual_information"], "1 - max probability": 1.0 - probs_mean.max(-1)}
