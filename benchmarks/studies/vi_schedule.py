"""The evidence for advi's and bbb's default learning-rate curve: a constant Adam rate against
a cosine decay to 0 over the run (``schedule="constant"`` / ``"cosine"``), every other option
at its default.

* UCI (``benchmarks/uci.py``'s data and network; the test split is never read): each set's
  first ``--splits`` training splits are divided 80/20 (seeded) into a fitting part and a
  validation part; the network (one hidden layer of 50 ReLU units, a N(0, 1) prior, learned
  noise sd) is fitted on the fitting part and scored on the validation part — log-likelihood
  per point and RMSE in the original units, mean over splits. Protein is left out (its fits
  take an hour per method here).
* moons and circles (2-5-5-2 tanh, inverse-gamma prior per layer, seed 0): test accuracy and
  NLL, so that the change does not cost the classification acceptance tests.
* the 32-point sinusoid (``benchmarks/regression.py``'s data, network and options, under its
  scale-mixture prior and under N(0, 1)), ``--sinusoid-seeds`` fit seeds: test NLL on the grid
  (two thirds of it outside the data) and the epistemic sd ratio ±1.2 / 0 — how far the
  band widens off the data.

    python benchmarks/studies/vi_schedule.py --data-dir ../shared/data
    python benchmarks/studies/vi_schedule.py --quick          # moons only, short fits (a smoke test)

Writes ``results/vi_schedule.{json,md}`` (``--results``). About 40 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time

import numpy as np
BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: _common and the table scripts
sys.path.insert(0, BENCHMARKS)
from _common import machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))
SETS = ("yacht", "boston", "energy", "concrete", "wine", "kin8nm", "power", "naval")
METHODS = ("advi", "bbb")
SCHEDULES = ("constant", "cosine")


def uci_rows(data_dir: str, sets, splits: int) -> list[dict]:
    """Validation log-likelihood and RMSE per set, method and schedule."""
    import uci

    import bnnpp
    from bnnpp import priors

    rows = []
    for name in sets:
        val = [bnnpp.data.uci(name, s, data_dir, validation=0.2, seed=0) for s in range(splits)]
        for method in METHODS:
            for schedule in SCHEDULES:
                t = time.perf_counter()
                loc, scale, _ = uci.fit_splits(method, (priors.normal(1.0), "gaussian"), 50, val, [d.x_val for d in val],
                                            {"schedule": schedule}, list(range(splits)))
                scores = [uci._scores(loc[k], scale[k], d.y_val, d.y_scale) for k, d in enumerate(val)]
                row = {"set": name, "method": method, "schedule": schedule, "splits": splits,
                       "val_ll": float(np.mean([s[0] for s in scores])), "val_rmse": float(np.mean([s[1] for s in scores])),
                       "per_split_ll": [s[0] for s in scores], "seconds": time.perf_counter() - t}
                print(row, flush=True)
                rows.append(row)
    return rows


def classification(quick: bool) -> list[dict]:
    """Test accuracy and NLL of the posterior predictive on moons and circles."""
    import bnnpp
    from bnnpp import metrics, priors

    rows = []
    for data in ("moons",) if quick else ("moons", "circles"):
        d = bnnpp.data.load_synthetic(data, seed=0)
        for method in METHODS:
            for schedule in SCHEDULES:
                model = bnnpp.models.mlp((5, 5), activation="tanh", num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))
                extra = ({"num_steps": 500} if method == "advi" else {"epochs": 500}) if quick else {}
                post = bnnpp.fit(model, (d.x_train, d.y_train), method=method, seed=0, progress=False, schedule=schedule, **extra)
                probs = np.asarray(post.predict(d.x_test).probs).mean(0)  # (S, n, 2) → (n, 2)
                y = np.asarray(d.y_test)
                rows.append({"data": data, "method": method, "schedule": schedule,
                             "accuracy": float(metrics.accuracy(probs, y)), "nll": float(metrics.nll(probs, y))})
                print(rows[-1], flush=True)
    return rows


def sinusoid(seeds: int) -> list[dict]:
    """Test NLL and epistemic sd ratio per prior, method, schedule and fit seed."""
    import regression

    import bnnpp

    data = bnnpp.data.sinusoid(seed=0)
    rows = []
    for prior in ("mixture", "normal"):
        for method in METHODS:
            for schedule in SCHEDULES:
                fits = [regression.run(method, {**regression.FULL[method], "schedule": schedule}, data, s, prior)[0]
                        for s in range(seeds)]
                rows.append({"prior": prior, "method": method, "schedule": schedule, "seeds": seeds,
                             "test_nll": [f["test_nll"] for f in fits], "epistemic_ratio": [f["epistemic_ratio"] for f in fits],
                             "train_rmse": [f["train_rmse"] for f in fits]})
                print({k: rows[-1][k] for k in ("prior", "method", "schedule")}, np.round(rows[-1]["test_nll"], 2), flush=True)
    return rows


def markdown(result: dict) -> str:
    lines = ["# advi and bbb: constant learning rate or cosine decay", "",
             f"`{result['produced_by']}`, {result['date']}, {result['machine']}.", ""]
    if result["uci"]:
        k = result["uci"][0]["splits"]
        lines += [f"## UCI, validation part of the first {k} training splits (80/20, seeded; the test split is not read)", "",
                  ("One hidden layer of 50 ReLU units, N(0, 1) prior, learned noise sd, every other option at the method's "
                   "default. Log-likelihood per point (higher is better) and RMSE, original units, mean over splits."), "",
                  "| set | advi constant | advi cosine | bbb constant | bbb cosine |", "|---|---|---|---|---|"]
        by = {(r["set"], r["method"], r["schedule"]): r for r in result["uci"]}
        for name in dict.fromkeys(r["set"] for r in result["uci"]):
            cells = [f"{by[(name, m, s)]['val_ll']:.3f} ({by[(name, m, s)]['val_rmse']:.3g})" for m in METHODS for s in SCHEDULES]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        for m in METHODS:
            diffs = [by[(n, m, "cosine")]["val_ll"] - by[(n, m, "constant")]["val_ll"] for n in dict.fromkeys(r["set"] for r in result["uci"])]
            lines.append("")
            lines.append(f"- {m}: cosine − constant validation LL per set: " + ", ".join(f"{v:+.3f}" for v in diffs)
                         + f"; better (> +0.01) on {sum(v > 0.01 for v in diffs)}, worse (< −0.01) on {sum(v < -0.01 for v in diffs)} of {len(diffs)}.")
    if result["sinusoid"]:
        k = result["sinusoid"][0]["seeds"]
        lines += ["", f"## The 32-point sinusoid (benchmarks/regression.py's data, net and options; fit seeds 0–{k - 1})", "",
                  ("Test NLL on the 300-point grid over [−1.5, 1.5] (the data lie in [−0.5, 0.5]) and the epistemic sd "
                   "ratio ±1.2 / 0: mean and median over the seeds, then every seed's."), "",
                  "| prior | method | schedule | NLL mean | NLL median | epistemic ratio mean | NLL per seed |", "|---|---|---|---|---|---|---|"]
        for r in result["sinusoid"]:
            lines.append(f"| {r['prior']} | {r['method']} | {r['schedule']} | {np.mean(r['test_nll']):.2f} | {np.median(r['test_nll']):.2f} | "
                         f"{np.mean(r['epistemic_ratio']):.2f} | {', '.join(f'{v:.1f}' for v in r['test_nll'])} |")
    lines += ["", "## moons and circles (2-5-5-2 tanh, inverse-gamma prior per layer, seed 0, test set)", "",
              "| data | method | schedule | accuracy | NLL |", "|---|---|---|---|---|"]
    lines += [f"| {r['data']} | {r['method']} | {r['schedule']} | {r['accuracy']:.3f} | {r['nll']:.3f} |" for r in result["classification"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=os.environ.get("BNNPP_DATA_DIR"), help="folder holding the UCI sets (UCI skipped without)")
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated UCI sets")
    ap.add_argument("--splits", type=int, default=3, help="first K training splits")
    ap.add_argument("--sinusoid-seeds", type=int, default=8, help="fit seeds on the sinusoid (0: skip it)")
    ap.add_argument("--quick", action="store_true", help="moons only, short fits, no UCI, no sinusoid")
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    bad = [s for s in sets if s not in SETS]
    if bad:
        raise SystemExit(f"unknown set(s) {', '.join(bad)}; choose from {', '.join(SETS)}")
    if args.splits < 1 or args.sinusoid_seeds < 0:
        raise SystemExit("--splits must be at least 1 and --sinusoid-seeds at least 0")
    t0 = time.perf_counter()
    cls = classification(args.quick)
    sin = sinusoid(args.sinusoid_seeds) if args.sinusoid_seeds and not args.quick else []
    uc = uci_rows(args.data_dir, sets, args.splits) if args.data_dir and not args.quick else []
    cmd = ("python benchmarks/studies/vi_schedule.py " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    result = {"benchmark": "vi_schedule", "produced_by": cmd, "date": dt.date.today().isoformat(), "machine": machine(),
              "uci": uc, "sinusoid": sin, "classification": cls, "seconds": time.perf_counter() - t0}
    md = markdown(result)
    write_results(args.results, "vi_schedule", result, md)
    print(md)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
