"""Posterior-predictive output: class probabilities or regression draws, and the uncertainty
measures computed from them (predictive entropy, mutual information, epistemic and aleatoric sd)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from bnnpp import metrics

__all__ = ["Prediction"]


REGRESSION_LIKELIHOODS = ("gaussian", "student_t", "poisson")


@dataclass(frozen=True)
class Prediction:
    """Posterior-predictive output at ``n`` inputs from ``S`` posterior draws.

    Classification: ``probs`` ``(S, n, C)``. Regression, with targets of shape ``(n,)`` or
    ``(n, K)`` (written ``(n, ...)`` below): ``draws`` ``(S, n, ...)``, the mean function per
    draw (the Normal or StudentT location, the Poisson rate), and ``noise`` ``(S, n, ...)``,
    the likelihood's scale per draw (the Normal sd, the StudentT scale; ``None`` for Poisson);
    ``df`` ``(S, n, ...)`` holds the StudentT degrees of freedom. ``likelihood`` is
    ``"gaussian"``, ``"student_t"`` or ``"poisson"``. ``deterministic``: a custom model's
    ``numpyro.deterministic`` sites at the inputs, name → ``(S, *site_shape)`` (as NumPyro's
    ``Predictive`` returns them; empty for bnnpp's own networks, whose ``logits``/``mean``
    are ``probs``/``draws``).

    A posterior calibrated by :meth:`bnnpp.Posterior.calibrate` adds split-conformal output
    (:mod:`bnnpp.calibrate`): regression ``interval_lo``/``interval_hi`` ``(n, ...)``, an
    interval per target holding it with probability ≥ ``1 − alpha`` (``alpha`` its
    miscoverage); classification ``sets`` ``(n, C)`` booleans, the conformal prediction set of
    each input. ``probs`` are then the temperature-scaled ones when temperature scaling was fitted.
    """

    task: str
    probs: np.ndarray | None = None
    draws: np.ndarray | None = None
    noise: np.ndarray | None = None
    likelihood: str = "gaussian"
    df: np.ndarray | None = None
    deterministic: dict[str, np.ndarray] = field(default_factory=dict)
    interval_lo: np.ndarray | None = None
    interval_hi: np.ndarray | None = None
    sets: np.ndarray | None = None
    alpha: float | None = None

    def __post_init__(self):
        if self.task == "regression" and self.likelihood not in REGRESSION_LIKELIHOODS:
            raise ValueError(f"likelihood must be one of {', '.join(REGRESSION_LIKELIHOODS)}, got {self.likelihood!r}")

    @property
    def mean(self) -> np.ndarray:
        """Predictive mean: class probabilities ``(n, C)``, or regression mean ``(n, ...)``
        (a StudentT with df ≤ 1 has no mean: its location is used)."""
        return (self.probs if self.task == "classification" else self.draws).mean(axis=0)

    @property
    def std(self) -> np.ndarray:
        """Classification: sd of the class probabilities over draws ``(n, C)``.
        Regression: total predictive sd ``(n, ...)`` = sqrt(epistemic² + aleatoric²)."""
        if self.task == "classification":
            return self.probs.std(axis=0)
        return np.sqrt(self.epistemic_std**2 + self.aleatoric_std**2)

    @property
    def variance(self) -> np.ndarray:
        """Variance over posterior draws: of the class probabilities ``(n, C)`` (classification),
        or of the mean function ``(n, ...)`` (regression, = ``epistemic_std**2``)."""
        return (self.probs if self.task == "classification" else self.draws).var(axis=0)

    def pointwise_log_likelihood(self, y) -> np.ndarray:
        """log p(y_i | draw s) ``(S, n)`` in float64: the log probability of each label
        (classification), or each row's log-density under the draw's likelihood (regression,
        :meth:`log_density` summed over a row's targets)."""
        y = np.asarray(y)
        if self.task == "classification":
            p = np.take_along_axis(np.asarray(self.probs, np.float64), y.astype(np.int64)[None, :, None], axis=-1)[..., 0]
            return np.log(np.maximum(p, np.finfo(np.float64).tiny))
        logp = self.log_density(y)
        return logp.reshape(logp.shape[0], logp.shape[1], -1).sum(-1)

    @property
    def epistemic_std(self) -> np.ndarray:
        """Regression: sd of the mean function over draws ``(n, ...)``."""
        self._need("regression")
        return self.draws.std(axis=0)

    @property
    def aleatoric_std(self) -> np.ndarray:
        """Regression: root mean observation variance over draws ``(n, ...)``: the mean of
        σ² (Normal), of σ²·df/(df − 2) (StudentT; infinite where df ≤ 2) or of the rate
        (Poisson, whose variance is its mean)."""
        self._need("regression")
        if self.likelihood == "poisson":
            variance = self.draws
        elif self.likelihood == "student_t":
            df = np.asarray(self.df, np.float64)
            variance = np.where(df > 2, self.noise**2 * df / np.where(df > 2, df - 2, 1.0), np.inf)
        else:
            variance = self.noise**2
        return np.sqrt(np.mean(variance, axis=0))

    def log_density(self, y) -> np.ndarray:
        """Regression: each draw's log-density of the targets ``y`` ``(n, ...)``, elementwise,
        ``(S, n, ...)`` (scipy's ``norm.logpdf``, ``t.logpdf`` or ``poisson.logpmf``)."""
        self._need("regression")
        from scipy import stats

        y = np.asarray(y, np.float64)[None]
        if self.likelihood == "poisson":
            return stats.poisson.logpmf(y, np.asarray(self.draws, np.float64))
        if self.likelihood == "student_t":
            return stats.t.logpdf(
                y, np.asarray(self.df, np.float64), np.asarray(self.draws, np.float64), np.asarray(self.noise, np.float64)
            )
        return stats.norm.logpdf(y, np.asarray(self.draws, np.float64), np.asarray(self.noise, np.float64))

    def _component_cdf(self, y: np.ndarray) -> np.ndarray:
        """Each draw's likelihood CDF at ``y`` (broadcast against ``(S, n, ...)``), float64."""
        from scipy import special

        mu = np.asarray(self.draws, np.float64)
        if self.likelihood == "poisson":
            return special.pdtr(np.floor(y), mu)
        z = (y - mu) / np.asarray(self.noise, np.float64)
        if self.likelihood == "student_t":
            return special.stdtr(np.asarray(self.df, np.float64), z)
        return special.ndtr(z)

    def cdf(self, y) -> np.ndarray:
        """Regression: the predictive mixture's CDF at targets ``y`` ``(n, ...)``,
        ``F_i(y_i) = (1/S) Σ_s F(y_i | draw s)``; ``(n, ...)`` float64 in [0, 1]."""
        self._need("regression")
        y = np.asarray(y, np.float64)
        if y.shape != np.shape(self.draws)[1:]:
            raise ValueError(f"y must have shape {np.shape(self.draws)[1:]} (one target per predicted row), got {y.shape}")
        return self._component_cdf(y[None]).mean(0)

    def quantiles(self, q, *, iterations: int = 60) -> np.ndarray:
        """Regression: quantiles of the predictive mixture over draws, per row: the ``y`` with
        ``(1/S) Σ_s F(y | draw s) = q``, found by bisection between the smallest and largest of
        the draws' own ``q``-quantiles (the mixture's quantile lies between them). Exact for
        the draws given up to ``2**-iterations`` of that bracket; Poisson quantiles are integers.

        Args:
            q: probabilities in (0, 1), a float or a sequence of ``k``.

        Returns:
            ``(k, n, ...)`` float64 (``(n, ...)`` for a scalar ``q``).
        """
        from scipy import stats

        self._need("regression")
        qs = np.atleast_1d(np.asarray(q, np.float64))
        if qs.ndim != 1 or not np.all((qs > 0) & (qs < 1)):
            raise ValueError(f"quantile levels must lie strictly between 0 and 1, got {q!r}")
        mu = np.asarray(self.draws, np.float64)
        out = np.empty((len(qs), *mu.shape[1:]))
        for i, level in enumerate(qs):
            if self.likelihood == "poisson":
                own = stats.poisson.ppf(level, mu)
            elif self.likelihood == "student_t":
                own = mu + np.asarray(self.noise, np.float64) * stats.t.ppf(level, np.asarray(self.df, np.float64))
            else:
                own = mu + np.asarray(self.noise, np.float64) * stats.norm.ppf(level)
            lo, hi = own.min(0), own.max(0)
            for _ in range(iterations):
                mid = (lo + hi) / 2
                below = self._component_cdf(mid[None]).mean(0) < level
                lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
            out[i] = np.ceil(hi - 1e-9) if self.likelihood == "poisson" else (lo + hi) / 2
        return out[0] if np.ndim(q) == 0 else out

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """One replicated target per draw and input: labels ``(S, n)`` sampled from each
        draw's class probabilities, or regression targets ``(S, n, ...)`` from each draw's
        likelihood."""
        if self.task == "classification":
            cum = np.cumsum(self.probs, axis=-1)
            u = rng.random(cum.shape[:-1] + (1,))
            return np.minimum((u > cum).sum(-1), cum.shape[-1] - 1).astype(np.int32)
        if self.likelihood == "poisson":
            return rng.poisson(np.asarray(self.draws, np.float64)).astype(np.float32)
        noise = rng.standard_t(self.df) if self.likelihood == "student_t" else rng.standard_normal(self.draws.shape)
        return (self.draws + self.noise * noise).astype(np.float32)

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
        Regression (targets ``(n, ...)``): ``rmse`` of the predictive mean over every
        element, ``nll`` per row of the predictive mixture (:func:`bnnpp.metrics.predictive_nll`
        of :meth:`log_density`; for 1-D Gaussian targets equal to
        :func:`bnnpp.metrics.gaussian_nll`), ``coverage_95`` of mean ± 1.96·sd (the Gaussian
        interval, also for StudentT and Poisson), and the means over points of the total and
        epistemic predictive sd.
        """
        if self.task == "regression":
            return {
                "rmse": metrics.rmse(self.mean, y),
                "nll": (
                    metrics.gaussian_nll(self.draws, self.noise, y)
                    if self.likelihood == "gaussian" and self.draws.ndim == 2
                    else metrics.predictive_nll(self.log_density(y))
                ),
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
