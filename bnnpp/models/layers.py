"""Layer helpers that build NumPyro sample sites for Bayesian layers.

Site naming scheme (used by :func:`bnnpp.models.mlp` and by any network written with
:func:`dense`):

=====================  ==================  ==========================================
site                   shape               what it is
=====================  ==================  ==========================================
``<name>.w``           ``(in, units)``     weight matrix; ArviZ dims ``<name>.in``, ``<name>.out``
``<name>.b``           ``(units,)``        bias; ArviZ dim ``<name>.out``
``<name>.scale``       ``()``/``(units,)`` prior scale σ, when the hyperprior is on σ
``<name>.variance``    ``()``/``(units,)`` prior variance σ², for ``inverse_gamma``
=====================  ==================  ==========================================

With ``per="network"`` the single scale site is ``network.scale`` / ``network.variance``.

**The layer effect.** A layer does not sample its weights directly: it sends one NumPyro
message of type :data:`LAYER_EFFECT` carrying the layer's name, inputs, width, prior and
scale, whose default behaviour samples ``<name>.w`` and ``<name>.b`` and returns ``x @ w + b``.
Every inference method that works with weight sites (NUTS, SGLD, MAP, ADVI) simply sees
those sites. A handler may instead answer the message itself, e.g. Bayes-by-Backprop's
local reparameterisation, which samples pre-activations without ever forming ``w``
(Kingma, Salimans & Welling 2015). Models stay free of inference code: the handler lives
in the backend.
"""

from __future__ import annotations

import jax.numpy as jnp
from numpyro.primitives import _PYRO_STACK, apply_stack

from bnnpp.priors import Prior

__all__ = ["LAYER_EFFECT", "dense"]

#: ``msg["type"]`` of the message a Bayesian layer sends (see the module docstring).
#: Fields: ``kind`` (``"dense"``), ``layer`` (the name), ``args`` = ``(name, x, units, prior, scale)``.
LAYER_EFFECT = "bnnpp_layer"


def dense(name: str, x: jnp.ndarray, units: int, prior: Prior, *, scale=None) -> jnp.ndarray:
    """A Bayesian affine layer ``x @ w + b`` with ``w``, ``b`` drawn from ``prior``.

    Args:
        name: layer name, the prefix of its sites (``<name>.w``, ``<name>.b``, ...).
        x: inputs of shape ``(n, in)``.
        units: number of outputs.
        prior: a :class:`bnnpp.priors.Prior`.
        scale: the prior scale to use instead of sampling one for this layer. Required for a
            hierarchical prior with ``per="network"``: sample it once with
            ``prior.sample_scale("network")`` and pass it to every layer.

    Returns:
        Pre-activations of shape ``(n, units)``.
    """
    if not isinstance(prior, Prior):
        raise TypeError(f"prior must be a bnnpp.priors.Prior such as priors.normal(1.0), got {prior!r}")
    if scale is None:
        if prior.hierarchical and prior.per == "network":
            raise ValueError(
                "a per='network' hyperprior needs one shared scale: s = prior.sample_scale('network'), "
                "then dense(..., scale=s) for every layer"
            )
        scale = prior.sample_scale(name, units)
    args = (name, x, units, prior, scale)
    if not _PYRO_STACK:  # called outside any handler: nothing can intercept
        return _dense_default(*args)
    msg = {"type": LAYER_EFFECT, "kind": "dense", "layer": name, "fn": _dense_default, "args": args,
           "kwargs": {}, "value": None}
    return apply_stack(msg)["value"]


def _dense_default(name: str, x: jnp.ndarray, units: int, prior: Prior, scale) -> jnp.ndarray:
    """Sample ``<name>.w`` ``(in, units)`` and ``<name>.b`` ``(units,)``; return ``x @ w + b``."""
    n_in = x.shape[-1]
    w = prior.sample(f"{name}.w", (n_in, units), scale, dims=(f"{name}.in", f"{name}.out"))
    b = prior.sample(f"{name}.b", (units,), scale, dims=(f"{name}.out",))
    return x @ w + b.reshape((1,) * (x.ndim - 1) + (units,))
