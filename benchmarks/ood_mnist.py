"""The practitioners' posteriors on MNIST 2×400: deep ensemble, MultiSWAG and MC dropout
against Bayes by Backprop and MAP — test error, NLL, ECE, and how well predictive entropy
separates MNIST test images from Fashion-MNIST and from noise (AUROC).

Set-up, the same for every method: 784-400-400-10 ReLU MLP, N(0, 1) prior on every weight,
50,000 training images (pixels / 255; the last 10,000 held out and unused), batches of 128,
Adam 1e-3, ``--epochs`` epochs of training per network (default 10), the same seed.

* ``map``: one network, weights start U(−0.07, 0.07) (about Glorot's limit; MAP's default
  radius 2 is for tiny nets), as every network below.
* ``ensemble``: 5 members, each the MAP fit above from its own start (one vmapped program).
* ``multiswag``: 5 members; MAP pretraining for ``epochs − swag_epochs`` epochs, then
  ``swag_epochs`` (default 3) epochs of SGD at a constant per-example rate 0.01, collecting
  once per epoch (rank = collections); 10 draws per member.
* ``mc_dropout``: dropout p = 0.1 on the inputs of every layer, weight decay from the prior.
* ``bbb``: local reparameterisation, Blundell's KL weights, 50 draws; as
  benchmarks/mnist_bbb.py's N(0, 1)-prior variant.

Every posterior predicts from its own draws (ensemble 5, others 50: MultiSWAG 5 × 10); MAP
from its one. Out-of-distribution sets: the Fashion-MNIST test images and uniform noise in
the pixel range (``--n-ood`` each, default 5,000).

CPU budget: the full run is sized for about 20 CPU minutes on 2 cores (the MNIST steps of
5 + 5 + 1 + 1 networks and BBB's ≈ 2-network cost, × 10 epochs); ``--quick`` trains on 5,000
images for 1 epoch (< 2 minutes).

    python benchmarks/ood_mnist.py            # full: writes results/ood_mnist.{json,md}
    python benchmarks/ood_mnist.py --quick

Data: ``--data-dir`` or ``$BNNPP_DATA_DIR`` (the folder holding ``mnist/`` and ``fashion_mnist/``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time

from _common import default_data_dir, machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 128
LEARNING_RATE = 1e-3
INIT_RADIUS = 0.07
MEMBERS = 5
METHODS = ("map", "ensemble", "multiswag", "mc_dropout", "bbb")


def options(method: str, epochs: int, m: int, swag_epochs: int) -> dict:
    """Each method's options for ``epochs`` epochs of ``m`` steps."""
    common = {"batch_size": BATCH, "chunk_size": m}
    if method == "map":
        return {**common, "num_steps": epochs * m, "learning_rate": LEARNING_RATE, "init_radius": INIT_RADIUS}
    if method == "ensemble":
        return {**options("map", epochs, m, swag_epochs), "members": MEMBERS}
    if method == "multiswag":
        pre = max(epochs - swag_epochs, 1)
        return {**common, "members": MEMBERS, "pretrain_steps": pre * m, "swag_epochs": swag_epochs,
                "rank": max(swag_epochs, 2), "learning_rate": LEARNING_RATE, "swag_learning_rate": 0.01,
                "init_radius": INIT_RADIUS, "num_samples": 10}
    if method == "mc_dropout":
        return {**common, "num_steps": epochs * m, "rate": 0.1, "learning_rate": LEARNING_RATE, "init_radius": INIT_RADIUS,
                "num_samples": 50}
    if method == "bbb":
        # constant Adam like the other fits here (bbb's default became a cosine decay after these results)
        return {**common, "epochs": epochs, "learning_rate": LEARNING_RATE, "schedule": "constant", "estimator": "local",
                "kl_weighting": "blundell", "num_samples": 50}
    raise ValueError(method)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="5,000 training images, 1 epoch, 1,000 test and OOD images")
    ap.add_argument("--epochs", type=int, default=None, help="training epochs of every network (default: quick 1, full 10)")
    ap.add_argument("--swag-epochs", type=int, default=None, help="MultiSWAG's SGD epochs, within --epochs (default: quick 2, full 3)")
    ap.add_argument("--n-ood", type=int, default=None, help="images in each OOD set (default: quick 1,000, full 5,000)")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset of " + ",".join(METHODS))
    ap.add_argument("--data-dir", default=None, help="folder holding mnist/ and fashion_mnist/ (default: $BNNPP_DATA_DIR, else ../shared/data)")
    ap.add_argument("--results", default=os.path.join(HERE, "results"), help="folder for ood_mnist.{json,md}")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    if not methods or set(methods) - set(METHODS):
        ap.error(f"--methods: choose from {', '.join(METHODS)}, got {args.methods!r}")
    data_dir = args.data_dir or default_data_dir()
    t_start = time.perf_counter()
    cpu_start = time.process_time()

    import bnnpp
    from bnnpp import evaluation, priors

    try:
        data = bnnpp.data.load("mnist", os.path.join(data_dir, "mnist"), normalize="255", validation=10_000, flatten=True)
        fashion = bnnpp.data.load("fashion_mnist", os.path.join(data_dir, "fashion_mnist"), normalize="255", validation=0, flatten=True)
    except ValueError as e:
        raise SystemExit(f"ood_mnist: {e}") from None
    n_ood = args.n_ood or (1000 if args.quick else 5000)
    if args.quick:
        data = bnnpp.data.Dataset(data.x_train[:5000], data.y_train[:5000], data.x_test[:1000], data.y_test[:1000],
                                  data.task, data.num_classes, data.name)
    epochs = args.epochs or (1 if args.quick else 10)
    swag_epochs = args.swag_epochs or (2 if args.quick else 3)
    m = len(data.x_train) // BATCH
    ood = {"Fashion-MNIST": fashion.x_test[:n_ood], "uniform noise": evaluation.uniform_noise(data.x_test, n_ood, seed=args.seed)}
    model = bnnpp.models.mlp((400, 400), activation="relu", num_classes=10, prior=priors.normal(1.0))

    rows = {}
    for method in methods:
        post = bnnpp.fit(model, data, method=method, seed=args.seed, progress=not args.quick,
                         **options(method, epochs, m, swag_epochs))
        rep, _, _ = evaluation.evaluate(post, data.x_test, data.y_test, ood=ood, num_samples=post.num_chains * post.num_draws,
                                        seed=args.seed, figures=False)
        rows[method] = {
            "test_error": rep["test"]["error"], "nll": rep["test"]["nll"], "ece": rep["test"]["ece"],
            "auroc_entropy": {k: v["auroc_entropy"] for k, v in rep["ood"].items()},
            "draws": rep["num_samples"], "compile_seconds": post.stats.compile_seconds, "run_seconds": post.stats.run_seconds,
            "steps": post.stats.steps_run, "extras": {k: v for k, v in post.stats.extras.items() if k != "num_batches"},
        }
        r = rows[method]
        print(f"{method}: error {r['test_error']:.2%} nll {r['nll']:.4f} ece {r['ece']:.4f} AUROC "
              + ", ".join(f"{k} {v:.3f}" for k, v in r["auroc_entropy"].items())
              + f" (run {r['run_seconds']:.0f} s)", flush=True)

    result = {
        "benchmark": "ood_mnist",
        "produced_by": " ".join(["python benchmarks/ood_mnist.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "settings": {"epochs": epochs, "steps_per_epoch": m, "swag_epochs": swag_epochs, "n_train": len(data.x_train),
                     "n_test": len(data.x_test), "n_ood": n_ood, "batch_size": BATCH, "learning_rate": LEARNING_RATE,
                     "prior": "normal(1)", "members": MEMBERS, "seed": args.seed,
                     "options": {k: {o: v for o, v in options(k, epochs, m, swag_epochs).items()} for k in methods}},
        "rows": rows,
        "seconds": {"wall": time.perf_counter() - t_start, "cpu": time.process_time() - cpu_start},
    }
    if "ensemble" in rows and "map" in rows:
        result["ensemble_per_member_run_ratio"] = rows["ensemble"]["run_seconds"] / MEMBERS / rows["map"]["run_seconds"]
    if "ensemble" in rows and "bbb" in rows:
        e, b = rows["ensemble"], rows["bbb"]
        result["ensemble_vs_bbb"] = {"nll_at_least_as_good": e["nll"] <= b["nll"],
                                     "fashion_auroc_at_least_as_good": e["auroc_entropy"]["Fashion-MNIST"] >= b["auroc_entropy"]["Fashion-MNIST"]}
    md = _markdown(result)
    write_results(args.results, "ood_mnist", result, md)
    print(md)
    return result


def _markdown(r: dict) -> str:
    s = r["settings"]
    lines = [
        "# ood_mnist: ensemble, MultiSWAG, MC dropout, BBB and MAP on MNIST 2×400",
        "",
        (f"`{r['produced_by']}`, {r['date']}, {r['machine']}; wall {r['seconds']['wall'] / 60:.1f} min, "
        f"process CPU {r['seconds']['cpu'] / 60:.1f} min."),
        "",
        (f"784-400-400-10 ReLU, N(0, 1) prior, {s['n_train']:,} training images, {s['epochs']} epoch(s) of batches of "
        f"{s['batch_size']} per network (MultiSWAG: the last {s['swag_epochs']} of them SGD with collection), Adam "
        f"{s['learning_rate']}; {s['n_test']:,} MNIST test images; {s['n_ood']:,} images per OOD set. AUROC: predictive "
        "entropy separating MNIST test (negative) from the OOD set (positive)."),
        "",
        "| method | draws | test error | NLL | ECE | AUROC Fashion-MNIST | AUROC uniform noise | run s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in r["rows"].items():
        a = row["auroc_entropy"]
        lines.append(f"| {name} | {row['draws']} | {row['test_error']:.2%} | {row['nll']:.4f} | {row['ece']:.4f} | "
                     f"{a['Fashion-MNIST']:.3f} | {a['uniform noise']:.3f} | {row['run_seconds']:.0f} |")
    if "ensemble_per_member_run_ratio" in r:
        lines += ["", f"Ensemble run time per member / MAP run time: {r['ensemble_per_member_run_ratio']:.2f}x (same steps, same process)."]
    if "ensemble_vs_bbb" in r:
        v = r["ensemble_vs_bbb"]
        lines += [(f"Ensemble NLL at least as good as BBB's: {v['nll_at_least_as_good']}; Fashion-MNIST entropy AUROC at "
                  f"least as good: {v['fashion_auroc_at_least_as_good']}.")]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main(sys.argv[1:])
