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


def sinusoid_part(quick: bool) -> dict:
    import bnnpp
    from bnnpp import priors

    data = bnnpp.data.sinusoid(n=32, seed=0)
    model = bnnpp.models.mlp((50,), likelihood="gaussian", prior=priors.normal(1.0))
    post = bnnpp.fit(model, data, method="laplace", num_steps=500 if quick else 5000, learning_rate=1e-2, num_samples=500,
                     progress=False, seed=0)
    x = np.array([[0.0], [1.2], [-1.2]], np.float32)
    sd = post.predict(x).epistemic_std
    return {"model": "mlp (50,) tanh, learned noise, kron + evidence, linearised", "epistemic_sd": {"0": float(sd[0]), "1.2": float(sd[1]), "-1.2": float(sd[2])},
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


def mnist_part(quick: bool, data_dir: str, epochs: int) -> dict:
    import bnnpp
    from bnnpp import priors

    mnist = bnnpp.data.load("mnist", data_dir=data_dir, flatten=True)
    fashion = bnnpp.data.load("fashion_mnist", data_dir=data_dir, flatten=True)
    x, y, xt, yt, xo = mnist.x_train, mnist.y_train, mnist.x_test, mnist.y_test, fashion.x_test
    # the linearised predictive costs one Jacobian-vector product per draw: 5,000 test images of each
    # set and 20 draws keep the MNIST part within its ~15 CPU-minute budget
    x, y, xt, yt, xo = (x[:2000], y[:2000], xt[:500], yt[:500], xo[:500]) if quick else (x, y, xt[:5000], yt[:5000], xo[:5000])
    batch = 128
    steps = epochs * (len(x) // batch)
    model = bnnpp.models.mlp((400, 400), activation="relu", num_classes=10, prior=priors.normal(1.0))
    map_opts = {"num_steps": steps, "batch_size": batch, "learning_rate": 1e-3, "init_radius": 0.07}
    out = {"epochs": epochs, "train_rows": len(x), "test_rows": len(xt), "rows": {}, "peak_rss_gb_after": {}}
    fits = [
        ("map", "map", map_opts),
        ("laplace last-layer (kron)", "laplace", {**map_opts, "subset": "last_layer", "num_samples": 20}),
        ("laplace all layers (kron)", "laplace", {**map_opts, "num_samples": 20}),
        ("bbb", "bbb", {"epochs": epochs, "batch_size": batch, "learning_rate": 1e-3, "num_samples": 20}),
    ]
    for label, method, opts in fits:
        t0 = time.perf_counter()
        post = bnnpp.fit(model, (x, y), method=method, seed=0, progress=False, **opts)
        fit_s = time.perf_counter() - t0
        row = _scores(post.predict(xt), yt, post.predict(xo))
        row["seconds"] = time.perf_counter() - t0
        row["fit_seconds"] = fit_s
        if method == "laplace":
            row.update({k: post.info[k] for k in ("prior_precision", "log_marginal_likelihood", "laplace_seconds", "laplace_parameters")})
        out["rows"][label] = row
        out["peak_rss_gb_after"][label] = _peak_gb()
        del post
    # LeNet-5, last-layer Laplace (memory check; a short MAP)
    lenet = bnnpp.models.lenet5(num_classes=10, prior=priors.normal(1.0))
    xi, xti = x.reshape(-1, 28, 28, 1), xt.reshape(-1, 28, 28, 1)
    t0 = time.perf_counter()
    post = bnnpp.fit(lenet, (xi, y), method="laplace", subset="last_layer", seed=0, progress=False, num_samples=20,
                     num_steps=len(x) // batch, batch_size=batch, learning_rate=1e-3, init_radius=0.07)
    out["lenet5_last_layer"] = {"map_epochs": 1, **_scores(post.predict(xti), yt, post.predict(xo.reshape(-1, 28, 28, 1))),
                                "seconds": time.perf_counter() - t0, "laplace_seconds": post.info["laplace_seconds"]}
    out["peak_rss_gb_after"]["lenet5 last-layer"] = _peak_gb()
    return out


def markdown(r: dict, command: str) -> str:
    lines = [f"# Laplace approximations\n\nCommand: `{command}`  \nMachine: {r['machine']}  \nTotal: {r['seconds']:.0f} s\n"]
    for m in r["moons"]:
        lines += [f"## Moons: evidence vs a grid of prior precisions ({m['model']}, MAP {m['map_steps']} steps, linearised)\n",
                  "| δ | chosen by | log evidence | test NLL | test accuracy |", "|---|---|---|---|---|"]
        for row in m["rows"]:
            lines.append(f"| {row['prior_precision']:.4g} | {row['chosen_by']} | {row['log_marginal_likelihood']:.2f} | {row['test_nll']:.4f} | {row['test_accuracy']:.3f} |")
        lines.append(f"\nEvidence's test NLL / best grid NLL = {m['evidence_nll_over_best']:.3f} (target ≤ 1.05).\n")
    s = r["sinusoid"]
    lines += [f"## Sinusoid ({s['model']})\n", (f"Epistemic sd: x=0 {s['epistemic_sd']['0']:.3f}, x=1.2 {s['epistemic_sd']['1.2']:.3f}, "
              f"x=−1.2 {s['epistemic_sd']['-1.2']:.3f}; smaller ratio {s['ratio_min']:.1f}x (target ≥ 3x); noise σ {s['noise']:.3f}, δ {s['prior_precision']:.3g}.\n")]
    if "mnist" in r:
        mn = r["mnist"]
        lines += [f"## MNIST 2x400 relu, N(0,1) prior, {mn['epochs']} epoch(s), {mn['train_rows']} training / {mn['test_rows']} test rows\n",
                  "| method | test error | NLL | ECE | Fashion-MNIST entropy AUROC | seconds | peak RSS after (GB) |", "|---|---|---|---|---|---|---|"]
        for label, row in mn["rows"].items():
            lines.append(f"| {label} | {row['test_error']:.2%} | {row['nll']:.4f} | {row['ece']:.4f} | {row['fashion_entropy_auroc']:.3f} | "
                         f"{row['seconds']:.0f} | {mn['peak_rss_gb_after'][label]:.2f} |")
        le = mn["lenet5_last_layer"]
        lines.append(f"\nLeNet-5 last-layer Laplace (1 MAP epoch): test error {le['test_error']:.2%}, NLL {le['nll']:.4f}, ECE {le['ece']:.4f}, "
                     f"AUROC {le['fashion_entropy_auroc']:.3f}; process peak RSS after it {mn['peak_rss_gb_after']['lenet5 last-layer']:.2f} GB "
                     "(ru_maxrss of the whole run: an upper bound for each step).\n")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke run (a few minutes)")
    ap.add_argument("--data-dir", default=None, help="MNIST/Fashion-MNIST folder (default $BNNPP_DATA_DIR or ../shared/data)")
    ap.add_argument("--epochs", type=int, default=None, help="MAP/BBB epochs on MNIST (default 2; quick 1)")
    ap.add_argument("--skip-mnist", action="store_true", help="only moons and sinusoid")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    # the source material's 2-5-5-2 moons net, and a wider one (20, 20)
    moons = [moons_part(args.quick, hidden, hessian) for hidden in ((5, 5), (20, 20)) for hessian in ("kron", "diag")]
    r = {"machine": _common.machine(), "moons": moons, "sinusoid": sinusoid_part(args.quick)}
    print([m["evidence_nll_over_best"] for m in moons], r["sinusoid"]["ratio_min"], flush=True)
    if not args.skip_mnist:
        r["mnist"] = mnist_part(args.quick, args.data_dir or _common.default_data_dir(), args.epochs or (1 if args.quick else 2))
    r["seconds"] = time.perf_counter() - t0
    command = "python benchmarks/laplace.py " + " ".join(argv if argv is not None else sys.argv[1:])
    md = markdown(r, command.strip())
    print(md)
    _common.write_results(os.path.join(_common.HERE, "results"), "laplace_quick" if args.quick else "laplace", r, md)
    return r


if __name__ == "__main__":
    main()
