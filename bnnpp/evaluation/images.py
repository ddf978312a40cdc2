"""The image-classifier evaluation of ``bnnpp evaluate`` (:func:`evaluate`) and the report
folder it writes (:func:`write_report`)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Any

import numpy as np

from bnnpp import files, metrics, reports
from bnnpp.evaluation.predict import _uncertainty_scores, check_count, check_tau, predict_probs
from bnnpp.evaluation.selective import classification_measures, selective_curves, selective_prediction
from bnnpp.posterior import Posterior
from bnnpp.records import EvaluationReport


def evaluation_report(
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
) -> tuple[EvaluationReport, dict[str, Any], dict[str, np.ndarray]]:
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
        ``(report, figures, per_image)``: the :class:`~bnnpp.records.EvaluationReport` (what
        :func:`evaluate` returns as a dict), whose JSON holds ``test`` (error, accuracy, NLL,
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
    test = _test_report(s, predicted, y_test, tau, num_images)
    ood_report, ood_scores = _ood_report(posterior, ood, s, draws, seed, batch_size, tau)
    errors = (predicted != y_test).astype(np.float64)
    measures = classification_measures(mean, s)
    report = EvaluationReport(
        num_samples=int(draws),
        tau=tau,
        test=test,
        selective=selective_prediction(errors, measures),
        ood=ood_report,
        seconds={"predict_and_score": time.perf_counter() - t0},
    )
    per_image = {k: v for k, v in s.items()} | {"y": y_test}
    figs = _figures(x_test, y_test, s, ood_scores, tau, test) if figures else {}
    if figures:
        from bnnpp import plots

        figs["selective.png"] = plots.selective_figure(selective_curves(errors, measures), "accuracy")
    report.figures = sorted(figs)
    return report, figs, per_image


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
    """Test error, calibration, per-image uncertainty and OOD detection of a classifier:
    :func:`evaluation_report` (same arguments) with the report as its JSON-safe dict.

    Returns:
        ``(report, figures, per_image)``: the report as ``evaluation.json`` holds it
        (:meth:`~bnnpp.records.EvaluationReport.to_json`), file name → Figure, per-image arrays.
    """
    report, figs, per_image = evaluation_report(
        posterior,
        x_test,
        y_test,
        ood=ood,
        num_samples=num_samples,
        tau=tau,
        seed=seed,
        batch_size=batch_size,
        num_images=num_images,
        figures=figures,
    )
    return report.to_json(), figs, per_image


def _test_report(s: dict[str, np.ndarray], predicted: np.ndarray, y_test: np.ndarray, tau: float, num_images: int) -> dict[str, Any]:
    """:func:`evaluate`'s ``test`` entry from the test set's :func:`_uncertainty_scores` ``s`` and
    the predicted classes ``(n,)``."""
    wrong = np.flatnonzero(predicted != y_test)
    sure_wrong = wrong[np.argsort(s["expected_error_rate"][wrong], kind="stable")][:num_images]
    least_confident = np.argsort(-s["expected_error_rate"], kind="stable")[:num_images]
    return {
        "n": len(y_test),
        "error": 1.0 - metrics.accuracy(s["mean_probs"], y_test),
        "accuracy": metrics.accuracy(s["mean_probs"], y_test),
        "nll": metrics.nll(s["mean_probs"], y_test),
        "brier": metrics.brier(s["mean_probs"], y_test),
        "ece": metrics.ece(s["mean_probs"], y_test),
        "rejected": metrics.rejection_rate(s["mean_probs"], tau),
        "mean_entropy": float(s["entropy"].mean()),
        "mean_mutual_information": float(s["mutual_information"].mean()),
        "mean_expected_error_rate": float(s["expected_error_rate"].mean()),
        "mean_variance": float(s["variance"].mean()),
        "sure_but_wrong": [
            {
                "index": int(i),
                "label": int(y_test[i]),
                "predicted": int(predicted[i]),
                "expected_error_rate": float(s["expected_error_rate"][i]),
            }
            for i in sure_wrong
        ],
        "lowest_confidence": [
            {
                "index": int(i),
                "label": int(y_test[i]),
                "predicted": int(predicted[i]),
                "expected_error_rate": float(s["expected_error_rate"][i]),
            }
            for i in least_confident
        ],
    }


def _ood_report(
    posterior: Posterior, ood: dict[str, np.ndarray], s: dict[str, np.ndarray], draws: int, seed: int, batch_size: int | None, tau: float
) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """:func:`evaluate`'s ``ood`` entry (per set: size, rejected share, mean entropy and mutual
    information, their AUROC against the test set's scores ``s``) and each set's scores."""
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
    return ood_report, ood_scores


def _figures(x_test, y_test, s, ood_scores, tau, test) -> dict[str, Any]:
    """The evaluation figures by file name."""
    # bnnpp.plots imports matplotlib (a heavy import): loaded on first use, not at command start-up
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
                name: {
                    "entropy": so["entropy"],
                    "mutual information": so["mutual_information"],
                    "max probability": so["mean_probs"].max(-1),
                }
                for name, so in ood_scores.items()
            },
            tau=tau,
        )
    return figs


def write_report(
    out_dir: str | os.PathLike,
    report: EvaluationReport | dict,
    figures: dict,
    per_image: dict | None = None,
    *,
    name: str = "evaluation",
    markdown=reports.evaluation_markdown,
) -> list[str]:
    """Write ``<name>.json`` (``report``'s JSON, its ``figures`` set to the names written),
    ``<name>.md`` (``markdown(report)``), the figures (PNG) and
    ``<name>.npz`` (the per-image arrays) into ``out_dir``: everything goes to a temporary
    folder first and is then moved into place, so a failure leaves no partial output.

    Returns:
        The file names written.
    """
    out_dir = os.fspath(out_dir)
    if not os.path.isdir(out_dir):
        raise ValueError(f"{out_dir} is not a folder")
    if isinstance(report, EvaluationReport):
        report = dataclasses.replace(report, figures=sorted(figures))
        payload = report.to_json()
    else:
        report = payload = dict(report, figures=sorted(figures))
    names = [*figures, *([f"{name}.npz"] if per_image is not None else []), f"{name}.json", f"{name}.md"]
    with files.publish_folder(out_dir, prefix=f".{name}-") as tmp:
        for fname, fig in figures.items():
            fig.savefig(os.path.join(tmp, fname), dpi=110)
        if per_image is not None:
            np.savez_compressed(os.path.join(tmp, f"{name}.npz"), **per_image)
        with open(os.path.join(tmp, f"{name}.json"), "w") as f:
            json.dump(payload, f, indent=2)
        with open(os.path.join(tmp, f"{name}.md"), "w") as f:
            f.write(markdown(report))
    return names
