"""``advi``: automatic differentiation variational inference (Kucukelbir et al. 2017) with
NumPyro's SVI and an autoguide.

``guide="normal"`` is mean-field ADVI (``AutoNormal``: one independent Normal per latent
coordinate on the unconstrained space); ``"lowrank"`` (``AutoLowRankMultivariateNormal``)
and ``"fullrank"`` (``AutoMultivariateNormal``) add correlations. The ELBO is estimated with
``num_particles`` Monte-Carlo draws per step (``Trace_ELBO``).

Everything is compiled, once: guide initialisation, the training chunk (a ``lax.scan``, see
:mod:`bnnpp.inference._loop`) and posterior sampling — three programs traced up front and
compiled side by side.
"""

from __future__ import annotations

import time

import jax
import numpy as np
import optax
from numpyro.infer import SVI, Trace_ELBO
from numpyro.infer.autoguide import AutoLowRankMultivariateNormal, AutoMultivariateNormal, AutoNormal
from numpyro.infer.initialization import init_to_uniform
from numpyro.optim import optax_to_numpyro

from bnnpp.inference._loop import compile_all, default_chunk_size, drive, lower_chunk
from bnnpp.inference.base import (
    Backend,
    Posterior,
    Program,
    check_optimizer,
    latent_sites,
    one_of,
    positive_float,
    positive_int,
    register,
)

GUIDES = {"normal": AutoNormal, "lowrank": AutoLowRankMultivariateNormal, "fullrank": AutoMultivariateNormal}

DEFAULTS = {
    "num_steps": 10_000,
    "learning_rate": 1e-2,
    "optimizer": None,
    "num_particles": 1,
    "guide": "normal",
    "num_samples": 1000,
    "init_scale": 0.1,
    "init_radius": 2.0,
    "chunk_size": None,
}


def validate(o: dict) -> None:
    """Reject bad ADVI options with a one-line error."""
    positive_int(o, "num_steps")
    positive_float(o, "learning_rate")
    positive_int(o, "num_particles")
    positive_int(o, "num_samples")
    positive_float(o, "init_scale")
    positive_float(o, "init_radius")
    one_of(o, "guide", tuple(GUIDES))
    if o["chunk_size"] is not None:
        positive_int(o, "chunk_size")
    check_optimizer(o["optimizer"])


def _build(model, x, y, seed: int, o: dict):
    """The guide, the three pure functions of a fit and its keys (shared by fit and program)."""
    optimizer = o["optimizer"] if o["optimizer"] is not None else optax.adam(o["learning_rate"])
    guide_cls = GUIDES[o["guide"]]
    guide = guide_cls(model, init_loc_fn=init_to_uniform(radius=o["init_radius"]), init_scale=o["init_scale"])
    svi = SVI(model, guide, optax_to_numpyro(optimizer), Trace_ELBO(num_particles=o["num_particles"]))
    sites = latent_sites(model, x, y)
    xj, yj = jax.device_put(x), jax.device_put(y)
    key_init, key_draw = jax.random.split(jax.random.PRNGKey(seed))

    def init_fn(k):
        return svi.init(k, xj, yj)

    def step(s):
        return svi.update(s, xj, yj)

    def draw(k, state):
        params = svi.get_params(state)  # constrained guide parameters
        s = guide.sample_posterior(k, params, xj, yj, sample_shape=(o["num_samples"],))
        return {name: s[name] for name in sites}, params

    return init_fn, step, draw, key_init, key_draw, sites


def program(model, x, y, seed, o: dict) -> Program:
    """ADVI as pure functions (see :class:`~bnnpp.inference.base.Program`); ``seed`` may be
    a traced integer and ``model`` may close over traced prior hyperparameters."""
    init_fn, step, draw, key_init, key_draw, sites = _build(model, x, y, seed, o)
    return Program(init_fn, step, lambda k, s: draw(k, s)[0], key_init, key_draw, o["num_steps"], sites)


def fit(model, x, y, *, seed: int, progress: bool, **o) -> Posterior:
    """Fit ``model`` to ``(x, y)`` by ADVI.

    Options (defaults in ``DEFAULTS``): ``num_steps``; ``learning_rate`` for the default Adam,
    or ``optimizer``, any optax transformation (giving both is an error);
    ``num_particles``; ``guide``; ``num_samples`` posterior draws kept; ``init_scale`` initial
    sd of the guide; ``init_radius``: guide means start uniform in (−r, r) on the
    unconstrained space (a start near zero lets hierarchical scales collapse to a
    near-linear optimum, see shared/PERFORMANCE-NOTES.md); ``chunk_size`` steps per compiled
    chunk.

    Returns:
        A :class:`Posterior` with ``num_samples`` draws in one chain; ``info["loss"]`` is the
        negative ELBO per step ``(steps_run,)``.
    """
    init_fn, step, draw, key_init, key_draw, sites = _build(model, x, y, seed, o)

    # Trace all three programs first, then compile them side by side: init, one training
    # chunk, posterior sampling. Nothing is compiled twice and nothing runs eagerly.
    chunk_size = o["chunk_size"] or default_chunk_size(o["num_steps"])
    t0 = time.perf_counter()
    lowered_init = jax.jit(init_fn).lower(key_init)
    state_shape = lowered_init.out_info
    lowered = {
        "init": lowered_init,
        "chunk": lower_chunk(step, state_shape, o["num_steps"], chunk_size),
        "draw": jax.jit(draw).lower(key_draw, state_shape),
    }
    programs = compile_all(lowered)
    compile_seconds = time.perf_counter() - t0

    res = drive(
        programs["chunk"],
        programs["init"](key_init),
        o["num_steps"],
        chunk_size,
        progress=progress,
        desc="advi",
        postfix=lambda losses: {"elbo": f"{-losses.mean():.4g}"},
        compile_seconds=compile_seconds,
    )
    t0 = time.perf_counter()
    draws, params = jax.device_get(programs["draw"](key_draw, res.state))
    sample_seconds = time.perf_counter() - t0
    samples = {k: np.asarray(v)[None] for k, v in draws.items()}
    info = {
        "method": "advi",
        "seed": seed,
        "options": {k: v for k, v in o.items()},
        "loss": res.losses,
        "steps_run": res.steps_run,
        "stopped_at": res.stopped_at,
        "compile_seconds": compile_seconds,  # tracing + compiling all three programs (wall)
        "run_seconds": res.run_seconds,
        "sample_seconds": sample_seconds,
        "guide_params": {k: np.asarray(v) for k, v in params.items()},
    }
    return Posterior(samples, info, model, x, y, sites)


register(
    Backend(
        "advi",
        fit,
        DEFAULTS,
        validate,
        "mean-field / low-rank / full-rank ADVI (NumPyro SVI + autoguide)",
        exclusive=(("optimizer", "learning_rate"),),
        program=program,
    )
)
