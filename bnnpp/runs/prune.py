"""The pruning table of an image run (:func:`prune_run`)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence

import numpy as np

from bnnpp import evaluation, files, pruning, reports
from bnnpp.inference.vd import VariationalDropout
from bnnpp.runs.reading import check_run_dir, open_run

#: Shares of weights :func:`prune_run` removes by default (Blundell et al. 2015, Table 2, and 25%).
DEFAULT_FRACTIONS = (0.0, 0.25, 0.5, 0.75, 0.95, 0.98)


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
        posterior,
        dataset.x_test,
        dataset.y_test,
        fractions=fractions,
        rules=rules,
        num_samples=num_samples,
        seed=seed,
        batch_size=batch_size,
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
        report["log_alpha"] = pruning.log_alpha_table(
            posterior, dataset.x_test, dataset.y_test, num_samples=num_samples, seed=seed, batch_size=batch_size
        )
    report["seconds"] = {"total": time.perf_counter() - t0}
    names = ["prune.json", "prune.md"]
    with files.publish_folder(run_dir, prefix=".prune-") as tmp:
        if snr_values is not None:
            # bnnpp.plots imports matplotlib (a heavy import): loaded on first use, not at command start-up
            from bnnpp import plots

            fig = plots.snr_histogram(snr_values, report["snr_cutoffs"], title=f"{report['data']}, {report['method']}: weight SNR")
            fig.savefig(os.path.join(tmp, "snr.png"), dpi=110)
            names.append("snr.png")
        with open(os.path.join(tmp, "prune.json"), "w") as f:
            json.dump(report, f, indent=2)
        with open(os.path.join(tmp, "prune.md"), "w") as f:
            f.write(
                reports.prune_markdown(report, no_snr)
                + (f"\n{pruning.log_alpha_markdown(report['log_alpha'])}" if "log_alpha" in report else "")
            )
    report["files"] = names
    return report
