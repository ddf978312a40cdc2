"""A regression with any number of features: predicted vs observed with intervals, the
calibration curve of the central intervals, residuals against the features."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure


def _draw_predicted_vs_observed(ax, check: dict, y: np.ndarray, name: str = "") -> None:
    y = np.asarray(y)
    mean, lower, upper = check["mean"], check["lower"], check["upper"]
    inside = (y >= lower) & (y <= upper)
    lo = float(min(y.min(), lower.min()))
    hi = float(max(y.max(), upper.max()))
    ax.plot([lo, hi], [lo, hi], color="0.5", ls=":", lw=1)
    for keep, colour, label in ((inside, "tab:blue", "inside"), (~inside, "tab:red", "outside")):
        ax.errorbar(
            y[keep],
            mean[keep],
            yerr=np.stack([mean[keep] - lower[keep], upper[keep] - mean[keep]]),
            fmt="o",
            ms=3,
            color=colour,
            ecolor=colour,
            elinewidth=0.6,
            alpha=0.7,
            label=f"{label} the interval ({keep.sum()})",
        )
    ax.set_xlabel("observed")
    ax.set_ylabel(f"predicted mean, {check['level']:.0%} interval")
    ax.set_title(f"{name + ': ' if name else ''}{inside.mean():.0%} inside the central {check['level']:.0%} intervals", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def _draw_calibration(ax, checks: dict) -> None:
    ax.plot([0, 1], [0, 1], color="0.5", ls=":", label="calibrated")
    for name, c in checks.items():
        ax.plot(c["levels"], c["coverage"], marker="o", ms=3, label=name)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("nominal level of the central interval")
    ax.set_ylabel("share of targets inside")
    ax.set_title("calibration: interval coverage vs nominal", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def top_features(x: np.ndarray, residuals: list[np.ndarray], k: int, bins: int = 8) -> list[int]:
    """The ``k`` feature columns of ``x`` ``(n, F)`` along which the residuals ``(n,)`` leave the
    most structure: by the variance over ``bins`` quantile bins of the feature of the mean
    residual in each bin (summed over the residual arrays given), largest first; every column,
    in order, when ``F ≤ k``.

    Returns:
        Column indices.
    """
    f = x.shape[1]
    if f <= k:
        return list(range(f))
    scores = np.zeros(f)
    for j in range(f):
        edges = np.unique(np.quantile(x[:, j], np.linspace(0, 1, bins + 1)))
        idx = np.clip(np.searchsorted(edges, x[:, j], side="right") - 1, 0, max(len(edges) - 2, 0))
        for r in residuals:
            counts = np.bincount(idx, minlength=len(edges))
            means = np.bincount(idx, weights=r, minlength=len(edges))[counts > 0] / counts[counts > 0]
            scores[j] += np.average((means - r.mean()) ** 2, weights=counts[counts > 0])
    return [int(j) for j in np.argsort(-scores, kind="stable")[:k]]


def _draw_residuals(ax, x_col: np.ndarray, check: dict, feature: str, name: str = "") -> None:
    r = check["residual"]
    ax.axhline(0, color="0.5", ls=":", lw=1)
    ax.errorbar(
        x_col,
        r,
        yerr=np.stack([check["upper"] - check["mean"], check["mean"] - check["lower"]]),
        fmt="o",
        ms=2.5,
        color="tab:blue",
        ecolor="tab:blue",
        elinewidth=0.4,
        alpha=0.6,
    )
    ax.set_xlabel(feature)
    ax.set_ylabel("observed − predicted")
    if name:
        ax.set_title(name, fontsize=9)


def _check_fits(checks: dict, what: str) -> None:
    if not checks:
        raise ValueError(f"{what} needs at least one fit's checks (bnnpp.evaluation.regression_checks)")


def predicted_vs_observed(checks: dict, y: np.ndarray, *, title: str = ""):
    """Predicted mean against observed target with each row's central predictive interval as
    an error bar (blue inside, red outside), the diagonal, and the share inside; one panel per fit.

    Args:
        checks: name → :func:`bnnpp.evaluation.regression_checks` of that fit at the rows.
        y: the observed targets ``(n,)``, in the same units.
    Returns:
        A Figure with one panel per fit.
    """
    _check_fits(checks, "predicted_vs_observed")
    fig = Figure(figsize=(4.2 * len(checks), 4.0), layout="constrained")
    axes = fig.subplots(1, len(checks), squeeze=False)[0]
    for ax, (name, c) in zip(axes, checks.items(), strict=True):
        _draw_predicted_vs_observed(ax, c, y, name)
    if title:
        fig.suptitle(title)
    return fig


def calibration_curve(checks: dict, *, title: str = ""):
    """Share of targets inside the central predictive interval against its nominal level, fits
    overlaid, with the diagonal of calibration (above it: intervals too wide; below: too narrow).

    Args:
        checks: name → :func:`bnnpp.evaluation.regression_checks` (its ``levels`` and ``coverage``).
    Returns:
        A Figure with one axes.
    """
    _check_fits(checks, "calibration_curve")
    fig = Figure(figsize=(5, 4.6), layout="constrained")
    _draw_calibration(fig.subplots(), checks)
    if title:
        fig.suptitle(title)
    return fig


def residuals_by_feature(checks: dict, x: np.ndarray, feature_names, *, max_features: int = 4, title: str = ""):
    """Residuals (observed − predicted mean, with the central interval as error bar) against
    each feature, or against the ``max_features`` along which they leave the most structure
    (:func:`top_features`); one row per fit.

    Args:
        checks: name → :func:`bnnpp.evaluation.regression_checks`.
        x: ``(n, F)`` the rows' features (in their original units, for readable axes).
        feature_names: ``F`` names.
    Returns:
        A Figure with one row per fit and one column per feature shown.
    """
    _check_fits(checks, "residuals_by_feature")
    x = np.asarray(x).reshape(len(x), -1)
    if len(feature_names) != x.shape[1]:
        raise ValueError(f"got {len(feature_names)} feature names for {x.shape[1]} features: pass one per column")
    cols = top_features(x, [c["residual"] for c in checks.values()], max_features)
    fig = Figure(figsize=(3.4 * len(cols), 2.8 * len(checks) + (0.4 if title else 0)), layout="constrained")
    axes = fig.subplots(len(checks), len(cols), squeeze=False, sharey="row")
    for row, (name, c) in zip(axes, checks.items(), strict=True):
        for ax, j in zip(row, cols, strict=True):
            _draw_residuals(ax, x[:, j], c, feature_names[j], name if j == cols[0] else "")
    if title:
        fig.suptitle(title)
    return fig


def regression_diagnostics(check: dict, y: np.ndarray, x: np.ndarray, feature_names, *, max_features: int = 4, title: str = ""):
    """One fit's regression picture for any number of features: predicted vs observed with
    central intervals and the calibration curve on top, residuals against each feature (or
    the ``max_features`` with most structure, :func:`top_features`) below.

    Args:
        check: :func:`bnnpp.evaluation.regression_checks` of the fit at the rows.
        y: observed targets ``(n,)``; x: the rows' features ``(n, F)``; feature_names: ``F`` names.
    Returns:
        A Figure with two panels above and up to ``max_features`` below.
    """
    x = np.asarray(x).reshape(len(x), -1)
    if len(feature_names) != x.shape[1]:
        raise ValueError(f"got {len(feature_names)} feature names for {x.shape[1]} features: pass one per column")
    cols = top_features(x, [check["residual"]], max_features)
    fig = Figure(figsize=(max(9.0, 3.2 * len(cols)), 8.2), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=(1.25, 1))
    ax_po, ax_cal = top.subplots(1, 2)
    _draw_predicted_vs_observed(ax_po, check, y)
    _draw_calibration(ax_cal, {"this fit": check})
    axes = bottom.subplots(1, len(cols), squeeze=False, sharey=True)[0]
    for ax, j in zip(axes, cols, strict=True):
        _draw_residuals(ax, x[:, j], check, feature_names[j])
    shown = "every feature" if len(cols) == x.shape[1] else f"the {len(cols)} of {x.shape[1]} features with most structure left"
    bottom.suptitle(f"residuals against {shown}", fontsize=9)
    if title:
        fig.suptitle(title)
    return fig
