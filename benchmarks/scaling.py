"""Fits on 1, 2, 4 and 8 devices (``devices=N``, :mod:`bnnpp.inference.sharding`): steps per
second, time to a usable posterior, the "same posterior" check across device counts, and the
cost of the sharded path on one device against the unsharded path.

Workloads (MNIST, the first ``--rows`` training images, batches of 128, pixels / 255):

* **bbb**: Bayes by Backprop, 784-400-400-10 ReLU, N(0, 1) prior — data parallel (the batch of
  128 split over the N devices);
* **ensemble**: 5 MAP members, 784-100-100-10 — data parallel too (5 members do not split
  over 2, 4 or 8 devices, so ``devices=N`` puts the batch on the devices);
* **sgld**: 8 SGLD chains, 784-100-100-10 — chain parallel (8/N chains per device).

Each device count runs in its own process with ``XLA_FLAGS=--xla_force_host_platform_device_count=N``
(under ``nice``). "Same posterior": the posterior predictive probabilities on ``--test`` test
images, max |difference| against the one-device fit (float32 reassociation only). Overhead:
in the one-device process, the unsharded fit and the ``devices=1`` fit alternate
``--repeats`` times; the ratio of their fastest per-step run times (target ≤ 1.05).

On a CPU the forced devices are threads sharing the machine's cores: N devices do not add
compute, so the table shows correctness and overhead, not speed-up. On a GPU machine with N
devices the same script measures the speed-up (``--counts`` up to the devices there).

    python benchmarks/scaling.py --steps 512 --repeats 3   # the committed table (~15 minutes on 2 shared cores)
    python benchmarks/scaling.py --quick          # 1 and 2 devices, 64 steps on 2,048 images (~4 minutes)
    python benchmarks/scaling.py --counts 1,2 --steps 64

Writes ``--results``/scaling.{json,md}. MNIST from ``--data-dir`` or ``$BNNPP_DATA_DIR``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time

from _common import default_data_dir, machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 128
TARGET_OVERHEAD = 1.05
WORKLOADS = ("bbb", "ensemble", "sgld")


def _setup(name: str, steps: int, rows: int):
    """``(model, options)`` of a workload (``steps`` steps, ``rows`` training rows)."""
    import bnnpp
    from bnnpp import priors

    if name == "bbb":
        net = bnnpp.models.mlp((400, 400), activation="relu", num_classes=10, prior=priors.normal(1.0))
        return net, {"method": "bbb", "epochs": max(1, steps // (rows // BATCH)), "batch_size": BATCH, "learning_rate": 1e-3,
                     "num_samples": 20}
    net = bnnpp.models.mlp((100, 100), activation="relu", num_classes=10, prior=priors.normal(1.0))
    if name == "ensemble":
        return net, {"method": "ensemble", "members": 5, "num_steps": steps, "batch_size": BATCH, "learning_rate": 1e-3,
                     "init_radius": 0.1}
    kept, thinning = 8, max(1, steps // 32)  # the last quarter of the steps is kept, every thinning-th
    return net, {"method": "sgld", "num_chains": 8, "burn_in": steps - kept * thinning, "num_samples": kept, "thinning": thinning,
                 "batch_size": BATCH, "variant": "sgld", "step_size": 1e-5, "init_loc": "uniform", "init_radius": 0.1}


def _fit(model, data, devices, options) -> tuple[dict, object]:
    import bnnpp

    t0 = time.perf_counter()
    post = bnnpp.fit(model, data, seed=0, progress=False, devices=devices, **options)
    wall = time.perf_counter() - t0
    s = post.stats
    row = {"time_to_posterior": wall, "compile": s.compile_seconds, "run": s.run_seconds, "steps": s.steps_run,
           "steps_per_second": s.steps_run / s.run_seconds, "seconds_per_step": s.run_seconds / s.steps_run}
    if devices is not None:
        row["placement"] = post.info["placement"]
    return row, post


def worker(args) -> None:
    """One device count: every workload on ``devices=N``; with N = 1 also the overhead pairs."""
    import jax
    import numpy as np

    import bnnpp

    n = jax.device_count()
    try:
        full = bnnpp.data.load("mnist", args.data_dir, normalize="255", validation=0, flatten=True)
    except ValueError as e:
        raise SystemExit(f"scaling: {e}") from None
    data = bnnpp.data.Dataset(full.x_train[: args.rows], full.y_train[: args.rows], full.x_test[: args.test],
                              full.y_test[: args.test], full.task, full.num_classes, full.name)
    out = {"devices": n, "rows": {}}
    for name in WORKLOADS:
        model, options = _setup(name, args.steps, args.rows)
        row, post = _fit(model, data, n, options)
        probs = np.asarray(post.predict(data.x_test).probs).reshape(-1, data.x_test.shape[0], 10).mean(0)
        np.save(os.path.join(args.out, f"{name}_{n}.npy"), probs)
        row["accuracy"] = float((probs.argmax(-1) == data.y_test).mean())
        if n == 1:  # the sharded path on one device against the unsharded one, alternating
            runs: dict[str, list] = {"unsharded": [], "sharded": []}
            for _ in range(args.repeats):
                runs["unsharded"].append(_fit(model, data, None, options)[0]["seconds_per_step"])
                runs["sharded"].append(_fit(model, data, 1, options)[0]["seconds_per_step"])
            row["overhead"] = {"unsharded": runs["unsharded"], "sharded": runs["sharded"],
                               "ratio": min(runs["sharded"]) / min(runs["unsharded"])}
        out["rows"][name] = row
        print(name, n, {k: v for k, v in row.items() if k != "placement"}, flush=True)
    with open(os.path.join(args.out, f"result_{n}.json"), "w") as f:
        json.dump(out, f)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 and 2 devices, 64 steps on 2,048 images, 200 test images, 1 repeat")
    ap.add_argument("--counts", default="1,2,4,8", help="device counts, comma-separated (1 first: the reference)")
    ap.add_argument("--steps", type=int, default=256, help="steps of every fit")
    ap.add_argument("--rows", type=int, default=8192, help="MNIST training rows (a multiple of 8 x 128)")
    ap.add_argument("--test", type=int, default=1000, help="test images for accuracy and the same-posterior check")
    ap.add_argument("--repeats", type=int, default=2, help="overhead: fits of each path on one device, alternating")
    ap.add_argument("--data-dir", default=None, help="folder holding mnist/ (default: $BNNPP_DATA_DIR, else ../shared/data)")
    ap.add_argument("--results", default=os.path.join(HERE, "results"), help="folder for scaling.{json,md}")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.data_dir = args.data_dir or default_data_dir()
    if args.quick:
        args.counts, args.steps, args.rows, args.test, args.repeats = "1,2", 64, 2048, 200, 1
    if args.worker:
        worker(args)
        return {}
    counts = [int(c) for c in args.counts.split(",")]
    if counts[0] != 1:
        raise SystemExit("scaling: --counts must start with 1 (the reference fit)")
    import numpy as np

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={n}",
                   "PYTHONPATH": os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")])}
            cmd = ["nice", sys.executable, os.path.abspath(__file__), "--worker", "--out", tmp, "--steps", str(args.steps),
                   "--rows", str(args.rows), "--test", str(args.test), "--repeats", str(args.repeats), "--data-dir", args.data_dir]
            subprocess.run(cmd, env=env, check=True)
            with open(os.path.join(tmp, f"result_{n}.json")) as f:
                results[n] = json.load(f)
            for name in WORKLOADS:
                ref = np.load(os.path.join(tmp, f"{name}_1.npy"))
                results[n]["rows"][name]["max_prob_diff"] = float(np.max(np.abs(np.load(os.path.join(tmp, f"{name}_{n}.npy")) - ref)))
    import jax

    result = {
        "benchmark": "scaling",
        "produced_by": " ".join(["python benchmarks/scaling.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "platform": jax.default_backend(),
        "steps": args.steps, "rows": args.rows, "test": args.test, "batch_size": BATCH, "repeats": args.repeats,
        "counts": counts,
        "results": {str(n): r for n, r in results.items()},
        "overhead": {name: results[1]["rows"][name]["overhead"]["ratio"] for name in WORKLOADS},
        "target_overhead": TARGET_OVERHEAD,
    }
    md = markdown(result)
    write_results(args.results, "scaling", result, md)
    print(md)
    return result


def markdown(r: dict) -> str:
    """The tables of a result dict (also to re-render a saved scaling.json)."""
    cpu = r["platform"] == "cpu"
    lines = [
        "# scaling: one fit on 1, 2, 4, 8 devices",
        "",
        (f"`{r['produced_by']}`, {r['date']}, {r['machine']}. MNIST, first {r['rows']} training images, batches of "
         f"{r['batch_size']}, {r['steps']} steps per fit; each device count in its own process. Time to posterior: the "
         "`bnnpp.fit` call's wall time (compile, training, draws); steps/s: training steps over training time."),
        "",
    ]
    if cpu:
        lines += [
            ("**CPU: the devices are forced host devices (`XLA_FLAGS=--xla_force_host_platform_device_count=N`) sharing "
             "this machine's cores, so more devices add no compute: the columns show that the sharded fits are correct "
             "and what the partitioning costs, not a speed-up.**"),
            "",
        ]
    lines += [
        "| workload | devices | mesh (data × members) | per-device batch | compile s | steps/s | time to posterior s | test acc. | max Δ prob vs 1 device |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    labels = {"bbb": "BBB 2×400", "ensemble": "ensemble (5) 2×100", "sgld": "SGLD 8 chains 2×100"}
    for name in WORKLOADS:
        for n in r["counts"]:
            row = r["results"][str(n)]["rows"][name]
            p = row["placement"]
            lines.append(
                f"| {labels[name]} | {n} | {p['mesh']['data']} × {p['mesh']['members']} | {p['per_device_batch']} | "
                f"{row['compile']:.1f} | {row['steps_per_second']:.1f} | {row['time_to_posterior']:.1f} | {row['accuracy']:.3f} | "
                f"{row['max_prob_diff']:.1e} |"
            )
    lines += [
        "",
        (f"Overhead of the sharded path on one device (`devices=1`: a 1×1 mesh, NamedSharding layouts and the batch "
         f"constraint) against the unsharded path, fastest per-step run time of {r['repeats']} alternating fits each "
         f"(target ≤ {r['target_overhead']:.2f}):"),
        "",
        "| workload | unsharded ms/step | sharded ms/step | ratio |",
        "|---|---|---|---|",
    ]
    for name in WORKLOADS:
        o = r["results"]["1"]["rows"][name]["overhead"]
        mark = "" if o["ratio"] <= r["target_overhead"] else " (over target)"
        lines.append(f"| {labels[name]} | {1e3 * min(o['unsharded']):.2f} | {1e3 * min(o['sharded']):.2f} | {o['ratio']:.3f}{mark} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
