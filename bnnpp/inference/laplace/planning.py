"""Planning a ``laplace`` fit: which sites form θ and which curvature (:func:`plan`), checked by
abstract tracing before anything compiles. The method's math is in :mod:`bnnpp.inference.laplace`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.primitives import Messenger

from bnnpp.inference import map_estimate
from bnnpp.inference.laplace.approximation import _KEY, _likelihood_kind
from bnnpp.inference.variational_layers import find_layers
from bnnpp.introspection import improper_as_zeros, latent_sites, num_parameters
from bnnpp.models.layers import LAYER_EFFECT

if TYPE_CHECKING:
    from bnnpp.inference.laplace import LaplaceOptions

__all__ = ["HESSIANS", "MAX_FULL_PARAMETERS", "SCALE_SUFFIXES", "_Plan", "_find_layers", "_supports", "plan"]

MAX_FULL_PARAMETERS = 3000
"""``hessian="full"`` is refused above this many Laplace parameters: it computes P Hessian-vector
products over the full data and keeps two P × P float32 matrices (72 MB at the limit);
``hessian="ggn"`` above this many layer weights (the same two matrices)."""

HESSIANS = ("auto", "full", "ggn", "diag", "kron")
SCALE_SUFFIXES = (".scale", ".variance")  # bnnpp hyperprior sites (bnnpp.priors)


@dataclass(frozen=True)
class _Plan:
    hessian: str
    subset: tuple[str, ...]  # sites of θ, in trace order
    layers: dict  # layer → facts (GGN), in trace order
    replaced: tuple[str, ...]  # sites of θ whose prior is N(0, 1/δ)
    likelihood: str
    tune_sigma: bool
    # "evidence", "model", "validation", δ, or "from_map": the prior precision and noise the evidence-trained MAP
    # learned (prior_precision="auto")
    precision: str | float = "evidence"


def plan(model, x, y, options: LaplaceOptions, sites: dict | None = None) -> _Plan:
    """Resolve ``hessian="auto"`` and the sites of θ; ValueError (one line, naming the fix) for
    an unsupported model/option combination or a full Hessian above
    :data:`MAX_FULL_PARAMETERS`. Abstract tracing only: nothing compiles. ``sites``: the latent
    sites when already found (``ModelInfo.sites``)."""
    sites = latent_sites(model, x, y) if sites is None else sites
    layers = {}
    for name, facts in _find_layers(model, x, y).items():
        if f"{name}.w" in sites and f"{name}.b" in sites:
            layers[name] = facts
    hessian = options.hessian
    precision = options.precision
    # the MAP's hyperparameters already maximise a Laplace-GGN evidence (the full GGN on small nets,
    # per layer, with the noise): re-tuning one δ and σ on the coarser K-FAC evidence at the end would throw that away
    # (a hierarchical prior: the MAP's evidence learned its scales; under a fixed-scale prior it learned only the
    # noise, and laplace's own evidence still tunes δ, which may recover a better prior scale than the model's)
    kind = None  # the likelihood's kind, once traced
    evidence = map_estimate.evidence_plan_of(model, x, y, options) if layers and precision == "auto" and hessian != "full" else None
    from_map = evidence is not None and not evidence.fixed_prior
    if hessian == "auto":
        # the posterior takes the curvature its hyperparameters were learned with: the full GGN where the
        # evidence-trained MAP of a regression used it (at most FULL_LIMIT weights), where K-FAC's layer-wise blocks
        # (Martens & Grosse 2015, §3) can leave the posterior sure of a mean that misses
        # regression only: for small classifiers the full GGN's linearised predictive comes out less sure than the exact
        # posterior's, K-FAC's closer to it (an empirical default; the package docstring)
        kind = _likelihood_kind(model, x, y) if from_map and evidence.structure == "full" else None
        hessian = ("ggn" if kind == "gaussian" else "kron") if layers else "full"
    if precision == "auto":
        precision = "from_map" if from_map and hessian != "full" else "evidence"
    if options.subset == "last_layer":
        if not layers:
            raise ValueError("subset='last_layer' needs a network of bnnpp dense/conv2d layers; this model has none: use subset='all'")
        last = list(layers)[-1]
        layers = {last: layers[last]}
    if hessian in ("ggn", "diag", "kron"):
        if not layers:
            raise ValueError(
                f"hessian={hessian!r} (GGN) works on the weights of bnnpp dense/conv2d layers and this model has none "
                f"(Flax modules included): use hessian='full' (exact Hessian, up to {MAX_FULL_PARAMETERS:,} parameters)"
            )
        if precision == "model":
            raise ValueError(f"prior_precision='model' needs hessian='full'; hessian={hessian!r} takes 'evidence' or a number")
        if hessian == "ggn":
            if options.prior_structure == "layerwise" or precision == "validation":
                what = "prior_structure='layerwise'" if options.prior_structure == "layerwise" else "prior_precision='validation'"
                raise ValueError(f"{what} needs hessian='diag' or 'kron' (the full GGN takes one prior precision: 'evidence' or a number)")
            size = num_parameters({k: sites[k] for name in layers for k in (f"{name}.w", f"{name}.b")})
            if size > MAX_FULL_PARAMETERS:
                raise ValueError(
                    f"hessian='ggn' on {size:,} weights is refused above {MAX_FULL_PARAMETERS:,} (P x P matrices): use hessian='kron' "
                    "or 'diag', or subset='last_layer'"
                )
        if precision == "validation" and options.predictive != "linearised":
            raise ValueError("prior_precision='validation' scores the linearised predictive: use predictive='linearised'")
        subset = tuple(s for name in layers for s in (f"{name}.w", f"{name}.b"))
    else:
        if options.prior_structure == "layerwise":
            raise ValueError("prior_structure='layerwise' needs hessian='diag' or 'kron' (the full Hessian takes one prior precision)")
        if precision == "validation":
            raise ValueError(
                "prior_precision='validation' needs hessian='diag' or 'kron'; the full Hessian takes 'evidence', 'model' or a number"
            )
        subset = tuple(sites) if options.subset == "all" else tuple(s for name in layers for s in (f"{name}.w", f"{name}.b"))
        size = num_parameters({k: sites[k] for k in subset})
        if size > MAX_FULL_PARAMETERS:
            raise ValueError(
                f"hessian='full' on {size:,} parameters is refused above {MAX_FULL_PARAMETERS:,} (P Hessian-vector products, "
                "P x P matrices): use hessian='kron' or 'diag', or subset='last_layer'"
            )
    likelihood = (kind or _likelihood_kind(model, x, y)) if (hessian != "full" or options.predictive == "linearised") else "other"
    replaced: tuple[str, ...] = ()
    if precision != "model":
        supports = _supports(model, x, y)
        replaced = tuple(s for s in subset if _is_real(supports[s]))
        scales = [s for s in subset if s.endswith(SCALE_SUFFIXES)]
        if hessian == "full" and scales:
            kron = " (or hessian='kron', scales fixed at the MAP)" if layers else ""  # kron needs bnnpp dense/conv2d layers
            raise ValueError(
                f"the latent vector holds the hierarchical prior scale(s) {', '.join(scales)}; a prior_precision other than "
                f"'model' would cut them off from the weights: use prior_precision='model'{kron}"
            )
    tune_sigma = (
        precision == "evidence" and likelihood == "gaussian" and "noise" in sites and "noise" not in subset and set(replaced) == set(subset)
    )
    return _Plan(hessian, subset, layers, replaced, likelihood, tune_sigma, precision)


def _find_layers(model, x, y) -> dict:
    """:func:`find_layers` plus each convolution's ``kernel_size``/``stride``/``padding``."""
    layers = find_layers(model, x, y)
    conv = {}

    class _Conv(Messenger):
        def process_message(self, msg):
            if msg["type"] == LAYER_EFFECT and msg["kind"] == "conv2d":
                conv[msg["layer"]] = dict(msg["kwargs"])

    def probe(key):
        with _Conv():
            handlers.substitute(handlers.seed(model, key), substitute_fn=improper_as_zeros)(x[:2], y[:2])
        return 0

    jax.eval_shape(probe, jax.ShapeDtypeStruct((2,), jnp.uint32))
    return {k: {**v, **conv.get(k, {})} for k, v in layers.items()}


def _is_real(support) -> bool:
    """True for the support of a real-valued site (``real``, also as an event: ``real_vector``)."""
    while isinstance(support, dist.constraints.independent):
        support = support.base_constraint
    return support is dist.constraints.real


def _supports(model, x, y) -> dict:
    out = {}

    def probe(xs, ys):
        trace = handlers.trace(handlers.substitute(handlers.seed(model, _KEY), substitute_fn=improper_as_zeros)).get_trace(xs, ys)
        out.update({k: s["fn"].support for k, s in trace.items() if s["type"] == "sample" and not s["is_observed"]})
        return 0

    jax.eval_shape(probe, x[:2], y[:2])
    return out
