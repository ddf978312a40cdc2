"""Speed: bnnpp against plain NumPyro and against a hand-written jax + optax loop.

Contenders, run in the same invocation, interleaved round by round, every timed configuration
in a fresh process (so that import and compilation are cold) and medians taken over rounds:

* ``bnnpp advi`` / ``bnnpp bbb`` — ``bnnpp.fit`` + ``Posterior.predict``;
* ``numpyro svi`` — plain NumPyro as its documentation shows it: one ``numpyro.sample`` per
  weight matrix and bias (as in NumPyro's ``examples/bnn.py``),
  ``SVI(model, AutoNormal(model), numpyro.optim.Adam(1e-2), Trace_ELBO()).run(key, steps, x, y,
  progress_bar=False)``, then ``Predictive``;
* ``hand bbb`` — a hand-written jax + optax Bayes-by-Backprop loop under one ``lax.scan`` (the
  no-framework floor): the same objective as bnnpp's ``bbb`` defaults (mean-field Gaussian,
  σ = softplus(ρ), local reparameterisation, analytic Gaussian KL, one particle, Adam 1e-2,
  Glorot-uniform means, σ₀ = 0.05) with a fixed Normal(0, 1) prior in both.

Parts: (1) the 2-5-5-2 tanh moons model (700 training points): advi and NumPyro SVI with an
InverseGamma(1, 1) prior on each layer's variance; bbb and the hand-written loop with the
fixed Normal(0, 1) prior; (2) the 784-400-400-10 ReLU MLP on MNIST, bbb against the
hand-written loop, a fixed number of minibatch steps of 128 (skipped with a note when the MNIST
files are absent); (3) steady step time of bbb and the hand-written loop side by side (one process
per round, alternating repetitions, so that both see the same load on a shared machine) against
hidden width (both layers), against N (moons points, full batch) and on MNIST; (4) the CLI,
``bnnpp fit --data moons --method advi --steps 2000``, cold (empty persistent compilation cache),
warm, and (full mode) warm with the cold run's ``PYTHONHASHSEED``.

Per run: import seconds (the framework's imports, in the worker), XLA compile seconds (sum of
``jax.monitoring`` backend-compile durations, and their count), run seconds (training only),
seconds to a usable posterior (from process spawn until the test-set prediction has returned,
so interpreter start, imports, data, compile, training, drawing and predicting), and
microseconds per step (run seconds / steps, measured after compilation). The targets: bnnpp's
steady step ≤ 1.2 × the hand-written loop (part 3), bnnpp advi's time to a usable posterior
≤ 0.5 × plain NumPyro's (part 1).

    python benchmarks/speed.py            # full (3 rounds), writes results/speed.{json,md,png}
    python benchmarks/speed.py --quick    # 1 round, fewer steps/widths/Ns (about 3 minutes at load 3-4 on 2 cores)
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

from _common import machine, write_results

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MARK = "SPEED_RESULT "
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"

FULL = {
    "rounds": 3,
    "moons_advi_steps": 10_000,  # bnnpp advi's default; NumPyro SVI runs the same number
    "moons_bbb_steps": 5_000,  # bnnpp bbb's default epochs (full batch: one step per epoch)
    "moons_samples": 1000,
    "mnist_steps": 200,
    "mnist_batch": 128,
    "mnist_samples": 10,
    "widths": (5, 50, 400, 1200),
    "ns": (700, 7_000, 70_000),
    "steady_target_seconds": 1.0,  # training seconds aimed at per steady-step measurement
    "steady_reps": 3,  # side-by-side repetitions per configuration and round
    "steady_mnist": True,  # MNIST in the side-by-side table (quick: the cold runs' µs/step instead)
    "mnist_steady_epochs": 1,
    "numpyro_steady": True,  # time NumPyro's svi.update scan apart (quick: SVI.run's run s / steps)
    "cli_steps": 2000,
    "cli_starts": ("cold", "warm", "warm_fixed_hash"),
}
QUICK = {
    **FULL,
    "rounds": 1,
    "moons_advi_steps": 2000,
    "moons_bbb_steps": 2000,
    "mnist_steps": 20,
    "widths": (5, 50),
    "ns": (700, 7_000),
    "steady_target_seconds": 0.3,
    "steady_reps": 2,
    "steady_mnist": False,
    "numpyro_steady": False,
    "cli_starts": ("cold", "warm"),
}
BASE_WIDTH, BASE_N = 5, 700  # the moons model (2-5-5-2, 700 training points)


# ======================================================================================
# Worker side: one configuration in a fresh process, one JSON line on stdout
# ======================================================================================


class _Clock:
    """Compile events and wall time inside a worker."""

    def __init__(self, spawn: float):
        self.spawn = spawn  # time.time() in the parent just before the process was started
        self.events: list[float] = []

    def listen(self):
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(
            lambda event, duration, **kw: self.events.append(duration) if event == COMPILE_EVENT else None
        )

    def compiles(self, since: int = 0) -> tuple[float, int]:
        return float(sum(self.events[since:])), len(self.events) - since


def _load(path: str):
    """A data set prepared by the parent: ``x``, ``y``, ``x_test``, ``y_test`` (an ``.npz``), so
    that no contender pays for another framework's data code."""
    import numpy as np

    with np.load(path) as z:
        return z["x"], z["y"], z["x_test"], z["y_test"]


def prepare_data(folder: str, cfg: dict, data_dir: str | None) -> dict[str, str]:
    """Write every data set the workers read: moons with N training points for each N (700 is
    the moons model's), and the first steps·batch MNIST training images with the test set."""
    import numpy as np

    import bnnpp

    paths = {}
    for n in sorted(set(cfg["ns"]) | {BASE_N}):
        d = bnnpp.data.moons(n=round(n / 0.7))
        paths[f"moons_{n}"] = os.path.join(folder, f"moons_{n}.npz")
        np.savez(paths[f"moons_{n}"], x=d.x_train, y=d.y_train, x_test=d.x_test, y_test=d.y_test)
    if data_dir is not None:
        rows = cfg["mnist_steps"] * cfg["mnist_batch"]
        d = bnnpp.data.load("mnist", data_dir=data_dir, flatten=True)
        paths["mnist"] = os.path.join(folder, "mnist.npz")
        np.savez(paths["mnist"], x=d.x_train[:rows], y=d.y_train[:rows], x_test=d.x_test, y_test=d.y_test)
    return paths


def _accuracy(mean_probs, y) -> float:
    import numpy as np

    return float(np.mean(np.argmax(np.asarray(mean_probs), -1) == np.asarray(y)))


# ---------------------------------------------------------------- the hand-written floor


def hand_bbb(sizes, activation: str, steps: int, batch: int, n: int, num_samples: int):
    """Bayes by Backprop written with jax + optax only: returns ``train(key, x, y) ->
    (params, losses)`` (init + ``lax.scan`` of ``steps`` Adam steps) and ``predict(params, key,
    x) -> mean probabilities`` (``num_samples`` weight draws from q), both un-jitted.

    Same objective as bnnpp's bbb defaults: loss = (N/B)·NLL(minibatch) + KL(q ‖ N(0, 1))
    (one minibatch per step, so the KL weight M·(1/M) = 1), local reparameterisation,
    σ = softplus(ρ), Glorot-uniform means, zero bias means, σ₀ = 0.05, Adam(1e-2); minibatches
    from a permutation drawn on the device at the start of every epoch.
    """
    import jax
    import jax.numpy as jnp
    import optax

    act = {"tanh": jnp.tanh, "relu": jax.nn.relu}[activation]
    num_batches = n // batch
    rho0 = math.log(math.expm1(0.05))
    opt = optax.adam(1e-2)
    n_layers = len(sizes) - 1

    def init(key):
        params = []
        for i, (a, b) in enumerate(itertools.pairwise(sizes)):
            lim = math.sqrt(6.0 / (a + b))
            params.append({
                "mw": jax.random.uniform(jax.random.fold_in(key, i), (a, b), minval=-lim, maxval=lim),
                "rw": jnp.full((a, b), rho0), "mb": jnp.zeros(b), "rb": jnp.full(b, rho0),
            })
        return params

    def kl(params):
        total = 0.0
        for p in params:
            for m, r in ((p["mw"], p["rw"]), (p["mb"], p["rb"])):
                s = jax.nn.softplus(r)
                total = total + jnp.sum(-jnp.log(s) + 0.5 * (s * s + m * m) - 0.5)
        return total

    def loss_fn(params, key, xb, yb):
        h = xb
        for i, p in enumerate(params):
            sw, sb = jax.nn.softplus(p["rw"]), jax.nn.softplus(p["rb"])
            mean = h @ p["mw"] + p["mb"]
            var = (h * h) @ (sw * sw) + sb * sb
            h = mean + jnp.sqrt(var) * jax.random.normal(jax.random.fold_in(key, i), mean.shape)
            if i < n_layers - 1:
                h = act(h)
        logp = jnp.take_along_axis(jax.nn.log_softmax(h), yb[:, None], axis=1)
        return -(n / batch) * jnp.sum(logp) + kl(params)

    def train(key, x, y):
        k_init, k_steps, k_data = jax.random.split(key, 3)
        params = init(k_init)

        def step(carry, t):
            params, opt_state, perm = carry
            if num_batches == 1:
                xb, yb = x, y
            else:
                i = t % num_batches
                perm = jax.lax.cond(
                    i == 0, lambda: jax.random.permutation(jax.random.fold_in(k_data, t // num_batches), n), lambda: perm
                )
                idx = jax.lax.dynamic_slice(perm, (i * batch,), (batch,))
                xb, yb = x[idx], y[idx]
            loss, grads = jax.value_and_grad(loss_fn)(params, jax.random.fold_in(k_steps, t), xb, yb)
            updates, opt_state = opt.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state, perm), loss

        carry = (params, opt.init(params), jnp.arange(n))
        (params, _, _), losses = jax.lax.scan(step, carry, jnp.arange(steps))
        return params, losses

    def predict(params, key, x):
        def one(k):
            h = x
            for i, p in enumerate(params):
                kw, kb = jax.random.split(jax.random.fold_in(k, i))
                w = p["mw"] + jax.nn.softplus(p["rw"]) * jax.random.normal(kw, p["mw"].shape)
                b = p["mb"] + jax.nn.softplus(p["rb"]) * jax.random.normal(kb, p["mb"].shape)
                h = h @ w + b
                if i < n_layers - 1:
                    h = act(h)
            return jax.nn.softmax(h)

        return jnp.mean(jax.vmap(one)(jax.random.split(key, num_samples)), axis=0)

    return train, predict


def _hand_fit(clock: _Clock, sizes, activation, x, y, x_test, steps, batch, num_samples, seed=0, repeat=False):
    """Compile and run the hand-written loop, then predict: a result dict (times, accuracy-ready probs)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    ev0 = len(clock.events)
    t0 = time.perf_counter()
    train, predict = hand_bbb(sizes, activation, steps, batch, x.shape[0], num_samples)
    xj, yj, xt = jax.device_put(x), jax.device_put(y), jax.device_put(x_test)
    key = jax.random.PRNGKey(seed)
    c_train = jax.jit(train).lower(key, xj, yj).compile()
    t1 = time.perf_counter()
    params, losses = jax.block_until_ready(c_train(key, xj, yj))
    run = time.perf_counter() - t1
    fit = time.perf_counter() - t0
    t3 = time.perf_counter()
    probs = np.asarray(jax.jit(predict)(params, jax.random.PRNGKey(seed + 1), xt))
    predict_s = time.perf_counter() - t3
    out = {}
    if repeat:  # after the usable posterior: the same compiled program again, a warm steady-step timing
        t2 = time.perf_counter()
        jax.block_until_ready(c_train(key, xj, yj))
        out["second_call_us_per_step"] = 1e6 * (time.perf_counter() - t2) / steps
    compile_s, n_compiles = clock.compiles(ev0)
    out.update({
        "fit_seconds": fit, "run_seconds": run, "predict_seconds": predict_s, "compile_seconds": compile_s,
        "num_compiles": n_compiles, "own_compile_seconds": t1 - t0, "steps": steps,
        "us_per_step": 1e6 * run / steps, "final_loss": float(jnp.asarray(losses)[-1]),
    })
    return out, probs


def _bnnpp_fit(clock: _Clock, model, x, y, x_test, method: str, options: dict, seed=0):
    import bnnpp

    ev0 = len(clock.events)
    t0 = time.perf_counter()
    post = bnnpp.fit(model, (x, y), method=method, seed=seed, progress=False, **options)
    fit = time.perf_counter() - t0
    t1 = time.perf_counter()
    pred = post.predict(x_test)
    probs = pred.mean
    predict_s = time.perf_counter() - t1
    compile_s, n_compiles = clock.compiles(ev0)
    stats = post.stats
    return {
        "fit_seconds": fit, "run_seconds": stats.run_seconds, "predict_seconds": predict_s,
        "compile_seconds": compile_s, "num_compiles": n_compiles, "own_compile_seconds": stats.compile_seconds,
        "sample_seconds": stats.sample_seconds, "steps": stats.steps_run,
        "us_per_step": 1e6 * stats.run_seconds / max(stats.steps_run, 1),
    }, probs


# ---------------------------------------------------------------- plain NumPyro


def numpyro_bnn_model(widths=(5, 5, 2)):
    """The moons network written the way NumPyro's examples/bnn.py writes one: a ``numpyro.sample``
    per weight matrix and bias, here with σ² ~ InverseGamma(1, 1) per layer (bnnpp's site names)."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    def model(x, y=None):
        h = x
        for i, units in enumerate(widths):
            var = numpyro.sample(f"dense_{i}.variance", dist.InverseGamma(1.0, 1.0))
            sd = jnp.sqrt(var)
            w = numpyro.sample(f"dense_{i}.w", dist.Normal(jnp.zeros((h.shape[-1], units)), sd * jnp.ones((h.shape[-1], units))))
            b = numpyro.sample(f"dense_{i}.b", dist.Normal(jnp.zeros(units), sd * jnp.ones(units)))
            h = h @ w + b
            if i < len(widths) - 1:
                h = jnp.tanh(h)
        with numpyro.plate("data", x.shape[0]):
            numpyro.deterministic("logits", h)
            numpyro.sample("y", dist.Categorical(logits=h), obs=y)

    return model


def _numpyro_fit(clock: _Clock, x, y, x_test, steps: int, num_samples: int, seed=0, steady: bool = True):
    import jax
    import numpy as np
    import numpyro
    from numpyro.infer import SVI, Predictive, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal

    model = numpyro_bnn_model()
    ev0 = len(clock.events)
    t0 = time.perf_counter()
    guide = AutoNormal(model)
    svi = SVI(model, guide, numpyro.optim.Adam(1e-2), Trace_ELBO())
    result = svi.run(jax.random.PRNGKey(seed), steps, x, y, progress_bar=False)
    jax.block_until_ready(result.losses)
    fit = time.perf_counter() - t0
    fit_compile, fit_compiles = clock.compiles(ev0)
    t1 = time.perf_counter()
    pred = Predictive(model, guide=guide, params=result.params, num_samples=num_samples, return_sites=["logits"])
    logits = pred(jax.random.PRNGKey(seed + 1), x_test)["logits"]
    probs = np.asarray(jax.nn.softmax(logits, axis=-1).mean(0))
    predict_s = time.perf_counter() - t1
    compile_s, n_compiles = clock.compiles(ev0)
    out = {
        "fit_seconds": fit, "predict_seconds": predict_s, "compile_seconds": compile_s, "num_compiles": n_compiles,
        "fit_compile_seconds": fit_compile, "fit_num_compiles": fit_compiles, "steps": steps,
        # SVI.run's wall minus its XLA compile time: an upper bound (tracing is left in)
        "run_seconds": max(fit - fit_compile, 0.0), "final_loss": float(np.asarray(result.losses)[-1]),
    }
    if steady:
        # The steady step, measured apart and after the usable posterior: SVI.run's own scan of
        # svi.update (the same program it runs) under jit, compiled first, from its final state.
        def scan(state):
            return jax.lax.scan(lambda s, _: svi.update(s, x, y), state, None, length=steps)

        tc = time.perf_counter()
        c = jax.jit(scan).lower(result.state).compile()
        out["steady_compile_seconds"] = time.perf_counter() - tc
        t2 = time.perf_counter()
        jax.block_until_ready(c(result.state))
        out["us_per_step"] = 1e6 * (time.perf_counter() - t2) / steps
    else:  # not measured: SVI.run's wall minus compile still holds its eager set-up and tracing
        out["us_per_step"] = None
    return out, probs


# ---------------------------------------------------------------- steady step, side by side


def _steady_point(clock: _Clock, data: dict, pt: dict, reps: int) -> dict:
    """Steady µs/step of bnnpp bbb and of the hand-written loop on one configuration, measured
    ``reps`` times each, alternating (A B, B A, A B, ...) in one process so that both see the
    same load on a shared machine. Every bnnpp repetition is a whole ``bnnpp.fit`` (its
    programs come from the worker's persistent compilation cache after the first); the
    hand-written program is compiled once and called again. Returns the medians, every
    repetition, and the median of the per-repetition ratios."""
    import jax
    import numpy as np

    import bnnpp
    from bnnpp import priors

    if pt["kind"] == "moons":
        x, y, _, _ = _load(data[f"moons_{pt['n']}"])
        hidden, act, classes = (pt["width"], pt["width"]), "tanh", 2
        batch, steps = x.shape[0], pt["steps"]
        options = {"epochs": steps, "num_samples": 10}
    else:  # mnist: `epochs` passes over the prepared rows, batch 128
        x, y, _, _ = _load(data["mnist"])
        hidden, act, classes = (400, 400), "relu", 10
        batch = pt["batch"]
        steps = pt["epochs"] * (x.shape[0] // batch)
        options = {"epochs": pt["epochs"], "batch_size": batch, "num_samples": 10}
    model = bnnpp.models.mlp(hidden, activation=act, num_classes=classes, prior=priors.normal(1.0))
    train, _ = hand_bbb((x.shape[1], *hidden, classes), act, steps, batch, x.shape[0], 10)
    key = jax.random.PRNGKey(0)
    xj, yj = jax.device_put(x), jax.device_put(y)
    hand = jax.jit(train).lower(key, xj, yj).compile()
    jax.block_until_ready(hand(key, xj, yj))  # one untimed call, as bnnpp's first fit below is untimed too

    def time_bnnpp():
        post = bnnpp.fit(model, (x, y), method="bbb", seed=0, progress=False, **options)
        return 1e6 * post.stats.run_seconds / post.stats.steps_run

    def time_hand():
        t0 = time.perf_counter()
        jax.block_until_ready(hand(key, xj, yj))
        return 1e6 * (time.perf_counter() - t0) / steps

    time_bnnpp()  # compiles (and fills the cache); not counted
    b, h = [], []
    for r in range(reps):
        if r % 2 == 0:
            b.append(time_bnnpp())
            h.append(time_hand())
        else:
            h.append(time_hand())
            b.append(time_bnnpp())
    ratios = [bi / hi for bi, hi in zip(b, h, strict=True)]
    return {
        "kind": pt["kind"], "width": pt.get("width"), "n": int(x.shape[0]), "steps": steps, "batch": batch,
        "bnnpp_bbb_us_per_step": float(np.median(b)), "hand_bbb_us_per_step": float(np.median(h)),
        "ratio": float(np.median(ratios)), "bnnpp_bbb_reps": b, "hand_bbb_reps": h,
    }


# ---------------------------------------------------------------- worker entry


def worker(spec: dict) -> dict:
    clock = _Clock(spec["spawn"])
    contender, task = spec["contender"], spec["task"]
    t0 = time.perf_counter()
    import jax  # every contender needs it; its import counts

    clock.listen()
    if contender == "pair":  # repeated bnnpp fits of one configuration load their programs from a cache
        jax.config.update("jax_enable_compilation_cache", True)
        jax.config.update("jax_compilation_cache_dir", spec["cache_dir"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    if contender.startswith("bnnpp") or contender == "pair":
        import bnnpp
        from bnnpp import priors
    elif contender == "numpyro_svi":
        import numpyro.infer  # noqa: F401
    else:
        import optax  # noqa: F401
    import_s = time.perf_counter() - t0
    out = {"contender": contender, "task": task, "import_seconds": import_s}

    if task == "steady":  # bnnpp bbb and the hand-written loop side by side in one process
        out["points"] = [_steady_point(clock, spec["data"], pt, spec["reps"]) for pt in spec["points"]]
        return out

    td = time.perf_counter()
    x, y, xt, yt = _load(spec["data"][f"moons_{BASE_N}" if task == "moons" else "mnist"])
    out["data_seconds"] = time.perf_counter() - td

    if contender == "bnnpp_advi":
        model = bnnpp.models.mlp((5, 5), activation="tanh", num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))
        r, probs = _bnnpp_fit(clock, model, x, y, xt, "advi", {"num_steps": spec["steps"], "num_samples": spec["samples"]})
    elif contender == "bnnpp_bbb":
        hidden, act, classes = ((5, 5), "tanh", 2) if task == "moons" else ((400, 400), "relu", 10)
        model = bnnpp.models.mlp(hidden, activation=act, num_classes=classes, prior=priors.normal(1.0))
        batch = spec.get("batch")
        epochs = spec["steps"] if batch is None else 1  # MNIST: one epoch of `steps` minibatches
        r, probs = _bnnpp_fit(clock, model, x, y, xt, "bbb", {"epochs": epochs, "batch_size": batch, "num_samples": spec["samples"]})
    elif contender == "numpyro_svi":
        r, probs = _numpyro_fit(clock, x, y, xt, spec["steps"], spec["samples"], steady=spec.get("steady", True))
    else:  # hand_bbb
        sizes, act = ((2, 5, 5, 2), "tanh") if task == "moons" else ((784, 400, 400, 10), "relu")
        batch = spec.get("batch") or x.shape[0]
        steps = spec["steps"] if spec.get("batch") is None else x.shape[0] // batch
        r, probs = _hand_fit(clock, sizes, act, x, y, xt, steps, batch, spec["samples"], repeat=True)
    out["seconds_to_usable_posterior"] = time.time() - clock.spawn
    out.update(r)
    out["accuracy"] = _accuracy(probs, yt)
    return out


# ======================================================================================
# Parent side
# ======================================================================================


def _worker_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    env["JAX_ENABLE_COMPILATION_CACHE"] = "false"  # the library workers are cold on purpose
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def spawn(spec: dict, timeout: float = 1800) -> dict:
    """Run one configuration in a fresh Python process; return its JSON line."""
    spec = {**spec, "spawn": time.time()}
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
        check=False, capture_output=True, text=True, env=_worker_env(), timeout=timeout, cwd=ROOT,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"worker {spec['contender']}/{spec['task']} failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1][len(MARK):])


CLI_STARTS = {
    # name: PYTHONHASHSEED of the run (None: Python's default, a random seed per process)
    "cold": "0",
    "warm": None,
    "warm_fixed_hash": "0",
}


def cli_runs(steps: int, starts: tuple[str, ...]) -> dict:
    """``bnnpp fit --data moons --method advi`` in new processes against one fresh persistent
    cache: ``cold`` (empty cache), ``warm`` (as a user runs it again) and, in full mode,
    ``warm_fixed_hash`` (the same Python hash seed as the cold run: NumPyro's Trace_ELBO sums
    its sites in ``set`` order, so with it the training chunk's HLO, and its cache key, changed
    with the hash seed; bnnpp's advi sums them in sorted order, and this run checks that a
    plain warm start gains as much as one with the cold run's hash seed)."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = {k: v for k, v in _worker_env().items() if k not in ("JAX_ENABLE_COMPILATION_CACHE", "PYTHONHASHSEED")}
        base["BNNPP_CACHE_DIR"] = os.path.join(tmp, "cache")
        for start in starts:
            env = dict(base) if CLI_STARTS[start] is None else {**base, "PYTHONHASHSEED": CLI_STARTS[start]}
            dest = os.path.join(tmp, start)
            cmd = [sys.executable, "-m", "bnnpp", "fit", "--data", "moons", "--method", "advi", "--steps", str(steps),
                   "--quiet", "--out", dest]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, cwd=ROOT)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                raise SystemExit(f"bnnpp fit failed:\n{proc.stderr[-4000:]}")
            with open(os.path.join(dest, "metrics.json")) as f:
                rep = json.load(f)
            s = rep["seconds"]
            out[start] = {"wall_seconds": wall, "import_seconds": s["import"], "compile_seconds": s["compile"],
                          "fit_seconds": s["fit"], "predict_seconds": s["predict"], "write_seconds": s.get("write"),
                          "accuracy": rep["test"]["accuracy"]}
    return out


def scaling_steps(width: int, n: int, target: float) -> int:
    """Steps for one scaling point: about ``target`` seconds of training, from a rough cost model
    of a full-batch local-reparameterisation step on 2 CPU cores (fitted to the hand-written loop
    on the development machine): ~30 ns per sampled pre-activation (n × (2·width + 2) normal
    draws: the PRNG dominates small nets) plus 12 flops per n × weight at 100 GFLOP/s; at least
    20 steps and at most 5000."""
    weights = 2 * width + width * width + 2 * width
    est = 20e-6 + 30e-9 * n * (2 * width + 2) + 12.0 * n * weights / 1e11
    return int(min(5000, max(20, round(target / est))))


def _point_name(p: dict) -> str:
    return f"w{p['width']}/n{p['n']}" if p["kind"] == "moons" else "mnist"


def _median(values):
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _aggregate(runs: list[dict]) -> dict:
    """Median over rounds of every numeric field; the per-round values are kept too."""
    keys = [k for k, v in runs[0].items() if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))]
    med = {k: _median([r.get(k) for r in runs]) for k in keys}
    return {**med, "rounds": len(runs), "per_round": runs}


def _fmt(v, spec=".2f"):
    return "—" if v is None else format(v, spec)


def _default_data_dir() -> str:
    return os.environ.get("BNNPP_DATA_DIR") or os.path.normpath(os.path.join(ROOT, "..", "shared", "data"))


def _has_mnist(data_dir: str) -> bool:
    for folder in (data_dir, os.path.join(data_dir, "mnist")):
        if os.path.exists(os.path.join(folder, "train-images-idx3-ubyte.gz")):
            return True
    return False


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 round, fewer steps, widths 5,50 and N 700,7000 (< 2 minutes idle)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds of every contender (default 3; quick 1)")
    ap.add_argument("--data-dir", default=_default_data_dir(), help="folder with the MNIST IDX files (default $BNNPP_DATA_DIR or ../shared/data)")
    ap.add_argument("--results", default=os.path.join(HERE, "results"), help="folder for speed.{json,md,png}")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        print(MARK + json.dumps(worker(json.loads(args.worker))), flush=True)
        return {}

    cfg = dict(QUICK if args.quick else FULL)
    rounds = args.rounds or cfg["rounds"]
    t_start = time.perf_counter()
    load_start = os.getloadavg()
    mnist = _has_mnist(args.data_dir)
    moons_specs = {
        "bnnpp_advi": {"contender": "bnnpp_advi", "task": "moons", "steps": cfg["moons_advi_steps"], "samples": cfg["moons_samples"]},
        "numpyro_svi": {"contender": "numpyro_svi", "task": "moons", "steps": cfg["moons_advi_steps"], "samples": cfg["moons_samples"],
                        "steady": cfg["numpyro_steady"]},
        "bnnpp_bbb": {"contender": "bnnpp_bbb", "task": "moons", "steps": cfg["moons_bbb_steps"], "samples": cfg["moons_samples"]},
        "hand_bbb": {"contender": "hand_bbb", "task": "moons", "steps": cfg["moons_bbb_steps"], "samples": cfg["moons_samples"]},
    }
    mnist_specs = {
        c: {"contender": c, "task": "mnist", "steps": cfg["mnist_steps"], "batch": cfg["mnist_batch"],
            "samples": cfg["mnist_samples"]}
        for c in ("bnnpp_bbb", "hand_bbb")
    } if mnist else {}
    grid = sorted({(w, BASE_N) for w in cfg["widths"]} | {(BASE_WIDTH, n) for n in cfg["ns"]})
    steady_points = [{"kind": "moons", "width": w, "n": n, "steps": scaling_steps(w, n, cfg["steady_target_seconds"])}
                     for w, n in grid]
    if mnist and cfg["steady_mnist"]:
        steady_points.append({"kind": "mnist", "epochs": cfg["mnist_steady_epochs"], "batch": cfg["mnist_batch"]})
    tmp = tempfile.TemporaryDirectory()
    steady_spec = {"contender": "pair", "task": "steady", "points": steady_points, "reps": cfg["steady_reps"],
                   "cache_dir": os.path.join(tmp.name, "cache")}
    data = prepare_data(tmp.name, cfg, args.data_dir if mnist else None)
    for spec in [*moons_specs.values(), *mnist_specs.values(), steady_spec]:
        spec["data"] = data
    raw = {"moons": {c: [] for c in moons_specs}, "mnist": {c: [] for c in mnist_specs}, "steady": [], "cli": []}
    for r in range(rounds):
        for part, specs in (("moons", moons_specs), ("mnist", mnist_specs)):
            for c, spec in specs.items():
                res = spawn(spec)
                raw[part][c].append(res)
                print(f"round {r + 1} {part:7s} {c:12s} import {res['import_seconds']:.1f}s compile {res['compile_seconds']:.1f}s "
                      f"({res['num_compiles']}) run {res['run_seconds']:.2f}s usable {res['seconds_to_usable_posterior']:.1f}s "
                      f"{_fmt(res['us_per_step'], '.0f')} us/step acc {res['accuracy']:.3f}", flush=True)
        res = spawn(steady_spec)
        raw["steady"].append(res)
        print(f"round {r + 1} steady  " + ", ".join(
            f"{_point_name(p)}: {p['bnnpp_bbb_us_per_step']:.0f}/{p['hand_bbb_us_per_step']:.0f} us" for p in res["points"]), flush=True)
        pair = cli_runs(cfg["cli_steps"], cfg["cli_starts"])
        raw["cli"].append(pair)
        print(f"round {r + 1} cli " + ", ".join(f"{k} {v['wall_seconds']:.1f}s (compile {v['compile_seconds']:.1f}s)" for k, v in pair.items()),
              flush=True)

    tmp.cleanup()
    moons = {c: _aggregate(v) for c, v in raw["moons"].items()}
    mnist_rows = {c: _aggregate(v) for c, v in raw["mnist"].items()}
    cli = {s: _aggregate([p[s] for p in raw["cli"]]) for s in cfg["cli_starts"]}

    # steady table: one row per configuration; every repetition of every round pooled, medians
    steady = []
    for i, pt in enumerate(raw["steady"][0]["points"]):
        reps = [res["points"][i] for res in raw["steady"]]
        b = [v for p in reps for v in p["bnnpp_bbb_reps"]]
        h = [v for p in reps for v in p["hand_bbb_reps"]]
        steady.append({
            "kind": pt["kind"], "width": pt["width"], "n": pt["n"], "steps": pt["steps"], "batch": pt["batch"],
            "bnnpp_bbb_us_per_step": statistics.median(b), "hand_bbb_us_per_step": statistics.median(h),
            "ratio": statistics.median([x / y for x, y in zip(b, h, strict=True)]), "samples": len(b),
            "bnnpp_bbb_reps": b, "hand_bbb_reps": h,
        })
    scaling = [r for r in steady if r["kind"] == "moons"]
    mnist_steady = next((r for r in steady if r["kind"] == "mnist"), None)
    base = next(r for r in scaling if (r["width"], r["n"]) == (BASE_WIDTH, BASE_N))

    def ratio(a, b):
        return None if a is None or b is None else a / b

    targets = {
        "steady_step_moons": {
            "what": "bnnpp bbb steady µs/step ≤ 1.2 × hand-written (moons 2-5-5-2, side by side)",
            "ratio": base["ratio"], "limit": 1.2,
        },
        "usable_posterior_moons": {
            "what": "bnnpp advi seconds to a usable posterior ≤ 0.5 × plain NumPyro SVI (moons 2-5-5-2)",
            "ratio": ratio(moons["bnnpp_advi"]["seconds_to_usable_posterior"], moons["numpyro_svi"]["seconds_to_usable_posterior"]),
            "limit": 0.5,
        },
    }
    if mnist_steady:
        targets["steady_step_mnist"] = {
            "what": "bnnpp bbb steady µs/step ≤ 1.2 × hand-written (MNIST 784-400-400-10, batch 128, side by side)",
            "ratio": mnist_steady["ratio"], "limit": 1.2,
        }
    elif mnist_rows:  # quick mode: from the cold runs, one measurement each
        targets["steady_step_mnist"] = {
            "what": "bnnpp bbb µs/step ≤ 1.2 × hand-written (MNIST 784-400-400-10, batch 128, cold runs)",
            "ratio": ratio(mnist_rows["bnnpp_bbb"]["us_per_step"], mnist_rows["hand_bbb"]["us_per_step"]), "limit": 1.2,
        }
    for t in targets.values():
        t["met"] = None if t["ratio"] is None else bool(t["ratio"] <= t["limit"])
    targets["steady_step_scaling"] = {
        "what": "bnnpp bbb / hand-written steady µs/step at every width and N (full batch)",
        "ratios": {f"w{r['width']}_n{r['n']}": r["ratio"] for r in scaling}, "limit": 1.2,
        "met": all(r["ratio"] <= 1.2 for r in scaling),
    }


    produced_by = "python benchmarks/speed.py" + (" --quick" if args.quick else "") + (f" --rounds {args.rounds}" if args.rounds else "")
    result = {
        "benchmark": "speed",
        "produced_by": produced_by,
        "date": dt.date.today().isoformat(),
        "machine": machine(),
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "quick": args.quick,
        "rounds": rounds,
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items()},
        "moons": moons,
        "mnist": mnist_rows if mnist_rows else None,
        "mnist_note": None if mnist_rows else f"MNIST skipped: no IDX files under {args.data_dir} (--data-dir)",
        "steady": steady,
        "cli": cli,
        "targets": targets,
        "total_seconds": time.perf_counter() - t_start,
    }
    md = _markdown(result, cfg)
    fig = _figure(scaling)
    write_results(args.results, "speed", result, md, {"speed.png": fig}, dpi=120)
    print(md)
    return result


NAMES = {"bnnpp_advi": "bnnpp advi", "numpyro_svi": "NumPyro SVI.run (AutoNormal)", "bnnpp_bbb": "bnnpp bbb", "hand_bbb": "hand-written jax+optax BBB"}


def _markdown(res: dict, cfg: dict) -> str:
    head = ("| contender | steps | import s | fit s | XLA compile s, summed (count) | run s | predict s | to usable posterior s | "
            "µs/step | test accuracy |")
    sep = "|---|---|---|---|---|---|---|---|---|---|"

    def row(c, r):
        return (f"| {NAMES[c]} | {r['steps']:.0f} | {_fmt(r['import_seconds'])} | {_fmt(r['fit_seconds'], '.1f')} | "
                f"{_fmt(r['compile_seconds'], '.1f')} ({r['num_compiles']:.0f}) | {_fmt(r['run_seconds'])} | {_fmt(r['predict_seconds'])} | "
                f"{_fmt(r['seconds_to_usable_posterior'], '.1f')} | {_fmt(r.get('us_per_step'), '.0f')} | {_fmt(r['accuracy'], '.3f')} |")

    lines = [
        "# speed: bnnpp against plain NumPyro and a hand-written jax + optax loop",
        "",
        (f"`{res['produced_by']}`, {res['date']}, {res['machine']}; {res['rounds']} round(s), medians; "
        f"load average at start {res['load_average']['start'][0]:.1f}, at end {res['load_average']['end'][0]:.1f} "
        f"(a shared machine slows every contender); {res['total_seconds']:.0f} s in all."),
        "",
        "## Targets",
        "",
        "| target | ratio | limit | met |",
        "|---|---|---|---|",
    ]
    for t in res["targets"].values():
        if "ratio" in t:
            lines.append(f"| {t['what']} | {_fmt(t['ratio'])} | {t['limit']} | {'yes' if t['met'] else 'no' if t['met'] is not None else '—'} |")
        else:
            worst = max(t["ratios"].values())
            lines.append(f"| {t['what']} | worst {worst:.2f} | {t['limit']} | {'yes' if t['met'] else 'no'} |")
    lines += [
        "",
        f"## Moons, 2-5-5-2 tanh, 700 points, {cfg['moons_samples']} posterior draws",
        "",
        ("advi and NumPyro: Normal weights, InverseGamma(1, 1) on each layer's variance, "
        f"{cfg['moons_advi_steps']} Adam(1e-2) steps; bbb and hand-written: fixed Normal(0, 1), "
        f"{cfg['moons_bbb_steps']} full-batch steps, local reparameterisation, analytic KL."),
        "",
        head, sep,
    ]
    lines += [row(c, r) for c, r in res["moons"].items()]
    if res["mnist"]:
        lines += [
            "",
            (f"## MNIST, 784-400-400-10 ReLU, Normal(0, 1), {cfg['mnist_steps']} steps of batch {cfg['mnist_batch']} "
            f"(the first {cfg['mnist_steps'] * cfg['mnist_batch']} training images, one epoch), {cfg['mnist_samples']} draws "
            "to predict the 10,000 test images"),
            "",
            head, sep,
        ]
        lines += [row(c, r) for c, r in res["mnist"].items()]
    else:
        lines += ["", res["mnist_note"]]
    lines += [
        "",
        "## Steady step, side by side: bbb against the hand-written loop",
        "",
        (f"One process per round runs both on each configuration, alternating, {cfg['steady_reps']} times each "
        "(bnnpp: a whole `bnnpp.fit`, its programs loaded from a warm cache; hand-written: its compiled scan "
        "called again); medians over all repetitions of all rounds, and the median of the paired ratios. "
        "Moons rows: 2-w-w-2 tanh, full batch; MNIST: 784-400-400-10 ReLU, batch 128."),
        "",
        "| model | width | N | batch | steps | bnnpp bbb µs/step | hand-written µs/step | ratio (paired median) | samples |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["steady"]:
        name = "moons" if r["kind"] == "moons" else "MNIST"
        width = r["width"] if r["kind"] == "moons" else 400
        lines.append(f"| {name} | {width} | {r['n']} | {r['batch']} | {r['steps']} | {r['bnnpp_bbb_us_per_step']:.0f} | "
                     f"{r['hand_bbb_us_per_step']:.0f} | {r['ratio']:.2f} | {r['samples']} |")
    lines += [
        "",
        f"## CLI: `bnnpp fit --data moons --method advi --steps {cfg['cli_steps']} --quiet`, persistent cache cold and warm",
        "",
        "| start | wall s | import s | compile s | fit s (incl. compile) | predict s | write s | test accuracy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s, r in res["cli"].items():
        lines.append(f"| {s} | {_fmt(r['wall_seconds'], '.1f')} | {_fmt(r['import_seconds'], '.1f')} | "
                     f"{_fmt(r['compile_seconds'], '.1f')} | {_fmt(r['fit_seconds'], '.1f')} | {_fmt(r['predict_seconds'], '.1f')} | "
                     f"{_fmt(r['write_seconds'], '.1f')} | {_fmt(r['accuracy'], '.3f')} |")
    lines += [
        "",
        ("`warm_fixed_hash` (full mode) runs with the cold run's `PYTHONHASHSEED`, `warm` with a random one. NumPyro's "
        "`Trace_ELBO` adds its sites up in `set` order, which made the training chunk's HLO and cache key change from "
        "one process to the next, so a plain warm start missed the cache for the largest program; bnnpp's advi now "
        "uses `SortedTraceELBO` (sites in sorted order), and the two warm rows should agree."),
        "",
        ("Columns: import = the framework's imports in a fresh process; fit = the fit call (compile + run + "
        "drawing); XLA compile = sum of `jax.monitoring` backend-compile durations until the usable posterior "
        "(bnnpp compiles its programs in parallel threads, so the sum can exceed the wall time) and their "
        "count; run = training only "
        "(NumPyro: `SVI.run` wall minus its compile time); to usable posterior = process spawn until the "
        "test-set prediction returned; µs/step = run s / steps of that one cold run (NumPyro: its "
        "`svi.update` scan compiled apart and timed afterwards; not measured in quick mode); the steady-step targets use the "
        "side-by-side table, which is less sensitive to a shared machine's load."),
        "",
    ]
    return "\n".join(lines)


def _figure(scaling: list[dict]):
    """Steady µs/step of bnnpp bbb and the hand-written loop against width and N (a Figure)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    fig = Figure(figsize=(9, 3.6))
    axes = fig.subplots(1, 2)
    for ax, key, fixed, label in ((axes[0], "width", ("n", BASE_N), "hidden width (both layers)"),
                                  (axes[1], "n", ("width", BASE_WIDTH), "N (training points)")):
        rows = sorted((r for r in scaling if r[fixed[0]] == fixed[1]), key=lambda r: r[key])
        xs = [r[key] for r in rows]
        ax.loglog(xs, [r["bnnpp_bbb_us_per_step"] for r in rows], "o-", label="bnnpp bbb")
        ax.loglog(xs, [r["hand_bbb_us_per_step"] for r in rows], "s--", label="hand-written jax+optax")
        ax.set_xticks(xs, [str(v) for v in xs])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(label)
        ax.set_ylabel("steady µs / step")
        ax.set_title(f"{fixed[0]} = {fixed[1]}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    main(sys.argv[1:])
