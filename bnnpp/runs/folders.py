"""The folders of ``bnnpp compare`` and ``bnnpp sweep``."""

from __future__ import annotations

import json
import os
import time

import numpy as np

from bnnpp import data, files, reports
from bnnpp.records import CompareResult
from bnnpp.runs.fit_run import class_names, figure_rows, original_test_features, regression_test_checks


def write_compare_figures(folder: str | os.PathLike, posteriors: dict, dataset: data.Dataset, results: dict | None = None) -> list[str]:
    """Save the comparison figures of ``bnnpp compare`` into ``folder``: ``decision_maps.png``
    (2-D inputs; every class with its name) and ``reliability.png`` (classification), or for
    regression ``bands.png`` (1-D inputs: mean, epistemic and total bands), and
    ``predicted_vs_observed.png``, ``calibration.png`` and ``residuals.png`` (test rows, original
    units; :mod:`bnnpp.plots`), ``forest_scales.png`` (posteriors with
    layer scales), ``trace_<method>.png`` (those with several chains) and ``reference.png``
    (when ``results`` hold a reference posterior's agreement numbers).

    Returns:
        The file names written.
    """
    # ArviZ and matplotlib (heavy imports) load on first use, not at command start-up
    from bnnpp import diagnostics, plots

    figs: dict = {}
    if dataset.task == "regression":
        predictions = {m: p.predict(dataset.x_test) for m, p in posteriors.items()}
        if dataset.x_train.shape[1:] == (1,):
            figs["bands.png"] = plots.regression_bands_grid(predictions, dataset.x_test, dataset.x_train, dataset.y_train)
        if np.ndim(dataset.y_test) == 1:
            shown = figure_rows(dataset)
            if shown is not dataset:
                dataset, predictions = shown, {m: p.predict(shown.x_test) for m, p in posteriors.items()}
            checks = {m: regression_test_checks(pred, dataset) for m, pred in predictions.items()}
            y = np.asarray(dataset.y_test, np.float64) * dataset.y_scale + dataset.y_shift
            x_raw, names = original_test_features(dataset)
            figs["predicted_vs_observed.png"] = plots.predicted_vs_observed(checks, y)
            figs["calibration.png"] = plots.calibration_curve(checks)
            figs["residuals.png"] = plots.residuals_by_feature(checks, x_raw, names)
    else:
        if dataset.x_train.ndim == 2 and dataset.x_train.shape[1] == 2:
            figs["decision_maps.png"] = plots.decision_maps(
                {m: p.predict for m, p in posteriors.items()}, dataset.x_train, dataset.y_train, class_names=class_names(dataset)
            )
        figs["reliability.png"] = plots.reliability_diagram(
            {m: (p.predict(dataset.x_test).mean, dataset.y_test) for m, p in posteriors.items()}
        )
    if results is not None and results.get("reference"):  # a CompareResult or its dict
        figs["reference.png"] = plots.reference_agreement(results)
    with_scales = {m: p for m, p in posteriors.items() if diagnostics.scale_sites(p)}
    if with_scales:
        figs["forest_scales.png"] = diagnostics.forest_plot(with_scales)
    for m, p in with_scales.items():
        if p.num_chains > 1:  # MCMC: one trace per chain
            figs[f"trace_{m}.png"] = diagnostics.trace_plot(p, title=f"{m}: layer scales")
    for name, fig in figs.items():
        fig.savefig(os.path.join(os.fspath(folder), name), dpi=100)
    return list(figs)


def write_compare_run(
    out_dir: str | os.PathLike,
    results: CompareResult | dict,
    posteriors: dict,
    dataset: data.Dataset,
    *,
    started: float | None = None,
) -> CompareResult | dict:
    """Write ``bnnpp compare``'s folder: the :func:`write_compare_figures`, ``compare.json``
    (``results``) and ``compare.md`` (:func:`bnnpp.reports.compare_markdown`).

    Args:
        out_dir: the output folder (created; files of the same names are replaced).
        results: :func:`bnnpp.compare.compare_methods`'s results (a ``compare.json`` dict is
            read into a :class:`~bnnpp.records.CompareResult`).
        posteriors: method → :class:`~bnnpp.Posterior`.
        dataset: the data they were fitted to.
        started: ``time.perf_counter()`` when the command started: ``seconds_total`` counts
            from it to when the figures are done (default: from this call).

    Returns:
        ``results`` (a record or a dict, as given), updated in place with ``figures`` (names)
        and ``seconds_total``.
    """
    given = results
    if not isinstance(results, CompareResult):
        results = CompareResult.from_json(results)
    started = time.perf_counter() if started is None else started
    with files.publish_folder(out_dir) as tmp:
        results.figures = write_compare_figures(tmp, posteriors, dataset, results)
        results.seconds_total = time.perf_counter() - started
        with open(os.path.join(tmp, "compare.json"), "w") as f:
            json.dump(results.to_json(), f, indent=2, default=str)
        with open(os.path.join(tmp, "compare.md"), "w") as f:
            f.write(reports.compare_markdown(results))
    if isinstance(given, dict):
        given.update(results.to_json())
        return given
    return results


def write_sweep_run(out_dir: str | os.PathLike, meta: dict, table: list[dict], fits: list[dict]) -> None:
    """Write ``bnnpp sweep``'s folder: ``sweep.json`` (``{"meta", "table", "runs": fits}``)
    and ``sweep.md`` (:func:`bnnpp.reports.sweep_markdown`) into ``out_dir`` (created; files
    of the same names are replaced). Returns None."""
    with files.publish_folder(out_dir) as tmp:
        with open(os.path.join(tmp, "sweep.json"), "w") as f:
            json.dump({"meta": meta, "table": table, "runs": fits}, f, indent=2)
        with open(os.path.join(tmp, "sweep.md"), "w") as f:
            f.write(reports.sweep_markdown(table, meta))
