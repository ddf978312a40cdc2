"""Argument checks and batched class probabilities shared by the evaluations, the per-input
uncertainty summaries, and uniform-noise OOD inputs."""

from __future__ import annotations

import math

import numpy as np

from bnnpp import metrics
from bnnpp.posterior import Posterior

MAX_VALUES_PER_CALL = 1 << 24
"""Default bound on draws × rows × input values per prediction call (16M: 100 draws of 213
MNIST images; a convolutional net's activations are a few times that)."""


def check_count(value, name: str) -> int:
    """``value`` as an int; ValueError unless it is an integer ≥ 1."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer ≥ 1, got {value!r}")
    return int(value)


def check_tau(tau) -> float:
    """``tau`` as a float; ValueError unless it lies strictly between 0 and 1."""
    if isinstance(tau, bool) or not isinstance(tau, (int, float, np.integer, np.floating)) or not (math.isfinite(tau) and 0 < tau < 1):
        raise ValueError(f"tau must be a number in (0, 1) (the default 0.2 rejects max class probability < 0.2), got {tau!r}")
    return float(tau)


def predict_probs(
    posterior: Posterior, x: np.ndarray, *, num_samples: int | None = None, seed: int = 0, batch_size: int | None = None
) -> np.ndarray:
    """Per-draw class probabilities at ``x``, predicted ``batch_size`` inputs at a time to bound
    memory; the last batch is padded to ``batch_size`` so that one compiled program serves
    every batch.

    Args:
        posterior: a classifier posterior.
        x: inputs ``(n, *features)``.
        num_samples: posterior draws S (default: all; more than the posterior kept is capped
            at them, with a warning; see :meth:`Posterior.predict`).
        seed: key for any randomness in the model.
        batch_size: inputs per prediction call (default: as many as keep S × rows × input
            values under :data:`MAX_VALUES_PER_CALL`, at most 1000).

    Returns:
        float32 ``(S, n, C)``.
    """
    x = np.asarray(x, np.float32)
    num_samples = posterior.draws_to_use(num_samples)  # at most the draws kept: one warning, not one per batch
    draws = posterior.num_chains * posterior.num_draws if num_samples is None else num_samples
    if batch_size is None:
        per_row = max(1, draws * int(np.prod(x.shape[1:])))
        batch_size = max(1, min(1000, MAX_VALUES_PER_CALL // per_row))
    batch_size = check_count(batch_size, "batch_size")
    n = x.shape[0]
    if n == 0:
        raise ValueError("x is empty: pass at least one input")
    b = n if posterior.row_latents() else min(batch_size, n)  # per-row latents: every row in one call
    parts = []
    for start in range(0, n, b):
        xb = x[start : start + b]
        m = xb.shape[0]
        if m < b:  # pad with copies of the first row: same shape, same compiled program
            xb = np.concatenate([xb, np.repeat(xb[:1], b - m, axis=0)])
        pred = posterior.predict(xb, num_samples=num_samples, seed=seed)
        if pred.task != "classification":
            raise ValueError("evaluation needs a classifier (categorical or bernoulli likelihood), not a regression model")
        parts.append(pred.probs[:, :m])
    return np.concatenate(parts, axis=1)


def uniform_noise(like: np.ndarray, n: int | None = None, seed: int = 0) -> np.ndarray:
    """Uniform-noise images shaped and scaled like ``like``: every value independently
    U(lo, hi) with lo, hi the smallest and largest value of ``like`` (U(0, 1) for pixels
    divided by 255), so the noise has the inputs' shape and normalisation.

    Returns:
        float32 ``(n, *like.shape[1:])``, ``n`` defaulting to ``len(like)``.
    """
    like = np.asarray(like)
    n = len(like) if n is None else check_count(n, "n")
    lo, hi = float(like.min()), float(like.max())
    rng = np.random.default_rng(seed)
    return rng.uniform(lo, hi, size=(n, *like.shape[1:])).astype(np.float32)


def _uncertainty_scores(probs: np.ndarray) -> dict[str, np.ndarray]:
    """Per-input summaries of per-draw probabilities ``(S, n, C)``, each ``(n,)`` (``mean_probs`` ``(n, C)``)."""
    mean = probs.mean(axis=0)
    return {
        "mean_probs": mean,
        "variance": probs.var(axis=0).sum(axis=-1),  # Σ_c Var_s[p_sc]: variance over draws, summed over classes
        "expected_error_rate": metrics.expected_error_rate(mean),
        "entropy": metrics.predictive_entropy(probs),
        "mutual_information": metrics.mutual_information(probs),
    }
