"""Sparse variational dropout on MNIST (Molchanov, Ashukha & Vetrov 2017, Table 1): test error
and compression (all weights / weights with log α ≤ 3) per layer and in total, beside the
paper's numbers.

Networks: LeNet-300-100 (``mlp(hidden=(300, 100))``, ReLU, 266,200 weights) and LeNet-5-Caffe
(conv 20 5×5 → max-pool 2 → conv 50 5×5 → max-pool 2 → dense 500 → dense 10, ReLU, 430,500
weights: the "LeNet-5" of the paper's Table 1, written here with bnnpp's layers; bnnpp's own
``lenet5`` is LeCun's smaller 6-16-120-84 net). Protocol as in the paper: the 60,000 training
images (pixels / 255), minibatches of 100, Adam with the learning rate decayed linearly from
1e-3 to 0, the KL weight warmed up linearly from 0 to 1 (``--warmup`` epochs), local
reparameterisation, additive noise reparameterisation, log α threshold 3; the paper trains 200
epochs from a random start (pretraining is allowed there; not used here).

    python benchmarks/sparse_vd.py --budget                  # LeNet-300-100, epochs fitted to 30 CPU minutes
    python benchmarks/sparse_vd.py --full                    # both nets, 200 epochs each (hours on a CPU; for a GPU)
    python benchmarks/sparse_vd.py --budget --model lenet5   # LeNet-5-Caffe in the budget

The budget mode times one epoch (compilation apart) and trains as many epochs as fit
``--budget-minutes`` (default 30, compile and evaluation included), at most the paper's 200;
the warm-up is 10 epochs of 200, scaled with the epochs when fewer fit. Writes ``--out``/sparse_vd.{json,md} (default benchmarks/results) with the
command, the machine, the date and the load average. Data: ``--data-dir`` or
``$BNNPP_DATA_DIR`` (the folder holding ``mnist/``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 100
LEARNING_RATE = 1e-3
FULL_EPOCHS = 200
FULL_WARMUP = 10
#: Molchanov et al. 2017, Table 1 (Sparse VD rows): test error and compression ×.
PAPER = {"lenet300": {"error": 0.0192, "compression": 68.0}, "lenet5": {"error": 0.0075, "compression": 280.0}}
TARGET_BUDGET = {"lenet300": {"error": 0.022, "compression": 40.0}}  # the 30-minute CPU target


def lenet5_caffe():
    """LeNet-5-Caffe as a NumPyro model ``model(x, y=None)`` on ``(n, 28, 28, 1)`` images."""
    import jax
    import numpyro
    import numpyro.distributions as dist

    from bnnpp import priors
    from bnnpp.models.layers import conv2d, dense, max_pool

    prior = priors.normal(1.0)  # replaced by the log-uniform prior under method="vd"

    def model(x, y=None):
        h = max_pool(jax.nn.relu(conv2d("conv_0", x, 20, 5, prior)), 2)
        h = max_pool(jax.nn.relu(conv2d("conv_1", h, 50, 5, prior)), 2)
        h = jax.nn.relu(dense("dense_0", h.reshape((h.shape[0], -1)), 500, prior))
        logits = dense("dense_1", h, 10, prior)
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Categorical(logits=logits), obs=y)

    return model


def build(name: str):
    from bnnpp import models

    if name == "lenet300":
        return models.mlp((300, 100), activation="relu", num_classes=10)
    return lenet5_caffe()


def options(epochs: int, warmup: int, num_batches: int) -> dict:
    import optax

    return {
        "variant": "sparse", "epochs": epochs, "batch_size": BATCH, "kl_warmup_epochs": warmup,
        "optimizer": optax.adam(optax.linear_schedule(LEARNING_RATE, 0.0, epochs * num_batches)),
        "chunk_size": num_batches, "num_samples": 10,
    }


def seconds_per_epoch(model, data, num_batches: int, seed: int) -> tuple[float, float]:
    """(seconds per epoch, compile seconds) from a 1-epoch fit."""
    import bnnpp

    post = bnnpp.fit(model, data, method="vd", seed=seed, progress=False, **options(1, 0, num_batches))
    return post.info["run_seconds"], post.info["compile_seconds"]


def run(name: str, mode: str, args, data_dir: str) -> dict:
    import bnnpp
    from bnnpp import pruning

    data = bnnpp.data.load("mnist", data_dir, normalize="255", flatten=name == "lenet300", validation=0)
    model = build(name)
    m = len(data.x_train) // BATCH
    if args.epochs is not None:
        epochs = args.epochs
    elif mode == "full":
        epochs = FULL_EPOCHS
    else:
        per_epoch, compile_s = seconds_per_epoch(model, data, m, args.seed)
        per_epoch *= 1.05
        # the budget holds this timing fit, the run's compile and about a minute of evaluation
        left = args.budget_minutes * 60 - (time.perf_counter() - T0) - compile_s - 60
        epochs = max(1, min(FULL_EPOCHS, int(left / per_epoch)))  # the paper's 200 when they fit
        print(f"{name}: {per_epoch:.1f} s/epoch, {epochs} epochs fit the {args.budget_minutes:g}-minute budget", flush=True)
    warmup = args.warmup if args.warmup is not None else max(1, round(FULL_WARMUP * epochs / FULL_EPOCHS))
    t0 = time.perf_counter()
    post = bnnpp.fit(model, data, method="vd", seed=args.seed, progress=args.progress, **options(epochs, warmup, m))
    fit_s = time.perf_counter() - t0
    table = pruning.log_alpha_table(post, data.x_test, data.y_test, num_samples=10)
    print(f"{name}: {epochs} epochs in {fit_s:.0f} s: test error {table['test_error']:.2%}, compression {table['compression']:.1f}×", flush=True)
    return {
        "epochs": epochs, "kl_warmup_epochs": warmup, "steps_run": post.info["steps_run"], "stopped_at": post.info["stopped_at"],
        "compile_seconds": post.info["compile_seconds"], "run_seconds": post.info["run_seconds"], "fit_seconds": fit_s,
        "final_negative_elbo": float(post.info["negative_elbo"][-1]), **table, "paper": PAPER[name],
    }


def _markdown(r: dict) -> str:
    lines = [
        "# Sparse variational dropout on MNIST (Molchanov et al. 2017, Table 1)", "",
        (f"`{r['command']}` — {r['date']}, {r['machine']}; load average before / after: {r['load_before']} / {r['load_after']}; "
         f"{r['total_seconds'] / 60:.1f} min wall, {r.get('cpu_seconds', float('nan')) / 60:.1f} min CPU (this process)"), "",
        r["protocol"], "",
        "| network | epochs | test error | compression | paper: error | paper: compression | target met |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, x in r["results"].items():
        met = x.get("target_met")
        lines.append(
            f"| {NAMES[name]} | {x['epochs']} | {x['test_error']:.2%} | {x['compression']:.1f}× | {x['paper']['error']:.2%} | "
            f"{x['paper']['compression']:g}× | {'—' if met is None else 'yes' if met else 'no'} |"
        )
    for name, x in r["results"].items():
        from bnnpp.pruning import log_alpha_markdown

        lines += ["", f"## {NAMES[name]}", "", log_alpha_markdown(x),
                  f"{x['epochs']} epochs (KL warm-up {x['kl_warmup_epochs']}), fit {x['fit_seconds']:.0f} s (compile {x['compile_seconds']:.0f} s)."]
    return "\n".join(lines) + "\n"


NAMES = {"lenet300": "LeNet-300-100", "lenet5": "LeNet-5-Caffe"}
T0 = time.perf_counter()


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--budget", action="store_true", help="CPU mode: epochs fitted to --budget-minutes (default model lenet300)")
    mode.add_argument("--full", action="store_true", help=f"the paper's {FULL_EPOCHS} epochs (default: both models)")
    ap.add_argument("--model", choices=("lenet300", "lenet5", "both"), default=None)
    ap.add_argument("--budget-minutes", type=float, default=30.0)
    ap.add_argument("--epochs", type=int, default=None, help="override the number of epochs")
    ap.add_argument("--warmup", type=int, default=None, help=f"KL warm-up epochs (default: {FULL_WARMUP} per {FULL_EPOCHS} epochs)")
    ap.add_argument("--data-dir", default=None, help="folder holding mnist/ (default: $BNNPP_DATA_DIR, else ../shared/data)")
    ap.add_argument("--out", default=os.path.join(HERE, "results"), help="folder for sparse_vd.{json,md}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args(argv)
    if args.epochs is not None and args.epochs < 1:
        ap.error(f"--epochs must be >= 1, got {args.epochs}")
    if not args.budget_minutes > 0:
        ap.error(f"--budget-minutes must be > 0, got {args.budget_minutes}")
    from _common import default_data_dir, machine, write_results

    mode_name = "full" if args.full else "budget"
    chosen = args.model or ("both" if args.full else "lenet300")
    names = ["lenet300", "lenet5"] if chosen == "both" else [chosen]
    load_before = " ".join(f"{v:.2f}" for v in os.getloadavg())
    results = {}
    for name in names:
        try:
            results[name] = run(name, mode_name, args, args.data_dir or default_data_dir())
        except ValueError as e:
            raise SystemExit(f"sparse_vd: {e}") from None
        target = TARGET_BUDGET.get(name) if mode_name == "budget" and args.epochs is None else None
        x = results[name]
        x["target_met"] = None if target is None else bool(x["test_error"] <= target["error"] and x["compression"] >= target["compression"])
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result = {
        "benchmark": "sparse_vd", "mode": mode_name,
        "command": "python benchmarks/sparse_vd.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": dt.datetime.now().isoformat(timespec="minutes"), "machine": machine(),
        "load_before": load_before, "load_after": " ".join(f"{v:.2f}" for v in os.getloadavg()),
        "protocol": (f"method='vd', variant='sparse'; 60,000 training images / 10,000 test, pixels/255; batch {BATCH}; Adam, "
                     f"learning rate {LEARNING_RATE:g} decayed linearly to 0; KL weight linear from 0 to 1; log alpha threshold 3; "
                     "random start (no pretraining). Test error: the network at θ with the dropped weights zeroed (the paper's rule)."),
        "targets": TARGET_BUDGET, "results": results, "total_seconds": time.perf_counter() - T0,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
    }
    md = _markdown(result)
    write_results(args.out, "sparse_vd", result, md)
    print(md)
    return result


if __name__ == "__main__":
    main()
