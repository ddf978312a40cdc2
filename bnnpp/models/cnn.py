"""Convolutional classifiers as NumPyro models: Zharikov, Isachenko & Bochkarev's ``cnn`` and ``lenet5``."""

from __future__ import annotations

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from bnnpp.models.layers import conv2d, dense, max_pool
from bnnpp.models.mlp import ACTIVATIONS
from bnnpp.priors import Prior, normal, prior_from_spec

__all__ = ["ARCHITECTURES", "ConvNet", "cnn", "convnet_from_spec", "lenet5"]

#: Layer plans: ``("conv", filters, kernel, padding)``, ``("pool", window)``, ``("dense", units)``;
#: every conv and dense layer but the output is followed by the activation, and the output
#: layer ``dense`` with ``num_classes`` units is appended.
ARCHITECTURES: dict[str, tuple[tuple, ...]] = {
    # Zharikov, Isachenko & Bochkarev: 28² → conv 24² → pool 12² → conv 8² → pool 4²·32 = 512 → 64 → C
    "cnn": (("conv", 32, 5, "VALID"), ("pool", 2), ("conv", 32, 5, "VALID"), ("pool", 2), ("dense", 64)),
    # LeCun et al. (1998): 28² → conv SAME 28²·6 → pool 14² → conv 10²·16 → pool 5² → conv 1²·120 → 84 → C
    "lenet5": (
        ("conv", 6, 5, "SAME"),
        ("pool", 2),
        ("conv", 16, 5, "VALID"),
        ("pool", 2),
        ("conv", 120, 5, "VALID"),
        ("dense", 84),
    ),
}
_DEFAULT_ACTIVATION = {"cnn": "tanh", "lenet5": "relu"}


class ConvNet:
    """A Bayesian convolutional classifier; call it as ``model(x, y=None, *, subsample_size=None)``
    with images ``x`` ``(n, height, width, channels)`` (NHWC, e.g. ``(n, 28, 28, 1)`` for MNIST).

    Sites (see :mod:`bnnpp.models.layers`): convolutions ``conv_0`` … with ``<layer>.w``
    ``(kh, kw, in, out)`` and ``<layer>.b`` ``(out,)``; dense layers ``dense_0`` … (the last is
    the output layer) with ``(in, out)`` / ``(out,)``; under a hyperprior ``<layer>.scale`` or
    ``<layer>.variance`` (``network.*`` with ``per="network"``); deterministic ``logits``
    ``(n, C)``; observed ``y`` ``(n,)`` inside ``numpyro.plate("data", n, subsample_size=...)``.

    Build one with :func:`cnn` or :func:`lenet5`; :meth:`spec` and
    :func:`bnnpp.models.from_spec` round-trip it.
    """

    input_rank = 4
    likelihood = "categorical"
    task = "classification"

    def __init__(self, architecture: str, activation: str, num_classes: int, prior: Prior):
        self.architecture = architecture
        self.activation = activation
        self.num_classes = num_classes
        self.prior = prior
        self._act = ACTIVATIONS[activation]

    @property
    def num_outputs(self) -> int:
        """Width of the output layer (``num_classes``)."""
        return self.num_classes

    @property
    def layers(self) -> tuple[tuple, ...]:
        """The layer plan (see :data:`ARCHITECTURES`), output layer included."""
        return (*ARCHITECTURES[self.architecture], ("dense", self.num_classes))

    def __call__(self, x: jnp.ndarray, y: jnp.ndarray | None = None, *, subsample_size: int | None = None):
        if jnp.ndim(x) != 4:
            raise ValueError(
                f"{self.architecture} takes images of shape (n, height, width, channels) such as (n, 28, 28, 1), "
                f"got shape {jnp.shape(x)}; add the channel axis with x[..., None]"
            )
        n = x.shape[0]
        data = numpyro.plate("data", n, subsample_size=subsample_size)
        with data:
            h = numpyro.subsample(x, event_dim=3)
        shared = self.prior.sample_scale("network") if self.prior.per == "network" else None
        plan = self.layers
        n_conv = n_dense = 0
        for i, layer in enumerate(plan):
            last = i == len(plan) - 1
            if layer[0] == "conv":
                _, filters, kernel, padding = layer
                h = self._act(conv2d(f"conv_{n_conv}", h, filters, kernel, self.prior, scale=shared, padding=padding))
                n_conv += 1
            elif layer[0] == "pool":
                h = max_pool(h, layer[1])
            else:
                if h.ndim > 2:
                    h = h.reshape(h.shape[0], -1)
                h = dense(f"dense_{n_dense}", h, layer[1], self.prior, scale=shared)
                n_dense += 1
                if not last:
                    h = self._act(h)
        with data:
            yb = numpyro.subsample(y, event_dim=0) if y is not None else None
            logits = numpyro.deterministic("logits", h)
            numpyro.sample("y", dist.Categorical(logits=logits), obs=yb)

    def spec(self) -> dict:
        """JSON-serialisable description; :func:`bnnpp.models.from_spec` rebuilds the model."""
        return {
            "type": self.architecture,
            "activation": self.activation,
            "num_classes": self.num_classes,
            "prior": self.prior.spec(),
        }

    def __repr__(self) -> str:
        return f"{self.architecture}(activation={self.activation!r}, num_classes={self.num_classes}, prior={self.prior})"


def _build(architecture: str, prior, num_classes, activation) -> ConvNet:
    if activation is None:
        activation = _DEFAULT_ACTIVATION[architecture]
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose one of {', '.join(ACTIVATIONS)}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes must be an int ≥ 2, got {num_classes!r}")
    if prior is None:
        prior = normal(1.0)
    if not isinstance(prior, Prior):
        raise TypeError(f"prior must be a bnnpp.priors.Prior such as priors.normal(1.0), got {prior!r}")
    return ConvNet(architecture, activation, int(num_classes), prior)


def cnn(prior: Prior | None = None, num_classes: int = 10, *, activation: str | None = None) -> ConvNet:
    """The MNIST network of Zharikov, Isachenko & Bochkarev: conv 32 5×5 → max-pool 2 →
    conv 32 5×5 → max-pool 2 → dense 64 → dense ``num_classes``, ``tanh`` after every hidden
    layer, "VALID" convolutions (28×28 inputs reach the dense layer as 4·4·32 = 512 features).

    Args:
        prior: weight prior for every layer (default ``priors.normal(1.0)``); hyperpriors with
            ``per="layer" | "network" | "unit"`` work as for :func:`bnnpp.models.mlp`.
        num_classes: number of classes C.
        activation: hidden activation (default ``"tanh"``), a name from ``bnnpp.models.ACTIVATIONS``.

    Returns:
        A :class:`ConvNet` on images ``(n, height, width, channels)``, height and width ≥ 16;
        categorical likelihood with deterministic ``logits`` ``(n, C)``.
    """
    return _build("cnn", prior, num_classes, activation)


def lenet5(prior: Prior | None = None, num_classes: int = 10, *, activation: str | None = None) -> ConvNet:
    """LeNet-5 (LeCun et al. 1998) as in McAteer's Bayesian version: conv 6 5×5 ("SAME")
    → max-pool 2 → conv 16 5×5 → max-pool 2 → conv 120 5×5 → dense 84 → dense ``num_classes``,
    ``relu`` after every hidden layer (28×28 inputs: 28 → 14 → 10 → 5 → 1, so 120 features
    reach the dense layers; about 61,700 weights).

    Args:
        prior: weight prior for every layer (default ``priors.normal(1.0)``), hyperpriors as for
            :func:`bnnpp.models.mlp`.
        num_classes: number of classes C.
        activation: hidden activation (default ``"relu"``).

    Returns:
        A :class:`ConvNet` on images ``(n, height, width, channels)``, height and width ≥ 28 for
        the last convolution to fit; categorical likelihood with deterministic ``logits`` ``(n, C)``.
    """
    return _build("lenet5", prior, num_classes, activation)


def convnet_from_spec(spec: dict) -> ConvNet:
    """Inverse of :meth:`ConvNet.spec`."""
    return _build(spec["type"], prior_from_spec(spec["prior"]), spec["num_classes"], spec["activation"])
