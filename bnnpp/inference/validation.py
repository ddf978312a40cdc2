"""Held-out validation of a point estimate (variational means, the MAP) during training, on
the device: what the runner evaluates after every chunk when a method's options carry
``validation_data``."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from bnnpp.inference.joint import latent_trace
from bnnpp.introspection import observed_site, unwrap

__all__ = ["VALIDATION_BATCH", "validation_batches", "validation_error"]

VALIDATION_BATCH = 1000
"""Validation rows scored per batch (bounded memory on large validation sets)."""


def validation_batches(xv: np.ndarray, yv: np.ndarray):
    """Validation rows padded to whole batches: ``(k, B, ...)`` inputs, ``(k, B)`` targets
    and a ``(k, B)`` mask that is 0 on the padding, on the device."""
    nv = xv.shape[0]
    b = min(nv, VALIDATION_BATCH)
    k = -(-nv // b)
    pad = k * b - nv
    xp = np.concatenate([xv, np.zeros((pad, *xv.shape[1:]), xv.dtype)]).reshape(k, b, *xv.shape[1:])
    yp = np.concatenate([yv, np.zeros(pad, yv.dtype)]).reshape(k, b)
    mask = (np.arange(k * b) < nv).astype(np.float32).reshape(k, b)
    return jax.device_put(xp), jax.device_put(yp), jax.device_put(mask)


def validation_error(model, n_val: int) -> Callable:
    """``f(position, xb, yb, mask) -> scalar``: the model's error on padded validation batches
    with every latent site at ``position`` (unconstrained; bnnpp layers run without noise):
    the error rate of the most probable class for Categorical/Bernoulli observations, the
    RMSE of the mean for Normal ones."""
    regression = []  # set while tracing: the observation's family decides the error measure

    def batch_error(position, xb, yb):
        trace = latent_trace(model, position, xb, None, jax.random.PRNGKey(0))
        fn = unwrap(observed_site(trace)["fn"])
        if isinstance(fn, dist.CategoricalProbs | dist.CategoricalLogits):
            return (jnp.argmax(fn.probs, axis=-1) != yb).astype(jnp.float32)
        if isinstance(fn, dist.BernoulliProbs | dist.BernoulliLogits):
            return ((fn.probs > 0.5).astype(yb.dtype) != yb).astype(jnp.float32)
        if isinstance(fn, dist.Normal):
            regression.append(True)
            return (jnp.broadcast_to(fn.loc, yb.shape) - yb) ** 2
        raise TypeError(f"validation_data supports Categorical, Bernoulli and Normal observations, got {type(fn).__name__}")

    def error(position, xb, yb, mask):
        per_row = jax.lax.map(lambda a: batch_error(position, a[0], a[1]), (xb, yb))
        total = jnp.sum(per_row * mask) / n_val
        return jnp.sqrt(total) if regression else total

    return error
