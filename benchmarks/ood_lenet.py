"""A Bayesian LeNet-5 that refuses to classify what it was not trained on (McAteer's post,
part 5, after Blundell et al. 2015): the share of uniform-noise images, of the post's
standard-normal noise images and of the Fashion-MNIST test images whose posterior-mean class
probabilities stay below τ = 0.2, against the share of MNIST test images rejected.

Set-up as in the post: LeNet-5 (conv 6 5×5 SAME → pool → conv 16 5×5 → pool → conv 120 5×5 →
dense 84 → dense 10, ReLU), Flipout on every layer, N(0, 1) prior on every weight, the KL
divided by the number of training images (bnnpp ``kl_weighting="uniform"``), Adam 1e-3,
batches of 128, 6,000 steps on 55,000 training images (pixels / 255), 50 draws to predict.
For contrast the same network is also fitted by MAP (same prior, batches and optimiser; 3
epochs by default, enough for a point estimate): its softmax has no epistemic part to fall
back on.

    python benchmarks/ood_lenet.py             # full: 14 epochs = 6,006 steps (the post: 6,000)
    python benchmarks/ood_lenet.py --quick     # 2,000 training images, 1 epoch (< 2 minutes)

Writes ``--results``/ood_lenet.{json,md}, ood_lenet_ood.png and
ood_lenet_uncertainty_histograms.png (default
benchmarks/results). Data: ``--data-dir`` or ``$BNNPP_DATA_DIR`` (the folder holding
``mnist/`` and ``fashion_mnist/``; Fashion-MNIST is skipped with a note when absent).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import sys
import time

import numpy as np
from _common import default_data_dir, machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))
TAU = 0.2
BATCH = 128
LEARNING_RATE = 1e-3
POST_STEPS = 6000
NUM_SAMPLES = 50
MAP_INIT_RADIUS = 0.1  # weights start U(−0.1, 0.1), about Glorot's limit for these layers (MAP's default 2 is for tiny nets)
VALIDATION = 5000  # the post's tf.contrib MNIST reader: 55,000 train / 5,000 validation


def _ood_sets(data, data_dir: str, n: int, seed: int) -> tuple[dict, list[str]]:
    """The out-of-distribution sets, each ``(n, 28, 28, 1)`` in the training data's scale."""
    import bnnpp
    from bnnpp import evaluation

    sets = {
        "uniform noise": evaluation.uniform_noise(data.x_test, n, seed=seed),
        # the post's fake-data generator: independent N(0, 1) pixels
        "gaussian noise": np.random.default_rng(seed + 1).standard_normal((n, *data.x_test.shape[1:])).astype(np.float32),
    }
    notes = []
    try:
        fashion = bnnpp.data.load("fashion_mnist", os.path.join(data_dir, "fashion_mnist"), normalize="255", validation=0)
        sets["Fashion-MNIST"] = fashion.x_test[:n]
    except ValueError as e:
        notes.append(f"Fashion-MNIST skipped: {e}")
    return sets, notes


def _row(report: dict) -> dict:
    out = {"MNIST test": {"n": report["test"]["n"], "rejected": report["test"]["rejected"],
                          "mean_entropy": report["test"]["mean_entropy"],
                          "mean_mutual_information": report["test"]["mean_mutual_information"]}}
    out.update(report["ood"])
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2,000 training images, 1 epoch, 1,000 test and OOD images (< 2 minutes)")
    ap.add_argument("--epochs", type=int, default=None, help=f"training epochs (default: quick 1, full {math.ceil(POST_STEPS / ((60000 - VALIDATION) // BATCH))})")
    ap.add_argument("--map-epochs", type=int, default=None, help="epochs of the MAP contrast fit (default: quick 1, full 3; a point estimate converges in a few); 0 skips it")
    ap.add_argument("--data-dir", default=None, help="folder holding mnist/ and fashion_mnist/ (default: $BNNPP_DATA_DIR, else ../shared/data)")
    ap.add_argument("--results", default=os.path.join(HERE, "results"), help="folder for ood_lenet.{json,md,png}")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.epochs is not None and args.epochs < 1:
        ap.error(f"--epochs must be ≥ 1, got {args.epochs}")
    if args.map_epochs is not None and args.map_epochs < 0:
        ap.error(f"--map-epochs must be ≥ 0, got {args.map_epochs}")
    data_dir = args.data_dir or default_data_dir()
    t_start = time.perf_counter()


    import bnnpp
    from bnnpp import evaluation, priors

    try:
        data = bnnpp.data.load("mnist", data_dir, normalize="255", validation=VALIDATION)
    except ValueError as e:
        raise SystemExit(f"ood_lenet: {e}") from None
    n_eval = 1000 if args.quick else len(data.x_test)
    if args.quick:
        data = bnnpp.data.Dataset(data.x_train[:2000], data.y_train[:2000], data.x_test[:n_eval], data.y_test[:n_eval],
                                  data.task, data.num_classes, data.name)
    m = len(data.x_train) // BATCH
    epochs = args.epochs or (1 if args.quick else math.ceil(POST_STEPS / m))
    ood, notes = _ood_sets(data, data_dir, n_eval, args.seed)
    model = bnnpp.models.lenet5(prior=priors.normal(1.0))

    fits = {}
    post = bnnpp.fit(
        model, data, method="bbb", seed=args.seed, progress=not args.quick, epochs=epochs, batch_size=BATCH,
        learning_rate=LEARNING_RATE, schedule="constant", estimator="flipout", kl_weighting="uniform", num_samples=NUM_SAMPLES,
    )  # constant Adam, as the committed results were run (bbb's default became a cosine decay later)
    fits["bbb"] = post
    print(f"bbb: {epochs} epochs, compile {post.info['compile_seconds']:.0f} s, run {post.info['run_seconds']:.0f} s", flush=True)
    map_epochs = args.map_epochs if args.map_epochs is not None else (1 if args.quick else 3)
    if map_epochs:
        fits["map"] = bnnpp.fit(
            model, data, method="map", seed=args.seed, progress=not args.quick, num_steps=map_epochs * m, batch_size=BATCH,
            learning_rate=LEARNING_RATE, chunk_size=m, init_radius=MAP_INIT_RADIUS,
        )
        print(f"map: {map_epochs} epochs, run {fits['map'].info['run_seconds']:.0f} s", flush=True)

    reports, figs = {}, {}
    for name, p in fits.items():
        # the BBB fit's figures: histograms of entropy, mutual information and max probability,
        # MNIST test against each OOD set (τ marked), and the uncertainty histograms
        rep, f, _ = evaluation.evaluate(p, data.x_test, data.y_test, ood=ood, num_samples=NUM_SAMPLES, tau=TAU, seed=args.seed,
                                        figures=name == "bbb")
        reports[name] = rep
        figs.update({f"ood_lenet_{k}": v for k, v in f.items() if k in ("ood.png", "uncertainty_histograms.png")})
        print(f"{name}: test error {rep['test']['error']:.2%}, rejected "
              + ", ".join(f"{k} {v['rejected']:.1%}" for k, v in _row(rep).items()), flush=True)

    result = {
        "benchmark": "ood_lenet",
        "produced_by": " ".join(["python benchmarks/ood_lenet.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "settings": {"epochs": epochs, "steps": epochs * m, "map_epochs": map_epochs, "batch_size": BATCH, "learning_rate": LEARNING_RATE, "n_train": len(data.x_train),
                     "estimator": "flipout", "prior": "normal(1)", "kl_weighting": "uniform", "num_samples": NUM_SAMPLES, "tau": TAU,
                     "n_eval": n_eval, "seed": args.seed},
        "seconds": {name: {"compile": p.info["compile_seconds"], "run": p.info["run_seconds"]} for name, p in fits.items()}
        | {"total": time.perf_counter() - t_start},
        "rejected": {name: {k: v["rejected"] for k, v in _row(rep).items()} for name, rep in reports.items()},
        "test_error": {name: rep["test"]["error"] for name, rep in reports.items()},
        "reports": reports,
        "notes": notes,
        "published": "McAteer's post shows its noise images refused at τ = 0.2 after 6,000 steps (a figure of 10 images; no rate is given)",
    }
    md = _markdown(result)
    write_results(args.results, "ood_lenet", result, md, figs)
    print(md)
    return result


def _markdown(r: dict) -> str:
    s = r["settings"]
    names = list(r["rejected"])
    lines = [
        "# ood_lenet: a Bayesian LeNet-5 refusing out-of-distribution images",
        "",
        f"`{r['produced_by']}`, {r['date']}, {r['machine']}; {r['seconds']['total'] / 60:.1f} minutes in all.",
        f"LeNet-5, {s['estimator']}, prior {s['prior']}, KL {s['kl_weighting']}, Adam {s['learning_rate']:g}, batch {s['batch_size']}, "
        f"{s['epochs']} epoch(s) = {s['steps']} steps on {s['n_train']} images; {s['num_samples']} draws; reject when max p̄ < τ = {s['tau']}. "
        f"MAP contrast: the same network and prior, {s['map_epochs']} epoch(s).",
        "",
        "| images | n | " + " | ".join(f"rejected ({n})" for n in names) + " | BBB mean entropy | BBB mean MI | BBB AUROC (entropy / MI) vs MNIST test |",
        "|---|---|" + "---|" * len(names) + "---|---|---|",
    ]
    bbb = _row(r["reports"]["bbb"])
    for k, v in bbb.items():
        rej = " | ".join(f"{r['rejected'][n][k]:.1%}" for n in names)
        auroc = "—" if k == "MNIST test" else f"{v['auroc_entropy']:.3f} / {v['auroc_mutual_information']:.3f}"
        lines.append(f"| {k} | {v['n']} | {rej} | {v['mean_entropy']:.3f} | {v['mean_mutual_information']:.3f} | {auroc} |")
    lines += [
        "",
        "Test error: " + ", ".join(f"{n} {e:.2%}" for n, e in r["test_error"].items()) + ".",
        "Seconds: " + ", ".join(f"{n} compile {v['compile']:.0f} / run {v['run']:.0f}" for n, v in r["seconds"].items() if n != "total") + ".",
        f"Published: {r['published']}.",
    ]
    lines += [f"Note: {n}" for n in r["notes"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main(sys.argv[1:])
