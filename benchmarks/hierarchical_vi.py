"""Small data under a hierarchical prior: the issue-35 sinusoid, every candidate fit against NUTS.

32 points, x ~ U[-0.5, 0.5], y = 10 sin(2πx) + N(0, 1); ``mlp(hidden=(50,), activation="tanh",
likelihood="gaussian", noise=None, prior=priors.normal(scale=priors.inverse_gamma(1, 1)))``.
x and y are standardised on the training set by hand (the NLL is reported in the original
units: NLL_std + log sd_y). Scored: the test NLL of the predictive mixture on 1,000 points in
[-0.5, 0.5], and the growth of the predictive sd from x = 0 to x = 0.9.

    python benchmarks/hierarchical_vi.py --methods map,advi --seeds 0,1,2
    python benchmarks/hierarchical_vi.py --methods advi --options '{"init_loc": "map"}' --label advi-map
    python benchmarks/hierarchical_vi.py --methods nuts --seeds 0      # the reference (cached in results/)

Each run appends its rows (with the command) to ``results/hierarchical_vi.jsonl``;
``--summary`` writes ``results/hierarchical_vi.md`` from them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "hierarchical_vi.jsonl")


def sinusoid(seed: int = 0, n: int = 32, n_test: int = 1000):
    """Raw training and test data of the issue's sinusoid (data seed ``seed``)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-0.5, 0.5, (n, 1)).astype(np.float32)
    y = (10 * np.sin(2 * np.pi * x[:, 0]) + rng.normal(0, 1, n)).astype(np.float32)
    xt = rng.uniform(-0.5, 0.5, (n_test, 1)).astype(np.float32)
    yt = (10 * np.sin(2 * np.pi * xt[:, 0]) + rng.normal(0, 1, n_test)).astype(np.float32)
    return x, y, xt, yt


def model():
    import bnnpp
    from bnnpp import priors

    return bnnpp.models.mlp(
        hidden=(50,), activation="tanh", likelihood="gaussian", noise=None,
        prior=priors.normal(scale=priors.inverse_gamma(1.0, 1.0)),
    )


def score(method: str, options: dict, seed: int, data_seed: int = 0) -> dict:
    import bnnpp
    from bnnpp import metrics

    x, y, xt, yt = sinusoid(data_seed)
    mx, sx, my, sy = x.mean(0), x.std(0), y.mean(), y.std()
    xs, ys = (x - mx) / sx, (y - my) / sy
    t0 = time.perf_counter()
    post = bnnpp.fit(model(), (xs, ys), method=method, seed=seed, progress=False, **options)
    seconds = time.perf_counter() - t0
    pred = post.predict((xt - mx) / sx)
    loc, noise = np.asarray(pred.draws, np.float64), np.broadcast_to(np.asarray(pred.noise, np.float64), np.shape(pred.draws))
    nll = metrics.gaussian_nll(loc, noise, (yt - my) / sy) + float(np.log(sy))
    probe = post.predict((np.array([[0.0], [0.9]], np.float32) - mx) / sx)
    d, s = np.asarray(probe.draws, np.float64), np.broadcast_to(np.asarray(probe.noise, np.float64), np.shape(probe.draws))
    sd = np.sqrt(d.var(0) + (s**2).mean(0))
    rmse = float(np.sqrt(np.mean((loc.mean(0) * sy + my - yt) ** 2)))
    return {"method": method, "options": options, "seed": seed, "test_nll": nll, "sd_growth": float(sd[1] / sd[0]),
            "test_rmse": rmse, "noise_sd": float(np.mean(noise) * sy), "seconds": seconds}


def summary():
    rows = [json.loads(line) for line in open(RESULTS)]
    groups: dict = {}
    for r in rows:
        groups.setdefault(f"{r['method']}: {r['label']}", []).append(r)
    out = ["| candidate | seeds | test NLL (mean, per seed) | sd growth 0 → 0.9 (per seed) | noise sd | command |", "|---|---|---|---|---|---|"]
    for label, rs in groups.items():
        nll = ", ".join(f"{r['test_nll']:.2f}" for r in rs)
        gr = ", ".join(f"{r['sd_growth']:.1f}" for r in rs)
        out.append(f"| {label} | {len(rs)} | {np.mean([r['test_nll'] for r in rs]):.2f} ({nll}) | {gr} | "
                   f"{np.mean([r['noise_sd'] for r in rs]):.2f} | `{rs[0]['command']}` |")
    text = "\n".join(out) + "\n"
    with open(os.path.join(HERE, "results", "hierarchical_vi.md"), "w") as f:
        f.write("# Issue-35 sinusoid, hand-standardised data (benchmarks/hierarchical_vi.py)\n\n" + text)
    print(text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--methods", default="map")
    p.add_argument("--seeds", default="0")
    p.add_argument("--options", default="{}", help="JSON dict of method options")
    p.add_argument("--label", default=None)
    p.add_argument("--summary", action="store_true")
    p.add_argument("--no-save", action="store_true")
    a = p.parse_args(argv)
    if a.summary:
        return summary()
    opts = json.loads(a.options)
    for m in a.methods.split(","):
        for s in (int(v) for v in a.seeds.split(",")):
            row = score(m, opts, s)
            row["label"] = a.label or m
            row["command"] = "python benchmarks/hierarchical_vi.py " + " ".join(sys.argv[1:] if argv is None else argv)
            print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items() if k != "command"}), flush=True)
            if not a.no_save:
                with open(RESULTS, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
