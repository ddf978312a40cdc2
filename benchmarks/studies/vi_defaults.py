"""The evidence behind advi's and bbb's defaults: each candidate change measured side by side
with the old default on the problems where a default is judged.

* moons and circles (2-5-5-2 tanh, hierarchical inverse-gamma and fixed N(0, 1) priors):
  test accuracy and NLL — a default must not lose accuracy here;
* UCI yacht and boston (``benchmarks/uci.py``'s protocol, first splits): test LL and RMSE;
* the 32-point sinusoid (``benchmarks/regression.py``'s model: scale-mixture prior): test NLL,
  train RMSE and the epistemic sd ratio ±1.2 / 0 — where mean-field VI is compared with NUTS.

    python benchmarks/studies/vi_defaults.py --data-dir ../shared/data      # writes results/vi_defaults.{json,md}
    python benchmarks/studies/vi_defaults.py --quick                          # smoke test (no UCI)
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: _common and the table scripts
sys.path.insert(0, BENCHMARKS)
from _common import machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))

#: advi's defaults before and after (bnnpp 0.2): the start of the guide's means and sds
ADVI_VARIANTS = {
    "old default (uniform ±2, σ0 = 0.1)": {"init_loc": "uniform", "init_scale": 0.1},
    "glorot, σ0 = 0.1": {"init_loc": "glorot", "init_scale": 0.1},
    "uniform ±2, σ0 = 0.01": {"init_loc": "uniform", "init_scale": 0.01},
    "new default (glorot, σ0 = 0.01)": {},
}
#: the sinusoid variants: starts, particles, a decaying learning rate, richer guides
SINUSOID_VARIANTS = {
    "advi default": ("advi", {}),
    "advi old default": ("advi", {"init_loc": "uniform", "init_scale": 0.1}),
    "advi lowrank guide": ("advi", {"guide": "lowrank"}),
    "advi fullrank guide": ("advi", {"guide": "fullrank"}),
    "advi 8 particles": ("advi", {"num_particles": 8}),
    "bbb default": ("bbb", {}),
    "bbb σ0 = 1e-3": ("bbb", {"init_scale": 1e-3}),
    "bbb σ0 = 0.5, 4 particles, cosine lr, 20k epochs": ("bbb", {"init_scale": 0.5, "num_particles": 4, "epochs": 20_000, "cosine": True}),
}


#: the variants --quick leaves out (the slowest)
LONG = {"advi fullrank guide", "bbb σ0 = 0.5, 4 particles, cosine lr, 20k epochs"}


def _opts(options: dict, steps: int) -> dict:
    import optax

    options = dict(options)
    if options.pop("cosine", False):
        options["optimizer"] = optax.adam(optax.cosine_decay_schedule(1e-2, steps, alpha=0.01))
    return options


def classification(quick: bool) -> list[dict]:
    import bnnpp
    from bnnpp import priors

    rows = []
    for name in ("moons", "circles"):
        d = bnnpp.data.load_synthetic(name)
        for plabel, prior in (("inverse-gamma per layer", priors.normal(priors.inverse_gamma(1.0, 1.0))), ("N(0,1)", priors.normal(1.0))):
            model = bnnpp.models.mlp((5, 5), activation="tanh", num_classes=2, prior=prior)
            for label, opts in ADVI_VARIANTS.items():
                t0 = time.perf_counter()
                post = bnnpp.fit(model, d, method="advi", seed=0, progress=False, **opts, **({"num_steps": 500} if quick else {}))
                s = post.predict(d.x_test).scores(d.y_test)
                rows.append({"data": name, "prior": plabel, "variant": label, "accuracy": s["accuracy"], "nll": s["nll"],
                             "seconds": time.perf_counter() - t0})
                print(f"{name:8s} {plabel:24s} {label:36s} acc {s['accuracy']:.3f} nll {s['nll']:.3f}", flush=True)
    return rows


def uci_rows(data_dir: str, splits: int) -> list[dict]:
    import uci

    rows = []
    for name in ("yacht", "boston"):
        for label in ("old default (uniform ±2, σ0 = 0.1)", "new default (glorot, σ0 = 0.01)"):
            r = uci.run_set(name, "advi", list(range(splits)), data_dir, ADVI_VARIANTS[label], 0, ("gaussian",))
            rows.append({"data": name, "variant": label, "test_ll": r["test_ll"], "test_ll_se": r["test_ll_se"], "rmse": r["rmse"],
                         "splits": splits, "seconds": r["seconds"]})
            print(f"{name:8s} advi {label:36s} test LL {r['test_ll']:.3f} RMSE {r['rmse']:.3f}", flush=True)
    return rows


def sinusoid(quick: bool) -> list[dict]:
    import regression

    import bnnpp

    data = bnnpp.data.sinusoid(seed=0)
    rows = []
    for label, (method, opts) in SINUSOID_VARIANTS.items():
        if quick and label in LONG:
            continue
        steps = opts.get("epochs", 5000 if method == "bbb" else 10_000)
        options = {**_opts(opts, steps), "num_samples": 300, **({"num_steps": 300} if quick and method == "advi" else {}),
                   **({"epochs": 300} if quick and method == "bbb" else {})}
        row, _ = regression.run(method, options, data, 0)
        rows.append({"variant": label, "test_nll": row["test_nll"], "train_rmse": row["train_rmse"],
                     "epistemic_ratio": row["epistemic_ratio"], "seconds": row["seconds"]})
        print(f"sinusoid {label:50s} NLL {row['test_nll']:.2f} train RMSE {row['train_rmse']:.2f} ratio {row['epistemic_ratio']:.1f}", flush=True)
    return rows


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=os.environ.get("BNNPP_DATA_DIR"), help="folder holding the UCI sets (skipped without)")
    ap.add_argument("--uci-splits", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    cls = classification(args.quick)
    uc = uci_rows(args.data_dir, args.uci_splits) if args.data_dir and not args.quick else []
    sin = sinusoid(args.quick)
    cmd = ("python benchmarks/studies/vi_defaults.py " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    result = {"benchmark": "vi_defaults", "produced_by": cmd, "date": dt.date.today().isoformat(), "machine": machine(),
              "classification": cls, "uci": uc, "sinusoid": sin, "seconds": time.perf_counter() - t0}
    lines = ["# VI defaults: the evidence", "", f"`{cmd}`, {result['date']}, {result['machine']}.", "",
             "## advi on moons and circles (2-5-5-2 tanh, 10,000 steps, seed 0)", "",
             "| data | prior | variant | test accuracy | test NLL |", "|---|---|---|---|---|"]
    lines += [f"| {r['data']} | {r['prior']} | {r['variant']} | {r['accuracy']:.3f} | {r['nll']:.3f} |" for r in cls]
    if uc:
        lines += ["", f"## advi on UCI (benchmarks/uci.py protocol, first {args.uci_splits} splits)", "",
                  "| data | variant | test LL | RMSE |", "|---|---|---|---|"]
        lines += [f"| {r['data']} | {r['variant']} | {r['test_ll']:.3f} ± {r['test_ll_se']:.3f} | {r['rmse']:.3f} |" for r in uc]
    lines += ["", "## The 32-point sinusoid (scale-mixture prior; NUTS: test NLL 4.37, epistemic sd ratio 17.6 in results/regression.md)", "",
              "| variant | test NLL | train RMSE | epistemic sd ratio ±1.2 / 0 |", "|---|---|---|---|"]
    lines += [f"| {r['variant']} | {r['test_nll']:.2f} | {r['train_rmse']:.2f} | {r['epistemic_ratio']:.1f} |" for r in sin]
    md = "\n".join(lines) + "\n"
    write_results(args.results, "vi_defaults", result, md)
    print(md)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
