"""BBB's seconds per epoch on MNIST 2×400 (scale mixture) with this checkout's library and with
an earlier revision's ``bnnpp/inference/variational_layers.py``, side by side with MAP in one
process: rounds of (BBB at the baseline revision, BBB now, MAP), 1 epoch each, set up as the
timing mode of ``benchmarks/mnist_bbb.py`` (its ``bbb_options`` / ``map_options``, prior cell
and estimator).

The baseline's module is read with ``git show REV:bnnpp/inference/variational_layers.py`` and
its ``negative_elbo_terms`` replaces bbb's for the baseline fits (everything else — bbb.py, the
runner, MAP — is this checkout's), so only the layers' draw and KL differ.

    python benchmarks/studies/bbb_ab.py --baseline e1950eb              # 3 rounds, ~3 minutes on 2 cores
    python benchmarks/studies/bbb_ab.py --baseline e1950eb --quick      # smoke run: 1 round on 2,560 images
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: _common and the table scripts
sys.path.insert(0, BENCHMARKS)
HERE = os.path.dirname(os.path.abspath(__file__))
from _common import default_data_dir, machine, write_results


def _baseline_module(rev: str):
    source = subprocess.run(
        ["git", "-C", HERE, "show", f"{rev}:bnnpp/inference/variational_layers.py"], check=True, capture_output=True, text=True
    ).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location("variational_layers_baseline", f.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    os.unlink(f.name)
    return module


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="HEAD", help="git revision whose variational_layers.py is the baseline (default HEAD: "
                    "the committed library, against the working tree's)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds of (baseline BBB, BBB, MAP) (default 3; quick 1)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 round on the first 2,560 training images")
    ap.add_argument("--data-dir", default=None, help="folder holding mnist/ (default: $BNNPP_DATA_DIR, else ../shared/data)")
    ap.add_argument("--out", "--results", dest="out", default=os.path.join(HERE, "results"), help="folder for bbb_ab.{json,md}")
    args = ap.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)

    import mnist_bbb

    import bnnpp
    from bnnpp.inference import bbb

    baseline = _baseline_module(args.baseline).negative_elbo_terms
    current = bbb.negative_elbo_terms
    data = bnnpp.data.load("mnist", args.data_dir or default_data_dir(), normalize="126", flatten=True, validation=10000)
    if args.quick:
        data = dataclasses.replace(data, x_train=data.x_train[:2560], y_train=data.y_train[:2560])
    model = mnist_bbb.build()
    m = len(data.x_train) // mnist_bbb.BATCH
    fits = [
        (f"bbb at {args.baseline}", "bbb", mnist_bbb.bbb_options(1, m, num_samples=10), baseline),
        ("bbb now", "bbb", mnist_bbb.bbb_options(1, m, num_samples=10), current),
        ("map", "map", mnist_bbb.map_options(1, m), None),
    ]
    per = {name: [] for name, *_ in fits}
    load = []
    try:
        for r in range(rounds):
            load.append(os.getloadavg()[0])
            for name, method, opts, terms in fits:
                bbb.negative_elbo_terms = terms or current
                post = bnnpp.fit(model, data, method=method, seed=0, progress=False, **opts)
                per[name].append(post.info["run_seconds"])
            print(f"round {r + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in per.items()), flush=True)
    finally:
        bbb.negative_elbo_terms = current
    med = {k: statistics.median(v) for k, v in per.items()}
    names = [name for name, *_ in fits]
    command = "python benchmarks/studies/bbb_ab.py " + " ".join(argv if argv is not None else sys.argv[1:])
    result = {
        "command": command, "date": dt.datetime.now().isoformat(timespec="minutes"), "machine": machine(),
        "seconds_per_epoch": per, "median_seconds_per_epoch": med, "load_average_1min": load,
        "ratio_over_map": {k: med[k] / med["map"] for k in names[:2]},
    }
    lines = [
        "# bbb_ab", "", f"`{command}`, {result['date']}; {result['machine']}; load average (1 min) at each round: "
        + ", ".join(f"{x:.1f}" for x in load) + ".", "",
        f"MNIST 2×400, scale-mixture prior {mnist_bbb.MIXTURE} (π, −log σ1, −log σ2), batches of 128, estimator "
        f"{mnist_bbb.ESTIMATOR}, 1 epoch per fit, rounds alternating.", "",
        "| fit | s / epoch (median) | per round | / MAP |", "|---|---|---|---|",
    ]
    for k in names:
        lines.append(f"| {k} | {med[k]:.2f} | {', '.join(f'{x:.2f}' for x in per[k])} | {med[k] / med['map']:.2f} |")
    write_results(args.out, "bbb_ab", result, "\n".join(lines) + "\n")
    print("\n".join(lines[6:]))
    return result


if __name__ == "__main__":
    main()
