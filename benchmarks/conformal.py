"""Coverage and width of 90% predictive intervals on the UCI regression splits, raw posterior
against split-conformal (:mod:`bnnpp.calibrate`).

Protocol per set, split and method: the split's training rows are divided 80/20 (seeded, as
``bnnpp.data.uci(..., validation=0.2)``); the method is fitted on the 80% (inputs and targets
standardised on it; one hidden layer of 50 ReLU units, weights ``N(0, 1)``, one learned
Gaussian noise sd), the 20% is the calibration split, and the test split is scored:

* raw: the central 90% interval of the posterior-predictive mixture (its 5% and 95% quantiles);
* conformal, normalised: ``μ ± q̂ σ`` with ``q̂`` the ⌈(n+1)·0.9⌉-th smallest ``|y − μ|/σ``
  on the calibration split;
* conformal, CQR: the raw interval widened (or narrowed) by the conformal quantile of
  ``max(lo − y, y − hi)`` (Romano et al. 2019).

Reported: mean test coverage over splits (target 0.90) and mean interval width in the
target's original units. Fits are short (``OPTIONS``) so that the table runs on a laptop;
the guarantee does not depend on the fit's quality, the width does.

    python benchmarks/conformal.py --sets yacht,boston --splits 0,1,2 --methods map,advi
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

METHODS = ("map", "laplace", "advi", "bbb", "ensemble", "mc_dropout")
OPTIONS = {
    "map": {"num_steps": 3000},
    "laplace": {"num_steps": 3000, "num_samples": 100},
    "advi": {"num_steps": 5000, "num_samples": 100},
    "bbb": {"num_steps": 5000, "num_samples": 100},
    "ensemble": {"num_steps": 3000, "members": 5},
    "mc_dropout": {"num_steps": 3000, "num_samples": 100},
    "nuts": {"num_chains": 1, "num_warmup": 300, "num_samples": 200},
    "swag": {"num_samples": 100},
}
ALPHA = 0.1


def one(name: str, split: int, method: str, data_dir: str, seed: int) -> dict:
    """Raw and conformal coverage and width on one split."""
    import bnnpp
    from bnnpp import calibrate

    d = bnnpp.data.uci(name, split, data_dir, validation=0.2, seed=seed)
    model = bnnpp.models.mlp((50,), activation="relu", likelihood="gaussian", prior=bnnpp.priors.normal(1.0))
    t0 = time.perf_counter()
    post = bnnpp.fit(model, (d.x_train, d.y_train), method=method, seed=seed + split, progress=False, **OPTIONS.get(method, {}))
    fit_s = time.perf_counter() - t0
    pred_cal, pred_test = post.predict(d.x_val), post.predict(d.x_test)
    y = np.asarray(d.y_test, np.float64)
    scale = float(d.y_scale)

    def scored(lo, hi):
        return {"coverage": float(np.mean((y >= lo) & (y <= hi))), "width": float(np.mean(hi - lo) * scale)}

    lo, hi = pred_test.quantiles([ALPHA / 2, 1 - ALPHA / 2])
    row = {"set": name, "split": split, "method": method, "n_fit": len(d.y_train), "n_cal": len(d.y_val),
           "n_test": len(y), "fit_seconds": fit_s, "raw": scored(lo, hi)}
    for score in calibrate.REGRESSION_SCORES:
        cal = calibrate.fit(pred_cal, d.y_val, ALPHA, score=score)
        out = cal.apply(pred_test)
        row[score] = {**scored(out.interval_lo, out.interval_hi), "threshold": cal.threshold[0]}
    return row


def summary(rows: list[dict]) -> list[dict]:
    """Mean coverage and width per (set, method) over its splits, and over every set per method."""
    keys = list(dict.fromkeys((r["set"], r["method"]) for r in rows)) + [("all", m) for m in dict.fromkeys(r["method"] for r in rows)]
    out = []
    for s, m in keys:
        sel = [r for r in rows if r["method"] == m and (s == "all" or r["set"] == s)]
        out.append({"set": s, "method": m, "splits": len(sel), **{
            f"{kind}_{stat}": float(np.mean([r[kind][stat] for r in sel]))
            for kind in ("raw", *("normalized", "cqr")) for stat in ("coverage", "width")}})
    return out


def markdown(result: dict) -> str:
    lines = [
        "# 90% predictive intervals on UCI: raw posterior vs split conformal",
        "",
        f"`{result['produced_by']}`, {result['date']}, {result['machine']}.",
        "",
        result["protocol"] + ("" if result["complete"] else " PARTIAL: written after every fit; the run did not reach the end."),
        "",
        "Coverage: share of test targets inside the interval (target 0.90). Width: mean interval width in the target's units.",
        "",
        "| set | method | splits | raw coverage | raw width | conformal (normalised) coverage | width | conformal (CQR) coverage | width |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["summary"]:
        lines.append(f"| {r['set']} | {r['method']} | {r['splits']} | {r['raw_coverage']:.3f} | {r['raw_width']:.3g} | "
                     f"{r['normalized_coverage']:.3f} | {r['normalized_width']:.3g} | {r['cqr_coverage']:.3f} | {r['cqr_width']:.3g} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sets", default="yacht,boston,energy,concrete")
    p.add_argument("--splits", default="0,1,2")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--data-dir", default=default_data_dir())
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--results", default=os.path.join(HERE, "results"))
    p.add_argument("--tag", default="")
    args = p.parse_args(argv)
    import bnnpp

    sets = [s for s in args.sets.split(",") if s]
    methods = [m for m in args.methods.split(",") if m]
    unknown = [m for m in methods if m not in bnnpp.registered()]
    if unknown:
        raise SystemExit(f"--methods: unknown {', '.join(unknown)}; registered: {', '.join(bnnpp.registered())}")
    splits = [int(s) for s in args.splits.split(",") if s]
    cmd = "python benchmarks/conformal.py " + " ".join(sys.argv[1:] if argv is None else argv)
    name = "conformal" + (f"_{args.tag}" if args.tag else "")
    rows: list[dict] = []
    t0 = time.perf_counter()

    def write(done: bool) -> None:
        result = {
            "benchmark": "conformal", "produced_by": cmd, "date": dt.date.today().isoformat(), "machine": machine(),
            "protocol": (f"alpha = {ALPHA}; 1 hidden layer of 50 ReLU units, N(0,1) weights, one learned Gaussian noise sd; "
                         "fitted on 80% of each training split, calibrated on the other 20% (seeded), scored on the test split; "
                         f"method options {OPTIONS}."),
            "complete": done, "seconds": time.perf_counter() - t0, "summary": summary(rows), "rows": rows,
        }
        write_results(args.results, name, result, markdown(result))

    for s in sets:
        for m in methods:
            for k in splits:
                rows.append(one(s, k, m, args.data_dir, args.seed))
                r = rows[-1]
                print(f"{s} split {k} {m}: raw {r['raw']['coverage']:.3f}, normalised {r['normalized']['coverage']:.3f}, "
                      f"cqr {r['cqr']['coverage']:.3f} ({r['fit_seconds']:.0f} s)", flush=True)
                write(False)
    write(True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
