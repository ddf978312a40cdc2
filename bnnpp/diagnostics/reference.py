"""How far is an approximation from a reference posterior (e.g. long NUTS)?"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from bnnpp import metrics
from bnnpp.diagnostics._common import RHAT_THRESHOLD
from bnnpp.diagnostics.convergence import summary

# --------------------------------------------------------------------------------------
# How far is an approximation from a reference posterior (e.g. long NUTS)?
# --------------------------------------------------------------------------------------


def reference_check(reference_post, x: np.ndarray, num_ref: int = 20) -> dict:
    """Is ``reference_post`` fit to serve as the exact posterior? Its convergence on the
    permutation-invariant quantities (:func:`summary` at the first ``num_ref`` rows of ``x``).

    Returns:
        ``{"method", "num_chains", "num_draws", "max_r_hat", "min_ess_bulk", "divergences",
        "converged"}``; ``converged`` is True when max R-hat < :data:`RHAT_THRESHOLD` (1.01).

    Raises:
        ValueError: the reference has fewer than 2 chains (R-hat cannot be checked).
    """
    if reference_post.num_chains < 2:
        raise ValueError(
            f"the reference posterior ({reference_post.method}) has {reference_post.num_chains} chain: R-hat needs ≥ 2; "
            "fit it with num_chains=4 (e.g. method='nuts', num_chains=4)"
        )
    s = summary(reference_post, x_ref=np.asarray(x[:num_ref], np.float32))
    r = s["max_r_hat"]
    return {
        "method": reference_post.method,
        "num_chains": reference_post.num_chains,
        "num_draws": reference_post.num_draws,
        "max_r_hat": r,
        "min_ess_bulk": s["min_ess_bulk"],
        "divergences": s["divergences"],
        "converged": r is not None and r < RHAT_THRESHOLD,
    }


def reference(post, reference_post, x: np.ndarray, *, check: dict | None = None, num_ref: int = 20) -> dict:
    """The predictive agreement of ``post`` with a reference posterior (normally a long
    NUTS run) at the inputs ``x`` ``(n, ...)``, as Izmailov et al. (2021, sec. 5) measure
    approximate inference against HMC.

    Classification (per point, then averaged over ``x``): ``agreement`` — the share of points
    where both predictive distributions pick the same class; ``total_variation`` —
    ½ Σ_c |p_c − p_ref,c| of the posterior-predictive probabilities.
    Regression: ``w2`` — the 2-Wasserstein distance between the two predictive marginals
    (mixtures over draws of N(mean, noise²); :func:`bnnpp.metrics.wasserstein2`), mean over
    points; ``sd_ratio`` and ``epistemic_sd_ratio`` — the geometric mean over points of
    predictive sd / the reference's (total, and of the mean function only): 1 is right,
    below 1 overconfident, above 1 underconfident.

    Args:
        post: the approximation (any :class:`~bnnpp.Posterior`).
        reference_post: the reference; its R-hat is checked (:func:`reference_check`) unless
            ``check`` (that function's result, computed once for many methods) is given.
        x: inputs to compare at (test points, or a grid reaching out of the data).
        num_ref: rows of ``x`` used for the reference's R-hat.

    Returns:
        A JSON-safe dict: ``task``, the numbers above, ``per_point`` (lists ``(n,)``: the
        per-point agreement and total variation, or W2 and sd ratio), and ``reference``
        (:func:`reference_check`'s dict). A non-converged reference gives a UserWarning.
    """
    x = np.asarray(x, np.float32)
    if x.ndim < 2 or x.shape[0] == 0:
        raise ValueError(f"x must be a non-empty batch of inputs (n, features...), got shape {x.shape}")
    check = reference_check(reference_post, x, num_ref) if check is None else check
    if not check["converged"]:
        warnings.warn(
            f"the reference posterior has max R-hat {check['max_r_hat']} (≥ {RHAT_THRESHOLD}): run it longer "
            "(more warm-up and draws) before trusting the agreement numbers",
            UserWarning,
            stacklevel=2,
        )
    p, q = post.predict(x), reference_post.predict(x)
    if p.task != q.task:
        raise ValueError(f"the posterior is {p.task} and the reference {q.task}: fit both to the same model")
    out: dict[str, Any] = {"task": p.task, "reference": check, "num_points": int(x.shape[0])}
    if p.task == "classification":
        agree = metrics.top1_agreement(p.mean, q.mean)
        tv = metrics.total_variation(p.mean, q.mean)
        out.update(
            {
                "agreement": float(agree.mean()),
                "total_variation": float(tv.mean()),
                "per_point": {"agreement": agree.tolist(), "total_variation": tv.tolist()},
            }
        )
        return out
    if p.likelihood != "gaussian" or q.likelihood != "gaussian" or p.draws.ndim != 2:
        raise ValueError(
            f"reference compares 1-D Gaussian predictives; got {p.likelihood} and {q.likelihood} with targets "
            f"{p.draws.shape[1:]}: compare test scores (Prediction.scores) instead"
        )
    w2 = metrics.wasserstein2(metrics.predictive_quantiles(p.draws, p.noise), metrics.predictive_quantiles(q.draws, q.noise))
    ratio = p.std / q.std
    epi = p.epistemic_std / np.maximum(q.epistemic_std, 1e-12)
    out.update(
        {
            "w2": float(w2.mean()),
            "sd_ratio": float(np.exp(np.mean(np.log(ratio)))),
            "epistemic_sd_ratio": float(np.exp(np.mean(np.log(np.maximum(epi, 1e-12))))),
            "per_point": {"w2": w2.tolist(), "sd_ratio": ratio.tolist()},
        }
    )
    return out


# --------------------------------------------------------------------------------------
# How far are a posterior's moments from known ones (a closed form, a long reference run)?
# --------------------------------------------------------------------------------------

MEAN_SQ_Z_PASS = 0.01
"""A sampler passes :func:`moment_error` when the mean squared standardised error of its
posterior means is below this: the means off by 0.1 posterior sd on average (Monte Carlo error
alone, ESS ≥ 1,000, gives about 0.001)."""
SD_RATIO_PASS = 0.10
"""… and every coordinate's posterior sd within this fraction of the reference's (the sd's
Monte Carlo error at an ESS of 1,000 is about 2%)."""


def moment_error(post, reference_moments: dict) -> dict:
    """The distance of ``post``'s draws from known posterior moments, per latent coordinate.

    Args:
        post: a :class:`~bnnpp.Posterior`.
        reference_moments: site → ``{"mean": array, "sd": array}`` of the site's shape (every
            site named must be a latent site of ``post``).

    Returns:
        ``{"mean_sq_z", "max_abs_z", "sd_ratio_min", "sd_ratio_max", "passed", "worst"}``:
        z = (posterior mean − reference mean) / reference sd over every coordinate; the ratios
        of the posterior sds to the reference's; ``passed`` when mean z² <
        :data:`MEAN_SQ_Z_PASS` and every ratio is within :data:`SD_RATIO_PASS` of 1; ``worst``
        the coordinate with the largest |z| as ``"site[index]"``.
    """
    z_all, ratio_all, names = [], [], []
    for site, ref in reference_moments.items():
        if site not in post.samples:
            raise ValueError(f"the reference names site {site!r}, which the posterior does not have (it has {sorted(post.samples)})")
        draws = np.asarray(post.samples[site], np.float64)
        flat = draws.reshape(draws.shape[0] * draws.shape[1], -1)
        mean, sd = np.ravel(np.asarray(ref["mean"], np.float64)), np.ravel(np.asarray(ref["sd"], np.float64))
        if mean.size != flat.shape[1]:
            raise ValueError(f"site {site!r}: the reference has {mean.size} values, the posterior's draws {flat.shape[1]}")
        z_all.append((flat.mean(axis=0) - mean) / sd)
        ratio_all.append(flat.std(axis=0) / sd)
        names += [f"{site}[{i}]" if mean.size > 1 else site for i in range(mean.size)]
    z, ratio = np.concatenate(z_all), np.concatenate(ratio_all)
    mean_sq = float(np.mean(z**2))
    return {
        "mean_sq_z": mean_sq,
        "max_abs_z": float(np.max(np.abs(z))),
        "sd_ratio_min": float(ratio.min()),
        "sd_ratio_max": float(ratio.max()),
        "passed": bool(mean_sq < MEAN_SQ_Z_PASS and np.all(np.abs(ratio - 1.0) <= SD_RATIO_PASS)),
        "worst": names[int(np.argmax(np.abs(z)))],
    }
