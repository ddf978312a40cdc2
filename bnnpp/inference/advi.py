"""``advi``: automatic differentiation variational inference (Kucukelbir et al. 2017) with
NumPyro's SVI and an autoguide.

``guide="normal"`` is mean-field ADVI (``AutoNormal``: one independent Normal per latent
coordinate on the unconstrained space); ``"lowrank"`` (``AutoLowRankMultivariateNormal``)
and ``"fullrank"`` (``AutoMultivariateNormal``) add correlations. The ELBO is estimated with
``num_particles`` Monte-Carlo draws per step (:class:`SortedTraceELBO`, NumPyro's ``Trace_ELBO``
with its sites added in a fixed order).

Everything is compiled, once: guide initialisation, the training chunk (a ``lax.scan``, see
:mod:`bnnpp.inference._loop`) and posterior sampling — three programs traced up front and
compiled side by side.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpyro.handlers import replay, seed
from numpyro.infer import SVI, Trace_ELBO
from numpyro.infer.autoguide import AutoLowRankMultivariateNormal, AutoMultivariateNormal, AutoNormal
from numpyro.infer.initialization import init_to_uniform
from numpyro.infer.util import compute_log_probs
from numpyro.optim import optax_to_numpyro
from numpyro.util import check_model_guide_match

from bnnpp.inference._loop import compile_all, default_chunk_size, drive, lower_guarded
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


class SortedTraceELBO(Trace_ELBO):
    """NumPyro's ``Trace_ELBO`` with the per-site terms added in sorted site-name order.

    NumPyro 0.22 adds the terms log p − log q in ``set`` order (``numpyro/infer/elbo.py``),
    which follows Python's string-hash seed, so the HLO of every program that differentiates
    the ELBO changed from one process to the next: the warm CLI missed JAX's persistent
    compilation cache for ADVI's training chunk (benchmarks/README.md, speed), and float32
    sums differed in the last bits between runs with the same seed. The estimator is the
    same (Wingate & Weber 2013; Ranganath et al. 2014): per particle, draw z ~ q, then
    log p(x, z) − log q(z); the loss is minus its mean over particles.
    """

    def loss_with_mutable_state(self, rng_key, param_map, model, guide, *args, **kwargs):
        def particle(key):
            model_seed, guide_seed = jax.random.split(key)
            guide_lp, guide_trace = compute_log_probs(seed(guide, guide_seed), args, kwargs, param_map)
            if any(site["type"] == "mutable" for site in guide_trace.values()):
                raise TypeError("advi does not support numpyro.mutable sites in the guide")
            model_lp, model_trace = compute_log_probs(
                replay(seed(model, model_seed), guide_trace), args, kwargs, param_map
            )
            check_model_guide_match(model_trace, guide_trace)
            elbo = jnp.array(0.0)
            for name in sorted(set(model_lp) | set(guide_lp)):
                elbo = elbo + model_lp.get(name, 0.0) - guide_lp.get(name, 0.0)
            return elbo

        if self.num_particles == 1:
            return {"loss": -particle(rng_key), "mutable_state": None}
        elbos = self.vectorize_particles_fn(particle, jax.random.split(rng_key, self.num_particles))
        return {"loss": -jnp.mean(elbos), "mutable_state": None}


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
    svi = SVI(model, guide, optax_to_numpyro(optimizer), SortedTraceELBO(num_particles=o["num_particles"]))
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
    chunk, recover = lower_guarded(step, state_shape, o["num_steps"], chunk_size)
    lowered = {
        "init": lowered_init,
        "chunk": chunk,
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
        recover=recover,
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
