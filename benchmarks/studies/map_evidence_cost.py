"""What map's default (``hyperparameters="auto"``: prior scales and a learned noise sd by the
Laplace-GGN evidence) costs against the joint MAP (``hyperparameters="map"``), the two fits
side by side in one process, alternating, each compiled cold (wall time of ``bnnpp.fit``).

* **trend2d** (``benchmarks/small_data.py``: 100 rows, 2-20-20-1 tanh, 501 weights, N(0, 1)
  prior, learned noise; 5,000 full-batch steps): the full GGN (P ≤ ``evidence.FULL_LIMIT``).
  Target: the default ≤ 2× the joint MAP's time.
* **MNIST** (10,000 training images, 784-400-400-10 ReLU, per-layer variance ~ IG(1, 1), as the
  CLI's default prior; 3 epochs in batches of 128): the diagonal GGN. Target: the same ≤ 2×.
  Test accuracy on the 10,000 test images beside it.

    python benchmarks/studies/map_evidence_cost.py --data-dir /work/shared/data            # both, 2 repeats
    python benchmarks/studies/map_evidence_cost.py --cases trend2d --repeats 1

Writes ``benchmarks/results/map_evidence_cost.{json,md}``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shlex
import sys
import time
import warnings

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCHMARKS)
from _common import default_data_dir, machine, write_results

SETTINGS = ("map", "auto")


def _time(fit) -> tuple[float, object]:
    import jax

    t0 = time.perf_counter()
    post = fit()
    jax.block_until_ready(post.samples)
    return time.perf_counter() - t0, post


def trend2d(hp: str) -> dict:
    import bnnpp
    from small_data import problem

    p = problem("trend2d", 0)
    seconds, post = _time(lambda: bnnpp.fit(p["model"], (p["x"], p["y"]), method="map", seed=0, progress=False, hyperparameters=hp))
    scores = post.predict(p["x_test"]).scores(p["y_test"])
    return {"seconds": seconds, "test_nll": scores["nll"], "test_rmse": scores["rmse"]}


def mnist(hp: str, data_dir: str) -> dict:
    import numpy as np

    import bnnpp
    from bnnpp import priors
    from bnnpp.data.images import load

    d = load("mnist", data_dir, flatten=True, train_subset=10000)
    model = bnnpp.models.mlp((400, 400), activation="relu", num_classes=10, prior=priors.normal(scale=priors.inverse_gamma(1.0, 1.0)))
    seconds, post = _time(lambda: bnnpp.fit(model, (d.x_train, d.y_train), method="map", seed=0, progress=False, hyperparameters=hp,
                                            epochs=3, batch_size=128))
    accuracy = float(np.mean(np.asarray(post.predict(d.x_test).mean).argmax(-1) == d.y_test))
    return {"seconds": seconds, "test_accuracy": accuracy, "rows": int(len(d.x_train))}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="trend2d,mnist")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    data_dir = args.data_dir or default_data_dir()
    rows = []
    for case in args.cases.split(","):
        for rep in range(args.repeats):
            for hp in SETTINGS:
                r = trend2d(hp) if case == "trend2d" else mnist(hp, data_dir)
                rows.append({"case": case, "hyperparameters": hp, "repeat": rep, **r})
                print(rows[-1], flush=True)
    command = "python benchmarks/studies/" + shlex.join([os.path.basename(__file__), *(sys.argv[1:] if argv is None else argv)])
    lines = ["| case | repeat | map: s | auto (default): s | ratio | map: score | auto: score |", "|---|---|---|---|---|---|---|"]
    for case in args.cases.split(","):
        for rep in range(args.repeats):
            a, b = (next(r for r in rows if r["case"] == case and r["repeat"] == rep and r["hyperparameters"] == hp) for hp in SETTINGS)
            key = "test_nll" if case == "trend2d" else "test_accuracy"
            lines.append(f"| {case} | {rep} | {a['seconds']:.1f} | {b['seconds']:.1f} | {b['seconds'] / a['seconds']:.2f} | "
                         f"{key} {a[key]:.4g} | {b[key]:.4g} |")
    md = f"# map: the evidence default against the joint MAP, wall time\n\n    {command}\n\n{dt.date.today().isoformat()}, {machine()}\n\n" + "\n".join(lines) + "\n"
    write_results(os.path.join(BENCHMARKS, "results"), "map_evidence_cost",
                  {"command": command, "date": dt.date.today().isoformat(), "machine": machine(), "rows": rows}, md)
    print(md)


if __name__ == "__main__":
    main()
