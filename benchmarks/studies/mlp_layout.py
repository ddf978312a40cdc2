"""The MLP's activation layout on XLA CPU: rows × features (how ``bnnpp.models.mlp`` ran
until 2026-11-24) against features × rows (how it runs now), and NumPyro's Categorical
against bnnpp's (class axis first), side by side in one process.

One step is the MAP step on the model's log joint (value, gradient, Adam) through bnnpp's
own model code: the rows-major forward is rebuilt here from the library's layers, the
features-major one is ``MLP.__call__`` itself (see :data:`LAYOUTS`). Each is timed for one network and for five
members under ``vmap`` (how ``method="ensemble"`` steps), in compiled loops of steps that run
alternately ``--repeats`` times; the fastest counts.

* **moons** 2-5-5-2 tanh on 700 rows, full batch (the ensemble_cost moons net);
* **MNIST-sized** 784-400-400-10 ReLU on random batches of 128 (``--no-mnist`` skips it).

    python benchmarks/studies/mlp_layout.py              # ~1 CPU minute
    python benchmarks/studies/mlp_layout.py --no-mnist   # moons only

Writes ``--results``/mlp_layout.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import os
import sys
import time

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/: _common and the table scripts
sys.path.insert(0, BENCHMARKS)
from _common import machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))
MEMBERS = 5


def _rows_major_default(name, x, units, prior, scale):
    """The dense layer's default as it was: ``x @ w + b`` on ``(n, in)`` inputs."""
    w = prior.sample(f"{name}.w", (x.shape[-1], units), scale, dims=(f"{name}.in", f"{name}.out"))
    b = prior.sample(f"{name}.b", (units,), scale, dims=(f"{name}.out",))
    return x @ w + b


def rows_major_call(self, x, y=None, *, subsample_size=None):
    """``MLP.__call__`` as it was: activations ``(n, features)`` between the layers, each
    layer ``x @ w + b``."""
    import numpyro

    from bnnpp.models import layers
    from bnnpp.models.mlp import observe

    data = numpyro.plate("data", x.shape[0], subsample_size=subsample_size)
    with data:
        h = numpyro.subsample(x, event_dim=1)
    shared = self.prior.sample_scale("network") if self.prior.per == "network" else None
    widths = (*self.hidden, self.num_outputs)
    for i, units in enumerate(widths):
        scale = layers._layer_scale(f"dense_{i}", self.prior, units, shared, "dense")
        h = layers._send("dense", f"dense_{i}", _rows_major_default, (f"dense_{i}", h, units, self.prior, scale), {})
        if i < len(widths) - 1:
            h = self._act(h)
    observe(data, h, y, self.likelihood, self.noise, self.noise_scale, df=self.df, outputs=self.outputs)


LAYOUTS = ("rows × features", "features × rows", "features × rows, class axis first")
"""The three versions timed: the MLP as it was (NumPyro's Categorical on ``(n, C)`` logits),
the features-major MLP with NumPyro's Categorical, and the library now (its
``CategoricalLogits``, whose reductions run over the class axis moved first)."""


def _programs(model, x, y, steps: int) -> dict:
    """Compiled loops of ``steps`` MAP steps for each version in :data:`LAYOUTS`, one
    network and five members: (version, structure) → (compiled, state)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import numpyro.distributions as dist
    import optax

    from bnnpp.inference.joint import joint_terms
    from bnnpp.introspection import latent_sites
    mlp_module = importlib.import_module("bnnpp.models.mlp")  # the module (bnnpp.models.mlp is also the builder function)
    now = (mlp_module.MLP.__call__, mlp_module.CategoricalLogits)
    versions = dict(zip(LAYOUTS, ((rows_major_call, dist.CategoricalLogits), (now[0], dist.CategoricalLogits), now), strict=True))
    sites = latent_sites(model, x, y)
    rng = np.random.default_rng(0)
    u = {k: jnp.asarray(rng.uniform(-0.1, 0.1, size=s.shape), jnp.float32) for k, s in sites.items()}
    members = jax.tree_util.tree_map(lambda a: jnp.stack([a * (1 + 0.01 * m) for m in range(MEMBERS)]), u)
    opt = optax.adam(1e-3)
    key = np.zeros(2, np.uint32)
    copies = jnp.broadcast_to(x, (MEMBERS, *x.shape))  # method="ensemble" copies small minibatches (B*D < 2P)
    out = {}
    for layout, (call, categorical) in versions.items():
        def step(state, xv, call=call, categorical=categorical):
            pos, opt_state = state

            def loss(v):
                # traced now: the version in force while this program is built
                mlp_module.MLP.__call__, mlp_module.CategoricalLogits = call, categorical
                try:
                    log_prior, log_lik, _ = joint_terms(model, v, xv, y, key)
                finally:
                    mlp_module.MLP.__call__, mlp_module.CategoricalLogits = now
                return -(log_prior + log_lik)

            grads = jax.grad(loss)(pos)
            updates, opt_state = opt.update(grads, opt_state, pos)
            return optax.apply_updates(pos, updates), opt_state

        one = jax.jit(lambda s, step=step: jax.lax.fori_loop(0, steps, lambda i, c: step(c, x), s))
        many = jax.jit(lambda s, step=step: jax.lax.fori_loop(0, steps, lambda i, c: jax.vmap(step, (0, None))(c, x), s))
        copied = jax.jit(lambda s, step=step: jax.lax.fori_loop(0, steps, lambda i, c: jax.vmap(step)(c, copies), s))
        for label, fn, pos in (("one network", one, u), (f"{MEMBERS} members, vmap", many, members),
                               (f"{MEMBERS} members, vmap, rows copied", copied, members)):
            state = (pos, jax.vmap(opt.init)(pos) if pos is members else opt.init(pos))
            out[(layout, label)] = (fn.lower(state).compile(), state)
    return out


def measure(model, x, y, steps: int, repeats: int) -> dict:
    """µs per step of each (layout, structure), the fastest of ``repeats`` alternating runs."""
    import jax

    progs = _programs(model, x, y, steps)
    for comp, state in progs.values():
        jax.block_until_ready(comp(state))
    best = {k: float("inf") for k in progs}
    for _ in range(repeats):
        for k, (comp, state) in progs.items():
            t = time.perf_counter()
            jax.block_until_ready(comp(state))
            best[k] = min(best[k], (time.perf_counter() - t) / steps * 1e6)
    return {f"{layout} | {label}": us for (layout, label), us in best.items()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="alternating runs of each program; the fastest counts (default 5)")
    ap.add_argument("--no-mnist", action="store_true", help="moons only")
    ap.add_argument("--results", default=os.path.join(HERE, "results"), help="folder for mlp_layout.{json,md}")
    args = ap.parse_args(argv)
    import numpy as np

    import bnnpp
    from bnnpp import priors

    load_before = os.getloadavg()
    moons = bnnpp.data.load_synthetic("moons", seed=0)
    small = bnnpp.models.mlp((5, 5), activation="tanh", num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))
    cases = {"moons 2-5-5-2 tanh, 700 rows": measure(small, np.asarray(moons.x_train), np.asarray(moons.y_train), 1000, args.repeats)}
    if not args.no_mnist:
        rng = np.random.default_rng(0)
        x = rng.uniform(0, 1, size=(128, 784)).astype(np.float32)
        y = rng.integers(0, 10, size=128)
        net = bnnpp.models.mlp((400, 400), activation="relu", num_classes=10, prior=priors.normal(1.0))
        cases["784-400-400-10 ReLU, batch 128"] = measure(net, x, y, 30, args.repeats)
    result = {
        "benchmark": "mlp_layout",
        "produced_by": " ".join(["python benchmarks/studies/mlp_layout.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": dt.date.today().isoformat(), "machine": machine(), "repeats": args.repeats,
        "load_average": [load_before[0], os.getloadavg()[0]], "us_per_step": cases,
    }
    md = markdown(result)
    write_results(args.results, "mlp_layout", result, md)
    print(md)
    return result


def markdown(r: dict) -> str:
    lines = [
        "# mlp_layout: the MLP's activations rows × features (before) or features × rows (now), and its Categorical", "",
        (f"`{r['produced_by']}`, {r['date']}, {r['machine']}; load average {r['load_average'][0]:.1f} before, "
         f"{r['load_average'][1]:.1f} after. One MAP step (log joint through bnnpp's model, gradient, Adam) in a compiled "
         f"loop; fastest of {r['repeats']} alternating runs."),
        "",
        "| network | structure | " + " | ".join(f"{v} µs" for v in LAYOUTS) + " | speed-up, first to last |",
        "|---|---|" + "---|" * (len(LAYOUTS) + 1),
    ]
    for case, us in r["us_per_step"].items():
        for label in ("one network", f"{MEMBERS} members, vmap", f"{MEMBERS} members, vmap, rows copied"):
            times = [us[f"{v} | {label}"] for v in LAYOUTS]
            lines.append(f"| {case} | {label} | " + " | ".join(f"{t:.1f}" for t in times) + f" | {times[0] / times[-1]:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
