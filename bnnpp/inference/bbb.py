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
where prior and factor are both Gaussian (``kl="analytic"``) and otherwise (scale mixture,
Laplace, Cauchy, …, or ``kl="mc"``) the Monte-Carlo estimate −H(q) − log p(θ) at one draw θ of
a layer's weights: E_q[log q] is the exact entropy, whose gradient equals that of log q(θ) at
the draw (Blundell et al. 2015, eq. 2, with the entropy's noise removed).

The gradient estimators for bnnpp dense and conv2d layers (``estimator``: ``"reparam"``,
``"local"`` — the local reparameterisation trick — or ``"flipout"``) and the layers' KL terms
are in :mod:`bnnpp.inference.variational_layers`.

``validation_data=(x_val, y_val)`` evaluates the network at the variational means (no noise)
on the validation set after every compiled chunk, on the device: the error rate for
classifiers, the RMSE for Gaussian regression (``info["val_error"]``, ``info["val_step"]``,
``val_err`` in the progress bar).
``num_particles`` samples per step are ``vmap``-ed. With ``learn_prior=True`` the scale
mixture's π, σ1, σ2 are trained with the variational parameters (type-II maximum likelihood
on the ELBO), as in McAteer's "A quick intro to Bayesian neural networks".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from bnnpp.inference.algorithm import Algorithm, Hooks, RunSpec
from bnnpp.inference.collapse import mean_field_small_data_note, say_not_suited, small_hierarchical_regression
from bnnpp.inference.evidence import auto_takes_evidence
from bnnpp.inference.joint import constrained_values
from bnnpp.inference.kl_weighting import blundell_weights as blundell_weights  # noqa: F401  (re-exported)
from bnnpp.inference.kl_weighting import kl_weights
from bnnpp.inference.map_estimate import map_start
from bnnpp.inference.optimizer_step import apply_optimizer
from bnnpp.inference.options import (
    Options,
    boolean,
    check_batch_size,
    check_validation_data,
    check_validation_pair,
    optimizer,
    optimizer_of,
    option,
    optional,
    positive_float,
    positive_int,
    schedule_option,
    steps_for,
)
from bnnpp.inference.registry import Method, register
from bnnpp.inference.start import apply_start
from bnnpp.inference.variational_layers import (  # noqa: F401  (re-exported: bbb's estimators in bnnpp 0.1)
    ESTIMATORS,
    LAYER_KINDS,
    conv_preactivations,
    dense_preactivations,
    find_layers,
    gaussian_kl,
    negative_elbo_terms,
    softplus,
)
from bnnpp.introspection import latent_sites, probe_rows
from bnnpp.posterior import MeanFieldGaussian

_find_layers = find_layers  # its name in bnnpp 0.1

HYPERPARAMETERS = ("variational", "point", "evidence", "map", "auto")

__all__ = [
    "DEFAULTS",
    "HYPERPARAMETERS",
    "BBBInfo",
    "BBBOptions",
    "BBBState",
    "blundell_weights",
    "build",
    "conv_preactivations",
    "dense_preactivations",
    "gaussian_kl",
    "kl_weights",
    "negative_elbo_terms",
]


def unit_interval(name: str, value) -> None:
    """``value`` in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")


@dataclass(frozen=True)
class BBBOptions(Options):
    """Options of ``method="bbb"`` (see :func:`build`)."""

    refused: ClassVar[dict[str, str]] = {
        "temperature": "bbb cannot temper its posterior yet (its closed-form KL is computed outside the tempered log density): fit advi, nuts or sgld for a tempered posterior"
    }

    exclusive = (("optimizer", "learning_rate"), ("optimizer", "schedule"), ("optimizer", "rho_lr_factor"), ("num_steps", "epochs"))

    epochs: int = option(5000, "passes over the training data", check=positive_int)
    num_steps: int | None = option(None, "optimisation steps (replaces epochs)", check=optional(positive_int), type=int)
    batch_size: int | None = option(None, "minibatch rows per step (None: full batch)", check=optional(positive_int), type=int)
    learning_rate: float = option(1e-2, "Adam learning rate (the start of the schedule)", check=positive_float)
    schedule: str = schedule_option()
    optimizer: Any = option(None, "any optax transformation (replaces learning_rate and schedule)", check=optimizer, flag=False)
    rho_lr_factor: float = option(
        1.0,
        "the σ's (ρ) step size as a share of the means' (below 1 keeps the σ's from drifting to the prior's wide "
        "component over long minibatch runs)",
        check=positive_float,
    )
    num_particles: int = option(1, "Monte-Carlo samples per ELBO estimate", check=positive_int)
    kl: str = option("analytic", "closed-form KL where prior and q are Gaussian, or Monte-Carlo", choices=("analytic", "mc"))
    kl_weighting: str = option("uniform", "KL weight per minibatch: 1/M or 2^(M-i)/(2^M-1)", choices=("uniform", "blundell"))
    estimator: str = option("local", "gradient estimator for dense and conv layers", choices=ESTIMATORS)
    init_loc: str = option(
        "glorot",
        "initial variational means: glorot, uniform, or map (a short evidence-trained MAP fit of map_steps steps)",
        choices=("glorot", "uniform", "map"),
    )
    map_steps: int = option(5000, "MAP steps of init_loc='map' and of hyperparameters='evidence'", check=positive_int)
    init_radius: float = option(2.0, "start values uniform in (-r, r) on the unconstrained space", check=positive_float)
    init_scale: float = option(0.05, "initial sd of the variational factors", check=positive_float)
    learn_prior: bool = option(False, "train the scale mixture's pi, sigma1, sigma2", check=boolean)
    kl_warmup: float = option(
        0.0,
        "share of the steps over which the KL weight rises linearly from 0 to 1 (KL annealing; 0: none)",
        check=unit_interval,
    )
    hyperparameters: str = option(
        "auto",
        "the sites outside the layers (prior scales, a learned noise sd): variational (a Gaussian factor each), "
        "point (point estimates on the ELBO; q over the weights only), evidence (held at the values of an "
        "evidence-trained MAP of map_steps steps, which the means also start from; q over the weights only), map (the "
        "same, held at a joint MAP's values), auto (evidence under a hierarchical Normal prior; map under another "
        "hierarchical prior on small regression data; else variational)",
        choices=HYPERPARAMETERS,
    )
    num_samples: int = option(1000, "posterior draws kept (per chain for MCMC)", check=positive_int)
    chunk_size: int | None = option(None, "steps per compiled chunk", check=optional(positive_int), flag=False, type=int)
    validation_data: Any = option(None, "(x_val, y_val) scored at the variational means after every chunk", flag=False)

    def check(self) -> None:
        check_validation_pair(self.validation_data)

    def check_data(self, x: np.ndarray, y: np.ndarray) -> None:
        """``batch_size`` at most the number of rows, and validation inputs with the training
        inputs' shape per row (labels are checked against the model in :func:`build`)."""
        check_batch_size(self.batch_size, x)
        check_validation_data(self.validation_data, x)


DEFAULTS = BBBOptions.defaults()
"""Every option's default, as a dict (option name → value)."""


def resolve_hyperparameters(choice: str, model, x, y, layers: dict | None = None) -> str:
    """``choice``, with ``"auto"`` resolved: ``"evidence"`` under a hierarchical Normal prior on
    layers the evidence runs on (:func:`~bnnpp.inference.evidence.auto_takes_evidence`),
    ``"map"`` under another hierarchical prior (Laplace, Cauchy, ... weights, whose curvature the
    evidence cannot use) on small regression data
    (:func:`~bnnpp.inference.collapse.small_hierarchical_regression`), else ``"variational"``. ``layers``: the
    model's :func:`~bnnpp.inference.variational_layers.find_layers`, when the caller has them.

    Why evidence under a hierarchical prior: on small regression data the mean-field ELBO
    with the scales and noise learned — as factors of q or as point estimates, from a Glorot
    or a MAP start, with or without KL annealing — shrinks the scales and explains the targets
    as noise (the KL term outweighs what the few rows' likelihood pays for a larger noise: Coker
    et al. 2022, "Wide mean-field Bayesian neural networks ignore the data"); held at an
    evidence-trained MAP's values (MacKay 1992) the scales and noise keep the data."""
    if choice != "auto":
        return choice
    if auto_takes_evidence(model, x, y):
        return "evidence"
    # the same case under Laplace, Cauchy or other non-Normal weights, where the evidence does not apply: the scales as
    # factors of q or as ELBO point estimates explain the targets as noise (as above), held at a joint MAP's values
    # they keep the data
    return "map" if small_hierarchical_regression(model, x, y, layers) else "variational"


def point_sites(choice: str, layers: dict, generic: tuple) -> tuple:
    """The sites held as point estimates under a resolved ``hyperparameters=choice``: the
    sites outside the bnnpp layers (``generic``) for ``"point"``, ``"evidence"`` and ``"map"``; none for
    ``"variational"`` or a model without bnnpp layers (whose every site is outside them)."""
    if not layers or choice == "variational":
        return ()
    return tuple(generic)


def _sigma(rho: dict, point: tuple) -> dict:
    """σ = softplus(ρ) per site; 0 for the point estimates."""
    return {k: jnp.zeros_like(v) if k in point else softplus(v) for k, v in rho.items()}


def _softplus_inv(y: float) -> float:
    return float(y + math.log(-math.expm1(-y)))


# --------------------------------------------------------------------------------------
# The algorithm
# --------------------------------------------------------------------------------------


def slow_rho(opt: Any, factor: float) -> Any:
    """``opt`` with the updates of bbb's ``params["rho"]`` scaled by ``factor`` (the means and a
    learned prior keep ``opt``'s). For Adam, which is invariant to the gradient's scale, this is
    Adam on ρ at ``factor`` × the learning rate on the same schedule. ``factor == 1`` returns
    ``opt`` itself. Returns an optax ``GradientTransformation``."""
    if factor == 1.0:
        return opt
    return optax.multi_transform(
        {"rho": optax.chain(opt, optax.scale(factor)), "rest": opt},
        lambda params: {k: "rho" if k == "rho" else "rest" for k in params},
    )


class BBBState(NamedTuple):
    """params: ``{"loc": {site: μ}, "rho": {site: ρ}}`` (σ = softplus(ρ)), plus ``"prior"``
    (``pi_logit``, ``log_sigma1``, ``log_sigma2``) with ``learn_prior``; opt_state: the
    optimizer's; t: steps done (int32, sets the minibatch's KL weight)."""

    params: dict
    opt_state: Any
    t: jax.Array


class BBBInfo(NamedTuple):
    """Per step: loss — the weighted minibatch cost (module docstring); nll — the data term
    rescaled by N/B; kl — the unweighted KL(q ‖ p); negative_elbo — nll + kl, the full-data
    estimate whatever the KL weighting. Scalars (means over particles)."""

    loss: jax.Array
    nll: jax.Array
    kl: jax.Array
    negative_elbo: jax.Array


def build(model, x, y, options: BBBOptions, start: dict | None = None) -> Algorithm:
    """Bayes by Backprop as an :class:`Algorithm`; ``start``: site → unconstrained value where
    the means μ start (:func:`bnnpp.inference.start.start_position`), over ``init_loc``.

    Options (:class:`BBBOptions`):
        epochs: passes over the data; steps = epochs × M, M = N // batch_size minibatches
            per epoch (the runner reshuffles on the device every epoch and drops the last
            partial batch); or ``num_steps`` steps (a last epoch may be partial).
        batch_size: rows per step (``None``: the full data, M = 1).
        learning_rate / optimizer: Adam's step size, or any optax transformation (not both).
        num_particles: Monte-Carlo samples of the ELBO per step (``vmap``-ed).
        kl: ``"analytic"`` (closed form where prior and factor are Gaussian) or ``"mc"``.
        kl_weighting: ``"uniform"`` or ``"blundell"`` (module docstring).
        estimator: ``"reparam"``, ``"local"`` or ``"flipout"`` for bnnpp dense and conv2d layers.
        init_loc: ``"glorot"`` — layer weight means U(±sqrt(6/(fan_in+fan_out))) (fan = in/out
            for dense, kh·kw·in / kh·kw·out for conv2d), biases 0, other sites
            U(±init_radius) on the unconstrained space; ``"uniform"`` — every mean
            U(±init_radius).
        init_scale: the initial σ of every factor (ρ = softplus⁻¹(init_scale)).
        learn_prior: train the scale mixture's π, σ1, σ2 (needs ``priors.scale_mixture``).
        num_samples: posterior draws kept.
        validation_data: scored by the runner at the variational means μ after every chunk.

    Returns:
        The algorithm; its posterior's approximation is a
        :class:`~bnnpp.posterior.MeanFieldGaussian` (μ, σ per site), its traces ``loss``,
        ``nll``, ``kl``, ``negative_elbo`` per step, and ``extras["learned_prior"]`` the
        trained π, σ1, σ2 with ``learn_prior``.
    """
    n = x.shape[0]
    batch = options.batch_size or n  # ≤ n: checked by check_data before build
    sites = latent_sites(model, x, y)
    layers = find_layers(model, x, y)
    layer_sites = {site: (name, i) for name, lay in layers.items() for i, site in enumerate(lay["sites"])}  # i=0: weights
    generic = tuple(name for name in sites if name not in layer_sites)
    if options.learn_prior and (not layers or any(lay["prior"].kind != "scale_mixture" for lay in layers.values())):
        raise ValueError(
            "learn_prior=True trains a scale mixture's π, σ1, σ2: build the network with priors.scale_mixture() "
            "(CLI: --prior scale-mixture)"
        )
    choice = resolve_hyperparameters(options.hyperparameters, model, x, y, layers)
    small = small_hierarchical_regression(model, x, y, layers)
    point = point_sites(choice, layers, generic)
    opt = optimizer_of(options, steps_for(options, n))
    opt = slow_rho(opt, options.rho_lr_factor)
    num_batches = n // batch
    weights = jnp.asarray(num_batches * kl_weights(num_batches, options.kl_weighting), jnp.float32)
    lik_scale = n / batch
    x1, y1 = probe_rows(model, x, y)  # the rows that give the latents their shapes run the model when drawing
    rho0 = _softplus_inv(options.init_scale)

    frozen = point if choice in ("evidence", "map") else ()
    if frozen:  # held at the values of an evidence-trained or a joint MAP, which the means start from
        from_map = map_start(model, x, y, options.map_steps, options.batch_size, hyperparameters=choice)
    else:
        from_map = map_start(model, x, y, options.map_steps, options.batch_size) if options.init_loc == "map" else None

    def init(key, data):
        keys = dict(zip(sites, jax.random.split(key, len(sites)), strict=True))
        loc = {}
        for name, info in sites.items():
            if from_map is not None:
                continue
            if options.init_loc == "glorot" and name in layer_sites:
                layer, part = layer_sites[name]
                lim = math.sqrt(6.0 / (layers[layer]["fan_in"] + layers[layer]["fan_out"]))
                loc[name] = jax.random.uniform(keys[name], info.shape, minval=-lim, maxval=lim) if part == 0 else jnp.zeros(info.shape)
            else:
                r = options.init_radius
                loc[name] = jax.random.uniform(keys[name], info.shape, minval=-r, maxval=r)
        if from_map is not None:
            position = from_map(key, data)
            loc = {name: position[name] for name in sites}
        loc = apply_start(loc, start)
        params = {"loc": loc, "rho": {name: jnp.full(s.shape, rho0) for name, s in sites.items()}}
        if options.learn_prior:
            pi, s1, s2 = next(iter(layers.values()))["prior"].params
            params["prior"] = {
                "pi_logit": jnp.asarray(math.log(pi / (1 - pi))),
                "log_sigma1": jnp.asarray(math.log(s1)),
                "log_sigma2": jnp.asarray(math.log(s2)),
            }
        return BBBState(params, opt.init(params), jnp.zeros((), jnp.int32))

    def particle(params, key, xb, yb, kl_weight):
        nll, kl = negative_elbo_terms(
            model,
            params,
            key,
            xb,
            yb,
            generic=generic,
            estimator=options.estimator,
            kl=options.kl,
            lik_scale=lik_scale,
            point=point,
        )
        return nll + kl_weight * kl, (nll, kl)

    def objective(params, key, xb, yb, kl_weight):
        if options.num_particles == 1:  # no particle axis: vmap's size-1 axis costs transposes around the matmuls
            return particle(params, jax.random.split(key, 1)[0], xb, yb, kl_weight)  # the key vmap would give
        keys = jax.random.split(key, options.num_particles)
        loss, (nll, kl) = jax.vmap(particle, in_axes=(None, 0, None, None, None))(params, keys, xb, yb, kl_weight)
        return loss.mean(), (nll.mean(), kl.mean())

    warmup_steps = options.kl_warmup * steps_for(options, n)

    def step(key, state, batch_data):
        anneal = jnp.minimum(1.0, (state.t + 1) / warmup_steps) if warmup_steps > 0 else 1.0
        (loss, (nll, kl)), grads = jax.value_and_grad(objective, has_aux=True)(
            state.params, key, *batch_data, anneal * weights[state.t % num_batches]
        )
        if frozen:  # evidence-trained hyperparameters are held
            grads = {**grads, "loc": {k: jnp.zeros_like(v) if k in frozen else v for k, v in grads["loc"].items()}}
        params, opt_state = apply_optimizer(opt, grads, state.opt_state, state.params)
        return BBBState(params, opt_state, state.t + 1), BBBInfo(loss, nll, kl, nll + kl)

    def sample(key, state, num_samples):
        params = state.params
        sigma = _sigma(params["rho"], point)  # the σ the ELBO was trained with

        def one(k):
            k_u, k_m = jax.random.split(k)
            uk = jax.random.split(k_u, len(sites))
            u = {
                nm: params["loc"][nm] + sigma[nm] * jax.random.normal(ki, params["loc"][nm].shape) for nm, ki in zip(sites, uk, strict=True)
            }
            return constrained_values(model, u, x1, y1, k_m, sites)

        return jax.vmap(one)(jax.random.split(key, num_samples))

    def approximation(state):
        return MeanFieldGaussian(dict(state.params["loc"]), _sigma(state.params["rho"], point))

    def extras(state):
        said = say_not_suited(mean_field_small_data_note("bbb", n, held=bool(frozen))) if small else {}
        if "prior" not in state.params:
            return said
        pp = state.params["prior"]
        return {
            **said,
            "learned_prior": {
                "pi": float(1 / (1 + np.exp(-pp["pi_logit"]))),
                "sigma1": float(np.exp(pp["log_sigma1"])),
                "sigma2": float(np.exp(pp["log_sigma2"])),
            },
        }

    def postfix(info):
        return {"elbo": f"{-info.negative_elbo.mean():.4g}", "nll": f"{info.nll.mean():.4g}", "kl": f"{info.kl.mean():.4g}"}

    return Algorithm(
        init,
        step,
        sample,
        RunSpec(num_steps=steps_for(options, n), num_samples=options.num_samples, batch_size=options.batch_size, name="bbb"),
        Hooks(point=lambda state: state.params["loc"], approximation=approximation, extras=extras, postfix=postfix),
    )


register(
    Method(
        "bbb",
        BBBOptions,
        build=build,
        summary="Bayes by Backprop: mean-field Gaussian, softplus σ, minibatch KL weighting, local/Flipout estimators",
        smoke={"epochs": 60, "num_samples": 20, "map_steps": 50},
    )
)
