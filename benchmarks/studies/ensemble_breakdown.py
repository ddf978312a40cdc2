"""Where a 5-member ensemble's time goes against one MAP fit (the evidence behind the
ensemble_cost section of benchmarks/README.md).

Everything goes through the runner's own programs (``runner._lower_chunk``: the chunked scan
with its guard), built from the MAP algorithm of each model, and is measured in one process:

* **compile**: CPU seconds (all threads) to lower and compile each program the runner builds
  (init, one chunk, sample), for MAP, the ensemble as shipped, and the ensemble with its init
  vmapped over members (how it was before).
* **step**: wall and CPU microseconds per step of one compiled chunk, for MAP and for M
  members stepped as ``vmap`` with the rows shared (``in_axes=None``), ``vmap`` with a copy
  of the rows per member, and ``lax.map`` over members; on moons also the step's parts
  (the log joint only, its value and gradient, the Adam update only).

Chunks of each kind run alternately ``--repeats`` times; the fastest is kept (the machine's
cores are shared with other work: minima are the least disturbed numbers, CPU time the least
sensitive to other processes). The load average is recorded.

    python benchmarks/studies/ensemble_breakdown.py               # moons, MNIST 2x400, LeNet-5 (~4 CPU minutes)
    python benchmarks/studies/ensemble_breakdown.py --no-lenet    # without LeNet-5 (~2 CPU minutes)
    python benchmarks/studies/ensemble_breakdown.py --quick       # moons only, once (a smoke test)

Writes ``--results``/ensemble_breakdown.{json,md}. MNIST from ``--data-dir`` or ``$BNNPP_DATA_DIR``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: _common and the table scripts
sys.path.insert(0, BENCHMARKS)
from _common import default_data_dir, machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))
MEMBERS = 5


def _variants(one, loss_of=None):
    """Step structures for M members (and MAP itself) from the MAP algorithm ``one``; with
    ``loss_of`` (MAP's objective ``(u, x, y) -> scalar``) also the parts of a step."""
    import jax
    import jax.numpy as jnp
    import optax

    from bnnpp.inference.map_estimate import MAPInfo, MAPState

    def init(k, d):
        return jax.lax.map(lambda i: one.init(jax.random.fold_in(k, i), d), jnp.arange(MEMBERS))

    def vm(step, rows_axis=None):
        def run(k, st, b):
            if rows_axis == 0:
                b = (jnp.broadcast_to(b[0], (MEMBERS, *b[0].shape)), b[1])
            new, info = jax.vmap(step, in_axes=(None, 0, (rows_axis, None)))(k, st, b)
            return new, MAPInfo(info.loss)
        return one._replace(init=init, step=run, run=one.run._replace(num_chains=MEMBERS))

    def loop(k, st, b):
        new, info = jax.lax.map(lambda s: one.step(k, s, b), st)
        return new, MAPInfo(info.loss)

    out = {
        "map": one,
        "vmap, rows shared": vm(one.step),
        "vmap, rows copied": vm(one.step, 0),
        "lax.map over members": one._replace(init=init, step=loop, run=one.run._replace(num_chains=MEMBERS)),
    }
    if loss_of is not None:  # the parts of one step: the loss only, its gradient (an SGD update), Adam with a fixed gradient
        adam = optax.adam(1e-2)

        def fwd(k, st, b):
            return MAPState(jax.tree_util.tree_map(lambda a: a * 0.9999, st.position), st.opt_state), MAPInfo(loss_of(st.position, *b))

        def grad(k, st, b):
            v, g = jax.value_and_grad(loss_of)(st.position, *b)
            return MAPState(jax.tree_util.tree_map(lambda a, c: a - 1e-6 * c, st.position, g), st.opt_state), MAPInfo(v)

        def opt(k, st, b):
            g = jax.tree_util.tree_map(lambda a: 1e-3 * a + 1e-4, st.position)
            u, s = adam.update(g, st.opt_state, st.position)
            return MAPState(optax.apply_updates(st.position, u), s), MAPInfo(jnp.zeros(()))

        for name, step in [("log joint only", fwd), ("value and gradient", grad), ("Adam update only", opt)]:
            out[f"map: {name}"] = one._replace(step=step)
            out[f"vmap: {name}"] = vm(step, 0)
    return out


def _chunk(alg, x, y, steps: int):
    """The runner's compiled chunk of ``steps`` steps and its first carry."""
    import jax
    import numpy as np

    from bnnpp.inference import runner
    from bnnpp.inference.algorithm import default_keys

    data = (jax.device_put(x), jax.device_put(y))
    plan = runner._plan(alg, runner._seed_keys(alg.hooks.keys or default_keys, np.uint32(0)), int(x.shape[0]))
    lowered = jax.jit(lambda d: runner._init(plan, d)).lower(data)
    chunk = runner._lower_chunk(plan, lowered.out_info, steps, data, "loss").compile()
    carry = (lowered.compile()(data), np.bool_(False), np.int32(-1))
    jax.block_until_ready(chunk(carry, np.int32(0), data))  # warm
    return lambda: jax.block_until_ready(chunk(carry, np.int32(0), data))


def step_times(model, x, y, options: dict, steps: int, repeats: int, parts: bool, only=None) -> dict:
    """Wall and CPU µs per step of each variant (fastest of ``repeats`` alternating runs)."""
    import numpy as np

    from bnnpp.inference import map_estimate
    from bnnpp.inference.joint import joint_terms

    # the joint MAP: the step structures are compared, and the evidence's periodic hook (map's default under a
    # hierarchical prior) works on one member's state, not on the variants' stacked ones
    opts = map_estimate.MAPOptions(**{"hyperparameters": "map", **options})
    one = map_estimate.build(model, x, y, opts)
    n, batch = x.shape[0], opts.batch_size or x.shape[0]

    def neg_log_joint(u, xb, yb):  # map_estimate's objective
        lp, ll, _ = joint_terms(model, u, xb, yb, np.zeros(2, np.uint32))
        return -(lp + (n / batch) * ll)

    variants = _variants(one, neg_log_joint if parts else None)
    if only is not None:
        variants = {k: v for k, v in variants.items() if k in only}
    runs = {k: _chunk(v, x, y, steps) for k, v in variants.items()}
    wall = {k: [] for k in runs}
    cpu = {k: [] for k in runs}
    for _ in range(repeats):
        for k, run in runs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            run()
            wall[k].append((time.perf_counter() - t0) / steps * 1e6)
            cpu[k].append((time.process_time() - c0) / steps * 1e6)
    return {k: {"wall_us": min(wall[k]), "cpu_us": min(cpu[k])} for k in runs}


def compile_times(model, data, repeats: int) -> dict:
    """CPU seconds to lower + compile init, chunk and sample: MAP, the ensemble, the ensemble
    with a vmapped init (fastest of ``repeats``; each compile from a fresh trace)."""
    import jax
    import numpy as np

    from bnnpp.inference import ensemble, registry, runner
    from bnnpp.inference.algorithm import default_keys

    x, y = np.asarray(data.x_train), np.asarray(data.y_train)
    d = (jax.device_put(x), jax.device_put(y))
    out: dict = {}
    for _ in range(repeats):
        m, e = registry.get_method("map"), registry.get_method("ensemble")
        one = m.build(model, x, y, m.parse({}).resolve(len(x)))
        ens = e.build(model, x, y, e.parse({"members": MEMBERS}).resolve(len(x)))
        old = ens._replace(init=lambda k, dd, one=one: jax.vmap(lambda kk: one.init(kk, dd))(ensemble.member_keys(k, MEMBERS)))
        for name, alg in [("map", one), ("ensemble", ens), ("ensemble, init vmapped", old)]:
            plan = runner._plan(alg, runner._seed_keys(alg.hooks.keys or default_keys, np.uint32(0)), len(x))
            t: dict = {}
            c0 = time.process_time()
            li = jax.jit(lambda dd, plan=plan: runner._init(plan, dd)).lower(d)
            lc = runner._lower_chunk(plan, li.out_info, 250, d, "loss")
            ls = jax.jit(lambda k, s, alg=alg: alg.sample(k, s, 1)).lower(plan.keys.sample, li.out_info.state)
            t["lowering"] = time.process_time() - c0
            for part, lo in [("init", li), ("chunk", lc), ("sample", ls)]:
                c0 = time.process_time()
                lo.compile()
                t[part] = time.process_time() - c0
            t["total"] = sum(t.values())
            for k, v in t.items():
                out.setdefault(name, {}).setdefault(k, []).append(v)
    return {name: {k: min(v) for k, v in parts.items()} for name, parts in out.items()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="alternating runs of each kind; the fastest counts (default 3)")
    ap.add_argument("--no-lenet", action="store_true", help="skip LeNet-5 (its steps are the slowest)")
    ap.add_argument("--quick", action="store_true", help="moons only, one run of each (a smoke test)")
    ap.add_argument("--data-dir", default=None, help="folder holding mnist/ (default: $BNNPP_DATA_DIR, else ../shared/data)")
    ap.add_argument("--results", default=os.path.join(HERE, "results"), help="folder for ensemble_breakdown.{json,md}")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = 1
    import numpy as np

    import bnnpp
    from bnnpp import priors

    load_before = os.getloadavg()
    moons = bnnpp.data.load_synthetic("moons", seed=0)
    small = bnnpp.models.mlp((5, 5), activation="tanh", num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))
    result: dict = {"compile_moons": compile_times(small, moons, args.repeats)}
    print("compile", result["compile_moons"], flush=True)
    steps: dict = {}
    steps["moons (700 rows, full batch)"] = step_times(
        small, np.asarray(moons.x_train), np.asarray(moons.y_train), {}, 250, args.repeats, parts=True)
    print(steps, flush=True)
    if args.quick:
        return _finish(args, argv, result, steps, load_before)
    mnist = bnnpp.data.load("mnist", args.data_dir or default_data_dir(), normalize="255", validation=10_000, flatten=True)
    net = bnnpp.models.mlp((400, 400), activation="relu", num_classes=10, prior=priors.normal(1.0))
    common = {"num_steps": 780, "batch_size": 128, "learning_rate": 1e-3, "init_radius": 0.07}
    steps["MNIST 2x400 (batches of 128)"] = step_times(
        net, np.asarray(mnist.x_train), np.asarray(mnist.y_train), common, 30, args.repeats, parts=True)
    print(steps, flush=True)
    if not args.no_lenet:
        images = bnnpp.data.load("mnist", args.data_dir or default_data_dir(), normalize="255", validation=10_000, flatten=False)
        steps["MNIST LeNet-5 (batches of 128)"] = step_times(
            bnnpp.models.lenet5(prior=priors.normal(1.0)), np.asarray(images.x_train), np.asarray(images.y_train), common, 4,
            max(2, args.repeats - 1), parts=False, only=("map", "vmap, rows shared", "vmap, rows copied"))
        print(steps, flush=True)
    return _finish(args, argv, result, steps, load_before)


def _finish(args, argv, result: dict, steps: dict, load_before) -> dict:
    result.update(
        benchmark="ensemble_breakdown",
        produced_by=" ".join(["python benchmarks/studies/ensemble_breakdown.py", *(argv if argv is not None else sys.argv[1:])]),
        date=dt.date.today().isoformat(), machine=machine(), members=MEMBERS, repeats=args.repeats,
        load_average=[load_before[0], os.getloadavg()[0]], steps=steps,
    )
    md = markdown(result)
    write_results(args.results, "ensemble_breakdown", result, md)
    print(md)
    return result


def markdown(r: dict) -> str:
    """The tables of a result dict."""
    lines = [
        f"# ensemble_breakdown: where {r['members']} members' time goes against one MAP fit",
        "",
        (f"`{r['produced_by']}`, {r['date']}, {r['machine']}; load average {r['load_average'][0]:.1f} before, "
         f"{r['load_average'][1]:.1f} after (other work shared the cores): fastest of {r['repeats']} alternating runs."),
        "",
        "## Compile (moons 2-5-5-2): CPU seconds to lower and compile each program the runner builds",
        "",
        "| fit | lowering | init | chunk (250 steps) | sample | total |",
        "|---|---|---|---|---|---|",
    ]
    for name, t in r["compile_moons"].items():
        lines.append(f"| {name} | {t['lowering']:.2f} | {t['init']:.2f} | {t['chunk']:.2f} | {t['sample']:.2f} | {t['total']:.2f} |")
    lines += ["", "## One step inside the compiled chunk (µs per step; ratio: against MAP's same part, per member: ÷ 5)", "",
              "| data | step | wall µs | CPU µs | wall / MAP | CPU / MAP per member |", "|---|---|---|---|---|---|"]
    for data_name, rows in r["steps"].items():
        for name, t in rows.items():
            base = rows["map" if ":" not in name else "map:" + name.split(":", 1)[1]]
            if name.startswith("map"):
                lines.append(f"| {data_name} | {name} | {t['wall_us']:.1f} | {t['cpu_us']:.1f} | 1 | 1 |")
            else:
                lines.append(f"| {data_name} | {r['members']} members, {name} | {t['wall_us']:.1f} | {t['cpu_us']:.1f} | "
                             f"{t['wall_us'] / base['wall_us']:.2f} | {t['cpu_us'] / base['cpu_us'] / r['members']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main(sys.argv[1:])
