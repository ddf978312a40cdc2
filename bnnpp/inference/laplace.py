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
   * ``hessian="auto"`` (default): ``kron`` for networks of bnnpp layers, ``full`` otherwise.

   Sites outside θ (the other layers under ``last_layer``, hierarchical prior scales and a
   learned noise sd under GGN) stay at their MAP values. **Hierarchical hyperpriors**: under
   ``full`` with ``subset="all"`` the scales are part of the unconstrained latent vector and
   their curvature is exact (use ``prior_precision="model"``); under ``diag``/``kron`` they are
   fixed at the MAP and the weights' prior precision is δ.
3. **Prior precision** δ: the prior of every real-valued site of θ is replaced by N(0, δ⁻¹ I)
   (sites on a constrained space keep their prior). ``"evidence"`` (default) maximises the
   Laplace log marginal likelihood (MacKay 1992; Immer et al. 2021, eq. 4)

       log Z(δ, σ) = log p(y | θ*, σ) + log p_δ(θ*) + (P/2) log 2π − ½ log det(s(σ) H_lik + δ D)

   over δ — and over the observation sd σ of a Gaussian likelihood whose noise is a latent site
   ``noise`` outside θ, with s(σ) = σ_MAP² / σ² (the likelihood curvature of a Gaussian scales
   with 1/σ²) — by Adam on (log δ, log σ) over the eigenvalues of the curvature (diag: the
   diagonal; kron: products of the factors' eigenvalues; full: of H_lik, or of its Schur
   complement when θ also holds constrained sites). A number fixes δ; ``"model"`` keeps the
   model's own prior (``full`` only): the exact Laplace of the model's posterior.
   ``"validation"`` (diag/kron) starts from the evidence's δ and multiplies it by the factor c
   of :data:`VALIDATION_FACTORS` (10⁻² … 10³) whose linearised predictive has the highest log
   predictive density on ``validation_data`` — laplace-torch's grid search (Daxberger et al.
   2021, §4), for networks whose evidence-optimal δ predicts under-confidently (MNIST 2×400
   over every layer, measured in ``benchmarks/README.md``).
4. **Draws and prediction**: ``num_samples`` draws θ ~ N(θ*, H⁻¹) with the other sites at their
   MAP (and a learned noise sd at its evidence value). ``predictive="mc"`` predicts through the
   network at the draws; ``"linearised"`` (default) uses the GLM predictive of Immer, Korzepa &
   Bauer (2021, eq. 6): f_lin(x, θ) = f(x, θ*) + J(x)(θ − θ*) at the draws. Classification:
   ``link="mc"`` (default) gives each draw softmax(f_lin) — a Monte-Carlo estimate of the GLM
   predictive that keeps the covariance between the classes' logits, with spread between
   draws (``mutual_information`` > 0); ``link="probit"`` is the probit approximation
   (MacKay 1992; multiclass: Lu, Ie & Sha 2020, eq. 7), softmax(f* / sqrt(1 + π/8 · v)) with v
   the per-class variance of f_lin, the same prediction for every draw; by ignoring the
   covariance between logits it moves more decisions away from the MAP's
   (``benchmarks/README.md``). PSIS-LOO / WAIC score this predictive: ``Posterior.log_likelihood`` of a
   linearised fit is the per-draw log predictive density of the training labels.

The log marginal likelihood at the chosen δ (and σ) is ``info["log_marginal_likelihood"]``
and the per-draw ``sample_stats["log_marginal_likelihood"]``; ``info`` also holds
``prior_precision``, ``noise`` (the σ used, Gaussian likelihoods), ``hessian``,
``laplace_parameters`` (P) and ``laplace_seconds``. Memory: ``diag`` and ``kron`` keep O(P)
numbers plus the factors ((in+1)² + out² per layer); ``full`` keeps two P × P matrices.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import optax
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.distributions.transforms import biject_to
from numpyro.primitives import Messenger

from bnnpp.inference import map_estimate
from bnnpp.inference.checkpoints import Checkpointing
from bnnpp.inference.joint import constrained_values, latent_trace, log_likelihood, site_log_prior
from bnnpp.inference.options import check_validation_data, check_validation_pair, option, positive_int
from bnnpp.inference.registry import Method, register
from bnnpp.inference.runner import run
from bnnpp.inference.variational_layers import find_layers
from bnnpp.introspection import improper_as_zeros, latent_sites, num_parameters, unwrap
from bnnpp.models.layers import CONV_DIMENSION_NUMBERS, LAYER_EFFECT
from bnnpp.posterior import Posterior, Prediction
from bnnpp.posterior.approximation import FAMILIES, Approximation

__all__ = ["MAX_FULL_PARAMETERS", "LaplaceGaussian", "LaplaceOptions", "fit"]

MAX_FULL_PARAMETERS = 3000
"""``hessian="full"`` is refused above this many Laplace parameters: it computes P Hessian-vector
products over the full data and keeps two P × P float32 matrices (72 MB at the limit)."""

HESSIANS = ("auto", "full", "diag", "kron")
SCALE_SUFFIXES = (".scale", ".variance")  # bnnpp hyperprior sites (bnnpp.priors)


def prior_precision_check(name: str, value) -> None:
    """``"evidence"``, ``"model"``, ``"validation"`` or a positive number (also as a string, from the CLI)."""
    if value in ("evidence", "model", "validation"):
        return
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be 'evidence', 'model', 'validation' or a positive number such as 1.0, got {value!r}")


@dataclass(frozen=True)
class LaplaceOptions(map_estimate.MAPOptions):
    """Options of ``method="laplace"``: the MAP fit's (those of ``map``), then the Laplace's."""

    subset: str = option("all", "Laplace over every latent site or the last layer's weights", choices=("all", "last_layer"))
    hessian: str = option("auto", "curvature: exact Hessian, GGN diagonal or K-FAC (auto: kron for bnnpp networks)", choices=HESSIANS)
    prior_precision: str | float = option(
        "evidence", "'evidence' (maximise the marginal likelihood), 'model' (full only) or a number",
        check=prior_precision_check, type=str,
    )
    prior_structure: str = option("scalar", "one prior precision for all weights, or one per layer (diag/kron)", choices=("scalar", "layerwise"))
    predictive: str = option("linearised", "predict with the linearised network (GLM, probit) or through it", choices=("linearised", "mc"))
    link: str = option(
        "mc", "classification under predictive='linearised': the probit approximation, or the mean softmax over GLM draws",
        choices=("probit", "mc"),
    )
    num_samples: int = option(100, "posterior draws kept (per chain for MCMC)", check=positive_int)
    curvature_batch_size: int = option(256, "rows per batch of the curvature pass", check=positive_int)
    validation_data: Any = option(None, "(x_val, y_val): prior_precision='validation' picks δ by their log predictive density", flag=False)  # noqa: RUF009

    def check(self) -> None:
        super().check()
        check_validation_pair(self.validation_data)
        if self.prior_precision == "validation" and self.validation_data is None:
            raise ValueError("prior_precision='validation' needs validation_data=(x_val, y_val) (the CLI's --validation on MNIST)")

    def check_data(self, x: np.ndarray, y: np.ndarray) -> None:
        super().check_data(x, y)
        check_validation_data(self.validation_data, x)

    @property
    def precision(self) -> str | float:
        """``"evidence"``, ``"model"``, ``"validation"`` or δ as a float."""
        return self.prior_precision if self.prior_precision in ("evidence", "model", "validation") else float(self.prior_precision)


# --------------------------------------------------------------------------------------
# The approximation: a pytree of named arrays, saved as the variational_params group
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaplaceGaussian(Approximation):
    """N(θ*, Σ) on the unconstrained space of the Laplace parameters θ, the other latent sites
    fixed. ``params`` (flat named arrays, the saved form):

    * ``<site>__mean``: θ* of each site of θ (site shape); ``<site>__fixed``: the value of every
      other latent site (unconstrained);
    * ``full``: ``covariance_factor`` ``(P, P)`` with Σ = C Cᵀ over θ flattened site by site;
    * ``diag``: ``<site>__precision`` (site shape), Σ = diag(1 / precision);
    * ``kron``: per layer ``<layer>__kron_qa`` ``(F+1, F+1)``, ``<layer>__kron_qg``
      ``(out, out)`` (eigenvectors of A and G) and ``<layer>__kron_eig`` ``(F+1, out)``, the
      posterior precision's eigenvalues s·λ_A λ_G + δ (F: inputs, kh·kw·in for a convolution);
    * ``prior_precision``, ``noise`` (NaN without a Gaussian likelihood) and
      ``log_marginal_likelihood``: scalars.
    """

    params: dict[str, Any]
    kind: str = "laplace"

    def to_params(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in self.params.items()}

    @classmethod
    def from_params(cls, params: dict[str, np.ndarray], sites) -> LaplaceGaussian:
        """Rebuild from a saved ``variational_params`` group (``sites``: the model's site names)."""
        return cls(dict(params))

    @property
    def structure(self) -> str:
        """``"full"``, ``"diag"`` or ``"kron"``."""
        if "covariance_factor" in self.params:
            return "full"
        return "kron" if any(k.endswith("__kron_eig") for k in self.params) else "diag"

    @property
    def mean(self) -> dict[str, Any]:
        """θ*: site → unconstrained value."""
        return {k[: -len("__mean")]: v for k, v in self.params.items() if k.endswith("__mean")}

    @property
    def fixed(self) -> dict[str, Any]:
        """The latent sites outside θ: site → unconstrained value."""
        return {k[: -len("__fixed")]: v for k, v in self.params.items() if k.endswith("__fixed")}

    def covariance(self) -> np.ndarray:
        """Σ as a dense ``(P, P)`` matrix over θ flattened site by site in sorted order, each
        site row-major (for small models and tests: kron builds (Qa ⊗ Qg) diag(1/eig) (Qa ⊗ Qg)ᵀ
        per layer, with a layer's bias as the last row of its weights)."""
        if self.structure == "full":
            c = np.asarray(self.params["covariance_factor"], np.float64)
            return c @ c.T
        mean = self.mean
        blocks: dict[str, np.ndarray] = {}
        if self.structure == "diag":
            blocks = {k: np.diag(1.0 / np.asarray(self.params[f"{k}__precision"], np.float64).ravel()) for k in mean}
        else:
            cov = {}
            for layer in (k[: -len("__kron_eig")] for k in self.params if k.endswith("__kron_eig")):
                qa, qg, eig = (np.asarray(self.params[f"{layer}__kron_{p}"], np.float64) for p in ("qa", "qg", "eig"))
                q = np.kron(qa, qg)
                full = q @ np.diag(1.0 / eig.ravel()) @ q.T
                rows = np.arange(eig.size).reshape(eig.shape)
                w_idx, b_idx = rows[:-1].ravel(), rows[-1]
                cov[layer] = (full, w_idx, b_idx)
                blocks[f"{layer}.w"] = full[np.ix_(w_idx, w_idx)]
                blocks[f"{layer}.b"] = full[np.ix_(b_idx, b_idx)]
        names = sorted(mean)
        sizes = [int(np.size(mean[k])) for k in names]
        out = np.zeros((sum(sizes), sum(sizes)))
        starts = dict(zip(names, np.cumsum([0, *sizes[:-1]]), strict=True))
        for k in names:
            i = starts[k]
            out[i : i + blocks[k].shape[0], i : i + blocks[k].shape[0]] = blocks[k]
        if self.structure == "kron":  # the weight-bias cross terms of each layer
            for layer, (full, w_idx, b_idx) in cov.items():
                iw, ib = starts[f"{layer}.w"], starts[f"{layer}.b"]
                cross = full[np.ix_(w_idx, b_idx)]
                out[iw : iw + len(w_idx), ib : ib + len(b_idx)] = cross
                out[ib : ib + len(b_idx), iw : iw + len(w_idx)] = cross.T
        return out

    def sample_unconstrained(self, key, num_samples: int) -> dict[str, jax.Array]:
        """``num_samples`` draws of θ ~ N(θ*, Σ): site → ``(num_samples, *site_shape)``
        (unconstrained; the sites of θ only). Traceable."""
        mean = self.mean
        if self.structure == "full":
            flat, unravel = ravel_pytree(mean)
            z = jax.random.normal(key, (num_samples, flat.shape[0]), flat.dtype)
            return jax.vmap(unravel)(flat + z @ jnp.asarray(self.params["covariance_factor"]).T)
        out = {}
        keys = jax.random.split(key, max(1, len(mean)))
        if self.structure == "diag":
            for k, (name, m) in zip(keys, mean.items(), strict=False):
                z = jax.random.normal(k, (num_samples, *jnp.shape(m)))
                out[name] = m + z / jnp.sqrt(self.params[f"{name}__precision"])
            return out
        layers = [k[: -len("__kron_eig")] for k in self.params if k.endswith("__kron_eig")]
        for k, layer in zip(keys, layers, strict=False):
            qa, qg, eig = (jnp.asarray(self.params[f"{layer}__kron_{p}"]) for p in ("qa", "qg", "eig"))
            z = jax.random.normal(k, (num_samples, *eig.shape), eig.dtype)
            delta = jnp.einsum("ia,sab,jb->sij", qa, z / jnp.sqrt(eig), qg)  # Qa (Z / sqrt(eig)) Qgᵀ
            w = mean[f"{layer}.w"]
            out[f"{layer}.w"] = w + delta[:, :-1].reshape(num_samples, *jnp.shape(w))
            out[f"{layer}.b"] = mean[f"{layer}.b"] + delta[:, -1]
        return out

    def predict(self, posterior: Posterior, x: np.ndarray, num_samples: int | None, seed: int) -> Prediction | None:
        """The linearised (GLM) predictive at ``x`` when the fit chose ``predictive="linearised"``,
        else ``None`` (``Posterior.predict`` then predicts through the network at the draws).
        Returns a :class:`Prediction` over S draws (S = ``num_samples`` or the posterior's):
        regression ``draws`` f_lin ``(S, n)`` and ``noise`` ``(S, n)``; classification ``probs``
        ``(S, n, C)``, the probit predictive repeated for every draw."""
        if posterior.stats.options.get("predictive") != "linearised":
            return None
        model = posterior.model_or_raise()
        s = int(num_samples or posterior.num_chains * posterior.num_draws)
        key = ("laplace_linearised", s, posterior.stats.options.get("link", "probit"))
        if key not in posterior._jitted:
            link = posterior.stats.options.get("link", "probit")
            posterior._jitted[key] = jax.jit(lambda p, k, xs: _linearised(model, LaplaceGaussian(p), k, xs, s, link))
        out = jax.device_get(posterior._jitted[key](self.params, jax.random.PRNGKey(seed), x))
        if "probs" in out:
            return Prediction("classification", probs=np.asarray(out["probs"]))
        return Prediction("regression", draws=np.asarray(out["loc"]), noise=np.asarray(out["scale"]))


jax.tree_util.register_dataclass(LaplaceGaussian, data_fields=["params"], meta_fields=["kind"])
FAMILIES[LaplaceGaussian.kind] = LaplaceGaussian.from_params


# --------------------------------------------------------------------------------------
# The model's output: the natural parameter of its observation site
# --------------------------------------------------------------------------------------

_KEY = np.zeros(2, np.uint32)  # the models draw nothing random at a fixed position (as map)


def _observation(trace) -> tuple[str, jax.Array, jax.Array | None]:
    """``(likelihood, f, sd)`` of the site ``"y"``: ``"categorical"`` logits ``(n, C)``,
    ``"bernoulli"`` logits ``(n,)`` or ``"gaussian"`` mean with its sd, both of the targets'
    shape ``(n,)`` or ``(n, K)`` (a ``.to_event(1)`` site)."""
    fn = unwrap(trace["y"]["fn"])
    n = jnp.shape(trace["y"]["value"])[0]
    if isinstance(fn, dist.CategoricalLogits):
        return "categorical", jnp.broadcast_to(fn.logits, (n, fn.logits.shape[-1])), None
    if isinstance(fn, dist.BernoulliLogits):
        return "bernoulli", jnp.broadcast_to(fn.logits, (n,)), None
    if isinstance(fn, dist.Normal):
        shape = jnp.shape(trace["y"]["value"])
        return "gaussian", jnp.broadcast_to(fn.loc, shape), jnp.broadcast_to(fn.scale, shape)
    raise ValueError(
        f"laplace's GGN and linearised predictive need a Categorical(logits=...), Bernoulli(logits=...) or Normal "
        f"observation site 'y', got {type(fn).__name__}: parameterise it by logits, or use hessian='full' with predictive='mc'"
    )


def _likelihood_kind(model, x, y) -> str:
    """The observation's kind by one abstract trace (no compile); ValueError when unsupported."""
    found = {}

    def probe(xs, ys):
        found["kind"] = _observation(handlers.trace(handlers.substitute(handlers.seed(model, _KEY), substitute_fn=improper_as_zeros)).get_trace(xs, ys))[0]
        return 0

    jax.eval_shape(probe, x[:2], y[:2])
    return found["kind"]


def _linearised(model, approx: LaplaceGaussian, key, x, num_samples: int, link: str = "probit") -> dict:
    """The GLM predictive (module docstring) at ``x``: ``{"probs": (S, n, C)}`` or
    ``{"loc": (S, n), "scale": (S, n)}``. Classification: ``link="probit"`` repeats the probit
    approximation for every draw (no spread between draws, so no mutual information);
    ``link="mc"`` gives each draw its own softmax of the linearised logits, keeping the
    correlations between classes that the probit's per-class variances ignore."""
    mean, fixed = approx.mean, approx.fixed

    def output(theta):
        kind, f, sd = _observation(latent_trace(model, {**fixed, **theta}, x, None, _KEY))
        return f, (kind, sd)

    draws = approx.sample_unconstrained(key, num_samples)
    f0, (kind, _) = output(mean)

    def one(theta):
        _, df = jax.jvp(lambda t: output(t)[0], (mean,), (jax.tree_util.tree_map(jnp.subtract, theta, mean),))
        sd = output(theta)[1][1] if kind == "gaussian" else None
        return f0 + df, sd

    f, sd = jax.lax.map(one, draws, batch_size=min(num_samples, 16))
    if kind == "gaussian":
        return {"loc": f, "scale": sd}
    if link == "mc":
        if kind == "categorical":
            return {"probs": jax.nn.softmax(f, axis=-1)}
        p = jax.nn.sigmoid(f)
        return {"probs": jnp.stack([1 - p, p], axis=-1)}
    var = jnp.mean((f - f0) ** 2, axis=0)  # the variance of f_lin over the draws (its mean is f0)
    z = f0 / jnp.sqrt(1.0 + jnp.pi / 8.0 * var)
    if kind == "categorical":
        probs = jax.nn.softmax(z, axis=-1)
    else:
        p = jax.nn.sigmoid(z)
        probs = jnp.stack([1 - p, p], axis=-1)
    return {"probs": jnp.broadcast_to(probs, (num_samples, *probs.shape))}


# --------------------------------------------------------------------------------------
# GGN curvature of bnnpp layers: inputs and output gradients captured inside the model
# --------------------------------------------------------------------------------------


class _Capture(Messenger):
    """Answer the messages of the layers in ``eps`` with their default (``x @ w + b`` or the
    convolution) plus ``eps[layer]`` (zeros: its gradient is the output gradient g), and
    record each layer's input (``inputs``) and output shape (``shapes``)."""

    def __init__(self, fn, eps: dict | None, names):
        super().__init__(fn)
        self.eps, self.names = eps, names
        self.inputs: dict = {}
        self.shapes: dict = {}

    def process_message(self, msg):
        if msg["type"] != LAYER_EFFECT or msg["value"] is not None or msg["layer"] not in self.names:
            return
        h = msg["fn"](*msg["args"], **msg["kwargs"])
        name = msg["layer"]
        self.inputs[name] = msg["args"][1]
        self.shapes[name] = jnp.shape(h)
        msg["value"] = h if self.eps is None else h + self.eps[name]


def _patches(x, layer: dict):
    """``(n, T, F + 1)``: the layer's inputs with a trailing 1 (bias), for a convolution its
    patches with features in the kernel's ``(kh, kw, in)`` order."""
    if layer["kind"] == "dense":
        a = x.reshape(x.shape[0], 1, x.shape[-1])
    else:
        kh, kw = layer["kernel_size"]
        p = jax.lax.conv_general_dilated_patches(
            x, (kh, kw), layer["stride"], layer["padding"], dimension_numbers=CONV_DIMENSION_NUMBERS
        )  # (n, h', w', in·kh·kw), features ordered (in, kh, kw)
        n, h, w, _ = p.shape
        a = p.reshape(n, h, w, x.shape[-1], kh, kw).transpose(0, 1, 2, 4, 5, 3).reshape(n, h * w, kh * kw * x.shape[-1])
    return jnp.concatenate([a, jnp.ones((*a.shape[:2], 1), a.dtype)], axis=-1)


def _lambda_sqrt(kind: str, f, sd):
    """Columns of a square root of Λ = −∂² log p(y | f) / ∂f², ``(K, n, *f.shape[1:])``:
    softmax: diag(√p) − p √pᵀ (Λ = diag(p) − p pᵀ); Bernoulli: √(p(1 − p)); Gaussian: 1/σ."""
    if kind == "categorical":
        p = jax.nn.softmax(f, axis=-1)
        r = jnp.sqrt(p)
        eye = jnp.eye(f.shape[-1], dtype=f.dtype)
        cols = r[:, None, :] * eye[None] - p[:, :, None] * r[:, None, :]  # (n, C out, C col)
        return jnp.moveaxis(cols, -1, 0)
    if kind == "bernoulli":
        p = jax.nn.sigmoid(f)
        return jnp.sqrt(p * (1 - p))[None]
    return (1.0 / sd)[None]


def _ggn(model, u, x, y, layers: dict, structure: str, batch: int):
    """The GGN of the layers' weights at ``u`` over ``(x, y)``, in batches of ``batch`` rows.

    Returns ``(curv, stats)``: ``curv`` layer → ``{"diag": (F+1, out)}`` or
    ``{"A": (F+1, F+1), "G": (out, out)}`` (module docstring); ``stats``: ``loglik`` (Σ log p(y
    | θ*)), ``ssr`` (Σ (y − f)², Gaussian) and ``n``."""
    names = tuple(layers)

    static = {}  # python facts of the trace: the likelihood's kind, the layers' output shapes

    def forward(xb, yb, eps):
        holder = {}

        def capture(m):
            holder["c"] = _Capture(m, eps, names)
            return holder["c"]

        trace = latent_trace(model, u, xb, yb, _KEY, extra_handlers=(capture,))
        kind, f, sd = _observation(trace)
        static["kind"], static["shapes"] = kind, holder["c"].shapes
        ssr = jnp.sum((yb - f) ** 2) if kind == "gaussian" else jnp.zeros(())
        return f, (holder["c"].inputs, sd, log_likelihood(trace), ssr)

    def shapes_for(rows):
        jax.eval_shape(lambda xb, yb: forward(xb, yb, None)[0], x[:rows], y[:rows])
        return dict(static["shapes"])

    def one_batch(xb, yb, shapes):
        eps0 = {k: jnp.zeros(s, x.dtype) for k, s in shapes.items()}
        f, vjp, (inputs, sd, ll, ssr) = jax.vjp(lambda e: forward(xb, yb, e), eps0, has_aux=True)
        cols = _lambda_sqrt(static["kind"], f, sd)
        grads = jax.vmap(lambda c: vjp(c)[0])(cols)  # layer → (K, B, *out_shape)
        acc = {}
        for name in names:
            a = _patches(inputs[name], layers[name])  # (B, T, F+1)
            g = grads[name].reshape(cols.shape[0], a.shape[0], a.shape[1], -1)  # (K, B, T, out)
            if structure == "kron":
                acc[name] = {"A": jnp.einsum("bti,btj->ij", a, a), "G": jnp.einsum("kbto,kbtp->op", g, g) / a.shape[1]}
            else:  # per-example gradients of each column, squared
                acc[name] = {"diag": jnp.sum(jnp.einsum("bti,kbto->kbio", a, g) ** 2, axis=(0, 1))}
        return acc, ll, ssr

    n = x.shape[0]
    full, rest = divmod(n, batch)
    total = None
    if full:
        shapes = shapes_for(batch)
        xs = x[: full * batch].reshape(full, batch, *x.shape[1:])
        ys = y[: full * batch].reshape(full, batch, *y.shape[1:])

        def body(carry, b):
            acc, ll, ssr = one_batch(b[0], b[1], shapes)
            return jax.tree_util.tree_map(jnp.add, carry, (acc, ll, ssr)), None

        init = jax.tree_util.tree_map(jnp.zeros_like, jax.eval_shape(lambda: one_batch(xs[0], ys[0], shapes)))
        total, _ = jax.lax.scan(body, init, (xs, ys))
    if rest:
        last = one_batch(x[full * batch :], y[full * batch :], shapes_for(rest))
        total = last if total is None else jax.tree_util.tree_map(jnp.add, total, last)
    curv, ll, ssr = total
    if structure == "kron":
        curv = {k: {"A": v["A"] / n, "G": v["G"]} for k, v in curv.items()}
    return curv, {"loglik": ll, "ssr": ssr}


# --------------------------------------------------------------------------------------
# The evidence: log Z over log δ (and log σ) from the curvature's eigenvalues
# --------------------------------------------------------------------------------------


def _evidence(eig, groups: np.ndarray, sizes, theta_sq, loglik_of, const, fixed_delta, tune_sigma: bool, log_sigma0, steps: int = 600):
    """Maximise log Z(ρ = log δ, τ = log σ) = loglik(τ) + Σ_g [(P_g/2) ρ_g − e^{ρ_g} ‖θ*_g‖²/2]
    − ½ Σ_i log(s(τ)·e_i + e^{ρ_{g(i)}}) + const over the prior precisions δ_g of the groups g
    (one, or one per layer), with s(τ) = exp(2 τ₀ − 2τ), by Adam (a cosine-decayed step from
    0.1) from ρ₀ = log(P_g / ‖θ*_g‖²) and τ₀ the MAP's σ. ``fixed_delta``: ρ is not optimised.

    Args:
        eig: curvature eigenvalues ``(E,)``; groups: each one's group ``(E,)`` (static ints).
        sizes, theta_sq: per group, its replaced coordinates P_g and ‖θ*_g‖² ``(G,)``.

    Returns ``(δ (G,), σ, log Z)`` (σ = exp(τ₀) unless tuned)."""
    eig = jnp.maximum(eig, 0.0)
    sizes = jnp.asarray(sizes, jnp.float32)
    theta_sq = jnp.asarray(theta_sq, jnp.float32)

    def log_z(params):
        rho, tau = params
        s = jnp.exp(2 * (log_sigma0 - tau))
        prior = jnp.sum(0.5 * sizes * rho - 0.5 * jnp.exp(rho) * theta_sq)
        return loglik_of(tau) + prior - 0.5 * jnp.sum(jnp.log(s * eig + jnp.exp(rho)[groups])) + const

    if fixed_delta is not None:
        rho0 = jnp.full(sizes.shape, jnp.log(fixed_delta))
    else:
        rho0 = jnp.log(jnp.maximum(sizes, 1) / jnp.maximum(theta_sq, 1e-12))
    params = (rho0.astype(jnp.float32), jnp.asarray(log_sigma0, jnp.float32))
    free = (fixed_delta is None, tune_sigma)
    if any(free):
        opt = optax.adam(optax.cosine_decay_schedule(0.1, steps, 0.01))

        def step(carry, _):
            prm, state = carry
            grads = jax.grad(lambda q: -log_z(q))(prm)
            grads = tuple(g if f else jnp.zeros_like(g) for g, f in zip(grads, free, strict=True))
            upd, state = opt.update(grads, state, prm)
            return (optax.apply_updates(prm, upd), state), None

        (params, _), _ = jax.lax.scan(step, (params, opt.init(params)), None, length=steps)
    return jnp.exp(params[0]), jnp.exp(params[1]), log_z(params)


# --------------------------------------------------------------------------------------
# Planning: which sites, which curvature — checked before anything compiles
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    hessian: str
    subset: tuple[str, ...]  # sites of θ, in trace order
    layers: dict  # layer → facts (GGN), in trace order
    replaced: tuple[str, ...]  # sites of θ whose prior is N(0, 1/δ)
    likelihood: str
    tune_sigma: bool


def plan(model, x, y, options: LaplaceOptions) -> _Plan:
    """Resolve ``hessian="auto"`` and the sites of θ; ValueError (one line, naming the fix) for
    an unsupported model/option combination or a full Hessian above
    :data:`MAX_FULL_PARAMETERS`. Abstract tracing only: nothing compiles."""
    sites = latent_sites(model, x, y)
    layers = {}
    for name, facts in _find_layers(model, x, y).items():
        if f"{name}.w" in sites and f"{name}.b" in sites:
            layers[name] = facts
    hessian = options.hessian
    if hessian == "auto":
        hessian = "kron" if layers else "full"
    if options.subset == "last_layer":
        if not layers:
            raise ValueError("subset='last_layer' needs a network of bnnpp dense/conv2d layers; this model has none: use subset='all'")
        last = list(layers)[-1]
        layers = {last: layers[last]}
    if hessian in ("diag", "kron"):
        if not layers:
            raise ValueError(
                f"hessian={hessian!r} (GGN) works on the weights of bnnpp dense/conv2d layers and this model has none "
                f"(Flax modules included): use hessian='full' (exact Hessian, up to {MAX_FULL_PARAMETERS:,} parameters)"
            )
        if options.precision == "model":
            raise ValueError(f"prior_precision='model' needs hessian='full'; hessian={hessian!r} takes 'evidence' or a number")
        if options.precision == "validation" and options.predictive != "linearised":
            raise ValueError("prior_precision='validation' scores the linearised predictive: use predictive='linearised'")
        subset = tuple(s for name in layers for s in (f"{name}.w", f"{name}.b"))
    else:
        if options.prior_structure == "layerwise":
            raise ValueError("prior_structure='layerwise' needs hessian='diag' or 'kron' (the full Hessian takes one prior precision)")
        if options.precision == "validation":
            raise ValueError("prior_precision='validation' needs hessian='diag' or 'kron'; the full Hessian takes 'evidence', 'model' or a number")
        subset = tuple(sites) if options.subset == "all" else tuple(s for name in layers for s in (f"{name}.w", f"{name}.b"))
        size = num_parameters({k: sites[k] for k in subset})
        if size > MAX_FULL_PARAMETERS:
            raise ValueError(
                f"hessian='full' on {size:,} parameters is refused above {MAX_FULL_PARAMETERS:,} (P Hessian-vector products, "
                "P x P matrices): use hessian='kron' or 'diag', or subset='last_layer'"
            )
    likelihood = _likelihood_kind(model, x, y) if (hessian != "full" or options.predictive == "linearised") else "other"
    replaced: tuple[str, ...] = ()
    if options.precision != "model":
        supports = _supports(model, x, y)
        replaced = tuple(s for s in subset if _is_real(supports[s]))
        scales = [s for s in subset if s.endswith(SCALE_SUFFIXES)]
        if hessian == "full" and scales:
            raise ValueError(
                f"the latent vector holds the hierarchical prior scale(s) {', '.join(scales)}; a prior_precision other than "
                "'model' would cut them off from the weights: use prior_precision='model' (or hessian='kron', scales fixed at the MAP)"
            )
    tune_sigma = (
        options.precision == "evidence" and likelihood == "gaussian" and "noise" in sites and "noise" not in subset
        and set(replaced) == set(subset)
    )
    return _Plan(hessian, subset, layers, replaced, likelihood, tune_sigma)


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


# --------------------------------------------------------------------------------------
# The Laplace approximation at the MAP
# --------------------------------------------------------------------------------------


def _gaussian_loglik(n, ssr):
    return lambda tau: -n * tau - 0.5 * n * jnp.log(2 * jnp.pi) - ssr / (2 * jnp.exp(2 * tau))


def _laplace(model, x, y, u, p: _Plan, options: LaplaceOptions) -> dict:
    """The approximation's params (see :class:`LaplaceGaussian`) at the MAP ``u``, traceable."""
    theta = {k: u[k] for k in sorted(p.subset)}  # sorted: the flattening order of ravel_pytree
    fixed = {k: v for k, v in u.items() if k not in theta}
    fixed_delta = None if options.precision in ("evidence", "model", "validation") else jnp.float32(options.precision)
    n = x.shape[0]
    params = {**{f"{k}__mean": v for k, v in theta.items()}, **{f"{k}__fixed": v for k, v in fixed.items()}}
    if p.hessian == "full":
        flat, unravel = ravel_pytree(theta)
        mask = jnp.concatenate([jnp.full(jnp.size(v), k in p.replaced, bool) for k, v in theta.items()])

        def parts(t):
            trace = latent_trace(model, {**fixed, **unravel(t)}, x, y, _KEY)
            rest = sum(
                (site_log_prior(s) for k, s in trace.items() if s["type"] == "sample" and not s["is_observed"] and k not in p.replaced),
                jnp.zeros(()),
            )
            return log_likelihood(trace), rest

        def hvp(v):
            return tuple(-jax.jvp(jax.grad(lambda t, i=i: parts(t)[i]), (flat,), (v,))[1] for i in range(2))

        h_lik, h_rest = jax.lax.map(hvp, jnp.eye(flat.shape[0], dtype=flat.dtype), batch_size=16)
        h_lik, h_rest = (0.5 * (h + h.T) for h in (h_lik, h_rest))
        loglik, log_rest = parts(flat)
        h0 = h_lik + h_rest
        r_idx, k_idx = np.flatnonzero(_mask_np(theta, p.replaced)), np.flatnonzero(~_mask_np(theta, p.replaced))
        theta_sq = jnp.sum(jnp.where(mask, flat, 0.0) ** 2)
        if k_idx.size and r_idx.size:  # log det(H0 + δD) = log det H_KK + log det(S + δ I), S the Schur complement
            hkk = h0[np.ix_(k_idx, k_idx)]
            hrk = h0[np.ix_(r_idx, k_idx)]
            eig = jnp.linalg.eigvalsh(h0[np.ix_(r_idx, r_idx)] - hrk @ jnp.linalg.solve(hkk, hrk.T))
            const = log_rest + 0.5 * k_idx.size * jnp.log(2 * jnp.pi) - 0.5 * jnp.linalg.slogdet(hkk)[1]
        elif r_idx.size:
            eig = jnp.linalg.eigvalsh(h0)
            const = log_rest
        else:  # prior_precision="model", or no real-valued site: the model's prior throughout
            eig = jnp.zeros((0,), flat.dtype)
            const = log_rest + 0.5 * flat.shape[0] * jnp.log(2 * jnp.pi) - 0.5 * jnp.sum(jnp.log(jnp.maximum(jnp.linalg.eigvalsh(h0), 1e-30)))
        sigma0 = jnp.log(_noise_of(model, u, x)) if p.tune_sigma else jnp.zeros(())
        loglik_of = (lambda tau: loglik) if not p.tune_sigma else _gaussian_loglik(n, _ssr(model, u, x, y))
        delta, sigma, log_z = _evidence(
            eig, np.zeros(eig.shape[0], np.int32), [r_idx.size], jnp.stack([theta_sq]), loglik_of, const, fixed_delta, p.tune_sigma, sigma0
        )
        delta = delta[0]
        scale = jnp.exp(2 * (sigma0 - jnp.log(sigma))) if p.tune_sigma else 1.0
        h = scale * h_lik + h_rest + jnp.diag(jnp.where(mask, delta, 0.0))
        e, q = jnp.linalg.eigh(0.5 * (h + h.T))
        e = jnp.maximum(e, 1e-6 * jnp.max(jnp.abs(e)))  # an indefinite direction (not a strict optimum) gets a tiny curvature
        params["covariance_factor"] = q / jnp.sqrt(e)
    else:
        curv, stats = _ggn(model, u, x, y, p.layers, p.hessian, options.curvature_batch_size)
        sigma0 = jnp.log(_noise_of(model, u, x)) if p.tune_sigma else jnp.zeros(())
        if p.hessian == "diag":
            eig = jnp.concatenate([c["diag"].ravel() for c in curv.values()])
        else:
            factors = {k: (jnp.linalg.eigh(c["A"]), jnp.linalg.eigh(c["G"])) for k, c in curv.items()}
            eig = jnp.concatenate([jnp.outer(jnp.maximum(a[0], 0), jnp.maximum(g[0], 0)).ravel() for a, g in factors.values()])
        layerwise = options.prior_structure == "layerwise"
        sizes = [int(np.prod(jnp.shape(theta[f"{k}.w"]))) + int(np.prod(jnp.shape(theta[f"{k}.b"]))) for k in curv]
        sq = [jnp.sum(theta[f"{k}.w"] ** 2) + jnp.sum(theta[f"{k}.b"] ** 2) for k in curv]
        if not layerwise:
            sizes, sq = [sum(sizes)], [sum(sq)]
        groups = np.repeat(np.arange(len(curv)) if layerwise else np.zeros(len(curv), np.int32), [
            int(np.prod(jnp.shape(theta[f"{k}.w"]))) + int(np.prod(jnp.shape(theta[f"{k}.b"]))) for k in curv
        ]).astype(np.int32)
        loglik_of = _gaussian_loglik(n, stats["ssr"]) if p.tune_sigma else (lambda tau: stats["loglik"])
        deltas, sigma, log_z = _evidence(eig, groups, sizes, jnp.stack(sq), loglik_of, 0.0, fixed_delta, p.tune_sigma, sigma0)
        delta = deltas if layerwise else deltas[0]
        scale = jnp.exp(2 * (sigma0 - jnp.log(sigma))) if p.tune_sigma else 1.0
        for i, (name, c) in enumerate(curv.items()):
            delta_l = deltas[i] if layerwise else deltas[0]
            if p.hessian == "diag":
                prec = scale * c["diag"] + delta_l
                w_shape = jnp.shape(theta[f"{name}.w"])
                params[f"{name}.w__precision"] = prec[:-1].reshape(w_shape)
                params[f"{name}.b__precision"] = prec[-1]
            else:
                (la, qa), (lg, qg) = factors[name]
                params[f"{name}__kron_qa"], params[f"{name}__kron_qg"] = qa, qg
                params[f"{name}__kron_eig"] = scale * jnp.outer(jnp.maximum(la, 0), jnp.maximum(lg, 0)) + delta_l
    if p.tune_sigma:
        params["noise__fixed"] = biject_to(dist.constraints.positive).inv(sigma)
    params["prior_precision"] = jnp.asarray(jnp.nan if options.precision == "model" else delta, jnp.float32)
    noise = sigma if p.tune_sigma else (_noise_of(model, u, x) if p.likelihood == "gaussian" else jnp.nan)
    params["noise"] = jnp.asarray(noise, jnp.float32)
    params["log_marginal_likelihood"] = jnp.asarray(log_z, jnp.float32)
    return params


def _mask_np(theta: dict, replaced) -> np.ndarray:
    return np.concatenate([np.full(int(np.prod(jnp.shape(v))), k in replaced, bool) for k, v in theta.items()])


def _noise_of(model, u, x):
    """The observation sd at ``u`` (its mean over one row block: bnnpp's models are homoscedastic)."""
    return jnp.mean(_observation(latent_trace(model, u, x[:1], None, _KEY))[2])


def _ssr(model, u, x, y):
    _, f, _ = _observation(latent_trace(model, u, x, None, _KEY))
    return jnp.sum((y - f) ** 2)


# --------------------------------------------------------------------------------------
# fit
# --------------------------------------------------------------------------------------


VALIDATION_FACTORS = tuple(float(c) for c in 10.0 ** np.linspace(-2, 3, 16))
"""The factors c (10⁻² … 10³, three per decade) by which ``prior_precision="validation"``
multiplies the evidence's δ."""
VALIDATION_ROWS, VALIDATION_DRAWS = 2000, 16  # the grid's cost: 16 × 16 linearised draws over ≤ 2,000 rows


def _with_prior_factor(params: dict, layers: list[str], factor: float) -> dict:
    """``params`` (diag/kron) with every layer's δ multiplied by ``factor``, the curvature kept:
    the stored posterior precision is curvature + δ (per layer or shared)."""
    delta = np.asarray(params["prior_precision"], np.float64)
    out = dict(params)
    for i, name in enumerate(layers):
        d = float(delta[i] if delta.ndim else delta)
        for key in (f"{name}__kron_eig", f"{name}.w__precision", f"{name}.b__precision"):
            if key in params:
                out[key] = (np.asarray(params[key], np.float64) + (factor - 1.0) * d).astype(np.float32)
    out["prior_precision"] = (delta * factor).astype(np.float32)
    return out


def _tune_on_validation(model, params: dict, layers: list[str], options: LaplaceOptions, key) -> tuple[dict, dict]:
    """``prior_precision="validation"``: the factor of :data:`VALIDATION_FACTORS` whose linearised
    predictive has the highest log predictive density Σ_i log (1/S) Σ_s p(y_i | f_lin,s(x_i)) on
    (the first :data:`VALIDATION_ROWS` rows of) ``validation_data``, with the same draws for
    every factor. Returns the params at the chosen δ and the facts for ``info``."""
    xv, yv = (np.asarray(a) for a in options.validation_data)
    xv, yv = xv[:VALIDATION_ROWS].astype(np.float32), yv[:VALIDATION_ROWS]

    @jax.jit
    def log_predictive_density(pr):
        out = _linearised(model, LaplaceGaussian(pr), key, xv, VALIDATION_DRAWS, options.link)
        if "probs" in out:
            p_y = jnp.take_along_axis(out["probs"], jnp.asarray(yv, jnp.int32)[None, :, None], axis=-1)[..., 0]
            return jnp.sum(jnp.log(jnp.maximum(jnp.mean(p_y, axis=0), 1e-30)))
        logpdf = dist.Normal(out["loc"], out["scale"]).log_prob(jnp.asarray(yv, jnp.float32))
        return jnp.sum(jax.nn.logsumexp(logpdf, axis=0) - jnp.log(VALIDATION_DRAWS))

    scores = [float(log_predictive_density(_with_prior_factor(params, layers, c))) for c in VALIDATION_FACTORS]
    best = int(np.nanargmax(scores))
    facts = {
        "evidence_prior_precision": _precision_info(params["prior_precision"], options),
        "validation_factors": list(VALIDATION_FACTORS), "validation_log_density": scores,
    }
    return _with_prior_factor(params, layers, VALIDATION_FACTORS[best]), facts


def _precision_info(value, options: LaplaceOptions):
    """δ for ``info``: None (model prior), a float, or a list (one per layer)."""
    if options.precision == "model":
        return None
    return [float(v) for v in np.ravel(value)] if np.ndim(value) else float(value)


def _unconstrain(model, values: dict, x, y) -> dict:
    """Unconstrained values of constrained latent values (the MAP's draw)."""
    supports = _supports(model, x, y)
    return {k: biject_to(supports[k]).inv(jnp.asarray(v)) for k, v in values.items()}


def fit(
    model, x, y, options: LaplaceOptions, *, seed: int, progress: bool, checkpoint: Checkpointing | None = None,
    resume: bool = False,
) -> Posterior:
    """The MAP (the ``map`` algorithm through the runner), then the Laplace approximation.

    Returns:
        A :class:`Posterior` with ``num_samples`` draws ``(1, num_samples, *site_shape)`` of every
        latent site, ``approximation`` a :class:`LaplaceGaussian`, the MAP's loss trace in
        ``stats.traces`` and the Laplace facts in ``stats.extras`` / ``sample_stats`` (module
        docstring).

    Raises:
        ValueError: an unsupported combination (see :func:`plan`), before the MAP runs.
    """
    p = plan(model, x, y, options)
    map_options = map_estimate.MAPOptions(**{k: getattr(options, k) for k in map_estimate.MAPOptions.names()})
    algorithm = map_estimate.build(model, x, y, map_options)._replace(name="laplace (MAP)")
    found = run(
        algorithm, model, x, y, method="laplace", seed=seed, options=options.as_dict(), progress=progress,
        chunk_size=options.chunk_size, checkpoint=checkpoint, resume=resume,
    )
    t0 = time.perf_counter()
    u = _unconstrain(model, {k: v[0, 0] for k, v in found.samples.items()}, x, y)
    xj, yj = jax.device_put(x), jax.device_put(y)
    sites = list(found.samples)

    @jax.jit
    def draw(params, key):
        approx = LaplaceGaussian(params)
        theta = approx.sample_unconstrained(key, options.num_samples)
        return jax.vmap(lambda t: constrained_values(model, {**approx.fixed, **t}, xj[:1], yj[:1], _KEY, sites))(theta)

    key = jax.random.fold_in(jax.random.PRNGKey(seed), 15)
    params = jax.device_get(jax.jit(lambda u: _laplace(model, xj, yj, u, p, options))(u))
    tuned = {}
    if options.precision == "validation":
        params, tuned = _tune_on_validation(model, params, list(p.layers), options, jax.random.fold_in(key, 1))
    draws = jax.device_get(draw(params, key))
    approx = LaplaceGaussian({k: np.asarray(v) for k, v in params.items()})
    seconds = time.perf_counter() - t0
    lml = float(params["log_marginal_likelihood"])
    extras = {
        **found.stats.extras, "hessian": p.hessian, "subset": list(p.subset), "laplace_parameters": int(num_parameters({k: found.sites[k] for k in p.subset})),
        "log_marginal_likelihood": lml, "prior_precision": _precision_info(params["prior_precision"], options),
        "noise": None if not np.isfinite(params["noise"]) else float(params["noise"]), "laplace_seconds": seconds, **tuned,
    }
    stats = replace(
        found.stats, extras=extras, sample_seconds=found.stats.sample_seconds + seconds,
        sample_stats={"log_marginal_likelihood": np.full((1, options.num_samples), lml, np.float32)},
    )
    samples = {k: np.asarray(v)[None] for k, v in draws.items()}
    return Posterior(samples, stats, model, x, y, found.sites, approx)


register(Method("laplace", LaplaceOptions, fit=fit, summary="Gaussian around the MAP: GGN/K-FAC or exact Hessian, evidence-tuned prior"))
