"""``vd``: Gaussian dropout, variational dropout and sparse variational dropout over the
weights of bnnpp layers, with the log-uniform prior.

**The family.** Every weight ``w_ij`` of every bnnpp dense / conv2d layer has the factor
q(w_ij) = N(θ_ij, α_ij θ_ij²) — multiplicative Gaussian noise, w = θ(1 + √α ε) (Kingma,
Salimans & Welling 2015, §3). ``variant`` says what α is:

* ``"gaussian_dropout"`` (Srivastava et al. 2014; Wang & Manning 2013): one fixed α
  (option ``alpha``) for every weight; only θ is trained.
* ``"variational"`` (Kingma et al. 2015, §3.3): one α per layer, learnt with θ and clipped at
  α ≤ 1 (log α ≤ 0) as in that paper, whose polynomial KL approximation holds only there
  (every variant here uses Molchanov et al.'s approximation below, valid for all α).
* ``"sparse"`` (Molchanov, Ashukha & Vetrov 2017): one α per weight, unbounded. The
  parameters are θ and log σ² with σ² = α θ² (their *additive noise* reparameterisation, §4.1:
  w = θ + σ ε), so the gradient of the data term does not carry the huge variance of
  θ √α ε when α ≫ 1. log α = log σ² − log θ², clipped to [−10, 10] where it enters the KL.

Every layer's pre-activations are drawn with the local reparameterisation trick (Kingma et
al. 2015, §2.3; for convolutions as in Molchanov et al. 2017), through
:func:`bnnpp.inference.variational_layers.dense_preactivations` / ``conv_preactivations``:
N(x·θ + b, x²·σ² + 10⁻⁸) per example (the 10⁻⁸, a bias sd of 10⁻⁴, keeps the square root
differentiable for an all-zero input row). Biases, prior scales and every other latent site are point
estimates (MAP on the unconstrained space under the model's own prior, as ``method="map"``);
the model's weight prior is replaced by the log-uniform prior.

**The prior and the objective.** The prior of every weight is the log-uniform
p(|w|) ∝ 1/|w|, the only prior under which Gaussian dropout's noise is variational inference
(Kingma et al. 2015, §3.3). It is improper, so KL(q ‖ p) is defined only up to an additive
constant (infinite in absolute terms); per weight it depends on α alone (Molchanov et al. 2017,
§4.2): −KL = ½ log α − E_{ε∼N(1, α)} log|ε| + C. We use their approximation (eq. 14)::

    KL(α) ≈ k1 − k1·sigmoid(k2 + k3·log α) + ½·log(1 + 1/α),   k1=0.63576, k2=1.87320, k3=1.48695

whose additive constant is fixed so that KL → 0 as α → ∞ (a weight that is pure noise costs
nothing) and which is within 0.009 of the true KL(α) + const for every α. The "ELBO" reported
(``negative_elbo`` = expected negative log-likelihood + this KL, summed over weights) is
therefore the evidence lower bound only up to that one constant per weight: its differences
across θ, α (and its gradients) are exact up to the approximation's error, its value is not a
bound on log p(y) — do not compare it with another method's ELBO. For ``gaussian_dropout`` the
KL is a constant (α is fixed), and the training objective is the expected log-likelihood alone.

Per step the loss is ``(N/B)·NLL(batch) + β_t·KL − log p(point sites)``, with the KL weight
β_t rising linearly from 0 to 1 over the first ``kl_warmup_epochs`` epochs and 1 afterwards
(β_t = min(1, t / (kl_warmup_epochs · M)) at step t, M minibatches per epoch: the linear KL
warm-up of Sønderby et al. 2016, which lets the data shape θ before the prior starts to drop
weights — Molchanov et al. 2017 train from a random start with a warm-up or from a pretrained
network; ``kl_warmup_epochs=0`` gives the plain ELBO from the first step).

**Sparsity and the draws.** A weight with log α > ``threshold`` (3 in Molchanov et al. 2017:
dropout rate p = α/(1+α) > 0.95) is dropped at test time. ``sample`` draws every weight
from q, w = θ + σ ε, and sets the dropped ones to zero; the other sites repeat their point
value. The posterior's approximation is a :class:`VariationalDropout` (θ and log α per weight,
the threshold), which ``bnnpp prune`` uses for the compression table
(:func:`bnnpp.pruning.log_alpha_table`); ``stats.extras`` has ``nonzero_weights`` per layer and
the total ``compression`` (all weights / kept weights).

**Which models.** ``mlp``, ``cnn``, ``lenet5``, ``from_flax`` networks — any model whose
weights come from :func:`bnnpp.models.layers.dense` / :func:`~bnnpp.models.layers.conv2d`.
A model without such layers is rejected with a one-line error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.primitives import Messenger

from bnnpp.inference.algorithm import Algorithm, Hooks, RunSpec
from bnnpp.inference.joint import constrained_values, init_uniform, joint_terms
from bnnpp.inference.optimizer_step import apply_optimizer
from bnnpp.inference.options import (
    Options,
    check_batch_size,
    optimizer,
    optimizer_of,
    option,
    optional,
    positive_float,
    positive_int,
    steps_for,
)
from bnnpp.inference.registry import Method, register
from bnnpp.inference.start import apply_start
from bnnpp.inference.variational_layers import conv_preactivations, dense_preactivations, latent_layers
from bnnpp.introspection import latent_sites, probe_rows
from bnnpp.models.layers import LAYER_EFFECT
from bnnpp.posterior.approximation import VariationalDropout

__all__ = [
    "K1",
    "K2",
    "K3",
    "LOG_ALPHA_CLIP",
    "VARIANTS",
    "VDInfo",
    "VDOptions",
    "VDState",
    "VariationalDropout",
    "build",
    "kl_log_uniform",
    "kl_weight",
]

VARIANTS = ("gaussian_dropout", "variational", "sparse")
K1, K2, K3 = 0.63576, 1.87320, 1.48695  # Molchanov et al. 2017, eq. 14
LOG_ALPHA_CLIP = (-10.0, 10.0)  # where log α enters the KL (and the reported log α)
BIAS_SD = 1e-4  # pre-activation noise floor: keeps sqrt(x²·σ²) differentiable where x = 0 (e.g. dead ReLUs)


def _finite(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")


def _non_negative_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0 (0: no warm-up), got {value!r}")


@dataclass(frozen=True)
class VDOptions(Options):
    """Options of ``method="vd"`` (module docstring)."""

    refused: ClassVar[dict[str, str]] = {
        "temperature": "vd cannot temper its posterior yet (its KL to the log-uniform prior is an approximation outside the log density): fit advi, nuts or sgld for a tempered posterior"
    }

    exclusive = (("optimizer", "learning_rate"), ("num_steps", "epochs"))

    variant: str = option(
        "sparse", "gaussian_dropout (fixed alpha), variational (alpha per layer, <= 1) or sparse (alpha per weight)", choices=VARIANTS
    )
    alpha: float = option(0.25, "gaussian_dropout: the fixed noise variance alpha; variational: its start value", check=positive_float)
    epochs: int = option(5000, "passes over the training data", check=positive_int)
    num_steps: int | None = option(None, "optimisation steps (replaces epochs)", check=optional(positive_int), type=int)
    batch_size: int | None = option(None, "minibatch rows per step (None: full batch)", check=optional(positive_int), type=int)
    learning_rate: float = option(1e-2, "Adam learning rate", check=positive_float)
    optimizer: Any = option(None, "any optax transformation (replaces learning_rate)", check=optimizer, flag=False)  # noqa: RUF009
    kl_warmup_epochs: int = option(10, "epochs over which the KL weight rises linearly from 0 to 1 (0: none)", check=_non_negative_int)
    threshold: float = option(3.0, "weights with log alpha above it are dropped at test time", check=_finite)
    init_log_sigma2: float = option(-10.0, "sparse: initial log sigma^2 of every weight", check=_finite)
    init_radius: float = option(2.0, "start values of the non-weight sites uniform in (-r, r), unconstrained", check=positive_float)
    num_samples: int = option(100, "posterior draws kept", check=positive_int)
    chunk_size: int | None = option(None, "steps per compiled chunk", check=optional(positive_int), flag=False, type=int)

    def check(self) -> None:
        if self.variant == "variational" and self.alpha > 1:
            raise ValueError(f"variant='variational' keeps alpha <= 1 (Kingma et al. 2015): start alpha at most 1, got {self.alpha!r}")

    def check_data(self, x, y) -> None:
        check_batch_size(self.batch_size, x)


def kl_log_uniform(log_alpha) -> jnp.ndarray:
    """Molchanov et al. (2017) eq. 14: KL(N(θ, αθ²) ‖ log-uniform) up to its additive constant,
    k1 − k1·sigmoid(k2 + k3·log α) + ½·log(1 + 1/α), elementwise (→ 0 as α → ∞). Same shape
    as ``log_alpha``."""
    return K1 - K1 * jax.nn.sigmoid(K2 + K3 * log_alpha) + 0.5 * jax.nn.softplus(-log_alpha)


def kl_weight(step, warmup_steps: int):
    """β_t = min(1, t / warmup_steps) (1 when ``warmup_steps`` is 0): the linear KL warm-up."""
    if warmup_steps == 0:
        return jnp.ones((), jnp.float32)
    return jnp.minimum(1.0, jnp.asarray(step, jnp.float32) / warmup_steps)


# --------------------------------------------------------------------------------------
# The approximation: θ and log α per weight
# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# The algorithm
# --------------------------------------------------------------------------------------


class VDState(NamedTuple):
    """position: site → unconstrained value (θ for weights; biases and other sites' points);
    noise: ``sparse``: weight site → log σ² (site shape); ``variational``: ``(L,)`` log α per
    layer; ``gaussian_dropout``: ``()`` (unused); opt_state: the optimizer's; t: steps done."""

    position: dict
    noise: Any
    opt_state: Any
    t: jax.Array


class VDInfo(NamedTuple):
    """Per step: loss — (N/B)·NLL + β·KL − log p(point sites); nll — the data term rescaled
    by N/B; kl — the approximate KL(q ‖ log-uniform), unweighted; negative_elbo — nll + kl
    (up to the improper prior's constant); kl_weight — β. Scalars."""

    loss: jax.Array
    nll: jax.Array
    kl: jax.Array
    negative_elbo: jax.Array
    kl_weight: jax.Array


class _DropoutLayers(Messenger):
    """Answer every bnnpp layer message with local-reparameterisation pre-activations
    N(x·θ + b, x²·σ²) and add up the layers' biases' log prior (their MAP term)."""

    def __init__(self, fn, layers, theta, variance, key):
        super().__init__(fn)
        self.layers, self.theta, self.variance, self.key = layers, theta, variance, key
        self.bias_log_prior = jnp.zeros(())

    def process_message(self, msg):
        if msg["type"] != LAYER_EFFECT or msg["layer"] not in self.layers or msg["value"] is not None:
            return
        layer = self.layers[msg["layer"]]
        _, x, units, prior, scale = msg["args"]
        wn, bn = layer["sites"]
        bias_prior, bias_scale = msg.get("bias_prior", (prior, scale))
        if bn in self.theta:  # MAP under the bias's own prior
            b = self.theta[bn]
            self.bias_log_prior = self.bias_log_prior + jnp.sum(bias_prior.log_prob(b, bias_scale))
        else:  # a layer without a bias (e.g. a Flax layer with use_bias=False)
            b = jnp.zeros((units,), x.dtype)
        q = (self.theta[wn], jnp.sqrt(self.variance[wn]), b, jnp.full_like(b, BIAS_SD))
        key = jax.random.fold_in(self.key, layer["index"])
        if msg["kind"] == "dense":
            h, _, _ = dense_preactivations(key, x, *q, "local")
        else:
            kw = msg["kwargs"]
            h, _, _ = conv_preactivations(key, x, *q, "local", kw["stride"], kw["padding"])
        msg["value"] = h


def vd_layers(model, x, y) -> dict[str, dict]:
    """The bnnpp layers of ``model``: find_layers' records plus ``index``.

    Raises:
        ValueError: no bnnpp layer, or a layer whose weights are not latent sites.
    """
    return latent_layers(model, x, y, "vd", "puts its noise on the weights of bnnpp layers")


def build(model, x, y, options: VDOptions, start: dict | None = None) -> Algorithm:
    """Gaussian / variational / sparse variational dropout as an :class:`Algorithm`;
    ``start``: site → unconstrained start value of θ and the other sites
    (:func:`bnnpp.inference.start.start_position`).

    Returns:
        The algorithm: ``sample`` gives ``{site: (num_samples, *site)}`` (weights drawn from q
        with log α > threshold set to 0; other sites their point value); its posterior's
        approximation is a :class:`VariationalDropout`; traces ``loss``, ``nll``, ``kl``,
        ``negative_elbo``, ``kl_weight`` per step; ``extras``: ``variant``, ``threshold``,
        ``nonzero_weights`` and ``weights`` per layer, ``compression``, and for
        ``variational`` the learnt ``alpha`` per layer.
    """
    layers = vd_layers(model, x, y)
    sites = latent_sites(model, x, y)
    weight_sites = {layer["sites"][0]: layer for layer in layers.values()}
    n = x.shape[0]
    batch = options.batch_size or n
    num_batches = n // batch
    lik_scale = n / batch
    warmup = options.kl_warmup_epochs * num_batches
    opt = optimizer_of(options)
    key_model = jax.random.PRNGKey(0)  # the models draw nothing random at a fixed position
    variant = options.variant
    log_alpha0 = math.log(options.alpha)  # host arithmetic: build may run inside a trace (sweep)
    low, high = LOG_ALPHA_CLIP
    x1, y1 = probe_rows(model, x, y)

    def log_alpha_of(theta, noise):
        """Weight site → log α (site shape), clipped."""
        if variant == "sparse":
            return {s: jnp.clip(noise[s] - jnp.log(theta[s] ** 2 + 1e-8), low, high) for s in weight_sites}
        if variant == "variational":
            return {s: jnp.broadcast_to(jnp.minimum(noise[layer["index"]], 0.0), theta[s].shape) for s, layer in weight_sites.items()}
        return {s: jnp.full(theta[s].shape, log_alpha0) for s in weight_sites}

    def variance_of(theta, noise):
        """Weight site → σ² of q (site shape): exp(log σ²) for sparse, α θ² otherwise."""
        if variant == "sparse":
            return {s: jnp.exp(noise[s]) for s in weight_sites}
        la = log_alpha_of(theta, noise)
        return {s: jnp.exp(la[s]) * theta[s] ** 2 for s in weight_sites}

    def init(key, data):
        k_other, k_w = jax.random.split(key)
        u = init_uniform({name: s.shape for name, s in sites.items()}, k_other, options.init_radius)
        wkeys = jax.random.split(k_w, len(weight_sites))
        for k, (s, layer) in zip(wkeys, weight_sites.items(), strict=True):  # Glorot-uniform θ, zero biases
            lim = math.sqrt(6.0 / (layer["fan_in"] + layer["fan_out"]))
            u[s] = jax.random.uniform(k, sites[s].shape, minval=-lim, maxval=lim)
            if layer["sites"][1] in sites:
                u[layer["sites"][1]] = jnp.zeros(sites[layer["sites"][1]].shape)
        u = apply_start(u, start)
        if variant == "sparse":
            noise = {s: jnp.full(sites[s].shape, options.init_log_sigma2, jnp.float32) for s in weight_sites}
        elif variant == "variational":
            noise = jnp.full((len(layers),), log_alpha0, jnp.float32)
        else:
            noise = jnp.zeros(())
        params = (u, noise)
        return VDState(u, noise, opt.init(params), jnp.zeros((), jnp.int32))

    def terms(params, key, xb, yb):
        u, noise = params
        if variant == "gaussian_dropout":
            noise = jax.lax.stop_gradient(noise)
        holder = {}

        def with_layers(m):
            holder["h"] = _DropoutLayers(m, layers, u, variance_of(u, noise), key)
            return holder["h"]

        log_prior, log_lik, _ = joint_terms(model, u, xb, yb, key_model, extra_handlers=(with_layers,))
        kl = sum(jnp.sum(kl_log_uniform(la)) for la in log_alpha_of(u, noise).values())
        return -lik_scale * log_lik, kl, log_prior + holder["h"].bias_log_prior

    def objective(params, key, xb, yb, beta):
        nll, kl, log_prior_points = terms(params, key, xb, yb)
        return nll + beta * kl - log_prior_points, (nll, kl)

    def step(key, state, batch_data):
        params = (state.position, state.noise)
        beta = kl_weight(state.t, warmup)
        (loss, (nll, kl)), grads = jax.value_and_grad(objective, has_aux=True)(params, key, *batch_data, beta)
        (position, noise), opt_state = apply_optimizer(opt, grads, state.opt_state, params)
        return VDState(position, noise, opt_state, state.t + 1), VDInfo(loss, nll, kl, nll + kl, beta)

    def sample(key, state, num_samples):
        values = constrained_values(model, state.position, x1, y1, key_model, sites)
        theta = {s: values[s] for s in weight_sites}
        la = log_alpha_of(theta, state.noise)
        sd = {s: jnp.sqrt(v) for s, v in variance_of(theta, state.noise).items()}

        def one(k):
            out = dict(values)
            for s, layer in weight_sites.items():
                eps = jax.random.normal(jax.random.fold_in(k, layer["index"]), theta[s].shape, theta[s].dtype)
                out[s] = jnp.where(la[s] > options.threshold, 0.0, theta[s] + sd[s] * eps)
            return out

        return jax.vmap(one)(jax.random.split(key, num_samples))

    def approximation(state):
        theta = {s: state.position[s] for s in weight_sites}
        return VariationalDropout(theta, log_alpha_of(theta, state.noise), float(options.threshold))

    def extras(state):
        theta = {s: np.asarray(state.position[s]) for s in weight_sites}
        la = jax.tree_util.tree_map(np.asarray, log_alpha_of(theta, state.noise))
        kept = {weight_sites[s]["sites"][0]: int(np.sum(la[s] <= options.threshold)) for s in weight_sites}
        total = sum(v.size for v in theta.values())
        out = {
            "variant": variant,
            "threshold": float(options.threshold),
            "weights": {s: int(v.size) for s, v in theta.items()},
            "nonzero_weights": kept,
            "compression": float(total / max(1, sum(kept.values()))),
        }
        if variant == "variational":
            out["alpha"] = {name: float(np.exp(min(0.0, float(state.noise[layer["index"]])))) for name, layer in layers.items()}
        return out

    def postfix(info):
        return {"elbo": f"{-info.negative_elbo.mean():.4g}", "nll": f"{info.nll.mean():.4g}", "kl": f"{info.kl.mean():.4g}"}

    return Algorithm(
        init,
        step,
        sample,
        RunSpec(num_steps=steps_for(options, n), num_samples=options.num_samples, batch_size=options.batch_size, name=f"vd ({variant})"),
        Hooks(point=lambda state: state.position, approximation=approximation, extras=extras, postfix=postfix),
    )


register(
    Method(
        "vd",
        VDOptions,
        build=build,
        summary="Gaussian / variational / sparse variational dropout, log-uniform prior (Kingma et al. 2015; Molchanov et al. 2017)",
        smoke={"epochs": 60, "num_samples": 20},
    )
)
