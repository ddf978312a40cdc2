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

The modules: :mod:`~bnnpp.runs.reading` (reading a fit run), :mod:`~bnnpp.runs.fit_run`
(writing one), :mod:`~bnnpp.runs.evaluate`, :mod:`~bnnpp.runs.calibration` and
:mod:`~bnnpp.runs.prune` (reports added to a run), :mod:`~bnnpp.runs.folders` (the compare and
sweep folders) and :mod:`~bnnpp.runs.aliases` (old names); every public name is re-exported here.
"""

from __future__ import annotations

from bnnpp.runs.aliases import deprecated_aliases as deprecated_aliases
from bnnpp.runs.calibration import calibrate_run
from bnnpp.runs.evaluate import OOD_SETS, evaluate_run, evaluate_table_run
from bnnpp.runs.fit_run import FIGURE_DRAWS as FIGURE_DRAWS
from bnnpp.runs.fit_run import FIGURE_ROWS as FIGURE_ROWS
from bnnpp.runs.fit_run import LOSS_TERMS as LOSS_TERMS
from bnnpp.runs.fit_run import WRITER_MODULES as WRITER_MODULES
from bnnpp.runs.fit_run import (
    block_rows,
    class_names,
    figure,
    figure_rows,
    fit_record,
    fit_report,
    loss_figure,
    metrics_on_test_set,
    original_test_features,
    regression_test_checks,
    training_curves,
    write_fit_run,
)
from bnnpp.runs.fit_run import preload_writers as preload_writers
from bnnpp.runs.folders import write_compare_figures, write_compare_run, write_sweep_run
from bnnpp.runs.prune import DEFAULT_FRACTIONS, prune_run
from bnnpp.runs.reading import check_run_dir, dataset_from_record, fashion_like, open_run

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
    "fit_record",
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
