"""Posterior-predictive output: class probabilities or regression draws, and the uncertainty
measures computed from them (predictive entropy, mutual information, epistemic and aleatoric sd)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bnnpp import metrics

__all__ = ["Prediction"]


@dataclass(frozen=True)
class Prediction:
    """Posterior-predictive output at ``n`` inputs from ``S`` posterior draws.

    Classification: ``probs`` ``(S, n, C)``. Regression: ``draws`` ``(S, n)`` (the network's
    mean function per draw) and ``noise`` ``(S, n)`` (the observation sd per draw).
    """

    task: str
    probs: np.ndarray | None = None
    draws: np.ndarray | None = None
    noise: np.ndarray | None = None

    @property
    def mean(self) -> np.ndarray:
        """Predictive mean: class probabilities ``(n, C)``, or regression mean ``(n,)``."""
        return (self.probs if self.task == "classification" else self.draws).mean(axis=0)

    @property
    def std(self) -> np.ndarray:
        """Classification: sd of the class probabilities over draws ``(n, C)``.
        Regression: total predictive sd ``(n,)`` = sqrt(epistemic² + aleatoric²)."""
        if self.task == "classification":
            return self.probs.std(axis=0)
        return np.sqrt(self.epistemic_std**2 + self.aleatoric_std**2)

    @property
    def variance(self) -> np.ndarray:
        """Variance over posterior draws: of the class probabilities ``(n, C)`` (classification),
        or of the mean function ``(n,)`` (regression, = ``epistemic_std**2``)."""
        return (self.probs if self.task == "classification" else self.draws).var(axis=0)

    def pointwise_log_likelihood(self, y) -> np.ndarray:
        """log p(y_i | draw s) ``(S, n)`` in float64: the log probability of each label
        (classification), or the Normal(draw, noise²) log-density of each target (regression)."""
        y = np.asarray(y)
        if self.task == "classification":
            p = np.take_along_axis(np.asarray(self.probs, np.float64), y.astype(np.int64)[None, :, None], axis=-1)[..., 0]
            return np.log(np.maximum(p, np.finfo(np.float64).tiny))
        mu, sd = np.asarray(self.draws, np.float64), np.asarray(self.noise, np.float64)
        return -0.5 * np.log(2 * np.pi * sd**2) - 0.5 * ((y[None, :] - mu) / sd) ** 2

    @property
    def epistemic_std(self) -> np.ndarray:
        """Regression: sd of the mean function over draws ``(n,)``."""
        self._need("regression")
        return self.draws.std(axis=0)

    @property
    def aleatoric_std(self) -> np.ndarray:
        """Regression: root mean observation variance over draws ``(n,)``."""
        self._need("regression")
        return np.sqrt(np.mean(self.noise**2, axis=0))

    @property
    def entropy(self) -> np.ndarray:
        """Predictive entropy (total uncertainty) ``(n,)``."""
        self._need("classification")
        return metrics.predictive_entropy(self.probs)

    @property
    def expected_entropy(self) -> np.ndarray:
        """Expected entropy over draws (aleatoric) ``(n,)``."""
        self._need("classification")
        return metrics.expected_entropy(self.probs)

    @property
    def mutual_information(self) -> np.ndarray:
        """Mutual information between label and weights (epistemic) ``(n,)``."""
        self._need("classification")
        return metrics.mutual_information(self.probs)

    @property
    def expected_error_rate(self) -> np.ndarray:
        """1 − max class probability of the mean prediction ``(n,)``."""
        self._need("classification")
        return metrics.expected_error_rate(self.mean)

    def scores(self, y) -> dict:
        """Test scores against ``y`` ``(n,)``, as floats.

        Classification (labels): accuracy, NLL, Brier, ECE (of the mean prediction) and the
        means of entropy, mutual information and expected error rate over the points.
        Regression (targets): ``rmse`` of the predictive mean, ``nll`` of the predictive
        mixture (:func:`bnnpp.metrics.gaussian_nll`), ``coverage_95`` of mean ± 1.96·sd, and
        the means over points of the total and epistemic predictive sd.
        """
        if self.task == "regression":
            return {
                "rmse": metrics.rmse(self.mean, y),
                "nll": metrics.gaussian_nll(self.draws, self.noise, y),
                "coverage_95": metrics.interval_coverage(self.mean, self.std, y, 0.95),
                "mean_sd": float(self.std.mean()),
                "mean_epistemic_sd": float(self.epistemic_std.mean()),
            }
        m = self.mean
        return {
            "accuracy": metrics.accuracy(m, y),
            "nll": metrics.nll(m, y),
            "brier": metrics.brier(m, y),
            "ece": metrics.ece(m, y),
            "mean_entropy": float(self.entropy.mean()),
            "mean_mutual_information": float(self.mutual_information.mean()),
            "mean_expected_error_rate": float(self.expected_error_rate.mean()),
        }

    def _need(self, task: str) -> None:
        if self.task != task:
            raise AttributeError(f"this quantity is defined for {task}, not {self.task}")
