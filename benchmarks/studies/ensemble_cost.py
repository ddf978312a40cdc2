"""What training M ensemble members as one program costs against one MAP fit,
measured side by side in one process (each fit compiled cold: the library API does not use
JAX's persistent cache).

* **moons** (700 points, the 2-5-5-2 tanh MLP of backends.py, 5,000 full-batch Adam steps):
  overhead-bound, so the target is wall time — fit plus prediction, compile included — of a
  5-member ensemble ≤ 1.5 × one MAP fit's.
* **MNIST 2×400** (784-400-400-10 ReLU, N(0, 1) prior, batches of 128, Adam 1e-3):
  compute-bound on 2 cores, so the target is the run time (compile excluded) per member ≤
  1.1 × one MAP fit's, on the same steps.
* **layouts**: the same per-member ratio for 2×100 … 2×800 MLPs with the members all stepped
  every step (``layout="vmap"``) and stepped in turn through each chunk (``"in_turn"``): the
  measurement behind ``layout="auto"``'s threshold (``bnnpp.inference.ensemble.IN_TURN_BYTES``).

    python benchmarks/studies/ensemble_cost.py            # moons + MNIST (2 epochs each fit) + layouts (~10 CPU minutes)
    python benchmarks/studies/ensemble_cost.py --quick    # moons + MNIST on 5,000 images, 1 epoch (< 1 minute)

Writes ``--results``/ensemble_cost.{json,md}. MNIST from ``--data-dir`` or ``$BNNPP_DATA_DIR``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: _common and the table scripts
sys.path.insert(0, BENCHMARKS)
from _common import default_data_dir, machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))
MEMBERS = 5
BATCH = 128
TARGETS = {"moons_wall_ratio": 1.5, "mnist_per_member_ratio": 1.1}


def _pair(model, data, repeats: int, map_options: dict, ensemble_options: dict) -> dict:
    """MAP; the ensemble with its default layout (``auto``); the ensemble with the other layout
    (``vmap`` / ``in_turn``); and the ensemble stepping one member at a time every step
    (``members_per_batch=1``): fitted in turn ``repeats`` times; each fit's fastest run (on a
    shared machine the minimum is the least disturbed measurement) and every run's times."""
    runs = {"map": [], "ensemble": [], "ensemble_other": [], "ensemble_loop": []}
    for _ in range(repeats):
        runs["map"].append(_timed(model, data, "map", **map_options))
        runs["ensemble"].append(_timed(model, data, "ensemble", members=MEMBERS, **ensemble_options))
        other = "vmap" if runs["ensemble"][-1]["layout"] == "in_turn" else "in_turn"
        runs["ensemble_other"].append(_timed(model, data, "ensemble", members=MEMBERS, layout=other, **ensemble_options))
        runs["ensemble_loop"].append(_timed(model, data, "ensemble", members=MEMBERS, members_per_batch=1, **ensemble_options))
    out = {}
    for name, rs in runs.items():
        out[name] = {k: min(r[k] for r in rs) for k in ("wall", "compile", "run")}
        out[name].update(accuracy=rs[0]["accuracy"], steps=rs[0]["steps"], layout=rs[0]["layout"],
                         all_wall=[r["wall"] for r in rs], all_run=[r["run"] for r in rs])
    return out


def _timed(model, data, method: str, **options) -> dict:
    import bnnpp

    t0 = time.perf_counter()
    post = bnnpp.fit(model, data, method=method, seed=0, progress=False, **options)
    probs = post.predict(data.x_test).probs
    wall = time.perf_counter() - t0
    acc = float((probs.mean(0).argmax(-1) == data.y_test).mean())
    return {"wall": wall, "compile": post.stats.compile_seconds, "run": post.stats.run_seconds, "accuracy": acc,
            "steps": post.stats.steps_run, "layout": post.stats.extras.get("layout")}


def _layouts(mnist, widths: list[int], repeats: int, common: dict) -> list[dict]:
    """Per-member run time over one MAP fit's, for both layouts, on 2×width MNIST MLPs: where
    stepping the members in turn starts to pay (``ensemble.IN_TURN_BYTES``)."""
    import bnnpp
    from bnnpp import priors

    out = []
    for width in widths:
        net = bnnpp.models.mlp((width, width), activation="relu", num_classes=10, prior=priors.normal(1.0))
        params = 784 * width + width + width * width + width + width * 10 + 10
        runs = {"map": [], "vmap": [], "in_turn": []}
        for _ in range(repeats):
            runs["map"].append(_timed(net, mnist, "map", **common)["run"])
            for layout in ("vmap", "in_turn"):
                runs[layout].append(_timed(net, mnist, "ensemble", members=MEMBERS, layout=layout, **common)["run"])
        best = {k: min(v) for k, v in runs.items()}
        row = {"width": width, "params": params, "state_mib": MEMBERS * params * 16 / 2**20, "runs": runs,
               **{f"{k}_per_member": best[k] / MEMBERS / best["map"] for k in ("vmap", "in_turn")}}
        print("layouts", row, flush=True)
        out.append(row)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="MNIST on 5,000 images for 1 epoch")
    ap.add_argument("--epochs", type=int, default=None, help="MNIST epochs of each fit (default: quick 1, full 2)")
    ap.add_argument("--repeats", type=int, default=2, help="fits of each kind, alternating; the fastest counts (default 2)")
    ap.add_argument("--moons-repeats", type=int, default=5, help="the same for the moons fits, whose wall time is mostly "
                    "compilation and varies most from fit to fit (default 5; a moons fit takes ~2 s)")
    ap.add_argument("--widths", default="100,200,300,400,800", help="hidden widths of the layouts table (2 layers each; "
                    "'' to skip it; --quick: 100,400)")
    ap.add_argument("--data-dir", default=None, help="folder holding mnist/ (default: $BNNPP_DATA_DIR, else ../shared/data)")
    ap.add_argument("--results", default=os.path.join(HERE, "results"), help="folder for ensemble_cost.{json,md}")
    args = ap.parse_args(argv)
    import bnnpp
    from bnnpp import priors

    load_before = os.getloadavg()[0]
    moons = bnnpp.data.load_synthetic("moons", seed=0)
    small = bnnpp.models.mlp((5, 5), activation="tanh", num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))
    rows = {"moons": _pair(small, moons, args.moons_repeats, {}, {})}
    print("moons", rows["moons"], flush=True)

    try:
        mnist = bnnpp.data.load("mnist", args.data_dir or default_data_dir(), normalize="255", validation=10_000, flatten=True)
    except ValueError as e:
        raise SystemExit(f"ensemble_cost: {e}") from None
    if args.quick:
        mnist = bnnpp.data.Dataset(mnist.x_train[:5000], mnist.y_train[:5000], mnist.x_test[:2000], mnist.y_test[:2000],
                                   mnist.task, mnist.num_classes, mnist.name)
    epochs = args.epochs or (1 if args.quick else 2)
    m = len(mnist.x_train) // BATCH
    net = bnnpp.models.mlp((400, 400), activation="relu", num_classes=10, prior=priors.normal(1.0))
    common = {"num_steps": epochs * m, "batch_size": BATCH, "learning_rate": 1e-3, "init_radius": 0.07, "chunk_size": m}
    rows["mnist"] = _pair(net, mnist, args.repeats, common, common)
    print("mnist", rows["mnist"], flush=True)
    widths = "100,400" if args.quick and args.widths == ap.get_default("widths") else args.widths
    layouts = _layouts(mnist, [int(w) for w in widths.split(",") if w], args.repeats, {**common, "num_steps": m})

    moons_ratio = rows["moons"]["ensemble"]["wall"] / rows["moons"]["map"]["wall"]
    moons_run_ratio = rows["moons"]["ensemble"]["run"] / rows["moons"]["map"]["run"]
    per_member = rows["mnist"]["ensemble"]["run"] / MEMBERS / rows["mnist"]["map"]["run"]
    ratios = lambda name: {"moons_wall_ratio": rows["moons"][name]["wall"] / rows["moons"]["map"]["wall"],
                           "mnist_per_member_ratio": rows["mnist"][name]["run"] / MEMBERS / rows["mnist"]["map"]["run"]}
    result = {
        "benchmark": "ensemble_cost",
        "produced_by": " ".join(["python benchmarks/studies/ensemble_cost.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "load_average": [load_before, os.getloadavg()[0]],
        "members": MEMBERS,
        "repeats": args.repeats,
        "moons_repeats": args.moons_repeats,
        "mnist": {"epochs": epochs, "steps": epochs * m, "n_train": len(mnist.x_train), "batch_size": BATCH},
        "rows": rows,
        "moons_wall_ratio": moons_ratio,
        "moons_run_ratio": moons_run_ratio,
        "mnist_per_member_ratio": per_member,
        "other_layout": ratios("ensemble_other"),
        "loop": ratios("ensemble_loop"),
        "layouts": layouts,
        "targets": TARGETS,
    }
    md = markdown(result)
    write_results(args.results, "ensemble_cost", result, md)
    print(md)
    return result


def markdown(r: dict) -> str:
    """The table of a result dict (also to re-render a saved ensemble_cost.json)."""
    lines = [
        "# ensemble_cost: 5 members in one program vs one MAP fit",
        "",
        (f"`{r['produced_by']}`, {r['date']}, {r['machine']}. Both fits of a row run in one process, "
        f"alternately, {r.get('moons_repeats', r['repeats'])} times each on moons and {r['repeats']} times on MNIST, each "
        "compiled cold; the fastest of each kind is shown; wall = fit + prediction on the test set."),
        "",
        "| data | fit | wall s | compile s | run s | test accuracy |",
        "|---|---|---|---|---|---|",
    ]
    for data_name, fits in r["rows"].items():
        for name, row in fits.items():
            layout = {"vmap": "one vmap", "in_turn": "members in turn through each chunk"}
            label = {"map": "map", "ensemble": f"ensemble ({MEMBERS}, default: {layout.get(row.get('layout'), 'one vmap')})",
                     "ensemble_other": f"ensemble ({MEMBERS}, layout={row.get('layout')})",
                     "ensemble_loop": f"ensemble ({MEMBERS}, members_per_batch=1: one member at a time every step)"}[name]
            lines.append(f"| {data_name} | {label} | {row['wall']:.1f} | {row['compile']:.1f} | {row['run']:.1f} | {row['accuracy']:.3f} |")
    load = r.get("load_average")
    if load is not None:  # results written before the load was recorded have none
        lines[2] += f" Load average {load[0]:.1f} before, {load[1]:.1f} after (other work on the same cores)."
    spread = max(max(row["all_run"]) / min(row["all_run"]) for fits in r["rows"].values() for row in fits.values())
    lines += [
        "",
        (f"- moons: ensemble / MAP wall time **{r['moons_wall_ratio']:.2f}x** (target ≤ {TARGETS['moons_wall_ratio']}x); "
        f"run time alone {r['moons_run_ratio']:.2f}x (5,000 full-batch steps on 700 rows: each step does five "
        f"members' arithmetic); compile {r['rows']['moons']['ensemble']['compile']:.1f} s against "
        f"{r['rows']['moons']['map']['compile']:.1f} s (benchmarks/README.md: where the time goes)."),
        (f"- MNIST 2×400 ({r['mnist']['epochs']} epoch(s), {r['mnist']['steps']} steps of {BATCH}): run time per member / MAP run time "
        f"**{r['mnist_per_member_ratio']:.2f}x** (target ≤ {TARGETS['mnist_per_member_ratio']}x)."),
        *([] if "other_layout" not in r else [
            (f"- The other layout (moons: members in turn; MNIST: one vmap): moons wall "
             f"**{r['other_layout']['moons_wall_ratio']:.2f}x**, MNIST per member **{r['other_layout']['mnist_per_member_ratio']:.2f}x**.")]),
        (f"- members_per_batch=1 (the same members, one after the other inside every step): moons wall "
         f"**{r['loop']['moons_wall_ratio']:.2f}x**, MNIST per member **{r['loop']['mnist_per_member_ratio']:.2f}x**."),
        _moons_walls(r["rows"]["moons"]),
        (f"- Repeats of one fit differ by up to {spread:.2f}x in run time (every run: `all_run` in the JSON): the "
         "machine's 2 cores are shared, so ratios of these minima are the least disturbed estimate, not exact."),
    ]
    if r.get("layouts"):
        lines += [
            "",
            "## layouts: where stepping the members in turn pays",
            "",
            (f"MNIST 2×width ReLU MLPs, {MEMBERS} members, 1 epoch of {BATCH}-row batches; run time per member over one MAP "
             "fit's, fastest of the repeats. Members' state = parameters, gradients and Adam's two moments, float32. "
             "`layout=\"auto\"` steps members in turn on a CPU above 20 MiB."),
            "",
            "| hidden | weights | members' state MiB | vmap | in turn |",
            "|---|---|---|---|---|",
        ]
        for row in r["layouts"]:
            lines.append(f"| 2×{row['width']} | {row['params']:,} | {row['state_mib']:.0f} | {row['vmap_per_member']:.2f}x "
                         f"| {row['in_turn_per_member']:.2f}x |")
    return "\n".join(lines) + "\n"


def _moons_walls(fits: dict) -> str:
    """Every moons fit's wall time, and the ratio of the medians beside that of the minima."""
    walls = {k: fits[k]["all_wall"] for k in ("map", "ensemble")}
    median = statistics.median(walls["ensemble"]) / statistics.median(walls["map"])
    shown = "; ".join(f"{k} " + ", ".join(f"{w:.2f}" for w in v) for k, v in walls.items())
    return (f"- moons wall of every fit, in order (s): {shown}. Ratio of the medians {median:.2f}x (the first fit of a "
            "process also pays its warm-up).")


if __name__ == "__main__":
    main(sys.argv[1:])
