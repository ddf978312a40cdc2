"""advi's and bbb's defaults against NUTS on moons and circles splits other than the built-in ones.

Issue 35's classification criterion: with a hierarchical prior (2-5-5-2 tanh MLP, Normal
weights, InverseGamma(1, 1) on each layer's variance, as ``backends.py``) advi's and bbb's
defaults within 1 accuracy point of NUTS on moons and circles at several noise levels and data
seeds. Each split is 1,000 points, 700/300 (``bnnpp.data.moons`` / ``circles`` with the given
``noise`` and ``seed``); every method with its registered defaults and fit seed 0; NUTS with
2 chains × 500 warm-up + 500 draws.

    python benchmarks/classification_splits.py                                  # results/classification_splits.{json,md}
    python benchmarks/classification_splits.py --splits moons:0.2:1 --methods advi
    python benchmarks/classification_splits.py --quick                          # one split, short runs (not saved)
    python benchmarks/classification_splits.py --methods mc_dropout --options '{"hyperparameters": "map"}' --label hyperparameters=map
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import sys
import time
import warnings

from _common import machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))
SPLITS = ("moons:0.2:1", "moons:0.3:2", "circles:0.1:1", "circles:0.2:2")
METHODS = ("nuts", "advi", "bbb")
NUTS = {"num_chains": 2, "num_warmup": 500, "num_samples": 500}
QUICK = {"nuts": {"num_chains": 1, "num_warmup": 100, "num_samples": 100}, "advi": {"num_steps": 1000}, "bbb": {"epochs": 500}}
CRITERION = 0.01  # accuracy below NUTS's that still passes


def parse_split(text: str) -> tuple[str, float, int]:
    """``"moons:0.2:1"`` → ``("moons", 0.2, 1)`` (data set, noise sd, data seed)."""
    try:
        name, noise, seed = text.split(":")
        if name not in ("moons", "circles"):
            raise ValueError
        return name, float(noise), int(seed)
    except ValueError:
        raise SystemExit(f"--splits: NAME:NOISE:SEED with NAME moons or circles, e.g. moons:0.2:1; got {text!r}") from None


def run(split: str, method: str, options: dict) -> dict:
    import bnnpp
    from bnnpp import metrics, priors

    name, noise, seed = parse_split(split)
    data = bnnpp.data.load_synthetic(name, seed=seed, noise=noise)
    model = bnnpp.models.mlp((5, 5), activation="tanh", num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        post = bnnpp.fit(model, data, method=method, seed=0, progress=False, **options)
    pred = post.predict(data.x_test)
    return {"accuracy": metrics.accuracy(pred.mean, data.y_test), "nll": metrics.nll(pred.mean, data.y_test),
            "seconds": time.perf_counter() - t0}


def table(results: dict) -> str:
    lines = ["| split (set:noise:seed) | method | test accuracy | − NUTS's | test NLL | within 1 point | s |", "|---|---|---|---|---|---|---|"]
    for split, rows in results.items():
        ref = rows.get("nuts")
        for method, r in rows.items():
            if ref is None or method == "nuts":
                gap, ok = "—", "—"
            else:
                gap = f"{r['accuracy'] - ref['accuracy']:+.3f}"
                ok = "yes" if r["accuracy"] >= ref["accuracy"] - CRITERION - 1e-9 else "no"
            lines.append(f"| {split} | {method} | {r['accuracy']:.3f} | {gap} | {r['nll']:.3f} | {ok} | {r['seconds']:.0f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--splits", default=",".join(SPLITS), help="comma-separated NAME:NOISE:SEED")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--quick", action="store_true", help="the first split, short runs; nothing saved")
    ap.add_argument("--out", default="classification_splits", help="result name in benchmarks/results")
    ap.add_argument("--options", default="{}", help="JSON dict of options given to every method but nuts (a candidate's setting)")
    ap.add_argument("--label", default=None, help="row name suffix for --options (default: none)")
    args = ap.parse_args(argv)
    try:
        given = json.loads(args.options)
        if not isinstance(given, dict):
            raise ValueError
    except ValueError:
        raise SystemExit(f"--options: a JSON dict such as '{{\"hyperparameters\": \"map\"}}', got {args.options!r}") from None
    splits = [t for t in args.splits.split(",") if t][: 1 if args.quick else None]
    for s in splits:
        parse_split(s)
    methods = [t for t in args.methods.split(",") if t]
    import bnnpp.inference

    unknown = [m for m in methods if m not in bnnpp.inference.registered()]
    if unknown:
        raise SystemExit(f"--methods: unknown {', '.join(unknown)}")
    path = os.path.join(HERE, "results", f"{args.out}.json")
    results, commands = {}, []
    if os.path.exists(path) and not args.quick:  # a run of some splits/methods adds to the table
        with open(path) as f:
            old = json.load(f)
        results, commands = old["results"], old["commands"]
    commands.append("python benchmarks/" + shlex.join([os.path.basename(__file__), *(argv if argv is not None else sys.argv[1:])]))
    for split in splits:
        rows = results.setdefault(split, {})
        for method in methods:
            options = QUICK.get(method, {}) if args.quick else (NUTS if method == "nuts" else {})
            options = options if method == "nuts" else {**options, **given}
            row = method if method == "nuts" or not args.label else f"{method} {args.label}"
            rows[row] = run(split, method, options)
            print(f"{split} {row}: accuracy {rows[row]['accuracy']:.3f} nll {rows[row]['nll']:.3f} "
                  f"({rows[row]['seconds']:.0f} s)", flush=True)
        if args.quick:
            continue
        result = {"commands": commands, "date": dt.date.today().isoformat(), "machine": machine(), "nuts_settings": NUTS,
                  "results": results}
        ran = "\n".join(f"    {c}" for c in commands)
        md = (f"# advi and bbb defaults against NUTS on moons and circles splits (2-5-5-2 tanh, IG(1, 1) layer variances)\n\n"
              f"Commands (each adds its rows):\n\n{ran}\n\n{result['date']}, {result['machine']}\n\n{table(results)}\n")
        write_results(os.path.join(HERE, "results"), args.out, result, md)
    if args.quick:
        print(table(results))


if __name__ == "__main__":
    main()
