"""Evaluating a fit run: an image run's test error, calibration and OOD detection
(:func:`evaluate_run`), a table run's scores and figures (:func:`evaluate_table_run`)."""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Sequence

import numpy as np

from bnnpp import data, evaluation, reports
from bnnpp.data import IMAGE_SETS
from bnnpp.evaluation.shift import affine_map
from bnnpp.inference import Prediction, load
from bnnpp.runs.fit_run import block_rows, class_names, figure_rows, original_test_features, regression_test_checks
from bnnpp.runs.reading import check_run_dir, dataset_from_record, fashion_like, open_run

#: Out-of-distribution sets :func:`evaluate_run` knows.
OOD_SETS = ("noise", "fashion_mnist")


def evaluate_run(
    run_dir: str | os.PathLike,
    *,
    data_dir: str | os.PathLike | None = None,
    num_samples: int = 100,
    tau: float = 0.2,
    ood: Sequence[str] = OOD_SETS,
    seed: int = 0,
    batch_size: int | None = None,
    shift: int = 1000,
) -> dict:
    """Evaluate an image run of ``bnnpp fit`` and write ``evaluation.json``, ``evaluation.md``,
    ``evaluation.npz`` (per-image mean probabilities, variance, expected error rate, entropy,
    mutual information, labels) and the figures into it (see
    :func:`bnnpp.evaluation.write_report`).

    Args:
        run_dir: the run folder.
        data_dir: where the IDX files are (default: the folder recorded in ``metrics.json``).
        num_samples: posterior draws per prediction (≥ 10 recommended; at most the draws kept).
        tau: reject an input when its largest predictive class probability is below τ.
        ood: any of ``"noise"`` (uniform noise over the inputs' value range, as many images as
            the test set, seed ``seed``) and ``"fashion_mnist"`` (its 10,000 test images,
            normalised as the run's data; skipped for a Fashion-MNIST run or when not found).
        seed, batch_size: see :func:`bnnpp.evaluation.evaluate`.
        shift: score the first ``shift`` test images rotated and corrupted
            (:mod:`bnnpp.evaluation.shift`: a table in the report and ``shift.png``); 0: skip.

    Returns:
        The report written to ``evaluation.json`` (the dict of an
        :class:`~bnnpp.records.EvaluationReport`: :func:`bnnpp.evaluation.evaluate`'s, with
        ``run_dir``, ``data``, ``method``, ``skipped`` and ``seconds["load"]``).
    """
    evaluation.check_tau(tau)
    evaluation.check_count(num_samples, "num_samples")
    if batch_size is not None:
        evaluation.check_count(batch_size, "batch_size")
    ood = tuple(ood)
    unknown = [o for o in ood if o not in OOD_SETS]
    if unknown:
        raise ValueError(f"unknown OOD set(s) {', '.join(unknown)}; choose from {', '.join(OOD_SETS)}")
    if isinstance(shift, bool) or not isinstance(shift, (int, np.integer)) or shift < 0:
        raise ValueError(f"shift must be a number of test images >= 0 (0: no shift table), got {shift!r}")
    check_run_dir(run_dir)
    t0 = time.perf_counter()
    posterior, report, dataset = open_run(run_dir, data_dir)
    ood_sets, skipped = {}, []
    for name in ood:
        if name == "noise":
            ood_sets["noise"] = evaluation.uniform_noise(dataset.x_test, seed=seed)
        elif dataset.name == "fashion_mnist":
            skipped.append("fashion_mnist: it is the run's own data")
        else:
            try:
                ood_sets["fashion_mnist"] = fashion_like(report, dataset)
            except ValueError as e:
                skipped.append(f"fashion_mnist: not found ({e})")
    load_s = time.perf_counter() - t0
    result, figs, per_image = evaluation.evaluation_report(
        posterior, dataset.x_test, dataset.y_test, ood=ood_sets, num_samples=num_samples, tau=tau, seed=seed, batch_size=batch_size
    )
    result = dataclasses.replace(
        result, run_dir=os.fspath(run_dir), data=dataset.name, method=posterior.info.get("method"), skipped=skipped
    )
    if shift:
        t1 = time.perf_counter()
        rows = _shift_rows(posterior, report, dataset, data_dir, min(int(shift), len(dataset.y_test)), num_samples, seed, batch_size)
        result = dataclasses.replace(result, shift={"n": min(int(shift), len(dataset.y_test)), "rows": rows})
        result.seconds["shift"] = time.perf_counter() - t1
        from bnnpp import plots  # matplotlib loads when a run is evaluated

        figs["shift.png"] = plots.shift_figure(rows, title=f"{dataset.name} / {posterior.info.get('method')} under dataset shift")
    result = dataclasses.replace(result, figures=sorted(figs))
    result.seconds["load"] = load_s
    evaluation.write_report(run_dir, result, figs, per_image)
    return result.to_json()


def _shift_rows(
    posterior, report: dict, dataset: data.Dataset, data_dir, n: int, num_samples: int, seed: int, batch_size: int | None
) -> list[dict]:
    """:func:`bnnpp.evaluation.shift.shift_report` of the first ``n`` test images: their pixels in
    [0, 1] are read again (``normalize="255"``) and mapped back to the run's inputs by the affine
    map between the two (:func:`~bnnpp.evaluation.shift.affine_map`)."""
    where = data_dir if data_dir is not None else report.get("data_dir")
    pixels = data.load(dataset.name, where, normalize="255", validation=report.get("validation", 10000), flatten=False).x_test[:n]
    pixels = pixels.reshape(n, pixels.shape[1], pixels.shape[2])
    a, b = affine_map(dataset.x_test[:n], pixels)
    shape = dataset.x_test.shape[1:]
    return evaluation.shift_report(
        posterior,
        pixels,
        dataset.y_test[:n],
        to_inputs=lambda p: (a * p + b).reshape(len(p), *shape),
        num_samples=num_samples,
        seed=seed,
        batch_size=batch_size,
    )


def evaluate_table_run(
    run_dir: str | os.PathLike,
    *,
    data_file: str | os.PathLike | None = None,
    target: str | None = None,
    num_samples: int | None = None,
    seed: int = 0,
) -> dict:
    """Evaluate a ``bnnpp fit`` run of a table (a built-in 1-D/2-D set or a user's file) on its
    own test split or on new labelled rows, and write ``evaluation.json``, ``evaluation.md``
    and the figures into the run folder: classification ``reliability.png`` (and
    ``decision_map.png`` for 2-D inputs, every class with its name); regression
    ``regression.png`` (:func:`bnnpp.plots.regression_diagnostics`: predicted vs observed with
    90% central intervals, calibration curve, residuals against the features).

    Args:
        run_dir: the run folder.
        data_file: labelled rows (a CSV naming the features and the target, or an ``.npz``
            with ``x`` and ``y``; :func:`bnnpp.tables.read_labelled`); default: the run's test split.
        target: the CSV's target column (default: the run's).
        num_samples: posterior draws per prediction (default: all the run kept).
        seed: key of any randomness in the model while predicting.

    Returns:
        The report written to ``evaluation.json``: ``run_dir``, ``data``, ``method``, ``task``,
        ``num_samples``, ``test`` (``n`` and :meth:`~bnnpp.posterior.Prediction.scores`;
        regression in the targets' original units), ``figures`` and ``seconds``.
    """
    from bnnpp import tables

    if num_samples is not None:
        evaluation.check_count(num_samples, "num_samples")
    run_dir, report = check_run_dir(run_dir, images=False)
    if report.get("data") in IMAGE_SETS:
        raise ValueError(f"{run_dir} is an image run: evaluate it without --data (test error, calibration and OOD detection)")
    if target is not None and data_file is None:
        raise ValueError("--target names the target column of --data FILE: give the file too")
    t0 = time.perf_counter()
    posterior = load(os.path.join(run_dir, "posterior.nc"))
    if data_file is None:
        dataset = dataset_from_record(report)
        name = "test split"
    else:
        transform = tables.run_transform(report, posterior)
        x, y = tables.read_labelled(data_file, transform, target)
        classes = None if transform.task == "regression" else int(posterior.predict(x[:1], num_samples=1).probs.shape[-1])
        if classes is not None and y.size and int(y.max()) >= classes:
            raise ValueError(f"{data_file}: class index {int(y.max())} but the run predicts {classes} classes")
        dataset = data.Dataset(
            x,
            y,
            x,
            y,
            transform.task,
            classes,
            os.path.basename(os.fspath(data_file)),
            y_shift=transform.y_shift,
            y_scale=transform.y_scale,
            transform=transform,
        )
        name = os.path.abspath(os.fspath(data_file))
    draws = (
        posterior.num_chains * posterior.num_draws if num_samples is None else min(num_samples, posterior.num_chains * posterior.num_draws)
    )
    predict = functools.partial(posterior.predict, num_samples=draws, seed=seed)
    title = f"{dataset.name}: {posterior.info.get('method')}"
    score = _classification_scores if dataset.task == "classification" else _regression_scores
    scores, selective, figs = score(posterior, dataset, predict, draws, seed, title)
    result = {
        "run_dir": run_dir,
        "data": name,
        "method": posterior.info.get("method"),
        "task": dataset.task,
        "num_samples": draws,
        "test": {"n": int(len(dataset.y_test)), **scores},
        "selective": selective,
        "seconds": {"evaluate": time.perf_counter() - t0},
    }
    evaluation.write_report(run_dir, result, figs, None, markdown=reports.table_evaluation_markdown)
    result["figures"] = sorted(figs)
    return result


def _classification_scores(posterior, dataset: data.Dataset, predict, draws: int, seed: int, title: str):
    """``(scores, selective, figures)`` of a classifier on ``dataset``'s test rows: the
    :meth:`~bnnpp.posterior.Prediction.scores`, the selective-prediction table and the figures
    by file name (``reliability.png``, ``selective.png``, ``decision_map.png`` for 2-D inputs)."""
    from bnnpp import plots  # matplotlib (a heavy import) loads when a run is evaluated

    x2d = dataset.x_test.ndim == 2
    probs = evaluation.predict_probs(
        posterior, dataset.x_test, num_samples=draws, seed=seed, batch_size=block_rows(posterior, dataset.x_test)
    )
    pred = Prediction("classification", probs=probs)
    scores = pred.scores(dataset.y_test)
    errors = (pred.mean.argmax(-1) != dataset.y_test).astype(np.float64)
    measures = {"entropy": pred.entropy, "mutual_information": pred.mutual_information, "1 - max probability": 1.0 - pred.mean.max(-1)}
    selective = evaluation.selective_prediction(errors, measures)
    figs = {
        "reliability.png": plots.reliability_diagram({posterior.info.get("method", "fit"): (probs.mean(0), dataset.y_test)}, title=title),
        "selective.png": plots.selective_figure(evaluation.selective_curves(errors, measures), "accuracy", title=title),
    }
    if x2d and dataset.x_test.shape[1] == 2:
        figs["decision_map.png"] = plots.decision_map(
            predict, dataset.x_test, dataset.y_test, title=title, class_names=class_names(dataset)
        )
    return scores, selective, figs


def _regression_scores(posterior, dataset: data.Dataset, predict, draws: int, seed: int, title: str):
    """``(scores, selective, figures)`` of a regression on ``dataset``'s test rows in the targets'
    original units: the scores, the selective-prediction table (``None`` for several targets)
    and the figures by file name (``selective.png``, ``regression.png``)."""
    from bnnpp import plots  # matplotlib (a heavy import) loads when a run is evaluated

    standardised = predict(dataset.x_test)
    prediction = evaluation.in_original_units(standardised, float(dataset.y_shift), float(dataset.y_scale))
    y = np.asarray(dataset.y_test, np.float64) * dataset.y_scale + dataset.y_shift
    scores = prediction.scores(y)
    figs = {}
    selective = None
    if np.ndim(y) == 1:
        squared = (prediction.mean - y) ** 2
        measures = {"predictive sd": prediction.std, "epistemic sd": prediction.epistemic_std}
        selective = evaluation.selective_prediction(squared, measures, score="rmse")
        figs["selective.png"] = plots.selective_figure(evaluation.selective_curves(squared, measures, score="rmse"), "rmse", title=title)
    if np.ndim(y) == 1:
        shown = figure_rows(dataset)
        check = regression_test_checks(standardised if shown is dataset else predict(shown.x_test), shown)
        x_raw, names = original_test_features(shown)
        y_shown = np.asarray(shown.y_test, np.float64) * shown.y_scale + shown.y_shift
        figs["regression.png"] = plots.regression_diagnostics(check, y_shown, x_raw, names, title=title)
    return scores, selective, figs
