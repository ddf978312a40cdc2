"""The pieces of :mod:`bnnpp.models.flax` under :class:`~bnnpp.models.flax.FlaxModel`: parameter and
layer records, the forward pass that answers recognised layers (``_Forward``; the one in progress
in ``_ACTIVE``), the NNX layer swaps and small path helpers. Private to bnnpp."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from bnnpp.priors import Prior

if TYPE_CHECKING:
    from bnnpp.models.flax import FlaxModel


@dataclass(frozen=True)
class _Param:
    """One parameter: its site name, path, shape, prior and hyperprior scope (``None``: fixed scale)."""

    site: str
    path: tuple
    shape: tuple[int, ...]
    prior: Prior
    scope: str | None
    dims: tuple[str, ...]


@dataclass(frozen=True)
class _Layer:
    """A recognised Linear/Conv layer: its name, kind (``dense`` / ``conv2d``) and conv settings."""

    name: str
    kind: str
    kernel: str
    bias: str
    units: int
    conv: dict


_ACTIVE = threading.local()  # the forward pass in progress (see _Forward)


def _name(path) -> str:
    return ".".join(str(p) for p in path)


def _pair(v) -> tuple[int, int] | None:
    if v is None:
        return (1, 1)
    if isinstance(v, int):
        return (v, v)
    v = tuple(v)
    return (int(v[0]), int(v[1])) if len(v) == 2 and all(isinstance(a, int) for a in v) else None


def _conv_settings(mod, kernel_ndim: int) -> dict | None:
    """``{"kernel_size", "stride", "padding"}`` of a 2-D convolution bnnpp can answer, else ``None``."""
    if kernel_ndim != 4 or not getattr(mod, "use_bias", False) or getattr(mod, "mask", None) is not None:
        return None
    if not _standard_ops(mod):
        return None
    if getattr(mod, "feature_group_count", 1) != 1:
        return None
    if any(_pair(getattr(mod, a, 1)) != (1, 1) for a in ("input_dilation", "kernel_dilation")):
        return None
    stride = _pair(mod.strides)
    padding = mod.padding.upper() if isinstance(mod.padding, str) else None
    if stride is None or padding not in ("SAME", "VALID"):
        return None
    return {"kernel_size": tuple(int(k) for k in mod.kernel_size), "stride": stride, "padding": padding}


def _standard_ops(mod) -> bool:
    """No custom ``dot_general`` / ``conv_general_dilated`` (or their ``*_cls``) and default precision."""
    custom = [getattr(mod, a, None) for a in ("dot_general", "conv_general_dilated")]
    return (
        all(f in (None, jax.lax.dot_general, jax.lax.conv_general_dilated) for f in custom)
        and getattr(mod, "dot_general_cls", None) is None
        and getattr(mod, "conv_general_dilated_cls", None) is None
        and getattr(mod, "precision", None) is None
    )


def _free_scope(scope: str, prior: Prior, sites: set[str]) -> str:
    """``scope``, or ``<scope>.prior`` (repeated as needed) when the hyperprior site
    ``<scope>.scale`` / ``<scope>.variance`` would be a parameter's name (a LayerNorm's or
    GroupNorm's ``norm.scale`` against the module's prior scale)."""
    while f"{scope}.{prior.scale.param}" in sites:
        scope = f"{scope}.prior"
    return scope


def _dense_ok(mod) -> bool:
    return bool(getattr(mod, "use_bias", False)) and _standard_ops(mod)


class _Forward:
    """What one forward pass does at recognised layers: record them (planning) or answer
    them with bnnpp's layer message (``model``)."""

    def __init__(self, model: FlaxModel, params: dict, plan=None):
        self.model, self.params, self.plan = model, params, plan
        self.calls: dict[str, int] = {}
        self.kinds: dict[str, tuple] = {}
        self.scales: dict = {}

    def scale(self, q: _Param):
        """The prior scale of parameter ``q``: fixed, or its scope's hyperprior site, sampled at
        first use (so a layer's scale comes just before its weights, as in ``mlp``)."""
        if q.scope is None:
            return q.prior.scale
        if q.scope not in self.scales:
            self.scales[q.scope] = q.prior.sample_scale(q.scope, q.shape[-1] if q.prior.per == "unit" else None)
        return self.scales[q.scope]

    def layer(self, name: str, kind: str, conv: dict | None, x, original: Callable):
        """Called by a recognised layer with its inputs; returns its outputs."""
        if self.plan is None:  # planning: count calls and input ranks, compute as Flax does
            self.calls[name] = self.calls.get(name, 0) + 1
            self.kinds[name] = (kind, conv, jnp.ndim(x))
            return original()
        layer = self.plan.layers.get(name)
        if layer is None:
            return original()
        return self.model._layer_message(layer, x, self.params)


@dataclass(frozen=True)
class _Plan:
    params: dict
    layers: dict


_NAMES: dict[int, str] = {}  # id of a swapped NNX layer → its module path, during a forward pass
_NNX_SWAPS: dict[type, type] = {}

_BATCHNORM = (
    "from_flax: BatchNorm keeps running statistics, which a posterior over weights does not carry; "
    "use LayerNorm or GroupNorm (their scale and bias become latent sites)"
)


def _linen_dropout_off(next_fun, args, kwargs, context):
    """A Linen method interceptor: a ``Dropout`` call returns its input (module docstring)."""
    mod = type(context.module)
    if context.method_name == "__call__" and mod.__name__ == "Dropout" and mod.__module__.startswith("flax.linen") and args:
        return args[0]
    return next_fun(*args, **kwargs)


def _nest(flat: dict) -> dict:
    out: dict = {}
    for path, v in flat.items():
        d = out
        for k in path[:-1]:
            d = d.setdefault(k, {})
        d[path[-1]] = v
    return out


def _dims(owner: str, site: str, shape: tuple[int, ...]) -> tuple[str, ...]:
    """ArviZ dims from the module path: ``<owner>.out`` on a vector, ``<owner>.in/.out`` on a
    matrix, ``<owner>.kh/.kw/.in/.out`` on a conv kernel, ``<site>_dim_<i>`` otherwise."""
    prefix = f"{owner}." if owner else ""
    names = {1: ("out",), 2: ("in", "out"), 4: ("kh", "kw", "in", "out")}.get(len(shape))
    if names is None:
        return tuple(f"{site}_dim_{i}" for i in range(len(shape)))
    return tuple(prefix + n for n in names)


def _nnx_swaps() -> None:
    """Subclasses of ``nnx.Linear`` / ``nnx.Conv`` whose call goes through the active forward
    pass; a merged copy of the module gets them (the user's module is never changed)."""
    if _NNX_SWAPS:
        return
    from flax import nnx

    class BayesLinear(nnx.Linear):
        def __call__(self, inputs):
            fwd, name = getattr(_ACTIVE, "fwd", None), _NAMES.get(id(self))
            if fwd is None or name is None or not _dense_ok(self):
                return nnx.Linear.__call__(self, inputs)
            return fwd.layer(name, "dense", None, inputs, lambda: nnx.Linear.__call__(self, inputs))

    class BayesConv(nnx.Conv):
        def __call__(self, inputs):
            fwd, name = getattr(_ACTIVE, "fwd", None), _NAMES.get(id(self))
            conv = _conv_settings(self, len(self.kernel_size) + 2)
            if fwd is None or name is None or conv is None:
                return nnx.Conv.__call__(self, inputs)
            return fwd.layer(name, "conv2d", conv, inputs, lambda: nnx.Conv.__call__(self, inputs))

    _NNX_SWAPS.update({nnx.Linear: BayesLinear, nnx.Conv: BayesConv})
