"""The multilayer perceptron as a NumPyro model."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from bnnpp.models.layers import dense
from bnnpp.priors import Prior, normal, prior_from_spec

__all__ = ["ACTIVATIONS", "LIKELIHOODS", "MLP", "check_observation", "mlp", "observe"]

ACTIVATIONS: dict[str, Callable[[jnp.ndarray], jnp.ndarray]] = {
    "tanh": jnp.tanh,
    "relu": jax.nn.relu,
    "sigmoid": jax.nn.sigmoid,
    "elu": jax.nn.elu,
    "gelu": jax.nn.gelu,
    "softplus": jax.nn.softplus,
    "identity": lambda h: h,
}
LIKELIHOODS = ("categorical", "bernoulli", "gaussian")


class MLP:
    """A Bayesian MLP; call it as a NumPyro model ``model(x, y=None, *, subsample_size=None)``.

    Sites (see :mod:`bnnpp.models.layers` for the per-layer scheme): layers ``dense_0`` …
    ``dense_L`` (the last is the output layer); ``noise`` (Gaussian likelihood with learned σ,
    HalfNormal(``noise_scale``)); deterministic ``logits`` ``(n, C)`` (categorical), ``logits``
    ``(n,)`` (bernoulli) or ``mean`` ``(n,)`` (gaussian); observed ``y`` ``(n,)`` inside
    ``numpyro.plate("data", n, subsample_size=subsample_size)``.

    Use :func:`mlp` to build one; instances are immutable and describe themselves through
    :meth:`spec` so a saved posterior can rebuild its model.
    """

    input_rank = 2

    def __init__(
        self,
        hidden: tuple[int, ...],
        activation: str,
        likelihood: str,
        num_classes: int | None,
        noise: float | None,
        prior: Prior,
        noise_scale: float,
    ):
        self.hidden = hidden
        self.activation = activation
        self.likelihood = likelihood
        self.num_classes = num_classes
        self.noise = noise
        self.prior = prior
        self.noise_scale = noise_scale
        self._act = ACTIVATIONS[activation]

    @property
    def task(self) -> str:
        """``"classification"`` or ``"regression"``."""
        return "regression" if self.likelihood == "gaussian" else "classification"

    @property
    def num_outputs(self) -> int:
        """Width of the output layer."""
        return self.num_classes if self.likelihood == "categorical" else 1

    def __call__(self, x: jnp.ndarray, y: jnp.ndarray | None = None, *, subsample_size: int | None = None):
        n = x.shape[0]
        data = numpyro.plate("data", n, subsample_size=subsample_size)
        with data:
            h = numpyro.subsample(x, event_dim=1)
        shared = self.prior.sample_scale("network") if self.prior.per == "network" else None
        widths = (*self.hidden, self.num_outputs)
        for i, units in enumerate(widths):
            h = dense(f"dense_{i}", h, units, self.prior, scale=shared)
            if i < len(widths) - 1:
                h = self._act(h)
        observe(data, h, y, self.likelihood, self.noise, self.noise_scale)

    def spec(self) -> dict:
        """JSON-serialisable description; :func:`bnnpp.models.from_spec` rebuilds the model."""
        return {
            "type": "mlp",
            "hidden": list(self.hidden),
            "activation": self.activation,
            "likelihood": self.likelihood,
            "num_classes": self.num_classes,
            "noise": self.noise,
            "prior": self.prior.spec(),
            "noise_scale": self.noise_scale,
        }

    def __repr__(self) -> str:
        return (
            f"mlp(hidden={self.hidden}, activation={self.activation!r}, likelihood={self.likelihood!r}, "
            f"num_classes={self.num_classes}, noise={self.noise}, prior={self.prior})"
        )


def observe(data, h: jnp.ndarray, y, likelihood: str, noise: float | None, noise_scale: float) -> None:
    """The observation sites of a network with outputs ``h`` ``(n, C)`` (``(n, 1)`` for
    bernoulli and gaussian): ``noise`` ~ HalfNormal(``noise_scale``) when a Gaussian noise sd
    is learned (``noise=None``), deterministic ``logits`` / ``mean`` and the observed ``y``
    inside the ``data`` plate (subsampled with it)."""
    if likelihood == "gaussian":
        sigma = noise if noise is not None else numpyro.sample("noise", dist.HalfNormal(noise_scale))
    with data:
        yb = numpyro.subsample(y, event_dim=0) if y is not None else None
        if likelihood == "categorical":
            logits = numpyro.deterministic("logits", h)
            numpyro.sample("y", dist.Categorical(logits=logits), obs=yb)
        elif likelihood == "bernoulli":
            logits = numpyro.deterministic("logits", h[..., 0])
            numpyro.sample("y", dist.Bernoulli(logits=logits), obs=yb)
        else:
            mean = numpyro.deterministic("mean", h[..., 0])
            numpyro.sample("y", dist.Normal(mean, sigma), obs=yb)


def check_observation(likelihood: str, num_classes, noise, noise_scale, who: str = "mlp") -> tuple[int | None, float | None, float]:
    """Validate a network's observation settings (``likelihood``, ``num_classes``, ``noise``,
    ``noise_scale`` as :func:`mlp` documents them); ``who`` names the builder in messages.

    Returns:
        ``(num_classes, noise, noise_scale)``: ``num_classes`` an int (2 for bernoulli) or
        ``None`` for gaussian, ``noise`` a float or ``None``, ``noise_scale`` a float.
    """
    if likelihood not in LIKELIHOODS:
        raise ValueError(f"unknown likelihood {likelihood!r}; choose one of {', '.join(LIKELIHOODS)}")
    if likelihood == "categorical":
        if num_classes is None:
            raise ValueError(f"likelihood='categorical' needs num_classes, e.g. {who}(..., num_classes=2)")
        if int(num_classes) < 2:
            raise ValueError(f"num_classes must be ≥ 2, got {num_classes}")
        num_classes = int(num_classes)
    elif likelihood == "bernoulli":
        if num_classes not in (None, 2):
            raise ValueError("likelihood='bernoulli' is binary: leave num_classes unset (it is 2)")
        num_classes = 2
    elif num_classes is not None:
        raise ValueError("likelihood='gaussian' is regression: leave num_classes unset")
    if noise is not None:
        if likelihood != "gaussian":
            raise ValueError("noise= applies only to likelihood='gaussian'")
        noise = float(noise)
        if not noise > 0 or noise == float("inf"):
            raise ValueError(f"noise must be a positive number (or None to learn it), got {noise}")
    if not float(noise_scale) > 0:
        raise ValueError(f"noise_scale must be positive, got {noise_scale}")
    return num_classes, noise, float(noise_scale)


def mlp(
    hidden: Sequence[int] = (5, 5),
    *,
    activation: str = "tanh",
    likelihood: str = "categorical",
    num_classes: int | None = None,
    noise: float | None = None,
    prior: Prior | None = None,
    noise_scale: float = 1.0,
) -> MLP:
    """A fully connected Bayesian network as a NumPyro model ``model(x, y=None)``.

    Args:
        hidden: widths of the hidden layers, e.g. ``(5, 5)``; ``()`` gives a linear model.
        activation: one of ``tanh``, ``relu``, ``sigmoid``, ``elu``, ``gelu``, ``softplus``, ``identity``.
        likelihood: ``"categorical"`` (labels ``0..num_classes-1``), ``"bernoulli"`` (labels 0/1)
            or ``"gaussian"`` (real targets, shape ``(n,)``).
        num_classes: number of classes; required for ``"categorical"``.
        noise: Gaussian likelihood only: a float fixes the observation sd σ; ``None`` learns it
            (site ``noise`` ~ HalfNormal(``noise_scale``)) — the aleatoric part of the uncertainty.
        prior: weight prior for every layer (default ``priors.normal(1.0)``).
        noise_scale: scale of the HalfNormal prior on a learned noise sd.

    Returns:
        An :class:`MLP`, callable as ``model(x, y=None, *, subsample_size=None)`` with
        ``x`` of shape ``(n, features)``.
    """
    try:
        hidden_t = tuple(int(h) for h in hidden)
    except (TypeError, ValueError):
        raise TypeError(f"hidden must be a sequence of layer widths such as (5, 5), got {hidden!r}") from None
    if any(h < 1 for h in hidden_t):
        raise ValueError(f"hidden layer widths must be ≥ 1, got {hidden_t}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose one of {', '.join(ACTIVATIONS)}")
    num_classes, noise, noise_scale = check_observation(likelihood, num_classes, noise, noise_scale)
    if prior is None:
        prior = normal(1.0)
    if not isinstance(prior, Prior):
        raise TypeError(f"prior must be a bnnpp.priors.Prior such as priors.normal(1.0), got {prior!r}")
    return MLP(hidden_t, activation, likelihood, num_classes, noise, prior, noise_scale)


def mlp_from_spec(spec: dict) -> MLP:
    """Inverse of :meth:`MLP.spec`."""
    return mlp(
        tuple(spec["hidden"]),
        activation=spec["activation"],
        likelihood=spec["likelihood"],
        num_classes=spec["num_classes"] if spec["likelihood"] == "categorical" else None,
        noise=spec["noise"],
        prior=prior_from_spec(spec["prior"]),
        noise_scale=spec["noise_scale"],
    )
