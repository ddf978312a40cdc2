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

import json
import math
import os
import time
from typing import Any

import numpy as np

from bnnpp import files, metrics, reports
from bnnpp.posterior import Posterior, Prediction

__all__ = [
    "check_count",
    "check_tau",
    "central_interval_coverage",
    "evaluate",
    "in_original_units",
    "predict_probs",
    "predictive_cdf",
    "predictive_quantiles",
    "regression_checks",
    "selective_curve",
    "selective_prediction",
    "uniform_noise",
    "write_report",
]

MAX_VALUES_PER_CALL = 1 << 24
"""Default bound on draws × rows × input values per prediction call (16M: 100 draws of 213
MNIST images; a convolutional net's activations are a few times that)."""


def check_count(value, name: str) -> int:
    """``value`` as an int; ValueError unless it is an integer ≥ 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer ≥ 1, got {value!r}")
    return int(value)


def check_tau(tau) -> float:
    """``tau`` as a float; ValueError unless it lies strictly between 0 and 1."""
    if isinstance(tau, bool) or not isinstance(tau, (int, float, np.integer, np.floating)) or not (
        math.isfinite(tau) and 0 < tau < 1
    ):
        raise ValueError(f"tau must be a number in (0, 1) (the default 0.2 rejects max class probability < 0.2), got {tau!r}")
    return float(tau)


def predict_probs(
    posterior: Posterior, x: np.ndarray, *, num_samples: int | None = None, seed: int = 0, batch_size: int | None = None
) -> np.ndarray:
    """Per-draw class probabilities at ``x``, predicted ``batch_size`` inputs at a time to bound
    memory; the last batch is padded to ``batch_size`` so that one compiled program serves
    every batch.

    Args:
        posterior: a classifier posterior.
        x: inputs ``(n, *features)``.
        num_samples: posterior draws S (default: all; more than the posterior kept is capped
            at them, with a warning; see :meth:`Posterior.predict`).
        seed: key for any randomness in the model.
        batch_size: inputs per prediction call (default: as many as keep S × rows × input
            values under :data:`MAX_VALUES_PER_CALL`, at most 1000).

    Returns:
        float32 ``(S, n, C)``.
    """
    x = np.asarray(x, np.float32)
    num_samples = posterior.draws_to_use(num_samples)  # at most the draws kept: one warning, not one per batch
    draws = posterior.num_chains * posterior.num_draws if num_samples is None else num_samples
    if batch_size is None:
        per_row = max(1, draws * int(np.prod(x.shape[1:])))
        batch_size = max(1, min(1000, MAX_VALUES_PER_CALL // per_row))
    batch_size = check_count(batch_size, "batch_size")
    n = x.shape[0]
    if n == 0:
        raise ValueError("x is empty: pass at least one input")
    b = min(batch_size, n)
    parts = []
    for start in range(0, n, b):
        xb = x[start : start + b]
        m = xb.shape[0]
        if m < b:  # pad with copies of the first row: same shape, same compiled program
            xb = np.concatenate([xb, np.repeat(xb[:1], b - m, axis=0)])
        pred = posterior.predict(xb, num_samples=num_samples, seed=seed)
        if pred.task != "classification":
            raise ValueError("evaluation needs a classifier (categorical or bernoulli likelihood), not a regression model")
        parts.append(pred.probs[:, :m])
    return np.concatenate(parts, axis=1)


# --- regression: the predictive mixture's CDF and quantiles -------------------------------


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
    return Prediction("regression", draws=np.asarray(prediction.draws) * scale + shift, noise=np.asarray(prediction.noise) * scale,
                      likelihood=prediction.likelihood, df=prediction.df)


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
    return {"mean": mean, "lower": lower, "upper": upper, "residual": y - mean, "pit": pit, "level": float(level),
            "levels": levels, "coverage": central_interval_coverage(pit, levels)}


def uniform_noise(like: np.ndarray, n: int | None = None, seed: int = 0) -> np.ndarray:
    """Uniform-noise images shaped and scaled like ``like``: every value independently
    U(lo, hi) with lo, hi the smallest and largest value of ``like`` (U(0, 1) for pixels
    divided by 255), so the noise has the inputs' shape and normalisation.

    Returns:
        float32 ``(n, *like.shape[1:])``, ``n`` defaulting to ``len(like)``.
    """
    like = np.asarray(like)
    n = len(like) if n is None else check_count(n, "n")
    lo, hi = float(like.min()), float(like.max())
    rng = np.random.default_rng(seed)
    return rng.uniform(lo, hi, size=(n, *like.shape[1:])).astype(np.float32)


def _uncertainty_scores(probs: np.ndarray) -> dict[str, np.ndarray]:
    """Per-input summaries of per-draw probabilities ``(S, n, C)``, each ``(n,)`` (``mean_probs`` ``(n, C)``)."""
    mean = probs.mean(axis=0)
    return {
        "mean_probs": mean,
        "variance": probs.var(axis=0).sum(axis=-1),  # Σ_c Var_s[p_sc]: variance over draws, summed over classes
        "expected_error_rate": metrics.expected_error_rate(mean),
        "entropy": metrics.predictive_entropy(probs),
        "mutual_information": metrics.mutual_information(probs),
    }


# --- selective prediction: refuse the least certain inputs ------------------------------


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
        out[name] = {"area": float(values.mean()), "at": {f"{100 * c:g}%": float(values[i]) for c, i in zip(SELECTIVE_COVERAGES, idx, strict=True)},
                     "constant": bool(np.ptp(np.asarray(u, np.float64)) == 0)}
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


def evaluate(
    posterior: Posterior,
    x_test: np.ndarray,
    y_test: np.ndarray,
    *,
    ood: dict[str, np.ndarray] | None = None,
    num_samples: int = 100,
    tau: float = 0.2,
    seed: int = 0,
    batch_size: int | None = None,
    num_images: int = 16,
    figures: bool = True,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, np.ndarray]]:
    """Test error, calibration, per-image uncertainty and OOD detection of a classifier.

    Args:
        posterior: a fitted classifier posterior.
        x_test: test inputs ``(n, *features)``; y_test: integer labels ``(n,)``.
        ood: name → out-of-distribution inputs ``(m, *features)`` (e.g. uniform noise,
            Fashion-MNIST); each is scored against the test set.
        num_samples: posterior draws S per prediction (at most the number of distinct draws
            the posterior has: a MAP posterior uses its one draw).
        tau: reject an input when max_c p̄_c < τ.
        seed: key for prediction.
        batch_size: inputs per prediction call (default: see :func:`predict_probs`).
        num_images: images per grid (sure-but-wrong and lowest-confidence).
        figures: build the figures (False skips matplotlib).

    Returns:
        ``(report, figures, per_image)``: the JSON-safe report (``test``: error, accuracy, NLL,
        Brier, ECE, rejected share, mean uncertainties, the sure-but-wrong and
        lowest-confidence image indices; ``ood``: per set its size, rejected share, mean
        entropy and mutual information, and AUROC of entropy and of mutual information
        against the test set); file name → matplotlib Figure; and per-image arrays of the
        test set (``mean_probs`` ``(n, C)``, ``variance``, ``expected_error_rate``,
        ``entropy``, ``mutual_information``, ``y`` ``(n,)``).
    """
    tau = check_tau(tau)
    num_samples = check_count(num_samples, "num_samples")
    num_images = check_count(num_images, "num_images")
    x_test = np.asarray(x_test, np.float32)
    y_test = np.asarray(y_test)
    if y_test.ndim != 1 or len(y_test) != len(x_test):
        raise ValueError(f"y_test must hold one label per test input ({len(x_test)}), got shape {y_test.shape}")
    ood = dict(ood or {})
    for name, xo in ood.items():
        if np.shape(xo)[1:] != x_test.shape[1:]:
            raise ValueError(f"OOD set {name!r} has inputs of shape {np.shape(xo)[1:]}, the test set {x_test.shape[1:]}")
    draws = min(num_samples, posterior.num_chains * posterior.num_draws)

    t0 = time.perf_counter()
    probs = predict_probs(posterior, x_test, num_samples=draws, seed=seed, batch_size=batch_size)
    s = _uncertainty_scores(probs)
    mean = s["mean_probs"]
    predicted = mean.argmax(-1)
    wrong = np.flatnonzero(predicted != y_test)
    sure_wrong = wrong[np.argsort(s["expected_error_rate"][wrong], kind="stable")][:num_images]
    least_confident = np.argsort(-s["expected_error_rate"], kind="stable")[:num_images]
    test = {
        "n": len(y_test),
        "error": 1.0 - metrics.accuracy(mean, y_test),
        "accuracy": metrics.accuracy(mean, y_test),
        "nll": metrics.nll(mean, y_test),
        "brier": metrics.brier(mean, y_test),
        "ece": metrics.ece(mean, y_test),
        "rejected": metrics.rejection_rate(mean, tau),
        "mean_entropy": float(s["entropy"].mean()),
        "mean_mutual_information": float(s["mutual_information"].mean()),
        "mean_expected_error_rate": float(s["expected_error_rate"].mean()),
        "mean_variance": float(s["variance"].mean()),
        "sure_but_wrong": [
            {"index": int(i), "label": int(y_test[i]), "predicted": int(predicted[i]), "expected_error_rate": float(s["expected_error_rate"][i])}
            for i in sure_wrong
        ],
        "lowest_confidence": [
            {"index": int(i), "label": int(y_test[i]), "predicted": int(predicted[i]), "expected_error_rate": float(s["expected_error_rate"][i])}
            for i in least_confident
        ],
    }
    ood_report, ood_scores = {}, {}
    for name, xo in ood.items():
        so = _uncertainty_scores(predict_probs(posterior, xo, num_samples=draws, seed=seed, batch_size=batch_size))
        ood_scores[name] = so
        ood_report[name] = {
            "n": len(xo),
            "rejected": metrics.rejection_rate(so["mean_probs"], tau),
            "mean_entropy": float(so["entropy"].mean()),
            "mean_mutual_information": float(so["mutual_information"].mean()),
            "auroc_entropy": metrics.auroc(s["entropy"], so["entropy"]),
            "auroc_mutual_information": metrics.auroc(s["mutual_information"], so["mutual_information"]),
        }
    errors = (predicted != y_test).astype(np.float64)
    measures = classification_measures(mean, s)
    report = {
        "num_samples": int(draws),
        "tau": tau,
        "test": test,
        "selective": selective_prediction(errors, measures),
        "ood": ood_report,
        "seconds": {"predict_and_score": time.perf_counter() - t0},
    }
    per_image = {k: v for k, v in s.items()} | {"y": y_test}
    figs = _figures(x_test, y_test, s, ood_scores, tau, test) if figures else {}
    if figures:
        from bnnpp import plots

        figs["selective.png"] = plots.selective_figure(selective_curves(errors, measures), "accuracy")
    report["figures"] = sorted(figs)
    return report, figs, per_image


def _figures(x_test, y_test, s, ood_scores, tau, test) -> dict[str, Any]:
    """The evaluation figures by file name."""
    # bnnpp.plots imports matplotlib (~0.5 s): loaded on first use, not at command start-up
    from bnnpp import plots

    def grid(entries, title):
        idx = [e["index"] for e in entries]
        titles = [f"y={e['label']} pred={e['predicted']}\nE[err]={e['expected_error_rate']:.3f}" for e in entries]
        return plots.image_grid(x_test[idx], titles=titles, title=title)

    figs = {
        "uncertainty_histograms.png": plots.uncertainty_histograms(s["variance"], s["expected_error_rate"]),
        "sure_but_wrong.png": grid(test["sure_but_wrong"], "misclassified, lowest expected error rate"),
        "lowest_confidence.png": grid(test["lowest_confidence"], "highest expected error rate"),
    }
    if ood_scores:
        figs["ood.png"] = plots.ood_histograms(
            {"entropy": s["entropy"], "mutual information": s["mutual_information"], "max probability": s["mean_probs"].max(-1)},
            {
                name: {"entropy": so["entropy"], "mutual information": so["mutual_information"], "max probability": so["mean_probs"].max(-1)}
                for name, so in ood_scores.items()
            },
            tau=tau,
        )
    return figs


def write_report(out_dir: str | os.PathLike, report: dict, figures: dict, per_image: dict | None = None, *, name: str = "evaluation",
                 markdown=reports.evaluation_markdown) -> list[str]:
    """Write ``<name>.json``, ``<name>.md`` (``markdown(report)``), the figures (PNG) and
    ``<name>.npz`` (the per-image arrays) into ``out_dir``: everything goes to a temporary
    folder first and is then moved into place, so a failure leaves no partial output.

    Returns:
        The file names written.
    """
    out_dir = os.fspath(out_dir)
    if not os.path.isdir(out_dir):
        raise ValueError(f"{out_dir} is not a folder")
    report = dict(report, figures=sorted(figures))
    names = [*figures, *([f"{name}.npz"] if per_image is not None else []), f"{name}.json", f"{name}.md"]
    with files.publish_folder(out_dir, prefix=f".{name}-") as tmp:
        for fname, fig in figures.items():
            fig.savefig(os.path.join(tmp, fname), dpi=110)
        if per_image is not None:
            np.savez_compressed(os.path.join(tmp, f"{name}.npz"), **per_image)
        with open(os.path.join(tmp, f"{name}.json"), "w") as f:
            json.dump(report, f, indent=2)
        with open(os.path.join(tmp, f"{name}.md"), "w") as f:
            f.write(markdown(report))
    return names
