"""Is advi's underfit on the sinusoid the ELBO's optimum, or an optimum the default start
misses? The 32-point sinusoid of ``regression.py`` (1-20-20-1 ReLU, noise sd 1 known), per
weight prior and fit seed, two mean-field Gaussian fits of the same ELBO, Adam 0.01 with the
default cosine decay over 10,000 steps:

- ``default``: ``bnnpp.fit(..., method="advi")`` with no options (means from Glorot's
  uniform, σ = 0.01).
- ``from MAP``: the same guide (NumPyro ``AutoNormal``, σ = 0.01) whose means start at a MAP
  fit of the same model (``bnnpp.fit(..., method="map")``, 5,000 steps, the same seed).

Both are scored by the negative ELBO (2,000 particles at a fixed key; lower is a better fit of
the variational objective), the test NLL on the 300-point grid on [−1.5, 1.5], the train RMSE
(noise sd 1) and the epistemic sd ratio at x = ±1.2 to x = 0 — the issue's sinusoid criteria.
NUTS's row in ``results/regression.md`` is the reference (test NLL 4.37, ratio 17.6).

    python benchmarks/studies/sinusoid_optima.py              # priors mixture and normal, fit seeds 0, 1, 2
    python benchmarks/studies/sinusoid_optima.py --quick      # 300 steps, one seed: a smoke test
    python benchmarks/studies/sinusoid_optima.py --bnaf --fit-seeds 0   # the flow guide below (about 13 minutes a seed; 9 with --quick)

``--bnaf`` fits NumPyro's ``AutoBNAFNormal`` instead (a block neural autoregressive flow, one
flow, hidden factor 4 — the issue's flow guide; ``AutoIAFNormal`` diverged in the tenth
session) under the mixture prior from its default start: Adam 3e-3 with cosine decay and
gradients clipped at norm 10, 4 particles, 10,000 steps; scored as above and written to
``results/sinusoid_optima_bnaf.{json,md}``.

Writes ``results/sinusoid_optima.{json,md}``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time

import numpy as np
BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: _common and the table scripts
sys.path.insert(0, BENCHMARKS)
from _common import machine, parse_seeds, write_results

HERE = os.path.dirname(os.path.abspath(__file__))
PROBES = np.array([[-1.2], [0.0], [1.2]], np.float32)
PRIORS = ("mixture", "normal")


def _model(prior: str):
    import bnnpp
    from bnnpp import priors

    p = priors.scale_mixture(0.2, 1.0, 0.1) if prior == "mixture" else priors.normal(1.0)
    return bnnpp.models.mlp((20, 20), activation="relu", likelihood="gaussian", noise=1.0, prior=p)


def _score(model, guide, params, data, label: str, seconds: float) -> dict:
    """The row of one fitted ``AutoNormal`` guide: -ELBO (2,000 particles), test NLL, train
    RMSE and the epistemic sd ratio ±1.2 / 0, from 1,000 draws of the network's mean."""
    import jax
    import jax.numpy as jnp
    from numpyro.infer import Predictive, Trace_ELBO

    from bnnpp import metrics

    x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
    neg_elbo = float(Trace_ELBO(num_particles=2000).loss(jax.random.PRNGKey(7), params, model, guide, x, y))
    pred = Predictive(model, guide=guide, params=params, num_samples=1000, return_sites=["mean"])

    def means(z):
        return np.asarray(pred(jax.random.PRNGKey(1), jnp.asarray(z))["mean"], np.float64)

    test, train, probe = means(data.x_test), means(data.x_train), means(PROBES)
    epi = probe.std(0)
    return {
        "start": label,
        "negative_elbo": neg_elbo,
        "test_nll": metrics.gaussian_nll(test, np.ones_like(test), data.y_test),
        "train_rmse": metrics.rmse(train.mean(0), data.y_train),
        "epistemic_ratio": float((epi[0] + epi[2]) / 2 / epi[1]),
        "seconds": seconds,
    }


def run(prior: str, seed: int, steps: int, data) -> list[dict]:
    """The two starts for one prior and fit seed; returns their rows."""
    import jax
    import jax.numpy as jnp
    import optax
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal
    from numpyro.infer.initialization import init_to_value

    import bnnpp

    model = _model(prior)
    rows = []
    t0 = time.perf_counter()
    post = bnnpp.fit(model, data, method="advi", seed=seed, progress=False, num_steps=steps)
    q = post.approximation  # MeanFieldGaussian: per-site loc and scale
    guide = AutoNormal(model, init_scale=0.01)
    params = {**{f"{k}_auto_loc": v for k, v in q.loc.items()}, **{f"{k}_auto_scale": v for k, v in q.scale.items()}}
    rows.append(_score(model, guide, params, data, "default", time.perf_counter() - t0))

    t0 = time.perf_counter()
    point = bnnpp.fit(model, data, method="map", seed=seed, progress=False, num_steps=steps // 2)
    values = {k: jnp.asarray(v).reshape(v.shape[2:]) for k, v in point.samples.items()}  # (chain, draw, ...) → site shape
    guide = AutoNormal(model, init_loc_fn=init_to_value(values=values), init_scale=0.01)
    svi = SVI(model, guide, optax.adam(optax.cosine_decay_schedule(0.01, steps)), Trace_ELBO())
    result = svi.run(jax.random.PRNGKey(seed), steps, jnp.asarray(data.x_train), jnp.asarray(data.y_train), progress_bar=False)
    rows.append(_score(model, guide, result.params, data, "from MAP", time.perf_counter() - t0))
    return rows


def _result(name: str, argv, steps: int, rows: list[dict]) -> dict:
    """The JSON record of a run: the command, date, machine, steps and rows."""
    return {
        "benchmark": name,
        "produced_by": " ".join(["python benchmarks/studies/sinusoid_optima.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "steps": steps,
        "rows": rows,
    }


def run_bnaf(seed: int, steps: int, data) -> dict:
    """One ``AutoBNAFNormal`` fit under the mixture prior (module docstring); returns its row."""
    import jax
    import jax.numpy as jnp
    import optax
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoBNAFNormal

    model = _model("mixture")
    t0 = time.perf_counter()
    guide = AutoBNAFNormal(model, num_flows=1, hidden_factors=[4])
    opt = optax.chain(optax.clip_by_global_norm(10.0), optax.adam(optax.cosine_decay_schedule(3e-3, steps)))
    svi = SVI(model, guide, opt, Trace_ELBO(num_particles=4))
    result = svi.run(jax.random.PRNGKey(seed), steps, jnp.asarray(data.x_train), jnp.asarray(data.y_train), progress_bar=False)
    return _score(model, guide, result.params, data, "bnaf", time.perf_counter() - t0)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="300 steps, one seed, the mixture prior (a smoke test, not a result)")
    ap.add_argument("--fit-seeds", default="0,1,2", metavar="S,S,...")
    ap.add_argument("--bnaf", action="store_true", help="fit the AutoBNAFNormal guide under the mixture prior instead (results/sinusoid_optima_bnaf.*)")
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    args = ap.parse_args(argv)
    seeds = parse_seeds(args.fit_seeds, args.quick)
    import bnnpp

    steps = 300 if args.quick else 10_000
    if args.bnaf:
        return _main_bnaf(args, argv, seeds, steps, bnnpp.data.sinusoid(seed=0))
    priors = ("mixture",) if args.quick else PRIORS
    data = bnnpp.data.sinusoid(seed=0)
    rows = []
    for prior in priors:
        for seed in seeds:
            for row in run(prior, seed, steps, data):
                rows.append({"prior": prior, "seed": seed, **row})
                print(f"{prior:7s} seed {seed} {row['start']:8s} -ELBO {row['negative_elbo']:8.1f}  test NLL {row['test_nll']:7.2f}  "
                      f"train RMSE {row['train_rmse']:.2f}  epistemic ratio {row['epistemic_ratio']:.1f}", flush=True)
    result = _result("sinusoid_optima", argv, steps, rows)
    lines = [
        "# sinusoid_optima: advi's default start against a start at the MAP means",
        "",
        (f"`{result['produced_by']}`, {result['date']}, {result['machine']}. 1-20-20-1 ReLU, noise sd 1 known, 32 points; "
         f"Adam 0.01, cosine decay, {steps} steps; -ELBO from 2,000 particles (lower is better). NUTS (results/regression.md): "
         "test NLL 4.37, epistemic ratio 17.6 under the mixture."),
        "",
        "| prior | seed | start | −ELBO | test NLL | train RMSE | epistemic sd ratio ±1.2 / 0 |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {r['prior']} | {r['seed']} | {r['start']} | {r['negative_elbo']:.1f} | {r['test_nll']:.2f} | {r['train_rmse']:.2f} | "
              f"{r['epistemic_ratio']:.1f} |" for r in rows]
    lines += ["", "Means over seeds:", "", "| prior | start | −ELBO | test NLL | train RMSE | epistemic ratio |", "|---|---|---|---|---|---|"]
    for prior in priors:
        for start in ("default", "from MAP"):
            sel = [r for r in rows if r["prior"] == prior and r["start"] == start]
            lines.append(f"| {prior} | {start} | " + " | ".join(f"{np.mean([r[k] for r in sel]):.2f}" for k in
                                                            ("negative_elbo", "test_nll", "train_rmse", "epistemic_ratio")) + " |")
    md = "\n".join(lines) + "\n"
    write_results(args.results, "sinusoid_optima", result, md)
    print(md)
    return result


def _main_bnaf(args, argv, seeds: list[int], steps: int, data) -> dict:
    rows = []
    for seed in seeds:
        row = {"prior": "mixture", "seed": seed, **run_bnaf(seed, steps, data)}
        rows.append(row)
        print(f"mixture seed {seed} bnaf -ELBO {row['negative_elbo']:8.1f}  test NLL {row['test_nll']:7.2f}  "
              f"train RMSE {row['train_rmse']:.2f}  epistemic ratio {row['epistemic_ratio']:.1f}  {row['seconds']:.0f} s", flush=True)
    result = _result("sinusoid_optima_bnaf", argv, steps, rows)
    lines = [
        "# sinusoid_optima --bnaf: a block neural autoregressive flow guide under the scale-mixture prior",
        "",
        (f"`{result['produced_by']}`, {result['date']}, {result['machine']}. 1-20-20-1 ReLU, scale mixture (π = 0.2, σ1 = 1, "
         f"σ2 = 0.1), noise sd 1 known, 32 points; NumPyro AutoBNAFNormal (1 flow, hidden factor 4), Adam 3e-3, cosine decay, "
         f"gradients clipped at norm 10, 4 particles, {steps} steps; -ELBO from 2,000 particles (lower is better). NUTS "
         "(results/regression.md): test NLL 4.37, epistemic ratio 17.6."),
        "",
        "| seed | −ELBO | test NLL | train RMSE | epistemic sd ratio ±1.2 / 0 | seconds |",
        "|---|---|---|---|---|---|",
    ]
    lines += [f"| {r['seed']} | {r['negative_elbo']:.1f} | {r['test_nll']:.2f} | {r['train_rmse']:.2f} | {r['epistemic_ratio']:.1f} | "
              f"{r['seconds']:.0f} |" for r in rows]
    md = "\n".join(lines) + "\n"
    write_results(args.results, "sinusoid_optima_bnaf", result, md)
    print(md)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
