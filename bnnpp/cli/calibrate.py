"""``bnnpp calibrate RUN --data FILE``: split-conformal intervals or sets, and temperature
scaling, for a ``bnnpp fit`` run of a table, fitted on held-out labelled rows and written into
the run (the work is :func:`bnnpp.runs.calibrate_run`; the numerics :mod:`bnnpp.calibrate`)."""

from __future__ import annotations

import argparse

from bnnpp.cli._data import labelled_rows_message
from bnnpp.cli._errors import CLIError
from bnnpp.cli._help import DefaultsOnce

__all__ = ["add_parser", "run"]

SCORES = ("normalized", "cqr", "aps", "raps")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "calibrate",
        help="conformal intervals/sets and temperature scaling of a run, from held-out labelled rows",
        description="Calibrate a run of `bnnpp fit` (a table: your .csv/.npz or a built-in 1-D/2-D set) on labelled "
        "rows it was not fitted on. Regression: split-conformal intervals that hold a new target with probability "
        "≥ 1 − alpha (score normalized: mean ± q·sd; cqr: the predictive quantiles widened by q, Romano et al. 2019). "
        "Classification: temperature scaling of the predictive (Guo et al. 2017; each draw's log-probabilities divided "
        "by one fitted T) and conformal prediction sets (aps, Romano et al. 2020; raps, Angelopoulos et al. 2021). "
        "Writes the calibrated posterior back to RUN/posterior.nc and the calibration to RUN/metrics.json; "
        "`bnnpp predict` then adds conformal_lower_<pct>/conformal_upper_<pct> or conformal_set_<pct> columns. "
        "Split conformal needs at least ⌈1/alpha⌉ − 1 rows (9 at alpha 0.1, 19 at 0.05); fewer are refused.",
        formatter_class=DefaultsOnce,
    )
    p.add_argument("run_dir", metavar="RUN", help="run folder written by `bnnpp fit --out RUN`")
    p.add_argument(
        "--data",
        required=True,
        metavar="FILE",
        help="held-out labelled rows: a .csv with the features and the "
        "target column (any order; other columns ignored) or an .npz with x and y",
    )
    p.add_argument("--target", default=None, help="the --data CSV's target column (default: the run's target)")
    p.add_argument("--alpha", type=float, default=0.1, help="miscoverage of the intervals or sets (0.1: 90%%)")
    p.add_argument("--no-conformal", action="store_true", help="classification: fit the temperature only, no sets")
    p.add_argument(
        "--score",
        default=None,
        choices=SCORES,
        help="conformity score (default: normalized for a Gaussian likelihood, cqr for Student-t and Poisson, aps for classifiers)",
    )
    p.add_argument("--no-temperature", action="store_true", help="classification: no temperature scaling")
    p.add_argument(
        "--temperature-loss",
        default="auto",
        choices=("auto", "nll", "brier"),
        help="classification: the held-out loss the temperature minimises (brier: bounded per row, so a few confidently "
        "wrong rows do not soften every confident prediction; auto: the one of the two whose temperature gives the lower "
        "ECE on 5 folds of --data, NLL below 100 rows)",
    )
    p.add_argument(
        "--no-randomized",
        dest="randomized",
        action="store_false",
        help="deterministic APS/RAPS sets (u = 1): conservative, and for a confident classifier large or empty (default: "
        "randomised sets, coverage 1 − alpha on average with about one class each; --randomized is accepted)",
    )
    p.add_argument("--randomized", dest="randomized", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--raps-lambda", type=float, default=0.01, help="RAPS: penalty per class beyond --raps-k")
    p.add_argument("--raps-k", type=int, default=1, help="RAPS: classes ranked up to k are not penalised")
    p.add_argument("--num-samples", type=int, default=None, help="posterior draws to use (default: all the run kept)")
    p.add_argument("--seed", type=int, default=0, help="seed of the prediction and of randomised scores")
    p.set_defaults(handler=run, randomized=True)


def run(args: argparse.Namespace) -> int:
    from bnnpp import calibrate, runs  # JAX loads only when a command runs

    alpha = None if args.no_conformal else args.alpha
    if args.no_conformal and args.no_temperature:
        raise CLIError("--no-conformal with --no-temperature leaves nothing to calibrate")
    if args.no_temperature and args.temperature_loss != "auto":
        raise CLIError("--temperature-loss with --no-temperature: there is no temperature to fit")
    try:  # before the posterior is read
        if alpha is not None:
            calibrate.check_alpha(alpha)
        if args.num_samples is not None and args.num_samples < 1:
            raise ValueError(f"--num-samples must be ≥ 1, got {args.num_samples}")
        if args.raps_k < 0 or not args.raps_lambda >= 0:
            raise ValueError("--raps-k and --raps-lambda must be ≥ 0")
    except ValueError as e:
        raise CLIError(str(e)) from None
    try:
        result = runs.calibrate_run(
            args.run_dir,
            args.data,
            target=args.target,
            alpha=alpha,
            score=args.score,
            temperature_scaling=False if args.no_temperature else None,
            temperature_loss=args.temperature_loss,
            randomized=args.randomized,
            raps_lambda=args.raps_lambda,
            raps_k=args.raps_k,
            num_samples=args.num_samples,
            seed=args.seed,
        )
    except (ValueError, TypeError) as e:
        raise CLIError(labelled_rows_message(e) if isinstance(e, ValueError) else str(e)) from None
    cal = result["calibration"]
    parts = [f"{cal['task']} on {result['n']} rows"]
    if cal["task"] == "classification" and cal["temperature"] != 1.0:
        how = cal["temperature_loss"]
        if cal["temperature_cv_ece"]:
            how += " by 5-fold ECE: " + ", ".join(f"{k} {e:.4f}" for k, e in zip(("nll", "brier"), cal["temperature_cv_ece"], strict=True))
        parts.append(f"temperature {cal['temperature']:.4g} ({how})")
    if cal["score"] is not None:
        parts.append(f"{cal['score']} at {100 * (1 - cal['alpha']):g}%: threshold {cal['threshold'][0]}")
    print(f"calibrated {result['run_dir']}: {', '.join(parts)}; wrote posterior.nc and metrics.json")
    print(f"coverage: {result['coverage'] or calibrate.NO_GUARANTEE}")
    return 0
