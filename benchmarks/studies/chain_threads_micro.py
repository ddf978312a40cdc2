"""Why NUTS's chains run in threads on a CPU (bnnpp.inference.chain_threads): microseconds per
gradient step of the moons net's potential (2-5-5-2 tanh, hierarchical prior, 700 rows), 2,000
steps in a lax.scan, best of 3 — 4 chains vmapped in one program, 2 chains in one program, 2 + 2
chains as two loops in one program, and 2 + 2 chains as two programs each called from its own
Python thread.

    python benchmarks/studies/chain_threads_micro.py     # prints a markdown table
"""

import os
import threading
import time

import jax
import jax.numpy as jnp
from numpyro.infer.util import potential_energy

import bnnpp
from bnnpp import priors
from bnnpp.inference.joint import init_uniform
from bnnpp.introspection import latent_sites

data = bnnpp.data.load_synthetic("moons", seed=0)
model = bnnpp.models.mlp((5, 5), activation="tanh", num_classes=2, prior=priors.normal(priors.inverse_gamma(1.0, 1.0)))
x, y = jnp.asarray(data.x_train), jnp.asarray(data.y_train)
shapes = {n: s.shape for n, s in latent_sites(model, x, y).items()}
grad = jax.vmap(jax.value_and_grad(lambda z: potential_energy(model, (x, y), {}, z)))
N = 2000


def chains(c, seed=0):
    return jax.vmap(lambda k: init_uniform(shapes, k, 2.0))(jax.random.split(jax.random.PRNGKey(seed), c))


def loop(z):
    def body(c, _):
        v, g = grad(c)
        return jax.tree_util.tree_map(lambda a, b: a - 1e-6 * b, c, g), v

    return jax.lax.scan(body, z, None, length=N)[1]


one = jax.jit(loop)


@jax.jit
def halves(za, zb):
    return loop(za), loop(zb)


def threads(za, zb):
    out = [None, None]

    def go(i, z):
        out[i] = jax.block_until_ready(one(z))

    ts = [threading.Thread(target=go, args=(i, z)) for i, z in enumerate((za, zb))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def best(f, *a):
    jax.block_until_ready(f(*a))
    times = []
    for _ in range(3):
        s = time.perf_counter()
        jax.block_until_ready(f(*a))
        times.append(time.perf_counter() - s)
    return min(times) / N * 1e6


z4, za, zb = chains(4), chains(2, 1), chains(2, 2)
print(f"cores: {len(os.sched_getaffinity(0))}, load average before: {os.getloadavg()[0]:.2f}, jax {jax.__version__}\n")
print("| how | µs per gradient step (all chains) |\n|---|---|")
print(f"| 4 chains, one vmapped program | {best(one, z4):.1f} |")
print(f"| 2 chains, one vmapped program | {best(one, za):.1f} |")
print(f"| 2 + 2 chains, two loops in one program | {best(halves, za, zb):.1f} |")
print(f"| 2 + 2 chains, two programs in two threads | {best(threads, za, zb):.1f} |")
