"""Writing a fit run (``bnnpp fit --out DIR``): its test metrics, its figure, its
``metrics.json`` dict (:func:`fit_report`) and the folder itself (:func:`write_fit_run`)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import os
import threading
import time

import numpy as np

from bnnpp import data, evaluation, files, metrics
from bnnpp.inference import Prediction
from bnnpp.records import ABSENT, FitReport


def block_rows(posterior, x: np.ndarray, max_values: int = 1 << 22) -> int:
    """Rows of ``x`` to predict per call so that draws × rows × input values stays under
    ``max_values`` (4M floats: bounded memory also for 100 draws of a convolutional net)."""
    per_row = posterior.num_chains * posterior.num_draws * int(np.prod(np.shape(x)[1:]))
    return max(1, min(len(x), max_values // max(per_row, 1)))


def metrics_on_test_set(posterior, dataset: data.Dataset) -> dict:
    """Test-set metrics of a posterior from every posterior draw: accuracy, NLL, Brier, ECE, ...
    for a classifier (:meth:`Prediction.scores`; predicted in blocks of :func:`block_rows`
    rows), RMSE, NLL, 95% coverage and mean epistemic/aleatoric sd for regression (in the
    targets' original units when the dataset standardised them: ``y_scale``); both with
    ``num_draws``. (``bnnpp fit``'s ``test`` entry of ``metrics.json``.)"""
    y = dataset.y_test
    if dataset.task == "classification":
        probs = evaluation.predict_probs(posterior, dataset.x_test, batch_size=block_rows(posterior, dataset.x_test))
        pred = Prediction("classification", probs=probs)
        return {**pred.scores(y), "num_draws": int(probs.shape[0])}
    pred = posterior.predict(dataset.x_test)
    s = float(dataset.y_scale)  # standardised targets: RMSE, sds and NLL in the original units
    return {
        "rmse": metrics.rmse(pred.mean, y) * s,
        "nll": metrics.gaussian_nll(pred.draws, pred.noise, y) + float(np.log(s)),
        "coverage_95": metrics.interval_coverage(pred.mean, pred.std, y),
        "mean_epistemic_std": float(pred.epistemic_std.mean()) * s,
        "mean_aleatoric_std": float(pred.aleatoric_std.mean()) * s,
        "num_draws": int(pred.draws.shape[0]),
    }


LOSS_TERMS = (("loss", "loss (minibatch objective)"), ("nll", "data term (NLL, rescaled)"), ("kl", "KL"))
"""The per-step traces :func:`loss_figure` draws, each on its own axes, with their labels."""


def loss_figure(posterior, title: str = ""):
    """The training loss per step (``info["loss"]``; for bbb also the data term and the KL),
    one axes per term stacked over a shared step axis, each on its own y scale (symlog when
    the term spans more than two decades, so early steps do not flatten the end), and the
    validation error after each scored chunk when the fit had validation data, as a
    matplotlib Figure; ``None`` when the method keeps no loss trace (nuts, sgld)."""
    # matplotlib (a heavy import) loads on first use, not when the `bnnpp` command starts
    from matplotlib.figure import Figure

    info = posterior.info
    if "loss" not in info or len(np.asarray(info["loss"])) == 0:
        return None
    terms = [(key, label, np.asarray(info[key], np.float64)) for key, label in LOSS_TERMS if key in info and np.size(info[key])]
    val = info.get("val_error")
    fig = Figure(figsize=(7, 1.2 + 2.0 * (len(terms) + (val is not None))), layout="constrained")
    axes = fig.subplots(len(terms) + (val is not None), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (_, label, trace) in zip(axes, terms, strict=False):
        ax.plot(np.arange(1, len(trace) + 1), trace, lw=0.8)
        ax.set_ylabel(label)
        finite = np.abs(trace[np.isfinite(trace)])
        if finite.size and finite.max() > 100 * max(np.median(finite), 1e-12):
            ax.set_yscale("symlog", linthresh=max(float(np.median(finite)), 1e-6))
        ax.grid(alpha=0.3)
    if val is not None:  # the error at the point estimate (e.g. bbb's means) on the validation rows
        ax = axes[-1]
        ax.plot(np.asarray(info.get("val_step", np.arange(1, len(val) + 1))), np.asarray(val, np.float64), marker=".", lw=0.8)
        ax.set_ylabel("validation error")
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("step")
    fig.suptitle(title or info.get("method", ""))
    return fig


FIGURE_DRAWS = 200
"""Posterior draws a run's figure uses (evenly spaced over all draws): the decision map's
mean and sd over 200 draws differ from those over 1000 by a Monte-Carlo error of about
sd/√200 < 0.04 in probability, invisible in the picture, and the grid's prediction is 5x
cheaper."""


def class_names(dataset: data.Dataset) -> tuple | None:
    """The labels of a classification dataset's class indices (a user's file records them),
    else ``None`` (``class 0``, ``class 1``, ... in figures)."""
    return None if dataset.transform is None or dataset.transform.classes is None else dataset.transform.classes


def original_test_features(dataset: data.Dataset) -> tuple[np.ndarray, tuple[str, ...]]:
    """The test rows' features in the file's units ``(n_test, F)`` (standardisation undone for
    a user's file; built-in sets as they are) and the feature names (``x0, x1, ...`` without)."""
    x = np.asarray(dataset.x_test, np.float64).reshape(len(dataset.x_test), -1)
    t = dataset.transform
    if t is None or t.x_mean.shape != x.shape[1:]:
        return x, tuple(f"x{i}" for i in range(x.shape[1]))
    return x * t.x_sd + t.x_mean, t.features


FIGURE_ROWS = 2000
"""Test rows the regression figures draw at most (evenly spaced through the split): more points
than this are a blot, and the interval bisection costs draws × rows."""


def figure_rows(dataset: data.Dataset, max_rows: int = FIGURE_ROWS) -> data.Dataset:
    """``dataset`` with at most ``max_rows`` test rows, evenly spaced, for a figure (the same
    dataset when it has no more)."""
    n = len(dataset.x_test)
    if n <= max_rows:
        return dataset
    keep = np.linspace(0, n - 1, max_rows).round().astype(int)
    return dataclasses.replace(dataset, x_test=dataset.x_test[keep], y_test=dataset.y_test[keep])


def regression_test_checks(prediction: Prediction, dataset: data.Dataset) -> dict:
    """:func:`bnnpp.evaluation.regression_checks` of a prediction at ``dataset.x_test``, in the
    targets' original units (``y_shift``/``y_scale``)."""
    shift, scale = float(dataset.y_shift), float(dataset.y_scale)
    original = evaluation.in_original_units(prediction, shift, scale)
    return evaluation.regression_checks(original, np.asarray(dataset.y_test, np.float64) * scale + shift)


def figure(posterior, dataset: data.Dataset):
    """The figure of a fit run and its file name, as ``uncertainty.png``: the decision map
    (2-D classification; every class with its name), the regression bands (1-D regression)
    or, for a regression with several features, predicted vs observed with intervals, the
    calibration curve and the residuals against the features (on the test rows,
    :func:`bnnpp.plots.regression_diagnostics`); otherwise (images, a table of other than 2
    features to classify) the loss curve as ``loss.png`` (or ``(None, None)`` when the method
    keeps no loss trace).

    Returns:
        ``(figure, file_name)``.
    """
    # bnnpp.plots imports matplotlib (a heavy import): loaded on first use, not at command start-up
    from bnnpp import plots

    title = f"{dataset.name}: {posterior.info['method']}"
    tabular = dataset.x_train.ndim == 2
    predict = functools.partial(posterior.predict, num_samples=min(FIGURE_DRAWS, posterior.num_chains * posterior.num_draws))
    if tabular and dataset.task == "regression" and dataset.x_train.shape[1] != 1 and np.ndim(dataset.y_test) == 1:
        dataset = figure_rows(dataset)
        x_raw, names = original_test_features(dataset)
        check = regression_test_checks(predict(dataset.x_test), dataset)
        y = np.asarray(dataset.y_test, np.float64) * dataset.y_scale + dataset.y_shift
        return plots.regression_diagnostics(check, y, x_raw, names, title=title), "uncertainty.png"
    if not tabular or dataset.x_train.shape[1] != (2 if dataset.task == "classification" else 1):
        return loss_figure(posterior, title), "loss.png"
    if dataset.task == "classification":
        return plots.decision_map(
            predict, dataset.x_train, dataset.y_train, title=title, class_names=class_names(dataset)
        ), "uncertainty.png"
    grid = np.sort(dataset.x_test, axis=0)
    return plots.regression_bands(predict(grid), grid, dataset.x_train, dataset.y_train, title=title), "uncertainty.png"


def _last(trace) -> float | None:
    """The final entry of a per-chunk trace such as ``info["val_error"]``, or None if empty."""
    trace = np.asarray(trace, dtype=float).reshape(-1)
    return float(trace[-1]) if trace.size else None


def training_curves(posterior) -> dict | None:
    """A minibatch fit's training curves per epoch, for ``metrics.json``: ``epoch`` (1, 2, …),
    the epoch's mean of each loss term the method traces (``loss``; bbb's ``nll`` and ``kl``), and
    with validation data ``val_step`` / ``val_error`` (the error at the point estimate after each
    scored chunk — every epoch unless ``chunk_size`` was set). Lists of floats; ``None`` for a
    full-batch fit or a method without a loss trace."""
    info = posterior.info
    batches = int(info.get("num_batches") or 1)
    loss = np.asarray(info.get("loss", []), np.float64)
    if batches <= 1 or loss.ndim != 1 or loss.size < batches:
        return None
    epochs = loss.size // batches
    out: dict = {"epoch": list(range(1, epochs + 1))}
    for key, _ in LOSS_TERMS:
        trace = np.asarray(info.get(key, []), np.float64)
        if trace.ndim == 1 and trace.size >= epochs * batches:
            out[key] = [float(v) for v in trace[: epochs * batches].reshape(epochs, batches).mean(axis=1)]
    if info.get("val_error") is not None:
        out["val_step"] = [int(s) for s in info.get("val_step", [])]
        out["val_error"] = [float(e) for e in info["val_error"]]
    return out


def fit_report(posterior, model, record: dict, *, seed: int, test: dict, seconds: dict) -> dict:
    """The ``metrics.json`` dict of a fit run: :func:`fit_record`'s
    :meth:`~bnnpp.records.FitReport.to_json` (same arguments)."""
    return fit_record(posterior, model, record, seed=seed, test=test, seconds=seconds).to_json()


def fit_record(posterior, model, record: dict, *, seed: int, test: dict, seconds: dict) -> FitReport:
    """The ``metrics.json`` record of a fit run (its :meth:`~bnnpp.records.FitReport.to_json` is
    the dict written).

    Args:
        posterior: the fitted posterior.
        model: its model (a :mod:`bnnpp.models` network: the spec of the model the posterior
            holds, with the data transform the fit bound to it, is recorded, else ``model.spec()``).
        record: the data record (see :func:`dataset_from_record`).
        seed: the fit's seed.
        test: :func:`metrics_on_test_set`'s dict.
        seconds: timings by name, in the order to record them (``bnnpp fit``: ``import``,
            ``compile``, ``fit``, ``predict``).

    Returns:
        A :class:`~bnnpp.records.FitReport`; its JSON holds the record's keys, then ``method``, ``model``, ``options``, ``seed``, ``steps_run``,
        ``stopped_at``, ``test``, ``fit_info``, ``health`` (the fit's
        :class:`~bnnpp.inference.health.FitHealthWarning` lines, empty when it looks done), ``val_error`` (when the fit tracked it),
        ``curves`` (a minibatch fit: :func:`training_curves`),
        ``collapse_warning`` (when the fit explained its targets as noise: :mod:`bnnpp.inference.collapse`),
        ``overconfidence_warning`` (when a fit on small data fitted its targets' noise: the same module),
        ``suitability_warning`` (when the method said after its fit that it is not suited to the data:
        :data:`~bnnpp.inference.collapse.SUITABILITY_KEY`),
        ``placement`` (a fit on a device mesh: devices, mesh, per-device batch, compile and
        per-step seconds) and ``seconds`` (a copy); :func:`write_fit_run` adds ``files`` and ``seconds["write"]``.
    """
    info = posterior.info
    curves = training_curves(posterior)
    return FitReport(
        record=dict(record),
        method=info["method"],
        model=(posterior.model if hasattr(posterior.model, "spec") else model).spec(),
        options={k: v for k, v in info["options"].items() if k not in ("optimizer", "validation_data")},
        seed=seed,
        steps_run=info.get("steps_run"),
        stopped_at=info.get("stopped_at"),
        test=test,
        fit_info={k: info[k] for k in ("divergences", "num_batches", "learned_prior", "num_parameters", "psis_khat") if k in info},
        health=list(info.get("health", [])),  # the fit's FitHealthWarning lines: not converged, PSIS k̂ > 0.7
        val_error=_last(info.get("val_error")) if info.get("val_error") is not None else ABSENT,
        curves=curves if curves else ABSENT,
        collapse_warning=info["collapse_warning"] if info.get("collapse_warning") else ABSENT,
        overconfidence_warning=info["overconfidence_warning"] if info.get("overconfidence_warning") else ABSENT,
        suitability_warning=info["suitability_warning"] if info.get("suitability_warning") else ABSENT,
        placement=info["placement"] if "placement" in info else ABSENT,  # devices, mesh, per-device batch, step time
        seconds=dict(seconds),
    )


WRITER_MODULES = ("arviz", "xarray", "h5netcdf")
"""The heavy modules writing a run folder imports: :func:`preload_writers` loads them ahead of the write."""


def preload_writers() -> threading.Thread:
    """Import :data:`WRITER_MODULES` in a background thread, so that a command which trains
    first and writes afterwards (``bnnpp fit``) pays for them while the device is busy
    training rather than in its write time. Lazy loading for speed, not to dodge an import
    cycle; the import lock makes a later ``import arviz`` wait for the thread if it is not done.

    Returns:
        The started daemon thread.
    """

    def load():
        for name in WRITER_MODULES:
            importlib.import_module(name)

    thread = threading.Thread(target=load, name="bnnpp-preload-writers", daemon=True)
    thread.start()
    return thread


def write_fit_run(
    out_dir: str | os.PathLike, posterior, dataset: data.Dataset, report: FitReport | dict, texts: dict[str, str] | None = None
) -> FitReport | dict:
    """Write a fit run as the folder ``out_dir``: ``posterior.nc``, ``metrics.json``
    (``report``), the :func:`figure` when there is one, and ``texts`` (file name → contents,
    e.g. ``bnnpp fit``'s ``config.toml``). The folder is written beside the
    target and published whole (:func:`bnnpp.files.publish_run`): the files a previous run
    wrote there are replaced, the user's other files there are kept, and a failure (a full
    disk included, checked first) leaves it as it was. Hold
    :func:`bnnpp.files.run_folder_lock` around the command that calls this.

    Returns:
        ``report`` (a :class:`~bnnpp.records.FitReport` or a ``metrics.json`` dict, as given),
        updated in place with ``files`` (the names written, ``posterior.nc`` first),
        ``seconds["write"]`` (wall) and ``seconds["write_cpu"]`` (CPU time of the process over
        the write, all threads).
    """
    given = report
    if not isinstance(report, FitReport):
        report = FitReport.from_json(report)
    arrays = sum(np.asarray(v).nbytes for v in posterior.samples.values())
    if posterior.include_data(None):
        arrays += 3 * posterior.x.nbytes + 4 * posterior.y.nbytes * posterior.num_chains * posterior.num_draws
    if posterior.approximation is not None:
        arrays += sum(np.asarray(v).nbytes for v in posterior.approximation.to_params().values())
    files.check_free_space(os.path.dirname(os.path.abspath(out_dir)), arrays + 2**20, "the run folder")
    with files.publish_run(out_dir) as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        posterior.save(os.path.join(tmp, "posterior.nc"))
        fig, fig_name = figure(posterior, dataset)
        written = ["posterior.nc", "metrics.json"]
        if fig is not None:
            fig.savefig(os.path.join(tmp, fig_name), dpi=110)
            written.append(fig_name)
        for name, text in (texts or {}).items():
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
            written.append(name)
        report.seconds["write"] = time.perf_counter() - t0
        report.seconds["write_cpu"] = time.process_time() - c0  # all threads: stable on a busy machine
        report.files = written
        with open(os.path.join(tmp, "metrics.json"), "w") as f:
            json.dump(report.to_json(), f, indent=2, default=str)
    if isinstance(given, dict):
        given.update(report.to_json())
        return given
    return report
