"""Weight priors and scale hyperpriors: what we believe about a network's weights.

A weight prior (``normal``, ``laplace``, ``cauchy``, ``student_t``, ``flat``,
``scale_mixture``) is a zero-centred distribution for every weight and bias of a layer.
Its ``scale`` is either a positive number (a fixed, "delta" hyperprior) or a
:class:`Hyperprior` — ``half_normal(s)``, ``half_cauchy(s)`` or ``inverse_gamma(a, b)`` —
in which case the scale becomes a latent NumPyro site and is inferred with the weights
(a hierarchical prior). ``per`` sets how many scales are sampled:

* ``"layer"`` (default): one scale per layer, shared by its weight matrix and bias;
* ``"network"``: one scale for the whole network;
* ``"unit"``: one scale per output unit of a layer (a column of the weight matrix and
  the matching bias entry).

Priors do not import anything from :mod:`bnnpp.inference`; they only build sample sites
(:meth:`Prior.sample`, :meth:`Prior.sample_scale`) and give log-densities
(:meth:`Prior.log_prob`, :meth:`Hyperprior.log_prob`), which the tests check against
``scipy.stats``.

Example::

    from bnnpp import priors
    p = priors.normal(scale=priors.inverse_gamma(1.0, 1.0))   # variance ~ IG(1, 1) per layer
    q = priors.scale_mixture(0.5, 1.0, float(np.exp(-6)))     # Blundell et al. (2015)

The six families and three hyperpriors share one :class:`Prior` / :class:`Hyperprior` pair so
that every method reads them the same way; that is why this file is a little over 400 lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

__all__ = [
    "HYPERPRIORS",
    "PRIORS",
    "Hyperprior",
    "Prior",
    "ScaleMixtureNormal",
    "cauchy",
    "flat",
    "from_flags",
    "half_cauchy",
    "half_normal",
    "hyperprior",
    "inverse_gamma",
    "laplace",
    "normal",
    "prior",
    "scale_mixture",
    "student_t",
]

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


# --------------------------------------------------------------------------------------
# Hyperpriors
# --------------------------------------------------------------------------------------


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
        raise ValueError(
            f"unknown hyperprior {name!r}; choose one of {', '.join(HYPERPRIORS)} "
            "(or 'fixed' for a fixed scale)"
        )
    return HYPERPRIORS[key](*params)


def hyperprior_from_spec(spec: dict) -> Hyperprior:
    """Inverse of :meth:`Hyperprior.spec`."""
    return {"half_normal": half_normal, "half_cauchy": half_cauchy, "inverse_gamma": inverse_gamma}[
        spec["kind"]
    ](*spec["params"])


# --------------------------------------------------------------------------------------
# The scale mixture of Blundell et al. (2015)
# --------------------------------------------------------------------------------------


class ScaleMixtureNormal(dist.Distribution):
    """π·N(0, σ1²) + (1−π)·N(0, σ2²), elementwise (Blundell et al. 2015, eq. 7).

    ``log_prob`` is a two-term log-sum-exp with the larger term as the base, so that a tiny σ2
    (e.g. e⁻⁶) stays finite and exact far from zero.
    """

    arg_constraints = {
        "pi": constraints.unit_interval,
        "sigma1": constraints.positive,
        "sigma2": constraints.positive,
    }
    support = constraints.real
    reparametrized_params = []

    def __init__(self, pi, sigma1, sigma2, *, validate_args=None):
        self.pi, self.sigma1, self.sigma2 = jnp.broadcast_arrays(
            jnp.asarray(pi, dtype=jnp.result_type(float)),
            jnp.asarray(sigma1, dtype=jnp.result_type(float)),
            jnp.asarray(sigma2, dtype=jnp.result_type(float)),
        )
        super().__init__(batch_shape=jnp.shape(self.pi), validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        k1, k2 = jax.random.split(key)
        shape = sample_shape + self.batch_shape
        pick_first = jax.random.bernoulli(k1, self.pi, shape)
        eps = jax.random.normal(k2, shape)
        return eps * jnp.where(pick_first, self.sigma1, self.sigma2)

    def log_prob(self, value):
        # log[π N(v; 0, σ1²) + (1−π) N(v; 0, σ2²)] = max(lp1, lp2) + log1p(exp(−|lp1 − lp2|)):
        # per element two squares, one exp and one log1p, with no stacked pair to reduce
        # (logsumexp over jnp.stack cost about twice as much on bbb's Monte-Carlo KL of 478k
        # MNIST weights); the larger term as the base keeps it exact in float32 when the narrow
        # component underflows far from zero
        half_v2 = 0.5 * jnp.square(value)
        c = 0.5 * jnp.log(2 * jnp.pi)
        lp1 = jnp.log(self.pi) - jnp.log(self.sigma1) - c - half_v2 / jnp.square(self.sigma1)
        lp2 = jnp.log1p(-self.pi) - jnp.log(self.sigma2) - c - half_v2 / jnp.square(self.sigma2)
        return jnp.maximum(lp1, lp2) + jnp.log1p(jnp.exp(-jnp.abs(lp1 - lp2)))

    @property
    def mean(self):
        return jnp.zeros(self.batch_shape)

    @property
    def variance(self):
        return self.pi * self.sigma1**2 + (1 - self.pi) * self.sigma2**2


# --------------------------------------------------------------------------------------
# Weight priors
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prior:
    """A zero-centred prior on every weight and bias of a layer.

    Attributes:
        kind: ``normal``, ``laplace``, ``cauchy``, ``student_t``, ``flat`` or ``scale_mixture``.
        scale: a positive float (fixed) or a :class:`Hyperprior` (sampled).
        per: scope of a sampled scale: ``"layer"``, ``"network"`` or ``"unit"``.
        params: extra family parameters (``df`` for Student-t; ``pi, sigma1, sigma2`` for the
            scale mixture, whose component scales are multiplied by ``scale``).
    """

    kind: str
    scale: float | Hyperprior | None = 1.0
    per: Per = "layer"
    params: tuple[float, ...] = ()

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise ValueError(f"unknown prior kind {self.kind!r}; use one of {', '.join(_KINDS)}")
        if self.per not in _PERS:
            raise ValueError(f"per must be one of {', '.join(_PERS)}, got {self.per!r}")
        if self.kind == "flat":
            if self.scale is not None:
                raise ValueError("the flat prior has no scale, so it takes no hyperprior; use priors.flat()")
            return
        if isinstance(self.scale, Hyperprior):
            return
        if self.per != "layer":  # nothing is sampled: per would be ignored
            raise ValueError(f"per={self.per!r} scopes a sampled scale, and this prior's scale is fixed ({self.scale!r}): "
                             "leave per out, or give a hyperprior such as priors.half_cauchy(1.0)")
        if isinstance(self.scale, (dict, str)):
            raise TypeError(
                f"scale must be a positive number or a hyperprior such as priors.half_cauchy(1.0), "
                f"got {self.scale!r}"
            )
        object.__setattr__(self, "scale", _positive(f"{self.kind} prior scale", self.scale))

    @property
    def hierarchical(self) -> bool:
        """True when the scale is a latent site (a :class:`Hyperprior`)."""
        return isinstance(self.scale, Hyperprior)

    def distribution(self, scale: jnp.ndarray | float | None = None) -> dist.Distribution:
        """The elementwise weight distribution for a given scale σ (default: the fixed scale).

        Returns a NumPyro distribution with batch shape ``shape(scale)``; for ``flat`` an
        ``ImproperUniform`` over the reals.
        """
        if self.kind == "flat":
            return dist.ImproperUniform(constraints.real, (), ())
        if scale is None:
            if self.hierarchical:
                raise ValueError(
                    "this prior has a hyperprior: pass the sampled scale, e.g. prior.distribution(scale=s)"
                )
            scale = self.scale
        if self.kind == "normal":
            return dist.Normal(0.0, scale)
        if self.kind == "laplace":
            return dist.Laplace(0.0, scale)
        if self.kind == "cauchy":
            return dist.Cauchy(0.0, scale)
        if self.kind == "student_t":
            return dist.StudentT(self.params[0], 0.0, scale)
        if self.kind == "scale_mixture":
            pi, s1, s2 = self.params
            return ScaleMixtureNormal(pi, jnp.multiply(s1, scale), jnp.multiply(s2, scale))
        raise ValueError(f"unknown prior kind {self.kind!r}")  # pragma: no cover

    def log_prob(self, value: jnp.ndarray, scale: jnp.ndarray | float | None = None) -> jnp.ndarray:
        """Elementwise log-density of weights ``value`` (any shape) at scale σ.

        For ``flat`` this is 0 (the improper density is constant)."""
        d = self.distribution(scale)
        if self.kind == "flat":
            return jnp.zeros(jnp.shape(value))
        return d.log_prob(value)

    # -- building NumPyro sites -------------------------------------------------------

    def sample_scale(self, scope: str, units: int | None = None) -> jnp.ndarray | float:
        """Sample (or return) the scale σ for one scope.

        Args:
            scope: prefix of the site name: the layer name, or ``"network"``.
            units: number of output units, needed when ``per="unit"``.

        Returns:
            The fixed float, or σ sampled from the hyperprior with shape ``()``
            (``per="layer"``/``"network"``) or ``(units,)`` (``per="unit"``). The site is
            named ``<scope>.scale`` or ``<scope>.variance`` (see :class:`Hyperprior`).
        """
        if not self.hierarchical:
            return self.scale
        hp: Hyperprior = self.scale  # type: ignore[assignment]
        d = hp.distribution()
        dims: tuple[str, ...] = ()
        if self.per == "unit":
            if units is None:
                raise ValueError("per='unit' needs the number of units: sample_scale(scope, units=...)")
            d = d.expand((units,)).to_event(1)
            dims = (f"{scope}.out",)
        value = numpyro.sample(f"{scope}.{hp.param}", d, infer={"dims": dims})
        return hp.to_scale(value)

    def sample(self, name: str, shape: tuple[int, ...], scale, dims: tuple[str, ...]) -> jnp.ndarray:
        """Sample a weight array of ``shape`` at site ``name`` with the given scale σ.

        ``scale`` broadcasts against ``shape`` (a scalar, or ``(units,)`` for the last axis).
        ``dims`` names the axes for ArviZ; it is kept in the site's ``infer`` dict.
        """
        d = self.distribution(scale)
        if self.kind == "flat":
            d = dist.ImproperUniform(constraints.real, (), shape)
        else:
            d = d.expand(shape).to_event(len(shape))
        return numpyro.sample(name, d, infer={"dims": tuple(dims)})

    def spec(self) -> dict:
        """A JSON-serialisable description, inverse of :func:`prior_from_spec`."""
        scale = self.scale.spec() if isinstance(self.scale, Hyperprior) else self.scale
        return {"kind": self.kind, "scale": scale, "per": self.per, "params": list(self.params)}


def normal(scale: float | Hyperprior = 1.0, *, per: Per = "layer") -> Prior:
    """w ~ Normal(0, σ). With ``inverse_gamma`` on σ² this is the conjugate hierarchy."""
    return Prior("normal", scale, per)


def laplace(scale: float | Hyperprior = 1.0, *, per: Per = "layer") -> Prior:
    """w ~ Laplace(0, σ) (an L1 / lasso-like prior: sharper peak at zero)."""
    return Prior("laplace", scale, per)


def cauchy(scale: float | Hyperprior = 1.0, *, per: Per = "layer") -> Prior:
    """w ~ Cauchy(0, σ): heavy tails, so a few weights can be large while most are small."""
    return Prior("cauchy", scale, per)


def student_t(df: float, scale: float | Hyperprior = 1.0, *, per: Per = "layer") -> Prior:
    """w ~ StudentT(df, 0, σ): between Normal (df → ∞) and Cauchy (df = 1)."""
    return Prior("student_t", scale, per, (_positive("student_t df", df),))


def flat() -> Prior:
    """An improper flat prior, p(w) ∝ 1 on the reals (log-density 0).

    Valid only where the posterior is proper because the likelihood alone pins the weights
    down: MAP (where it is maximum likelihood) and variational/MCMC fits of small, well
    identified models. It cannot be sampled from (no prior predictive), it has no scale and
    hence takes no hyperprior, and for a classifier on separable data or an over-
    parameterised network the posterior may be improper — prefer a wide ``normal`` there.
    """
    return Prior("flat", None, "layer")


def scale_mixture(
    pi: float = 0.5,
    sigma1: float = 1.0,
    sigma2: float = math.exp(-6),
    *,
    scale: float | Hyperprior = 1.0,
    per: Per = "layer",
) -> Prior:
    """w ~ π·N(0, (c·σ1)²) + (1−π)·N(0, (c·σ2)²), Blundell et al. (2015), eq. 7.

    Defaults are the paper's MNIST choice (π = 0.5, σ1 = 1, σ2 = e⁻⁶). ``scale`` (c) multiplies
    both component scales; it is 1 by default and may be a hyperprior.
    """
    try:
        p = float(pi)
    except (TypeError, ValueError):
        raise TypeError(f"scale_mixture pi must be a number in (0, 1), got {pi!r}") from None
    if not 0.0 < p < 1.0:
        raise ValueError(f"scale_mixture pi must be in (0, 1), got {pi!r}; e.g. pi=0.5")
    s1 = _positive("scale_mixture sigma1", sigma1)
    s2 = _positive("scale_mixture sigma2", sigma2)
    return Prior("scale_mixture", scale, per, (p, s1, s2))


PRIORS = {
    "normal": normal,
    "laplace": laplace,
    "cauchy": cauchy,
    "student-t": student_t,
    "flat": flat,
    "scale-mixture": scale_mixture,
}


def prior(
    name: str,
    scale: float | Hyperprior = 1.0,
    *,
    per: Per = "layer",
    df: float = 3.0,
) -> Prior:
    """Build a weight prior from its CLI name (``normal``, ``laplace``, ``cauchy``,
    ``student-t``, ``flat``, ``scale-mixture``; underscores accepted)."""
    key = name.replace("_", "-").lower()
    if key not in PRIORS:
        raise ValueError(f"unknown prior {name!r}; choose one of {', '.join(PRIORS)}")
    if per not in _PERS:
        raise ValueError(f"per must be one of {', '.join(_PERS)}, got {per!r}")
    if key == "flat":
        if isinstance(scale, Hyperprior):
            raise ValueError("the flat prior has no scale, so it takes no hyperprior: give it a number (on the command line, --hyperprior fixed)")
        return flat()
    if key == "student-t":
        return student_t(df, scale, per=per)
    if key == "scale-mixture":
        return scale_mixture(scale=scale, per=per)
    return PRIORS[key](scale, per=per)


def prior_from_spec(spec: dict) -> Prior:
    """Inverse of :meth:`Prior.spec`."""
    scale = spec["scale"]
    if isinstance(scale, dict):
        scale = hyperprior_from_spec(scale)
    # a fixed scale's per had no effect; earlier files may record one other than "layer"
    per = spec["per"] if isinstance(scale, Hyperprior) or spec["kind"] == "flat" else "layer"
    return Prior(spec["kind"], scale, per, tuple(spec["params"]))


def from_flags(family: str, hyper: str, params, scale: float | None, per: str | None) -> Prior:
    """The weight prior of the command-line flags of ``bnnpp fit`` and ``bnnpp compare``:
    ``--prior`` (``family``), ``--hyperprior`` (``hyper``: a name of :data:`HYPERPRIORS` or
    ``"fixed"``), ``--hyperprior-params``, ``--scale`` and ``--per`` (``None``: not given). A flag that the other flags make meaningless is refused
    in one line rather than ignored: ``--scale`` other than its default 1 with a hyperprior (the
    scale is sampled), ``--hyperprior-params`` with ``--hyperprior fixed``, and (by :class:`Prior`
    itself) ``--per`` other than ``layer`` with a fixed scale. 1 and ``layer`` are accepted as the defaults they are: a run
    folder's config.toml from before this check records them.

    Returns:
        a :class:`Prior`.
    """
    if hyper == "fixed":
        if params is not None:
            raise ValueError("--hyperprior-params needs a hyperprior; with --hyperprior fixed use --scale")
        return prior(family, 1.0 if scale is None else scale, per=per or "layer")  # Prior refuses a per it would ignore
    if scale not in (None, 1.0):
        raise ValueError(f"--scale {scale:g} is the fixed prior scale and needs --hyperprior fixed; with --hyperprior "
                         f"{hyper} the scale is sampled: set its prior with --hyperprior-params")
    if params is not None:
        key = hyper.replace("_", "-").lower()
        expected = {"half-normal": "s", "half-cauchy": "s", "inverse-gamma": "a,b"}.get(key)
        if expected is not None and len(params) != expected.count(",") + 1:
            raise ValueError(f"--hyperprior-params takes {expected.count(',') + 1} number(s) for {hyper} ({expected}), "
                             f"got {len(params)}: {','.join(f'{p:g}' for p in params)}")
    return prior(family, hyperprior(hyper, *(params or ())), per=per or "layer")
