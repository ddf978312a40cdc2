"""``bnnpp prune DIR``: test error after removing the weights with the lowest signal-to-noise
ratio |μ|/σ or the lowest magnitude |μ| (Blundell et al. 2015, Table 2); writes prune.json,
prune.md and snr.png (the SNR histogram and CDF with the cut-offs) into DIR."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence

import numpy as np

from bnnpp.cli._errors import CLIError

__all__ = ["PUBLISHED", "add_parser", "prune_run"]

DEFAULT_FRACTIONS = (0.0, 0.25, 0.5, 0.75, 0.95, 0.98)

#: Published tables, for the side-by-side comparison in prune.md (test error in %).
PUBLISHED = {
    "Blundell et al. 2015, Table 2 (2×1200, scale mixture, SNR)": {
        "weights": {0: "2.4m", 50: "1.2m", 75: "600k", 95: "120k", 98: "48k"},
        "SNR": {0: 1.24, 50: 1.24, 75: 1.24, 95: 1.29, 98: 1.39},
    },
    "Singh's reproduction, Table 1 (2×400, scale mixture)": {
        "magnitude": {0: 2.03, 25: 2.41, 50: 5.33, 75: 30.67, 95: 63.11},
        "SNR": {0: 2.03, 25: 2.59, 50: 5.89, 75: 41.05, 95: 82.50},
    },
}


def _published_markdown() -> str:
    lines = []
    for title, table in PUBLISHED.items():
        cols = [k for k in table if k != "weights"]
        pcts = sorted({p for k in cols for p in table[k]})
        has_w = "weights" in table
        lines += [f"{title}:", ""]
        lines.append("| proportion removed |" + (" # weights |" if has_w else "") + "".join(f" test error ({c}) |" for c in cols))
        lines.append("|---" * (1 + has_w + len(cols)) + "|")
        for p in pcts:
            w = f" {table['weights'].get(p, '')} |" if has_w else ""
            lines.append(f"| {p}% |{w}" + "".join(f" {table[c][p]:.2f}% |" if p in table[c] else " |" for c in cols))
        lines.append("")
    return "\n".join(lines)


def _cutoffs(values: dict[str, np.ndarray], fractions: Sequence[float]) -> dict[str, float]:
    """Label → the largest pooled SNR that pruning that share removes."""
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
    and ``snr.png`` into the run folder (temporary folder first, then moved into place).

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
        ``method``, ``num_samples``, ``seconds``.
    """
    from bnnpp import evaluation, plots, pruning
    from bnnpp.cli.evaluate import check_run_dir, open_run

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
        snr_values = pruning.snr(posterior)
    except ValueError as e:
        if "snr" in rules:
            raise
        snr_values, no_snr = None, str(e)
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
        "seconds": {"total": time.perf_counter() - t0},
    }
    md = [
        f"# Pruning of {report['run_dir']}",
        "",
        (f"{report['data']}, {report['method']}: {report['num_weights']:,} weights (biases are kept), pooled over layers; "
        f"test error of the mean prediction over {report['num_samples']} posterior draws."),
        "",
        pruning.table_markdown(rows).rstrip("\n"),
        "",
        "Published, for comparison:",
        "",
        _published_markdown(),
    ]
    if snr_values is None:
        md.append(f"No snr.png: {no_snr}")
    run_dir = os.fspath(run_dir)
    tmp = tempfile.mkdtemp(prefix=".prune-", dir=run_dir)
    try:
        names = ["prune.json", "prune.md"]
        if snr_values is not None:
            fig = plots.snr_histogram(snr_values, report["snr_cutoffs"], title=f"{report['data']}, {report['method']}: weight SNR")
            fig.savefig(os.path.join(tmp, "snr.png"), dpi=110)
            names.append("snr.png")
        with open(os.path.join(tmp, "prune.json"), "w") as f:
            json.dump(report, f, indent=2)
        with open(os.path.join(tmp, "prune.md"), "w") as f:
            f.write("\n".join(md).rstrip("\n") + "\n")
        for name in names:
            os.replace(os.path.join(tmp, name), os.path.join(run_dir, name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report["files"] = names
    return report


def _rules(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _percents(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--fractions takes comma-separated percentages such as 0,25,50,75,95,98, got {text!r}") from None
    bad = [v for v in values if not 0 <= v <= 100]
    if bad:
        raise argparse.ArgumentTypeError(f"--fractions are percentages in [0, 100], got {', '.join(f'{v:g}' for v in bad)}")
    return tuple(v / 100 for v in values)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "prune",
        help="test error after pruning weights by signal-to-noise ratio or magnitude",
        description="Zero the weights of an MNIST / Fashion-MNIST run with the lowest signal-to-noise ratio |mu|/sigma "
        "or the lowest |mu| (pooled over layers, as Blundell et al. 2015, Table 2) and report the test error per "
        "share removed. Writes DIR/prune.json, DIR/prune.md (the table beside the published ones) and DIR/snr.png.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("dir", help="run folder written by `bnnpp fit --out DIR` (posterior.nc, metrics.json)")
    p.add_argument("--rule", type=_rules, default="snr,magnitude", help="comma-separated pruning rules: snr, magnitude")
    p.add_argument("--fractions", type=_percents, default="0,25,50,75,95,98", help="comma-separated percentages of weights removed, e.g. 0,25,50,75,95,98")
    p.add_argument("--data-dir", default=None, help="folder with the IDX files or their parent (default: the one in DIR/metrics.json)")
    p.add_argument("--num-samples", type=int, default=10, help="posterior draws per prediction")
    p.add_argument("--batch-size", type=int, default=None, help="images per prediction call (default: bounded by draws × image size, at most 1000)")
    p.set_defaults(handler=run)


def run(args) -> int:
    try:
        report = prune_run(
            args.dir, rules=args.rule, fractions=args.fractions, data_dir=args.data_dir, num_samples=args.num_samples, batch_size=args.batch_size
        )
    except (ValueError, TypeError) as e:
        raise CLIError(str(e)) from None
    from bnnpp import pruning

    print(pruning.table_markdown(report["rows"]), end="")
    print(f"wrote {', '.join(os.path.join(args.dir, n) for n in report['files'])}")
    return 0
