"""Many-chain samplers against NUTS (issue 39): wall time to convergence, ESS per second and
predictive agreement with a NUTS reference.

Problems: ``moons`` (``mlp((5, 5), activation="tanh", num_classes=2,
prior=normal(inverse_gamma(1, 1)))``, the synthetic moons set, seed 0) and ``sinusoid`` (the
32-point sinusoid of ``hierarchical_vi.py``: ``mlp((50,), tanh)``, Gaussian likelihood with a
learned noise, the same hierarchical prior, hand-standardised data) and ``yacht`` (UCI yacht
hydrodynamics, standard split 0: 277 training rows, 6 features; ``mlp((50,), relu)``, Gaussian
likelihood with a learned noise, ``normal(half_normal(1))`` per layer — ``uci.py``'s hierarchical
model; data from ``$BNNPP_DATA_DIR`` or ``../shared/data``).

For every method the fit runs once; then, for growing prefixes of k draws per chain, the
convergence summary (:func:`bnnpp.diagnostics.summary`: rank-normalised split R-hat and
bulk ESS over the scale sites and the predictive quantities at 20 training inputs) is
recomputed, and the first k with max R-hat ≤ 1.01 and min ESS ≥ 400 is taken. Its wall time
is estimated as ``compile_seconds + run_seconds · (num_warmup + k) / (num_warmup +
num_samples)`` (the steps after warm-up are taken to cost alike; warm-up steps are counted
in full). ``ess_per_second``: min ESS of the whole run / (compile + run seconds).

Reference: the NUTS fit of the same problem (its own convergence is reported beside it), or
the run named by ``--reference``; classification: top-1 agreement and total variation of the
predictive at the test inputs; regression: W2 and sd ratio, and the test NLL in the data's
units. Each row records the load average (1 min) before and after its fit.

    python benchmarks/samplers.py                       # every problem and method
    python benchmarks/samplers.py --problems moons --methods chees,mclmc --quick
    python benchmarks/samplers.py --problems moons --reference nuts-long \
        --runs '[["nuts-long", "nuts", {"num_samples": 4000}], ["nuts-nc", "nuts", {"noncentered": true}]]'

``--runs`` replaces ``--methods``: a JSON list of ``[label, method, options]`` (several
configurations of one method side by side; the label names the row). An option
``"chain_threads": k`` sets ``BNNPP_CHAIN_THREADS`` for that fit (1: NUTS's chains in one program).

Results: ``results/samplers.json`` and ``results/samplers.md`` (rewritten after every fit,
so an interrupted run keeps what finished).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from unittest import mock

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

RHAT, ESS = 1.01, 400.0

OPTIONS = {  # per problem: method → options (NUTS at its defaults on moons: the timing)
    "moons": {"nuts": {}, "chees": {}, "mclmc": {}},
    "sinusoid": {"nuts": {"num_warmup": 500, "num_samples": 500}, "chees": {}, "mclmc": {}},
    "yacht": {"nuts": {}, "chees": {}, "mclmc": {}},
}
QUICK = {"nuts": {"num_chains": 2, "num_warmup": 100, "num_samples": 100},
         "chees": {"num_chains": 4, "num_warmup": 100, "num_samples": 100},
         "mclmc": {"num_chains": 4, "num_warmup": 100, "num_samples": 100}}


def problem(name: str):
    """``(model, (x, y), x_test, y_test, y_unit)``: y_unit = (mean, sd) that unstandardise the targets (regression)."""
    import bnnpp
    from bnnpp import priors

    if name == "moons":
        data = bnnpp.data.load_synthetic("moons", seed=0)
        model = bnnpp.models.mlp((5, 5), activation="tanh", num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))
        return model, (data.x_train, data.y_train), data.x_test, data.y_test, None
    if name == "yacht":
        from _common import default_data_dir

        data = bnnpp.data.uci("yacht", split=0, data_dir=default_data_dir())
        model = bnnpp.models.mlp((50,), activation="relu", likelihood="gaussian", noise=None, prior=priors.normal(priors.half_normal(1.0)))
        return model, (data.x_train, data.y_train), data.x_test, data.y_test, (float(data.y_shift), float(data.y_scale))
    if name != "sinusoid":
        raise ValueError(f"unknown problem {name!r}: choose from moons, sinusoid, yacht")
    from hierarchical_vi import model, sinusoid

    x, y, xt, yt = sinusoid(0)
    mx, sx, my, sy = x.mean(0), x.std(0), y.mean(), y.std()
    return model(), ((x - mx) / sx, (y - my) / sy), (xt - mx) / sx, (yt - my) / sy, (float(my), float(sy))


def truncated(post, k: int):
    """The posterior with the first ``k`` draws of every chain."""
    import dataclasses

    return dataclasses.replace(post, samples={n: v[:, :k] for n, v in post.samples.items()}, _jitted={})


def convergence(post, x_ref) -> dict:
    """First prefix reaching the targets, and the whole run's summary."""
    from bnnpp import diagnostics

    o = post.stats.options
    warm = int(o.get("num_warmup", 0))
    total = warm + post.num_draws
    rows = []
    reached = None
    for k in sorted({*range(50, post.num_draws, 50), post.num_draws}):
        s = diagnostics.summary(truncated(post, k), x_ref=x_ref)
        r, e = s["max_r_hat"], s["min_ess_bulk"]
        rows.append({"draws": k, "max_r_hat": r, "min_ess_bulk": e})
        if reached is None and r is not None and e is not None and r <= RHAT and e >= ESS:
            reached = k
    full = rows[-1]
    seconds = post.stats.compile_seconds + post.stats.run_seconds
    at = lambda k: post.stats.compile_seconds + post.stats.run_seconds * (warm + k) / total
    return {
        "max_r_hat": full["max_r_hat"], "min_ess_bulk": full["min_ess_bulk"], "prefixes": rows,
        "draws_to_target": reached, "seconds_to_target": None if reached is None else at(reached),
        "ess_per_second": None if full["min_ess_bulk"] is None else full["min_ess_bulk"] / seconds,
    }


def run(name: str, method: str, options: dict, seed: int, label: str | None = None) -> tuple[dict, object]:
    import jax

    import bnnpp
    import bnnpp.inference.chees  # noqa: F401  (the experimental chees registers on import)
    from bnnpp import metrics

    model, data, xt, yt, unit = problem(name)
    options = dict(options)
    threads = options.pop("chain_threads", None)  # BNNPP_CHAIN_THREADS for this fit (bnnpp.inference.chain_threads)
    env = {} if threads is None else {"BNNPP_CHAIN_THREADS": str(threads)}
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    with mock.patch.dict(os.environ, env):
        post = bnnpp.fit(model, data, method=method, seed=seed, progress=False, **options)
    wall = time.perf_counter() - t0
    row = {"problem": name, "label": label or method, "method": method, "load_before": load_before, "load_after": os.getloadavg()[0], "options": {k: v for k, v in post.stats.options.items() if isinstance(v, (bool, int, float, str, type(None)))},
           "wall_seconds": wall, "compile_seconds": post.stats.compile_seconds, "run_seconds": post.stats.run_seconds,
           "num_chains": post.num_chains, "num_draws": post.num_draws, "divergences": post.stats.extras.get("divergences"),
           "step_size": float(np.mean(post.stats.sample_stats["step_size"])),
           "draws_per_second": post.num_chains * post.num_draws / post.stats.run_seconds,  # kept draws over the sampling time (warm-up included, compile not)
           "device": jax.default_backend(),
           "mean_n_steps": float(np.mean(post.stats.sample_stats["n_steps"])),
           "chain_threads": post.stats.extras.get("chain_threads", 1)}  # over every kept transition
    if "tree_depth" in post.stats.sample_stats:
        depth = np.asarray(post.stats.sample_stats["tree_depth"])
        row["max_tree_depth"] = int(depth.max())
        row["tree_depth_counts"] = {int(d): int(c) for d, c in zip(*np.unique(depth, return_counts=True), strict=True)}
    row.update(convergence(post, np.asarray(data[0][:20], np.float32)))
    pred = post.predict(xt)
    if unit is None:
        row["test_accuracy"] = metrics.accuracy(pred.mean, yt)
        row["test_nll"] = metrics.nll(pred.mean, yt)
    else:
        loc = np.asarray(pred.draws, np.float64)
        noise = np.broadcast_to(np.asarray(pred.noise, np.float64), loc.shape)
        row["test_nll"] = metrics.gaussian_nll(loc, noise, yt) + float(np.log(unit[1]))
    return row, post


def markdown(result: dict) -> str:
    out = [f"# Many-chain samplers vs NUTS (benchmarks/samplers.py)\n\nMachine: {result['machine']}; load: {result['load']}\n",
           f"Command: `{result['command']}`\n",
           "| problem | run | chains × draws | threads | wall s (compile) | max R-hat | min ESS | draws to R-hat ≤ 1.01 & ESS ≥ 400 | est. s to target | ESS/s | draws/s | steps/transition | max tree depth | divergences | test NLL | agreement / TV vs ref. | W2 / sd ratio vs ref. | load before → after |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda v, p=3: "—" if v is None else (f"{v:.{p}f}" if isinstance(v, float) else str(v))
    for r in result["rows"]:
        ref = r.get("vs_reference") or {}
        cls = f"{f(ref.get('agreement'))} / {f(ref.get('total_variation'))}" if "agreement" in ref else "—"
        reg = f"{f(ref.get('w2'))} / {f(ref.get('sd_ratio'))}" if "w2" in ref else "—"
        load = f"{r['load_before']:.1f} → {r['load_after']:.1f}" if "load_before" in r else "—"
        out.append(f"| {r['problem']} | {r.get('label', r['method'])} | {r['num_chains']} × {r['num_draws']} | {r.get('chain_threads', '—')} | {r['wall_seconds']:.0f} ({r['compile_seconds']:.0f}) | "
                   f"{f(r['max_r_hat'])} | {f(r['min_ess_bulk'], 0)} | {f(r['draws_to_target'])} | {f(r['seconds_to_target'], 0)} | "
                   f"{f(r['ess_per_second'], 2)} | {f(r.get('draws_per_second'), 1)} | {f(r['mean_n_steps'], 1)} | {f(r.get('max_tree_depth'))} | {f(r['divergences'])} | {f(r['test_nll'])} | {cls} | {reg} | {load} |")
    out.append(f"\nReference for the agreement columns: {result.get('reference', 'nuts')}.")
    return "\n".join(out) + "\n"


def main(argv=None) -> dict:
    import jax
    from _common import machine, write_results

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", default="moons,sinusoid")
    p.add_argument("--methods", default="chees,mclmc,nuts", help="nuts is the reference of the others")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny runs (smoke test)")
    p.add_argument("--name", default="samplers", help="result file name (results/NAME.json/.md)")
    p.add_argument("--options", default="{}", help='JSON: method → options replacing the problem\'s, e.g. \'{"nuts": {"num_samples": 200}}\'')
    p.add_argument("--runs", default=None, help='JSON list of [label, method, options] replacing --methods/--options')
    p.add_argument("--reference", default="nuts", help="label of the run the others are measured against")
    args = p.parse_args(argv)
    problems = [s for s in args.problems.split(",") if s]
    import json

    replaced = json.loads(args.options)
    runs = json.loads(args.runs) if args.runs else [[m, m, None] for m in args.methods.split(",") if m]
    from bnnpp import diagnostics
    from bnnpp.diagnostics._common import _quiet_arviz

    result = {"machine": machine(), "load": f"load average at start {os.getloadavg()[0]:.1f} (5 engineers share 2 cores)",
              "command": "python " + " ".join(["benchmarks/samplers.py", *(argv if argv is not None else sys.argv[1:])]),
              "reference": args.reference, "rows": []}
    for name in problems:
        posts: dict = {}
        _, _, xt, _, _ = problem(name)
        for label, method, given in runs:
            options = given if given is not None else replaced.get(method, QUICK[method] if args.quick else OPTIONS[name][method])
            print(f"{name} {label} ({method}) {options} ...", flush=True)
            row, posts[label] = run(name, method, options, args.seed, label)
            result["rows"].append(row)
            if args.reference in posts:  # the reference: every other run of this problem against it
                for r in result["rows"]:
                    if r["problem"] == name and r["label"] != args.reference and "vs_reference" not in r:
                        with _quiet_arviz():
                            ref = diagnostics.reference(posts[r["label"]], posts[args.reference], np.asarray(xt, np.float32))
                        r["vs_reference"] = {k: v for k, v in ref.items() if k != "per_point"}
            print({k: row.get(k) for k in ("wall_seconds", "max_r_hat", "min_ess_bulk", "seconds_to_target", "test_nll")}, flush=True)
            write_results(os.path.join(HERE, "results"), args.name, result, markdown(result))
            jax.clear_caches()
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
