"""The Laplace approximation's parameters at the MAP (:func:`_laplace`): the curvature (exact
Hessian, GGN diagonal or K-FAC), the evidence-tuned prior precision and observation sd, as the
flat named arrays of :class:`~bnnpp.inference.laplace.approximation.LaplaceGaussian`
(the math and its references are in :mod:`bnnpp.inference.laplace`'s module docstring)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.flatten_util import ravel_pytree
from numpyro.distributions.transforms import biject_to

from bnnpp.inference.evidence import _full_ggn as _evidence_full_ggn
from bnnpp.inference.joint import latent_trace, log_likelihood, prior_diag, site_log_prior
from bnnpp.inference.laplace.approximation import _KEY, _observation
from bnnpp.inference.laplace.curvature import _ggn, batched_sum
from bnnpp.inference.laplace.evidence import _evidence, _gaussian_loglik
from bnnpp.introspection import probe_rows

if TYPE_CHECKING:
    from bnnpp.inference.laplace import LaplaceOptions
    from bnnpp.inference.laplace.planning import _Plan

__all__ = ["_laplace"]


def _laplace(model, x, y, u, p: _Plan, options: LaplaceOptions) -> dict:
    """The approximation's params (see :class:`LaplaceGaussian`) at the MAP ``u``, traceable."""
    theta = {k: u[k] for k in sorted(p.subset)}  # sorted: the flattening order of ravel_pytree
    fixed = {k: v for k, v in u.items() if k not in theta}
    fixed_delta = None if p.precision in ("evidence", "model", "validation", "from_map") else jnp.float32(p.precision)
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
            const = (
                log_rest + 0.5 * flat.shape[0] * jnp.log(2 * jnp.pi) - 0.5 * jnp.sum(jnp.log(jnp.maximum(jnp.linalg.eigvalsh(h0), 1e-30)))
            )
        sigma0 = jnp.log(_noise_of(model, u, x)) if p.tune_sigma else jnp.zeros(())
        loglik_of = (lambda tau: loglik) if not p.tune_sigma else _gaussian_loglik(n, _ssr(model, u, x, y))
        delta, sigma, log_z = _evidence(
            eig, np.zeros(eig.shape[0], np.int32), [r_idx.size], jnp.stack([theta_sq]), loglik_of, const, fixed_delta, p.tune_sigma, sigma0
        )
        delta = delta[0]
        scale = jnp.exp(2 * (sigma0 - jnp.log(sigma))) if p.tune_sigma else 1.0
        h = scale * h_lik + h_rest + jnp.diag(jnp.where(mask, delta, 0.0))
        e, q = jnp.linalg.eigh(0.5 * (h + h.T))
        # directions of clearly negative curvature (beyond 1e-4 of the largest: smaller ones are the
        # rounding of a converged MAP's flat directions); popped by fit, which warns, not saved
        params["indefinite_directions"] = jnp.sum(e < -1e-4 * jnp.max(jnp.abs(e)))
        e = jnp.maximum(e, 1e-6 * jnp.max(jnp.abs(e)))  # an indefinite direction (not a strict optimum) gets a tiny curvature
        params["covariance_factor"] = q / jnp.sqrt(e)
    elif p.hessian == "ggn":
        return {**params, **_full_ggn_laplace(model, x, y, u, theta, fixed, p, fixed_delta, options.curvature_batch_size)}
    else:
        curv, stats = _ggn(model, u, x, y, p.layers, p.hessian, options.curvature_batch_size)
        sigma0 = jnp.log(_noise_of(model, u, x)) if p.tune_sigma else jnp.zeros(())
        if p.hessian == "diag":
            eig = jnp.concatenate([c["diag"].ravel() for c in curv.values()])
        else:
            factors = {k: (jnp.linalg.eigh(c["A"]), jnp.linalg.eigh(c["G"])) for k, c in curv.items()}
            eig = jnp.concatenate([jnp.outer(jnp.maximum(a[0], 0), jnp.maximum(g[0], 0)).ravel() for a, g in factors.values()])
        layerwise = options.prior_structure == "layerwise" or p.precision == "from_map"
        if p.precision == "from_map":  # the evidence-trained MAP's prior, one δ per layer, fixed
            fixed_delta = _layer_prior_precision(prior_diag(model, theta, fixed, x, y, _KEY), list(curv))
        sizes = [int(np.prod(jnp.shape(theta[f"{k}.w"]))) + int(np.prod(jnp.shape(theta[f"{k}.b"]))) for k in curv]
        sq = [jnp.sum(theta[f"{k}.w"] ** 2) + jnp.sum(theta[f"{k}.b"] ** 2) for k in curv]
        if not layerwise:
            sizes, sq = [sum(sizes)], [sum(sq)]
        groups = np.repeat(
            np.arange(len(curv)) if layerwise else np.zeros(len(curv), np.int32),
            [int(np.prod(jnp.shape(theta[f"{k}.w"]))) + int(np.prod(jnp.shape(theta[f"{k}.b"]))) for k in curv],
        ).astype(np.int32)
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
    params["prior_precision"] = jnp.asarray(jnp.nan if p.precision == "model" else delta, jnp.float32)
    noise = sigma if p.tune_sigma else (_noise_of(model, u, x) if p.likelihood == "gaussian" else jnp.nan)
    params["noise"] = jnp.asarray(noise, jnp.float32)
    params["log_marginal_likelihood"] = jnp.asarray(log_z, jnp.float32)
    return params


def _full_ggn_laplace(model, x, y, u, theta: dict, fixed: dict, p: _Plan, fixed_delta, batch: int) -> dict:
    """``hessian="ggn"``: the full generalised Gauss–Newton J^T Λ J of the layers' weights θ
    (P ≤ :data:`~bnnpp.inference.laplace.planning.MAX_FULL_PARAMETERS`; by default only where the
    evidence-trained MAP used it, P ≤ :data:`bnnpp.inference.evidence.FULL_LIMIT`), summed over
    batches of ``batch`` rows (each batch's Jacobian ``(K·batch, P)`` at once), plus
    the prior's precision: the model's own at the MAP's hyperparameters (``from_map``: the
    evidence-trained MAP learned them with this same curvature), else δ·I with δ (and σ) by the
    evidence over its eigenvalues. Returns the params of a ``full`` :class:`LaplaceGaussian`
    (``covariance_factor`` ``(P, P)``), the noise, δ and log Z."""
    flat, _ = ravel_pytree(theta)
    size = flat.shape[0]
    n = x.shape[0]

    def gram(xb):
        root = _evidence_full_ggn(model, theta, fixed, xb)  # (K·B, P)
        return root.T @ root

    g = batched_sum(gram, (x,), batch)
    g = 0.5 * (g + g.T)
    trace = latent_trace(model, u, x, y, _KEY)
    loglik = log_likelihood(trace)
    sigma0 = jnp.log(_noise_of(model, u, x)) if p.tune_sigma else jnp.zeros(())
    if p.precision == "from_map":
        prec = prior_diag(model, theta, fixed, x, y, _KEY)
        delta, sigma = _layer_prior_precision(prec, list(p.layers)), jnp.exp(sigma0)  # reported per layer, as kron's
        h = g + jnp.diag(jnp.maximum(ravel_pytree(prec)[0], 1e-12))
        log_prior = sum((site_log_prior(trace[k]) for k in theta), jnp.zeros(()))
        log_z = loglik + log_prior + 0.5 * size * jnp.log(2 * jnp.pi) - 0.5 * jnp.linalg.slogdet(h)[1]
    else:
        loglik_of = _gaussian_loglik(n, _ssr(model, u, x, y)) if p.tune_sigma else (lambda tau: loglik)
        deltas, sigma, log_z = _evidence(
            jnp.linalg.eigvalsh(g),
            np.zeros(size, np.int32),
            [size],
            jnp.stack([jnp.sum(flat**2)]),
            loglik_of,
            0.0,
            fixed_delta,
            p.tune_sigma,
            sigma0,
        )
        delta = deltas[0]
        scale = jnp.exp(2 * (sigma0 - jnp.log(sigma))) if p.tune_sigma else 1.0
        h = scale * g + delta * jnp.eye(size, dtype=g.dtype)
    e, q = jnp.linalg.eigh(0.5 * (h + h.T))
    out = {"covariance_factor": q / jnp.sqrt(jnp.maximum(e, 1e-6 * jnp.max(e)))}
    if p.tune_sigma:
        out["noise__fixed"] = biject_to(dist.constraints.positive).inv(sigma)
    out["prior_precision"] = jnp.asarray(delta, jnp.float32)
    out["noise"] = jnp.asarray(sigma if p.tune_sigma else (_noise_of(model, u, x) if p.likelihood == "gaussian" else jnp.nan), jnp.float32)
    out["log_marginal_likelihood"] = jnp.asarray(log_z, jnp.float32)
    return out


def _layer_prior_precision(prec: dict, layers: list) -> jax.Array:
    """Per layer, the mean over its weights and bias of the prior's precision ``prec`` at the MAP's
    hyperparameters (:func:`bnnpp.inference.joint.prior_diag`; a Normal prior's 1/scale²,
    shared by a layer's weights and bias under a hierarchical scale). ``(len(layers),)``."""
    return jnp.stack([jnp.maximum(jnp.mean(jnp.concatenate([prec[f"{k}.w"].ravel(), prec[f"{k}.b"].ravel()])), 1e-12) for k in layers])


def _mask_np(theta: dict, replaced) -> np.ndarray:
    return np.concatenate([np.full(int(np.prod(jnp.shape(v))), k in replaced, bool) for k, v in theta.items()])


def _noise_of(model, u, x):
    """The observation sd at ``u`` (its mean over one row block: bnnpp's models are homoscedastic)."""
    return jnp.mean(_observation(latent_trace(model, u, probe_rows(model, x)[0], None, _KEY))[2])


def _ssr(model, u, x, y):
    _, f, _ = _observation(latent_trace(model, u, x, None, _KEY))
    return jnp.sum((y - f) ** 2)
