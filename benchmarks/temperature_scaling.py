"""Temperature scaling (Guo et al. 2017) and APS sets of MNIST classifiers, via
``Posterior.calibrate``: test ECE and NLL before and after, the fitted T, and the coverage and
mean size of 90% conformal sets (Romano et al. 2020).

Protocol: an MLP 784-200-10 (ReLU, N(0,1) weights, pixels / 255) fitted on the first
``--train-subset`` training images; the calibration split is the next ``--calibration``
training images (never fitted); scores on the 10,000 test images. Short fits.

    python benchmarks/temperature_scaling.py --methods map,ensemble
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
# the methods' own start (init_loc="glorot": the 784-200 layer's weights in ±0.08); the former
# default U(±2) gave logits in the hundreds and an overconfident MAP (T = 24, ECE 0.056 after
# scaling: benchmarks/README.md, temperature scaling)
OPTIONS = {"map": {"num_steps": 3000, "batch_size": 128},
           "ensemble": {"num_steps": 3000, "batch_size": 128, "members": 5},
           "mc_dropout": {"num_steps": 3000, "batch_size": 128, "num_samples": 30}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--methods", default="map,ensemble")
    p.add_argument("--train-subset", type=int, default=10000)
    p.add_argument("--calibration", type=int, default=5000)
    p.add_argument("--temperature-loss", default="auto", choices=("auto", "nll", "brier"),
                   help="what the temperature minimises on the calibration split (auto: the library's default, by 5-fold ECE on it)")
    p.add_argument("--seeds", default="0", help="fit seeds, comma-separated (one row per method and seed)")
    p.add_argument("--data-dir", default=default_data_dir())
    p.add_argument("--results", default=os.path.join(HERE, "results"))
    p.add_argument("--out", default="temperature_scaling", help="result files' name (results/OUT.{json,md})")
    args = p.parse_args(argv)
    import bnnpp
    from bnnpp import metrics
    from bnnpp.evaluation import predict_probs

    d = bnnpp.data.load("mnist", args.data_dir, validation=0, flatten=True)
    n, c = args.train_subset, args.calibration
    x_fit, y_fit = d.x_train[:n], d.y_train[:n]
    x_cal, y_cal = d.x_train[n : n + c], d.y_train[n : n + c]
    rows = []
    t0 = time.perf_counter()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    for m, seed in [(m, s) for m in args.methods.split(",") if m for s in seeds]:
        model = bnnpp.models.mlp((200,), activation="relu", num_classes=10, prior=bnnpp.priors.normal(1.0), standardize=False)
        post = bnnpp.fit(model, (x_fit, y_fit), method=m, seed=seed, progress=False, **OPTIONS.get(m, {}))
        raw = predict_probs(post, d.x_test).mean(0)
        # the default sets: randomised APS (a fresh seed per batch of test rows)
        cal = post.calibrate(x_cal, y_cal, alpha=0.1, temperature_loss=args.temperature_loss)
        probs = predict_probs(cal, d.x_test)
        sets_r = np.concatenate([cal.predict(d.x_test[i : i + 1000], seed=i).sets for i in range(0, len(d.x_test), 1000)])
        # u = 1: with saturated probabilities the threshold lies just below 1 (empty or large sets)
        cal_1 = post.calibrate(x_cal, y_cal, alpha=0.1, randomized=False, temperature_loss=args.temperature_loss)
        sets = np.concatenate([cal_1.predict(d.x_test[i : i + 1000], seed=0).sets for i in range(0, len(d.x_test), 1000)])
        mean = probs.mean(0)
        rows.append({"method": m, "seed": seed, "temperature": cal.calibration.temperature,
                     "temperature_loss": cal.calibration.temperature_loss, "temperature_cv_ece": cal.calibration.temperature_cv_ece,
                     "ece_raw": metrics.ece(raw, d.y_test), "ece_scaled": metrics.ece(mean, d.y_test),
                     "nll_raw": metrics.nll(raw, d.y_test), "nll_scaled": metrics.nll(mean, d.y_test),
                     "accuracy": metrics.accuracy(mean, d.y_test),
                     "set_coverage": float(sets[np.arange(len(d.y_test)), d.y_test].mean()), "set_size": float(sets.sum(1).mean()),
                     "randomized_set_coverage": float(sets_r[np.arange(len(d.y_test)), d.y_test].mean()),
                     "randomized_set_size": float(sets_r.sum(1).mean()),
                     "randomized_set_empty": float((sets_r.sum(1) == 0).mean()), "set_empty": float((sets.sum(1) == 0).mean())})
        print(rows[-1], flush=True)
    cmd = "python benchmarks/temperature_scaling.py " + " ".join(sys.argv[1:] if argv is None else argv)
    result = {"benchmark": "temperature_scaling", "produced_by": cmd, "date": dt.date.today().isoformat(), "machine": machine(),
              "protocol": f"MLP 784-200-10, fit on the first {n:,} training images, calibrated on the next {c}, scored on the 10,000 "
                          f"test images; options {OPTIONS}; temperature by {args.temperature_loss}", "seconds": time.perf_counter() - t0, "rows": rows}
    lines = ["# Temperature scaling and 90% APS sets on MNIST", "", f"`{cmd}`, {result['date']}, {result['machine']}.", "",
             result["protocol"], "", "| method | seed | accuracy | T (loss) | ECE raw | ECE scaled | NLL raw | NLL scaled | u = 1 set coverage | size | empty | "
             "randomised set coverage | size | empty |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['method']} | {r['seed']} | {r['accuracy']:.4f} | {r['temperature']:.3f} ({r['temperature_loss']}) | {r['ece_raw']:.4f} | "
              f"{r['ece_scaled']:.4f} | {r['nll_raw']:.4f} | {r['nll_scaled']:.4f} | {r['set_coverage']:.4f} | {r['set_size']:.3f} | "
              f"{r['set_empty']:.3f} | {r['randomized_set_coverage']:.4f} | {r['randomized_set_size']:.3f} | {r['randomized_set_empty']:.3f} |"
              for r in rows]
    if len(seeds) > 1:
        lines += ["", "Mean over the seeds:", "", "| method | ECE raw | ECE scaled (mean ± sd) | NLL scaled |", "|---|---|---|---|"]
        for m in dict.fromkeys(r["method"] for r in rows):
            rs = [r for r in rows if r["method"] == m]
            e = np.array([r["ece_scaled"] for r in rs])
            lines.append(f"| {m} | {np.mean([r['ece_raw'] for r in rs]):.4f} | {e.mean():.4f} ± {e.std(ddof=1):.4f} | "
                         f"{np.mean([r['nll_scaled'] for r in rs]):.4f} |")
    write_results(args.results, args.out, result, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
