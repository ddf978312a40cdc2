"""``bbb``: Bayes by Backprop (Blundell, Cornebise, Kavukcuoglu & Wierstra 2015).

The variational posterior is a mean-field Gaussian over every latent coordinate,
q(θ) = Π N(μ, σ²) with σ = softplus(ρ) (paper §3.2). Weights and biases of bnnpp layers are
Gaussian on their own (real) space; every other latent site — hierarchical scales, the
observation noise, sites of a hand-written NumPyro model — gets its own Gaussian factor on
the unconstrained space (e.g. on log σ), and its density includes the log-Jacobian.

Per step the loss is Blundell et al.'s minibatch cost (eq. 8–9) scaled by M, the number of
minibatches per epoch::

    loss_i = (N / B) · NLL(D_i)  +  M · π_i · KL(q ‖ p)

so that with ``kl_weighting="uniform"`` (π_i = 1/M) it is an unbiased estimate of the full
negative ELBO, and with ``"blundell"`` (π_i = 2^(M−i) / (2^M − 1), eq. 9) the complexity cost
dominates the first minibatches of each epoch and fades later. The KL term is closed-form
where prior and factor are both Gaussian (``kl="analytic"``) and the Monte-Carlo estimate
log q(θ) − log p(θ) otherwise (scale mixture, Laplace, Cauchy, …) or when ``kl="mc"``.

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

``validation_data=(x_val, y_val)`` evaluates the network at the variational means (no noise)
on the validation set after every compiled chunk, on the device: the error rate for
classifiers, the RMSE for Gaussian regression (``info["val_error"]``, ``info["val_step"]``,
``val_err`` in the progress bar).
``num_particles`` samples per step are ``vmap``-ed. With ``learn_prior=True`` the scale
mixture's π, σ1, σ2 are trained with the variational parameters (type-II maximum likelihood
on the ELBO), as in one of the seed reproductions.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import optax
from numpyro import handlers
from numpyro.primitives import Messenger

from bnnpp.inference._joint import constrained_values, latent_trace, log_likelihood, site_log_prior
from bnnpp.inference._loop import compile_all, default_chunk_size, drive, lower_guarded
from bnnpp.inference.base import (
    BATCH_WRAPPERS,
    Backend,
    Posterior,
    check_batch_size,
    check_data,
    check_optimizer,
    latent_sites,
    one_of,
    positive_float,
    positive_int,
    register,
    unwrap,
)
from bnnpp.models.layers import CONV_DIMENSION_NUMBERS, LAYER_EFFECT
from bnnpp.priors import Prior, ScaleMixtureNormal

__all__ = ["DEFAULTS", "blundell_weights", "conv_preactivations", "dense_preactivations", "gaussian_kl", "kl_weights", "negative_elbo_terms"]

ESTIMATORS = ("reparam", "local", "flipout")
LAYER_KINDS = ("dense", "conv2d")  # the bnnpp layer messages this backend answers

DEFAULTS = {
    "epochs": 5000,
    "batch_size": None,
    "learning_rate": 1e-2,
    "optimizer": None,
    "num_particles": 1,
    "kl": "analytic",
    "kl_weighting": "uniform",
    "estimator": "local",
    "init_loc": "glorot",
    "init_radius": 2.0,
    "init_scale": 0.05,
    "learn_prior": False,
    "num_samples": 1000,
    "chunk_size": None,
    "validation_data": None,
}


def validate(o: dict) -> None:
    """Reject bad Bayes-by-Backprop options with a one-line error (the data-dependent check of
    ``batch_size`` is check_batch_size, run by ``bnnpp.fit`` before fit)."""
    positive_int(o, "epochs")
    if o["batch_size"] is not None:
        positive_int(o, "batch_size")
    positive_float(o, "learning_rate")
    check_optimizer(o["optimizer"])
    positive_int(o, "num_particles")
    one_of(o, "kl", ("analytic", "mc"))
    one_of(o, "kl_weighting", ("uniform", "blundell"))
    one_of(o, "estimator", ESTIMATORS)
    one_of(o, "init_loc", ("glorot", "uniform"))
    positive_float(o, "init_radius")
    positive_float(o, "init_scale")
    if not isinstance(o["learn_prior"], bool):
        raise TypeError(f"learn_prior must be True or False, got {o['learn_prior']!r}")
    positive_int(o, "num_samples")
    if o["chunk_size"] is not None:
        positive_int(o, "chunk_size")
    v = o["validation_data"]
    if v is not None and (not isinstance(v, (tuple, list)) or len(v) != 2):
        raise TypeError(f"validation_data must be a pair (x_val, y_val) or None, got {type(v).__name__}")


def validate_data(o: dict, x: np.ndarray, y: np.ndarray) -> None:
    """The data-dependent checks, run by ``bnnpp.fit`` before anything compiles: ``batch_size``
    at most the number of rows, and validation inputs with the training inputs' shape per row."""
    check_batch_size(o, x, y)
    if o["validation_data"] is None:
        return
    xv, yv = (np.asarray(a) for a in o["validation_data"])
    if xv.ndim == 0 or xv.shape[1:] != x.shape[1:]:
        raise ValueError(
            f"validation_data inputs must have shape (n_val, {', '.join(map(str, x.shape[1:]))}) like the "
            f"training inputs, got {xv.shape}"
        )
    if yv.shape != (xv.shape[0],):
        raise ValueError(f"validation_data targets must have shape ({xv.shape[0]},), one per input, got {yv.shape}")
    if xv.shape[0] == 0:
        raise ValueError("validation_data is empty: pass at least one row, or None")


# --------------------------------------------------------------------------------------
# Pieces with closed forms (public so the tests can check them)
# --------------------------------------------------------------------------------------


def blundell_weights(num_batches: int) -> np.ndarray:
    """π_i = 2^(M−i) / (2^M − 1) for i = 1..M (Blundell et al. 2015, eq. 9), computed as
    2^(−i) / (1 − 2^(−M)) so that large M does not overflow.

    Returns:
        float64 array ``(M,)`` that sums to 1 and halves from one minibatch to the next.
    """
    i = np.arange(1, num_batches + 1, dtype=np.float64)
    return np.exp2(-i) / -np.expm1(-num_batches * np.log(2.0))


def kl_weights(num_batches: int, scheme: str) -> np.ndarray:
    """The KL weight π_i of each minibatch of an epoch, ``(M,)``: ``"uniform"`` 1/M or
    ``"blundell"`` (see :func:`blundell_weights`)."""
    if scheme == "uniform":
        return np.full(num_batches, 1.0 / num_batches)
    return blundell_weights(num_batches)


def gaussian_kl(mu, sigma, prior_loc, prior_scale) -> jnp.ndarray:
    """Elementwise KL(N(μ, σ²) ‖ N(m, s²)) = log(s/σ) + (σ² + (μ − m)²) / (2s²) − 1/2."""
    return jnp.log(prior_scale / sigma) + (sigma**2 + (mu - prior_loc) ** 2) / (2 * prior_scale**2) - 0.5


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
    k_w, k_b, k_out, k_in = jax.random.split(key, 4)
    eps_w = jax.random.normal(k_w, mu_w.shape, mu_w.dtype)
    eps_b = jax.random.normal(k_b, mu_b.shape, mu_b.dtype)
    w = mu_w + sigma_w * eps_w
    b = mu_b + sigma_b * eps_b
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
    k_w, k_b, k_out, k_in = jax.random.split(key, 4)
    eps_w = jax.random.normal(k_w, mu_w.shape, mu_w.dtype)
    eps_b = jax.random.normal(k_b, mu_b.shape, mu_b.dtype)
    w = mu_w + sigma_w * eps_w
    b = mu_b + sigma_b * eps_b
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


class _VariationalLayers(Messenger):
    """Inside the model, replace every bnnpp dense and conv2d layer by a draw from q and
    accumulate the layers' KL(q ‖ p) (conditional on the sampled prior scale)."""

    def __init__(self, fn, loc, sigma, key, estimator, kl, learned):
        super().__init__(fn)
        self.loc, self.sigma, self.key = loc, sigma, key
        self.estimator, self.kl_mode, self.learned = estimator, kl, learned
        self.kl = jnp.zeros(())
        self.count = 0

    def _prior_log_prob(self, prior: Prior, value, scale):
        if self.learned is not None:  # trained scale mixture shared by all layers
            pi, s1, s2 = self.learned
            return ScaleMixtureNormal(pi, s1 * scale, s2 * scale).log_prob(value)
        return prior.log_prob(value, scale)

    def process_message(self, msg):
        if msg["type"] != LAYER_EFFECT or msg["kind"] not in LAYER_KINDS or msg["value"] is not None:
            return
        name, x, _, prior, scale = msg["args"]
        wn, bn = f"{name}.w", f"{name}.b"
        key = jax.random.fold_in(self.key, self.count)
        self.count += 1
        q = (self.loc[wn], self.sigma[wn], self.loc[bn], self.sigma[bn])
        if msg["kind"] == "dense":
            h, w, b = dense_preactivations(key, x, *q, self.estimator)
        else:
            kw = msg["kwargs"]
            h, w, b = conv_preactivations(key, x, *q, self.estimator, kw["stride"], kw["padding"])
        if self.kl_mode == "analytic" and prior.kind == "normal" and self.learned is None:
            kl = jnp.sum(gaussian_kl(self.loc[wn], self.sigma[wn], 0.0, scale)) + jnp.sum(
                gaussian_kl(self.loc[bn], self.sigma[bn], 0.0, scale)
            )
        else:  # Monte-Carlo: log q(w) − log p(w) at the sampled weights
            kl = 0.0
            for v, n in ((w, wn), (b, bn)):
                log_q = dist.Normal(self.loc[n], self.sigma[n]).log_prob(v)
                kl = kl + jnp.sum(log_q - self._prior_log_prob(prior, v, scale))
        self.kl = self.kl + kl
        msg["value"] = h


class _LayerRecorder(Messenger):
    """Record the bnnpp layers a model builds: name → kind, prior, input width ``in``,
    ``units`` (filters for a convolution), and Glorot's ``fan_in`` / ``fan_out``
    (in / units for dense; kh·kw·in / kh·kw·out for conv2d)."""

    def __init__(self, fn=None):
        super().__init__(fn)
        self.layers: dict[str, dict] = {}

    def process_message(self, msg):
        if msg["type"] == LAYER_EFFECT:
            name, x, units, prior, _ = msg["args"]
            n_in, units = int(x.shape[-1]), int(units)
            field = math.prod(msg["kwargs"]["kernel_size"]) if msg["kind"] == "conv2d" else 1
            self.layers[name] = {
                "kind": msg["kind"], "prior": prior, "in": n_in, "units": units,
                "fan_in": field * n_in, "fan_out": field * units,
            }


def _find_layers(model: Callable, x, y) -> dict[str, dict]:
    rec = _LayerRecorder()

    def run(key):
        with rec:
            handlers.seed(model, key)(x, y)
        return 0

    jax.eval_shape(run, jax.random.PRNGKey(0))
    return {k: v for k, v in rec.layers.items() if v["kind"] in LAYER_KINDS}


def _generic_kl(tr, loc, sigma, u, generic: tuple[str, ...], kl_mode: str) -> jnp.ndarray:
    """KL(q ‖ p) of the sites outside bnnpp layers, each a Gaussian on its unconstrained space:
    closed form when the prior is Normal on the reals, else log q(u) − log p(value) − log|J|."""
    total = jnp.zeros(())
    for name in generic:
        site = tr[name]
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


def negative_elbo_terms(model, params, key, x, y, *, generic, estimator: str, kl: str, lik_scale: float = 1.0):
    """One Monte-Carlo sample of the two terms of the negative ELBO.

    Args:
        model: the NumPyro model.
        params: ``{"loc": {site: μ}, "rho": {site: ρ}}`` (σ = softplus(ρ)), plus ``"prior"``
            (``pi_logit``, ``log_sigma1``, ``log_sigma2``) when the scale mixture is learned.
        key: PRNG key of this sample.
        x, y: the (mini)batch.
        generic: names of the latent sites outside bnnpp layers (Gaussian on their
            unconstrained space).
        estimator, kl: as the options of :func:`fit`.
        lik_scale: N / batch size.

    Returns:
        ``(nll, kl)``: ``−lik_scale · log p(y | θ)`` and the KL(q ‖ p) estimate, scalars.
    """
    k_gen, k_layer, k_model = jax.random.split(key, 3)
    loc = params["loc"]
    sigma = jax.tree_util.tree_map(jax.nn.softplus, params["rho"])
    gkeys = jax.random.split(k_gen, max(1, len(generic)))
    u = {nm: loc[nm] + sigma[nm] * jax.random.normal(k, loc[nm].shape) for nm, k in zip(generic, gkeys, strict=False)}
    learned = None
    if "prior" in params:
        pp = params["prior"]
        learned = (jax.nn.sigmoid(pp["pi_logit"]), jnp.exp(pp["log_sigma1"]), jnp.exp(pp["log_sigma2"]))
    holder = {}

    def with_layers(m):
        holder["h"] = _VariationalLayers(m, loc, sigma, k_layer, estimator, kl, learned)
        return holder["h"]

    tr = latent_trace(model, u, x, y, k_model, extra_handlers=(with_layers,))
    kl_value = holder["h"].kl + _generic_kl(tr, loc, sigma, u, generic, kl)
    return -lik_scale * log_likelihood(tr), kl_value


_VAL_BATCH = 1000


def _validation_batches(xv: np.ndarray, yv: np.ndarray):
    """Validation rows padded to whole batches of ``_VAL_BATCH`` (at most): ``(k, B, ...)``
    inputs, ``(k, B)`` targets and a ``(k, B)`` mask that is 0 on the padding, on the device."""
    nv = xv.shape[0]
    b = min(nv, _VAL_BATCH)
    k = -(-nv // b)
    pad = k * b - nv
    xp = np.concatenate([xv, np.zeros((pad, *xv.shape[1:]), xv.dtype)]).reshape(k, b, *xv.shape[1:])
    yp = np.concatenate([yv, np.zeros(pad, yv.dtype)]).reshape(k, b)
    mask = (np.arange(k * b) < nv).astype(np.float32).reshape(k, b)
    return jax.device_put(xp), jax.device_put(yp), jax.device_put(mask)


def _mean_network_error(model, n_val: int):
    """``f(params, xb, yb, mask) -> scalar``: the model's error on the validation batches with
    every latent site at its variational mean μ (on the unconstrained space; layers use their
    default behaviour, so no noise): the error rate of the most probable class for
    Categorical/Bernoulli observations, the RMSE of the mean for Normal ones."""

    regression = []  # set while tracing: the observation's family decides the error measure

    def batch_error(loc, xb, yb):
        tr = latent_trace(model, loc, xb, None, jax.random.PRNGKey(0))
        if "y" not in tr:
            raise ValueError("validation_data needs the model's observation site 'y'")
        fn = unwrap(tr["y"]["fn"])
        if isinstance(fn, dist.CategoricalProbs | dist.CategoricalLogits):
            return (jnp.argmax(fn.probs, axis=-1) != yb).astype(jnp.float32)
        if isinstance(fn, dist.BernoulliProbs | dist.BernoulliLogits):
            return ((fn.probs > 0.5).astype(yb.dtype) != yb).astype(jnp.float32)
        if isinstance(fn, dist.Normal):
            regression.append(True)
            return (jnp.broadcast_to(fn.loc, yb.shape) - yb) ** 2
        raise TypeError(f"validation_data supports Categorical, Bernoulli and Normal observations, got {type(fn).__name__}")

    def error(params, xb, yb, mask):
        per_row = jax.lax.map(lambda a: batch_error(params["loc"], a[0], a[1]), (xb, yb))
        total = jnp.sum(per_row * mask) / n_val
        return jnp.sqrt(total) if regression else total

    return error


def _softplus_inv(y: float) -> float:
    return float(y + math.log(-math.expm1(-y)))


# --------------------------------------------------------------------------------------
# fit
# --------------------------------------------------------------------------------------


def fit(model, x, y, *, seed: int, progress: bool, **o) -> Posterior:
    """Fit ``model`` to ``(x, y)`` by Bayes by Backprop.

    Options (defaults in ``DEFAULTS``):
        epochs: passes over the data; steps = epochs × M, M = N // batch_size minibatches
            per epoch (the last partial batch of a shuffle is dropped; data are reshuffled on
            device every epoch).
        batch_size: rows per step (``None``: the full data, M = 1).
        learning_rate / optimizer: Adam's step size, or any optax transformation (not both).
        num_particles: Monte-Carlo samples of the ELBO per step (``vmap``-ed).
        kl: ``"analytic"`` (closed form where prior and factor are Gaussian) or ``"mc"``.
        kl_weighting: ``"uniform"`` or ``"blundell"`` (module docstring).
        estimator: ``"reparam"``, ``"local"`` or ``"flipout"`` for bnnpp dense and conv2d layers.
        init_loc: ``"glorot"`` — layer weight means U(±sqrt(6/(fan_in+fan_out))) (fan = in/out
            for dense, kh·kw·in / kh·kw·out for conv2d), biases 0, other
            sites U(±init_radius) on the unconstrained space; ``"uniform"`` — every mean
            U(±init_radius).
        init_radius: see init_loc.
        init_scale: the initial σ of every factor (ρ = softplus⁻¹(init_scale)).
        learn_prior: train the scale mixture's π, σ1, σ2 (needs ``priors.scale_mixture``).
        num_samples: posterior draws kept.
        chunk_size: steps per compiled chunk (default: about 20 progress updates, rounded to
            whole epochs when there are several minibatches per epoch).
        validation_data: ``(x_val, y_val)`` or ``None``. After every chunk the network at the
            variational means μ (no noise) is evaluated on it on the device (one compiled
            program, 1,000 rows at a time): error rate for classifiers, RMSE for regression.

    Returns:
        A :class:`Posterior` with ``num_samples`` draws in one chain; ``info["loss"]``,
        ``info["nll"]`` and ``info["kl"]`` are per-step traces ``(steps_run,)`` (loss is the
        weighted minibatch cost above, nll the rescaled data term, kl the unweighted KL);
        ``info["guide_params"]`` holds ``<site>_loc`` and ``<site>_scale`` (σ) per site; with
        ``validation_data``, ``info["val_error"]`` (one float per chunk) and
        ``info["val_step"]`` (the steps done when each was measured), lists.
    """
    n = x.shape[0]
    batch = o["batch_size"] or n  # ≤ n: checked by check_batch_size before fit is called
    val = None
    if o["validation_data"] is not None:  # shapes checked by validate_data; labels against the model here
        try:
            val = check_data(tuple(o["validation_data"]), model)
        except (TypeError, ValueError) as e:
            raise type(e)(f"validation_data: {e}") from None
    sites = latent_sites(model, x, y)
    layers = _find_layers(model, x, y)
    layer_sites = {f"{name}.{p}" for name in layers for p in ("w", "b")}
    generic = tuple(name for name in sites if name not in layer_sites)
    if o["learn_prior"] and (not layers or any(lay["prior"].kind != "scale_mixture" for lay in layers.values())):
        raise ValueError(
            "learn_prior=True trains a scale mixture's π, σ1, σ2: build the network with priors.scale_mixture() "
            "(CLI: --prior scale-mixture)"
        )
    optimizer = o["optimizer"] if o["optimizer"] is not None else optax.adam(o["learning_rate"])
    num_batches = n // batch
    num_steps = o["epochs"] * num_batches
    weights = jnp.asarray(num_batches * kl_weights(num_batches, o["kl_weighting"]), jnp.float32)
    lik_scale = n / batch
    data = (jax.device_put(x), jax.device_put(y))  # chunk arguments, not program constants
    x1, y1 = x[:1], y[:1]
    key_init, key_steps, key_data, key_draw = jax.random.split(jax.random.PRNGKey(seed), 4)
    rho0 = _softplus_inv(o["init_scale"])

    def init_fn(k):
        keys = dict(zip(sites, jax.random.split(k, len(sites)), strict=True))
        loc = {}
        for name, info in sites.items():
            layer, _, part = name.rpartition(".")
            if o["init_loc"] == "glorot" and name in layer_sites:
                lim = math.sqrt(6.0 / (layers[layer]["fan_in"] + layers[layer]["fan_out"]))
                loc[name] = (
                    jax.random.uniform(keys[name], info.shape, minval=-lim, maxval=lim)
                    if part == "w"
                    else jnp.zeros(info.shape)
                )
            else:
                r = o["init_radius"]
                loc[name] = jax.random.uniform(keys[name], info.shape, minval=-r, maxval=r)
        params = {"loc": loc, "rho": {name: jnp.full(s.shape, rho0) for name, s in sites.items()}}
        if o["learn_prior"]:
            pi, s1, s2 = next(iter(layers.values()))["prior"].params
            params["prior"] = {
                "pi_logit": jnp.asarray(math.log(pi / (1 - pi))),
                "log_sigma1": jnp.asarray(math.log(s1)),
                "log_sigma2": jnp.asarray(math.log(s2)),
            }
        return params, optimizer.init(params), jnp.zeros((), jnp.int32), jnp.arange(n, dtype=jnp.int32)

    def particle(params, key, xb, yb, kl_weight):
        nll, kl = negative_elbo_terms(
            model, params, key, xb, yb, generic=generic, estimator=o["estimator"], kl=o["kl"], lik_scale=lik_scale
        )
        return nll + kl_weight * kl, (nll, kl)

    def objective(params, key, xb, yb, kl_weight):
        keys = jax.random.split(key, o["num_particles"])
        loss, (nll, kl) = jax.vmap(particle, in_axes=(None, 0, None, None, None))(params, keys, xb, yb, kl_weight)
        return loss.mean(), (nll.mean(), kl.mean())

    def step(state, data):
        xj, yj = data
        params, opt_state, t, perm = state
        i = t % num_batches
        if batch == n:
            xb, yb = xj, yj
        else:  # reshuffle on device at the start of each epoch, then gather the minibatch
            perm = jax.lax.cond(
                i == 0,
                lambda: jax.random.permutation(jax.random.fold_in(key_data, t // num_batches), n).astype(jnp.int32),
                lambda: perm,
            )
            idx = jax.lax.dynamic_slice(perm, (i * batch,), (batch,))
            xb, yb = xj[idx], yj[idx]
        (loss, (nll, kl)), grads = jax.value_and_grad(objective, has_aux=True)(
            params, jax.random.fold_in(key_steps, t), xb, yb, weights[i]
        )
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state, t + 1, perm), jnp.stack([loss, nll, kl])

    def draw(k, state):
        params = state[0]
        sigma = jax.tree_util.tree_map(jax.nn.softplus, params["rho"])
        keys = jax.random.split(k, o["num_samples"])

        def one(kk):
            k_u, k_m = jax.random.split(kk)
            uk = jax.random.split(k_u, len(sites))
            u = {nm: params["loc"][nm] + sigma[nm] * jax.random.normal(ki, params["loc"][nm].shape) for nm, ki in zip(sites, uk, strict=True)}
            # one row is enough to run the model: latent shapes do not depend on n, and this
            # keeps drawing cheap when the training set is large
            return constrained_values(model, u, x1, y1, k_m, sites)

        return jax.vmap(one)(keys), params["loc"], sigma, params.get("prior")

    chunk_size = o["chunk_size"] or default_chunk_size(num_steps)
    if not o["chunk_size"] and num_batches > 1:  # whole epochs per chunk
        chunk_size = num_batches * max(1, round(chunk_size / num_batches))
    t0 = time.perf_counter()
    lowered_init = jax.jit(init_fn).lower(key_init)
    state_shape = lowered_init.out_info
    chunk, recover = lower_guarded(step, state_shape, num_steps, chunk_size, consts=data)
    lowered = {
        "init": lowered_init,
        "chunk": chunk,
        "draw": jax.jit(draw).lower(key_draw, state_shape),
    }
    if val is not None:
        val_args = _validation_batches(*val)
        lowered["val"] = jax.jit(_mean_network_error(model, val[0].shape[0])).lower(state_shape[0], *val_args)
    programs = compile_all(lowered)
    compile_seconds = time.perf_counter() - t0
    val_log: list[tuple[int, float]] = []

    def after_chunk(state) -> dict:
        err = float(programs["val"](state[0], *val_args))
        val_log.append((int(state[2]), err))
        return {"val_err": f"{err:.4g}"}

    res = drive(
        programs["chunk"], programs["init"](key_init), num_steps, chunk_size, progress=progress, desc="bbb",
        postfix=lambda f: {"elbo": f"{-(f[:, 1] + f[:, 2]).mean():.4g}", "nll": f"{f[:, 1].mean():.4g}", "kl": f"{f[:, 2].mean():.4g}"},
        compile_seconds=compile_seconds, after_chunk=after_chunk if val is not None else None, consts=data,
        recover=recover,
    )
    t0 = time.perf_counter()
    draws, loc, sigma, learned = jax.device_get(programs["draw"](key_draw, res.state))
    sample_seconds = time.perf_counter() - t0
    losses = res.losses.reshape(-1, 3)
    info = {
        "method": "bbb",
        "seed": seed,
        "options": {**o, "validation_data": None if val is None else [list(val[0].shape), list(val[1].shape)]},
        "loss": losses[:, 0],
        "nll": losses[:, 1],
        "kl": losses[:, 2],
        "steps_run": res.steps_run,
        "stopped_at": res.stopped_at,
        "num_batches": num_batches,
        "compile_seconds": compile_seconds,
        "run_seconds": res.run_seconds,
        "sample_seconds": sample_seconds,
        "guide_params": {
            **{f"{k}_loc": np.asarray(v) for k, v in loc.items()},
            **{f"{k}_scale": np.asarray(v) for k, v in sigma.items()},
        },
    }
    if val is not None:
        info["val_step"] = [s for s, _ in val_log]
        info["val_error"] = [e for _, e in val_log]
    if learned is not None:
        info["learned_prior"] = {
            "pi": float(1 / (1 + np.exp(-learned["pi_logit"]))),
            "sigma1": float(np.exp(learned["log_sigma1"])),
            "sigma2": float(np.exp(learned["log_sigma2"])),
        }
    samples = {k: np.asarray(v)[None] for k, v in draws.items()}
    return Posterior(samples, info, model, x, y, sites)


register(
    Backend(
        "bbb",
        fit,
        DEFAULTS,
        validate,
        "Bayes by Backprop: mean-field Gaussian, softplus σ, minibatch KL weighting, local/Flipout estimators",
        exclusive=(("optimizer", "learning_rate"),),
        validate_data=validate_data,
    )
)
