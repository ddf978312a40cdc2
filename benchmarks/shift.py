"""Accuracy, ECE and NLL of MNIST classifiers under dataset shift (Ovadia et al. 2019): the
test images rotated by 0–180°, and corrupted by Gaussian noise, Gaussian blur and reduced
contrast at increasing severity, all built here from the MNIST IDX files (scipy.ndimage).

Protocol: an MLP (one hidden layer, ReLU) fitted with each method on the first
``--train-subset`` training images (pixels / 255), scored on the first ``--test-subset``
test images under each shift with ``--num-samples`` posterior draws.

* rotation: ``scipy.ndimage.rotate(image, angle, reshape=False, order=1)``, 0, 30, ..., 180°;
* noise: pixels + N(0, s²), s in (0.1, 0.3, 0.5), clipped to [0, 1];
* blur: ``scipy.ndimage.gaussian_filter(image, sigma)``, sigma in (0.5, 1.0, 1.5);
* contrast: ``0.5 + c (pixels − 0.5)``, c in (0.5, 0.3, 0.1).

    python benchmarks/shift.py --methods map,ensemble --train-subset 10000 --test-subset 2000

Short fits (``OPTIONS``) so that it runs on a laptop; the numbers are those of these fits,
not of the methods at their best. Writes ``results/shift.{json,md}`` and ``shift.png``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time

import numpy as np
from _common import default_data_dir, machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))
METHODS = ("map", "ensemble", "multiswag", "bbb", "laplace", "mc_dropout", "sgld")
OPTIONS = {
    "map": {"num_steps": 3000, "batch_size": 128},
    "ensemble": {"num_steps": 3000, "batch_size": 128, "members": 5},
    "multiswag": {"pretrain_steps": 2000, "swag_epochs": 10, "batch_size": 128, "members": 3, "num_samples": 30},
    "bbb": {"epochs": 30, "batch_size": 128, "num_samples": 30},
    "laplace": {"num_steps": 3000, "batch_size": 128, "num_samples": 30, "subset": "last_layer"},
    "mc_dropout": {"num_steps": 3000, "batch_size": 128, "num_samples": 30},
    "sgld": {"batch_size": 128, "burn_in": 2000, "num_samples": 30, "thinning": 20},
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default="map,ensemble")
    p.add_argument("--train-subset", type=int, default=10000)
    p.add_argument("--test-subset", type=int, default=2000)
    p.add_argument("--hidden", type=int, default=200)
    p.add_argument("--num-samples", type=int, default=30)
    p.add_argument("--data-dir", default=default_data_dir())
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results", default=os.path.join(HERE, "results"))
    p.add_argument("--tag", default="")
    args = p.parse_args(argv)
    import bnnpp
    from bnnpp import metrics

    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m not in bnnpp.registered()]
    if unknown:
        raise SystemExit(f"--methods: unknown {', '.join(unknown)}")
    d = bnnpp.data.load("mnist", args.data_dir, validation=0, flatten=True, train_subset=args.train_subset)
    x_test = np.asarray(d.x_test[: args.test_subset], np.float32).reshape(-1, 28, 28)
    y_test = np.asarray(d.y_test[: args.test_subset])
    from bnnpp.evaluation.shift import shifted, shifts

    inputs = {(k, v): shifted(x_test, k, v, args.seed).reshape(len(x_test), -1) for k, v in shifts()}
    cmd = "python benchmarks/shift.py " + " ".join(sys.argv[1:] if argv is None else argv)
    rows: list[dict] = []
    t0 = time.perf_counter()

    def write(done: bool) -> None:
        result = {"benchmark": "shift", "produced_by": cmd, "date": dt.date.today().isoformat(), "machine": machine(),
                  "protocol": (f"MLP 784-{args.hidden}-10 ReLU, N(0,1) weights, pixels / 255 not standardised, fitted on the first {args.train_subset} MNIST training "
                               f"images, scored on the first {args.test_subset} test images; {args.num_samples} draws; options {OPTIONS}"),
                  "complete": done, "seconds": time.perf_counter() - t0, "rows": rows}
        write_results(args.results, "shift" + (f"_{args.tag}" if args.tag else ""), result, markdown(result), _figure(rows))

    for m in methods:
        # pixels in [0, 1] as given: standardising by the training pixels' sd (near 0 at the border) would blow up noise there
        model = bnnpp.models.mlp((args.hidden,), activation="relu", num_classes=10, prior=bnnpp.priors.normal(1.0), standardize=False)
        t = time.perf_counter()
        post = bnnpp.fit(model, (d.x_train, d.y_train), method=m, seed=args.seed, progress=False, **OPTIONS.get(m, {}))
        fit_s = time.perf_counter() - t
        for (kind, level), xs in inputs.items():
            probs = bnnpp.evaluation.predict_probs(post, xs, num_samples=min(args.num_samples, post.num_chains * post.num_draws), seed=args.seed)
            mean = probs.mean(0)
            rows.append({"method": m, "shift": kind, "level": level, "accuracy": metrics.accuracy(mean, y_test),
                         "ece": metrics.ece(mean, y_test), "nll": metrics.nll(mean, y_test), "fit_seconds": fit_s})
        print(f"{m}: fitted in {fit_s:.0f} s; accuracy at 0° {rows[-len(inputs)]['accuracy']:.3f}, at 180° "
              f"{[r for r in rows if r['method'] == m and r['shift'] == 'rotation'][-1]['accuracy']:.3f}", flush=True)
        write(False)
    write(True)
    return 0


def markdown(result: dict) -> str:
    rows = result["rows"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    lines = ["# MNIST under dataset shift: accuracy / ECE / NLL", "", f"`{result['produced_by']}`, {result['date']}, {result['machine']}.",
             "", result["protocol"] + ("" if result["complete"] else " PARTIAL: the run did not reach the end."), ""]
    for stat in ("accuracy", "ece", "nll"):
        lines += [f"## {stat}", "", "| shift | level | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
        keys = list(dict.fromkeys((r["shift"], r["level"]) for r in rows))
        by = {(r["method"], r["shift"], r["level"]): r for r in rows}
        for kind, level in keys:
            cells = [f"{by[(m, kind, level)][stat]:.4f}" if (m, kind, level) in by else "—" for m in methods]
            lines.append(f"| {kind} | {level:g} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _figure(rows):
    if not rows:
        return {}
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 3.5), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, stat in zip(axes, ("accuracy", "ece", "nll"), strict=True):
        for m in dict.fromkeys(r["method"] for r in rows):
            sel = [r for r in rows if r["method"] == m and r["shift"] == "rotation"]
            ax.plot([r["level"] for r in sel], [r[stat] for r in sel], marker="o", label=m)
        ax.set_xlabel("rotation (degrees)")
        ax.set_ylabel(stat)
    axes[0].legend(fontsize="small")
    return {"shift.png": fig}


if __name__ == "__main__":
    sys.exit(main())
