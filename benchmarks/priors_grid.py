"""The seed study's table (Zharikov, Isachenko & Bochkarev, PyMC3 ADVI): weight priors ×
scale hyperpriors on moons and circles, at the standard noise and at a high-noise setting,
with NUTS as the reference for the best cells.

Data: 1,000 points split 700/300 (moons noise 0.3, circles noise 0.2; high noise: 0.5 for
both). Net: 2-5-5-2 tanh. Grid: normal / laplace / cauchy / flat × fixed (best of a log grid
of scales, by mean test accuracy) / half-normal(1) / half-cauchy(1) / inverse-gamma(1, 1) on
the variance, fitted with ADVI (vmapped per structure group, see bnnpp.sweep); test accuracy
and NLL, mean ± sd over seeds. Then, per data set and noise, the best ADVI cell is refitted
with NUTS (several seeds) as the reference.

    python benchmarks/priors_grid.py            # full: writes results/priors_grid.{json,md}
    python benchmarks/priors_grid.py --quick    # < 2 minutes, for the smoke test
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time

import numpy as np
from _common import machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))
PUBLISHED = {"moons": (0.851, "normal", "inverse-gamma"), "circles": (0.735, "cauchy", "inverse-gamma")}
FULL = {
    "advi": {"num_steps": 10_000, "num_samples": 200},
    "nuts": {"num_chains": 2, "num_warmup": 500, "num_samples": 500},
    "seeds": (0, 1, 2, 3, 4),
    "nuts_seeds": (0, 1, 2),
    "scales": (0.1, 0.3, 1.0, 3.0, 10.0),
    "priors": ("normal", "laplace", "cauchy", "flat"),
    "hyperpriors": ("fixed", "half-normal", "half-cauchy", "inverse-gamma"),
    "noise": {"standard": None, "high": 0.5},
}
QUICK = {
    "advi": {"num_steps": 200, "num_samples": 50},
    "nuts": {"num_chains": 1, "num_warmup": 30, "num_samples": 30},
    "seeds": (0, 1),
    "nuts_seeds": (0,),
    "scales": (1.0,),
    "priors": ("normal",),
    "hyperpriors": ("fixed", "inverse-gamma"),
    "noise": {"standard": None},
}


def _dataset(name: str, noise):
    import bnnpp

    return bnnpp.data.load_synthetic(name, seed=0, **({} if noise is None else {"noise": noise}))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a 1×2 grid, few steps (< 2 minutes)")
    ap.add_argument("--results", default=os.path.join(HERE, "results"), help="folder for priors_grid.{json,md}")
    args = ap.parse_args(argv)

    import bnnpp
    from bnnpp import metrics, sweep

    cfg = QUICK if args.quick else FULL
    configs = sweep.grid(cfg["priors"], cfg["hyperpriors"], cfg["scales"])
    t0 = time.perf_counter()
    table, nuts_rows = [], []
    for setting, noise in cfg["noise"].items():
        datasets = [_dataset("moons", noise), _dataset("circles", noise)]
        res = sweep.sweep(datasets, configs, method="advi", seeds=cfg["seeds"], progress=not args.quick, **cfg["advi"])
        rows = sweep.summarise(res["runs"])
        for r in rows:
            r["noise"] = setting
        table += rows
        print(f"{setting} noise: {len(res['runs'])} ADVI fits in {res['seconds']:.0f} s", flush=True)
        for d in datasets:  # NUTS reference for the best ADVI cell of this data set
            best = max((r for r in rows if r["data"] == d.name), key=lambda r: r["accuracy_mean"])
            cell = next(c for c in configs if (c.weight_prior, c.hyperprior, c.scale) == (best["weight_prior"], best["hyperprior"], best["scale"]))
            model = bnnpp.models.mlp((5, 5), activation="tanh", num_classes=2, prior=cell.prior)
            accs, nlls, divs = [], [], []
            for s in cfg["nuts_seeds"]:
                post = bnnpp.fit(model, d, method="nuts", seed=s, progress=False, **cfg["nuts"])
                p = post.predict(d.x_test).mean
                accs.append(metrics.accuracy(p, d.y_test))
                nlls.append(metrics.nll(p, d.y_test))
                divs.append(int(post.stats.extras.get("divergences", 0)))
            nuts_rows.append({
                "noise": setting, "data": d.name, "cell": cell.label, "advi_accuracy": best["accuracy_mean"],
                "accuracy_mean": float(np.mean(accs)), "accuracy_sd": float(np.std(accs, ddof=1)) if len(accs) > 1 else 0.0,
                "nll_mean": float(np.mean(nlls)), "nll_sd": float(np.std(nlls, ddof=1)) if len(nlls) > 1 else 0.0,
                "divergences": divs,
            })
            print(f"  NUTS on {d.name} {cell.label}: accuracy {np.mean(accs):.3f}", flush=True)
    result = {
        "benchmark": "priors_grid",
        "produced_by": "python benchmarks/priors_grid.py" + (" --quick" if args.quick else ""),
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items()},
        "seconds": time.perf_counter() - t0,
        "table": table,
        "nuts_reference": nuts_rows,
        "published": {k: {"accuracy": v[0], "prior": v[1], "hyperprior": v[2]} for k, v in PUBLISHED.items()},
    }
    lines = [
        "# priors_grid: weight priors × scale hyperpriors (ADVI), NUTS for the best cells",
        "",
        f"`{result['produced_by']}`, {result['date']}, {result['machine']}; {result['seconds'] / 60:.0f} minutes.",
        f"ADVI {cfg['advi']['num_steps']} steps, seeds {list(cfg['seeds'])}; fixed scales {list(cfg['scales'])} "
        "(best by mean test accuracy); noise: standard = moons 0.3 / circles 0.2, high = 0.5.",
        "",
        "| noise | data | weight prior | hyperprior | accuracy | NLL | published (seed study) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(table, key=lambda r: (r["noise"], r["data"], r["weight_prior"], r["hyperprior"])):
        pub = PUBLISHED.get(r["data"])
        mark = f"{pub[0]:.3f}" if pub and r["noise"] == "standard" and (r["weight_prior"], r["hyperprior"]) == pub[1:] else ""
        hp = r["hyperprior"] + (f" (best {r['scale']:g})" if r["scale"] is not None else "")
        lines.append(
            f"| {r['noise']} | {r['data']} | {r['weight_prior']} | {hp} | {r['accuracy_mean']:.3f} ± {r['accuracy_sd']:.3f} | "
            f"{r['nll_mean']:.3f} ± {r['nll_sd']:.3f} | {mark} |"
        )
    lines += ["", "## NUTS reference for the best ADVI cell", "",
              "| noise | data | cell | ADVI accuracy | NUTS accuracy | NUTS NLL | divergences per seed |", "|---|---|---|---|---|---|---|"]
    for r in nuts_rows:
        lines.append(
            f"| {r['noise']} | {r['data']} | {r['cell']} | {r['advi_accuracy']:.3f} | {r['accuracy_mean']:.3f} ± {r['accuracy_sd']:.3f} | "
            f"{r['nll_mean']:.3f} ± {r['nll_sd']:.3f} | {r['divergences']} |"
        )
    write_results(args.results, "priors_grid", result, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
