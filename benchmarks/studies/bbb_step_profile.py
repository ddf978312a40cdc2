"""Where a Bayes-by-Backprop step's time goes, against a MAP step (MNIST 2×400, batches of 128).

Compiles ``--steps`` steps of each method's own ``step`` in one ``lax.scan`` (the network,
prior, optimiser and estimator of ``benchmarks/mnist_bbb.py``: 784-400-400-10 ReLU,
scale-mixture prior π = 0.5, σ1 = 1, σ2 = e⁻⁶, Adam 1e-3; BBB with the local and the plain
reparameterisation estimator, and with a N(0, 1) prior), runs it under ``jax.profiler``
and sums the XLA operations' times per step in four groups:

* matmul — XLA's dot kernels (forward and backward of the three layers);
* noise — the weight noise: the threefry hash and erf⁻¹ (``jax.random`` or bbb's unrolled
  copy inside its once-only conditionals);
* elementwise — everything else: softplus, the prior's log-density and the KL, the
  gradients' elementwise parts, Adam's updates of μ and ρ (MAP: of the weights);
* the wall-clock time per step (minimum over ``--repeats``) of the same program.

Per operation the 25th percentile of its durations over the profiled runs is taken, so the
sums are robust to other jobs on a shared machine; they are CPU time summed over XLA's
threads, so they can exceed the wall time. Random inputs (the cost does not depend on the
pixels).

    python benchmarks/studies/bbb_step_profile.py            # ~2 minutes on 2 CPU cores
    python benchmarks/studies/bbb_step_profile.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import glob
import math
import os
import re
import sys
import tempfile
import time

import numpy as np

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: _common and the table scripts
sys.path.insert(0, BENCHMARKS)
HERE = os.path.dirname(os.path.abspath(__file__))
from _common import machine, write_results

BATCH = 128


def _algorithms():
    from bnnpp import models, priors
    from bnnpp.inference.registry import get_method

    mix = models.mlp((400, 400), activation="relu", num_classes=10, prior=priors.scale_mixture(0.5, 1.0, math.exp(-6)))
    gauss = models.mlp((400, 400), activation="relu", num_classes=10, prior=priors.normal(1.0))
    x, y = np.zeros((50_000, 784), np.float32), np.zeros(50_000, np.int32)

    def build(method, model, **opts):
        m = get_method(method)
        return m.build(model, x, y, m.parse({"batch_size": BATCH, "learning_rate": 1e-3, **opts}))

    return {
        "map": build("map", mix, init_radius=0.07),
        "bbb (local)": build("bbb", mix, estimator="local", kl_weighting="blundell"),
        "bbb (reparam)": build("bbb", mix, estimator="reparam", kl_weighting="blundell"),
        "bbb, N(0, 1) prior (local)": build("bbb", gauss, estimator="local", kl_weighting="blundell"),
    }


def _program(algorithm, steps: int):
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    xb = jnp.asarray((rng.integers(0, 256, (8, BATCH, 784)) / 126).astype(np.float32))
    yb = jnp.asarray(rng.integers(0, 10, (8, BATCH)).astype(np.int32))
    state = algorithm.init(jax.random.PRNGKey(0), (np.zeros((BATCH, 784), np.float32), np.zeros(BATCH, np.int32)))

    def run(s):
        def body(s, t):
            s, info = algorithm.step(jax.random.fold_in(jax.random.PRNGKey(1), t), s, (xb[t % 8], yb[t % 8]))
            return s, info[0]

        return jax.lax.scan(body, s, jnp.arange(steps))

    return jax.jit(run).lower(state).compile(), state


def _groups(hlo_text: str) -> dict[str, str]:
    """Operation name → group, from the compiled HLO's instruction lines."""
    out = {}
    for line in hlo_text.splitlines():
        m = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = .*", line)
        if not m:
            continue
        name, op_name = m.group(1), (re.search(r'op_name="([^"]*)"', line) or [None, ""])[1]
        if " dot(" in line or "kind=kCustom" in line:
            out[name] = "matmul"
        elif ("/cond/branch" in op_name and "jvp(" in op_name) or "_normal" in op_name or "threefry" in op_name or "random_bits" in op_name:  # the noise conditionals sit in the forward pass (jvp); apply_optimizer's does not
            out[name] = "noise"
        else:
            out[name] = "elementwise"
    return out


def profile(name, compiled, state, steps: int, repeats: int) -> dict:
    import jax

    jax.block_until_ready(compiled(state))
    wall = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(state))
        wall.append((time.perf_counter() - t0) / steps * 1e3)
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d):
            for _ in range(repeats):
                jax.block_until_ready(compiled(state))
        data = jax.profiler.ProfileData.from_file(glob.glob(os.path.join(d, "**", "*.xplane.pb"), recursive=True)[0])
    durations = collections.defaultdict(list)
    for plane in data.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_XLAEigen"):
                continue
            for ev in line.events:  # conditionals and loops are counted through the operations inside them
                if ev.name != "ThunkExecutor::Execute" and not ev.name.startswith(("cond", "while")):
                    durations[ev.name].append(ev.duration_ns)
    groups = _groups(compiled.as_text())
    ms = collections.Counter()
    for op, d in durations.items():
        ms[groups.get(op, "elementwise")] += float(np.percentile(d, 25)) * len(d) / (repeats * steps) / 1e6
    out = {g: round(ms[g], 3) for g in ("matmul", "noise", "elementwise")}
    out["total_op_ms"] = round(sum(ms.values()), 3)
    out["wall_ms_min"] = round(min(wall), 3)
    print(f"{name:28s} ops {out['total_op_ms']:6.2f} ms/step (matmul {out['matmul']:.2f}, noise {out['noise']:.2f}, "
          f"elementwise {out['elementwise']:.2f}); wall {out['wall_ms_min']:.2f} ms/step", flush=True)
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 5 steps, 2 runs per program")
    ap.add_argument("--steps", type=int, default=None, help="steps per compiled program (default 40; quick 5)")
    ap.add_argument("--repeats", type=int, default=None, help="profiled runs of each program (default 5; quick 2)")
    ap.add_argument("--out", "--results", dest="out", default=os.path.join(HERE, "results"), help="folder for bbb_step_profile.{json,md}")
    args = ap.parse_args(argv)
    args.steps = args.steps or (5 if args.quick else 40)
    args.repeats = args.repeats or (2 if args.quick else 5)
    programs = {name: _program(a, args.steps) for name, a in _algorithms().items()}
    rows = {name: profile(name, c, s, args.steps, args.repeats) for name, (c, s) in programs.items()}
    ref = rows["map"]
    command = "python benchmarks/studies/bbb_step_profile.py" + ("" if argv is None and len(sys.argv) == 1 else " " + " ".join(argv if argv is not None else sys.argv[1:]))
    result = {
        "command": command, "date": dt.datetime.now().isoformat(timespec="minutes"), "machine": machine(),
        "load_average_1min": os.getloadavg()[0], "steps": args.steps, "repeats": args.repeats, "rows": rows,
    }
    lines = [
        "# bbb_step_profile", "",
        f"`{command}`, {result['date']}; {result['machine']}; load average {result['load_average_1min']:.1f}.", "",
        ("Per step of MNIST 2×400, batch 128: XLA operation time (25th percentile per operation, summed over threads) "
         "in three groups, and the wall time (minimum over runs) of the same compiled program."), "",
        "| step | matmul ms | noise ms | elementwise ms | ops total ms | ops / MAP | wall ms | wall / MAP |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['matmul']:.2f} | {r['noise']:.2f} | {r['elementwise']:.2f} | {r['total_op_ms']:.2f} | "
            f"{r['total_op_ms'] / ref['total_op_ms']:.2f} | {r['wall_ms_min']:.2f} | {r['wall_ms_min'] / ref['wall_ms_min']:.2f} |"
        )
    write_results(args.out, "bbb_step_profile", result, "\n".join(lines) + "\n")
    return result


if __name__ == "__main__":
    main()
