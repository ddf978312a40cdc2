"""One draw of a mean-field Gaussian weight factor: the Gaussian KL and entropy, a stable
softplus, ``jax.random.normal``'s numbers with the threefry hash unrolled
(:func:`normal_noise`), and :func:`mc_weight_draw`, the draw with its Monte-Carlo KL and a
closed-form gradient (Blundell et al. 2015). :mod:`bnnpp.inference.variational_layers`
builds its layers on these."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["gaussian_entropy", "gaussian_kl", "mc_weight_draw", "normal_noise", "softplus"]


def gaussian_kl(mu, sigma, prior_loc, prior_scale) -> jnp.ndarray:
    """Elementwise KL(N(μ, σ²) ‖ N(m, s²)) = log(s/σ) + (σ² + (μ − m)²) / (2s²) − 1/2."""
    return jnp.log(prior_scale / sigma) + (sigma**2 + (mu - prior_loc) ** 2) / (2 * prior_scale**2) - 0.5


def gaussian_entropy(sigma) -> jnp.ndarray:
    """Σ H(N(μ, σ²)) = Σ (log σ + ½ log 2πe) over the elements of ``sigma`` (scalar).

    The Monte-Carlo KL uses it for E_q[log q]: at w = μ + σε, log q(w) = −log σ − ε²/2 − ½ log 2π,
    whose gradient in (μ, σ) is (0, −1/σ) whatever ε — the entropy's — so the exact entropy gives
    the same gradient with no noise in the value and no density evaluated (Kingma & Welling
    2014, §2.4 and Appendix B)."""
    return jnp.sum(jnp.log(sigma)) + 0.5 * jnp.size(sigma) * jnp.log(2 * jnp.pi * jnp.e)


def softplus(x) -> jnp.ndarray:
    """σ = softplus(ρ) = log(1 + e^ρ), elementwise, to float32 rounding (within 2.6e-7
    relative of the float64 value; ``tests/test_bbb_fused.py``) at about a third of
    ``jax.nn.softplus``'s cost on CPU, where XLA's ``log1p`` is the expensive part.

    softplus(ρ) = max(ρ, 0) + log1p(e) with e = exp(−|ρ|) ∈ (0, 1], and
    log1p(e) = 2 artanh(s) = 2 (s + s³/3 + s⁵/5 + …) with s = e / (2 + e) ≤ 1/3; eight terms
    leave a truncation error below 2·(1/3)¹⁷/17 ≈ 1e-9 (Abramowitz & Stegun 4.1.27). One exp,
    one division and a polynomial; ±inf give inf and 0, as ``jax.nn.softplus``."""
    e = jnp.exp(-jnp.abs(x))
    two_s = 2 * e / (2 + e)  # 2s ≈ e, not s ≈ e/2, which would be a denormal (flushed) for e near float32's tiny
    s2 = 0.25 * two_s * two_s
    series = 1 / 15
    for k in (13, 11, 9, 7, 5, 3, 1):  # Horner: 1 + s²/3 + s⁴/5 + … + s¹⁴/15
        series = 1 / k + s2 * series
    return jnp.maximum(x, 0) + two_s * series


# --------------------------------------------------------------------------------------
# Weight noise: jax.random.normal's numbers, with the threefry hash unrolled
# --------------------------------------------------------------------------------------

_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(k0, k1, x0, x1):
    """The Threefry-2x32 hash with 20 rounds (Salmon et al. 2011), as ``jax.random`` computes
    it, written out so that XLA fuses the whole hash into one loop over the counters (JAX
    lowers it on CPU as a rolled 5-iteration while loop that writes both words to memory
    every iteration)."""
    ks = (k0, k1, k0 ^ k1 ^ np.uint32(0x1BD11BDA))
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for i in range(5):
        for r in _THREEFRY_ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = x0 ^ ((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r)))
        x0, x1 = x0 + ks[(i + 1) % 3], x1 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x0, x1


def _unrolled_applies(key, shape, dtype) -> bool:
    if jnp.dtype(dtype) != jnp.float32 or not 0 < math.prod(shape) < 2**32 or not jax.config.jax_threefry_partitionable:
        return False
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return str(jax.random.key_impl(key)) == "threefry2x32"
    return key.dtype == jnp.uint32 and key.shape == (2,) and jax.config.jax_default_prng_impl == "threefry2x32"


def _threefry_bits(key, shape):
    """``jax.random.bits(key, shape)`` (uint32) for a threefry key, partitionable mode: the
    element at flat index i hashes the counter (0, i) and xors the two output words."""
    data = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    counter = jax.lax.iota(jnp.uint32, math.prod(shape)).reshape(shape)
    b0, b1 = _threefry2x32(data[0], data[1], jnp.zeros(shape, jnp.uint32), counter)
    return b0 ^ b1


def _bits_to_normal(bits):
    """JAX's map from uint32 bits to N(0, 1) float32: the 23 high bits make u in [−1, 1)
    (``jax.random.uniform``), and the draw is √2 · erf⁻¹(u)."""
    mantissa = (bits >> np.uint32(9)) | np.uint32(0x3F800000)  # a float in [1, 2)
    low = np.nextafter(np.float32(-1), np.float32(0))
    u = jax.lax.max(low, (jax.lax.bitcast_convert_type(mantissa, jnp.float32) - np.float32(1)) * (np.float32(1) - low) + low)
    return np.float32(math.sqrt(2)) * jax.lax.erf_inv(u)


def normal_noise(key, shape, dtype=jnp.float32) -> jnp.ndarray:
    """``jax.random.normal(key, shape, dtype)`` — bit for bit the same numbers — with the
    threefry hash unrolled (:func:`_threefry2x32`). Falls back to ``jax.random.normal`` for
    other PRNG implementations, dtypes other than float32 and
    ``jax_threefry_partitionable=False``.

    Returns:
        float array of ``shape``.
    """
    if not _unrolled_applies(key, shape, dtype):
        return jax.random.normal(key, shape, dtype)
    return _bits_to_normal(_threefry_bits(key, shape))


# --------------------------------------------------------------------------------------
# One draw of a layer's weights with its Monte-Carlo KL, value and gradient in one pass
# --------------------------------------------------------------------------------------


def _noise_once(key, shape, dtype, runtime_scalar):
    """:func:`normal_noise`, computed once: the hash, then erf⁻¹, each inside a conditional
    whose two branches are the same function.

    XLA:CPU copies an elementwise producer into every fusion that consumes it — here the
    threefry hash and erf⁻¹ would be recomputed for the forward matmul, the KL and each of
    Adam's updates of μ and ρ — and it drops ``optimization_barrier`` before fusing; fused
    with the unrolled hash, erf⁻¹ also costs several times what it costs on stored bits. A
    conditional's output is a buffer, so each stage runs once. The predicate is any runtime
    scalar (both branches give the same values); it should not be batched under ``vmap`` (the
    particles' keys are), or the conditional turns into a select of both branches."""
    once = lambda f, *args: jax.lax.cond(runtime_scalar < 0, f, f, *args)
    if not _unrolled_applies(key, shape, dtype):
        return once(partial(jax.random.normal, shape=shape, dtype=dtype), key)
    return once(_bits_to_normal, once(partial(_threefry_bits, shape=shape), key))


def _predicate(param):
    """A runtime scalar for :func:`_noise_once`'s conditional: the parameter's first element."""
    return jnp.ravel(param)[0] if param.size else jnp.zeros((), param.dtype)


def _draw_values(log_prior, mu, rho, key):
    eps = _noise_once(key, mu.shape, mu.dtype, _predicate(rho))  # unbatched: ρ is shared by the particles
    sigma = softplus(rho)
    w = mu + sigma * eps
    return sigma, eps, w


def _dlog_prior(log_prior, w):
    log_p, pullback = jax.vjp(log_prior, w)
    return log_p, pullback(jnp.ones_like(log_p))[0]  # elementwise: d log p(w_i) / dw_i


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def mc_weight_draw(log_prior: Callable, mu, rho, key):
    """One reparameterised draw w = μ + σε of a mean-field Gaussian factor, σ = softplus(ρ),
    ε ~ N(0, I) from ``key`` (the numbers of ``jax.random.normal(key, μ.shape)``), and its
    Monte-Carlo KL(q ‖ p) term −H(q) − Σ log p(w) (E_q[log q] as the exact entropy, see
    :func:`gaussian_entropy`; Blundell et al. 2015, eq. 2).

    The values and gradients of writing it out under autodiff, computed with less work: the
    noise once (:func:`_noise_once`), and the gradient in closed form — for cotangents
    (ḡ_σ, ḡ_w, ḡ_kl) of (σ, w, kl), with ℓ'(w) = d log p(w)/dw and ḡ = ḡ_w − ḡ_kl ℓ'(w):
    ∂/∂μ = ḡ and ∂/∂ρ = (ḡ_σ + ε ḡ − ḡ_kl / σ) · sigmoid(ρ).

    Args:
        log_prior: the prior's elementwise log-density, ``log_prior(w)`` of ``w``'s shape,
            with no trainable parameters (a fixed scale; not a learned or sampled one).
        mu, rho: the factor's parameters, same shape.
        key: PRNG key of this draw.

    Returns:
        ``(sigma, eps, w, kl)``: σ, the noise ε and w, each of μ's shape, and the KL term
        (scalar; the entropy's constant included).
    """
    sigma, eps, w = _draw_values(log_prior, mu, rho, key)
    return sigma, eps, w, -gaussian_entropy(sigma) - jnp.sum(log_prior(w))


def _mc_weight_draw_fwd(log_prior, mu, rho, key):
    sigma, eps, w = _draw_values(log_prior, mu, rho, key)
    log_p, dlog_p = _dlog_prior(log_prior, w)
    return (sigma, eps, w, -gaussian_entropy(sigma) - jnp.sum(log_p)), (rho, sigma, eps, dlog_p)


def _mc_weight_draw_bwd(log_prior, residuals, cotangents):
    rho, sigma, eps, dlog_p = residuals
    g_sigma, _, g_w, g_kl = cotangents  # ε is noise: no parameter behind it
    g_value = g_w - g_kl * dlog_p
    return g_value, (g_sigma + eps * g_value - g_kl / sigma) * jax.nn.sigmoid(rho), None


mc_weight_draw.defvjp(_mc_weight_draw_fwd, _mc_weight_draw_bwd)
