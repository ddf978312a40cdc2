"""A fit's own health, reported once when it ends: one :class:`FitHealthWarning` line per problem.

The runner (:mod:`bnnpp.inference.runner`) calls :func:`check` on every Posterior it builds:

* **optimisation not converged** (:func:`still_falling`): the loss (the negative ELBO for
  variational methods) still falling between the middle and the end of the run, by more than
  its noise and by more than :data:`FALLING_SHARE` of its scale. The middle is compared, not
  only the last tenth: the cosine schedules of advi and bbb bring the learning rate to 0, so a
  fit stopped far too early is flat over its last tenth too.
* **an optimiser that diverged or does not move** (:func:`optimiser_stuck`): the loss rose
  by an order of magnitude above its start, or changed by less than float32 rounding on most
  steps (a learning rate far too large, or far too small).
* **a variational approximation that PSIS rejects** (:func:`vi_khat`): mean-field Gaussian q
  (advi, bbb) with Pareto k̂ > :data:`KHAT_THRESHOLD` (Yao, Vehtari, Simpson & Gelman 2018),
  from :data:`KHAT_DRAWS` draws of q against the full training data, when that costs at most
  :data:`KHAT_BUDGET` multiply-adds.

* **MCMC chains that disagree** (:func:`mcmc_rhat`): a sampler (:data:`MCMC_METHODS`) with
  two chains or more whose rank-normalised split R-hat (Vehtari, Gelman, Simpson, Carpenter &
  Bürkner 2021) exceeds :data:`RHAT_THRESHOLD` on a permutation-invariant quantity: a scale
  site (``*.scale``, ``*.variance``, ``noise``) or the predictive (class probabilities or
  regression means) at the first :data:`RHAT_ROWS` training rows, the headline quantities of
  :func:`bnnpp.diagnostics.summary`. Weights are left out: relabelling hidden units or flipping
  their signs leaves the network unchanged, so chains that agree on every prediction can still
  disagree on the weights.

MCMC's divergences are reported by :mod:`bnnpp.inference.nuts`; PSIS-LOO by
:mod:`bnnpp.diagnostics`. This module imports neither ArviZ nor anything above the runner:
:func:`pareto_khat` is the generalised-Pareto fit of ArviZ's ``psislw``, and
:func:`split_rhat` ArviZ's rank-normalised ``rhat``, in NumPy and SciPy.
"""

from __future__ import annotations

import warnings

import numpy as np

from bnnpp.inference.joint import full_gaussian_log_weights, gaussian_log_weights
from bnnpp.posterior import MeanFieldGaussian

__all__ = [
    "FALLING_SHARE",
    "KHAT_THRESHOLD",
    "MCMC_METHODS",
    "RHAT_THRESHOLD",
    "FitHealthWarning",
    "check",
    "laplace_khat",
    "mcmc_rhat",
    "optimiser_stuck",
    "pareto_khat",
    "split_rhat",
    "still_falling",
    "vi_khat",
    "warn",
]

FALLING_SHARE = 0.04
"""The loss must fall by more than this share of its scale (the larger of its final level and
its total fall) from the middle to the end of the run to count as not converged."""
FALLING_Z = 4.0
"""... and by more than this many standard errors of the difference (batch means)."""
MIN_STEPS = 100
"""Shorter traces are not judged."""
KHAT_THRESHOLD = 0.7
KHAT_DRAWS = 1000
KHAT_BUDGET = 2e10
"""Largest ``draws × rows × parameters`` for which a fit computes its PSIS k̂ (a few seconds
on a CPU); larger fits skip it (:func:`bnnpp.diagnostics.psis_khat` computes it on demand)."""

RHAT_THRESHOLD = 1.01
"""Largest rank-normalised split R-hat of a converged sampler (Vehtari et al. 2021, §4)."""
RHAT_ROWS = 20
"""Training rows at which the predictive's R-hat is checked."""
MCMC_METHODS = ("nuts", "sgld", "mclmc", "chees")
"""Methods whose chains are Markov chains over one posterior (ensemble and MultiSWAG members
are independent fits, not chains: their disagreement is the point)."""


class FitHealthWarning(UserWarning):
    """A fit finished but its result is not to be trusted as it stands (not converged, or
    an approximation PSIS rejects); the message names what to do."""


DIVERGED_RISE = 10.0
"""A loss whose last tenth averages more than this many times its start's magnitude above the
start has diverged: it rose by an order of magnitude or more."""
STILL_ULPS = 1.0
"""A loss that moved by less than this many float32 roundings of itself on more than half of
its steps is not moving: the updates are too small to change the parameters."""


def optimiser_stuck(loss: np.ndarray) -> dict | None:
    """Did the optimiser diverge or not move at all over the loss trace ``loss`` ``(steps,)``?

    Diverged: the mean of the last tenth m₂ exceeds the first value ℓ₀ by more than
    :data:`DIVERGED_RISE` × max(|ℓ₀|, 1e-30). Not moving: the median over steps of
    |ℓ_{t+1} − ℓ_t| / |ℓ_t| is below :data:`STILL_ULPS` float32 machine epsilons (the loss is
    computed in float32, so a step that changes it less changed nothing it can see).

    Returns:
        ``{"kind": "rose" | "still", "start", "end"}`` (floats), or ``None`` when neither holds
        (also for traces shorter than :data:`MIN_STEPS` finite steps).
    """
    loss = np.asarray(loss, np.float64)
    loss = loss[np.isfinite(loss)]
    n = loss.size
    if n < MIN_STEPS:
        return None
    start, end = float(loss[0]), float(loss[n - n // 10 :].mean())
    if end - start > DIVERGED_RISE * max(abs(start), 1e-30):
        return {"kind": "rose", "start": start, "end": end}
    change = np.abs(np.diff(loss)) / np.maximum(np.abs(loss[:-1]), np.finfo(np.float32).tiny)
    if float(np.median(change)) < STILL_ULPS * float(np.finfo(np.float32).eps):
        return {"kind": "still", "start": start, "end": end}
    return None


def still_falling(loss: np.ndarray, batches: int = 5) -> dict | None:
    """Is the loss trace ``loss`` ``(steps,)`` still falling at the end of the run?

    Compares the mean of the tenth of the steps just before the middle (m₁) with the mean of
    the last tenth (m₂). Their standard error comes from batch means (each tenth cut into
    ``batches`` consecutive blocks, so that autocorrelated minibatch noise counts fully). The
    trace is still falling when m₁ − m₂ > :data:`FALLING_Z` standard errors and
    > :data:`FALLING_SHARE` × max(|m₂|, m₀ − m₂), m₀ the mean of the first hundredth.

    Returns:
        ``{"drop", "se", "share"}`` (floats) when it is still falling, else ``None`` (also
        for traces shorter than :data:`MIN_STEPS` finite steps).
    """
    loss = np.asarray(loss, np.float64)
    loss = loss[np.isfinite(loss)]
    n = loss.size
    if n < MIN_STEPS:
        return None
    k = n // 10 - (n // 10) % batches
    middle, end = loss[n // 2 - k : n // 2], loss[n - k :]
    drop = float(middle.mean() - end.mean())
    noise = [block.reshape(batches, -1).mean(axis=1).var(ddof=1) for block in (middle, end)]
    se = float(np.sqrt(sum(noise) / batches))
    scale = max(abs(float(end.mean())), float(loss[: max(1, n // 100)].mean() - end.mean()))
    share = drop / scale if scale > 0 else 0.0
    if drop > FALLING_Z * se and share > FALLING_SHARE:
        return {"drop": drop, "se": se, "share": share}
    return None


def pareto_khat(log_weights: np.ndarray) -> float:
    """Pareto k̂ of importance log-weights ``(S,)``: the shape of a generalised Pareto
    distribution fitted (Zhang & Stephens 2009, with the weak prior of Vehtari et al. 2024) to
    the largest ``min(S/5, 3√S)`` weights, as ArviZ's ``psislw`` (``inf`` when the tail has
    4 draws or fewer, or a weight is not finite)."""
    lw = np.asarray(log_weights, np.float64).ravel()
    if not np.all(np.isfinite(lw)):
        return float("inf")
    s = lw.size
    lw = lw - lw.max()
    order = np.sort(lw)
    cutoff = max(order[-int(np.ceil(min(s / 5.0, 3 * np.sqrt(s)))) - 1], np.log(np.finfo(float).tiny))
    tail = np.sort(np.exp(lw[lw > cutoff]) - np.exp(cutoff))
    n = tail.size
    if n <= 4:
        return float("inf")
    m = 30 + int(n**0.5)
    b = 1 - np.sqrt(m / (np.arange(1, m + 1, dtype=float) - 0.5))
    b /= 3 * tail[int(n / 4 + 0.5) - 1]
    b += 1 / tail[-1]
    k = np.log1p(-b[:, None] * tail).mean(axis=1)
    length = n * (np.log(-(b / k)) - k - 1)
    w = 1 / np.exp(length - length[:, None]).sum(axis=1)
    keep = w >= 10 * np.finfo(float).eps
    w, b = w[keep], b[keep]
    b_post = np.sum(b * w / w.sum())
    k_post = np.log1p(-b_post * tail).mean()
    return float((n * k_post + 10 * 0.5) / (n + 10))


def split_rhat(draws: np.ndarray) -> np.ndarray:
    """Rank-normalised split R-hat (Vehtari et al. 2021, eqs. 3-4 after rank normalisation,
    the larger of the bulk and the folded-tail value; as ArviZ's ``rhat``) of every entry of
    ``draws`` ``(chain, draw, *shape)``.

    Returns:
        float64 ``shape``: ``inf`` for an entry whose chains are each constant but differ, NaN
        for an entry constant over all draws, with a non-finite draw, or when there are fewer
        than 2 chains or 4 draws per chain.
    """
    from scipy.special import ndtri
    from scipy.stats import rankdata

    x = np.asarray(draws, np.float64)
    shape = x.shape[2:]
    chains, n = x.shape[:2]
    if chains < 2 or n < 4:
        return np.full(shape, np.nan)
    x = x.reshape(chains, n, -1)
    half = n // 2
    split = np.concatenate([x[:, :half], x[:, n - half :]], axis=0)  # (2·chains, half, k)

    def rhat(a):  # a (m, half, k) → (k,), eq. 3-4 of Vehtari et al. 2021
        m, h, k = a.shape
        ranks = rankdata(a.reshape(m * h, k), method="average", axis=0)
        z = ndtri((ranks - 0.375) / (m * h + 0.25)).reshape(m, h, k)
        between = h * z.mean(axis=1).var(axis=0, ddof=1)
        within = z.var(axis=1, ddof=1).mean(axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.sqrt((between / within + h - 1) / h)

    with np.errstate(invalid="ignore"):
        out = np.fmax(rhat(split), rhat(np.abs(split - np.median(split, axis=(0, 1)))))
    constant = np.ptp(x.reshape(chains * n, -1), axis=0) == 0
    out[constant | ~np.all(np.isfinite(x), axis=(0, 1))] = np.nan
    return out.reshape(shape)


def mcmc_rhat(posterior) -> dict | None:
    """The largest R-hat (:func:`split_rhat`) of a sampler's permutation-invariant quantities
    (module docstring), or ``None`` for other methods, one chain or fewer than 4 draws.

    Returns:
        ``{"max_r_hat": float, "where": str (the site, or "predictive"), "above": int,
        "checked": int}``: ``above`` of the ``checked`` entries exceed :data:`RHAT_THRESHOLD`.
    """
    if posterior.stats.method not in MCMC_METHODS or posterior.num_chains < 2 or posterior.num_draws < 4:
        return None
    values: list[tuple[str, np.ndarray]] = [
        (name, split_rhat(v)) for name, v in posterior.samples.items() if name.endswith((".scale", ".variance")) or name == "noise"
    ]
    if posterior.model is not None and posterior.has_data:
        try:
            rows = posterior.x if posterior.row_latents() else posterior.x[:RHAT_ROWS]  # per-row latents: every row
            pred = posterior.predict(rows)
        except ValueError:  # non-finite draws: said by predict's own check when the user predicts
            pred = None
        if pred is not None:
            q = pred.probs if pred.task == "classification" else pred.draws
            values.append(("predictive", split_rhat(np.asarray(q).reshape(posterior.num_chains, posterior.num_draws, *q.shape[1:]))))
    flat = [(name, np.ravel(r)) for name, r in values]
    finite = [(name, r[~np.isnan(r)]) for name, r in flat]
    finite = [(name, r) for name, r in finite if r.size]
    if not finite:
        return None
    where, worst = max(((name, float(r.max())) for name, r in finite), key=lambda t: t[1])
    return {
        "max_r_hat": worst,
        "where": where,
        "above": int(sum((r > RHAT_THRESHOLD).sum() for _, r in finite)),
        "checked": int(sum(r.size for _, r in finite)),
    }


def vi_khat(posterior, seed: int = 0) -> float | None:
    """PSIS k̂ of a mean-field Gaussian posterior's q from :data:`KHAT_DRAWS` draws, or
    ``None`` when it has no such q, no training data or costs more than :data:`KHAT_BUDGET`."""
    q = posterior.approximation
    if not isinstance(q, MeanFieldGaussian) or not posterior.has_data or posterior.model is None:
        return None
    names = list(posterior.sites)
    if any(n not in q.loc for n in names):
        return None
    params = sum(int(np.size(q.loc[n])) for n in names)
    if KHAT_DRAWS * posterior.x.shape[0] * params > KHAT_BUDGET:
        return None
    loc = {n: np.asarray(q.loc[n], np.float32) for n in names}
    scale = {n: np.asarray(q.scale[n], np.float32) for n in names}
    if not all(np.all(np.isfinite(loc[n])) and np.all(scale[n] > 0) and np.all(np.isfinite(scale[n])) for n in names):
        return None  # no density to weight by
    lw = gaussian_log_weights(posterior.model, loc, scale, posterior.x, posterior.y, KHAT_DRAWS, seed)
    return pareto_khat(lw)


def above(value: float, threshold: float) -> str:
    """``value`` (which exceeds ``threshold``) with the fewest decimals, two at least, that
    print it above the threshold (R-hat 1.0103 as ``1.0103``, not ``1.01 > 1.01``)."""
    for digits in range(2, 7):
        text = f"{value:.{digits}f}"
        if float(text) > threshold:
            return text
    return repr(value)


def laplace_khat(posterior, seed: int = 0) -> float | None:
    """PSIS k̂ of a Laplace fit's Gaussian (full covariance) against the posterior, from
    :data:`KHAT_DRAWS` draws, for a model that is not a network; ``None`` otherwise (no full
    covariance, no data, a network, or more than :data:`KHAT_BUDGET`). A network's weight-space
    posterior is symmetric under permutations of its hidden units, so no unimodal Gaussian has a
    small k̂ there, and its predictive is what is judged; a hand-written model's posterior (eight
    schools, a time series) is what its Gaussian must match."""
    from bnnpp.posterior.laplace import LaplaceGaussian

    q = posterior.approximation
    if not isinstance(q, LaplaceGaussian) or q.structure != "full" or not posterior.has_data or posterior.model is None:
        return None
    from bnnpp.inference.variational_layers import is_network

    if is_network(posterior.model, posterior.x, posterior.y):
        return None  # a network: its predictive is judged instead
    factor = np.asarray(q.params["covariance_factor"])
    if not np.all(np.isfinite(factor)) or KHAT_DRAWS * posterior.x.shape[0] * factor.shape[0] > KHAT_BUDGET:
        return None
    mean = {k: np.asarray(v, np.float32) for k, v in sorted(q.mean.items())}
    lw = full_gaussian_log_weights(posterior.model, mean, factor, dict(q.fixed), posterior.x, posterior.y, KHAT_DRAWS, seed)
    return pareto_khat(lw)


def check(posterior) -> list[str]:
    """The health notes of a finished fit, one line each (empty when it looks done)."""
    stats = posterior.stats
    notes = []
    broken = posterior.non_finite_site()
    if broken is not None:
        name, bad, total = broken
        notes.append(
            f"{stats.method}: {bad} of {total} draws of site {name!r} are not finite: the fit is degenerate there (e.g. a "
            "scale whose mode sits at 0, where a centred hierarchical model's density is unbounded, so no mode or "
            "curvature exists); fit with method='nuts' or 'mclmc' (non-centred), or reparameterise the model"
        )
        return notes  # the checks below read the draws
    trace = stats.traces.get("negative_elbo", stats.traces.get("loss"))
    if trace is not None and stats.stopped_at is None:  # a NaN stop has its own warning
        trace = np.asarray(trace)
        columns = trace.reshape(trace.shape[0], -1).T if trace.ndim > 1 else [trace]
        what = "negative ELBO" if "negative_elbo" in stats.traces else "loss"
        stuck = [(i, r) for i, c in enumerate(columns) if (r := optimiser_stuck(c)) is not None]
        if stuck:
            i, r = stuck[0]
            member = f" (member {i}; {len(stuck)} of {len(columns)} members)" if len(columns) > 1 else ""
            if r["kind"] == "rose":
                notes.append(
                    f"{stats.method}: the optimiser diverged: the {what} rose from {r['start']:.4g} to {r['end']:.4g} over the "
                    f"{trace.shape[0]} steps{member}; lower the learning rate"
                )
            else:
                notes.append(
                    f"{stats.method}: the optimiser did not move: the {what} changed by less than float32 rounding on most of the "
                    f"{trace.shape[0]} steps{member}; raise the learning rate"
                )
        falling = [(i, r) for i, c in enumerate(columns) if (r := still_falling(c)) is not None] if not stuck else []
        if falling:
            i, r = max(falling, key=lambda ir: ir[1]["share"])
            member = f" (member {i}; {len(falling)} of {len(columns)} members)" if len(columns) > 1 else ""
            notes.append(
                f"{stats.method}: not converged: the {what} fell by {r['drop']:.4g} ({r['share']:.1%} of its scale, "
                f"{r['drop'] / max(r['se'], 1e-300):.0f} standard errors) from the middle to the end of the "
                f"{trace.shape[0]} steps{member}; run longer (more steps or epochs)"
            )
    khat = vi_khat(posterior, stats.seed) if stats.stopped_at is None else None  # a NaN stop's q may hold non-finite scales
    if khat is not None:
        stats.extras["psis_khat"] = khat
        if not khat <= KHAT_THRESHOLD:
            notes.append(
                f"{stats.method}: PSIS k̂ = {above(khat, KHAT_THRESHOLD)} > {KHAT_THRESHOLD}: the variational approximation is not "
                "trustworthy as a posterior (Yao et al. 2018); run longer, or compare with nuts on a small subset"
            )
    lkhat = laplace_khat(posterior, stats.seed) if stats.stopped_at is None else None
    if lkhat is not None:
        stats.extras["psis_khat"] = lkhat
        if not lkhat <= KHAT_THRESHOLD:
            notes.append(
                f"{stats.method}: PSIS k̂ = {above(lkhat, KHAT_THRESHOLD)} > {KHAT_THRESHOLD}: the Gaussian at the mode is not "
                "trustworthy as this model's posterior (Yao et al. 2018; a hierarchical model's mode can sit in the neck of "
                "its funnel, where the curvature says nothing of the rest); fit with method='nuts' or 'mclmc'"
            )
    rhat = mcmc_rhat(posterior) if stats.stopped_at is None else None
    if rhat is not None:
        stats.extras["max_r_hat"] = rhat["max_r_hat"]
        if not rhat["max_r_hat"] <= RHAT_THRESHOLD:
            notes.append(
                f"{stats.method}: R-hat = {above(rhat['max_r_hat'], RHAT_THRESHOLD)} > {RHAT_THRESHOLD} ({rhat['where']}; {rhat['above']} of "
                f"{rhat['checked']} invariant quantities): the {posterior.num_chains} chains disagree, so the draws are not "
                "yet from one posterior (Vehtari et al. 2021); run longer (more warmup and draws)"
            )
    return notes


def warn(posterior, stacklevel: int) -> list[str]:
    """:func:`check`, each note as a :class:`FitHealthWarning`; returns the notes (also kept in
    ``posterior.stats.extras["health"]`` when there are any)."""
    notes = check(posterior)
    if notes:
        posterior.stats.extras["health"] = notes
    for note in notes:
        warnings.warn(note, FitHealthWarning, stacklevel=stacklevel + 1)
    return notes
