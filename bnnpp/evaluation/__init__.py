"""Evaluation of a fitted image classifier: test error, calibration, per-image uncertainty and
out-of-distribution (OOD) detection — the library side of ``bnnpp evaluate``.

The per-image uncertainty report follows Zharikov, Isachenko & Bochkarev (MNIST with 100
posterior draws): for every test image the predictive probabilities of ``num_samples`` draws,
the variance of those probabilities over draws summed over classes, and the expected error
rate 1 − max_c p̄_c; the misclassified images the model was sure of and the images with the
lowest confidence. OOD follows McAteer's "refuse to classify noise" experiment: an input is
rejected when its largest predictive class probability is below τ, and predictive entropy and
mutual information (Depeweg et al. 2018) are scored by AUROC at telling the test set from
uniform-noise images and from Fashion-MNIST.
"""

from __future__ import annotations

from bnnpp.evaluation.images import evaluate, evaluation_report, write_report
from bnnpp.evaluation.predict import MAX_VALUES_PER_CALL as MAX_VALUES_PER_CALL
from bnnpp.evaluation.predict import _uncertainty_scores as _uncertainty_scores
from bnnpp.evaluation.predict import check_count, check_tau, predict_probs, uniform_noise
from bnnpp.evaluation.regression import CALIBRATION_LEVELS as CALIBRATION_LEVELS
from bnnpp.evaluation.regression import (
    central_interval_coverage,
    in_original_units,
    predictive_cdf,
    predictive_quantiles,
    regression_checks,
)
from bnnpp.evaluation.selective import SELECTIVE_COVERAGES as SELECTIVE_COVERAGES
from bnnpp.evaluation.selective import classification_measures as classification_measures
from bnnpp.evaluation.selective import selective_curve, selective_prediction
from bnnpp.evaluation.selective import selective_curves as selective_curves
from bnnpp.evaluation.shift import shift_report, shifted

__all__ = [
    "check_count",
    "check_tau",
    "central_interval_coverage",
    "evaluate",
    "evaluation_report",
    "in_original_units",
    "predict_probs",
    "predictive_cdf",
    "predictive_quantiles",
    "regression_checks",
    "selective_curve",
    "selective_prediction",
    "shift_report",
    "shifted",
    "uniform_noise",
    "write_report",
]
