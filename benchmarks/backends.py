"""Every inference method on moons and circles: accuracy, calibration and cost, one table.

The model is Zharikov, Isachenko & Bochkarev's 2-5-5-2 tanh MLP with Normal weights and an InverseGamma(1, 1)
prior on each layer's variance; data are 1,000 points split 700/300 (noise 0.3 for moons,
0.2 for circles). Each method runs with its default options (``--quick``: fewer steps and
draws), in one process, one after the other; compile and run seconds are those the backend
measures itself.

    python benchmarks/backends.py            # full: defaults, writes results/backends.{json,md}
    python benchmarks/backends.py --quick    # < 2 minutes, for the smoke test
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time

from _common import machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))

# --quick: small runs that still reach a usable posterior on moons
QUICK = {
    "map": {"num_steps": 1000},
    "advi": {"num_steps": 2000, "num_samples": 200},
    "bbb": {"epochs": 2000, "num_samples": 200},
    "nuts": {"num_chains": 1, "num_warmup": 100, "num_samples": 100},
    "mclmc": {"num_chains": 2, "num_warmup": 100, "num_samples": 100},
    "pathfinder": {"num_paths": 2, "num_samples": 100},
    "sgld": {"num_chains": 1, "num_samples": 200, "burn_in": 1000},
    "ensemble": {"num_steps": 1000},
    "swag": {"pretrain_steps": 1000, "swag_epochs": 20, "rank": 10},
    "multiswag": {"pretrain_steps": 1000, "swag_epochs": 20, "rank": 10, "num_samples": 10},
    "mc_dropout": {"num_steps": 1000, "num_samples": 50},
    "vd": {"epochs": 1000, "num_samples": 50},
}


def _throughput(post) -> tuple[float, str]:
    """Steps (optimisers) or gradient-based transitions (samplers, all chains) per run second."""
    stats = post.stats
    run = max(stats.run_seconds, 1e-9)
    if stats.method == "nuts":
        o = stats.options
        return o["num_chains"] * (o["num_warmup"] + o["num_samples"]) / run, "samples/s"
    if stats.steps_run is not None:
        chains = stats.options.get("num_chains", stats.options.get("members", 1))  # ensemble members step together
        return chains * stats.steps_run / run, "steps/s"
    return float("nan"), ""


def run(data_name: str, method: str, options: dict, seed: int) -> dict:
    import bnnpp
    from bnnpp import metrics, priors

    data = bnnpp.data.load_synthetic(data_name, seed=seed)
    model = bnnpp.models.mlp((5, 5), activation="tanh", num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))
    t0 = time.perf_counter()
    post = bnnpp.fit(model, data, method=method, seed=seed, progress=False, **options)
    pred = post.predict(data.x_test)
    usable = time.perf_counter() - t0
    rate, unit = _throughput(post)
    return {
        "data": data_name,
        "method": method,
        "options": {k: v for k, v in post.stats.options.items() if isinstance(v, (bool, int, float, str, type(None)))},
        "accuracy": metrics.accuracy(pred.mean, data.y_test),
        "nll": metrics.nll(pred.mean, data.y_test),
        "ece": metrics.ece(pred.mean, data.y_test),
        "compile_seconds": post.stats.compile_seconds,
        "run_seconds": post.stats.run_seconds,
        "seconds_to_prediction": usable,
        "throughput": rate,
        "throughput_unit": unit,
        "divergences": post.stats.extras.get("divergences"),
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small runs (< 2 minutes in all)")
    ap.add_argument("--methods", default=None, help="comma-separated subset of the registered methods")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--results", default=os.path.join(HERE, "results"), help="folder for backends.{json,md}")
    ap.add_argument("--name", default="backends", help="results file name (e.g. backends_new for a --methods subset, keeping the full table)")
    args = ap.parse_args(argv)
    import bnnpp

    # unset: every registered method this environment can run (mclmc/pathfinder need BlackJAX >= 1.4)
    methods = args.methods.split(",") if args.methods else [m for m in bnnpp.registered() if bnnpp.inference.get_method(m).unavailable is None]
    unknown = sorted(set(methods) - set(bnnpp.registered()))
    if unknown:
        raise SystemExit(f"unknown method(s) {', '.join(unknown)}; registered: {', '.join(bnnpp.registered())}")
    rows = []
    for data_name in ("moons", "circles"):
        for method in methods:
            r = run(data_name, method, QUICK.get(method, {}) if args.quick else {}, args.seed)
            rows.append(r)
            print(
                f"{data_name:8s} {method:10s} acc {r['accuracy']:.3f} nll {r['nll']:.3f} ece {r['ece']:.3f} "
                f"compile {r['compile_seconds']:.1f}s run {r['run_seconds']:.1f}s "
                f"({r['throughput']:.0f} {r['throughput_unit']})",
                flush=True,
            )

    result = {
        "benchmark": "backends",
        "produced_by": " ".join(["python benchmarks/backends.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "model": "2-5-5-2 tanh MLP, Normal weights, InverseGamma(1,1) on each layer's variance; 700/300 split",
        "rows": rows,
    }
    lines = [
        "# backends: every method on moons and circles",
        "",
        f"`{result['produced_by']}`, {result['date']}, {result['machine']}.",
        f"Model: {result['model']}. Options: each method's defaults"
        + (" (quick mode: reduced, see QUICK in the script)." if args.quick else "."),
        "",
        "| data | method | test accuracy | NLL | ECE | compile s | run s | to prediction s | throughput | divergences |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        div = "" if r["divergences"] is None else str(r["divergences"])
        lines.append(
            f"| {r['data']} | {r['method']} | {r['accuracy']:.3f} | {r['nll']:.3f} | {r['ece']:.3f} | "
            f"{r['compile_seconds']:.1f} | {r['run_seconds']:.1f} | {r['seconds_to_prediction']:.1f} | "
            f"{r['throughput']:.0f} {r['throughput_unit']} | {div} |"
        )
    write_results(args.results, args.name, result, "\n".join(lines) + "\n")
    print("\n".join(lines[6:]))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
