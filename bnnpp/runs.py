"""Run folders: writing what the ``bnnpp`` commands produce, and reading a fit run back.

A *fit run* (``bnnpp fit --out DIR``) holds ``posterior.nc`` (the posterior as ArviZ netCDF),
``metrics.json`` (test metrics, timings and the *data record*: how to reload the data, since
``posterior.nc`` does not hold training sets as large as MNIST) and one figure
(``uncertainty.png`` for the built-in 2-D and 1-D sets, ``loss.png`` for images). For image
runs :func:`evaluate_run` and :func:`prune_run` add their reports to the same folder.
:func:`write_compare_run` and :func:`write_sweep_run` write the folders of ``bnnpp compare``
and ``bnnpp sweep``.

Every folder is written through :func:`bnnpp.files.publish_folder`: a failure leaves no
partial output. The Markdown of every report comes from :mod:`bnnpp.reports`.

Why one module of ~560 lines (160 of them docstrings): the four commands' folders share the
checks, the loading and the publishing, and the CLI must find all of it in one library place.
Its sections: reading a fit run, writing one, evaluating and pruning an image run, the
compare and sweep folders, and the deprecated old names.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import os
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bnnpp import data, evaluation, files, metrics, pruning, reports
from bnnpp.data import IMAGE_SETS, SYNTHETIC
from bnnpp.inference import Prediction, load
from bnnpp.inference.vd import VariationalDropout

__all__ = [
    "DEFAULT_FRACTIONS",
    "OOD_SETS",
    "block_rows",
    "calibrate_run",
    "check_run_dir",
    "class_names",
    "dataset_from_record",
    "evaluate_run",
    "evaluate_table_run",
    "figure_rows",
    "fashion_like",
    "figure",
    "fit_report",
    "loss_figure",
    "training_curves",
    "metrics_on_test_set",
    "open_run",
    "prune_run",
    "regression_test_checks",
    "original_test_features",
    "write_compare_figures",
    "write_compare_run",
    "write_fit_run",
    "write_sweep_run",
]

#: Out-of-distribution sets :func:`evaluate_run` knows.
OOD_SETS = ("noise", "fashion_mnist")
#: Shares of weights :func:`prune_run` removes by default (Blundell et al. 2015, Table 2, and 25%).
DEFAULT_FRACTIONS = (0.0, 0.25, 0.5, 0.75, 0.95, 0.98)


# --- reading a fit run --------------------------------------------------------------------


def dataset_from_record(record: dict, shard: tuple[int, int] | None = None) -> data.Dataset:
    """Reload the dataset of a ``bnnpp fit`` run from its data record (the ``metrics.json`` dict).

    Uses the keys ``data`` and, for mnist/fashion_mnist, ``data_dir`` (``None``: the default
    search of :func:`bnnpp.data.load`), ``normalize``, ``validation``, ``flatten`` and
    ``train_subset``; for the generated sets ``data_noise`` and ``seed``; for a user's file
    (``data`` its absolute path) ``sha256``, ``target``, ``task``, ``test_fraction`` and
    ``seed`` — the file is read again (:func:`bnnpp.data.from_file`) and refused when its
    SHA-256 differs, so the run folder stays small whatever the data's size.

    ``shard=(process, processes)``: only that process's block of the training rows (a
    multi-process fit; see :mod:`bnnpp.data`).

    Returns:
        The :class:`bnnpp.data.Dataset` the run trained and was tested on (training split cut
        to ``train_subset`` rows when set). Raises ValueError when the data cannot be found.
    """
    name = record.get("data")
    if name in IMAGE_SETS:
        subset = record.get("train_subset")
        ds = data.load(
            name,
            record.get("data_dir"),
            normalize=record.get("normalize", "255"),
            validation=record.get("validation", 10000),
            flatten=bool(record.get("flatten", False)),
            **({} if shard is None else {"shard": shard, "train_subset": subset}),
        )
        if subset is not None and shard is None:
            if subset > len(ds.x_train):
                raise ValueError(f"--train-subset {subset} exceeds the {len(ds.x_train)} training images; use at most {len(ds.x_train)}")
            ds = dataclasses.replace(ds, x_train=ds.x_train[:subset], y_train=ds.y_train[:subset])
        return ds
    if name in SYNTHETIC:
        noise = record.get("data_noise")
        return data.load_synthetic(name, seed=record.get("seed", 0), shard=shard, **({} if noise is None else {"noise": noise}))
    if "sha256" in record:  # a user's file: read again, and refused if its bytes changed
        path = record["data"]
        if not os.path.isfile(path):
            raise ValueError(f"the run's data file {path} is gone: put it back (the run recorded its SHA-256)")
        if data.file_sha256(path) != record["sha256"]:
            raise ValueError(f"the run's data file {path} changed since the run was fitted (SHA-256 differs): fit again")
        return data.from_file(path, record.get("target"), task=record.get("task"), test_fraction=record.get("test_fraction", 0.2),
                              seed=record.get("seed", 0), shard=shard)
    raise ValueError(f"the report names no known dataset (data={name!r}); known: {', '.join([*SYNTHETIC, *IMAGE_SETS])}")


def check_run_dir(run_dir: str | os.PathLike, *, images: bool = True) -> tuple[str, dict]:
    """Check that ``run_dir`` is a ``bnnpp fit`` run (with ``images``, of an image set),
    reading no posterior and no data (cheap, for up-front checks).

    Returns:
        ``(path, report)``: the folder as a ``str`` and its ``metrics.json`` dict. Raises
        ValueError naming what is missing or wrong.
    """
    run_dir = os.fspath(run_dir)
    if not os.path.isdir(run_dir):
        raise ValueError(f"{run_dir} is not a folder: pass the --out folder of `bnnpp fit`")
    if not os.path.isfile(os.path.join(run_dir, "posterior.nc")):
        raise ValueError(f"{run_dir} holds no posterior.nc: pass a folder written by `bnnpp fit --out DIR`")
    path = os.path.join(run_dir, "metrics.json")
    if not os.path.isfile(path):
        raise ValueError(f"{run_dir} holds no metrics.json, which records the run's data: fit it again with `bnnpp fit`")
    try:
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not valid JSON ({e}): fit the run again") from None
    if not isinstance(report, dict):
        raise ValueError(f"{path} holds a JSON {type(report).__name__}, not the object `bnnpp fit` writes: fit the run again")
    if images and report.get("data") not in IMAGE_SETS:
        raise ValueError(
            f"{run_dir} was fitted to {report.get('data')!r}; this command works on image runs "
            f"({', '.join(IMAGE_SETS)}): fit one with `bnnpp fit --data mnist ...`"
        )
    return run_dir, report


def open_run(run_dir: str | os.PathLike, data_dir: str | os.PathLike | None = None):
    """Load a ``bnnpp fit`` image run.

    Args:
        run_dir: the run folder (``posterior.nc``, ``metrics.json``).
        data_dir: where the IDX files are, overriding the folder recorded in ``metrics.json``.

    Returns:
        ``(posterior, report, dataset)``: the :class:`~bnnpp.Posterior`, the ``metrics.json``
        dict (with ``data_dir`` replaced when given) and the run's :class:`~bnnpp.data.Dataset`.
    """
    run_dir, report = check_run_dir(run_dir)
    if data_dir is not None:
        if not os.path.isdir(data_dir):
            raise ValueError(f"--data-dir {data_dir} is not a folder")
        report = dict(report, data_dir=os.path.abspath(data_dir))
    dataset = dataset_from_record(report)
    posterior = load(os.path.join(run_dir, "posterior.nc"))
    if tuple(posterior.x.shape[1:]) != tuple(dataset.x_test.shape[1:]):
        raise ValueError(
            f"the posterior takes inputs of shape {posterior.x.shape[1:]} but the recorded data has {dataset.x_test.shape[1:]}: "
            "metrics.json does not belong to posterior.nc"
        )
    return posterior, report, dataset


def fashion_like(report: dict, dataset: data.Dataset) -> np.ndarray:
    """The Fashion-MNIST test images, normalised and shaped like the run's MNIST inputs.

    Looked up in a folder named ``fashion_mnist`` inside the run's ``data_dir`` or beside it
    (``shared/data/mnist`` → ``shared/data/fashion_mnist``; never the MNIST folder itself,
    whose files have the same names), else by the default search of
    :func:`bnnpp.data.load`. With ``normalize="standardize"`` the MNIST training mean and sd
    are applied (not Fashion-MNIST's own), so both sets go through the same transformation.

    Returns:
        float32 ``(10000, *dataset.x_test.shape[1:])``.
    """
    d = report.get("data_dir")
    candidates = [os.path.join(p, "fashion_mnist") for p in (d, os.path.dirname(os.path.abspath(d)))] if d else []
    candidates = [c for c in candidates if os.path.isdir(c)] or [None]
    normalize, flatten = report.get("normalize", "255"), bool(report.get("flatten", False))
    errors = []
    for folder in candidates:
        try:
            raw = data.load("fashion_mnist", folder, normalize="255" if normalize == "standardize" else normalize, validation=0, flatten=flatten)
            break
        except ValueError as e:
            errors.append(str(e))
    else:
        raise ValueError("; ".join(errors))
    x = raw.x_test
    if normalize == "standardize":  # the run's own shift and scale, in units of pixel/255
        ref = data.load(report["data"], d, normalize="255", validation=report.get("validation", 10000), flatten=flatten)
        mean, sd = ref.x_train.mean(dtype=np.float64), ref.x_train.std(dtype=np.float64)
        x = ((x - np.float32(mean)) / np.float32(sd)).astype(np.float32)
    if x.shape == dataset.x_test.shape and np.array_equal(x[:10], dataset.x_test[:10]):
        raise ValueError("the Fashion-MNIST files found hold the run's own test images; put the real ones in a fashion_mnist folder")
    return x


# --- writing a fit run --------------------------------------------------------------------


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
    # matplotlib (~0.5 s to import) loads on first use, not when the `bnnpp` command starts
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
cheaper (``benchmarks/quickstart.py`` measures the write time)."""


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
    # bnnpp.plots imports matplotlib (~0.5 s): loaded on first use, not at command start-up
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
        return plots.decision_map(predict, dataset.x_train, dataset.y_train, title=title, class_names=class_names(dataset)), "uncertainty.png"
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
    """The ``metrics.json`` dict of a fit run.

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
        The record's keys, then ``method``, ``model``, ``options``, ``seed``, ``steps_run``,
        ``stopped_at``, ``test``, ``fit_info``, ``health`` (the fit's
        :class:`~bnnpp.inference.health.FitHealthWarning` lines, empty when it looks done), ``val_error`` (when the fit tracked it),
        ``curves`` (a minibatch fit: :func:`training_curves`),
        ``collapse_warning`` (when the fit explained its targets as noise: :mod:`bnnpp.inference.collapse`),
        ``placement`` (a fit on a device mesh: devices, mesh, per-device batch, compile and
        per-step seconds) and ``seconds`` (a copy); :func:`write_fit_run` adds ``files`` and ``seconds["write"]``.
    """
    info = posterior.info
    return {
        **record,
        "method": info["method"],
        "model": (posterior.model if hasattr(posterior.model, "spec") else model).spec(),
        "options": {k: v for k, v in info["options"].items() if k not in ("optimizer", "validation_data")},
        "seed": seed,
        "steps_run": info.get("steps_run"),
        "stopped_at": info.get("stopped_at"),
        "test": test,
        "fit_info": {k: info[k] for k in ("divergences", "num_batches", "learned_prior", "num_parameters", "psis_khat") if k in info},
        "health": list(info.get("health", [])),  # the fit's FitHealthWarning lines: not converged, PSIS k̂ > 0.7
        **({"val_error": _last(info.get("val_error"))} if info.get("val_error") is not None else {}),
        **({"curves": curves} if (curves := training_curves(posterior)) else {}),
        **({"collapse_warning": info["collapse_warning"]} if info.get("collapse_warning") else {}),
        **({"placement": info["placement"]} if "placement" in info else {}),  # devices, mesh, per-device batch, step time
        "seconds": dict(seconds),
    }


WRITER_MODULES = ("arviz", "xarray", "h5netcdf")
"""What writing a run folder imports (about 1 s of CPU): :func:`preload_writers` loads them."""


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


def write_fit_run(out_dir: str | os.PathLike, posterior, dataset: data.Dataset, report: dict,
                  texts: dict[str, str] | None = None) -> dict:
    """Write a fit run as the folder ``out_dir``: ``posterior.nc``, ``metrics.json``
    (``report``), the :func:`figure` when there is one, and ``texts`` (file name → contents,
    e.g. ``bnnpp fit``'s ``config.toml``). The folder is written beside the
    target and published whole (:func:`bnnpp.files.publish_run`): the files a previous run
    wrote there are replaced, the user's other files there are kept, and a failure (a full
    disk included, checked first) leaves it as it was. Hold
    :func:`bnnpp.files.run_folder_lock` around the command that calls this.

    Returns:
        ``report``, updated in place with ``files`` (the names written, ``posterior.nc``
        first), ``seconds["write"]`` (wall) and ``seconds["write_cpu"]`` (CPU time of the
        process over the write, all threads).
    """
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
        report["seconds"]["write"] = time.perf_counter() - t0
        report["seconds"]["write_cpu"] = time.process_time() - c0  # all threads: stable on a busy machine
        report["files"] = written
        with open(os.path.join(tmp, "metrics.json"), "w") as f:
            json.dump(report, f, indent=2, default=str)
    return report


# --- evaluating and pruning an image run --------------------------------------------------


def evaluate_run(
    run_dir: str | os.PathLike,
    *,
    data_dir: str | os.PathLike | None = None,
    num_samples: int = 100,
    tau: float = 0.2,
    ood: Sequence[str] = OOD_SETS,
    seed: int = 0,
    batch_size: int | None = None,
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

    Returns:
        The report written to ``evaluation.json`` (see :func:`bnnpp.evaluation.evaluate`),
        plus ``run_dir``, ``data``, ``method``, ``skipped`` and ``seconds``.
    """
    evaluation.check_tau(tau)
    evaluation.check_count(num_samples, "num_samples")
    if batch_size is not None:
        evaluation.check_count(batch_size, "batch_size")
    ood = tuple(ood)
    unknown = [o for o in ood if o not in OOD_SETS]
    if unknown:
        raise ValueError(f"unknown OOD set(s) {', '.join(unknown)}; choose from {', '.join(OOD_SETS)}")
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
    result, figs, per_image = evaluation.evaluate(
        posterior, dataset.x_test, dataset.y_test, ood=ood_sets, num_samples=num_samples, tau=tau, seed=seed, batch_size=batch_size
    )
    result = {"run_dir": os.fspath(run_dir), "data": dataset.name, "method": posterior.info.get("method"), **result, "skipped": skipped}
    result["seconds"]["load"] = load_s
    evaluation.write_report(run_dir, result, figs, per_image)
    return result


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
    from bnnpp import plots, tables  # matplotlib (~0.5 s) loads when a run is evaluated

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
        dataset = data.Dataset(x, y, x, y, transform.task, classes, os.path.basename(os.fspath(data_file)),
                               y_shift=transform.y_shift, y_scale=transform.y_scale, transform=transform)
        name = os.path.abspath(os.fspath(data_file))
    draws = posterior.num_chains * posterior.num_draws if num_samples is None else min(num_samples, posterior.num_chains * posterior.num_draws)
    predict = functools.partial(posterior.predict, num_samples=draws, seed=seed)
    title = f"{dataset.name}: {posterior.info.get('method')}"
    x2d = dataset.x_test.ndim == 2
    if dataset.task == "classification":
        probs = evaluation.predict_probs(posterior, dataset.x_test, num_samples=draws, seed=seed,
                                         batch_size=block_rows(posterior, dataset.x_test))
        pred = Prediction("classification", probs=probs)
        scores = pred.scores(dataset.y_test)
        errors = (pred.mean.argmax(-1) != dataset.y_test).astype(np.float64)
        measures = {"entropy": pred.entropy, "mutual_information": pred.mutual_information, "1 - max probability": 1.0 - pred.mean.max(-1)}
        selective = evaluation.selective_prediction(errors, measures)
        figs = {"reliability.png": plots.reliability_diagram({posterior.info.get("method", "fit"): (probs.mean(0), dataset.y_test)}, title=title),
                "selective.png": plots.selective_figure(evaluation.selective_curves(errors, measures), "accuracy", title=title)}
        if x2d and dataset.x_test.shape[1] == 2:
            figs["decision_map.png"] = plots.decision_map(predict, dataset.x_test, dataset.y_test, title=title,
                                                          class_names=class_names(dataset))
    else:
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
    result = {
        "run_dir": run_dir, "data": name, "method": posterior.info.get("method"), "task": dataset.task, "num_samples": draws,
        "test": {"n": int(len(dataset.y_test)), **scores}, "selective": selective, "seconds": {"evaluate": time.perf_counter() - t0},
    }
    evaluation.write_report(run_dir, result, figs, None, markdown=reports.table_evaluation_markdown)
    result["figures"] = sorted(figs)
    return result


def calibrate_run(
    run_dir: str | os.PathLike,
    data_file: str | os.PathLike,
    *,
    target: str | None = None,
    alpha: float | None = 0.1,
    score: str | None = None,
    temperature_scaling: bool | None = None,
    randomized: bool = False,
    raps_lambda: float = 0.01,
    raps_k: int = 1,
    num_samples: int | None = None,
    seed: int = 0,
) -> dict:
    """Calibrate a ``bnnpp fit`` run of a table on held-out labelled rows
    (:meth:`bnnpp.Posterior.calibrate`) and write the calibrated posterior back to the run's
    ``posterior.nc`` (atomically; ``bnnpp predict`` then adds the conformal columns) and the
    calibration to ``metrics.json``'s ``calibration`` entry. A second call replaces the first.

    Args:
        run_dir: the run folder.
        data_file: labelled rows not used for fitting (:func:`bnnpp.tables.read_labelled`: a
            CSV naming the features and the target, or an ``.npz`` with ``x`` and ``y``).
        target: the CSV's target column (default: the run's).
        alpha, score, temperature_scaling, randomized, raps_lambda, raps_k: see
            :func:`bnnpp.calibrate.fit`.
        num_samples, seed: the draws and seed of the calibration prediction.

    Returns:
        ``{"run_dir", "data", "n", "calibration"}`` (the :class:`~bnnpp.calibrate.Calibration`
        as a dict), also written to ``metrics.json``.
    """
    from bnnpp import tables

    if num_samples is not None:
        evaluation.check_count(num_samples, "num_samples")
    run_dir, report = check_run_dir(run_dir, images=False)
    if report.get("data") in IMAGE_SETS:
        raise ValueError(f"{run_dir} is an image run: calibrate it in Python (posterior.calibrate(x_cal, y_cal)); "
                         "the command calibrates table runs")
    posterior = load(os.path.join(run_dir, "posterior.nc"))
    transform = tables.run_transform(report, posterior)
    x, y = tables.read_labelled(data_file, transform, target)
    calibrated = posterior.calibrate(x, y, alpha, score=score, temperature_scaling=temperature_scaling, randomized=randomized,
                                     raps_lambda=raps_lambda, raps_k=raps_k, num_samples=num_samples, seed=seed)
    result = {"run_dir": run_dir, "data": os.path.abspath(os.fspath(data_file)), "n": int(len(y)),
              "calibration": calibrated.calibration.to_dict()}
    calibrated.save(os.path.join(run_dir, "posterior.nc"), include_data=posterior.has_data)
    with files.atomic_file(os.path.join(run_dir, "metrics.json"), "w") as f:
        json.dump({**report, "calibration": {k: v for k, v in result.items() if k != "run_dir"}}, f, indent=2)
    return result


def _cutoffs(values: dict[str, np.ndarray], fractions: Sequence[float]) -> dict[str, float]:
    """Label (``"50%"``) → the largest pooled SNR that pruning that share removes."""
    pooled = np.sort(np.concatenate([v.ravel() for v in values.values()]))
    out = {}
    for f in fractions:
        k = round(f * pooled.size)
        if k > 0:
            out[f"{f * 100:g}%"] = float(pooled[k - 1])
    return out


def prune_run(
    run_dir: str | os.PathLike,
    *,
    rules: Sequence[str] = ("snr", "magnitude"),
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    data_dir: str | os.PathLike | None = None,
    num_samples: int = 10,
    seed: int = 0,
    batch_size: int | None = None,
) -> dict:
    """Pruning table of an image run of ``bnnpp fit``, written as ``prune.json``, ``prune.md``
    and ``snr.png`` (when the posterior has SNRs) into the run folder.

    Args:
        run_dir: the run folder (``posterior.nc``, ``metrics.json``).
        rules: any of ``"snr"``, ``"magnitude"`` (see :mod:`bnnpp.pruning`).
        fractions: shares of weights removed, each in [0, 1].
        data_dir: where the IDX files are (default: the folder in ``metrics.json``).
        num_samples: posterior draws per prediction (the paper's errors use 10).
        seed, batch_size: see :func:`bnnpp.pruning.pruning_table`.

    Returns:
        The report in ``prune.json``: ``rows`` (one per rule and fraction: ``rule``,
        ``fraction``, ``removed``, ``remaining``, ``test_error``), ``num_weights``,
        ``snr_cutoffs`` (label → SNR threshold, when SNR exists), ``run_dir``, ``data``,
        ``method``, ``num_samples``, ``seconds``; for a ``method="vd"`` run also ``log_alpha``,
        the compression table of :func:`bnnpp.pruning.log_alpha_table`; plus ``files``, the
        names written.
    """
    rules = tuple(rules)
    fractions = tuple(fractions)
    if not rules or not fractions:
        raise ValueError("pass at least one rule and one fraction")
    for r in rules:
        pruning.check_rule(r)
    for f in fractions:
        pruning.check_fraction(f)
    evaluation.check_count(num_samples, "num_samples")
    check_run_dir(run_dir)
    t0 = time.perf_counter()
    posterior, _, dataset = open_run(run_dir, data_dir)
    try:
        snr_values, no_snr = pruning.snr(posterior), None
    except ValueError as e:
        if "snr" in rules:
            raise
        snr_values, no_snr = None, f"No snr.png: {e}"
    rows = pruning.pruning_table(
        posterior, dataset.x_test, dataset.y_test, fractions=fractions, rules=rules, num_samples=num_samples, seed=seed, batch_size=batch_size
    )
    report = {
        "run_dir": os.fspath(run_dir),
        "data": dataset.name,
        "method": posterior.info.get("method"),
        "num_samples": min(num_samples, posterior.num_chains * posterior.num_draws),
        "num_weights": rows[0]["removed"] + rows[0]["remaining"],
        "rows": rows,
        "snr_cutoffs": _cutoffs(snr_values, fractions) if snr_values is not None else None,
    }
    if isinstance(posterior.approximation, VariationalDropout):  # vd: its own log α rule (Molchanov et al. 2017)
        report["log_alpha"] = pruning.log_alpha_table(posterior, dataset.x_test, dataset.y_test, num_samples=num_samples, seed=seed, batch_size=batch_size)
    report["seconds"] = {"total": time.perf_counter() - t0}
    names = ["prune.json", "prune.md"]
    with files.publish_folder(run_dir, prefix=".prune-") as tmp:
        if snr_values is not None:
            # bnnpp.plots imports matplotlib (~0.5 s): loaded on first use, not at command start-up
            from bnnpp import plots

            fig = plots.snr_histogram(snr_values, report["snr_cutoffs"], title=f"{report['data']}, {report['method']}: weight SNR")
            fig.savefig(os.path.join(tmp, "snr.png"), dpi=110)
            names.append("snr.png")
        with open(os.path.join(tmp, "prune.json"), "w") as f:
            json.dump(report, f, indent=2)
        with open(os.path.join(tmp, "prune.md"), "w") as f:
            f.write(reports.prune_markdown(report, no_snr) + (f"\n{pruning.log_alpha_markdown(report['log_alpha'])}" if "log_alpha" in report else ""))
    report["files"] = names
    return report


# --- compare and sweep output folders -----------------------------------------------------


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
    # ArviZ and matplotlib (~1.5 s to import) load on first use, not at command start-up
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
            figs["decision_maps.png"] = plots.decision_maps({m: p.predict for m, p in posteriors.items()}, dataset.x_train,
                                                            dataset.y_train, class_names=class_names(dataset))
        figs["reliability.png"] = plots.reliability_diagram({m: (p.predict(dataset.x_test).mean, dataset.y_test) for m, p in posteriors.items()})
    if results is not None and results.get("reference"):
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
    out_dir: str | os.PathLike, results: dict, posteriors: dict, dataset: data.Dataset, *, started: float | None = None
) -> dict:
    """Write ``bnnpp compare``'s folder: the :func:`write_compare_figures`, ``compare.json``
    (``results``) and ``compare.md`` (:func:`bnnpp.reports.compare_markdown`).

    Args:
        out_dir: the output folder (created; files of the same names are replaced).
        results: :func:`bnnpp.compare.compare_methods`'s results.
        posteriors: method → :class:`~bnnpp.Posterior`.
        dataset: the data they were fitted to.
        started: ``time.perf_counter()`` when the command started: ``seconds_total`` counts
            from it to when the figures are done (default: from this call).

    Returns:
        ``results``, updated in place with ``figures`` (names) and ``seconds_total``.
    """
    started = time.perf_counter() if started is None else started
    with files.publish_folder(out_dir) as tmp:
        results["figures"] = write_compare_figures(tmp, posteriors, dataset, results)
        results["seconds_total"] = time.perf_counter() - started
        with open(os.path.join(tmp, "compare.json"), "w") as f:
            json.dump(results, f, indent=2, default=str)
        with open(os.path.join(tmp, "compare.md"), "w") as f:
            f.write(reports.compare_markdown(results))
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


# --- the old homes of these names ---------------------------------------------------------


def deprecated_aliases(old_module: str, moved: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old_module`` that keeps moved names importable for one
    release: ``moved`` maps each old name to the new dotted path (``"bnnpp.runs.open_run"``).

    Returns:
        The ``__getattr__`` function: it warns with a DeprecationWarning naming the new path
        and returns the object there; other names raise AttributeError as usual.
    """

    def __getattr__(name: str) -> Any:
        if name not in moved:
            raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
        module, _, attr = moved[name].rpartition(".")
        warnings.warn(
            f"{old_module}.{name} moved to {moved[name]}; the old name will be removed in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module), attr)

    return __getattr__
