"""Laplace approximations (method="laplace"): evidence vs a grid of prior precisions on moons,
linearised epistemic sd on the sinusoid, and MNIST 2x400 (MAP vs last-layer vs K-FAC Laplace
vs BBB: test error, NLL, ECE, Fashion-MNIST entropy AUROC) with peak memory.

    python benchmarks/laplace.py                 # everything (MNIST part budgeted at ~15 CPU minutes)
    python benchmarks/laplace.py --quick         # smoke run: tiny MNIST subset, few steps
    python benchmarks/laplace.py --data-dir DIR  # MNIST / Fashion-MNIST folder (default $BNNPP_DATA_DIR)

Writes benchmarks/results/laplace.{md,json} (``laplace_quick`` with --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common

PRECISIONS = (0.01, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux: kilobytes


def moons_part(quick: bool, hidden: tuple, hessian: str) -> dict:
    """Laplace with the linearised predictive on one MAP (same seed for every fit): the
    evidence's δ against the test NLL of every δ on a grid."""
    import bnnpp
    from bnnpp import metrics, priors

    data = bnnpp.data.moons(seed=0)
    model = bnnpp.models.mlp(hidden, num_classes=2, prior=priors.normal(1.0))
    steps = 300 if quick else 3000
    common = {"num_steps": steps, "learning_rate": 1e-2, "num_samples": 200, "progress": False, "seed": 0}
    rows = []
    for pp in ("evidence", *PRECISIONS):
        post = bnnpp.fit(model, data, method="laplace", hessian=hessian, prior_precision=pp, **common)
        pred = post.predict(data.x_test)
        rows.append({"prior_precision": post.info["prior_precision"], "chosen_by": "evidence" if pp == "evidence" else "grid",
                     "log_marginal_likelihood": post.info["log_marginal_likelihood"],
                     "test_nll": metrics.nll(pred.mean, data.y_test), "test_accuracy": metrics.accuracy(pred.mean, data.y_test)})
    best = min(r["test_nll"] for r in rows[1:])
    return {"model": f"mlp {hidden} tanh, N(0,1) prior, hessian={hessian}", "map_steps": steps, "rows": rows, "best_grid_nll": best,
            "evidence_nll": rows[0]["test_nll"], "evidence_nll_over_best": rows[0]["test_nll"] / best}


def sinusoid_part(quick: bool, scale: float) -> dict:
    """Epistemic sd of the linearised predictive at x = 0 (inside the data, [−0.5, 0.5]) and ±1.2."""
    import bnnpp
    from bnnpp import priors

    data = bnnpp.data.sinusoid(n=32, seed=0)
    model = bnnpp.models.mlp((50,), likelihood="gaussian", prior=priors.normal(scale))
    post = bnnpp.fit(model, data, method="laplace", num_steps=500 if quick else 5000, learning_rate=1e-2, num_samples=500,
                     progress=False, seed=0)
    x = np.array([[0.0], [1.2], [-1.2]], np.float32)
    sd = post.predict(x).epistemic_std
    return {"model": f"mlp (50,) tanh, N(0, {scale:g}²) prior, learned noise, kron + evidence, linearised", "epistemic_sd": {"0": float(sd[0]), "1.2": float(sd[1]), "-1.2": float(sd[2])},
            "ratio_min": float(min(sd[1], sd[2]) / sd[0]), "noise": post.info["noise"], "prior_precision": post.info["prior_precision"]}


def _scores(pred, y, pred_ood) -> dict:
    from bnnpp import metrics

    m = pred.mean
    ent_in, ent_out = pred.entropy, pred_ood.entropy
    # AUROC of entropy separating Fashion-MNIST (positive) from MNIST test images
    scores = np.r_[ent_in, ent_out]
    labels = np.r_[np.zeros(len(ent_in)), np.ones(len(ent_out))]
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    auroc = (ranks[labels == 1].sum() - len(ent_out) * (len(ent_out) + 1) / 2) / (len(ent_in) * len(ent_out))
    return {"test_error": 1 - metrics.accuracy(m, y), "nll": metrics.nll(m, y), "ece": metrics.ece(m, y), "fashion_entropy_auroc": float(auroc)}


BATCH = 128


def _mnist(quick: bool, data_dir: str):
    import bnnpp

    mnist = bnnpp.data.load("mnist", data_dir=data_dir, flatten=True)
    fashion = bnnpp.data.load("fashion_mnist", data_dir=data_dir, flatten=True)
    x, y, xt, yt, xo = mnist.x_train, mnist.y_train, mnist.x_test, mnist.y_test, fashion.x_test
    # the linearised predictive costs one Jacobian-vector product per draw: 5,000 test images of each
    # set and 20 draws keep the MNIST part within its ~15 CPU-minute budget
    return (x[:2000], y[:2000], xt[:500], yt[:500], xo[:500]) if quick else (x, y, xt[:5000], yt[:5000], xo[:5000])


def _mnist_validation(quick: bool, data_dir: str):
    """The 10,000 held-out training images (the first 2,000 are scored: laplace.VALIDATION_ROWS)."""
    import bnnpp

    mnist = bnnpp.data.load("mnist", data_dir=data_dir, flatten=True)
    return (mnist.x_val[:500], mnist.y_val[:500]) if quick else (mnist.x_val, mnist.y_val)


def _rows(epochs: int, num_batches: int) -> dict:
    map_opts = {"num_steps": epochs * num_batches, "batch_size": BATCH, "learning_rate": 1e-3, "init_radius": 0.07}
    return {
        "map": ("map", map_opts),
        "laplace last-layer (kron)": ("laplace", {**map_opts, "subset": "last_layer", "num_samples": 20}),
        "laplace all layers (kron)": ("laplace", {**map_opts, "num_samples": 20}),
        "laplace all layers (kron, layerwise δ)": ("laplace", {**map_opts, "prior_structure": "layerwise", "num_samples": 20}),
        "laplace all layers (kron, δ by validation)": ("laplace", {**map_opts, "prior_precision": "validation", "num_samples": 20}),
        "laplace last-layer (kron, probit link)": ("laplace", {**map_opts, "subset": "last_layer", "link": "probit", "num_samples": 20}),
        "bbb": ("bbb", {"epochs": epochs, "batch_size": BATCH, "learning_rate": 1e-3, "schedule": "constant", "num_samples": 20}),
        "lenet5 last-layer (kron), 1 MAP epoch": ("laplace", {**map_opts, "num_steps": num_batches, "subset": "last_layer", "num_samples": 20}),
    }


def mnist_row(label: str, quick: bool, data_dir: str, epochs: int) -> dict:
    """One row, in its own process (``--row``), so that its peak RSS is its own."""
    import bnnpp
    from bnnpp import priors

    x, y, xt, yt, xo = _mnist(quick, data_dir)
    method, opts = _rows(epochs, len(x) // BATCH)[label]
    if opts.get("prior_precision") == "validation":
        opts = {**opts, "validation_data": _mnist_validation(quick, data_dir)}
    if label.startswith("lenet5"):
        model = bnnpp.models.lenet5(num_classes=10, prior=priors.normal(1.0))
        x, xt, xo = (a.reshape(-1, 28, 28, 1) for a in (x, xt, xo))
    else:
        model = bnnpp.models.mlp((400, 400), activation="relu", num_classes=10, prior=priors.normal(1.0))
    t0 = time.perf_counter()
    post = bnnpp.fit(model, (x, y), method=method, seed=0, progress=False, **opts)
    row = {"fit_seconds": time.perf_counter() - t0, **_scores(post.predict(xt), yt, post.predict(xo))}
    row["seconds"] = time.perf_counter() - t0
    if method == "laplace":
        row.update({k: post.info[k] for k in ("prior_precision", "log_marginal_likelihood", "laplace_seconds", "laplace_parameters")})
    row["peak_rss_gb"] = _peak_gb()
    return row


def mnist_part(quick: bool, data_dir: str, epochs: int) -> dict:
    import subprocess

    out = {"epochs": epochs, "rows": {}}
    x, _, xt, _, _ = _mnist(quick, data_dir)
    out["train_rows"], out["test_rows"] = len(x), len(xt)
    for label in _rows(epochs, 1):
        cmd = [sys.executable, os.path.abspath(__file__), "--row", label, "--data-dir", data_dir, "--epochs", str(epochs), *(["--quick"] if quick else [])]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        out["rows"][label] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(label, out["rows"][label], flush=True)
    return out


def markdown(r: dict, command: str) -> str:
    lines = [f"# Laplace approximations\n\nCommand: `{command}`  \nMachine: {r['machine']}  \nTotal: {r['seconds']:.0f} s\n"]
    for m in r["moons"]:
        lines += [f"## Moons: evidence vs a grid of prior precisions ({m['model']}, MAP {m['map_steps']} steps, linearised)\n",
                  "| δ | chosen by | log evidence | test NLL | test accuracy |", "|---|---|---|---|---|"]
        for row in m["rows"]:
            lines.append(f"| {row['prior_precision']:.4g} | {row['chosen_by']} | {row['log_marginal_likelihood']:.2f} | {row['test_nll']:.4f} | {row['test_accuracy']:.3f} |")
        lines.append(f"\nEvidence's test NLL / best grid NLL = {m['evidence_nll_over_best']:.3f} (target ≤ 1.05).\n")
    for s in r["sinusoid"]:
        lines += [f"## Sinusoid ({s['model']})\n", (f"Epistemic sd: x=0 {s['epistemic_sd']['0']:.3f}, x=1.2 {s['epistemic_sd']['1.2']:.3f}, "
              f"x=−1.2 {s['epistemic_sd']['-1.2']:.3f}; smaller ratio {s['ratio_min']:.1f}x (target ≥ 3x); noise σ {s['noise']:.3f}, δ {s['prior_precision']:.3g}.\n")]
    if "mnist" in r:
        mn = r["mnist"]
        lines += [f"## MNIST 2x400 relu, N(0,1) prior, {mn['epochs']} epoch(s), {mn['train_rows']} training / {mn['test_rows']} test rows\n",
                  "| method | test error | NLL | ECE | Fashion-MNIST entropy AUROC | δ | seconds | peak RSS (GB, own process) |",
                  "|---|---|---|---|---|---|---|---|"]
        for label, row in mn["rows"].items():
            d = row.get("prior_precision")
            d = "" if d is None else (f"{d:.3g}" if isinstance(d, float) else ", ".join(f"{v:.3g}" for v in d))
            lines.append(f"| {label} | {row['test_error']:.2%} | {row['nll']:.4f} | {row['ece']:.4f} | {row['fashion_entropy_auroc']:.3f} | {d} | "
                         f"{row['seconds']:.0f} | {row['peak_rss_gb']:.2f} |")
        lines.append("\nEach row runs in its own process (its MNIST arrays, JAX and the fit): the peak RSS is ru_maxrss of that process.\n")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run (a few minutes)")
    ap.add_argument("--data-dir", default=None, help="MNIST/Fashion-MNIST folder (default $BNNPP_DATA_DIR or ../shared/data)")
    ap.add_argument("--epochs", type=int, default=None, help="MAP/BBB epochs on MNIST (default 5; quick 1)")
    ap.add_argument("--skip-mnist", action="store_true", help="only moons and sinusoid")
    ap.add_argument("--only-mnist", action="store_true", help="only the MNIST table")
    ap.add_argument("--results", default=os.path.join(_common.HERE, "results"), help="folder for laplace[_quick].{md,json}")
    ap.add_argument("--row", default=None, help=argparse.SUPPRESS)  # one MNIST row, printed as JSON (a child process)
    args = ap.parse_args(argv)
    data_dir = args.data_dir or _common.default_data_dir()
    epochs = args.epochs or (1 if args.quick else 5)
    if args.row is not None:
        print(json.dumps(mnist_row(args.row, args.quick, data_dir, epochs)))
        return {}
    t0 = time.perf_counter()
    r: dict = {"machine": _common.machine()}
    if args.only_mnist:  # keep the other tables of the last full run
        with open(os.path.join(args.results, "laplace.json")) as f:
            r = {**json.load(f), "machine": r["machine"]}
    else:
        # the source material's 2-5-5-2 moons net, and a wider one (20, 20)
        r["moons"] = [moons_part(args.quick, hidden, hessian) for hidden in ((5, 5), (20, 20)) for hessian in ("kron", "diag")]
        # N(0, 1) weights cannot reach the amplitude 10 (the MAP's noise sd is 4.1 against the true 1): N(0, 5²) can
        r["sinusoid"] = [sinusoid_part(args.quick, scale) for scale in (1.0, 5.0)]
        print([m["evidence_nll_over_best"] for m in r["moons"]], [s["ratio_min"] for s in r["sinusoid"]], flush=True)
    if not args.skip_mnist:
        r["mnist"] = mnist_part(args.quick, data_dir, epochs)
    r["seconds"] = time.perf_counter() - t0
    command = "python benchmarks/laplace.py " + " ".join(argv if argv is not None else sys.argv[1:])
    md = markdown(r, command.strip())
    print(md)
    _common.write_results(args.results, "laplace_quick" if args.quick else "laplace", r, md)
    return r


if __name__ == "__main__":
    main()
