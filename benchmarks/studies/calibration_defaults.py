"""Which temperature loss ``temperature_loss="auto"`` picks, and how 90% APS / RAPS sets behave
(u = 1 against randomised) at T = 1, the NLL T and the Brier T, on the per-draw MNIST
probabilities that ``ensemble_scaling.py --cache FOLDER`` stores (the fits of
``temperature_scaling.py``: MLP 784-200-10 on 10,000 training images, calibrated on the next
5,000, scored on the 10,000 test images). numpy only: no refit, the test images only score.

    python benchmarks/studies/ensemble_scaling.py --methods ensemble,map --seeds 0,1,2 --cache /tmp/probs
    python benchmarks/studies/calibration_defaults.py --cache /tmp/probs
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from _common import default_data_dir, machine, write_results  # noqa: E402

SCORES = {"aps": (0.0, 0), "raps": (0.01, 1)}  # (λ, k_reg) as bnnpp.calibrate.fit's defaults


def sets_at(pc, yc, pt, yt, t: float) -> dict:
    """Coverage, mean size and share of empty 90% sets for APS/RAPS, u = 1 and randomised, at ``t``."""
    from bnnpp import calibrate as C

    mc = np.asarray(C.scale_probs(pc, t), np.float64).mean(0)
    mt = np.asarray(C.scale_probs(pt, t), np.float64).mean(0)
    out = {}
    for score, (lam, k) in SCORES.items():
        for randomized in (False, True):
            uc = np.random.default_rng(0).random(len(yc)) if randomized else None
            ut = np.random.default_rng(1).random(len(yt)) if randomized else None
            q = C.conformal_quantile(C.aps_scores(mc, yc, uc, raps_lambda=lam, raps_k=k), 0.1)
            s = C.prediction_sets(mt, float(q), ut, raps_lambda=lam, raps_k=k)
            out[score + (" randomised" if randomized else " u=1")] = {
                "coverage": float(s[np.arange(len(yt)), yt].mean()), "size": float(s.sum(1).mean()), "empty": float((s.sum(1) == 0).mean())}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", required=True, help="ensemble_scaling.py's --cache folder")
    p.add_argument("--methods", default="map,ensemble")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--out", default=os.path.join(HERE, "results", "calibration_defaults"))
    args = p.parse_args(argv)
    import bnnpp
    from bnnpp import calibrate as C
    from bnnpp import metrics

    d = bnnpp.data.load("mnist", default_data_dir(), validation=0, flatten=True)
    yc, yt = np.asarray(d.y_train[10000:15000]), np.asarray(d.y_test)
    rows = []
    for m in args.methods.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            z = np.load(os.path.join(args.cache, f"{m}_{seed}_10000_5000.npz"))
            pc, pt = z["pc"].astype(np.float64), z["pt"].astype(np.float64)
            loss, cv = C.choose_temperature_loss(pc, yc)
            ts = {"T=1": 1.0, **{f"{k} T": C.fit_temperature(pc, yc, k) for k in C.TEMPERATURE_LOSSES}}
            row = {"method": m, "seed": seed, "auto": loss, "cv_ece": dict(zip(C.TEMPERATURE_LOSSES, cv, strict=True)),
                   "temperatures": ts, "test_ece": {k: metrics.ece(np.asarray(C.scale_probs(pt, t), np.float64).mean(0), yt) for k, t in ts.items()},
                   "sets": {k: sets_at(pc, yc, pt, yt, t) for k, t in ts.items()}}
            rows.append(row)
            print(m, seed, loss, {k: round(v, 4) for k, v in row["test_ece"].items()}, flush=True)
    cmd = "python benchmarks/studies/calibration_defaults.py " + " ".join(sys.argv[1:] if argv is None else argv)
    result = {"produced_by": cmd, "date": dt.date.today().isoformat(), "machine": machine(), "rows": rows}
    lines = ["# temperature_loss='auto' and 90% sets on MNIST (cached per-draw probabilities)", "", f"`{cmd}`, {result['date']}, {result['machine']}.", "",
             "| method | seed | out-of-fold ECE nll / brier | auto picks | test ECE at T=1 / nll T / brier T |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['method']} | {r['seed']} | {r['cv_ece']['nll']:.4f} / {r['cv_ece']['brier']:.4f} | {r['auto']} | "
                     + " / ".join(f"{v:.4f}" for v in r["test_ece"].values()) + " |")
    lines += ["", "Sets (coverage, mean size, share empty) on the 10,000 test images:", "",
              "| method | seed | T | " + " | ".join(rows[0]["sets"]["T=1"]) + " |", "|---|---|---|" + "---|" * len(rows[0]["sets"]["T=1"])]
    for r in rows:
        for tname, t in r["temperatures"].items():
            cells = [f"{v['coverage']:.4f}, {v['size']:.3f}, {v['empty']:.3f}" for v in r["sets"][tname].values()]
            lines.append(f"| {r['method']} | {r['seed']} | {tname} ({t:.3f}) | " + " | ".join(cells) + " |")
    write_results(os.path.dirname(args.out), os.path.basename(args.out), result, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
