"""Bayes by Backprop on MNIST (Blundell et al. 2015, §5.1): cost against MAP, the test-error
curve, the final test error and the pruning table, in one process.

Set-up as in the paper: 784-400-400-10 ReLU network, scale-mixture prior π = 0.5, σ1 = 1,
σ2 = e⁻⁶ on every weight and bias, pixels divided by 126, the first 50,000 training images
for training (the last 10,000 are the validation split), minibatches of 128, local
reparameterisation, KL re-weighting π_i = 2^(M−i)/(2^M−1) (which Singh's reproduction found
0.3% better than uniform), Adam with learning rate 1e-3.

What it measures:

* seconds per epoch of BBB and of MAP (the same network and prior, the same minibatches,
  Adam), from ``rounds`` alternating timing fits in this process (BBB, MAP, BBB, MAP, ...;
  compilation excluded; median over rounds), their ratio, and the process's peak resident
  memory (``getrusage`` maxrss); outside ``--quick`` also BBB with a N(0, 1) prior, whose
  closed-form KL needs no weight sample (the gap to the scale-mixture row is the cost of its
  Monte-Carlo KL);
* the BBB training run: test error at the variational means after every epoch (the
  ``validation_data`` hook of the bbb backend, on the device), the final test error and NLL of
  the posterior predictive from 10 draws, and the pruning table (SNR and magnitude, 0–98%).

    python benchmarks/mnist_bbb.py --quick        # smoke run, ~2 minutes on an idle 2-core CPU
    python benchmarks/mnist_bbb.py                # the 30-minute CPU run: epochs fitted to the budget
    python benchmarks/mnist_bbb.py --full         # the paper-scale schedule (600 epochs; for a GPU)

Writes ``--out``/mnist_bbb.{json,md} (default benchmarks/results) with the command, the
machine and device, and the date. Data: ``--data-dir`` or ``$BNNPP_DATA_DIR`` (the folder
holding ``mnist/``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import resource
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 128
LEARNING_RATE = 1e-3
FULL_EPOCHS = 600  # Singh's reproduction trained 600 epochs at lr 1e-3; the paper gives no count
TARGETS = {"ratio": 2.0, "peak_memory_gb": 3.0, "test_error_cpu_30min": 0.016, "test_error_full": 0.014}
PUBLISHED = {
    "blundell_2x400": 0.0136,
    "blundell_2x1200": 0.0132,
    "blundell_pruned_95": 0.0129,
    "singh_gaussian_2x400": 0.0169,
}


def _default_data_dir() -> str:
    return os.environ.get("BNNPP_DATA_DIR") or os.path.join(HERE, "..", "..", "shared", "data")


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux: kilobytes


def _device() -> str:
    import jax

    d = jax.devices()[0]
    return f"{d.platform}: {getattr(d, 'device_kind', str(d))} (x{jax.device_count()})"


def build(hidden=(400, 400)):
    from bnnpp import models, priors

    return models.mlp(hidden, activation="relu", num_classes=10, prior=priors.scale_mixture(0.5, 1.0, math.exp(-6)))


def bbb_options(epochs: int, num_batches: int, **extra) -> dict:
    return {
        "epochs": epochs,
        "batch_size": BATCH,
        "learning_rate": LEARNING_RATE,
        "estimator": "local",
        "kl_weighting": "blundell",
        "chunk_size": num_batches,  # one compiled chunk = one epoch
        **extra,
    }


def _with_schedule(options: dict, schedule: str, num_steps: int) -> dict:
    """``schedule="cosine"``: Adam whose learning rate decays from LEARNING_RATE to 1% of it over
    the run (cosine), instead of the constant rate. With a 30-minute CPU budget (~150–250
    epochs, not the 600 of Singh's reproduction) the constant rate leaves the test error
    bouncing between 1.6% and 1.9% from epoch 30 on (measured); annealing settles it."""
    if schedule == "constant":
        return options
    import optax

    out = {k: v for k, v in options.items() if k != "learning_rate"}
    out["optimizer"] = optax.adam(optax.cosine_decay_schedule(LEARNING_RATE, num_steps, alpha=0.01))
    return out


def map_options(epochs: int, num_batches: int) -> dict:
    # start like BBB's Glorot means (uniform, limit √(6/(784+400)) ≈ 0.07), not MAP's default (−2, 2)
    return {
        "num_steps": epochs * num_batches,
        "batch_size": BATCH,
        "learning_rate": LEARNING_RATE,
        "init_radius": 0.07,
        "chunk_size": num_batches,
    }


def timing(model, data, rounds: int, epochs: int, seed: int, gaussian: bool) -> dict:
    """Alternate BBB and MAP fits of ``epochs`` epochs; seconds per epoch from each backend's
    own run time (compilation excluded). With ``gaussian``, each round also times BBB with a
    N(0, 1) prior instead of the scale mixture: its KL is closed-form, so the step needs no
    weight sample — the difference is the cost of the Monte-Carlo KL of the scale mixture."""
    import bnnpp
    from bnnpp import priors

    m = len(data.x_train) // BATCH
    fits = [("bbb", model, bbb_options(epochs, m, num_samples=10)), ("map", model, map_options(epochs, m))]
    if gaussian:
        normal_net = bnnpp.models.mlp((400, 400), activation="relu", num_classes=10, prior=priors.normal(1.0))
        fits.append(("bbb_gaussian_prior", normal_net, bbb_options(epochs, m, num_samples=10)))
    per = {name: [] for name, _, _ in fits}
    compile_s = {name: [] for name, _, _ in fits}
    load = []
    last = {}
    for r in range(rounds):
        load.append(os.getloadavg()[0])
        for name, net, opts in fits:
            method = "map" if name == "map" else "bbb"
            post = bnnpp.fit(net, data, method=method, seed=seed, progress=False, **opts)
            per[name].append(post.info["run_seconds"] / epochs)
            compile_s[name].append(post.info["compile_seconds"])
            last[name] = post
            print(f"timing round {r + 1}/{rounds}: {name} {per[name][-1]:.2f} s/epoch (compile {compile_s[name][-1]:.1f} s)", flush=True)
    med = {k: statistics.median(v) for k, v in per.items()}
    map_pred = last["map"].predict(data.x_test)
    return {
        "rounds": rounds,
        "epochs_per_fit": epochs,
        "seconds_per_epoch": per,
        "compile_seconds": compile_s,
        "median_seconds_per_epoch": med,
        "ratio_bbb_over_map": med["bbb"] / med["map"],
        "ratio_per_round": [b / a for b, a in zip(per["bbb"], per["map"], strict=True)],
        "load_average_1min": load,
        "map_test_error": 1.0 - float((map_pred.mean.argmax(-1) == data.y_test).mean()),
    }


def train(model, data, epochs: int, seed: int, progress: bool, schedule: str = "constant") -> tuple[object, dict]:
    """The BBB run: the test error at the variational means after every epoch, then 10 draws."""
    import bnnpp
    from bnnpp import metrics

    m = len(data.x_train) // BATCH
    t0 = time.perf_counter()
    post = bnnpp.fit(
        model, data, method="bbb", seed=seed, progress=progress,
        **_with_schedule(bbb_options(epochs, m, num_samples=100, validation_data=(data.x_test, data.y_test)), schedule, epochs * m),
    )
    fit_s = time.perf_counter() - t0
    pred = post.predict(data.x_test, num_samples=10)
    steps = post.info.get("val_step")
    curve = [
        {"epoch": int(s) / m, "test_error_at_means": float(e)}
        for s, e in zip(steps if steps is not None else [], post.info.get("val_error", []), strict=True)
    ]
    return post, {
        "epochs": epochs,
        "steps_run": post.info["steps_run"],
        "stopped_at": post.info["stopped_at"],
        "compile_seconds": post.info["compile_seconds"],
        "run_seconds": post.info["run_seconds"],
        "fit_seconds": fit_s,
        "test_error_10_draws": 1.0 - metrics.accuracy(pred.mean, data.y_test),
        "test_nll_10_draws": metrics.nll(pred.mean, data.y_test),
        "curve": curve,
    }


def _markdown(r: dict) -> str:
    from bnnpp import pruning

    t, tr = r["timing"], r["training"]
    med = t["median_seconds_per_epoch"]
    ok = lambda flag: "met" if flag else "NOT met"
    lines = [
        f"# mnist_bbb ({r['mode']})",
        "",
        f"`{r['command']}`, {r['date']}; {r['machine']}; device {r['device']}.",
        "",
        f"Model: {r['model']}. BBB: {r['bbb']}.",
        "",
        "## Cost",
        "",
        f"| method | s / epoch (median of {t['rounds']} rounds) | per round | compile s |",
        "|---|---|---|---|",
    ]
    for k in t["seconds_per_epoch"]:
        rounds = ", ".join(f"{v:.2f}" for v in t["seconds_per_epoch"][k])
        comp = ", ".join(f"{v:.1f}" for v in t["compile_seconds"][k])
        lines.append(f"| {k} | {med[k]:.2f} | {rounds} | {comp} |")
    lines += [
        "",
        (f"BBB / MAP seconds per epoch: **{t['ratio_bbb_over_map']:.2f}** (per round: "
        f"{', '.join(f'{x:.2f}' for x in t['ratio_per_round'])}); target ≤ {TARGETS['ratio']:g}: {ok(r['targets']['ratio'])}."),
        (f"Peak resident memory of the process: **{r['peak_memory_gb']:.2f} GB**; target ≤ {TARGETS['peak_memory_gb']:g} GB: "
        f"{ok(r['targets']['peak_memory'])}."),
        (f"Load average (1 min) of the machine at the start of each round: {', '.join(f'{v:.1f}' for v in t['load_average_1min'])} "
        f"on {os.cpu_count()} cores (other work on a shared machine inflates and scatters the seconds)."),
        f"MAP after {t['epochs_per_fit']} epoch(s) of its last timing fit: test error {t['map_test_error']:.2%}.",
        "",
        "## BBB training",
        "",
        (f"{tr['epochs']} epochs ({tr['steps_run']} steps), fit {tr['fit_seconds']:.0f} s (compile {tr['compile_seconds']:.1f} s, "
        f"run {tr['run_seconds']:.0f} s). Final test error from 10 posterior draws: **{tr['test_error_10_draws']:.2%}** "
        f"(NLL {tr['test_nll_10_draws']:.4f})."),
    ]
    if r["targets"].get("test_error") is not None:
        lines.append(f"Target {r['targets']['test_error_target']:.1%}: {ok(r['targets']['test_error'])}.")
    lines += ["", "| epoch | test error at the variational means |", "|---|---|"]
    curve = tr["curve"]
    step = max(1, len(curve) // 20)
    shown = curve[::step] + ([curve[-1]] if curve and (len(curve) - 1) % step else [])
    lines += [f"| {c['epoch']:g} | {c['test_error_at_means']:.2%} |" for c in shown]
    lines += [
        "",
        "## Pruning (pooled over layers, 10 draws per prediction)",
        "",
        pruning.table_markdown(r["pruning"]).rstrip("\n"),
        "",
        (f"Published (Blundell et al. 2015): 2×400 {PUBLISHED['blundell_2x400']:.2%}, 2×1200 {PUBLISHED['blundell_2x1200']:.2%}, "
        f"2×1200 with 95% of the weights removed by SNR {PUBLISHED['blundell_pruned_95']:.2%}; Singh's reproduction, "
        f"Gaussian prior 2×400: {PUBLISHED['singh_gaussian_2x400']:.2%}."),
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="smoke run under 2 minutes: 2 timing rounds of 1 epoch, 2 training epochs")
    mode.add_argument("--full", action="store_true", help=f"the paper-scale schedule: {FULL_EPOCHS} training epochs (for a GPU)")
    ap.add_argument("--epochs", type=int, default=None, help="training epochs (default: quick 2, full 600, else what fits --budget-minutes)")
    ap.add_argument("--budget-minutes", type=float, default=30.0, help="default mode: the BBB training run's wall budget")
    ap.add_argument("--rounds", type=int, default=None, help="alternating BBB/MAP timing rounds (default: quick 2, else 3)")
    ap.add_argument("--data-dir", default=None, help="folder holding mnist/ (default: $BNNPP_DATA_DIR, else ../shared/data)")
    ap.add_argument("--out", "--results", dest="out", default=os.path.join(HERE, "results"), help="folder for mnist_bbb.{json,md}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr-schedule", choices=("cosine", "constant"), default="cosine",
                    help="the training run's Adam learning rate: cosine decay from 1e-3 to 1e-5, or constant 1e-3 (timing fits: constant)")
    ap.add_argument("--progress", action="store_true", help="show the training progress bar")
    args = ap.parse_args(argv)
    for name in ("epochs", "rounds"):
        v = getattr(args, name)
        if v is not None and v < 1:
            ap.error(f"--{name} must be ≥ 1, got {v}")
    if not args.budget_minutes > 0:
        ap.error(f"--budget-minutes must be > 0, got {args.budget_minutes}")
    data_dir = args.data_dir or _default_data_dir()
    mode_name = "quick" if args.quick else "full" if args.full else "cpu-30min"
    t_start = time.perf_counter()

    import bnnpp
    from bnnpp import pruning

    try:
        data = bnnpp.data.load("mnist", data_dir, normalize="126", flatten=True, validation=10000)
    except ValueError as e:
        raise SystemExit(f"mnist_bbb: {e}") from None
    model = build()
    m = len(data.x_train) // BATCH
    rounds = args.rounds or (2 if args.quick else 3)
    t = timing(model, data, rounds, 1, args.seed, gaussian=not args.quick)

    if args.epochs is not None:
        epochs = args.epochs
    elif args.quick:
        epochs = 2
    elif args.full:
        epochs = FULL_EPOCHS
    else:  # as many epochs as fit the budget at the measured speed, compile included, 5% margin
        # the median round, not the slowest: one round slowed by other work on a shared
        # machine would otherwise cut the run to a third of the budget
        per_epoch = t["median_seconds_per_epoch"]["bbb"] * 1.05
        epochs = max(1, int((args.budget_minutes * 60 - max(t["compile_seconds"]["bbb"])) / per_epoch))
        print(f"budget {args.budget_minutes:g} min at {per_epoch:.2f} s/epoch: {epochs} epochs", flush=True)
    post, tr = train(model, data, epochs, args.seed, args.progress, args.lr_schedule)
    print(f"BBB {epochs} epochs: test error {tr['test_error_10_draws']:.2%} (10 draws), fit {tr['fit_seconds']:.0f} s", flush=True)
    rows = pruning.pruning_table(post, data.x_test, data.y_test, num_samples=10)
    peak = _peak_gb()

    target_err = TARGETS["test_error_full"] if args.full else TARGETS["test_error_cpu_30min"]
    judged = mode_name != "quick" and args.epochs is None  # only the real schedules are judged on error
    result = {
        "benchmark": "mnist_bbb",
        "mode": mode_name,
        "command": "python benchmarks/mnist_bbb.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": dt.datetime.now().isoformat(timespec="minutes"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"jax {__import__('jax').__version__}",
        "device": _device(),
        "model": "784-400-400-10 ReLU MLP, scale-mixture prior (π=0.5, σ1=1, σ2=e^-6); pixels/126; 50,000 train / 10,000 test",
        "bbb": f"batch {BATCH}, Adam lr {LEARNING_RATE:g} ({args.lr_schedule}{' decay to 1e-5 in the training run' if args.lr_schedule == 'cosine' else ''}), local reparameterisation, KL weighting 2^(M-i)/(2^M-1), M={m}",
        "timing": t,
        "training": tr,
        "pruning": rows,
        "peak_memory_gb": peak,
        "total_seconds": time.perf_counter() - t_start,
        "targets": {
            "ratio": t["ratio_bbb_over_map"] <= TARGETS["ratio"],
            "peak_memory": peak <= TARGETS["peak_memory_gb"],
            "test_error_target": target_err,
            "test_error": (tr["test_error_10_draws"] <= target_err) if judged else None,
        },
        "published": PUBLISHED,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "mnist_bbb.json"), "w") as f:
        json.dump(result, f, indent=2)
    md = _markdown(result)
    with open(os.path.join(args.out, "mnist_bbb.md"), "w") as f:
        f.write(md)
    print(md)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
