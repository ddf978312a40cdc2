"""Matplotlib figures of posterior-predictive uncertainty. Every function returns a Figure.

Figures are built with ``matplotlib.figure.Figure`` rather than pyplot: nothing touches the
global backend or figure registry, so they work headless and leak nothing in loops. In a
notebook, display one by leaving it as the cell's value; save with ``fig.savefig(path)``.

The modules: :mod:`~bnnpp.plots.maps` (2-D decision maps, 1-D bands),
:mod:`~bnnpp.plots.evaluation_figures` and :mod:`~bnnpp.plots.regression`; every figure is
re-exported here.
"""

from __future__ import annotations

from bnnpp.plots.evaluation_figures import (
    image_grid,
    ood_histograms,
    reference_agreement,
    reliability_diagram,
    snr_histogram,
    uncertainty_histograms,
    weight_histograms,
)
from bnnpp.plots.evaluation_figures import selective_figure as selective_figure
from bnnpp.plots.evaluation_figures import shift_figure as shift_figure
from bnnpp.plots.maps import CLASS_COLOURS, decision_map, decision_maps, regression_bands, regression_bands_grid
from bnnpp.plots.regression import (
    calibration_curve,
    predicted_vs_observed,
    regression_diagnostics,
    residuals_by_feature,
    top_features,
)

__all__ = [
    "CLASS_COLOURS",
    "calibration_curve",
    "decision_map",
    "decision_maps",
    "image_grid",
    "ood_histograms",
    "predicted_vs_observed",
    "reference_agreement",
    "regression_bands",
    "regression_bands_grid",
    "regression_diagnostics",
    "reliability_diagram",
    "residuals_by_feature",
    "snr_histogram",
    "top_features",
    "uncertainty_histograms",
    "weight_histograms",
]
