"""A mean-field Gaussian q over the weights of bnnpp's layers, answered inside the model:
each :func:`bnnpp.models.dense` / :func:`bnnpp.models.conv2d` layer is replaced by a draw of its
pre-activations under q, and its KL(q ‖ p) is accumulated. Bayes by Backprop
(:mod:`bnnpp.inference.bbb`) is built on it; so can any method with Gaussian weight factors
(variational dropout's local reparameterisation, for instance).

Gradient estimators for dense layers (``estimator``):

* ``"reparam"``: sample w = μ + σ·ε once per particle, shared by the minibatch (paper §3.2);
* ``"local"``: the local reparameterisation trick (Kingma, Salimans & Welling 2015, eq. 6–7):
  sample each pre-activation from N(x·μ_w + μ_b, x²·σ_w² + σ_b²), independently per row;
* ``"flipout"`` (Wen et al. 2018, eq. 3): one perturbation Δw = σ∘ε shared by the batch,
  decorrelated per row by random signs: x·μ_w + ((x∘s)·Δw)∘r.

All three have the same marginal distribution per row; ``local`` and ``flipout`` have lower
gradient variance. The Monte-Carlo KL under ``local`` uses an independent weight sample.

Convolutional layers (:func:`bnnpp.models.conv2d`, kernels ``(kh, kw, in, out)``) take the same
estimators, see :func:`conv_preactivations`: ``reparam`` convolves with one kernel sample;
``flipout`` uses per-example ±1 signs on the input and output channels (Wen et al. 2018, §3.1
for convolutions), conv(x, μ) + conv(x∘s_in, Δw)∘s_out; ``local`` samples every output
position from N(conv(x, μ_w) + μ_b, conv(x², σ_w²) + σ_b²) independently, as in Molchanov,
Ashukha & Vetrov (2017) for sparse variational dropout. For a convolution this ignores the
correlation between output positions that share a kernel weight, so unlike the dense case it
is an approximation: its per-position marginals are exact but the joint over positions is not.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.primitives import Messenger

from bnnpp.inference.joint import latent_trace, log_likelihood, site_log_prior
from bnnpp.inference.weight_noise import (
    _noise_once,
    _predicate,
    gaussian_entropy,
    gaussian_kl,
    mc_weight_draw,
    normal_noise,
    softplus,
)
from bnnpp.introspection import BATCH_WRAPPERS, improper_as_zeros, latent_sites, unwrap
from bnnpp.models.layers import CONV_DIMENSION_NUMBERS, LAYER_EFFECT
from bnnpp.priors import Prior, ScaleMixtureNormal

__all__ = [
    "ESTIMATORS",
    "LAYER_KINDS",
    "conv_preactivations",
    "dense_preactivations",
    "find_layers",
    "gaussian_kl",
    "latent_layers",
    "mc_weight_draw",
    "negative_elbo_terms",
    "normal_noise",
]

ESTIMATORS = ("reparam", "local", "flipout")
LAYER_KINDS = ("dense", "conv2d")  # the bnnpp layer messages answered here


def _weight_draw(key, mu_w, sigma_w, mu_b, sigma_b):
    """One reparameterised draw of a layer's weights: ``(k_out, k_in, eps_w, w, b)`` — two
    spare keys for the estimators, the kernel noise ε_w and w = μ_w + σ_w ε_w, b = μ_b + σ_b ε_b.
    The noise is ``jax.random.normal``'s, computed once (:func:`_noise_once`; the σ's first
    element is its runtime predicate)."""
    k_w, k_b, k_out, k_in = jax.random.split(key, 4)
    eps_w = _noise_once(k_w, mu_w.shape, mu_w.dtype, _predicate(sigma_w))
    eps_b = jax.random.normal(k_b, mu_b.shape, mu_b.dtype)
    return k_out, k_in, eps_w, mu_w + sigma_w * eps_w, mu_b + sigma_b * eps_b


def dense_preactivations(key, x, mu_w, sigma_w, mu_b, sigma_b, estimator: str):
    """Sampled pre-activations of a dense layer under q, and a weight sample for a Monte-Carlo KL.

    Args:
        key: PRNG key.
        x: inputs ``(n, in)``.
        mu_w, sigma_w: ``(in, out)``; mu_b, sigma_b: ``(out,)``.
        estimator: ``"reparam"``, ``"local"`` or ``"flipout"`` (module docstring).

    Returns:
        ``(h, w, b)``: pre-activations ``(n, out)`` and one draw of ``w`` ``(in, out)``, ``b``
        ``(out,)`` from q (for ``"local"`` an independent draw, as ``h`` never forms ``w``).
    """
    draw = _weight_draw(key, mu_w, sigma_w, mu_b, sigma_b)
    return _dense_from_draw(draw, x, mu_w, sigma_w, mu_b, sigma_b, estimator)


def _dense_from_draw(draw, x, mu_w, sigma_w, mu_b, sigma_b, estimator: str):
    k_out, k_in, eps_w, w, b = draw
    if estimator == "reparam":
        h = x @ w + b
    elif estimator == "local":
        mean = x @ mu_w + mu_b
        var = (x * x) @ (sigma_w * sigma_w) + sigma_b * sigma_b
        h = mean + jnp.sqrt(var) * jax.random.normal(k_out, mean.shape, mean.dtype)
    else:  # flipout: random ±1 signs per row on the input and output side
        s_in = jax.random.rademacher(k_in, x.shape, x.dtype)
        s_out = jax.random.rademacher(k_out, (x.shape[0], mu_w.shape[1]), x.dtype)
        h = x @ mu_w + ((x * s_in) @ (sigma_w * eps_w)) * s_out + b
    return h, w, b


def _conv(x, w, stride, padding):
    return jax.lax.conv_general_dilated(x, w, stride, padding, dimension_numbers=CONV_DIMENSION_NUMBERS)


def conv_preactivations(key, x, mu_w, sigma_w, mu_b, sigma_b, estimator: str, stride=(1, 1), padding: str = "VALID"):
    """Sampled pre-activations of a 2-D convolution under q, and a kernel sample for a Monte-Carlo KL.

    Every output position has the marginal N(conv(x, μ_w) + μ_b, conv(x², σ_w²) + σ_b²)
    under all three estimators (module docstring): ``"reparam"`` convolves with one kernel
    sample w = μ + σ∘ε shared by the batch; ``"flipout"`` (Wen et al. 2018) computes
    conv(x, μ_w) + conv(x∘s_in, σ_w∘ε)∘s_out + b with per-example signs s_in ``(n, 1, 1, in)``
    and s_out ``(n, 1, 1, out)``; ``"local"`` draws each output position independently from
    that marginal (Molchanov et al. 2017) — an approximation for convolutions, as positions
    that share kernel weights are correlated under q but not in the draw.

    Args:
        key: PRNG key.
        x: images ``(n, height, width, in)`` (NHWC).
        mu_w, sigma_w: ``(kh, kw, in, out)`` (HWIO); mu_b, sigma_b: ``(out,)``.
        estimator: ``"reparam"``, ``"local"`` or ``"flipout"``.
        stride: ``(sh, sw)``.
        padding: ``"VALID"`` or ``"SAME"``.

    Returns:
        ``(h, w, b)``: pre-activations ``(n, height', width', out)`` and one draw of ``w``
        ``(kh, kw, in, out)``, ``b`` ``(out,)`` from q (for ``"local"`` an independent draw).
    """
    draw = _weight_draw(key, mu_w, sigma_w, mu_b, sigma_b)
    return _conv_from_draw(draw, x, mu_w, sigma_w, mu_b, sigma_b, estimator, stride, padding)


def _conv_from_draw(draw, x, mu_w, sigma_w, mu_b, sigma_b, estimator: str, stride, padding):
    k_out, k_in, eps_w, w, b = draw
    if estimator == "reparam":
        h = _conv(x, w, stride, padding) + b
    elif estimator == "local":
        mean = _conv(x, mu_w, stride, padding) + mu_b
        var = _conv(x * x, sigma_w * sigma_w, stride, padding) + sigma_b * sigma_b
        h = mean + jnp.sqrt(var) * jax.random.normal(k_out, mean.shape, mean.dtype)
    else:  # flipout: ±1 signs per example and channel, shared by all positions of an image
        n = x.shape[0]
        s_in = jax.random.rademacher(k_in, (n, 1, 1, mu_w.shape[2]), x.dtype)
        s_out = jax.random.rademacher(k_out, (n, 1, 1, mu_w.shape[3]), x.dtype)
        h = _conv(x, mu_w, stride, padding) + _conv(x * s_in, sigma_w * eps_w, stride, padding) * s_out + b
    return h, w, b


# --------------------------------------------------------------------------------------
# The layer handler: answers bnnpp's layer messages from the variational parameters
# --------------------------------------------------------------------------------------


def _fixed(scale) -> bool:
    """A prior scale that is a constant of the program (not sampled, not trained)."""
    return not isinstance(scale, jax.core.Tracer)


class _VariationalLayers(Messenger):
    """Inside the model, replace every bnnpp dense and conv2d layer by a draw from q and
    accumulate the layers' KL(q ‖ p) (conditional on the sampled prior scale).

    A Monte-Carlo KL under a prior with a fixed scale goes through :func:`mc_weight_draw`
    (the weight draw and its KL term computed once, gradient in closed form); a learned
    scale mixture or a sampled scale is differentiated through as written."""

    def __init__(self, fn, loc, rho, key, estimator, kl, learned):
        super().__init__(fn)
        self.loc, self.rho, self.key = loc, rho, key
        self.estimator, self.kl_mode, self.learned = estimator, kl, learned
        self.kl = jnp.zeros(())
        self.count = 0

    def _prior_log_prob(self, prior: Prior, value, scale):
        if self.learned is not None:  # trained scale mixture shared by all layers
            pi, s1, s2 = self.learned
            return ScaleMixtureNormal(pi, s1 * scale, s2 * scale).log_prob(value)
        return prior.log_prob(value, scale)

    def _draw(self, key, wn, bn, prior, scale, bias_prior, bias_scale):
        """``(draw, sigma_w, sigma_b, kl)``: the layer's weight draw (as :func:`_weight_draw`),
        its σ's and its KL term."""
        mu_w, rho_w, mu_b, rho_b = self.loc[wn], self.rho[wn], self.loc[bn], self.rho[bn]
        analytic = self.kl_mode == "analytic" and prior.kind == bias_prior.kind == "normal" and self.learned is None
        if not analytic and self.learned is None and _fixed(scale) and _fixed(bias_scale):
            k_w, k_b, k_out, k_in = jax.random.split(key, 4)
            sigma_w, eps_w, w, kl_w = mc_weight_draw(partial(prior.log_prob, scale=scale), mu_w, rho_w, k_w)
            sigma_b, _, b, kl_b = mc_weight_draw(partial(bias_prior.log_prob, scale=bias_scale), mu_b, rho_b, k_b)
            return (k_out, k_in, eps_w, w, b), sigma_w, sigma_b, kl_w + kl_b
        sigma_w, sigma_b = softplus(rho_w), softplus(rho_b)
        draw = _weight_draw(key, mu_w, sigma_w, mu_b, sigma_b)
        if analytic:
            kl = jnp.sum(gaussian_kl(mu_w, sigma_w, 0.0, scale)) + jnp.sum(gaussian_kl(mu_b, sigma_b, 0.0, bias_scale))
        else:  # Monte-Carlo: log q(w) − log p(w) at the sampled weights
            w, b = draw[3], draw[4]
            kl = -gaussian_entropy(sigma_w) - jnp.sum(self._prior_log_prob(prior, w, scale))
            kl = kl - gaussian_entropy(sigma_b) - jnp.sum(self._prior_log_prob(bias_prior, b, bias_scale))
        return draw, sigma_w, sigma_b, kl

    def process_message(self, msg):
        if msg["type"] != LAYER_EFFECT or msg["kind"] not in LAYER_KINDS or msg["value"] is not None:
            return
        name, x, _, prior, scale = msg["args"]
        wn, bn = msg.get("sites", (f"{name}.w", f"{name}.b"))  # a Flax layer names its own sites
        bias_prior, bias_scale = msg.get("bias_prior", (prior, scale))  # and may give its bias another prior
        key = jax.random.fold_in(self.key, self.count)
        self.count += 1
        draw, sigma_w, sigma_b, kl = self._draw(key, wn, bn, prior, scale, bias_prior, bias_scale)
        q = (self.loc[wn], sigma_w, self.loc[bn], sigma_b)
        if msg["kind"] == "dense":
            h, _, _ = _dense_from_draw(draw, x, *q, self.estimator)
        else:
            kw = msg["kwargs"]
            h, _, _ = _conv_from_draw(draw, x, *q, self.estimator, kw["stride"], kw["padding"])
        self.kl = self.kl + kl
        msg["value"] = h


class _LayerRecorder(Messenger):
    """Record the bnnpp layers a model builds: name → kind, prior, input width ``in``,
    ``units`` (filters for a convolution), Glorot's ``fan_in`` / ``fan_out``
    (in / units for dense; kh·kw·in / kh·kw·out for conv2d) and ``sites``, the names of its
    weight and bias sites (``<name>.w``, ``<name>.b``, or a Flax layer's own)."""

    def __init__(self, fn=None):
        super().__init__(fn)
        self.layers: dict[str, dict] = {}

    def process_message(self, msg):
        if msg["type"] == LAYER_EFFECT:
            name, x, units, prior, _ = msg["args"]
            n_in, units = int(x.shape[-1]), int(units)
            field = math.prod(msg["kwargs"]["kernel_size"]) if msg["kind"] == "conv2d" else 1
            self.layers[name] = {
                "kind": msg["kind"],
                "prior": prior,
                "in": n_in,
                "units": units,
                "fan_in": field * n_in,
                "fan_out": field * units,
                "sites": msg.get("sites", (f"{name}.w", f"{name}.b")),
            }


def find_layers(model: Callable, x, y) -> dict[str, dict]:
    """The model's bnnpp dense and conv2d layers: name → ``kind``, ``prior``, ``in``, ``units``,
    ``fan_in``, ``fan_out`` (see :class:`_LayerRecorder`), found by abstract tracing."""
    rec = _LayerRecorder()

    def run(key):
        with rec:
            # a flat prior (ImproperUniform) cannot be sampled: trace it at zeros
            handlers.substitute(handlers.seed(model, key), substitute_fn=improper_as_zeros)(x, y)
        return 0

    jax.eval_shape(run, jax.ShapeDtypeStruct((2,), jnp.uint32))  # abstract: no program compiled
    return {k: v for k, v in rec.layers.items() if v["kind"] in LAYER_KINDS}


def is_network(model: Callable, x, y) -> bool:
    """Whether ``model`` is a network: bnnpp's own or a Flax module (both have a ``spec``), or a
    model built of bnnpp layers (:func:`find_layers`, traced on the rows that give its latents
    their shapes). Its weight posterior is symmetric under hidden-unit permutations and its
    inputs are features of each row; a hand-written model (eight schools, a time series) is not."""
    from bnnpp.introspection import probe_rows

    return hasattr(model, "spec") or bool(find_layers(model, *probe_rows(model, x, y)))


def latent_layers(model: Callable, x, y, method: str, purpose: str) -> dict[str, dict]:
    """:func:`find_layers`' records plus ``index`` (the layer's position), for a method that
    needs bnnpp layers whose weights are latent sites (e.g. ``mc_dropout``, ``vd``).

    Raises:
        ValueError: ``"<method> <purpose> and found none: ..."`` when the model has no bnnpp
            layer, or a layer's weights are not a latent site.
    """
    layers = find_layers(model, x, y)
    if not layers:
        raise ValueError(
            f"{method} {purpose} and found none: build the model with bnnpp.models.layers.dense / conv2d (or use mlp, cnn, lenet5)"
        )
    sites = latent_sites(model, x, y)
    out = {}
    for i, (name, layer) in enumerate(layers.items()):
        weight = layer["sites"][0]  # <name>.w, or a Flax layer's own (e.g. layers.0.kernel)
        if weight not in sites:
            raise ValueError(f"{method}: layer {name!r} has no latent weight site {weight}; let the layer sample its own weights")
        out[name] = {**layer, "index": i}
    return out


def _generic_kl(trace, loc, sigma, u, generic: tuple[str, ...], kl_mode: str, point: tuple[str, ...] = ()) -> jnp.ndarray:
    """KL(q ‖ p) of the sites outside bnnpp layers, each a Gaussian on its unconstrained space:
    closed form when the prior is Normal on the reals, else log q(u) − log p(value) − log|J|.
    A site in ``point`` is a point estimate (no q): its term is −log p(value) − log|J|."""
    total = jnp.zeros(())
    for name in generic:
        site = trace[name]
        if name in point:
            total = total - site_log_prior(site)
            continue
        fn = site["fn"]
        normal = unwrap(fn, BATCH_WRAPPERS)
        if kl_mode == "analytic" and fn.support is dist.constraints.real and type(normal) is dist.Normal:
            shape = jnp.shape(site["value"])
            total = total + jnp.sum(
                gaussian_kl(loc[name], sigma[name], jnp.broadcast_to(normal.loc, shape), jnp.broadcast_to(normal.scale, shape))
            )
            continue
        log_q = jnp.sum(dist.Normal(loc[name], sigma[name]).log_prob(u[name]))
        total = total + log_q - site_log_prior(site)  # site_log_prior includes log|J|
    return total


def negative_elbo_terms(model, params, key, x, y, *, generic, estimator: str, kl: str, lik_scale: float = 1.0, point=()):
    """One Monte-Carlo sample of the two terms of the negative ELBO.

    Args:
        model: the NumPyro model.
        params: ``{"loc": {site: μ}, "rho": {site: ρ}}`` (σ = softplus(ρ)), plus ``"prior"``
            (``pi_logit``, ``log_sigma1``, ``log_sigma2``) when the scale mixture is learned.
        key: PRNG key of this sample.
        x, y: the (mini)batch.
        generic: names of the latent sites outside bnnpp layers (Gaussian on their
            unconstrained space).
        estimator, kl: as the options of :class:`bnnpp.inference.bbb.BBBOptions`.
        lik_scale: N / batch size.
        point: names among ``generic`` held at their ``loc`` (point estimates, no draw): their
            term in the KL is minus their log prior density (with the log-Jacobian).

    Returns:
        ``(nll, kl)``: ``−lik_scale · log p(y | θ)`` and the KL(q ‖ p) estimate, scalars.
    """
    k_gen, k_layer, k_model = jax.random.split(key, 3)
    loc, rho = params["loc"], params["rho"]
    sigma = {nm: softplus(rho[nm]) for nm in generic}
    gkeys = jax.random.split(k_gen, max(1, len(generic)))
    u = {nm: loc[nm] + sigma[nm] * jax.random.normal(k, loc[nm].shape) for nm, k in zip(generic, gkeys, strict=False)}
    u = {**u, **{nm: loc[nm] for nm in point}}
    learned = None
    if "prior" in params:
        pp = params["prior"]
        learned = (jax.nn.sigmoid(pp["pi_logit"]), jnp.exp(pp["log_sigma1"]), jnp.exp(pp["log_sigma2"]))
    holder = {}

    def with_layers(m):
        holder["h"] = _VariationalLayers(m, loc, rho, k_layer, estimator, kl, learned)
        return holder["h"]

    trace = latent_trace(model, u, x, y, k_model, extra_handlers=(with_layers,))
    kl_value = holder["h"].kl + _generic_kl(trace, loc, sigma, u, generic, kl, tuple(point))
    return -lik_scale * log_likelihood(trace), kl_value
