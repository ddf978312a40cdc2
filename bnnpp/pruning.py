"""Weight pruning by signal-to-noise ratio or magnitude (Blundell et al. 2015, §5.1 and Table 2).

Every entry of every weight matrix (the ``<layer>.w`` sites; biases and scales are kept) gets a
score: the signal-to-noise ratio |μ|/σ of its posterior (rule ``"snr"``) or its posterior-mean
magnitude |μ| (rule ``"magnitude"``, the "naive" pruning of Singh's reproduction). The scores
of all layers are pooled, as in Blundell et al.'s Table 2, and the lowest-scoring share of
entries is set to zero in every posterior draw.

μ and σ come from the posterior's approximation where it is a mean-field Gaussian
(``Posterior.approximation``: ``bbb`` and mean-field ``advi``), otherwise from the mean and
standard deviation of the draws (MCMC, low-rank/full-rank ADVI, MAP).

A variational-dropout posterior (``method="vd"``) carries its own rule instead of a share to
remove: :func:`log_alpha_table` drops every weight with log α above the fit's threshold
(Molchanov et al. 2017) and reports the compression per layer and in total.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from bnnpp.evaluation import predict_probs
from bnnpp.inference.vd import VariationalDropout
from bnnpp.posterior import MeanFieldGaussian, Posterior
from bnnpp.reports import pruning_table_markdown

__all__ = [
    "RULES",
    "check_fraction",
    "check_rule",
    "log_alpha_table",
    "magnitude",
    "prune",
    "pruning_table",
    "snr",
    "table_markdown",
    "weight_sites",
]

RULES = ("snr", "magnitude")


def weight_sites(posterior: Posterior) -> list[str]:
    """Names of the posterior's weight-matrix sites (``<layer>.w``, or a Flax layer's
    ``<module path>.kernel``), in site order."""
    if not isinstance(posterior, Posterior):
        raise TypeError(f"expected a bnnpp Posterior, got {type(posterior).__name__}")
    names = [k for k in posterior.samples if k.endswith((".w", ".kernel"))]
    if not names:
        raise ValueError("the posterior has no weight sites '<layer>.w' or '<module>.kernel': pruning needs a bnnpp or from_flax network")
    return names


def _moments(posterior: Posterior, site: str, need_sd: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Posterior mean μ and sd σ of one site, each of the site's shape (σ None if not needed)."""
    q = posterior.approximation
    if isinstance(q, MeanFieldGaussian) and site in q.loc:
        return np.asarray(q.loc[site], np.float64), np.asarray(q.scale[site], np.float64)
    draws = np.asarray(posterior.samples[site], np.float64)
    draws = draws.reshape((-1, *draws.shape[2:]))
    if not need_sd:
        return draws.mean(axis=0), None
    if draws.shape[0] < 2:
        raise ValueError(
            f"the signal-to-noise ratio needs a posterior spread, but this {posterior.method} "
            "posterior has a single draw and no variational scales; use rule='magnitude' (CLI: --rule magnitude)"
        )
    return draws.mean(axis=0), draws.std(axis=0, ddof=1)


def snr(posterior: Posterior) -> dict[str, np.ndarray]:
    """Signal-to-noise ratio |μ|/σ of every weight entry (Blundell et al. 2015, §5.1).

    Returns:
        ``<layer>.w`` → array of the site's shape ``(in, out)``, float64 (``inf`` where σ = 0
        and μ ≠ 0, 0 where both are 0).

    Raises:
        ValueError: for a posterior with one draw and no variational scales (MAP).
    """
    out = {}
    for site in weight_sites(posterior):
        mu, sd = _moments(posterior, site, need_sd=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[site] = np.where(mu == 0, 0.0, np.abs(mu) / sd)
    return out


def magnitude(posterior: Posterior) -> dict[str, np.ndarray]:
    """Posterior-mean magnitude |μ| of every weight entry; ``<layer>.w`` → ``(in, out)`` float64."""
    return {site: np.abs(_moments(posterior, site, need_sd=False)[0]) for site in weight_sites(posterior)}


def check_fraction(fraction) -> float:
    """``fraction`` as a float; ValueError unless it is a number in [0, 1]."""
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, (int, float, np.integer, np.floating))
        or not (math.isfinite(fraction) and 0 <= fraction <= 1)
    ):
        raise ValueError(f"fraction must be a number in [0, 1] (0.95 prunes 95% of the weights), got {fraction!r}")
    return float(fraction)


def check_rule(rule) -> str:
    """``rule``; ValueError unless it is one of :data:`RULES`."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
    return rule


def _weight_scores(posterior: Posterior, rule: str) -> dict[str, np.ndarray]:
    return snr(posterior) if rule == "snr" else magnitude(posterior)


def _masks(scores: dict[str, np.ndarray], fraction: float) -> tuple[dict[str, np.ndarray], int]:
    """Keep-masks per site that drop the round(fraction·N) lowest pooled scores; ties at the
    cut-off are broken by position (stable sort), so exactly that many entries go."""
    flat = np.concatenate([s.ravel() for s in scores.values()])
    k = round(fraction * flat.size)
    keep = np.ones(flat.size, bool)
    keep[np.argsort(flat, kind="stable")[:k]] = False
    masks, start = {}, 0
    for site, s in scores.items():
        masks[site] = keep[start : start + s.size].reshape(s.shape)
        start += s.size
    return masks, k


def prune(posterior: Posterior, fraction: float, rule: str = "snr") -> Posterior:
    """Zero the lowest-scoring ``fraction`` of all weight entries, pooled across layers.

    Args:
        posterior: a fitted posterior of a bnnpp layer network.
        fraction: share of weight entries to remove, in [0, 1]; round(fraction·N) of the N
            entries of all ``<layer>.w`` sites go.
        rule: ``"snr"`` (lowest |μ|/σ) or ``"magnitude"`` (lowest |μ|).

    Returns:
        A new :class:`Posterior` (the input is not changed) whose ``<layer>.w`` samples
        ``(chain, draw, in, out)`` are zero at the pruned entries in every draw, whose guide
        locations (if any) are zero there too, and whose ``info["pruning"]`` records
        ``fraction``, ``rule``, ``removed`` and ``remaining`` weight counts. A ``laplace``
        posterior with the linearised predictive (built from the MAP, which pruning does not
        touch) predicts through the network at its pruned draws instead (``predictive="mc"``,
        recorded as ``info["pruning"]["predictive"]``).
    """
    fraction = check_fraction(fraction)
    rule = check_rule(rule)
    return _apply(posterior, _weight_scores(posterior, rule), fraction, rule)


def _apply(posterior: Posterior, scores: dict[str, np.ndarray], fraction: float, rule: str) -> Posterior:
    masks, removed = _masks(scores, fraction)
    samples = dict(posterior.samples)
    for site, keep in masks.items():
        samples[site] = np.where(keep, posterior.samples[site], 0).astype(posterior.samples[site].dtype)
    q = posterior.approximation
    if isinstance(q, MeanFieldGaussian):
        q = q.with_loc(
            {site: np.where(keep, q.loc[site], 0).astype(np.asarray(q.loc[site]).dtype) for site, keep in masks.items() if site in q.loc}
        )
    total = sum(m.size for m in masks.values())
    pruning = {"fraction": fraction, "rule": rule, "removed": removed, "remaining": total - removed}
    options = posterior.stats.options
    if options.get("predictive") == "linearised":
        # the linearised Laplace predictive is built from the MAP and the curvature, not from
        # the draws: it would ignore the pruning. The pruned posterior predicts through the
        # network at its (pruned) draws, laplace's predictive="mc".
        options = {**options, "predictive": "mc"}
        pruning["predictive"] = "mc"
    stats = dataclasses.replace(posterior.stats, options=options, extras={**posterior.stats.extras, "pruning": pruning})
    # same model and shapes: the compiled prediction program is shared with the original
    return dataclasses.replace(posterior, samples=samples, stats=stats, approximation=q)


def pruning_table(
    posterior: Posterior,
    x_test: np.ndarray,
    y_test: np.ndarray,
    fractions: Sequence[float] = (0, 0.25, 0.5, 0.75, 0.95, 0.98),
    rules: Sequence[str] = RULES,
    num_samples: int = 10,
    *,
    seed: int = 0,
    batch_size: int | None = None,
) -> list[dict]:
    """Test error after pruning, for each rule and fraction (Blundell et al. 2015, Table 2).

    Args:
        posterior: a fitted classifier posterior.
        x_test, y_test: test inputs ``(n, ...)`` and integer labels ``(n,)``.
        fractions: shares of weights removed, each in [0, 1].
        rules: any of ``"snr"``, ``"magnitude"``.
        num_samples: posterior draws averaged per prediction (the paper's test errors use 10).
        seed, batch_size: passed to :func:`bnnpp.evaluation.predict_probs`.

    Returns:
        One dict per (rule, fraction), rules outer: ``rule``, ``fraction``, ``removed`` and
        ``remaining`` (weight entries), ``test_error`` (share of ``y_test`` misclassified by
        the mean prediction over ``num_samples`` draws).
    """
    fractions = [check_fraction(f) for f in fractions]
    rules = [check_rule(r) for r in rules]
    if not fractions or not rules:
        raise ValueError("pass at least one fraction and one rule")
    y_test = np.asarray(y_test)
    if y_test.ndim != 1 or len(y_test) != len(x_test):
        raise ValueError(f"y_test must be (n,) labels for the {len(x_test)} test inputs, got shape {y_test.shape}")
    scores = {rule: _weight_scores(posterior, rule) for rule in rules}  # fails before predicting (e.g. snr of MAP)
    rows = []
    for rule in rules:
        for f in fractions:
            pruned = _apply(posterior, scores[rule], f, rule)
            probs = predict_probs(pruned, x_test, num_samples=num_samples, seed=seed, batch_size=batch_size)
            error = float(np.mean(probs.mean(axis=0).argmax(axis=-1) != y_test))
            p = pruned.stats.extras["pruning"]
            rows.append({"rule": rule, "fraction": f, "removed": p["removed"], "remaining": p["remaining"], "test_error": error})
    return rows


table_markdown = pruning_table_markdown
"""The rows of :func:`pruning_table` as Blundell et al. (2015) Table 2 (see :func:`bnnpp.reports.pruning_table_markdown`)."""


def log_alpha_table(
    posterior: Posterior, x_test: np.ndarray, y_test: np.ndarray, *, num_samples: int = 10, seed: int = 0, batch_size: int | None = None
) -> dict:
    """The compression table of a variational-dropout posterior (Molchanov et al. 2017, Table 1):
    weights with log α > threshold are dropped.

    Args:
        posterior: a ``method="vd"`` classifier posterior (approximation
            :class:`~bnnpp.inference.vd.VariationalDropout`).
        x_test, y_test: test inputs ``(n, ...)`` and integer labels ``(n,)``.
        num_samples: posterior draws averaged for ``test_error_draws``.
        seed, batch_size: passed to :func:`bnnpp.evaluation.predict_probs`.

    Returns:
        ``{"threshold", "layers": [{"site", "weights", "nonzero", "compression"}, ...],
        "weights", "nonzero", "compression"`` (all weights / kept weights), ``"test_error"``
        (the network at θ with the dropped weights zeroed, the paper's test-time rule),
        ``"test_error_draws"`` (the mean prediction over ``num_samples`` draws of q, dropped
        weights zero)``}``.

    Raises:
        TypeError: the posterior is not from ``method="vd"``. ValueError: bad labels.
    """
    q = posterior.approximation
    if not isinstance(q, VariationalDropout):
        raise TypeError(
            f"the log alpha rule needs a variational-dropout posterior (method='vd'), this one is from {posterior.method!r}: "
            "use prune(posterior, fraction, rule='snr') instead"
        )
    y_test = np.asarray(y_test)
    if y_test.ndim != 1 or len(y_test) != len(x_test):
        raise ValueError(f"y_test must be (n,) labels for the {len(x_test)} test inputs, got shape {y_test.shape}")
    keep = q.keep()
    layers = [
        {"site": s, "weights": int(m.size), "nonzero": int(m.sum()), "compression": float(m.size / max(1, int(m.sum())))}
        for s, m in keep.items()
    ]
    total, nonzero = sum(r["weights"] for r in layers), sum(r["nonzero"] for r in layers)
    point = {k: np.asarray(v)[:1, :1] for k, v in posterior.samples.items()}  # the point sites repeat their value
    for s, m in keep.items():
        point[s] = np.where(m, np.asarray(q.loc[s]), 0).astype(posterior.samples[s].dtype)[None, None]
    at_mean = dataclasses.replace(posterior, samples=point, _jitted={})
    errors = {}
    for name, post, s in (("test_error", at_mean, 1), ("test_error_draws", posterior, num_samples)):
        probs = predict_probs(post, x_test, num_samples=s, seed=seed, batch_size=batch_size)
        errors[name] = float(np.mean(probs.mean(axis=0).argmax(axis=-1) != y_test))
    return {
        "threshold": float(q.threshold),
        "layers": layers,
        "weights": total,
        "nonzero": nonzero,
        "compression": float(total / max(1, nonzero)),
        **errors,
    }


def log_alpha_markdown(table: dict) -> str:
    """The :func:`log_alpha_table` as Markdown in the layout of Molchanov et al. (2017) Table 1:
    one row per layer (weights, nonzero, compression ×) and a total row with the test errors.

    Returns:
        The table, ending in a newline.
    """
    lines = [
        f"log alpha rule: weights with log alpha > {table['threshold']:g} dropped",
        "",
        "| layer | # weights | # nonzero | compression |",
        "|---|---|---|---|",
    ]
    for r in table["layers"]:
        lines.append(f"| {r['site']} | {r['weights']:,} | {r['nonzero']:,} | {r['compression']:.1f}× |")
    lines.append(f"| **total** | {table['weights']:,} | {table['nonzero']:,} | **{table['compression']:.1f}×** |")
    errors = f"test error at θ (dropped weights zero): {table['test_error']:.2%}; mean over draws of q: {table['test_error_draws']:.2%}"
    lines += ["", errors, ""]
    return "\n".join(lines)
