"""apply_optimizer: optax's update, computed once behind a conditional; and bbb's step with one
particle, which skips the size-1 particle axis but keeps its key."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bnnpp import models, priors
from bnnpp.inference.optimizer_step import apply_optimizer
from bnnpp.inference.registry import get_method
from bnnpp.inference.variational_layers import find_layers, negative_elbo_terms
from bnnpp.introspection import latent_sites


def _tree(seed: int):
    rng = np.random.default_rng(seed)
    return {"w": jnp.asarray(rng.normal(size=(6, 4)), jnp.float32), "b": jnp.asarray(rng.normal(size=(4,)), jnp.float32),
            "empty": jnp.zeros((0,), jnp.float32)}


@pytest.mark.parametrize("make", [lambda: optax.adam(1e-2), lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.1, 0.9))],
                         ids=["adam", "clipped-momentum"])
def test_apply_optimizer_equals_update_then_apply(make):
    """Three steps, jit-compiled, equal opt.update + optax.apply_updates bit for bit — also with
    a negative first element (the conditional's other branch) and under vmap over parameters
    (batched predicate: the conditional becomes a select)."""
    opt = make()

    def plain(p, s, g):
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s

    def once(p, s, g):
        return apply_optimizer(opt, g, s, p)

    for sign in (1.0, -1.0):
        p = jax.tree_util.tree_map(lambda a, sign=sign: sign * jnp.abs(a), _tree(0))
        pa, sa = p, opt.init(p)
        pb, sb = p, opt.init(p)
        for t in range(3):
            g = _tree(10 + t)
            pa, sa = jax.jit(plain)(pa, sa, g)
            pb, sb = jax.jit(once)(pb, sb, g)
        for a, b in zip(jax.tree_util.tree_leaves((pa, sa)), jax.tree_util.tree_leaves((pb, sb)), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ps = jax.tree_util.tree_map(lambda a: jnp.stack([a, -a, 2 * a]), _tree(1))
    gs = jax.tree_util.tree_map(lambda a: jnp.stack([a, a, -a]), _tree(2))
    ss = jax.vmap(opt.init)(ps)
    got = jax.jit(jax.vmap(once))(ps, ss, gs)
    want = jax.jit(jax.vmap(plain))(ps, ss, gs)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_apply_optimizer_materialises_the_gradients_in_a_conditional():
    """The compiled update keeps its conditional (so XLA cannot copy the gradient's producer into
    each of Adam's fusions); under vmap with batched parameters it has none."""
    opt = optax.adam(1e-3)
    p = _tree(0)
    s = opt.init(p)

    def step(p, s, x):
        g = jax.grad(lambda q: jnp.sum(jnp.tanh(x @ q["w"] + q["b"]) ** 2) + jnp.sum(jnp.log1p(q["w"] ** 2)))(p)
        return apply_optimizer(opt, g, s, p)

    x = jnp.ones((3, 6))
    assert "conditional(" in jax.jit(step).lower(p, s, x).compile().as_text()
    ps = jax.tree_util.tree_map(lambda a: jnp.stack([a, -a]), p)
    batched = jax.jit(jax.vmap(step, in_axes=(0, 0, None))).lower(ps, jax.vmap(opt.init)(ps), x).compile().as_text()
    assert "conditional(" not in batched


def test_bbb_one_particle_step_uses_the_vmapped_key():
    """With num_particles=1 the step skips the particle vmap but draws with the key the vmap
    gave (split(key, 1)[0]): its nll and kl equal negative_elbo_terms at that key."""
    net = models.mlp((5,), activation="tanh", num_classes=3, prior=priors.scale_mixture(0.5, 1.0, math.exp(-6)))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 4)).astype(np.float32)
    y = rng.integers(0, 3, 40).astype(np.int32)
    method = get_method("bbb")
    opts = method.parse({"batch_size": 8, "estimator": "reparam", "num_particles": 1})
    algo = method.build(net, x, y, opts)
    state = algo.init(jax.random.PRNGKey(0), (x[:8], y[:8]))
    key = jax.random.PRNGKey(7)
    _, info = jax.jit(algo.step)(key, state, (x[:8], y[:8]))
    sites = latent_sites(net, x, y)
    generic = tuple(s for s in sites if not any(s in lay["sites"] for lay in find_layers(net, x, y).values()))
    nll, kl = negative_elbo_terms(net, state.params, jax.random.split(key, 1)[0], x[:8], y[:8], generic=generic,
                                  estimator="reparam", kl="analytic", lik_scale=40 / 8)
    np.testing.assert_allclose(float(info.nll), float(nll), rtol=1e-5)
    np.testing.assert_allclose(float(info.kl), float(kl), rtol=1e-5)
