"""The prior precision δ: the Laplace evidence over log δ (and log σ) from the curvature's
eigenvalues (MacKay 1992; Immer et al. 2021, eq. 4), and ``prior_precision="validation"``'s
grid over multiples of the evidence's δ (Daxberger et al. 2021, §4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import optax

from bnnpp.inference.laplace.approximation import LaplaceGaussian, _linearised

# --------------------------------------------------------------------------------------
# The evidence: log Z over log δ (and log σ) from the curvature's eigenvalues
# --------------------------------------------------------------------------------------

if TYPE_CHECKING:
    from bnnpp.inference.laplace import LaplaceOptions


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


def _gaussian_loglik(n, ssr):
    return lambda tau: -n * tau - 0.5 * n * jnp.log(2 * jnp.pi) - ssr / (2 * jnp.exp(2 * tau))


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
        "validation_factors": list(VALIDATION_FACTORS),
        "validation_log_density": scores,
    }
    return _with_prior_factor(params, layers, VALIDATION_FACTORS[best]), facts


def _precision_info(value, options: LaplaceOptions):
    """δ for ``info``: None (model prior), a float, or a list (one per layer)."""
    if options.precision == "model":
        return None
    return [float(v) for v in np.ravel(value)] if np.ndim(value) else float(value)
