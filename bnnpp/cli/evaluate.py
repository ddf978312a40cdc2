"""``bnnpp evaluate DIR``: test error, calibration, per-image uncertainty and out-of-distribution
detection of an MNIST / Fashion-MNIST run written by ``bnnpp fit``; writes evaluation.json,
evaluation.md, evaluation.npz and the figures into DIR (see :mod:`bnnpp.evaluation`)."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence

import numpy as np

from bnnpp.cli._errors import CLIError

__all__ = ["OOD_SETS", "add_parser", "evaluate_run", "open_run"]

OOD_SETS = ("noise", "fashion_mnist")


def check_run_dir(run_dir: str | os.PathLike) -> tuple[str, dict]:
    """Check that ``run_dir`` is a ``bnnpp fit`` image run; returns its path and its
    ``metrics.json`` dict. Reads no posterior and no data (cheap, for up-front checks)."""
    from bnnpp.data import IMAGE_SETS

    run_dir = os.fspath(run_dir)
    if not os.path.isdir(run_dir):
        raise ValueError(f"{run_dir} is not a folder: pass the --out folder of `bnnpp fit`")
    if not os.path.isfile(os.path.join(run_dir, "posterior.nc")):
        raise ValueError(f"{run_dir} holds no posterior.nc: pass a folder written by `bnnpp fit --out DIR`")
    path = os.path.join(run_dir, "metrics.json")
    if not os.path.isfile(path):
        raise ValueError(f"{run_dir} holds no metrics.json, which records the run's data: fit it again with `bnnpp fit`")
    try:
        with open(path) as f:
            report = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}): fit the run again") from None
    if report.get("data") not in IMAGE_SETS:
        raise ValueError(
            f"{run_dir} was fitted to {report.get('data')!r}; this command works on image runs "
            f"({', '.join(IMAGE_SETS)}): fit one with `bnnpp fit --data mnist ...`"
        )
    return run_dir, report


def open_run(run_dir: str | os.PathLike, data_dir: str | os.PathLike | None = None):
    """Load a ``bnnpp fit`` image run.

    Args:
        run_dir: the run folder (``posterior.nc``, ``metrics.json``).
        data_dir: where the IDX files are, overriding the folder recorded in ``metrics.json``.

    Returns:
        ``(posterior, report, dataset)``: the :class:`~bnnpp.Posterior`, the ``metrics.json``
        dict (with ``data_dir`` replaced when given) and the run's :class:`~bnnpp.data.Dataset`.
    """
    import bnnpp
    from bnnpp.cli.fit import load_dataset_from_report

    run_dir, report = check_run_dir(run_dir)
    if data_dir is not None:
        if not os.path.isdir(data_dir):
            raise ValueError(f"--data-dir {data_dir} is not a folder")
        report = dict(report, data_dir=os.path.abspath(data_dir))
    dataset = load_dataset_from_report(report)
    posterior = bnnpp.load(os.path.join(run_dir, "posterior.nc"))
    if tuple(posterior.x.shape[1:]) != tuple(dataset.x_test.shape[1:]):
        raise ValueError(
            f"the posterior takes inputs of shape {posterior.x.shape[1:]} but the recorded data has {dataset.x_test.shape[1:]}: "
            "metrics.json does not belong to posterior.nc"
        )
    return posterior, report, dataset


def fashion_like(report: dict, dataset) -> np.ndarray:
    """The Fashion-MNIST test images, normalised and shaped like the run's MNIST inputs.

    Looked up in a folder named ``fashion_mnist`` inside the run's ``data_dir`` or beside it
    (``shared/data/mnist`` → ``shared/data/fashion_mnist``; never the MNIST folder itself,
    whose files have the same names), else by the default search of
    :func:`bnnpp.data.load`. With ``normalize="standardize"`` the MNIST training mean and sd
    are applied (not Fashion-MNIST's own), so both sets go through the same transformation.

    Returns:
        float32 ``(10000, *dataset.x_test.shape[1:])``.
    """
    import bnnpp

    d = report.get("data_dir")
    candidates = [os.path.join(p, "fashion_mnist") for p in (d, os.path.dirname(os.path.abspath(d)))] if d else []
    candidates = [c for c in candidates if os.path.isdir(c)] or [None]
    normalize, flatten = report.get("normalize", "255"), bool(report.get("flatten", False))
    errors = []
    for folder in candidates:
        try:
            raw = bnnpp.data.load("fashion_mnist", folder, normalize="255" if normalize == "standardize" else normalize, validation=0, flatten=flatten)
            break
        except ValueError as e:
            errors.append(str(e))
    else:
        raise ValueError("; ".join(errors))
    x = raw.x_test
    if normalize == "standardize":  # the run's own shift and scale, in units of pixel/255
        ref = bnnpp.data.load(report["data"], d, normalize="255", validation=report.get("validation", 10000), flatten=flatten)
        mean, sd = ref.x_train.mean(dtype=np.float64), ref.x_train.std(dtype=np.float64)
        x = ((x - np.float32(mean)) / np.float32(sd)).astype(np.float32)
    if x.shape == dataset.x_test.shape and np.array_equal(x[:10], dataset.x_test[:10]):
        raise ValueError("the Fashion-MNIST files found hold the run's own test images; put the real ones in a fashion_mnist folder")
    return x


def evaluate_run(
    run_dir: str | os.PathLike,
    *,
    data_dir: str | os.PathLike | None = None,
    num_samples: int = 100,
    tau: float = 0.2,
    ood: Sequence[str] = OOD_SETS,
    seed: int = 0,
    batch_size: int | None = None,
) -> dict:
    """Evaluate an image run of ``bnnpp fit`` and write ``evaluation.json``, ``evaluation.md``,
    ``evaluation.npz`` (per-image mean probabilities, variance, expected error rate, entropy,
    mutual information, labels) and the figures into it — all written to a temporary folder
    first and moved into place.

    Args:
        run_dir: the run folder.
        data_dir: where the IDX files are (default: the folder recorded in ``metrics.json``).
        num_samples: posterior draws per prediction (≥ 10 recommended; at most the draws kept).
        tau: reject an input when its largest predictive class probability is below τ.
        ood: any of ``"noise"`` (uniform noise over the inputs' value range, as many images as
            the test set, seed ``seed``) and ``"fashion_mnist"`` (its 10,000 test images,
            normalised as the run's data; skipped for a Fashion-MNIST run or when not found).
        seed, batch_size: see :func:`bnnpp.evaluation.evaluate`.

    Returns:
        The report written to ``evaluation.json`` (see :func:`bnnpp.evaluation.evaluate`),
        plus ``run_dir``, ``data``, ``method``, ``skipped`` and ``seconds``.
    """
    from bnnpp import evaluation

    evaluation.check_tau(tau)
    evaluation.check_count(num_samples, "num_samples")
    if batch_size is not None:
        evaluation.check_count(batch_size, "batch_size")
    ood = tuple(ood)
    unknown = [o for o in ood if o not in OOD_SETS]
    if unknown:
        raise ValueError(f"unknown OOD set(s) {', '.join(unknown)}; choose from {', '.join(OOD_SETS)}")
    check_run_dir(run_dir)
    t0 = time.perf_counter()
    posterior, report, dataset = open_run(run_dir, data_dir)
    ood_sets, skipped = {}, []
    for name in ood:
        if name == "noise":
            ood_sets["noise"] = evaluation.uniform_noise(dataset.x_test, seed=seed)
        elif dataset.name == "fashion_mnist":
            skipped.append("fashion_mnist: it is the run's own data")
        else:
            try:
                ood_sets["fashion_mnist"] = fashion_like(report, dataset)
            except ValueError as e:
                skipped.append(f"fashion_mnist: not found ({e})")
    load_s = time.perf_counter() - t0
    result, figs, per_image = evaluation.evaluate(
        posterior, dataset.x_test, dataset.y_test, ood=ood_sets, num_samples=num_samples, tau=tau, seed=seed, batch_size=batch_size
    )
    result = {"run_dir": os.fspath(run_dir), "data": dataset.name, "method": posterior.info.get("method"), **result, "skipped": skipped}
    result["seconds"]["load"] = load_s
    evaluation.write_report(run_dir, result, figs, per_image)
    return result


def add_parser(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="test error, calibration, per-image uncertainty and OOD detection of an image run",
        description="Evaluate an MNIST / Fashion-MNIST run of `bnnpp fit`: test error, NLL, ECE and Brier "
        "from --num-samples posterior draws; per-image predictive variance and expected error rate; the "
        "misclassified images the model was surest of and the least confident ones; out-of-distribution "
        "detection on uniform noise and Fashion-MNIST (share rejected by max class probability < tau, AUROC "
        "of predictive entropy and of mutual information). Writes DIR/evaluation.{json,md,npz} and PNG figures.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
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
        report = evaluate_run(
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
