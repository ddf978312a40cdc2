"""Bayesian networks as NumPyro models ``model(x, y=None)``; they never import inference."""

from bnnpp.models.cnn import ARCHITECTURES, ConvNet, cnn, convnet_from_spec, lenet5
from bnnpp.models.flax import FlaxModel, from_flax
from bnnpp.models.layers import conv2d, dense, max_pool
from bnnpp.models.mlp import ACTIVATIONS, LIKELIHOODS, MLP, mlp, mlp_from_spec

__all__ = [
    "ACTIVATIONS",
    "ARCHITECTURES",
    "LIKELIHOODS",
    "MLP",
    "ConvNet",
    "FlaxModel",
    "cnn",
    "conv2d",
    "dense",
    "from_flax",
    "from_spec",
    "lenet5",
    "max_pool",
    "mlp",
]

_BUILDERS = {"mlp": mlp_from_spec, "cnn": convnet_from_spec, "lenet5": convnet_from_spec}


def from_spec(spec: dict):
    """Rebuild a model from the ``spec()`` dict a saved posterior carries."""
    kind = spec.get("type")
    if kind == "flax":
        raise ValueError(
            f"this posterior came from the Flax module {spec.get('module')}, which files never pickle: rebuild it and "
            "pass it, bnnpp.load(path, model=bnnpp.models.from_flax(YourModule(...), ...))"
        )
    if kind not in _BUILDERS:
        raise ValueError(f"unknown model type {kind!r} in saved spec; known: {', '.join(_BUILDERS)}")
    return _BUILDERS[kind](spec)
