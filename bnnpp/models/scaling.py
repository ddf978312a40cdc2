"""The affine transform a bnnpp network applies to its data: standardised inputs for the
network, and predictions mapped back to the targets' own units.

A network built with ``standardize=True`` (the default of :func:`bnnpp.models.mlp`) is given
a :class:`Scaling` fitted on the training data when :func:`bnnpp.fit` is called on it
(:func:`bind_scaling`). The network then sees ``(x − x_shift) / x_scale``; for a regression
likelihood with real targets its output ``f`` is mapped to ``y_shift + y_scale · f``, so the
weight prior acts on unit-scale data while the likelihood — and with it every prediction,
log-likelihood, metric and ArviZ group — is in the user's units. The transform is part of the
network's spec, so a saved posterior rebuilds it. Custom NumPyro models and Flax modules see
the data as given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

__all__ = ["Scaling", "bind_scaling", "fit_scaling"]

REAL_TARGETS = ("gaussian", "student_t", "heteroscedastic")
"""Likelihoods whose targets are standardised (classes and counts keep their values)."""


def _f32(values) -> tuple[float, ...]:
    # held as float32 values: the model computes in float32 and a JSON round trip is exact
    return tuple(float(v) for v in np.asarray(values, np.float32).ravel())


@dataclass(frozen=True)
class Scaling:
    """An affine standardisation of a network's data.

    Attributes:
        x_shift, x_scale: per input feature ``(features,)``: the network sees
            ``(x − x_shift) / x_scale``.
        y_shift: per target ``(K,)`` (one entry for targets ``(n,)``), or ``None`` when the
            targets keep their values (classification, counts).
        y_scale: one positive number for all targets (``None`` with ``y_shift``): the mean
            function is ``y_shift + y_scale · f``. One scale shared by the K targets keeps a
            homoscedastic likelihood homoscedastic.
    """

    x_shift: tuple[float, ...]
    x_scale: tuple[float, ...]
    y_shift: tuple[float, ...] | None = None
    y_scale: float | None = None

    def inputs(self, x: jnp.ndarray) -> jnp.ndarray:
        """The standardised inputs ``(n, features)``."""
        return (x - jnp.asarray(self.x_shift, jnp.float32)) / jnp.asarray(self.x_scale, jnp.float32)

    def mean(self, f: jnp.ndarray) -> jnp.ndarray:
        """The network's output ``f`` ``(n,)`` or ``(n, K)`` in the targets' units (unchanged
        without a target transform)."""
        if self.y_shift is None:
            return f
        shift = jnp.asarray(self.y_shift if f.ndim > 1 else self.y_shift[0], jnp.float32)
        return shift + jnp.float32(self.y_scale) * f

    @property
    def target_scale(self) -> float:
        """``y_scale``, or 1 without a target transform."""
        return 1.0 if self.y_scale is None else self.y_scale

    def spec(self) -> dict:
        """JSON-serialisable form (:func:`Scaling.from_spec` inverts it)."""
        return {
            "x_shift": list(self.x_shift),
            "x_scale": list(self.x_scale),
            "y_shift": None if self.y_shift is None else list(self.y_shift),
            "y_scale": self.y_scale,
        }

    @classmethod
    def from_spec(cls, spec: dict) -> Scaling:
        y_shift = spec.get("y_shift")
        return cls(
            _f32(spec["x_shift"]),
            _f32(spec["x_scale"]),
            None if y_shift is None else _f32(y_shift),
            None if spec.get("y_scale") is None else _f32([spec["y_scale"]])[0],
        )


def _scale(sd: np.ndarray) -> np.ndarray:
    """sd where it is positive and finite, else 1: a constant column is centred, not divided by 0."""
    return np.where(np.isfinite(sd) & (sd > 0), sd, 1.0)


def fit_scaling(x, y, likelihood: str) -> Scaling:
    """The standardisation of training data ``x`` ``(n, features)``, ``y`` ``(n,)`` or ``(n, K)``:
    the inputs' column means and sds (population sd; 1 for a constant column) and, for
    :data:`REAL_TARGETS`, the targets' column means and their pooled sd
    ``sqrt(mean_k var_k)`` (1 when every target is constant).

    Returns:
        A :class:`Scaling`.
    """
    x = np.asarray(x, np.float64).reshape(np.shape(x)[0], -1)
    x_shift, x_scale = x.mean(axis=0), _scale(x.std(axis=0))
    if likelihood not in REAL_TARGETS:
        return Scaling(_f32(x_shift), _f32(x_scale))
    y = np.asarray(y, np.float64).reshape(np.shape(y)[0], -1)
    pooled = math.sqrt(float(np.mean(y.var(axis=0))))
    return Scaling(_f32(x_shift), _f32(x_scale), _f32(y.mean(axis=0)), _f32([_scale(np.asarray(pooled))])[0])


def bind_scaling(model, x, y):
    """``model`` with its standardisation fitted on ``(x, y)`` when it is a bnnpp network built
    with ``standardize=True`` and not yet given one; any other model unchanged."""
    if getattr(model, "standardize", False) and getattr(model, "scaling", None) is None and hasattr(model, "with_scaling"):
        return model.with_scaling(fit_scaling(x, y, model.likelihood))
    return model
