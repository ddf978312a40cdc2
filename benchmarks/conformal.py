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

One calibration split and one small test split give a coverage whose sd is 4–6 points per
cell (binomial noise of the test rows plus the Beta(⌈(n+1)(1−α)⌉, ·) spread of the realised
threshold), too coarse to check "90% ± 2%" on a few cells. So every fit is also scored as
Angelopoulos & Bates (2021, §3.5 "checking for correct coverage") recommend: the rows the fit
never saw (calibration ∪ test) are re-split ``--resplits`` times at random into a calibration
and a test part of the same sizes, and the coverage is averaged over the re-splits (column
"expected"): for exchangeable rows its expectation lies in [1 − α, 1 − α + 1/(n_cal + 1)]
whatever the predictor, and the re-splits remove the noise of one draw of the calibration set.

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

METHODS = ("map", "laplace", "advi", "bbb", "ensemble", "swag", "multiswag", "mc_dropout", "sgld", "nuts")
OPTIONS = {
    "map": {"num_steps": 3000},
    "laplace": {"num_steps": 3000, "num_samples": 100},
    "advi": {"num_steps": 5000, "num_samples": 100},
    "bbb": {"num_steps": 5000, "num_samples": 100},
    "ensemble": {"num_steps": 3000, "members": 5},
    "mc_dropout": {"num_steps": 3000, "num_samples": 100},
    # the default SWAG-phase rate, min(0.01, 1.5 / the loss's curvature at the mode): the former fixed
    # 0.01 diverged on yacht, whose noise sd is ~2% of the targets' (SWAG-phase loss 4e11, then a
    # noise-only fit; benchmarks/README.md, conformal.py)
    "swag": {"num_samples": 100},
    "multiswag": {"members": 3, "num_samples": 30},
    "sgld": {"num_chains": 2, "burn_in": 2000, "num_samples": 100, "thinning": 10},
    "nuts": {"num_chains": 1, "num_warmup": 300, "num_samples": 200},
}
RESPLITS = 2000
ALPHA = 0.1


def resplit_coverage(scores, width_of, n_cal: int, alpha: float, resplits: int, seed: int) -> dict:
    """Split-conformal coverage and width averaged over random re-splits of held-out rows.

    Args:
        scores: ``(m,)`` conformity scores of all held-out rows (a row is covered when its score
            is at most the threshold).
        width_of: maps a threshold ``(R,)`` and row indices ``(R, m - n_cal)`` to the interval
            widths ``(R, m - n_cal)``.
        n_cal: calibration rows per re-split (the rest are the test rows).
        alpha, resplits, seed: miscoverage, number of re-splits R and their seed.

    Returns:
        ``{"coverage", "coverage_sd", "width"}``: the mean over the R re-splits of the test
        coverage, its sd over them, and the mean width (in the scores' units).
    """
    from bnnpp.calibrate import conformal_rank

    m = len(scores)
    perm = np.argsort(np.random.default_rng(seed).random((resplits, m)), axis=1)
    cal, test = perm[:, :n_cal], perm[:, n_cal:]
    k = conformal_rank(n_cal, alpha)
    q = np.sort(scores[cal], axis=1)[:, k - 1] if k <= n_cal else np.full(resplits, np.inf)
    cov = (scores[test] <= q[:, None]).mean(1)
    return {"coverage": float(cov.mean()), "coverage_sd": float(cov.std()), "width": float(width_of(q, test).mean())}


def one(name: str, split: int, method: str, data_dir: str, seed: int, resplits: int = RESPLITS) -> dict:
    """Raw and conformal coverage and width on one split, and the conformal coverage averaged
    over ``resplits`` re-splits of the held-out rows (:func:`resplit_coverage`)."""
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
    # every held-out row (calibration ∪ test), for the re-splits: one prediction, then scores
    pool = post.predict(np.concatenate([d.x_val, d.x_test]))
    y_pool = np.concatenate([np.asarray(d.y_val, np.float64), y])
    mu, sd = pool.mean, pool.std
    lo_p, hi_p = pool.quantiles([ALPHA / 2, 1 - ALPHA / 2])
    pool_scores = {"normalized": calibrate.normalized_scores(mu, sd, y_pool), "cqr": calibrate.cqr_scores(lo_p, hi_p, y_pool)}
    pool_width = {"normalized": lambda q, idx: 2 * q[:, None] * sd[idx] * scale,
                  "cqr": lambda q, idx: (hi_p[idx] - lo_p[idx] + 2 * q[:, None]) * scale}

    def scored(lo, hi):
        return {"coverage": float(np.mean((y >= lo) & (y <= hi))), "width": float(np.mean(hi - lo) * scale)}

    lo, hi = pred_test.quantiles([ALPHA / 2, 1 - ALPHA / 2])
    row = {"set": name, "split": split, "method": method, "n_fit": len(d.y_train), "n_cal": len(d.y_val),
           "n_test": len(y), "fit_seconds": fit_s, "raw": scored(lo, hi)}
    for score in calibrate.REGRESSION_SCORES:
        cal = calibrate.fit(pred_cal, d.y_val, ALPHA, score=score)
        out = cal.apply(pred_test)
        row[score] = {**scored(out.interval_lo, out.interval_hi), "threshold": cal.threshold[0]}
        row[f"{score}_resplit"] = resplit_coverage(pool_scores[score], pool_width[score], len(d.y_val), ALPHA, resplits, seed + split)
    row["raw_resplit"] = {"coverage": float(np.mean((y_pool >= lo_p) & (y_pool <= hi_p))), "width": float(np.mean(hi_p - lo_p) * scale)}
    return row


def summary(rows: list[dict]) -> list[dict]:
    """Mean coverage and width per (set, method) over its splits, and over every set per method."""
    keys = list(dict.fromkeys((r["set"], r["method"]) for r in rows)) + [("all", m) for m in dict.fromkeys(r["method"] for r in rows)]
    out = []
    for s, m in keys:
        sel = [r for r in rows if r["method"] == m and (s == "all" or r["set"] == s)]
        out.append({"set": s, "method": m, "splits": len(sel), **{
            f"{kind}_{stat}": float(np.mean([r[kind][stat] for r in sel]))
            for kind in ("raw", "normalized", "cqr", "normalized_resplit", "cqr_resplit") for stat in ("coverage", "width")},
            "n_cal": float(np.mean([r["n_cal"] for r in sel])), "fit_seconds": float(np.mean([r["fit_seconds"] for r in sel]))})
    return out


def markdown(result: dict) -> str:
    lines = [
        "# 90% predictive intervals on UCI: raw posterior vs split conformal",
        "",
        f"`{result['produced_by']}`, {result['date']}, {result['machine']}.",
        "",
        result["protocol"] + ("" if result["complete"] else " PARTIAL: written after every fit; the run did not reach the end."),
        "",
        "Coverage: share of test targets inside the interval (target 0.90). Width: mean interval width in the target's units. "
        "'test split': calibrated on the 20% calibration rows, scored on the split's test rows. 'expected': the mean over "
        f"{result.get('resplits', RESPLITS)} random re-splits of those held-out rows into calibration and test parts of the same sizes "
        "(its expectation lies in [0.90, 0.90 + 1/(n_cal + 1)] for any predictor). Widths are of the test split.",
        "",
        "| set | method | splits | raw coverage | raw width | normalised: test split | expected | width | CQR: test split | expected | width | fit s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["summary"]:
        lines.append(f"| {r['set']} | {r['method']} | {r['splits']} | {r['raw_coverage']:.3f} | {r['raw_width']:.3g} | "
                     f"{r['normalized_coverage']:.3f} | {r['normalized_resplit_coverage']:.3f} | {r['normalized_width']:.3g} | "
                     f"{r['cqr_coverage']:.3f} | {r['cqr_resplit_coverage']:.3f} | {r['cqr_width']:.3g} | {r['fit_seconds']:.0f} |")
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
    p.add_argument("--nuts-sets", default="yacht,boston", help="the sets nuts runs on (its cost grows with the rows; 'all': every set)")
    p.add_argument("--resplits", type=int, default=RESPLITS, help="random calibration/test re-splits of the held-out rows per fit")
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
                         f"method options {OPTIONS}; nuts on {args.nuts_sets} only."),
            "complete": done, "resplits": args.resplits, "seconds": time.perf_counter() - t0, "summary": summary(rows), "rows": rows,
        }
        write_results(args.results, name, result, markdown(result))

    for k in splits:  # split outermost: a run cut short still has every set and method
        for s in sets:
            for m in methods:
                if m == "nuts" and args.nuts_sets != "all" and s not in args.nuts_sets.split(","):
                    continue
                rows.append(one(s, k, m, args.data_dir, args.seed, args.resplits))
                r = rows[-1]
                print(f"{s} split {k} {m}: raw {r['raw']['coverage']:.3f}, normalised {r['normalized']['coverage']:.3f} "
                      f"(expected {r['normalized_resplit']['coverage']:.3f}), cqr {r['cqr']['coverage']:.3f} "
                      f"(expected {r['cqr_resplit']['coverage']:.3f}) ({r['fit_seconds']:.0f} s)", flush=True)
                write(False)
    write(True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
