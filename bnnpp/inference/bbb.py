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
from bnnpp.inference._loop import compile_all, default_chunk_size, drive, lower_chunk
from bnnpp.inference.base import (
    BATCH_WRAPPERS,
    Backend,
    Posterior,
    check_batch_size,
    check_optimizer,
    latent_sites,
    one_of,
    positive_float,
    positive_int,
    register,
    unwrap,
)
from bnnpp.models.layers import LAYER_EFFECT
from bnnpp.priors import Prior, ScaleMixtureNormal

__all__ = ["DEFAULTS", "blundell_weights", "dense_preactivations", "gaussian_kl", "kl_weights", "negative_elbo_terms"]

ESTIMATORS = ("reparam", "local", "flipout")

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


# --------------------------------------------------------------------------------------
# The layer handler: answers bnnpp's layer messages from the variational parameters
# --------------------------------------------------------------------------------------


class _VariationalLayers(Messenger):
    """Inside the model, replace every bnnpp dense layer by a draw from q and accumulate the
    layers' KL(q ‖ p) (conditional on the sampled prior scale)."""

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
        if msg["type"] != LAYER_EFFECT or msg["kind"] != "dense" or msg["value"] is not None:
            return
        name, x, units, prior, scale = msg["args"]
        wn, bn = f"{name}.w", f"{name}.b"
        key = jax.random.fold_in(self.key, self.count)
        self.count += 1
        h, w, b = dense_preactivations(
            key, x, self.loc[wn], self.sigma[wn], self.loc[bn], self.sigma[bn], self.estimator
        )
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
    """Record the bnnpp layers a model builds (name, kind, prior, input width, units)."""

    def __init__(self, fn=None):
        super().__init__(fn)
        self.layers: dict[str, dict] = {}

    def process_message(self, msg):
        if msg["type"] == LAYER_EFFECT:
            name, x, units, prior, _ = msg["args"]
            self.layers[name] = {"kind": msg["kind"], "prior": prior, "in": int(x.shape[-1]), "units": int(units)}


def _find_layers(model: Callable, x, y) -> dict[str, dict]:
    rec = _LayerRecorder()

    def run(key):
        with rec:
            handlers.seed(model, key)(x, y)
        return 0

    jax.eval_shape(run, jax.random.PRNGKey(0))
    return {k: v for k, v in rec.layers.items() if v["kind"] == "dense"}


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
        generic: names of the latent sites outside bnnpp dense layers (Gaussian on their
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
        estimator: ``"reparam"``, ``"local"`` or ``"flipout"`` for bnnpp dense layers.
        init_loc: ``"glorot"`` — layer weight means U(±sqrt(6/(in+out))), biases 0, other
            sites U(±init_radius) on the unconstrained space; ``"uniform"`` — every mean
            U(±init_radius).
        init_radius: see init_loc.
        init_scale: the initial σ of every factor (ρ = softplus⁻¹(init_scale)).
        learn_prior: train the scale mixture's π, σ1, σ2 (needs ``priors.scale_mixture``).
        num_samples: posterior draws kept.
        chunk_size: steps per compiled chunk (default: about 20 progress updates).

    Returns:
        A :class:`Posterior` with ``num_samples`` draws in one chain; ``info["loss"]``,
        ``info["nll"]`` and ``info["kl"]`` are per-step traces ``(steps_run,)`` (loss is the
        weighted minibatch cost above, nll the rescaled data term, kl the unweighted KL);
        ``info["guide_params"]`` holds ``<site>_loc`` and ``<site>_scale`` (σ) per site.
    """
    n = x.shape[0]
    batch = o["batch_size"] or n  # ≤ n: checked by check_batch_size before fit is called
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
    xj, yj = jax.device_put(x), jax.device_put(y)
    key_init, key_steps, key_data, key_draw = jax.random.split(jax.random.PRNGKey(seed), 4)
    rho0 = _softplus_inv(o["init_scale"])

    def init_fn(k):
        keys = dict(zip(sites, jax.random.split(k, len(sites)), strict=True))
        loc = {}
        for name, info in sites.items():
            layer, _, part = name.rpartition(".")
            if o["init_loc"] == "glorot" and name in layer_sites:
                lim = math.sqrt(6.0 / (layers[layer]["in"] + layers[layer]["units"]))
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

    def step(state):
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
            return constrained_values(model, u, xj[:1], yj[:1], k_m, sites)

        return jax.vmap(one)(keys), params["loc"], sigma, params.get("prior")

    chunk_size = o["chunk_size"] or default_chunk_size(num_steps)
    t0 = time.perf_counter()
    lowered_init = jax.jit(init_fn).lower(key_init)
    state_shape = lowered_init.out_info
    programs = compile_all(
        {
            "init": lowered_init,
            "chunk": lower_chunk(step, state_shape, num_steps, chunk_size),
            "draw": jax.jit(draw).lower(key_draw, state_shape),
        }
    )
    compile_seconds = time.perf_counter() - t0
    res = drive(
        programs["chunk"], programs["init"](key_init), num_steps, chunk_size, progress=progress, desc="bbb",
        postfix=lambda f: {"elbo": f"{-(f[:, 1] + f[:, 2]).mean():.4g}", "nll": f"{f[:, 1].mean():.4g}", "kl": f"{f[:, 2].mean():.4g}"},
        compile_seconds=compile_seconds,
    )
    t0 = time.perf_counter()
    draws, loc, sigma, learned = jax.device_get(programs["draw"](key_draw, res.state))
    sample_seconds = time.perf_counter() - t0
    losses = res.losses.reshape(-1, 3)
    info = {
        "method": "bbb",
        "seed": seed,
        "options": dict(o),
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
        validate_data=check_batch_size,
    )
)
