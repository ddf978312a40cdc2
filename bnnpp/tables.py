"""Predictions for new rows as a table: ``bnnpp predict RUN --data FILE --out FILE``.

:func:`predict_run` reads a ``bnnpp fit`` run folder, applies the run's recorded input
standardisation (``metrics.json``'s ``preprocessing``, written for a user's ``.csv``/``.npz``)
to new rows, and returns one row of predictive summaries per input in the original units:

* regression — ``mean``, ``sd`` (total predictive sd), ``epistemic_sd``, ``aleatoric_sd``;
* classification — ``prob_<class>`` for every class, ``predicted`` (the class of the largest
  mean probability, as the training file labelled it), ``entropy`` (predictive entropy, nats)
  and ``mutual_information`` (between label and weights; the epistemic part).

Regression can add quantiles of the predictive distribution (``q_<p>``) and central intervals
(``lower_<pct>``, ``upper_<pct>``), from the mixture over posterior draws
(:func:`bnnpp.evaluation.predictive_quantiles`). A run calibrated by ``bnnpp calibrate``
adds its split-conformal output at level ``1 − alpha`` (``<pct>``, e.g. 90): regression
``conformal_lower_<pct>`` and ``conformal_upper_<pct>``; classification ``conformal_set_<pct>``
(the set's class labels joined by ``|``, possibly empty) and ``conformal_set_size_<pct>``
(its class probabilities are then the temperature-scaled ones). The columns of an input CSV that are not
features (an id, the target, anything else) come first, as the file wrote them; one whose
name an output column also has is written as ``input_<name>``.

:func:`write_table` saves such a table as CSV or ``.npz``.
"""

from __future__ import annotations

import csv
import os

import numpy as np

from bnnpp import data, evaluation
from bnnpp.data.tables import read_labelled  # labelled rows of a run: bnnpp evaluate's and bnnpp calibrate's
from bnnpp.files import atomic_file, atomic_path
from bnnpp.posterior import Prediction

__all__ = ["check_levels", "other_columns", "predict_run", "prediction_table", "read_labelled", "run_transform", "write_table"]


def run_transform(report: dict, posterior) -> data.FileTransform:
    """The :class:`~bnnpp.data.FileTransform` of a run: the recorded one for a user's file, else
    the identity on the posterior's inputs (built-in sets: new rows are model inputs already)."""
    if report.get("preprocessing") is not None:
        try:
            return data.FileTransform.from_dict(report["preprocessing"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(
                f"the run's metrics.json has a malformed preprocessing record ({type(e).__name__}: {e}): fit the run again"
            ) from None
    shape = tuple(posterior.x.shape[1:])
    task = "classification" if posterior.y.dtype.kind in "iu" else "regression"  # class labels are int32
    features = tuple(f"x{i}" for i in range(int(np.prod(shape))))
    return data.FileTransform(features, "y", task, np.zeros(shape), np.ones(shape))  # classes: 0..C-1


def check_levels(values, name: str) -> tuple[float, ...]:
    """Quantile or interval levels as a tuple of floats, each strictly between 0 and 1, without
    repeats; one-line ValueError naming ``name`` otherwise."""
    try:
        levels = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise ValueError(f"{name} takes numbers between 0 and 1 such as 0.05,0.5,0.95, got {values!r}") from None
    bad = [v for v in levels if not 0 < v < 1]
    if not levels or bad:
        raise ValueError(
            f"{name} takes numbers strictly between 0 and 1 such as 0.05,0.5,0.95, got {', '.join(map(str, levels)) or 'none'}"
        )
    if len(set(levels)) != len(levels):
        raise ValueError(f"{name} names a level twice: {', '.join(map(str, levels))}")
    return levels


def prediction_table(
    prediction: Prediction, transform: data.FileTransform, classes: tuple | None = None, *, quantiles=(), intervals=()
) -> dict[str, np.ndarray]:
    """Column name → ``(n,)`` array of the per-row summaries (module docstring) of
    ``prediction``, regression values mapped back to the original units with ``transform``'s
    ``y_shift``/``y_scale``; ``classes``: the labels of the class indices (default
    ``transform.classes``, else 0..C−1). Regression only: ``quantiles`` (levels in (0, 1))
    add ``q_<level>`` columns, ``intervals`` (central levels in (0, 1)) ``lower_<pct>`` and
    ``upper_<pct>`` columns, both of the predictive mixture over draws."""
    if prediction.task == "regression":
        s = transform.y_scale
        table = {
            "mean": prediction.mean * s + transform.y_shift,
            "sd": prediction.std * s,
            "epistemic_sd": prediction.epistemic_std * s,
            "aleatoric_sd": prediction.aleatoric_std * s,
        }
        quantiles = check_levels(quantiles, "quantiles") if len(quantiles) else ()
        intervals = check_levels(intervals, "intervals") if len(intervals) else ()
        if quantiles or intervals:
            original = evaluation.in_original_units(prediction, transform.y_shift, s)
            levels = [*quantiles, *((1 - c) / 2 for c in intervals), *((1 + c) / 2 for c in intervals)]
            values = evaluation.predictive_quantiles(original, levels)
            k = len(intervals)
            table.update({f"q_{q:g}": values[i] for i, q in enumerate(quantiles)})
            for i, c in enumerate(intervals):
                table[f"lower_{100 * c:g}"] = values[len(quantiles) + i]
                table[f"upper_{100 * c:g}"] = values[len(quantiles) + k + i]
        if prediction.interval_lo is not None:
            pct = f"{100 * (1 - prediction.alpha):g}"
            table[f"conformal_lower_{pct}"] = prediction.interval_lo * s + transform.y_shift
            table[f"conformal_upper_{pct}"] = prediction.interval_hi * s + transform.y_shift
        return table
    if len(quantiles) or len(intervals):
        raise ValueError("quantiles and intervals are for regression runs; this run classifies (its table has prob_<class>)")
    mean = prediction.mean
    labels = classes or transform.classes or tuple(range(mean.shape[1]))
    if len(labels) != mean.shape[1]:
        raise ValueError(f"the run predicts {mean.shape[1]} classes but records {len(labels)} labels: fit it again")
    table = {f"prob_{c}": mean[:, i] for i, c in enumerate(labels)}
    table["predicted"] = np.asarray(labels)[np.argmax(mean, axis=1)]
    table["entropy"] = prediction.entropy
    table["mutual_information"] = prediction.mutual_information
    if prediction.sets is not None:
        pct = f"{100 * (1 - prediction.alpha):g}"
        table[f"conformal_set_{pct}"] = np.asarray(["|".join(str(labels[j]) for j in np.flatnonzero(row)) for row in prediction.sets])
        table[f"conformal_set_size_{pct}"] = prediction.sets.sum(axis=1)
    return table


def other_columns(path: str | os.PathLike, transform: data.FileTransform) -> dict[str, np.ndarray]:
    """The columns of an input CSV that are not the run's features (ids, the target, ...):
    name → ``(n,)`` array of the cells as text, in file order; ``{}`` for other files."""
    path = os.fspath(path)
    if not path.endswith(".csv"):
        return {}
    header, rows = data.read_csv(path, transform.features)
    cols = list(zip(*rows, strict=True))
    return {h: np.asarray(cols[i], dtype=str) for i, h in enumerate(header) if h not in transform.features}


def _model_inputs(path, transform: data.FileTransform, raw: np.ndarray) -> np.ndarray:
    """``transform.inputs(raw)``, its one-line error prefixed with the file ``path``."""
    try:
        return transform.inputs(raw)
    except ValueError as e:
        raise ValueError(f"{os.fspath(path)}: {e}") from None


def predict_run(
    run_dir: str | os.PathLike,
    path: str | os.PathLike,
    *,
    by_name: bool = True,
    num_samples: int | None = None,
    seed: int = 0,
    quantiles=(),
    intervals=(),
    keep_columns: bool = True,
) -> dict[str, np.ndarray]:
    """Predict every row of a file with a ``bnnpp fit`` run.

    Args:
        run_dir: the run folder (``posterior.nc``, ``metrics.json``).
        path: the new rows: with ``by_name`` a CSV with a header naming the training features
            (any order; a target column or others are ignored) or an ``.npz`` with ``x``;
            without, a header-less CSV of feature values in training order (or ``.npy``/``.npz``).
        num_samples: posterior draws to use (default: all; a larger number than the run kept
            is capped at it, with a warning).
        seed: key of any randomness in the model.
        quantiles, intervals: regression: the predictive quantiles and central intervals to
            add (levels in (0, 1); see :func:`prediction_table`).
        keep_columns: with ``by_name``, put the CSV's non-feature columns (ids, ...) first.

    Returns:
        The :func:`prediction_table` of the rows, in file order, after the kept input columns.
        One-line ValueError for a run folder that is not one, a file whose columns do not match
        the run's features, a posterior whose draws hold NaN or inf, or quantiles asked of a
        classifier.
    """
    from bnnpp.inference import load  # the inference stack (JAX) loads only when predicting
    from bnnpp.runs import block_rows, check_run_dir

    run_dir, report = check_run_dir(run_dir, images=False)
    quantiles = check_levels(quantiles, "quantiles") if len(quantiles) else ()
    intervals = check_levels(intervals, "intervals") if len(intervals) else ()
    recorded = (report.get("preprocessing") or {}).get("task")
    if (quantiles or intervals) and recorded == "classification":  # before the posterior is read
        raise ValueError("quantiles and intervals are for regression runs; this run classifies (its table has prob_<class>)")
    posterior = load(os.path.join(run_dir, "posterior.nc"))
    num_samples = posterior.draws_to_use(num_samples)  # capped at the draws kept, with one warning
    posterior.check_finite()  # before the inputs are read: a damaged posterior is the first thing to fix
    transform = run_transform(report, posterior)
    if (quantiles or intervals) and transform.task == "classification":
        raise ValueError("quantiles and intervals are for regression runs; this run classifies (its table has prob_<class>)")
    x = _model_inputs(path, transform, data.read_inputs(path, transform, by_name=by_name))
    kept = other_columns(path, transform) if by_name and keep_columns else {}
    if transform.task == "classification":
        probs = evaluation.predict_probs(posterior, x, num_samples=num_samples, seed=seed, batch_size=block_rows(posterior, x))
        prediction = Prediction("classification", probs=probs)
    else:
        b = block_rows(posterior, x)
        parts = [posterior.predict(x[i : i + b], num_samples=num_samples, seed=seed) for i in range(0, len(x), b)]
        joined = {
            k: None if getattr(parts[0], k) is None else np.concatenate([getattr(p, k) for p in parts], axis=1)
            for k in ("draws", "noise", "df")
        }
        prediction = Prediction("regression", likelihood=parts[0].likelihood, **joined)
    if posterior.calibration is not None:  # probs are temperature-scaled already: add the intervals or sets
        prediction = posterior.calibration.attach(prediction, seed)
    table = prediction_table(prediction, transform, quantiles=quantiles, intervals=intervals)
    return {**{(f"input_{k}" if k in table else k): v for k, v in kept.items()}, **table}


def write_table(path: str | os.PathLike, table: dict[str, np.ndarray]) -> None:
    """Write a table (column → ``(n,)`` array) as ``.csv`` (a header row, then one row per
    input; floats with 6 significant digits) or ``.npz`` (one array per column).

    The file is written under a temporary name beside ``path`` and renamed onto it when
    complete (:func:`bnnpp.files.atomic_path`): on any failure (a full disk, a read-only
    folder) an existing ``path`` is left as it was and no partial file remains. Raises a
    one-line ValueError for another suffix or a ``path`` that is a folder; the ``OSError`` of
    a failed write propagates.
    """
    path = os.fspath(path)
    if not path.endswith((".csv", ".npz")):
        raise ValueError(f"--out {path}: write a .csv or .npz file")
    if os.path.isdir(path):
        raise ValueError(f"--out {path} is a folder: name a .csv or .npz file to write")
    if path.endswith(".npz"):
        with atomic_path(path) as tmp:
            np.savez(tmp, **{k: np.asarray(v) for k, v in table.items()})
        return
    columns = list(table)
    cells = [[f"{v:.6g}" if isinstance(v, (float, np.floating)) else str(v) for v in table[c].tolist()] for c in columns]
    with atomic_file(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(columns)
        w.writerows(zip(*cells, strict=True))
