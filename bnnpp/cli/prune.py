"""``bnnpp prune DIR``: test error after removing the weights with the lowest signal-to-noise
ratio |μ|/σ or the lowest magnitude |μ| (Blundell et al. 2015, Table 2); writes prune.json,
prune.md and snr.png (the SNR histogram and CDF with the cut-offs) into DIR (the work is
:func:`bnnpp.runs.prune_run`). A ``method="vd"`` run also gets the log α rule's compression
table (:func:`bnnpp.pruning.log_alpha_table`)."""

from __future__ import annotations

import argparse
import os

from bnnpp import pruning, reports, runs
from bnnpp.cli._errors import CLIError
from bnnpp.cli._help import DefaultsOnce

__all__ = ["add_parser", "run"]


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
        "share removed; a --method vd run also gets the log alpha rule (weights with log alpha > 3 dropped, Molchanov et al. "
        "2017): nonzero weights per layer, compression and test error. Writes DIR/prune.json, DIR/prune.md (the table "
        "beside the published ones) and DIR/snr.png.",
        formatter_class=DefaultsOnce,
    )
    p.add_argument("dir", help="run folder written by `bnnpp fit --out DIR` (posterior.nc, metrics.json)")
    p.add_argument("--rule", type=_rules, default="snr,magnitude", help="comma-separated pruning rules: snr, magnitude")
    p.add_argument(
        "--fractions",
        type=_percents,
        default="0,25,50,75,95,98",
        help="comma-separated percentages of weights removed, e.g. 0,25,50,75,95,98",
    )
    p.add_argument("--data-dir", default=None, help="folder with the IDX files or their parent (default: the one in DIR/metrics.json)")
    p.add_argument("--num-samples", type=int, default=10, help="posterior draws per prediction")
    p.add_argument(
        "--batch-size", type=int, default=None, help="images per prediction call (default: bounded by draws × image size, at most 1000)"
    )
    p.set_defaults(handler=run)


def run(args) -> int:
    try:
        report = runs.prune_run(
            args.dir,
            rules=args.rule,
            fractions=args.fractions,
            data_dir=args.data_dir,
            num_samples=args.num_samples,
            batch_size=args.batch_size,
        )
    except (ValueError, TypeError) as e:
        raise CLIError(str(e)) from None
    except OSError as e:  # a full disk or a read-only run folder: nothing was moved into it
        raise CLIError(
            f"could not write the pruning results into {args.dir} ({e.strerror or e}); nothing half-written was left: "
            "free some space or make it writable"
        ) from None
    print(reports.pruning_table_markdown(report["rows"]), end="")
    if "log_alpha" in report:  # a vd run: per-layer nonzero weights, compression ×, test error
        print("\n" + pruning.log_alpha_markdown(report["log_alpha"]), end="")
    print(f"wrote {', '.join(os.path.join(args.dir, n) for n in report['files'])}")
    return 0


__getattr__ = runs.deprecated_aliases(
    __name__,
    {
        "prune_run": "bnnpp.runs.prune_run",
        "DEFAULT_FRACTIONS": "bnnpp.runs.DEFAULT_FRACTIONS",
        "PUBLISHED": "bnnpp.reports.PUBLISHED_PRUNING",
    },
)
