"""Post-hoc calibration of any fitted posterior on a held-out calibration split: split-conformal
regression intervals and classification sets with a finite-sample coverage guarantee, and
temperature scaling of a classifier's predictive.

Split conformal prediction (Vovk, Gammerman & Shafer 2005; Angelopoulos & Bates 2021): a
score ``s_i`` of how badly the predictive fits each of ``n`` calibration points, and
``q̂`` = the ``⌈(n+1)(1−α)⌉``-th smallest score (:func:`conformal_quantile`; ``+inf`` when
that rank exceeds ``n``). For a new exchangeable point the set ``{y : s(x, y) ≤ q̂}`` holds the
true ``y`` with probability ≥ 1 − α, whatever the posterior. The scores:

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
prediction to pay for them and raises the ECE; the Brier-optimal ``T`` weighs the rows evenly
(``benchmarks/README.md``, temperature scaling, has the measurements). ``temperature_loss="auto"``
(the default) picks one of the two on the calibration split alone: it is cut into 5 folds, each
loss's ``T`` is fitted on four and applied to the fifth, and the loss whose out-of-fold
predictions have the lower ECE (15 equal-width bins, Guo et al.) fits the final ``T`` on the
whole split (NLL on ties, and below :data:`AUTO_MIN_ROWS` rows, where the ECE of a fold is
mostly noise). When both are asked for, ``T`` is fitted first and
the conformal scores are computed from the temperature-scaled probabilities, on the same split
(one fitted scalar; split the calibration data yourself for the strict guarantee).

This module holds the numerics and the saved :class:`Calibration` record; it depends on numpy
and scipy only. :meth:`bnnpp.Posterior.calibrate` fits one and :meth:`bnnpp.Posterior.predict`
applies it.
"""

from __future__ import annotations

import dataclasses
import math
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
from bnnpp.temperature import scale_probs as scale_probs

__all__ = [
    "AUTO_MIN_ROWS",
    "CLASSIFICATION_SCORES",
    "REGRESSION_SCORES",
    "TEMPERATURE_LOSSES",
    "TEMPERATURE_LOSS_CHOICES",
    "Calibration",
    "aps_scores",
    "class_scores",
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
    # a small tolerance keeps e.g. (19+1)*(1-0.1) = 18.000000000000004 at rank 18
    return math.ceil((n + 1) * (1 - alpha) - 1e-9)


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
    if k > n:
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
        ValueError: one line, for an ``alpha`` outside (0, 1), a score of the other task,
            temperature scaling of a regression, or ``y`` of the wrong shape or labels.
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
