"""Calibrating a table run on held-out labelled rows (:func:`calibrate_run`)."""

from __future__ import annotations

import json
import os

from bnnpp import calibrate, evaluation, files
from bnnpp.data import IMAGE_SETS
from bnnpp.data.tables import read_labelled
from bnnpp.inference import load
from bnnpp.runs.reading import check_run_dir


def calibrate_run(
    run_dir: str | os.PathLike,
    data_file: str | os.PathLike,
    *,
    target: str | None = None,
    alpha: float | None = 0.1,
    score: str | None = None,
    temperature_scaling: bool | None = None,
    temperature_loss: str = "auto",
    randomized: bool = True,
    raps_lambda: float = 0.01,
    raps_k: int = 1,
    num_samples: int | None = None,
    seed: int = 0,
) -> dict:
    """Calibrate a ``bnnpp fit`` run of a table on held-out labelled rows
    (:meth:`bnnpp.Posterior.calibrate`) and write the calibrated posterior back to the run's
    ``posterior.nc`` (atomically; ``bnnpp predict`` then adds the conformal columns) and the
    calibration to ``metrics.json``'s ``calibration`` entry, with the coverage it guarantees
    (:meth:`bnnpp.calibrate.Calibration.guarantee`). A second call replaces the first.

    The rows are read and counted before the posterior predicts: fewer than ``alpha`` needs for
    a finite conformal threshold (:func:`bnnpp.calibrate.check_rows`) are refused at once.

    Args:
        run_dir: the run folder.
        data_file: labelled rows not used for fitting (:func:`bnnpp.data.tables.read_labelled`:
            a CSV naming the features and the target, or an ``.npz`` with ``x`` and ``y``).
        target: the CSV's target column (default: the run's).
        alpha, score, temperature_scaling, temperature_loss, randomized, raps_lambda, raps_k: see
            :func:`bnnpp.calibrate.fit`.
        num_samples, seed: the draws and seed of the calibration prediction.

    Returns:
        ``{"run_dir", "data", "n", "calibration", "coverage"}``: the
        :class:`~bnnpp.calibrate.Calibration` as a dict and its
        :meth:`~bnnpp.calibrate.Calibration.guarantee` (``None`` for temperature scaling
        alone), also written to ``metrics.json`` (without ``run_dir``).

    Raises:
        ValueError: one line, for an image run, too few rows for ``alpha``, or a bad file
            (:class:`bnnpp.data.MissingColumnError` for a missing feature or target column).
    """
    from bnnpp import tables

    if num_samples is not None:
        evaluation.check_count(num_samples, "num_samples")
    if alpha is not None:
        calibrate.check_alpha(alpha)
    run_dir, report = check_run_dir(run_dir, images=False)
    if report.get("data") in IMAGE_SETS:
        raise ValueError(
            f"{run_dir} is an image run: calibrate it in Python (posterior.calibrate(x_cal, y_cal)); the command calibrates table runs"
        )
    posterior = load(os.path.join(run_dir, "posterior.nc"))
    transform = tables.run_transform(report, posterior)
    x, y = read_labelled(data_file, transform, target)
    calibrate.check_rows(len(y), alpha)  # before the posterior predicts
    calibrated = posterior.calibrate(
        x,
        y,
        alpha,
        score=score,
        temperature_scaling=temperature_scaling,
        temperature_loss=temperature_loss,
        randomized=randomized,
        raps_lambda=raps_lambda,
        raps_k=raps_k,
        num_samples=num_samples,
        seed=seed,
    )
    result = {
        "run_dir": run_dir,
        "data": os.path.abspath(os.fspath(data_file)),
        "n": int(len(y)),
        "calibration": calibrated.calibration.to_dict(),
        "coverage": calibrated.calibration.guarantee(),
    }
    calibrated.save(os.path.join(run_dir, "posterior.nc"), include_data=posterior.has_data)
    with files.atomic_file(os.path.join(run_dir, "metrics.json"), "w") as f:
        json.dump({**report, "calibration": {k: v for k, v in result.items() if k != "run_dir"}}, f, indent=2)
    return result
