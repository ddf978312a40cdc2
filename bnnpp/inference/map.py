"""``map``: maximum a posteriori point estimate with optax — the deterministic baseline.

The objective is the negative log joint (prior + likelihood) of the model on the
unconstrained space (see :mod:`bnnpp.inference._joint`). Weights are unconstrained, so for
them this is the usual MAP (with ``priors.flat()``: maximum likelihood). Hierarchical scale
and noise sites are optimised as ``log σ`` including the log-Jacobian: the mode of the
density of ``log σ``, which stays away from the σ → 0 spike of the joint density of weights
and their scale.

The result is a :class:`Posterior` with one chain and one draw, so ``predict``,
``to_arviz`` and ``save`` work as for every other method (all uncertainty is aleatoric).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from bnnpp.inference._joint import constrained_values, init_uniform, joint_terms
from bnnpp.inference._loop import compile_all, default_chunk_size, drive, lower_guarded
from bnnpp.inference.base import (
    Backend,
    Posterior,
    Program,
    check_batch_size,
    check_optimizer,
    latent_sites,
    positive_float,
    positive_int,
    register,
)

DEFAULTS = {
    "num_steps": 5_000,
    "batch_size": None,
    "learning_rate": 1e-2,
    "optimizer": None,
    "init_radius": 2.0,
    "chunk_size": None,
}


def validate(o: dict) -> None:
    """Reject bad MAP options with a one-line error."""
    positive_int(o, "num_steps")
    if o["batch_size"] is not None:
        positive_int(o, "batch_size")
    positive_float(o, "learning_rate")
    positive_float(o, "init_radius")
    if o["chunk_size"] is not None:
        positive_int(o, "chunk_size")
    check_optimizer(o["optimizer"])


def _build(model, x, y, seed, o: dict):
    """The pure functions of a MAP fit, its keys and sites (shared by fit and program)."""
    optimizer = o["optimizer"] if o["optimizer"] is not None else optax.adam(o["learning_rate"])
    sites = latent_sites(model, x, y)
    n = x.shape[0]
    batch = o["batch_size"] or n  # ≤ n: checked by check_batch_size before fit is called
    num_batches = n // batch
    lik_scale = n / batch
    xj, yj = jax.device_put(x), jax.device_put(y)
    key_init, key_model = jax.random.split(jax.random.PRNGKey(seed))
    key_data = jax.random.fold_in(key_init, 1)

    def neg_log_joint(u, xb, yb):
        lp, ll, _ = joint_terms(model, u, xb, yb, key_model)
        return -(lp + lik_scale * ll)

    def init_fn(k):
        u = init_uniform({n: s.shape for n, s in sites.items()}, k, o["init_radius"])
        return u, optimizer.init(u), jnp.zeros((), jnp.int32), jnp.arange(n, dtype=jnp.int32)

    def step_on(state, data):
        """One step with the training data ``(x, y)`` as an argument: data a program closes
        over is embedded in it as a constant (157 MB of HLO for MNIST)."""
        u, opt_state, t, perm = state
        xd, yd = data
        i = t % num_batches
        if batch == n:
            xb, yb = xd, yd
        else:  # reshuffle on device at the start of each epoch, then gather the minibatch (as bbb)
            perm = jax.lax.cond(
                i == 0,
                lambda: jax.random.permutation(jax.random.fold_in(key_data, t // num_batches), n).astype(jnp.int32),
                lambda: perm,
            )
            idx = jax.lax.dynamic_slice(perm, (i * batch,), (batch,))
            xb, yb = xd[idx], yd[idx]
        loss, grads = jax.value_and_grad(neg_log_joint)(u, xb, yb)
        updates, opt_state = optimizer.update(grads, opt_state, u)
        return (optax.apply_updates(u, updates), opt_state, t + 1, perm), loss

    def final(state):
        return constrained_values(model, state[0], xj[:1], yj[:1], key_model, sites)  # latent shapes do not depend on n

    return init_fn, step_on, final, key_init, sites, num_batches, (xj, yj)


def program(model, x, y, seed, o: dict) -> Program:
    """MAP as pure functions (see :class:`~bnnpp.inference.base.Program`); ``draws``
    returns the mode as one draw ``(1, *site_shape)``."""
    init_fn, step_on, final, key_init, sites, _, data = _build(model, x, y, seed, o)
    draws = lambda k, state: jax.tree_util.tree_map(lambda v: v[None], final(state))
    step = lambda state: step_on(state, data)  # the sweep vmaps small data sets: closing over them is fine
    return Program(init_fn, step, draws, key_init, key_init, o["num_steps"], sites)


def fit(model, x, y, *, seed: int, progress: bool, **o) -> Posterior:
    """Find the posterior mode of ``model`` given ``(x, y)``.

    Options (defaults in ``DEFAULTS``): ``num_steps`` optimiser steps; ``batch_size`` rows
    per step (``None``: full batch; otherwise the rows are reshuffled on the device at the
    start of every epoch of ``n // batch_size`` steps, as in ``bbb``, and the likelihood is
    scaled by N/B so that each step's loss is an unbiased estimate of the full negative log
    joint); ``learning_rate`` of the default Adam, or ``optimizer`` (any optax
    transformation; not both); ``init_radius``: start uniform in (−r, r) on the
    unconstrained space; ``chunk_size``.

    Returns:
        A :class:`Posterior` with samples ``(1, 1, *site_shape)``; ``info["loss"]`` is the
        (minibatch estimate of the) negative log joint per step ``(steps_run,)``;
        ``info["num_batches"]`` the steps per epoch.
    """
    init_fn, step_on, final, key_init, sites, num_batches, data = _build(model, x, y, seed, o)

    chunk_size = o["chunk_size"] or default_chunk_size(o["num_steps"])
    t0 = time.perf_counter()
    lowered_init = jax.jit(init_fn).lower(key_init)
    state_shape = lowered_init.out_info
    chunk, recover = lower_guarded(step_on, state_shape, o["num_steps"], chunk_size, consts=data)
    programs = compile_all(
        {
            "init": lowered_init,
            "chunk": chunk,
            "final": jax.jit(final).lower(state_shape),
        }
    )
    compile_seconds = time.perf_counter() - t0
    res = drive(
        programs["chunk"], programs["init"](key_init), o["num_steps"], chunk_size, progress=progress, desc="map",
        postfix=lambda losses: {"-log joint": f"{losses.mean():.4g}"}, compile_seconds=compile_seconds, consts=data,
        recover=recover,
    )
    t0 = time.perf_counter()
    values = jax.device_get(programs["final"](res.state))
    samples = {k: np.asarray(v)[None, None] for k, v in values.items()}
    info = {
        "method": "map",
        "seed": seed,
        "options": dict(o),
        "loss": res.losses,
        "steps_run": res.steps_run,
        "stopped_at": res.stopped_at,
        "num_batches": num_batches,
        "compile_seconds": compile_seconds,
        "run_seconds": res.run_seconds,
        "sample_seconds": time.perf_counter() - t0,
    }
    return Posterior(samples, info, model, x, y, sites)


register(
    Backend(
        "map",
        fit,
        DEFAULTS,
        validate,
        "maximum a posteriori point estimate (optax on the log joint)",
        exclusive=(("optimizer", "learning_rate"),),
        validate_data=check_batch_size,
        program=program,
    )
)
