"""What map's default (``hyperparameters="auto"``: the layer scales by the Laplace-GGN evidence)
costs inside ``bnnpp.sweep``, vmapped over seeds against one fit at a time, beside the joint MAP
(``"map"``). Moons (the built-in split), the 2-5-5-2 tanh net under ``normal(half_normal(1))`` per
layer, seeds 0, 1, 2; each setting in a fresh process (compiled cold), one after another.

The evidence update is due every ``evidence_every`` steps; the runner runs it from its loop index
(``Hooks.periodic``), so under ``vmap`` it stays a branch and the vmapped sweep should cost about
what the loop of fits costs, not an update at every step.

    python benchmarks/studies/sweep_evidence_cost.py                 # 1,000 steps
    python benchmarks/studies/sweep_evidence_cost.py --steps 2000

Writes ``benchmarks/results/sweep_evidence_cost.{json,md}``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import subprocess
import sys

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCHMARKS)
from _common import machine, write_results

SETTINGS = (("map", "vmap"), ("auto", "vmap"), ("auto", "loop"))

ONE = """
import json, sys, time, warnings
warnings.simplefilter("ignore")
from bnnpp import data, sweep as sw
hp, how, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = time.perf_counter()
r = sw.sweep([data.moons()], sw.grid(("normal",), ("half-normal",)), method="map", seeds=(0, 1, 2), num_steps=steps,
             progress=False, hyperparameters=hp, vmap=how == "vmap")
print(json.dumps({"seconds": time.perf_counter() - t, "accuracy": [x["accuracy"] for x in r["runs"]],
                  "nll": [x["nll"] for x in r["runs"]]}))
"""


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--out", default=os.path.join(BENCHMARKS, "results"))
    args = ap.parse_args(argv)
    cmd = "python benchmarks/studies/sweep_evidence_cost.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    rows = []
    for hp, how in SETTINGS:
        out = subprocess.run([sys.executable, "-c", ONE, hp, how, str(args.steps)], capture_output=True, text=True, check=True)
        row = {"hyperparameters": hp, "fits": how, **json.loads(out.stdout.strip().splitlines()[-1])}
        print(f"{hp:5s} {how:5s} {row['seconds']:7.1f} s  accuracy {row['accuracy']}", flush=True)
        rows.append(row)
    result = {"benchmark": "sweep_evidence_cost", "command": cmd, "date": dt.date.today().isoformat(), "machine": machine(),
              "steps": args.steps, "rows": rows}
    md = [f"# map in the sweep: evidence ('auto') against the joint MAP, vmapped and one by one\n", f"`{cmd}`, {result['date']}, "
          f"{result['machine']}. Moons, 2-5-5-2 tanh, normal(half_normal(1)) per layer, seeds 0-2, {args.steps} steps; each row "
          "a fresh process (compile included). The machine is shared: compare rows of one run only.\n",
          "| hyperparameters | fits | seconds | test accuracy (seeds 0, 1, 2) |", "|---|---|---|---|"]
    md += [f"| {r['hyperparameters']} | {r['fits']} | {r['seconds']:.1f} | {', '.join(f'{a:.3f}' for a in r['accuracy'])} |" for r in rows]
    write_results(args.out, "sweep_evidence_cost", result, "\n".join(md) + "\n")
    return result


if __name__ == "__main__":
    main()
