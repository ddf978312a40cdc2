"""Models for the save/load round-trip tests, importable by the fresh process that loads the
files (it imports only ``bnnpp`` and this module)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from flax import nnx

import bnnpp


def numpyro_regression(x, n_hidden=3, *, y=None):
    """A NumPyro model as NumPyro users write it: targets by keyword, observed site ``obs``, a
    deterministic site, and latent sites named as bnnpp's internals and ArviZ's dims."""
    w = numpyro.sample("y", dist.Normal(0.0, 1.0).expand([x.shape[1], n_hidden]).to_event(2))
    v = numpyro.sample("chain", dist.Normal(0.0, 1.0).expand([n_hidden]).to_event(1))
    b = numpyro.sample("draw", dist.Normal(0.0, 1.0))
    scale = numpyro.sample("scale", dist.HalfNormal(1.0))
    mean = numpyro.deterministic("mean", jnp.tanh(x @ w) @ v + b)
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("obs", dist.Normal(mean, scale), obs=y)


class NormNet(nnx.Module):
    """Linear → LayerNorm → tanh → Linear: LayerNorm's ``norm.scale`` beside a per-module prior scale."""

    def __init__(self, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(2, 4, rngs=rngs)
        self.norm = nnx.LayerNorm(4, rngs=rngs)
        self.out = nnx.Linear(4, 2, rngs=rngs)

    def __call__(self, x):
        return self.out(jnp.tanh(self.norm(self.hidden(x))))


def flax_classifier():
    return bnnpp.models.from_flax(
        NormNet(nnx.Rngs(0)), num_classes=2, prior=bnnpp.priors.normal(bnnpp.priors.half_cauchy(1.0)),
    )


def mlp_classifier():
    return bnnpp.models.mlp((4,), num_classes=2)


MODELS = {"mlp": mlp_classifier, "numpyro": lambda: numpyro_regression, "flax": flax_classifier}
"""Model kind → a function building it (the same in both processes)."""


def data(kind: str, n: int = 24):
    """Tiny training data ``(x, y)`` for ``kind`` and test inputs ``(8, 2)``, from a fixed seed."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 2)).astype(np.float32)
    y = (x[:, 0] - 0.5 * x[:, 1]).astype(np.float32) if kind == "numpyro" else (x[:, 0] * x[:, 1] > 0).astype(np.int32)
    return x, y, rng.normal(size=(8, 2)).astype(np.float32)


def arrays(post, x_test) -> dict[str, np.ndarray]:
    """Every array a loaded posterior must reproduce: its prediction at ``x_test`` and each
    variable of each ``to_arviz`` group, keyed ``prediction/<field>`` and ``<group>/<var>``."""
    pred = post.predict(x_test)
    out = {f"prediction/{k}": np.asarray(v) for k in ("probs", "draws", "noise", "df") if (v := getattr(pred, k)) is not None}
    out.update({f"prediction/deterministic/{k}": np.asarray(v) for k, v in pred.deterministic.items()})
    for group, ds in bnnpp.posterior.arviz_compat.groups(post.to_arviz()).items():  # InferenceData or DataTree
        for name, var in ds.data_vars.items():
            out[f"{group}/{name}"] = np.asarray(var.values)
    return out
