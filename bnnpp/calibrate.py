"""Post-hoc calibration of any fitted posterior on a held-out calibration split: split-conformal
regression intervals and classification sets with a finite-sample coverage guarantee, and
temperature scaling of a classifier's predictive.

Split conformal prediction (Vovk, Gammerman & Shafer 2005; Angelopoulos & Bates 2021): a
score ``s_i`` of how badly the predictive fits each of ``n`` calibration points, and
``q̂`` = the ``⌈(n+1)(1−α)⌉``-th smallest score (:func:`conformal_quantile`; ``+inf`` when
that rank exceeds ``n``). For a new exchangeable point the set ``{y : s(x, y) ≤ q̂}`` holds the
true ``y`` with probability ≥ 1 − α, whatever the posterior, and, when the scores have no ties,
< 1 − α + 1/(n+1) (Vovk et al. 2005; Lei, G'Sell, Rinaldo, Tibshirani & Wasserman 2018;
Angelopoulos & Bates 2021). The rank is at most ``n`` exactly when ``n ≥ 1/α − 1``, i.e. ``n ≥ ⌈1/α⌉ − 1``
(:func:`conformal_min_rows`: 9 rows at α = 0.1, 999 at α = 0.001); :func:`fit` refuses fewer
(:func:`check_rows`), since the infinite threshold would make every interval ``(−∞, ∞)`` and
every set hold every class. :meth:`Calibration.guarantee` states the coverage a fitted
calibration has. The scores:

* ``"normalized"`` (regression): ``|y − μ(x)| / σ(x)`` with ``μ``, ``σ`` the predictive mean
  and total sd; interval ``μ ± q̂ σ`` (Lei et al. 2018, the locally weighted residual).
* ``"cqr"`` (regression, conformalized quantile regression, Romano, Patterson & Candès 2019):
  ``max(lo(x) − y, y − hi(x))`` with ``lo``/``hi`` the predictive mixture's ``α/2`` and
  ``1 − α/2`` quantiles (:meth:`bnnpp.posterior.Prediction.quantiles`); interval
  ``[lo − q̂, hi + q̂]``. The default for Student-t and Poisson predictives.
* ``"aps"`` (classification, adaptive prediction sets, Romano, Sesia & Candès 2020): with the
  mean class probabilities sorted in decreasing order and ``o(y)`` the rank of class ``y``
  (1 = most probable), ``E(x, y) = Σ_{j < o(y)} π_(j) + u·π_y``, ``u = 1`` or, randomised,
  ``u ~ Uniform(0, 1)`` (the default); the set is ``{c : E(x, c) ≤ q̂}``. With ``u = 1`` the
  sets are conservative, and with saturated probabilities (a confident network) most
  calibration scores lie just below 1, so ``q̂`` does too: a test row whose top probability
  exceeds ``q̂`` gets an empty set and every other row a set that must gather mass ``q̂``, many
  classes. The randomised score gives 1 − α on average with sets of about one class.
* ``"raps"`` (Angelopoulos, Bates, Malik & Jordan 2021): APS plus ``λ·max(0, o(y) − k_reg)``,
  which penalises long tails of unlikely classes.

Per-target columns of a regression with targets ``(n, K)`` get their own ``q̂``.

Temperature scaling (Guo, Pleiss, Sun & Weinberger 2017): one scalar ``T > 0`` divides each
posterior draw's log class probabilities (= its logits up to a per-row constant), every draw is
renormalised by a softmax, and the draws are averaged as before: ``p_T(c | x) = (1/S) Σ_s
softmax(log p_s(· | x) / T)_c``. ``T`` minimises the negative log-likelihood of that averaged
predictive on the calibration split (a bounded 1-D search over ``log T``). For one draw (MAP)
this is Guo et al.'s scaling of the logits. ``temperature_loss="brier"`` fits ``T`` by the
Brier score of the same averaged predictive instead, ``(1/n) Σ_i Σ_c (p_T(c | x_i) − 1[y_i =
c])²`` (Brier 1950), also a proper scoring rule but bounded per row (≤ 2), while a row whose
label gets probability p adds ``−log p`` to the NLL without bound. When a few confidently
misclassified rows carry most of the calibration NLL, as in a deep ensemble that is already
calibrated on the bulk of its rows, the NLL-optimal ``T`` softens every confident, correct
prediction to pay for them and raises the ECE; the Brier-optimal ``T`` weighs the rows evenly.
``temperature_loss="auto"``
(the default) picks one of the two on the calibration split alone: it is cut into 5 folds, each
loss's ``T`` is fitted on four and applied to the fifth, and the loss whose out-of-fold
predictions have the lower ECE (15 equal-width bins, Guo et al.) fits the final ``T`` on the
whole split (NLL on ties, and below :data:`AUTO_MIN_ROWS` rows, where the ECE of a fold is
mostly noise). A ``T`` that ends at a bound of :data:`TEMPERATURE_BOUNDS`, or where the loss is
as low as at that bound, is not pinned down by the rows: a few rows, or rows of one class, that
the classifier gets all right (the loss falls as ``T → 0``) or all wrong (it falls as ``T → ∞``);
:func:`fit` warns (:class:`TemperatureBoundWarning`). When both are asked for, ``T`` is fitted first and
the conformal scores are computed from the temperature-scaled probabilities, on the same split
(one fitted scalar; split the calibration data yourself for the strict guarantee).

This module holds the numerics and the saved :class:`Calibration` record; it depends on numpy
and scipy only. :meth:`bnnpp.Posterior.calibrate` fits one and :meth:`bnnpp.Posterior.predict`
applies it.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from bnnpp.temperature import AUTO_FOLDS as AUTO_FOLDS
from bnnpp.temperature import AUTO_MIN_ROWS as AUTO_MIN_ROWS
from bnnpp.temperature import TEMPERATURE_BOUNDS as TEMPERATURE_BOUNDS
from bnnpp.temperature import TEMPERATURE_LOSS_CHOICES as TEMPERATURE_LOSS_CHOICES
from bnnpp.temperature import TEMPERATURE_LOSSES as TEMPERATURE_LOSSES
from bnnpp.temperature import check_temperature_loss as check_temperature_loss
from bnnpp.temperature import choose_temperature_loss as choose_temperature_loss
from bnnpp.temperature import fit_temperature as fit_temperature
from bnnpp.temperature import log_probs, tempered_loss
from bnnpp.temperature import scale_probs as scale_probs

__all__ = [
    "AUTO_MIN_ROWS",
    "CLASSIFICATION_SCORES",
    "REGRESSION_SCORES",
    "TEMPERATURE_LOSSES",
    "TEMPERATURE_LOSS_CHOICES",
    "Calibration",
    "TemperatureBoundWarning",
    "aps_scores",
    "check_rows",
    "class_scores",
    "conformal_min_rows",
    "conformal_quantile",
    "conformal_rank",
    "cqr_scores",
    "choose_temperature_loss",
    "fit",
    "fit_temperature",
    "normalized_scores",
    "prediction_sets",
    "scale_probs",
]

REGRESSION_SCORES = ("normalized", "cqr")
"""Conformity scores of regression intervals."""
CLASSIFICATION_SCORES = ("aps", "raps")
"""Conformity scores of classification sets."""
CONFORMAL_REFERENCES = "Vovk, Gammerman & Shafer 2005; Angelopoulos & Bates 2021"
"""Where the split-conformal coverage bounds stated by :meth:`Calibration.guarantee` are proved."""
NO_GUARANTEE = "temperature scaling only: calibrated probabilities, no coverage guarantee (Guo et al. 2017)"
"""What :meth:`Calibration.summary` says of a calibration without a conformal step."""
BOUND_TOLERANCE = 1e-3
"""How close (in ``|log T − log bound|``) a fitted temperature may come to a bound of
:data:`TEMPERATURE_BOUNDS` before it counts as at the bound."""


class TemperatureBoundWarning(UserWarning):
    """A fitted temperature ended at (or, the loss being as low there, effectively at) a bound
    of its search: the calibration rows do not determine it."""


def check_alpha(alpha) -> float:
    """``alpha`` as a float; one-line ValueError unless it lies strictly between 0 and 1."""
    if (
        isinstance(alpha, bool)
        or not isinstance(alpha, (int, float, np.integer, np.floating))
        or not (math.isfinite(alpha) and 0 < alpha < 1)
    ):
        raise ValueError(f"alpha is the miscoverage in (0, 1), e.g. 0.1 for 90% intervals or sets, got {alpha!r}")
    return float(alpha)


def conformal_rank(n: int, alpha: float) -> int:
    """The 1-based rank ``⌈(n+1)(1−α)⌉`` of the calibration score that is the conformal
    threshold for ``n`` calibration points at miscoverage ``alpha`` (may exceed ``n``: then no
    finite threshold has the guarantee)."""
    # a small tolerance keeps e.g. (19+1)*(1-0.1) = 18.000000000000004 at rank 18; rank ≥ 1
    return max(1, math.ceil((n + 1) * (1 - alpha) - 1e-9))


def conformal_min_rows(alpha: float) -> int:
    """The fewest calibration points ``n`` for which split conformal at miscoverage ``alpha``
    has a finite threshold: the smallest ``n ≥ 1`` with :func:`conformal_rank` ``(n, alpha) ≤ n``.

    ``⌈(n+1)(1−α)⌉ ≤ n`` ⇔ ``(n+1)(1−α) ≤ n`` ⇔ ``n ≥ 1/α − 1``, so this is ``⌈1/α⌉ − 1``
    (at least 1); it is found from the rank itself, so that it agrees with
    :func:`conformal_quantile` where ``1/α`` is a whole number up to rounding (α = 1/3: 2 rows).

    Returns:
        The minimum ``n`` as an int (9 at α = 0.1, 19 at 0.05, 999 at 0.001).
    """
    alpha = check_alpha(alpha)
    n = max(1, math.ceil(1 / alpha) - 2)
    while n > 1 and conformal_rank(n - 1, alpha) <= n - 1:
        n -= 1
    while conformal_rank(n, alpha) > n:
        n += 1
    return n


def check_rows(n: int, alpha: float | None) -> int:
    """``n`` if ``n`` calibration rows can calibrate at miscoverage ``alpha`` (``None``: no
    conformal step, any ``n ≥ 1``); else a one-line ValueError naming the minimum
    (:func:`conformal_min_rows`) and the smallest ``alpha`` that ``n`` rows allow, ``1/(n+1)``.

    Returns:
        ``n``.
    """
    if n < 1:
        raise ValueError("calibration needs at least one labelled row, got none")
    if alpha is None:
        return n
    alpha = check_alpha(alpha)
    need = conformal_min_rows(alpha)
    if n < need:
        smallest = 1 / (n + 1)
        shown = f"{smallest:.3g}"
        if float(shown) < smallest:  # rounded down: state a level n rows do allow
            shown = f"{math.ceil(smallest * 1e4) / 1e4:g}"
        raise ValueError(
            f"alpha {alpha:g} needs at least {need} calibration rows for a finite split-conformal threshold (the "
            f"⌈(n+1)(1−α)⌉-th smallest of n scores; {CONFORMAL_REFERENCES}), got {n}: with fewer every interval or set "
            f"is unbounded; give more rows, or alpha ≥ 1/(n+1) = {shown}"
        )
    return n


def conformal_quantile(scores, alpha: float) -> np.ndarray:
    """The split-conformal threshold ``q̂``: the ``⌈(n+1)(1−α)⌉``-th smallest of the ``n``
    scores along axis 0 (``+inf`` when that rank exceeds ``n``).

    Args:
        scores: ``(n, ...)`` calibration scores.
        alpha: miscoverage in (0, 1).

    Returns:
        float64 of shape ``scores.shape[1:]`` (a 0-d array for ``(n,)`` scores).
    """
    alpha = check_alpha(alpha)
    scores = np.asarray(scores, np.float64)
    n = scores.shape[0]
    if n == 0:
        raise ValueError("conformal calibration needs at least one calibration point")
    k = conformal_rank(n, alpha)
    if k > n:  # fewer than conformal_min_rows(alpha) points: fit refuses them (check_rows)
        return np.full(scores.shape[1:], np.inf)
    return np.sort(scores, axis=0)[k - 1]


def normalized_scores(mean, sd, y) -> np.ndarray:
    """``|y − mean| / sd`` elementwise, ``(n, ...)`` float64 (sd floored at the smallest
    positive float so a zero-sd draw does not divide by zero)."""
    sd = np.maximum(np.asarray(sd, np.float64), np.finfo(np.float64).tiny)
    return np.abs(np.asarray(y, np.float64) - np.asarray(mean, np.float64)) / sd


def cqr_scores(lo, hi, y) -> np.ndarray:
    """CQR's ``max(lo − y, y − hi)`` elementwise (negative inside the interval), ``(n, ...)``."""
    y = np.asarray(y, np.float64)
    return np.maximum(np.asarray(lo, np.float64) - y, y - np.asarray(hi, np.float64))


def class_scores(probs, u=None, *, raps_lambda: float = 0.0, raps_k: int = 0) -> np.ndarray:
    """The APS/RAPS score ``E(x, c)`` of every class (module docstring).

    Args:
        probs: mean class probabilities ``(n, C)``.
        u: ``(n,)`` uniforms of the randomised score, or ``None`` (``u = 1``).
        raps_lambda, raps_k: the RAPS penalty ``λ·max(0, o(c) − k_reg)`` (0: APS).

    Returns:
        ``(n, C)`` float64.
    """
    p = np.asarray(probs, np.float64)
    order = np.argsort(-p, axis=1, kind="stable")
    sorted_p = np.take_along_axis(p, order, axis=1)
    before = np.cumsum(sorted_p, axis=1) - sorted_p  # mass of the classes ranked above
    weight = np.ones((p.shape[0], 1)) if u is None else np.asarray(u, np.float64).reshape(-1, 1)
    ranks = np.arange(1, p.shape[1] + 1)[None, :]
    sorted_scores = before + weight * sorted_p + raps_lambda * np.maximum(0, ranks - raps_k)
    scores = np.empty_like(sorted_scores)
    np.put_along_axis(scores, order, sorted_scores, axis=1)
    return scores


def aps_scores(probs, y, u=None, *, raps_lambda: float = 0.0, raps_k: int = 0) -> np.ndarray:
    """The APS/RAPS score of the true class ``y`` ``(n,)`` int: ``(n,)`` float64."""
    all_scores = class_scores(probs, u, raps_lambda=raps_lambda, raps_k=raps_k)
    return np.take_along_axis(all_scores, np.asarray(y, np.int64)[:, None], axis=1)[:, 0]


def prediction_sets(probs, threshold: float, u=None, *, raps_lambda: float = 0.0, raps_k: int = 0) -> np.ndarray:
    """Conformal prediction sets ``{c : E(x, c) ≤ q̂}`` as booleans ``(n, C)``."""
    return class_scores(probs, u, raps_lambda=raps_lambda, raps_k=raps_k) <= threshold


@dataclass(frozen=True)
class Calibration:
    """A fitted calibration, saved with the posterior and applied by its ``predict``.

    Attributes:
        task: ``"regression"`` or ``"classification"``.
        n: calibration points it was fitted on.
        alpha: the conformal miscoverage (intervals/sets hold the truth with probability
            ≥ 1 − alpha), or ``None`` when only the temperature was fitted.
        score: one of :data:`REGRESSION_SCORES` / :data:`CLASSIFICATION_SCORES`, or ``None``.
        threshold: ``q̂`` per regression target element (a tuple of one for ``(n,)``
            targets, ``K`` for ``(n, K)``) or for the classifier's sets.
        temperature: the classifier's temperature (1.0: none).
        temperature_loss: what the temperature was fitted by (:data:`TEMPERATURE_LOSSES`).
        temperature_cv_ece: when ``temperature_loss="auto"`` chose it, the out-of-fold ECE of
            each of :data:`TEMPERATURE_LOSSES` (:func:`choose_temperature_loss`); else ``()``.
        randomized: APS/RAPS with the uniform ``u`` (``u`` is drawn from the ``seed`` of
            ``predict``); else ``u = 1``.
        raps_lambda, raps_k: the RAPS penalty.
    """

    task: str
    n: int
    alpha: float | None = None
    score: str | None = None
    threshold: tuple[float, ...] = ()
    temperature: float = 1.0
    temperature_loss: str = "nll"
    temperature_cv_ece: tuple[float, ...] = ()
    randomized: bool = False
    raps_lambda: float = 0.0
    raps_k: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``+inf`` thresholds as the string ``"inf"``)."""
        d = dataclasses.asdict(self)
        d["threshold"] = [("inf" if math.isinf(t) else t) for t in self.threshold]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        """The inverse of :meth:`to_dict`; ValueError naming the bad entry."""
        try:
            cal = cls(
                task=str(d["task"]),
                n=int(d["n"]),
                alpha=None if d.get("alpha") is None else float(d["alpha"]),
                score=d.get("score"),
                threshold=tuple(float(t) for t in d.get("threshold", ())),
                temperature=float(d.get("temperature", 1.0)),
                temperature_loss=str(d.get("temperature_loss", "nll")),
                temperature_cv_ece=tuple(float(e) for e in d.get("temperature_cv_ece", ())),
                randomized=bool(d.get("randomized", False)),
                raps_lambda=float(d.get("raps_lambda", 0.0)),
                raps_k=int(d.get("raps_k", 0)),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"the saved calibration is damaged ({type(e).__name__}: {e})") from None
        if cal.score is not None and cal.score not in (*REGRESSION_SCORES, *CLASSIFICATION_SCORES):
            raise ValueError(f"the saved calibration names an unknown score {cal.score!r}")
        if cal.temperature_loss not in TEMPERATURE_LOSSES:
            raise ValueError(f"the saved calibration names an unknown temperature_loss {cal.temperature_loss!r}")
        if not (cal.temperature > 0):
            raise ValueError(f"the saved calibration's temperature must be > 0, got {cal.temperature}")
        return cal

    def guarantee(self) -> str | None:
        """The coverage this calibration's intervals or sets have, in one line: split conformal
        gives marginal coverage ≥ ``1 − alpha`` for new rows exchangeable with the calibration
        rows, and < ``1 − alpha + 1/(n+1)`` when the scores have no ties (module docstring;
        Vovk et al. 2005; Angelopoulos & Bates 2021). It is marginal (averaged over calibration
        sets and new rows, not for each ``x``), per target element for ``(n, K)`` targets, and
        approximate when a temperature was fitted on the same rows.

        Returns:
            The statement as a string, or ``None`` when no conformal step was fitted
            (temperature scaling alone carries no coverage guarantee).
        """
        if self.score is None or self.alpha is None:
            return None
        what = "intervals" if self.task == "regression" else "sets"
        if any(math.isinf(t) for t in self.threshold):
            return (
                f"split conformal ({self.score}): no guarantee, the threshold is infinite ({self.n} rows are fewer than the "
                f"{conformal_min_rows(self.alpha)} alpha {self.alpha:g} needs), so the {what} are unbounded: calibrate again"
            )
        level = 1 - self.alpha
        upper = min(1.0, level + 1 / (self.n + 1))
        text = (
            f"split conformal ({self.score}): marginal coverage ≥ 1−α = {level:g} (and < 1−α + 1/(n+1) = {upper:.4g} when the "
            f"scores have no ties) for new rows exchangeable with the n = {self.n} calibration rows"
        )
        if len(self.threshold) > 1:
            text += f", for each of the {len(self.threshold)} target elements separately"
        if self.task == "classification" and self.temperature != 1.0:
            text += "; the temperature was fitted on the same rows, so the bound is approximate (split them for an exact one)"
        return f"{text} ({CONFORMAL_REFERENCES})"

    def summary(self) -> str:
        """What was fitted and, on a second line, :meth:`guarantee` (or that temperature scaling
        alone carries no coverage guarantee).

        Returns:
            A two-line string.
        """
        parts = [f"{self.task} calibration on {self.n} rows"]
        if self.task == "classification" and self.temperature != 1.0:
            parts.append(f"temperature {self.temperature:.4g} ({self.temperature_loss})")
        if self.score is not None:
            q = ", ".join(f"{t:.4g}" for t in self.threshold)
            parts.append(f"{self.score} {'intervals' if self.task == 'regression' else 'sets'} at alpha {self.alpha:g}: threshold {q}")
        guarantee = self.guarantee() or NO_GUARANTEE
        return f"{', '.join(parts)}\n{guarantee}"

    def __str__(self) -> str:
        return self.summary()

    def scale(self, prediction):
        """``prediction`` with its class probabilities temperature-scaled (:func:`scale_probs`);
        regression predictions, and ``T = 1``, are returned as they are."""
        if self.task != "classification" or self.temperature == 1.0:
            return prediction
        return dataclasses.replace(prediction, probs=scale_probs(prediction.probs, self.temperature))

    def attach(self, prediction, seed: int = 0):
        """``prediction`` (already :meth:`scale`-d) with the conformal ``interval_lo``,
        ``interval_hi`` ``(n, ...)`` or ``sets`` ``(n, C)`` and ``alpha``; unchanged when no
        conformal score was fitted."""
        if self.score is None:
            return prediction
        if prediction.task != self.task:
            raise ValueError(f"this calibration is for {self.task}, the prediction is {prediction.task}")
        q = np.asarray(self.threshold, np.float64)
        if np.isinf(q).any():  # a calibration saved before fit refused too few rows (check_rows)
            warnings.warn(self.guarantee(), UserWarning, stacklevel=2)
        if self.task == "classification":
            u = np.random.default_rng(seed).random(prediction.probs.shape[1]) if self.randomized else None
            sets = prediction_sets(prediction.mean, float(q[0]), u, raps_lambda=self.raps_lambda, raps_k=self.raps_k)
            return dataclasses.replace(prediction, sets=sets, alpha=self.alpha)
        shape = np.shape(prediction.draws)[2:]
        q = q.reshape(shape) if q.size == int(np.prod(shape)) else q[0]
        if self.score == "normalized":
            mean, sd = prediction.mean, prediction.std
            lo, hi = mean - q * sd, mean + q * sd
        else:
            lo, hi = prediction.quantiles([self.alpha / 2, 1 - self.alpha / 2])
            lo, hi = lo - q, hi + q
        return dataclasses.replace(prediction, interval_lo=lo, interval_hi=hi, alpha=self.alpha)

    def apply(self, prediction, seed: int = 0):
        """:meth:`scale` then :meth:`attach`: what :meth:`bnnpp.Posterior.predict` returns."""
        return self.attach(self.scale(prediction), seed)


def fit(
    prediction,
    y,
    alpha: float | None = 0.1,
    *,
    score: str | None = None,
    temperature_scaling: bool | None = None,
    temperature_loss: str = "auto",
    randomized: bool = True,
    raps_lambda: float = 0.01,
    raps_k: int = 1,
    seed: int = 0,
) -> Calibration:
    """Fit a :class:`Calibration` from the uncalibrated ``prediction`` at the calibration
    inputs and their targets ``y``.

    Args:
        prediction: a :class:`bnnpp.posterior.Prediction` ``(S, n, ...)``.
        y: targets ``(n, ...)`` (class indices for a classifier), in the prediction's units.
        alpha: conformal miscoverage in (0, 1), or ``None`` for no conformal step.
        score: ``"normalized"`` or ``"cqr"`` (regression; default ``"normalized"`` for a
            Gaussian likelihood, ``"cqr"`` otherwise), ``"aps"`` or ``"raps"`` (classification;
            default ``"aps"``).
        temperature_scaling: fit a temperature first (classifiers only; default: True for a
            classifier).
        temperature_loss: ``"nll"`` (Guo et al.) or ``"brier"``: what the temperature
            minimises on the calibration split; ``"auto"``: the one of the two with the lower
            cross-validated ECE on that split (module docstring, :func:`choose_temperature_loss`).
        randomized: randomised APS/RAPS scores (coverage 1 − α in expectation, sets of about
            one class for a confident classifier); ``False``: ``u = 1``, deterministic sets that
            are conservative and, with saturated probabilities, large for most rows and empty
            for the most confident ones (module docstring).
        raps_lambda, raps_k: the RAPS penalty (used with ``score="raps"`` only).
        seed: seed of the uniforms of randomised scores on the calibration split and of the
            folds of ``temperature_loss="auto"``.

    Returns:
        The :class:`Calibration`.

    Raises:
        ValueError: one line, for an ``alpha`` outside (0, 1), fewer calibration rows than
            ``alpha`` needs for a finite threshold (:func:`check_rows`), a score of the other
            task, temperature scaling of a regression, or ``y`` of the wrong shape or labels.

    Warns:
        TemperatureBoundWarning: the temperature ended at a bound of its search (module
            docstring), naming the bound and the likely reason.
    """
    task = prediction.task
    if alpha is not None:
        alpha = check_alpha(alpha)
    scores_of_task = REGRESSION_SCORES if task == "regression" else CLASSIFICATION_SCORES
    if score is not None and score not in scores_of_task:
        raise ValueError(f"score {score!r} is not one of {task}'s: {', '.join(scores_of_task)}")
    if temperature_scaling and task != "classification":
        raise ValueError("temperature scaling is for classifiers; a regression is calibrated by conformal intervals (alpha=...)")
    check_temperature_loss(temperature_loss)
    if temperature_loss != "auto" and (task != "classification" or temperature_scaling is False):
        raise ValueError("temperature_loss chooses how a classifier's temperature is fitted: drop it, or fit a temperature")
    if alpha is None and not (task == "classification" and temperature_scaling is not False):
        raise ValueError("nothing to calibrate: give alpha (conformal) or, for a classifier, temperature_scaling=True")
    if isinstance(raps_k, bool) or not isinstance(raps_k, (int, np.integer)) or raps_k < 0:
        raise ValueError(f"raps_k must be an integer ≥ 0, got {raps_k!r}")
    if not (math.isfinite(raps_lambda) and raps_lambda >= 0):
        raise ValueError(f"raps_lambda must be a number ≥ 0, got {raps_lambda!r}")
    y = np.asarray(y)
    check_rows(prediction.probs.shape[1] if task == "classification" else np.shape(prediction.draws)[1], alpha)
    if task == "classification":
        probs = prediction.probs
        n, classes = probs.shape[1], probs.shape[2]
        if y.shape != (n,):
            raise ValueError(f"y must hold one class index per calibration row, shape ({n},), got {y.shape}")
        if not (np.all(np.isfinite(y)) and np.all(y == np.round(y)) and y.min() >= 0 and y.max() < classes):
            raise ValueError(f"y must hold class indices 0..{classes - 1}")
        y = y.astype(np.int64)
        cal = Calibration(task, n)
        if temperature_scaling is not False:
            loss, cv_ece = (temperature_loss, ()) if temperature_loss != "auto" else choose_temperature_loss(probs, y, seed)
            temperature = fit_temperature(probs, y, loss)
            _warn_at_bound(probs, y, loss, temperature)
            cal = dataclasses.replace(cal, temperature=temperature, temperature_loss=loss, temperature_cv_ece=cv_ece)
        if alpha is None:
            return cal
        score = score or "aps"
        lam, k = (float(raps_lambda), int(raps_k)) if score == "raps" else (0.0, 0)
        mean = scale_probs(probs, cal.temperature).mean(axis=0)
        u = np.random.default_rng(seed).random(n) if randomized else None
        q = conformal_quantile(aps_scores(mean, y, u, raps_lambda=lam, raps_k=k), alpha)
        return dataclasses.replace(
            cal, alpha=alpha, score=score, threshold=(float(q),), randomized=bool(randomized), raps_lambda=lam, raps_k=k
        )
    shape = np.shape(prediction.draws)[1:]
    if y.shape != shape:
        raise ValueError(f"y must have shape {shape} (one target per calibration row), got {y.shape}")
    if not np.all(np.isfinite(y)):
        raise ValueError("y holds NaN or inf: drop those calibration rows")
    score = score or ("normalized" if prediction.likelihood == "gaussian" else "cqr")
    if score == "normalized":
        scores = normalized_scores(prediction.mean, prediction.std, y)
    else:
        lo, hi = prediction.quantiles([alpha / 2, 1 - alpha / 2])
        scores = cqr_scores(lo, hi, y)
    q = conformal_quantile(scores, alpha)
    return Calibration(task, int(shape[0]), alpha=alpha, score=score, threshold=tuple(float(v) for v in np.ravel(q)))


def _warn_at_bound(probs, y: np.ndarray, loss: str, temperature: float) -> None:
    """Warn (:class:`TemperatureBoundWarning`, one line) when ``temperature`` lies within
    :data:`BOUND_TOLERANCE` of a bound of :data:`TEMPERATURE_BOUNDS`, or the loss at that bound
    is no higher than at ``temperature`` (a flat loss leaves the search anywhere in between),
    naming the bound and the likely reason: few rows, one class, or rows all classified right
    (the loss falls as ``T → 0``) or all wrong (it falls as ``T → ∞``)."""
    p = np.asarray(probs, np.float64)
    if p.ndim == 2:
        p = p[None]
    logp = log_probs(p)
    objective = tempered_loss(loss)
    at_t = objective(logp, y, temperature)
    for side, bound in zip(("lower", "upper"), TEMPERATURE_BOUNDS, strict=True):
        near = abs(math.log(temperature / bound)) <= BOUND_TOLERANCE
        if not (near or objective(logp, y, bound) <= at_t + 1e-12 * max(1.0, abs(at_t))):
            continue
        n, num_classes = len(y), p.shape[2]
        present = np.unique(y)
        right = int(np.sum(p.mean(axis=0).argmax(axis=1) == y))
        reasons = []
        if n < 2 * num_classes or n < 10:
            reasons.append("too few rows")
        if len(present) == 1:
            reasons.append(f"a single class (index {int(present[0])} of {num_classes})")
        if side == "lower" and right == n:
            reasons.append("every row classified right, so sharpening only lowers the loss")
        elif side == "upper" and right == 0:
            reasons.append("no row classified right, so flattening only lowers the loss")
        reason = ", ".join(reasons) or "a loss that barely changes with T"
        where = "" if near else f" (the calibration {loss} is no higher there than at the fitted T = {temperature:.4g})"
        warnings.warn(
            f"temperature scaling ended at the {side} bound T = {bound:g} of its search ({TEMPERATURE_BOUNDS[0]:g} to "
            f"{TEMPERATURE_BOUNDS[1]:g}){where}: these {n} row(s) do not pin T down, likely from {reason}; calibrate on more "
            "held-out rows that hold every class",
            TemperatureBoundWarning,
            stacklevel=3,
        )
        return
