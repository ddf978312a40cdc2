"""Scale hyperpriors: :class:`Hyperprior` (``half_normal``, ``half_cauchy``,
``inverse_gamma``) and the argument checks the weight priors share."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import jax.numpy as jnp
import numpyro.distributions as dist

Per = Literal["layer", "network", "unit"]
_PERS = ("layer", "network", "unit")
_KINDS = ("normal", "laplace", "cauchy", "student_t", "flat", "scale_mixture")


def _positive(name: str, value: Any) -> float:
    """Return ``value`` as a float, or raise a one-line ValueError if it is not > 0."""
    if isinstance(value, (str, bytes, bool)):
        raise TypeError(f"{name} must be a positive number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"{name} must be a positive finite number, got {value!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}; pass e.g. {name}=1.0")
    return v


@dataclass(frozen=True)
class Hyperprior:
    """A prior on a layer's weight scale.

    ``param`` says which quantity the distribution is on: ``"scale"`` (the standard
    deviation-like scale σ of the weight prior) or ``"variance"`` (σ²). The sampled site
    is named ``<scope>.<param>`` (e.g. ``dense_0.variance``); :meth:`to_scale` maps a
    sampled value to σ.
    """

    kind: str
    params: tuple[float, ...]
    param: Literal["scale", "variance"]

    def distribution(self) -> dist.Distribution:
        """The NumPyro distribution of the sampled quantity (scale or variance), batch shape ()."""
        if self.kind == "half_normal":
            return dist.HalfNormal(self.params[0])
        if self.kind == "half_cauchy":
            return dist.HalfCauchy(self.params[0])
        if self.kind == "inverse_gamma":
            return dist.InverseGamma(self.params[0], self.params[1])
        raise ValueError(f"unknown hyperprior kind {self.kind!r}")  # pragma: no cover

    def to_scale(self, value: jnp.ndarray) -> jnp.ndarray:
        """Map a sampled value (same shape) to the weight prior's scale σ."""
        return jnp.sqrt(value) if self.param == "variance" else value

    def log_prob(self, value: jnp.ndarray) -> jnp.ndarray:
        """Elementwise log-density of the sampled quantity (scale or variance)."""
        return self.distribution().log_prob(value)

    def spec(self) -> dict:
        """A JSON-serialisable description, inverse of :func:`hyperprior_from_spec`."""
        return {"kind": self.kind, "params": list(self.params)}


def half_normal(s: float = 1.0) -> Hyperprior:
    """Scale σ ~ HalfNormal(s): density ∝ exp(−σ²/2s²) on σ > 0. The site is ``<scope>.scale``."""
    return Hyperprior("half_normal", (_positive("half_normal scale s", s),), "scale")


def half_cauchy(s: float = 1.0) -> Hyperprior:
    """Scale σ ~ HalfCauchy(s), heavy-tailed (Gelman 2006). The site is ``<scope>.scale``."""
    return Hyperprior("half_cauchy", (_positive("half_cauchy scale s", s),), "scale")


def inverse_gamma(a: float = 1.0, b: float = 1.0) -> Hyperprior:
    """**Variance** σ² ~ InverseGamma(a, b) (shape a, scale b), the conjugate choice for a
    Normal weight prior; σ = sqrt(σ²). The site is ``<scope>.variance``."""
    return Hyperprior(
        "inverse_gamma",
        (_positive("inverse_gamma concentration a", a), _positive("inverse_gamma scale b", b)),
        "variance",
    )


HYPERPRIORS = {
    "half-normal": half_normal,
    "half-cauchy": half_cauchy,
    "inverse-gamma": inverse_gamma,
}


def hyperprior(name: str, *params: float) -> Hyperprior:
    """Build a hyperprior by its CLI name (``half-normal``, ``half-cauchy``,
    ``inverse-gamma``; underscores accepted) with default or given parameters."""
    key = name.replace("_", "-").lower()
    if key not in HYPERPRIORS:
        raise ValueError(f"unknown hyperprior {name!r}; choose one of {', '.join(HYPERPRIORS)} (or 'fixed' for a fixed scale)")
    return HYPERPRIORS[key](*params)


def hyperprior_from_spec(spec: dict) -> Hyperprior:
    """Inverse of :meth:`Hyperprior.spec`."""
    return {"half_normal": half_normal, "half_cauchy": half_cauchy, "inverse_gamma": inverse_gamma}[spec["kind"]](*spec["params"])
