"""``laplace``: a Gaussian around the MAP (MacKay 1992; Ritter, Botev & Barber 2018; Daxberger
et al. 2021, "Laplace Redux"), fitted post hoc.

1. **MAP**: the ``map`` method's algorithm (:func:`bnnpp.inference.map_estimate.build`) driven by
   the runner — same optimiser, minibatches, NaN guard, checkpoints.
2. **Curvature** at the MAP θ* of the *Laplace parameters* θ (``subset``: every latent site, or
   the weights ``<layer>.w``/``<layer>.b`` of the last bnnpp layer):

   * ``hessian="full"``: the exact Hessian of the negative log joint on the unconstrained space
     (any NumPyro model), from P Hessian-vector products over the full data; refused above
     :data:`MAX_FULL_PARAMETERS` parameters before anything is computed.
   * ``hessian="diag"`` / ``"kron"``: the generalised Gauss–Newton J^T Λ J (Λ: the Hessian of
     the negative log-likelihood in the network's output, Martens 2020, eq. 27) for the weights
     of bnnpp dense and conv2d layers. ``diag`` is its exact diagonal (per-example gradients of
     each column of Λ's square root); ``kron`` is K-FAC (Martens & Grosse 2015, eq. 1; for
     convolutions KFC, Grosse & Martens 2016, eq. 22): per layer A ⊗ G with
     A = (1/N) Σ ã ãᵀ over the inputs ã = [a, 1] (patches for a convolution, the bias as the
     last row) and G = Σ g gᵀ / T over the output gradients of every column of Λ's square
     root (T output positions of a convolution, 1 for a dense layer).
   * ``hessian="ggn"``: the full GGN J^T Λ J of the layers' weights (a P × P matrix, refused above
     :data:`MAX_FULL_PARAMETERS`), its prior precision the model's at the MAP's hyperparameters
     (``prior_precision="auto"`` after an evidence-trained MAP) or δ·I by the evidence over its eigenvalues.
   * ``hessian="auto"`` (default): ``ggn`` for a regression (Gaussian likelihood) whose MAP learned
     a hierarchical Normal prior's scales by the evidence with the full GGN (networks of at most
     :data:`bnnpp.inference.evidence.FULL_LIMIT` weights) — the posterior then has the curvature
     its hyperparameters were chosen with, where K-FAC, which drops the blocks between layers and
     factorises each layer's block (Martens & Grosse 2015, §3), can leave a small regression sure
     of a mean that misses; ``kron`` for other networks of bnnpp layers; ``full`` otherwise.
     Classification keeps ``kron`` (an empirical default: on small classifiers the full GGN's
     linearised predictive comes out less sure than the exact posterior's, K-FAC's closer to it).

   Sites outside θ (the other layers under ``last_layer``, hierarchical prior scales and a
   learned noise sd under GGN) stay at their MAP values. **Hierarchical hyperpriors**: under
   ``full`` with ``subset="all"`` the scales are part of the unconstrained latent vector and
   their curvature is exact (use ``prior_precision="model"``); under ``diag``/``kron`` they are
   fixed at the MAP and the weights' prior precision is δ (``ggn``: likewise).
3. **Prior precision** δ: the prior of every real-valued site of θ is replaced by N(0, δ⁻¹ I)
   (sites on a constrained space keep their prior). ``"evidence"`` (default) maximises the
   Laplace log marginal likelihood (MacKay 1992; Immer et al. 2021, eq. 4)

       log Z(δ, σ) = log p(y | θ*, σ) + log p_δ(θ*) + (P/2) log 2π − ½ log det(s(σ) H_lik + δ D)

   over δ — and over the observation sd σ of a Gaussian likelihood whose noise is a latent site
   ``noise`` outside θ, with s(σ) = σ_MAP² / σ² (the likelihood curvature of a Gaussian scales
   with 1/σ²) — by Adam on (log δ, log σ) over the eigenvalues of the curvature (diag: the
   diagonal; kron: products of the factors' eigenvalues; ggn: of the GGN; full: of H_lik, or of its Schur
   complement when θ also holds constrained sites). A number fixes δ; ``"model"`` keeps the
   model's own prior (``full`` only): the exact Laplace of the model's posterior. ``"auto"``
   (default) is ``"evidence"`` except under a hierarchical Normal prior whose layer scales and
   noise the MAP trained by the evidence (``hyperparameters="auto"``/``"evidence"``) with
   ``ggn``/``diag``/``kron``: there δ of each layer (``ggn``: of each weight) is its prior precision at the MAP (the mean over its
   weights of −∂² log p(θ | h)/∂θ², 1/variance for a Normal) and σ the MAP's, neither re-tuned.
   ``"validation"`` (diag/kron) starts from the evidence's δ and multiplies it by the factor c
   of :data:`VALIDATION_FACTORS` (10⁻² … 10³) whose linearised predictive has the highest log
   predictive density on ``validation_data`` — laplace-torch's grid search (Daxberger et al.
   2021, §4), for networks whose evidence-optimal δ predicts under-confidently (a Laplace over
   every layer of a large network; Ritter, Botev & Barber 2018 tune their prior precision
   and data-size multiplier on validation data for the same reason).
4. **Draws and prediction**: ``num_samples`` draws θ ~ N(θ*, H⁻¹) with the other sites at their
   MAP (and a learned noise sd at its evidence value). ``predictive="mc"`` predicts through the
   network at the draws; ``"linearised"`` (default) uses the GLM predictive of Immer, Korzepa &
   Bauer (2021, eq. 6): f_lin(x, θ) = f(x, θ*) + J(x)(θ − θ*) at the draws. Classification:
   ``link="mc"`` (default) gives each draw softmax(f_lin) — a Monte-Carlo estimate of the GLM
   predictive that keeps the covariance between the classes' logits, with spread between
   draws (``mutual_information`` > 0); ``link="probit"`` is the probit approximation
   (MacKay 1992; multiclass: Lu, Ie & Sha 2020, eq. 7), softmax(f* / sqrt(1 + π/8 · v)) with v
   the per-class variance of f_lin, the same prediction for every draw; by ignoring the
   covariance between logits it moves more decisions away from the MAP's. PSIS-LOO / WAIC score
   this predictive: ``Posterior.log_likelihood`` of a
   linearised fit is the per-draw log predictive density of the training labels.

The log marginal likelihood at the chosen δ (and σ) is ``info["log_marginal_likelihood"]``
and the per-draw ``sample_stats["log_marginal_likelihood"]``; ``info`` also holds
``prior_precision``, ``noise`` (the σ used, Gaussian likelihoods), ``hessian``,
``laplace_parameters`` (P) and ``laplace_seconds``. Memory: ``diag`` and ``kron`` keep O(P)
numbers plus the factors ((in+1)² + out² per layer); ``full`` and ``ggn`` keep two P × P matrices.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpyro.distributions.transforms import biject_to

from bnnpp.inference import map_estimate
from bnnpp.inference.algorithm import Algorithm, Keys, Outcome
from bnnpp.inference.collapse import say_not_suited, small_hierarchical_regression
from bnnpp.inference.evidence import hierarchical_normal
from bnnpp.inference.joint import constrained_values
from bnnpp.inference.laplace.approximation import _KEY, LaplaceGaussian
from bnnpp.inference.laplace.at_map import _laplace
from bnnpp.inference.laplace.evidence import (
    VALIDATION_DRAWS,
    VALIDATION_FACTORS,
    VALIDATION_ROWS,
    _precision_info,
    _tune_on_validation,
)
from bnnpp.inference.laplace.planning import HESSIANS, MAX_FULL_PARAMETERS, _Plan, _supports, plan
from bnnpp.inference.model_info import ModelInfo
from bnnpp.inference.options import check_validation_data, check_validation_pair, non_negative_int, option, positive_int
from bnnpp.inference.registry import Method, register
from bnnpp.inference.variational_layers import find_layers
from bnnpp.introspection import probe_rows

__all__ = ["MAX_FULL_PARAMETERS", "VALIDATION_DRAWS", "VALIDATION_FACTORS", "VALIDATION_ROWS", "LaplaceGaussian", "LaplaceOptions", "build"]


def prior_precision_check(name: str, value) -> None:
    """``"auto"``, ``"evidence"``, ``"model"``, ``"validation"`` or a positive number (also as a string, from the CLI)."""
    if value in ("auto", "evidence", "model", "validation"):
        return
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be 'auto', 'evidence', 'model', 'validation' or a positive number such as 1.0, got {value!r}")


@dataclass(frozen=True)
class LaplaceOptions(map_estimate.MAPOptions):
    """Options of ``method="laplace"``: the MAP fit's (those of ``map``), then the Laplace's."""

    validates_chunks: ClassVar[bool] = False  # validation_data tunes the prior precision

    num_steps: int = option(
        5_000,
        "MAP optimisation steps (0: no MAP, the Laplace approximation around the weights given as init=)",
        check=non_negative_int,
        flag="steps",
    )

    # map's "auto": the evidence-trained MAP (and, under prior_precision="auto", its prior and noise) gives laplace the
    # hyperparameters that maximise a Laplace evidence (MacKay 1992) rather than a joint MAP's, which shrinks the noise
    hyperparameters: str = option("auto", map_estimate.HYPERPARAMETERS_HELP, choices=map_estimate.HYPERPARAMETERS)
    subset: str = option("all", "Laplace over every latent site or the last layer's weights", choices=("all", "last_layer"))
    hessian: str = option(
        "auto",
        "curvature: exact Hessian, full GGN, GGN diagonal or K-FAC (auto: ggn for a regression whose evidence-trained MAP "
        "used it, else kron for bnnpp networks, full otherwise)",
        choices=HESSIANS,
    )
    prior_precision: str | float = option(
        "auto",
        "'evidence' (maximise the marginal likelihood), 'model' (full only), a number, or 'auto': the prior scales and noise "
        "the evidence-trained MAP learned under a hierarchical prior (diag/kron), else 'evidence'",
        check=prior_precision_check,
        type=str,
    )
    prior_structure: str = option(
        "scalar", "one prior precision for all weights, or one per layer (diag/kron)", choices=("scalar", "layerwise")
    )
    predictive: str = option("linearised", "predict with the linearised network (GLM, probit) or through it", choices=("linearised", "mc"))
    link: str = option(
        "mc",
        "classification under predictive='linearised': the probit approximation, or the mean softmax over GLM draws",
        choices=("probit", "mc"),
    )
    num_samples: int = option(100, "posterior draws kept (per chain for MCMC)", check=positive_int)
    curvature_batch_size: int = option(256, "rows per batch of the curvature pass", check=positive_int)
    validation_data: Any = option(None, "(x_val, y_val): prior_precision='validation' picks δ by their log predictive density", flag=False)  # noqa: RUF009

    def check(self) -> None:
        super().check()
        if self.temperature != 1.0:
            raise ValueError(
                "laplace does not take a temperature yet (its GGN/K-FAC curvature and prior precision are built "
                "outside the tempered log density): fit temperature=1"
            )
        check_validation_pair(self.validation_data)
        if self.prior_precision == "validation" and self.validation_data is None:
            raise ValueError("prior_precision='validation' needs validation_data=(x_val, y_val) (the CLI's --validation on MNIST)")

    def check_data(self, x: np.ndarray, y: np.ndarray) -> None:
        super().check_data(x, y)
        check_validation_data(self.validation_data, x)

    @property
    def precision(self) -> str | float:
        """``"auto"``, ``"evidence"``, ``"model"``, ``"validation"`` or δ as a float (``"auto"`` is resolved by :func:`plan`)."""
        return self.prior_precision if self.prior_precision in ("auto", "evidence", "model", "validation") else float(self.prior_precision)


# --------------------------------------------------------------------------------------
# fit
# --------------------------------------------------------------------------------------


def _unconstrain(model, values: dict, x, y) -> dict:
    """Unconstrained values of constrained latent values (the MAP's draw)."""
    supports = _supports(model, x, y)
    return {k: biject_to(supports[k]).inv(jnp.asarray(v)) for k, v in values.items()}


def build(model, x, y, options: LaplaceOptions, start: dict | None = None, info: ModelInfo | None = None) -> Algorithm:
    """The ``map`` algorithm (:func:`bnnpp.inference.map_estimate.build`) with a ``finalize``
    stage that takes the Laplace approximation at the MAP it found.

    ``start`` (``bnnpp.fit``'s ``init``, unconstrained): the MAP starts there; with
    ``num_steps=0`` there is no MAP and the approximation is taken at ``start`` itself, which
    must then name every latent site (post-hoc Laplace around a network trained elsewhere; the
    curvature is only a posterior's where the weights are a mode of this model's log joint).
    ``info``: the model's :class:`ModelInfo` (traced here when not given).

    The runner's posterior then has ``num_samples`` draws ``(1, num_samples, *site_shape)`` of
    every latent site, ``approximation`` a :class:`LaplaceGaussian`, the MAP's loss trace in
    ``stats.traces`` and the Laplace facts in ``stats.extras`` / ``sample_stats`` (module
    docstring).

    Raises:
        ValueError: an unsupported combination (see :func:`plan`), before anything compiles.
    """
    info = info or ModelInfo.of(model, x, y)
    p = plan(model, x, y, options, info.sites)
    map_options = map_estimate.MAPOptions(
        **{k: getattr(options, k) for k in map_estimate.MAPOptions.names() if k != "num_steps"}, num_steps=max(options.num_steps, 1)
    )
    if options.num_steps == 0:
        missing = [k for k in info.sites if k not in (start or {})]
        if missing:
            raise ValueError(
                "laplace with num_steps=0 takes the approximation at the weights you give: pass init= with every latent site "
                f"(missing: {', '.join(missing)}), or num_steps ≥ 1 to fit the MAP first"
            )
        # one step that moves nothing, so the run's records (the loss at the given weights) come as for any fit
        map_options = replace(map_options, optimizer=optax.set_to_zero(), hyperparameters="map")
    found = map_estimate.build(model, x, y, map_options, start=start, info=info)
    line = joint_map_note(model, x, y, map_options.hyperparameters, info.layers)

    def keys(root) -> Keys:  # the MAP's keys; the Laplace draws from fold_in(root, 15)
        return map_estimate.map_keys(root)._replace(sample=jax.random.fold_in(root, 15))

    def sample(key, state, num_samples):  # traceable draws (trace_fit, the sweep): no validation tuning
        params = _laplace(model, x, y, _unconstrain(model, {k: v[0] for k, v in found.sample(key, state, 1).items()}, x, y), p, options)
        params.pop("indefinite_directions", None)
        return _draw(model, x, y, params, key, num_samples)

    def finalize(key, state, data, outcome: Outcome) -> Outcome:
        mode = jax.device_get(jax.jit(lambda s: found.sample(key, s, 1))(state))  # {site: (1, *shape)}, constrained
        return _finalize(model, p, options, key, data, outcome._replace(samples={k: v[None] for k, v in mode.items()}))

    return found._replace(
        sample=sample,
        run=found.run._replace(num_samples=options.num_samples, name="laplace (MAP)"),
        # not map's sparse-rows line (laplace is the fix it names); its own line on a joint MAP's noise
        hooks=found.hooks._replace(keys=keys, finalize=finalize, extras=(lambda state: say_not_suited(line)) if line else None),
    )


def joint_map_note(model, x, y, hyperparameters: str, layers: dict | None = None) -> str | None:
    """The line laplace prints after a regression fit on small data under a hierarchical prior on weights that are not
    Normal (Laplace, Cauchy, ...; :func:`~bnnpp.inference.collapse.small_hierarchical_regression`), where the MAP's
    scales and noise are a joint MAP's (the evidence needs Normal weights), else ``None``: a joint MAP of the noise sd
    sits at the training residuals, below the noise, where the evidence (MacKay 1992) under Normal weights accounts for
    the parameters the fit spends. ``layers``: the model's :func:`~bnnpp.inference.variational_layers.find_layers`, when
    the caller has them."""
    layers = find_layers(model, *probe_rows(model, x, y)) if layers is None else layers
    if hyperparameters == "evidence" or not small_hierarchical_regression(model, x, y, layers) or hierarchical_normal(layers):
        return None
    return (
        f"laplace under a hierarchical prior on non-Normal weights on small data ({int(np.shape(x)[0])} rows) takes the "
        "layer scales and the noise from a joint MAP, which shrinks the noise towards the training residuals: "
        "for a learned noise use Normal weights (priors.normal(scale=...), whose evidence learns it), or fit "
        "method='ensemble' or method='nuts'"
    )


def _draw(model, x, y, params, key, num_samples):
    """``num_samples`` constrained draws ``{site: (num_samples, *shape)}`` of every latent site
    from the Laplace approximation with ``params``."""
    approx = LaplaceGaussian(params)
    theta = approx.sample_unconstrained(key, num_samples)
    sites = [k[: -len("__mean")] for k in params if k.endswith("__mean")] + [k[: -len("__fixed")] for k in params if k.endswith("__fixed")]
    return jax.vmap(lambda t: constrained_values(model, {**approx.fixed, **t}, *probe_rows(model, x, y), _KEY, sites))(theta)


def _finalize(model, p: _Plan, options: LaplaceOptions, key, data, outcome: Outcome) -> Outcome:
    """The Laplace approximation at the MAP the runner found (``outcome.samples``, one draw):
    its draws, its :class:`LaplaceGaussian` and its facts (module docstring)."""
    t0 = time.perf_counter()
    xj, yj = data
    sites = list(outcome.samples)
    u = _unconstrain(model, {k: v[0, 0] for k, v in outcome.samples.items()}, xj, yj)

    @jax.jit
    def draw(params, key):
        approx = LaplaceGaussian(params)
        theta = approx.sample_unconstrained(key, options.num_samples)
        return jax.vmap(lambda t: constrained_values(model, {**approx.fixed, **t}, *probe_rows(model, xj, yj), _KEY, sites))(theta)

    params = jax.device_get(jax.jit(lambda u: _laplace(model, xj, yj, u, p, options))(u))
    indefinite = int(params.pop("indefinite_directions", 0))
    if indefinite:
        warnings.warn(
            f"laplace: the Hessian at the MAP has {indefinite} direction(s) of negative curvature: the MAP is not a "
            "strict optimum (not converged, or a saddle), and those directions get a tiny curvature, so a very wide "
            "posterior there; train longer (num_steps) and check the loss trace"
            if options.num_steps
            else f"laplace: the Hessian at the weights given (init=, num_steps=0) has {indefinite} direction(s) of negative "
            "curvature: they are not a mode of this model's log joint (prior included), and those directions get a tiny "
            "curvature, so a very wide posterior there; fit the MAP from them (num_steps > 0), or use hessian='diag' or 'kron' (Gauss-Newton curvature, never negative)",
            RuntimeWarning,
            stacklevel=2,
        )
    tuned = {}
    if options.precision == "validation":
        params, tuned = _tune_on_validation(model, params, list(p.layers), options, jax.random.fold_in(key, 1))
    draws = jax.device_get(draw(params, key))
    approx = LaplaceGaussian({k: np.asarray(v) for k, v in params.items()})
    lml = float(params["log_marginal_likelihood"])
    shapes = {k: np.shape(v)[2:] for k, v in outcome.samples.items()}
    extras = {
        **outcome.extras,
        "hessian": p.hessian,
        "subset": list(p.subset),
        "laplace_parameters": int(sum(int(np.prod(shapes[k])) for k in p.subset)),
        "log_marginal_likelihood": lml,
        "prior_precision": _precision_info(params["prior_precision"], options),
        "noise": None if not np.isfinite(params["noise"]) else float(params["noise"]),
        "laplace_seconds": time.perf_counter() - t0,
        **tuned,
        **({"indefinite_directions": indefinite} if p.hessian == "full" else {}),
    }
    samples = {k: np.asarray(v)[None] for k, v in draws.items()}
    sample_stats = {"log_marginal_likelihood": np.full((1, options.num_samples), lml, np.float32)}
    return Outcome(samples, approx, sample_stats, extras)


register(
    Method(
        "laplace",
        LaplaceOptions,
        build=build,
        summary="Gaussian around the MAP: GGN/K-FAC or exact Hessian, evidence-tuned prior",
        smoke={"num_steps": 60, "num_samples": 20},
    )
)
