"""Bring your own network: a Flax NNX MLP (moons) or a Flax NNX LeNet-5 (MNIST) made Bayesian
with :func:`bnnpp.models.from_flax`, fitted with two methods and compared in ArviZ.

    python examples/flax_bayesian.py                                  # NNX MLP on moons, advi and bbb
    python examples/flax_bayesian.py --steps 200 --epochs 50          # a quick run
    python examples/flax_bayesian.py --data mnist --methods bbb,sgld --epochs 1 --batch-size 64 --train 5000

Prints each method's test accuracy and NLL and ArviZ's LOO comparison (``az.compare``) of
the fits; with ``--out DIR`` also saves each posterior (``DIR/<method>.nc``, loadable with
``bnnpp.load(path, model=build_model(...))``). MNIST: ``--data-dir`` or ``$BNNPP_DATA_DIR``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import warnings

import jax
import jax.numpy as jnp
from flax import nnx

import bnnpp
from bnnpp import metrics, priors


class FlaxMLP(nnx.Module):
    """A plain NNX MLP: ``nnx.Linear`` layers with ``tanh`` between them (``layers.<i>``)."""

    def __init__(self, sizes=(2, 5, 5, 2), *, rngs: nnx.Rngs):
        self.layers = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in itertools.pairwise(sizes)])

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = jnp.tanh(layer(x))
        return self.layers[-1](x)


class FlaxLeNet5(nnx.Module):
    """LeNet-5 in NNX, as :func:`bnnpp.models.lenet5`: conv 6 5×5 SAME → pool → conv 16 5×5 →
    pool → conv 120 5×5 → dense 84 → dense 10, ReLU; images ``(n, 28, 28, 1)``."""

    def __init__(self, num_classes: int = 10, *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(1, 6, (5, 5), padding="SAME", rngs=rngs)
        self.conv2 = nnx.Conv(6, 16, (5, 5), padding="VALID", rngs=rngs)
        self.conv3 = nnx.Conv(16, 120, (5, 5), padding="VALID", rngs=rngs)
        self.fc1 = nnx.Linear(120, 84, rngs=rngs)
        self.fc2 = nnx.Linear(84, num_classes, rngs=rngs)

    def __call__(self, x):
        pool = lambda h: nnx.max_pool(h, (2, 2), (2, 2))  # noqa: E731
        h = pool(jax.nn.relu(self.conv1(x)))
        h = pool(jax.nn.relu(self.conv2(h)))
        h = jax.nn.relu(self.conv3(h)).reshape(x.shape[0], -1)
        return self.fc2(jax.nn.relu(self.fc1(h)))


def build_model(data: str = "moons"):
    """The Bayesian network of this example: ``from_flax`` over the NNX module, hierarchical
    per-layer scales on kernels, a fixed N(0, 1) on biases."""
    module = FlaxMLP(rngs=nnx.Rngs(0)) if data == "moons" else FlaxLeNet5(rngs=nnx.Rngs(0))
    kernels = priors.normal(priors.half_normal(1.0)) if data == "moons" else priors.normal(1.0)
    return bnnpp.models.from_flax(module, num_classes=2 if data == "moons" else 10, priors={"*.kernel": kernels, "*.bias": priors.normal(1.0)})


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", choices=("moons", "mnist"), default="moons")
    p.add_argument("--methods", default="advi,bbb", help="two or more registered methods, comma-separated")
    p.add_argument("--steps", type=int, default=3000, help="steps of advi / map")
    p.add_argument("--epochs", type=int, default=500, help="epochs of bbb (and of map with --batch-size)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--train", type=int, default=None, help="use the first N training rows")
    p.add_argument("--draws", type=int, default=200, help="posterior draws kept")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=None, help="folder for <method>.nc")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    dataset = bnnpp.data.load(args.data, args.data_dir) if args.data == "mnist" else bnnpp.data.moons()
    x, y = dataset.x_train[: args.train], dataset.y_train[: args.train]
    model = build_model(args.data)
    per_method = {
        "advi": {"num_steps": args.steps},
        "map": {"num_steps": args.steps, "batch_size": args.batch_size},
        "bbb": {"epochs": args.epochs, "batch_size": args.batch_size, "estimator": "flipout", "init_scale": 1e-3},
        "nuts": {"num_warmup": args.draws},
        "sgld": {"batch_size": args.batch_size, "num_chains": 1, "burn_in": args.steps},
    }
    posteriors, rows = {}, {}
    for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
        options = {k: v for k, v in per_method.get(method, {}).items() if v is not None}
        if method not in ("map",):
            options.setdefault("num_samples", args.draws)
        post = bnnpp.fit(model, (x, y), method=method, seed=args.seed, progress=False, **options)
        pred = post.predict(dataset.x_test)
        rows[method] = {"accuracy": metrics.accuracy(pred.mean, dataset.y_test), "nll": metrics.nll(pred.mean, dataset.y_test)}
        print(f"{method:6s} test accuracy {rows[method]['accuracy']:.4f}  NLL {rows[method]['nll']:.4f}", flush=True)
        posteriors[method] = post
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            post.save(os.path.join(args.out, f"{method}.nc"))
    import arviz as az  # noqa: PLC0415  (about a second to import)

    with_draws = {m: p.to_arviz() for m, p in posteriors.items() if p.num_chains * p.num_draws > 1}
    if len(with_draws) >= 2:
        with warnings.catch_warnings():  # ArviZ warns on high Pareto k; the table shows it
            warnings.simplefilter("ignore")
            table = az.compare(with_draws)
        print(table[["rank", "elpd_loo", "se", "weight"]].to_string())
        rows["compare"] = table.index.tolist()
    return rows


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
