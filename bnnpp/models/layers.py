"""Layer helpers that build NumPyro sample sites for Bayesian layers.

Site naming scheme (used by :func:`bnnpp.models.mlp`, :func:`bnnpp.models.cnn`,
:func:`bnnpp.models.lenet5` and by any network written with :func:`dense` / :func:`conv2d`):

=====================  ======================  ==================================================
site                   shape                   what it is
=====================  ======================  ==================================================
``<name>.w`` (dense)   ``(in, units)``         weight matrix; ArviZ dims ``<name>.in``, ``<name>.out``
``<name>.w`` (conv2d)  ``(kh, kw, in, out)``   kernel (HWIO); dims ``<name>.kh``, ``<name>.kw``,
                                               ``<name>.in``, ``<name>.out``
``<name>.b``           ``(out,)``              bias; ArviZ dim ``<name>.out``
``<name>.scale``       ``()``/``(out,)``       prior scale σ, when the hyperprior is on σ
``<name>.variance``    ``()``/``(out,)``       prior variance σ², for ``inverse_gamma``
=====================  ======================  ==================================================

``out`` is ``units`` for a dense layer and ``filters`` (output channels) for a convolution; a
``per="unit"`` scale has one entry per output unit / filter. With ``per="network"`` the single
scale site is ``network.scale`` / ``network.variance``. Dense and convolutional layers sample
their scale and weights through the same two calls (:meth:`Prior.sample_scale`,
:meth:`Prior.sample`), so every prior family and hyperprior works for both.

**The layer effect.** A layer does not sample its weights directly: it sends one NumPyro
message of type :data:`LAYER_EFFECT` carrying the layer's name, inputs, width, prior and
scale, whose default behaviour samples ``<name>.w`` and ``<name>.b`` and returns the
pre-activations (``x @ w + b``, or the convolution of ``x`` with ``w`` plus ``b``).
Every inference method that works with weight sites (NUTS, SGLD, MAP, ADVI) simply sees
those sites. A handler may instead answer the message itself, e.g. Bayes-by-Backprop's
local reparameterisation, which samples pre-activations without ever forming ``w``
(Kingma, Salimans & Welling 2015). Models stay free of inference code: the handler lives
in the backend.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from numpyro.primitives import _PYRO_STACK, apply_stack

from bnnpp.priors import Prior

__all__ = ["CONV_DIMENSION_NUMBERS", "LAYER_EFFECT", "conv2d", "conv_output_size", "dense", "max_pool"]

#: ``msg["type"]`` of the message a Bayesian layer sends (see the module docstring).
#: Fields: ``kind`` (``"dense"`` or ``"conv2d"``), ``layer`` (the name),
#: ``args`` = ``(name, x, units, prior, scale)`` (``units`` is the number of filters for a
#: convolution) and, for ``"conv2d"``, ``kwargs`` = ``{"kernel_size": (kh, kw),
#: "stride": (sh, sw), "padding": "VALID" | "SAME"}``. Optional: ``sites`` = ``(weight, bias)``
#: site names when they are not ``<name>.w`` / ``<name>.b``, and ``bias_prior`` =
#: ``(prior, scale)`` when the bias has another prior (both sent by :func:`bnnpp.models.from_flax`).
LAYER_EFFECT = "bnnpp_layer"

#: Layouts of :func:`conv2d`: images NHWC, kernels HWIO.
CONV_DIMENSION_NUMBERS = ("NHWC", "HWIO", "NHWC")

_PADDINGS = ("VALID", "SAME")


def _check_prior(prior) -> None:
    if not isinstance(prior, Prior):
        raise TypeError(f"prior must be a bnnpp.priors.Prior such as priors.normal(1.0), got {prior!r}")


def _layer_scale(name: str, prior: Prior, units: int, scale, helper: str):
    if scale is not None:
        return scale
    if prior.hierarchical and prior.per == "network":
        raise ValueError(
            "a per='network' hyperprior needs one shared scale: s = prior.sample_scale('network'), "
            f"then {helper}(..., scale=s) for every layer"
        )
    return prior.sample_scale(name, units)


def _send(kind: str, name: str, fn, args: tuple, kwargs: dict, extra: dict | None = None):
    if not _PYRO_STACK:  # called outside any handler: nothing can intercept
        return fn(*args, **kwargs)
    msg = {"type": LAYER_EFFECT, "kind": kind, "layer": name, "fn": fn, "args": args, "kwargs": kwargs, "value": None}
    msg.update(extra or {})  # optional fields: "sites" (weight, bias names), "bias_prior" (prior, scale)
    return apply_stack(msg)["value"]


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
    _check_prior(prior)
    scale = _layer_scale(name, prior, units, scale, "dense")
    return _send("dense", name, _dense_default, (name, x, units, prior, scale), {})


def _dense_default(name: str, x: jnp.ndarray, units: int, prior: Prior, scale) -> jnp.ndarray:
    """Sample ``<name>.w`` ``(in, units)`` and ``<name>.b`` ``(units,)``; return ``x @ w + b``."""
    n_in = x.shape[-1]
    w = prior.sample(f"{name}.w", (n_in, units), scale, dims=(f"{name}.in", f"{name}.out"))
    b = prior.sample(f"{name}.b", (units,), scale, dims=(f"{name}.out",))
    if x.ndim == 2:
        # The same numbers as x @ w + b, written transposed: a caller that holds its
        # activations features × rows (MLP does) passes x = hT.T, and XLA cancels the
        # transposes, so the matmul's output has the rows as its minor axis, which XLA CPU
        # vectorises for narrow layers (a few units over many rows). The bias goes inside the
        # transpose: added outside, XLA keeps the transposes.
        return (w.T @ x.T + b[:, None]).T
    return x @ w + b.reshape((1,) * (x.ndim - 1) + (units,))


def _pair(value, what: str) -> tuple[int, int]:
    """``k`` or ``(kh, kw)`` as a pair of positive ints, or a one-line error naming ``what``."""
    items = value if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2 or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in items):
        raise ValueError(f"{what} must be a positive int or a pair of them such as 5 or (5, 5), got {value!r}")
    return int(items[0]), int(items[1])


def conv_output_size(size: int, kernel: int, stride: int, padding: str) -> int:
    """Output length of one spatial axis: ``ceil(size / stride)`` for ``"SAME"``,
    ``ceil((size − kernel + 1) / stride)`` for ``"VALID"`` (≤ 0: the kernel does not fit)."""
    if padding == "SAME":
        return -(-size // stride)
    return -(-(size - kernel + 1) // stride)


def conv2d(
    name: str,
    x: jnp.ndarray,
    filters: int,
    kernel_size,
    prior: Prior,
    *,
    scale=None,
    stride=1,
    padding: str = "VALID",
) -> jnp.ndarray:
    """A Bayesian 2-D convolution ``conv(x, w) + b`` with ``w``, ``b`` drawn from ``prior``.

    Images are NHWC and kernels HWIO (``jax.lax.conv_general_dilated`` with
    :data:`CONV_DIMENSION_NUMBERS`); like :func:`dense` the layer sends a :data:`LAYER_EFFECT`
    message (``kind="conv2d"``) so that an inference backend may answer it with sampled
    pre-activations instead of a sampled kernel.

    Args:
        name: layer name, the prefix of its sites (``<name>.w`` ``(kh, kw, in, filters)``,
            ``<name>.b`` ``(filters,)``, ...).
        x: images ``(n, height, width, in)``.
        filters: number of output channels.
        kernel_size: ``k`` or ``(kh, kw)``.
        prior: a :class:`bnnpp.priors.Prior` (any family; ``per="unit"`` gives one scale per filter).
        scale: as for :func:`dense` (required with a ``per="network"`` hyperprior).
        stride: ``s`` or ``(sh, sw)``.
        padding: ``"VALID"`` (no padding) or ``"SAME"`` (output size ``ceil(size / stride)``).

    Returns:
        Pre-activations ``(n, height', width', filters)`` with the sizes of :func:`conv_output_size`.
    """
    _check_prior(prior)
    if jnp.ndim(x) != 4:
        raise ValueError(f"conv2d {name!r} takes images of shape (n, height, width, channels), got shape {jnp.shape(x)}")
    if isinstance(filters, bool) or not isinstance(filters, int) or filters < 1:
        raise ValueError(f"conv2d filters must be a positive int, got {filters!r}")
    kernel = _pair(kernel_size, "kernel_size")
    strides = _pair(stride, "stride")
    pad = padding.upper() if isinstance(padding, str) else padding
    if pad not in _PADDINGS:
        raise ValueError(f"padding must be 'VALID' or 'SAME', got {padding!r}")
    out_hw = [conv_output_size(s, k, st, pad) for s, k, st in zip(x.shape[1:3], kernel, strides, strict=True)]
    if min(out_hw) < 1:
        raise ValueError(
            f"conv2d {name!r}: a {kernel[0]}×{kernel[1]} kernel does not fit {x.shape[1]}×{x.shape[2]} images "
            "with padding='VALID'; use larger images, a smaller kernel or padding='SAME'"
        )
    scale = _layer_scale(name, prior, filters, scale, "conv2d")
    kwargs = {"kernel_size": kernel, "stride": strides, "padding": pad}
    return _send("conv2d", name, _conv2d_default, (name, x, filters, prior, scale), kwargs)


def _conv2d_default(name: str, x: jnp.ndarray, filters: int, prior: Prior, scale, *, kernel_size, stride, padding):
    """Sample ``<name>.w`` ``(kh, kw, in, filters)`` and ``<name>.b`` ``(filters,)``; return
    ``conv(x, w) + b`` ``(n, h', w', filters)``."""
    kh, kw = kernel_size
    n_in = x.shape[-1]
    w = prior.sample(f"{name}.w", (kh, kw, n_in, filters), scale, dims=(f"{name}.kh", f"{name}.kw", f"{name}.in", f"{name}.out"))
    b = prior.sample(f"{name}.b", (filters,), scale, dims=(f"{name}.out",))
    h = jax.lax.conv_general_dilated(x, w, stride, padding, dimension_numbers=CONV_DIMENSION_NUMBERS)
    return h + b


def max_pool(x: jnp.ndarray, window=2, stride=None) -> jnp.ndarray:
    """Max-pooling over non-overlapping ``window × window`` patches (deterministic, no sites).

    Args:
        x: images ``(n, height, width, channels)``.
        window: ``k`` or ``(kh, kw)``.
        stride: ``s`` or ``(sh, sw)``; default the window (non-overlapping patches).

    Returns:
        ``(n, height', width', channels)`` with ``height' = (height − kh) // sh + 1`` (a
        trailing partial patch is dropped, "VALID" pooling), likewise ``width'``.
    """
    if jnp.ndim(x) != 4:
        raise ValueError(f"max_pool takes images of shape (n, height, width, channels), got shape {jnp.shape(x)}")
    win = _pair(window, "max_pool window")
    strides = win if stride is None else _pair(stride, "max_pool stride")
    if win[0] > x.shape[1] or win[1] > x.shape[2]:
        raise ValueError(f"max_pool window {win} is larger than the {x.shape[1]}×{x.shape[2]} images")
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, *win, 1), (1, *strides, 1), "VALID")
