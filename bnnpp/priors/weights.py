"""Weight priors: the :class:`Prior` record, its six families and the constructors by name
(:func:`prior`, :func:`prior_from_spec`, :func:`from_flags`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from bnnpp.priors.hyperpriors import _KINDS, _PERS, Hyperprior, Per, _positive, hyperprior, hyperprior_from_spec
from bnnpp.priors.mixture import ScaleMixtureNormal


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
            raise ValueError(
                f"per={self.per!r} scopes a sampled scale, and this prior's scale is fixed ({self.scale!r}): "
                "leave per out, or give a hyperprior such as priors.half_cauchy(1.0)"
            )
        if isinstance(self.scale, (dict, str)):
            raise TypeError(f"scale must be a positive number or a hyperprior such as priors.half_cauchy(1.0), got {self.scale!r}")
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
                raise ValueError("this prior has a hyperprior: pass the sampled scale, e.g. prior.distribution(scale=s)")
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
            raise ValueError(
                "the flat prior has no scale, so it takes no hyperprior: give it a number (on the command line, --hyperprior fixed)"
            )
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
        raise ValueError(
            f"--scale {scale:g} is the fixed prior scale and needs --hyperprior fixed; with --hyperprior "
            f"{hyper} the scale is sampled: set its prior with --hyperprior-params"
        )
    if params is not None:
        key = hyper.replace("_", "-").lower()
        expected = {"half-normal": "s", "half-cauchy": "s", "inverse-gamma": "a,b"}.get(key)
        if expected is not None and len(params) != expected.count(",") + 1:
            raise ValueError(
                f"--hyperprior-params takes {expected.count(',') + 1} number(s) for {hyper} ({expected}), "
                f"got {len(params)}: {','.join(f'{p:g}' for p in params)}"
            )
    return prior(family, hyperprior(hyper, *(params or ())), per=per or "layer")
