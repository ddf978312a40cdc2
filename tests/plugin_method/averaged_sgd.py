"""MAP by plain SGD with iterate averaging (Polyak & Juditsky 1992, "Acceleration of stochastic
approximation by averaging"): a method added by this one file and one import line
(tests/test_plugin_method.py); the runner gives it minibatches, checkpoints and progress."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

from bnnpp.inference import Algorithm, Hooks, Method, Options, RunSpec, option, register
from bnnpp.inference.joint import constrained_values, init_uniform, joint_terms
from bnnpp.inference.model_info import ModelInfo
from bnnpp.inference.options import fraction, optional, positive_float, positive_int


@dataclass(frozen=True)
class AveragedSGDOptions(Options):
    num_steps: int = option(1000, "SGD steps", check=positive_int)
    learning_rate: float = option(0.05, "SGD step size on the per-row -log joint", check=positive_float)
    average_from: float = option(0.5, "fraction of the steps after which iterates are averaged",
                                 check=fraction(low_open=False, high_open=True))
    batch_size: int | None = option(None, "minibatch rows per step (None: full batch)", check=optional(positive_int), type=int)


class AveragedSGDState(NamedTuple):
    position: dict  # site -> unconstrained value, the SGD iterate
    average: dict  # site -> mean of the iterates since step `average_from * num_steps`
    count: jax.Array  # iterates in the average, int32 ()
    t: jax.Array  # steps done, int32 ()


class AveragedSGDInfo(NamedTuple):
    loss: jax.Array  # -log joint per row on the step's batch, before the step


def build(model, x, y, options: AveragedSGDOptions) -> Algorithm:
    sites = ModelInfo.of(model, x, y).sites
    n, batch = x.shape[0], options.batch_size or x.shape[0]
    first = int(options.num_steps * options.average_from)
    key_model = jnp.zeros(2, jnp.uint32)  # the models draw nothing random at a fixed position

    def init(key, data):
        u = init_uniform({k: s.shape for k, s in sites.items()}, key, 0.1)
        return AveragedSGDState(u, u, jnp.int32(0), jnp.int32(0))

    def loss(u, xb, yb):
        log_prior, log_lik, _ = joint_terms(model, u, xb, yb, key_model)
        return -(log_prior + (n / batch) * log_lik) / n

    def step(key, state, data):
        value, grads = jax.value_and_grad(loss)(state.position, *data)
        position = jax.tree_util.tree_map(lambda p, g: p - options.learning_rate * g, state.position, grads)
        on = state.t >= first
        count = state.count + on.astype(jnp.int32)
        average = jax.tree_util.tree_map(lambda a, p: jnp.where(on, a + (p - a) / jnp.maximum(count, 1), a), state.average, position)
        return AveragedSGDState(position, average, count, state.t + 1), AveragedSGDInfo(value)

    def sample(key, state, num_samples):
        values = constrained_values(model, state.average, x[:1], y[:1], key_model, sites)
        return jax.tree_util.tree_map(lambda v: jnp.broadcast_to(v, (num_samples, *jnp.shape(v))), values)

    run = RunSpec(num_steps=options.num_steps, batch_size=options.batch_size, name="averaged sgd")
    return Algorithm(init, step, sample, run, Hooks(point=lambda state: state.average))


register(Method("averaged_sgd", AveragedSGDOptions, build=build, summary="MAP by SGD with iterate averaging (Polyak & Juditsky 1992)",
                smoke={"num_steps": 60}))
