"""``bnnpp evaluate DIR``: test error, calibration, per-image uncertainty and out-of-distribution
detection of an MNIST / Fashion-MNIST run written by ``bnnpp fit``; writes evaluation.json,
evaluation.md, evaluation.npz and the figures into DIR (the work is
:func:`bnnpp.runs.evaluate_run`; see :mod:`bnnpp.evaluation`)."""

from __future__ import annotations

import os

from bnnpp import runs
from bnnpp.cli._errors import CLIError
from bnnpp.cli._help import DefaultsOnce
from bnnpp.runs import OOD_SETS

__all__ = ["OOD_SETS", "add_parser", "run"]


def add_parser(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="test error, calibration, per-image uncertainty and OOD detection of an image run",
        description="Evaluate an MNIST / Fashion-MNIST run of `bnnpp fit`: test error, NLL, ECE and Brier "
        "from --num-samples posterior draws; per-image predictive variance and expected error rate; the "
        "misclassified images the model was surest of and the least confident ones; out-of-distribution "
        "detection on uniform noise and Fashion-MNIST (share rejected by max class probability < tau, AUROC "
        "of predictive entropy and of mutual information). Writes DIR/evaluation.{json,md,npz} and PNG figures.",
        formatter_class=DefaultsOnce,
    )
    p.add_argument("dir", help="run folder written by `bnnpp fit --out DIR` (posterior.nc, metrics.json)")
    p.add_argument("--data-dir", default=None, help="folder with the IDX files or their parent (default: the one in DIR/metrics.json)")
    p.add_argument("--num-samples", type=int, default=100, help="posterior draws per prediction")
    p.add_argument("--tau", type=float, default=0.2, help="reject an input when its largest class probability is below tau")
    p.add_argument("--ood", default=",".join(OOD_SETS), help="comma-separated out-of-distribution sets (noise, fashion_mnist) or 'none'")
    p.add_argument("--batch-size", type=int, default=None, help="images per prediction call (default: bounded by draws × image size, at most 1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the noise images and of prediction")
    p.set_defaults(handler=run)


def run(args) -> int:
    ood = () if args.ood.strip() in ("", "none") else tuple(s.strip() for s in args.ood.split(","))
    try:
        report = runs.evaluate_run(
            args.dir, data_dir=args.data_dir, num_samples=args.num_samples, tau=args.tau, ood=ood, seed=args.seed, batch_size=args.batch_size
        )
    except (ValueError, TypeError) as e:
        raise CLIError(str(e)) from None
    t = report["test"]
    print(
        f"{report['data']} / {report['method']}: test error {t['error']:.2%}, NLL {t['nll']:.4f}, ECE {t['ece']:.4f}, "
        f"rejected {t['rejected']:.1%} at tau {report['tau']:g} ({report['num_samples']} draws)"
    )
    for name, o in report["ood"].items():
        print(
            f"OOD {name}: rejected {o['rejected']:.1%}, AUROC entropy {o['auroc_entropy']:.3f}, "
            f"mutual information {o['auroc_mutual_information']:.3f}"
        )
    for s in report["skipped"]:
        print(f"skipped {s}")
    print(f"wrote {os.path.join(args.dir, 'evaluation.json')}, evaluation.md, evaluation.npz, {', '.join(report['figures'])}")
    return 0


__getattr__ = runs.deprecated_aliases(
    __name__,
    {name: f"bnnpp.runs.{name}" for name in ("check_run_dir", "open_run", "fashion_like", "evaluate_run")},
)
