"""Peak memory of ``Posterior.predict``: a 784-400-400-10 network (the seed's 2x400 MNIST
net, 478k parameters) with S posterior draws on n rows, predicted in blocks of draws and rows
(``bnnpp.posterior.core.MAX_DRAW_ROWS``, 2^17) against one call over every draw and row (the limit
raised above S x n, as NumPyro's ``Predictive`` evaluates them).

Each configuration runs in a process of its own; the peak is the largest resident set size
sampled every 5 ms during ``predict``, less the size just before it (which already holds the
posterior's draws: S x 478k float32). The network's weights are random draws of its prior
(no fit: the cost of predicting does not depend on the values).

    python benchmarks/predict_memory.py            # S=1000, n=10000 blocked; S=100 both ways
    python benchmarks/predict_memory.py --quick    # S=50, n=2000 both ways
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HERE, machine, write_results  # noqa: E402

HIDDEN = (400, 400)
FEATURES, CLASSES = 784, 10


def rss() -> int:
    """This process's resident set size in bytes (Linux ``/proc``)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker(draws: int, rows: int, blocked: bool) -> dict:
    """One measurement in this process: ``{"peak_mb", "before_mb", "seconds", "parameters"}``."""
    import dataclasses

    import numpy as np

    import bnnpp
    from bnnpp.posterior import core

    if not blocked:
        core.MAX_DRAW_ROWS = draws * rows + 1  # one call over every draw and row
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, size=64).astype(np.int32)
    model = bnnpp.models.mlp(hidden=HIDDEN, likelihood="categorical", num_classes=CLASSES, activation="relu")
    post = bnnpp.fit(model, (x, y), method="map", num_steps=1, progress=False)
    samples = {k: (0.05 * rng.standard_normal((1, draws, *np.shape(v)[2:]))).astype(np.float32) for k, v in post.samples.items()}
    post = dataclasses.replace(post, samples=samples, _jitted={})
    parameters = int(sum(np.prod(np.shape(v)[2:]) for v in samples.values()))
    x_new = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    before = rss()
    peak = [before]
    done = threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], rss())
            time.sleep(0.005)

    t = threading.Thread(target=watch)
    t.start()
    t0 = time.perf_counter()
    pred = post.predict(x_new)
    seconds = time.perf_counter() - t0
    done.set()
    t.join()
    peak[0] = max(peak[0], rss())
    assert pred.probs.shape == (draws, rows, CLASSES)
    return {
        "peak_mb": (peak[0] - before) / 2**20,
        "before_mb": before / 2**20,
        "seconds": seconds,
        "parameters": parameters,
        "limit": core.MAX_DRAW_ROWS,
    }


def measure(draws: int, rows: int, blocked: bool) -> dict:
    cmd = [sys.executable, __file__, "--worker", str(draws), str(rows), "1" if blocked else "0"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        return {"draws": draws, "rows": rows, "blocked": blocked, "error": out.stderr.strip().splitlines()[-1][:300]}
    return {"draws": draws, "rows": rows, "blocked": blocked, **json.loads(out.stdout.strip().splitlines()[-1])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="S=50, n=2000 both ways")
    p.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(worker(int(a.worker[0]), int(a.worker[1]), a.worker[2] == "1")))
        return
    runs = [(50, 2000, True), (50, 2000, False)] if a.quick else [(1000, 10_000, True), (100, 10_000, True), (100, 10_000, False)]
    results = [measure(*r) for r in runs]
    command = "python benchmarks/predict_memory.py" + (" --quick" if a.quick else "")
    lines = [
        "# predict_memory — peak memory of Posterior.predict",
        "",
        f"`{command}` on {machine()}. Network 784-{'-'.join(map(str, HIDDEN))}-{CLASSES} "
        f"({results[0].get('parameters', '?'):,} parameters), random weights; peak resident memory during `predict` above "
        "the process's size just before it (which holds the draws).",
        "",
        "| draws S | rows n | evaluation | peak above start (MB) | process before (MB) | seconds |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    for r in results:
        how = f"blocks (MAX_DRAW_ROWS = {r.get('limit', '?')})" if r["blocked"] else "one call"
        if "error" in r:
            lines.append(f"| {r['draws']} | {r['rows']} | {how} | failed: {r['error']} | | |")
        else:
            lines.append(f"| {r['draws']} | {r['rows']} | {how} | {r['peak_mb']:.0f} | {r['before_mb']:.0f} | {r['seconds']:.1f} |")
    name = "predict_memory_quick" if a.quick else "predict_memory"
    paths = write_results(os.path.join(HERE, "results"), name, {"command": command, "machine": machine(), "runs": results}, "\n".join(lines) + "\n")
    print("\n".join(lines))
    print("wrote", *paths)


if __name__ == "__main__":
    main()
