"""Small measurements that back statements in benchmarks/README.md (speed and regression).

1. ``chunk``: seconds per step of bnnpp ``bbb`` on a 2-1200-1200-2 moons net (20 full-batch
   steps) in chunks of 1 step against chunks of 10: the per-chunk cost behind
   ``default_chunk_size``'s minimum.
2. ``hash``: the SHA-256 of advi's lowered training chunk under several ``PYTHONHASHSEED``
   values, with bnnpp's ``SortedTraceELBO`` and with NumPyro's ``Trace_ELBO``: how many distinct
   programs (persistent-cache keys) each gives.
3. ``sinusoid_init``: bbb on the 32-point sinusoid with the blog post's schedule (Adam 0.03,
   1,500 full-batch epochs) from different starts: final negative ELBO, train RMSE and the
   epistemic sd ratio x = ±1.2 / x = 0.

    python benchmarks/studies/probes.py           # writes results/probes.{json,md} (about 3 minutes)
    python benchmarks/studies/probes.py --quick   # smaller, for the smoke test
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import time

import numpy as np
BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: _common and the table scripts
sys.path.insert(0, BENCHMARKS)
from _common import machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))

HASH_SCRIPT = """
import hashlib, sys, jax, numpyro.infer, bnnpp
from bnnpp import priors
from bnnpp.inference import advi, runner
if sys.argv[1] == "numpyro":
    advi.SortedTraceELBO = numpyro.infer.Trace_ELBO
d = bnnpp.data.load_synthetic("moons", seed=0)
m = bnnpp.models.mlp((5, 5), activation="tanh", num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))
alg = advi.build(m, d.x_train, d.y_train, advi.ADVIOptions(num_steps=100))
plan = runner._plan(alg, runner._keys_of(alg, jax.random.PRNGKey(0)), len(d.x_train))
data = (d.x_train, d.y_train)
shape = jax.jit(lambda a: runner._init(plan, a)).lower(data).out_info
print(hashlib.sha256(runner._lower_chunk(plan, shape, 10, data, "loss").as_text().encode()).hexdigest())
"""


def chunk_probe(width: int, steps: int, reps: int) -> dict:
    import bnnpp
    from bnnpp import priors

    d = bnnpp.data.load_synthetic("moons", seed=0)
    m = bnnpp.models.mlp((width, width), activation="tanh", num_classes=2, prior=priors.normal(1.0))
    us = {1: [], 10: []}
    for _ in range(reps):
        for cs in us:  # alternating, so both see the same load
            post = bnnpp.fit(m, d, method="bbb", epochs=steps, chunk_size=cs, progress=False, num_samples=2)
            us[cs].append(post.info["run_seconds"] / steps * 1e6)
    return {"width": width, "steps": steps, "us_per_step": {str(k): v for k, v in us.items()},
            "median_ratio_1_over_10": float(np.median(us[1]) / np.median(us[10]))}


def hash_probe(seeds: list[str]) -> dict:
    out = {}
    for elbo in ("bnnpp", "numpyro"):
        hashes = []
        for h in seeds:
            env = {**os.environ, "PYTHONHASHSEED": h, "JAX_PLATFORMS": "cpu"}
            proc = subprocess.run([sys.executable, "-c", HASH_SCRIPT, elbo], env=env, capture_output=True, text=True, check=True)
            hashes.append(proc.stdout.strip()[:16])
        out[elbo] = {"hash_seeds": seeds, "hashes": hashes, "distinct": len(set(hashes))}
    return out


def sinusoid_probe(epochs: int) -> list[dict]:
    import bnnpp
    from bnnpp import metrics, priors

    d = bnnpp.data.sinusoid(seed=0)
    m = bnnpp.models.mlp((20, 20), activation="relu", likelihood="gaussian", noise=1.0, prior=priors.scale_mixture(0.2, 1.0, 0.1))
    rows = []
    for opts in ({"init_scale": 0.05}, {"init_scale": 0.3}, {"init_scale": 0.05, "estimator": "reparam"}):
        post = bnnpp.fit(m, d, method="bbb", epochs=epochs, learning_rate=0.03, schedule="constant", num_samples=500, progress=False, **opts)
        e = post.predict(np.array([[-1.2], [0.0], [1.2]], np.float32)).epistemic_std
        rows.append({
            "options": opts,
            "final_negative_elbo": float(np.mean(post.info["loss"][-100:])),
            "train_rmse": metrics.rmse(post.predict(d.x_train).mean, d.y_train),
            "epistemic_ratio": float((e[0] + e[2]) / 2 / e[1]),
        })
    return rows


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="width 200, 2 hash seeds, 200 epochs")
    ap.add_argument("--results", default=os.path.join(HERE, "results"), help="folder for probes.{json,md}")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    chunk = chunk_probe(200, 20, 1) if args.quick else chunk_probe(1200, 20, 3)
    hashes = hash_probe(["1", "2"] if args.quick else ["1", "2", "3"])
    sinus = sinusoid_probe(200 if args.quick else 1500)
    result = {
        "benchmark": "probes",
        "produced_by": "python benchmarks/studies/probes.py" + (" --quick" if args.quick else ""),
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "load_average_at_end": os.getloadavg()[0],
        "chunk": chunk,
        "hash": hashes,
        "sinusoid_init": sinus,
        "seconds": time.perf_counter() - t0,
    }
    u = chunk["us_per_step"]
    lines = [
        "# probes",
        "",
        f"`{result['produced_by']}`, {result['date']}, {result['machine']}; {result['seconds']:.0f} s.",
        "",
        f"## Chunk size (bbb, 2-{chunk['width']}-{chunk['width']}-2 moons, {chunk['steps']} full-batch steps)",
        "",
        "| steps per chunk | µs/step, each run |",
        "|---|---|",
        *[f"| {k} | {', '.join(f'{v:.0f}' for v in vs)} |" for k, vs in u.items()],
        "",
        f"Median ratio, chunks of 1 over chunks of 10: {chunk['median_ratio_1_over_10']:.2f}.",
        "",
        "## advi chunk HLO under different PYTHONHASHSEED",
        "",
        "| ELBO | hash seeds | distinct programs |",
        "|---|---|---|",
        *[f"| {k} | {', '.join(v['hash_seeds'])} | {v['distinct']} |" for k, v in hashes.items()],
        "",
        "## bbb on the sinusoid, the post's schedule, by start",
        "",
        "| options | final negative ELBO | train RMSE | epistemic sd ratio ±1.2 / 0 |",
        "|---|---|---|---|",
        *[f"| {r['options']} | {r['final_negative_elbo']:.1f} | {r['train_rmse']:.2f} | {r['epistemic_ratio']:.2f} |" for r in sinus],
        "",
    ]
    md = "\n".join(lines)
    write_results(args.results, "probes", result, md)
    print(md)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
