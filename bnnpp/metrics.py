"""Pure array metrics for predictive distributions (numpy in, numpy/float out).

Shapes: ``probs`` are per-draw class probabilities ``(S, n, C)``; ``mean_probs`` are the
posterior-predictive probabilities ``(n, C)`` (the mean over draws); labels ``y`` are ints
``(n,)``. Entropies are in nats. The decomposition
``predictive_entropy = expected_entropy + mutual_information`` (total = aleatoric +
epistemic; Depeweg et al. 2018) holds exactly.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

__all__ = [
    "accuracy",
    "auroc",
    "brier",
    "ece",
    "expected_entropy",
    "expected_error_rate",
    "gaussian_nll",
    "interval_coverage",
    "mutual_information",
    "nll",
    "predictive_entropy",
    "predictive_nll",
    "predictive_quantiles",
    "rejection_rate",
    "rmse",
    "top1_agreement",
    "total_variation",
    "wasserstein2",
]

_TINY = 1e-12


def _entropy(p: np.ndarray) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    return -np.sum(np.where(p > 0, p * np.log(np.maximum(p, _TINY)), 0.0), axis=-1)


def _check_labels(mean_probs: np.ndarray, y) -> tuple[np.ndarray, np.ndarray]:
    """``mean_probs`` as float64 and ``y`` as an array whose shape is ``mean_probs``'s without
    its class axis; a one-line ValueError otherwise (a ``(n, 1)`` y against ``(n, C)``
    probabilities would broadcast to ``(n, n)`` and give a wrong number, not an error)."""
    p, y = np.asarray(mean_probs, np.float64), np.asarray(y)
    if p.ndim < 1 or y.shape != p.shape[:-1]:
        fix = "pass y.reshape(-1)" if y.size == int(np.prod(p.shape[:-1])) else "pass one label per row of the probabilities"
        raise ValueError(f"labels y must have shape {p.shape[:-1]} for probabilities of shape {p.shape}, got {y.shape}: {fix}")
    return p, y


def _check_targets(mean, y, what: str = "mean") -> tuple[np.ndarray, np.ndarray]:
    """``mean`` and ``y`` as arrays of the same shape; a one-line ValueError otherwise
    (``(n,)`` against ``(n, 1)`` would broadcast to ``(n, n)``)."""
    m, y = np.asarray(mean), np.asarray(y)
    if m.shape != y.shape:
        fix = f"pass y.reshape({m.shape})" if m.size == y.size else "pass one target per predicted row"
        raise ValueError(f"targets y have shape {y.shape} but the predictive {what} has shape {m.shape}: {fix}")
    return m, y


def accuracy(mean_probs: np.ndarray, y: np.ndarray) -> float:
    """Share of points whose most probable class is the label (``y``: ``mean_probs``'s shape
    without the class axis)."""
    p, y = _check_labels(mean_probs, y)
    return float(np.mean(np.argmax(p, axis=-1) == y))


def nll(mean_probs: np.ndarray, y: np.ndarray) -> float:
    """Mean negative log of the posterior-predictive probability of the label,
    −(1/n) Σ log p̄(yᵢ | xᵢ), with p̄ the mean over draws (not the mean of per-draw logs)."""
    p, y = _check_labels(mean_probs, y)
    p = np.take_along_axis(p, y[..., None], axis=-1)[..., 0]
    return float(-np.mean(np.log(np.maximum(p, _TINY))))


def brier(mean_probs: np.ndarray, y: np.ndarray) -> float:
    """Brier score: mean over points of Σ_c (p̄_c − 1[y = c])²; 0 is perfect, 2 the worst."""
    p, y = _check_labels(mean_probs, y)
    onehot = np.eye(p.shape[-1])[y]
    return float(np.mean(np.sum((p - onehot) ** 2, axis=-1)))


def ece(mean_probs: np.ndarray, y: np.ndarray, num_bins: int = 15) -> float:
    """Expected calibration error (Guo et al. 2017) with ``num_bins`` equal-width confidence
    bins: Σ_b (|B_b|/n)·|accuracy(B_b) − confidence(B_b)|."""
    p, y = _check_labels(mean_probs, y)
    conf = p.max(-1)
    correct = (p.argmax(-1) == y).astype(np.float64)
    edges = np.linspace(0.0, 1.0, num_bins + 1)
    idx = np.clip(np.digitize(conf, edges[1:-1], right=True), 0, num_bins - 1)
    total = 0.0
    for b in range(num_bins):
        m = idx == b
        if m.any():
            total += m.mean() * abs(correct[m].mean() - conf[m].mean())
    return float(total)


def predictive_entropy(probs: np.ndarray) -> np.ndarray:
    """Total uncertainty H[p̄] of the mean prediction; ``(S, n, C)`` → ``(n,)``."""
    return _entropy(np.mean(probs, axis=0))


def expected_entropy(probs: np.ndarray) -> np.ndarray:
    """Aleatoric part E_s H[p_s]; ``(S, n, C)`` → ``(n,)``."""
    return np.mean(_entropy(probs), axis=0)


def mutual_information(probs: np.ndarray) -> np.ndarray:
    """Epistemic part I[y; w] = H[p̄] − E_s H[p_s] ≥ 0; ``(S, n, C)`` → ``(n,)``."""
    return np.maximum(predictive_entropy(probs) - expected_entropy(probs), 0.0)


def expected_error_rate(mean_probs: np.ndarray) -> np.ndarray:
    """1 − max_c p̄_c per point, ``(n, C)`` → ``(n,)``: the error the model itself expects."""
    return 1.0 - np.max(np.asarray(mean_probs), axis=-1)


def rmse(mean: np.ndarray, y: np.ndarray) -> float:
    """Root mean squared error of the predictive mean against ``y`` of the same shape."""
    m, y = _check_targets(mean, y)
    return float(np.sqrt(np.mean((m.astype(np.float64) - y) ** 2)))


def gaussian_nll(loc: np.ndarray, scale: np.ndarray, y: np.ndarray) -> float:
    """Mean NLL of the posterior predictive, a mixture over draws of N(loc_s, scale_s²):
    −(1/n) Σᵢ log (1/S) Σ_s N(yᵢ | loc_sᵢ, scale_sᵢ²). ``loc``, ``scale``: ``(S, n)``."""
    loc = np.asarray(loc, np.float64)
    if loc.ndim != 2:
        raise ValueError(f"loc must have shape (S, n) (draws, points), got {loc.shape}; use loc[None] for one draw")
    _check_targets(loc[0], y, "loc per draw")
    scale = np.broadcast_to(np.asarray(scale, np.float64), loc.shape)
    z = (np.asarray(y)[None] - loc) / scale
    logp = -0.5 * z**2 - np.log(scale) - 0.5 * np.log(2 * np.pi)
    return float(-np.mean(logsumexp(logp, axis=0) - np.log(loc.shape[0])))


def predictive_nll(log_density: np.ndarray) -> float:
    """Mean NLL of a posterior predictive that is a mixture over S draws, from the per-draw
    log-densities ``(S, n, *event)`` of the targets: an event's elements are summed (they are
    independent given a draw), then −(1/n) Σᵢ log (1/S) Σ_s exp(ℓ_sᵢ). Any likelihood."""
    logp = np.asarray(log_density, np.float64)
    if logp.ndim < 2:
        raise ValueError(f"log_density must have shape (S, n, ...) (draws, points), got {logp.shape}")
    per_row = logp.reshape(logp.shape[0], logp.shape[1], -1).sum(-1)
    return float(-np.mean(logsumexp(per_row, axis=0) - np.log(logp.shape[0])))


def interval_coverage(mean: np.ndarray, std: np.ndarray, y: np.ndarray, level: float = 0.95) -> float:
    """Share of targets inside the central Gaussian interval mean ± z·std at ``level``
    (z = 1.96 for 95%); a calibrated model gives about ``level``."""
    from scipy.stats import norm

    z = norm.ppf(0.5 + level / 2)
    mean, y = _check_targets(mean, y)
    return float(np.mean(np.abs(y - mean) <= z * np.asarray(std)))


def auroc(scores_in: np.ndarray, scores_out: np.ndarray) -> float:
    """Area under the ROC curve for telling out-of-distribution points from in-distribution
    ones by a score where higher means "more likely out of distribution" (e.g. predictive
    entropy or mutual information).

    Computed as the Mann–Whitney U statistic over all pairs (Hanley & McNeil 1982):
    P(s_out > s_in) + ½·P(s_out = s_in), from ranks with ties given their average rank, in
    O((m + n) log(m + n)). 1 separates perfectly, 0.5 is chance.

    Args:
        scores_in: ``(m,)`` scores of in-distribution points.
        scores_out: ``(n,)`` scores of out-of-distribution points.

    Returns:
        The AUROC as a float in [0, 1].
    """
    from scipy.stats import rankdata

    a = np.asarray(scores_in, np.float64).ravel()
    b = np.asarray(scores_out, np.float64).ravel()
    if a.size == 0 or b.size == 0:
        raise ValueError("auroc needs at least one in-distribution and one out-of-distribution score")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("auroc scores contain NaN or inf: drop those points first")
    ranks = rankdata(np.concatenate([a, b]))  # average ranks for ties: each tie counts ½
    u_out = ranks[a.size :].sum() - b.size * (b.size + 1) / 2.0
    return float(u_out / (a.size * b.size))


def rejection_rate(mean_probs: np.ndarray, tau: float = 0.2) -> float:
    """Share of points the model refuses to classify: those whose largest posterior-predictive
    class probability max_c p̄_c is below ``tau``; ``mean_probs`` ``(n, C)`` → float in [0, 1]."""
    if isinstance(tau, bool) or not isinstance(tau, (int, float, np.floating, np.integer)) or not 0 < tau < 1:
        raise ValueError(f"tau must be a number in (0, 1), got {tau!r}")
    p = np.asarray(mean_probs, np.float64)
    if p.ndim != 2:
        raise ValueError(f"mean_probs must have shape (n, C), got {p.shape}; average per-draw probs over axis 0 first")
    return float(np.mean(p.max(axis=-1) < tau))


# --------------------------------------------------------------------------------------
# Distances between two predictive distributions (an approximation against a reference)
# --------------------------------------------------------------------------------------


def top1_agreement(mean_probs: np.ndarray, reference_probs: np.ndarray) -> np.ndarray:
    """Per point, 1.0 where the two predictive distributions ``(n, C)`` have the same most
    probable class (Izmailov et al. 2021, sec. 5: "agreement"), else 0.0; ``(n,)``."""
    return (np.argmax(mean_probs, axis=-1) == np.argmax(reference_probs, axis=-1)).astype(np.float64)


def total_variation(mean_probs: np.ndarray, reference_probs: np.ndarray) -> np.ndarray:
    """Per point, the total variation distance ½ Σ_c |p_c − q_c| between two predictive
    distributions ``(n, C)`` (Izmailov et al. 2021, sec. 5), in [0, 1]; ``(n,)``."""
    diff = np.asarray(mean_probs, np.float64) - np.asarray(reference_probs, np.float64)
    return 0.5 * np.abs(diff).sum(axis=-1)


def predictive_quantiles(loc: np.ndarray, scale: np.ndarray, num_levels: int = 200, per_draw: int = 16) -> np.ndarray:
    """Quantiles of a regression predictive, the mixture over draws of N(loc_s, scale_s²).

    Each draw contributes ``per_draw`` points loc_s + scale_s·Φ⁻¹((k + ½)/per_draw) (a
    deterministic stratified sample of its Gaussian), and the quantiles of the pooled points
    are read at the levels (j + ½)/num_levels.

    Args:
        loc, scale: ``(S, n)`` per-draw means and observation sds (``scale`` may broadcast).
    Returns:
        ``(num_levels, n)`` quantiles, increasing along the first axis.
    """
    from scipy.stats import norm

    loc = np.asarray(loc, np.float64)
    scale = np.broadcast_to(np.asarray(scale, np.float64), loc.shape)
    z = norm.ppf((np.arange(per_draw) + 0.5) / per_draw)
    pooled = (loc[:, None, :] + scale[:, None, :] * z[None, :, None]).reshape(-1, loc.shape[1])
    return np.quantile(pooled, (np.arange(num_levels) + 0.5) / num_levels, axis=0)


def wasserstein2(quantiles_a: np.ndarray, quantiles_b: np.ndarray) -> np.ndarray:
    """Per point, the 2-Wasserstein distance between two 1-D distributions given by their
    quantiles at the same equally spaced levels ``(L, n)``: W₂² = ∫₀¹ (F_a⁻¹(u) − F_b⁻¹(u))² du
    (the 1-D optimal coupling is the quantile coupling), the integral by the midpoint rule;
    ``(n,)``, in the units of the targets."""
    return np.sqrt(np.mean((np.asarray(quantiles_a) - np.asarray(quantiles_b)) ** 2, axis=0))
