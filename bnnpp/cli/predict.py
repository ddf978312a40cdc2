"""``bnnpp predict RUN --data FILE --out FILE``: per-row predictions of a ``bnnpp fit`` run
for new inputs, as CSV or ``.npz`` (the work is :func:`bnnpp.tables.predict_run`)."""

from __future__ import annotations

import argparse
import os

from bnnpp.cli._errors import CLIError
from bnnpp.cli._help import DefaultsOnce
from bnnpp.files import check_path_length, check_writable, real_file

__all__ = ["add_parser", "run"]


def add_parser(sub) -> None:
    p = sub.add_parser(
        "predict",
        help="predict new rows with a fitted run; write a CSV/npz of means and uncertainties",
        description="Predict every row of a file with a run of `bnnpp fit`. The run's recorded standardisation "
        "is applied to the inputs; the output holds one row per input: the --data CSV's columns that are not "
        "features (ids, ...) as they are, then regression mean, sd, epistemic_sd and aleatoric_sd in the target's "
        "units (and any --quantiles / --intervals), or classification prob_<class> for every class, predicted, "
        "entropy and mutual_information.",
        formatter_class=DefaultsOnce,
    )
    p.add_argument("run_dir", metavar="RUN", help="run folder written by `bnnpp fit --out RUN`")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--data",
        help="a .csv with a header naming the training features (any order; other columns "
        "such as the target are ignored) or an .npz with array x",
    )
    src.add_argument("--x", help="a header-less .csv of feature values in the training column order, or .npy/.npz (array x)")
    p.add_argument("--out", required=True, help="the file to write: .csv or .npz")
    p.add_argument(
        "--quantiles",
        type=_levels,
        default=None,
        metavar="P,P,...",
        help="regression: add columns q_P of the predictive distribution's quantiles, e.g. 0.05,0.5,0.95",
    )
    p.add_argument(
        "--intervals",
        type=_levels,
        default=None,
        metavar="L,L,...",
        help="regression: add central predictive intervals lower_<pct>, upper_<pct>, e.g. 0.5,0.9",
    )
    p.add_argument("--num-samples", type=int, default=None, help="posterior draws to use (default: all the run kept)")
    p.add_argument("--seed", type=int, default=0, help="seed of any randomness in the model while predicting")
    p.set_defaults(handler=run)


def _levels(text: str) -> tuple[float, ...]:
    try:
        levels = tuple(float(t) for t in text.split(",") if t.strip())
        if not levels:
            raise ValueError(text)
        return levels
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers between 0 and 1 such as 0.05,0.5,0.95, got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    from bnnpp import tables  # JAX loads only when a command predicts
    from bnnpp.data import MissingColumnError

    if not args.out.endswith((".csv", ".npz")):
        raise CLIError(f"--out {args.out}: write a .csv or .npz file")
    if args.num_samples is not None and args.num_samples < 1:
        raise CLIError(f"--num-samples must be ≥ 1, got {args.num_samples}")
    if not 0 <= args.seed < 2**32:
        raise CLIError(f"--seed must be an integer in [0, 2**32), got {args.seed}")
    source = args.data or args.x
    if os.path.abspath(args.out) == os.path.abspath(source) or (
        os.path.exists(args.out) and os.path.exists(source) and os.path.samefile(args.out, source)
    ):
        raise CLIError(f"--out {args.out} is the input file: writing it would replace your rows; choose another name")
    try:
        for flag, levels in (("--quantiles", args.quantiles), ("--intervals", args.intervals)):
            if levels:
                tables.check_levels(levels, flag)
    except ValueError as e:
        raise CLIError(str(e)) from None
    try:
        target = real_file(args.out)  # a link is written through, a dangling one refused: before anything compiles
    except ValueError as e:
        raise CLIError(f"--out {e}") from None
    _refuse_run_files(args.run_dir, target)
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        raise CLIError(f"--out {args.out}: folder {parent} does not exist")
    if os.path.isdir(args.out):
        raise CLIError(f"--out {args.out} is a folder: name a .csv or .npz file to write")
    try:
        check_writable(parent)  # before the posterior is read and predicted
        check_path_length(target)
    except ValueError as e:
        raise CLIError(f"--out {args.out}: {e}") from None
    try:
        table = tables.predict_run(
            args.run_dir,
            source,
            by_name=args.data is not None,
            num_samples=args.num_samples,
            seed=args.seed,
            quantiles=args.quantiles or (),
            intervals=args.intervals or (),
        )
        tables.write_table(args.out, table)  # atomic: a failed write leaves an existing file as it was
    except (ValueError, TypeError) as e:
        if isinstance(e, MissingColumnError):  # the hint names this command's flag, not the Python argument
            raise CLIError(str(MissingColumnError(e.detail, "--x FILE instead of --data"))) from None
        raise CLIError(str(e)) from None
    except OSError as e:  # a full disk, a folder made read-only meanwhile
        raise CLIError(
            f"could not write --out {args.out} ({e.strerror or e}); any earlier {os.path.basename(args.out)} "
            "is unchanged: free some space or choose another path"
        ) from None
    n = len(next(iter(table.values())))
    print(f"wrote {args.out}: {n} rows, columns {', '.join(table)}")
    return 0


def _refuse_run_files(run_dir: str, target: str) -> None:
    """Refuse an ``--out`` that would replace the run's own files (its posterior, reports) or
    the data file it was fitted on (``metrics.json``'s ``data``), in one line."""
    import json

    from bnnpp.files import bnnpp_files

    run = os.path.realpath(run_dir)
    if os.path.dirname(target) == run and os.path.basename(target) in bnnpp_files(run) | {"posterior.nc", "config.toml"}:
        raise CLIError(f"--out {target} is one of the run's own files: choose another name")
    try:
        with open(os.path.join(run, "metrics.json")) as f:
            fitted_on = json.load(f).get("data")
    except (OSError, ValueError, AttributeError):
        return  # a damaged run folder is reported when it is read
    if isinstance(fitted_on, str) and os.path.isfile(fitted_on) and os.path.exists(target) and os.path.samefile(fitted_on, target):
        raise CLIError(
            f"--out {target} is the file the run was fitted on: writing it would replace your training rows; choose another name"
        )
