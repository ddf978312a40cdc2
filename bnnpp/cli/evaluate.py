"""``bnnpp evaluate DIR``: test error, calibration, per-image uncertainty and out-of-distribution
detection of an MNIST / Fashion-MNIST run written by ``bnnpp fit``; writes evaluation.json,
evaluation.md, evaluation.npz and the figures into DIR (the work is
:func:`bnnpp.runs.evaluate_run`; see :mod:`bnnpp.evaluation`). A run of a table (a built-in
2-D/1-D set or your own .csv/.npz) is scored on its test split or on new labelled rows
(``--data FILE --target COL``) by :func:`bnnpp.runs.evaluate_table_run`."""

from __future__ import annotations

import os

from bnnpp import runs
from bnnpp.cli._data import labelled_rows_message
from bnnpp.cli._errors import CLIError
from bnnpp.cli._help import DefaultsOnce
from bnnpp.data import IMAGE_SETS
from bnnpp.records import EvaluationReport
from bnnpp.runs import OOD_SETS

__all__ = ["OOD_SETS", "add_parser", "run"]


def add_parser(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="scores and figures of a run on its test split or new labelled rows; images: also OOD detection",
        description="Evaluate a run of `bnnpp fit`. A table run (your .csv/.npz, or moons/circles/sinusoid): scores on "
        "its test split or on labelled rows of --data FILE (accuracy, NLL, Brier, ECE, entropy and mutual information; "
        "or RMSE, NLL, 95% coverage and predictive sds in the target's units) and figures (reliability.png, "
        "decision_map.png for 2-D inputs; regression.png: predicted vs observed with intervals, calibration curve, "
        "residuals against the features; selective.png and a table: accuracy or RMSE of the rows kept when the most uncertain "
        "are refused, by entropy, mutual information, 1 − max probability or predictive sd, and its area). An MNIST / Fashion-MNIST run: test error, NLL, ECE and Brier "
        "from --num-samples posterior draws; per-image predictive variance and expected error rate; the "
        "misclassified images the model was surest of and the least confident ones; out-of-distribution "
        "detection on uniform noise and Fashion-MNIST (share rejected by max class probability < tau, AUROC "
        "of predictive entropy and of mutual information); selective prediction as for tables; accuracy, ECE and NLL "
        "under dataset shift (the test images rotated 0-180 degrees, under noise, blur and reduced contrast; shift.png). Writes DIR/evaluation.{json,md,npz} and PNG figures.",
        formatter_class=DefaultsOnce,
    )
    p.add_argument("dir", help="run folder written by `bnnpp fit --out DIR` (posterior.nc, metrics.json)")
    p.add_argument(
        "--data",
        default=None,
        metavar="FILE",
        help="table runs: labelled rows to score, a .csv with the features "
        "and the target column (any order; other columns ignored) or an .npz with x and y (default: the run's test split)",
    )
    p.add_argument("--target", default=None, help="the --data CSV's target column (default: the run's target)")
    p.add_argument(
        "--data-dir", default=None, help="image runs: folder with the IDX files or their parent (default: the one in DIR/metrics.json)"
    )
    p.add_argument(
        "--num-samples",
        type=int,
        default=None,
        help="posterior draws per prediction (default: 100 for images, every draw the run kept for tables)",
    )
    p.add_argument(
        "--tau", type=float, default=None, help="image runs: reject an input when its largest class probability is below tau (default 0.2)"
    )
    p.add_argument(
        "--ood",
        default=None,
        help=f"image runs: comma-separated out-of-distribution sets (noise, fashion_mnist) or 'none' (default {','.join(OOD_SETS)})",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="image runs: images per prediction call (default: bounded by draws × image size, at most 1000)",
    )
    p.add_argument(
        "--shift",
        type=int,
        default=None,
        help="image runs: score the first N test images rotated (0-180 degrees) and "
        "corrupted (noise, blur, contrast): a table in evaluation.md and shift.png; 0 skips it (default 1000)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the noise images and of prediction")
    p.set_defaults(handler=run)


def _is_image_run(run_dir: str) -> bool:
    _, report = runs.check_run_dir(run_dir, images=False)
    return report.get("data") in IMAGE_SETS


def run_table(args) -> int:
    """``bnnpp evaluate`` of a table run (see :func:`bnnpp.runs.evaluate_table_run`)."""
    image_flags = [
        f
        for f, v in (
            ("--data-dir", args.data_dir),
            ("--tau", args.tau),
            ("--ood", args.ood),
            ("--batch-size", args.batch_size),
            ("--shift", args.shift),
        )
        if v is not None
    ]
    if image_flags:
        raise ValueError(
            f"{', '.join(image_flags)} apply to image runs; {args.dir} is a table run (its flags: --data, --target, --num-samples)"
        )
    report = runs.evaluate_table_run(args.dir, data_file=args.data, target=args.target, num_samples=args.num_samples, seed=args.seed)
    t = report["test"]
    headline = (
        f"accuracy {t['accuracy']:.3f}, NLL {t['nll']:.4f}, ECE {t['ece']:.4f}"
        if report["task"] == "classification"
        else f"RMSE {t['rmse']:.4g}, NLL {t['nll']:.4f}, 95% coverage {t['coverage_95']:.2f}"
    )
    print(f"{report['data']} ({t['n']} rows) / {report['method']}: {headline} ({report['num_samples']} draws)")
    print(f"wrote {os.path.join(args.dir, 'evaluation.json')}, evaluation.md, {', '.join(report['figures'])}")
    return 0


def run(args) -> int:
    if not 0 <= args.seed < 2**32:
        raise CLIError(f"--seed must be an integer in [0, 2**32), got {args.seed}")
    try:
        if not _is_image_run(args.dir):
            return run_table(args)
        if args.data is not None or args.target is not None:
            raise ValueError(
                f"--data and --target score a table run on new rows; {args.dir} is an image run (its test set is read from --data-dir)"
            )
        spec = ",".join(OOD_SETS) if args.ood is None else args.ood
        ood = () if spec.strip() in ("", "none") else tuple(s.strip() for s in spec.split(","))
        report = runs.evaluate_run(
            args.dir,
            data_dir=args.data_dir,
            num_samples=100 if args.num_samples is None else args.num_samples,
            tau=0.2 if args.tau is None else args.tau,
            ood=ood,
            seed=args.seed,
            batch_size=args.batch_size,
            shift=1000 if args.shift is None else args.shift,
        )
    except (ValueError, TypeError) as e:
        raise CLIError(labelled_rows_message(e) if isinstance(e, ValueError) else str(e)) from None
    except OSError as e:  # a full disk or a read-only run folder: nothing was moved into it
        raise CLIError(
            f"could not write the evaluation into {args.dir} ({e.strerror or e}); nothing half-written was left: "
            "free some space or make it writable"
        ) from None
    report = EvaluationReport.from_json(report)
    t = report.test
    print(
        f"{report.data} / {report.method}: test error {t['error']:.2%}, NLL {t['nll']:.4f}, ECE {t['ece']:.4f}, "
        f"rejected {t['rejected']:.1%} at tau {report.tau:g} ({report.num_samples} draws)"
    )
    for name, o in report.ood.items():
        print(
            f"OOD {name}: rejected {o['rejected']:.1%}, AUROC entropy {o['auroc_entropy']:.3f}, "
            f"mutual information {o['auroc_mutual_information']:.3f}"
        )
    if report.shift:
        acc = {(r["shift"], r["level"]): r["accuracy"] for r in report.shift["rows"]}
        print(
            f"under shift ({report.shift['n']} images): accuracy {acc[('rotation', 0.0)]:.3f} upright, {acc[('rotation', 60.0)]:.3f} "
            f"rotated 60 degrees, {acc[('noise', 0.5)]:.3f} under noise sd 0.5"
        )
    for s in report.skipped:
        print(f"skipped {s}")
    print(f"wrote {os.path.join(args.dir, 'evaluation.json')}, evaluation.md, evaluation.npz, {', '.join(report.figures)}")
    return 0


__getattr__ = runs.deprecated_aliases(
    __name__,
    {name: f"bnnpp.runs.{name}" for name in ("check_run_dir", "open_run", "fashion_like", "evaluate_run")},
)
