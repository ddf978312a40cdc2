"""The collapse check: a regression fit whose predictive explains the training targets as
noise — an observation sd near the targets' own sd where the data show structure — is flagged
with one line naming a fit that does use the inputs.

Structure is judged without a model by the nearest-neighbour difference estimate of the noise
variance, σ̂² = (1/2n) Σ_i (y_i − y_{j(i)})² with j(i) the nearest other training input on
standardised columns (Rice 1984 for sorted 1-d inputs; Devroye et al. 2018, "A nearest
neighbor estimate of the residual variance", in general). It is consistent for the noise
variance of a smooth regression function and tends to the targets' variance when y does not
depend on x, so a learned noise sd well above it means the fit left signal in the noise.

The over-fit check is the other side: on small data (at most :data:`SMALL_DATA_ROWS` rows) a
predictive whose sd at the training inputs (the observation noise together with the spread of
the mean over draws) is far below the data's noise has fitted the training targets' noise, and
is over-confident everywhere. The noise is estimated there by a local-linear fit to each row's
nearest neighbours (:func:`local_linear_noise_sd`): the nearest-neighbour difference grows with
the function's slope (its square has mean 2σ² + E[(f(x_i) − f(x_j(i)))²], so on a steep function
a good fit would look over-fitted), the local-linear one with its curvature only. A
Gaussian predictive of sd r·σ for data of noise sd σ loses log r + 1/(2r²) − 1/2 nats per
point against the right sd (0.81 at r = 0.5) before any error of its mean. On more rows the
check stays quiet: with several inputs the neighbours lie far apart (their distance shrinks only
as n^(−1/d)) and the function varies between them too, so the estimate over-states the noise, as
on few rows of exact targets, where a tiny noise is right; the line says so. The same warning
goes to a fit with draws whose predictive sd hardly grows away from the training inputs
(:func:`outside_growth`): on small data the posterior over the function widens outside the
data, back towards the prior's spread, and a fit that is as sure there as at the data
understates it. Point estimates (one draw) are not judged on that: they have no spread.
"""

from __future__ import annotations

import warnings

import numpy as np

from bnnpp.inference.evidence import all_normal, hierarchical
from bnnpp.inference.variational_layers import find_layers, is_network
from bnnpp.introspection import probe_rows

__all__ = [
    "EXACT_SAMPLERS",
    "SMALL_DATA_ROWS",
    "SUITABILITY_KEY",
    "say_not_suited",
    "COLLAPSE_NEIGHBOUR_RATIO",
    "COLLAPSE_NOISE_RATIO",
    "COLLAPSE_RESIDUAL_RATIO",
    "OVERFIT_RATIO",
    "OVERFIT_ROWS_PER_AXIS",
    "ENSEMBLE_ROWS_PER_AXIS",
    "dropout_small_data_note",
    "sparse_inputs_note",
    "small_hierarchical_regression",
    "GROWTH_RATIO",
    "CollapseWarning",
    "OverconfidenceWarning",
    "collapse_message",
    "local_linear_noise_sd",
    "neighbour_noise_sd",
    "outside_growth",
    "overconfidence_message",
    "probes_apply",
    "warn_if_collapsed",
]

COLLAPSE_NOISE_RATIO = 0.7
"""A fit collapsed when its root mean observation variance is at least this share of the
targets' sd (a noise variance of 0.7² = 0.49 of the targets' leaves the inputs at most about half
of their variance to explain) ..."""
COLLAPSE_NEIGHBOUR_RATIO = 2.0
"""... and at least this many times the nearest-neighbour noise estimate
(:func:`neighbour_noise_sd`). The estimate is consistent for the noise sd, so a good fit's
noise sd is near it and a collapsed one's near the targets' sd; twice it leaves room for the
estimate's upward bias on a sloped function (module docstring). On targets that do not depend
on the inputs the estimate is near the targets' sd and the check stays quiet."""
COLLAPSE_RESIDUAL_RATIO = 0.5
"""... while the predictive mean misses the targets by at least this share of that noise sd (its
residual sd, √(1 − R²) × the targets' sd): a noise sd the mean's own errors do not show is an
over-dispersed predictive, not signal left in the noise: a per-row sd head whose log-scale
output lands far out in a few draws inflates the root mean noise sd while the mean fits the
targets."""
MAX_ROWS = 2000
"""The check reads at most this many training rows (the first ones) ..."""
MAX_DRAWS = 100
"""... and this many posterior draws."""
MAX_NEIGHBOUR_ROWS = 1000
"""The nearest-neighbour estimate reads at most this many rows (its cost grows as rows²)."""
SUITABILITY_KEY = "suitability_warning"
"""Where a method that says after its fit that it is not suited to the data (advi's and bbb's
:func:`mean_field_small_data_note`, mc_dropout's :func:`dropout_small_data_note`, the ensemble's
:func:`sparse_inputs_note`, swag's small-data line) records that line: ``posterior.stats.extras`` and ``metrics.json``."""

SMALL_DATA_ROWS = 200
"""Small data (20–200 training rows, where the posterior over the function is far wider than any one fit): a fit on at
most this many rows under a hierarchical prior by a method that does not suit the case says so after the fit (swag and
multiswag under any prior)."""


OVERFIT_RATIO = 0.5
"""A fit on at most :data:`SMALL_DATA_ROWS` rows over-fitted when its predictive sd at the
training inputs is below this share of the local-linear noise estimate
(:func:`local_linear_noise_sd`; module docstring): a Gaussian predictive at half the noise sd
loses 0.81 nats per point before any error of its mean. An empirical default: a higher ratio
flags good fits through the estimate's own error on 20–200 rows, a lower one passes fits that
lose most of that."""


OVERFIT_ROWS_PER_AXIS = 5
"""The over-fit part judges a fit only when its n rows in d input columns are dense enough for
the local-linear estimate, n ≥ this ** d (about this many rows along each axis: d ≤ 2 on small
data, d = 3 from 125 rows): on sparser rows the d + 2 neighbours lie too far apart for the
function to be near linear between them, the estimate takes its variation for noise, and the
line would fire on the exact posterior itself. An empirical default."""

ENSEMBLE_ROWS_PER_AXIS = 3
"""An ensemble's or map's regression fit on at most :data:`SMALL_DATA_ROWS` rows under a hierarchical prior says it does not
suit the data when its n rows in d inputs are sparser than this many rows along each axis, n < this ** d (d = 4 below 81
rows; :func:`sparse_inputs_note`): on sparser rows each member interpolates its rows and most of the input space lies
far from any of them, where the members' spread does not cover their error. An empirical default: a higher density
flags ensembles whose spread does cover it, a lower one passes sparse fits that are sure where they miss."""

GROWTH_RATIO = 1.5
"""... and over-confident away from the data when its predictive sd grows less than this many
times from the training inputs to the outer half of them moved to twice their distance from
the inputs' mean, on the side where it grows least (:func:`outside_growth`)."""
MIN_SIDE_ROWS = 2
"""A side of the data (:func:`outside_growth`) counts when it has at least this many of the outer rows."""


class CollapseWarning(UserWarning):
    """A regression fit explained its training targets as noise."""


class OverconfidenceWarning(UserWarning):
    """A regression fit on small data is over-confident: its predictive sd is far below the
    data's noise at the training inputs, or it does not grow away from them."""


def neighbour_noise_sd(x, y) -> float:
    """The nearest-neighbour estimate of the noise sd of ``y`` ``(n,)`` or ``(n, K)`` given
    ``x`` ``(n, ...)`` (module docstring): sqrt of half the mean squared difference between
    each row's targets and those of its nearest other row (Euclidean on standardised, flattened
    inputs), averaged over the K targets. Returns a float (``n ≥ 2``)."""
    x = np.asarray(x, np.float64).reshape(np.shape(x)[0], -1)
    sd = x.std(axis=0)
    x = (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    sq = np.sum(x**2, axis=1)
    d = sq[:, None] + sq[None, :] - 2.0 * x @ x.T
    np.fill_diagonal(d, np.inf)
    y = np.asarray(y, np.float64).reshape(np.shape(y)[0], -1)
    diff = y - y[np.argmin(d, axis=1)]
    return float(np.sqrt(0.5 * np.mean(diff**2)))


def local_linear_noise_sd(x, y) -> float | None:
    """A noise-sd estimate of ``y`` ``(n,)`` or ``(n, K)`` given ``x`` ``(n, ...)`` that the
    regression function's slope does not inflate: each row's target is predicted by the least-
    squares plane through its d + 2 nearest other rows (d inputs; Euclidean on standardised,
    flattened inputs), and the squared errors e_i², divided by their variance factor 1 + ‖w_i‖²
    (w_i the plane's weights on the neighbours' targets, so that Var e_i = σ²(1 + ‖w_i‖²) for
    independent noise of sd σ), are averaged. In one dimension with the two neighbours on either
    side it is the pseudo-residual estimate of Gasser, Sroka & Jennen-Steinmetz (1986), whose
    bias is of the order of the function's curvature times the squared spacing, where
    :func:`neighbour_noise_sd`'s is of its slope times the spacing. Returns a float, or ``None``
    when there are fewer than d + 3 rows."""
    x = np.asarray(x, np.float64).reshape(np.shape(x)[0], -1)
    n, d = x.shape
    k = d + 2
    if n < k + 1:
        return None
    sd = x.std(axis=0)
    x = (x - x.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    y = np.asarray(y, np.float64).reshape(n, -1)
    sq = np.sum(x**2, axis=1)
    dist = sq[:, None] + sq[None, :] - 2.0 * x @ x.T
    np.fill_diagonal(dist, np.inf)
    terms = np.empty(n)
    for i in range(n):
        near = np.argpartition(dist[i], k - 1)[:k]
        design = np.hstack([np.ones((k, 1)), x[near] - x[i]])
        w = np.linalg.pinv(design)[0]  # the plane's value at x_i as weights on the neighbours' targets
        terms[i] = np.mean((y[i] - w @ y[near]) ** 2) / (1.0 + w @ w)
    return float(np.sqrt(np.mean(terms)))


def _training_fit(posterior) -> dict | None:
    """The predictive at (the first :data:`MAX_ROWS`) training inputs of a regression fit with a
    gaussian or student_t likelihood: ``{"x", "y" (float64), "noise" (root mean observation
    variance), "sd" (root mean of noise² plus the variance of the mean over draws), "r2" (of the
    predictive mean), "target_sd"}``; ``None`` when the checks do not apply (classification,
    counts, fewer than 5 rows, constant targets, inputs that are all one row — a model of the
    targets alone, with no function of x to find —, no data)."""
    if not posterior.has_data or posterior.model is None or np.ndim(posterior.y) < 1:
        return None
    if getattr(posterior.model, "task", "regression") != "regression" or not np.issubdtype(np.asarray(posterior.y).dtype, np.floating):
        return None
    x, y = posterior.x[:MAX_ROWS], np.asarray(posterior.y[:MAX_ROWS], np.float64)
    if y.shape[0] < 5:
        return None
    flat = np.asarray(x).reshape(np.shape(x)[0], -1)
    if np.all(flat == flat[:1]):
        return None
    draws = posterior.num_chains * posterior.num_draws
    pred = posterior.predict(x, num_samples=min(MAX_DRAWS, draws))
    if pred.task != "regression" or pred.likelihood == "poisson" or pred.noise is None:
        return None
    spread = float(np.sum((y - y.mean(axis=0)) ** 2))
    if not spread > 0:
        return None
    noise2 = float(np.mean(np.asarray(pred.noise, np.float64) ** 2))
    spread_of_mean = float(np.mean(np.asarray(pred.draws, np.float64).var(axis=0))) if getattr(pred, "draws", None) is not None else 0.0
    return {
        "x": x,
        "y": y,
        "noise": float(np.sqrt(noise2)),
        "sd": float(np.sqrt(noise2 + spread_of_mean)),
        "r2": 1.0 - float(np.sum((y - pred.mean) ** 2)) / spread,
        "target_sd": float(np.sqrt(spread / y.size)),
    }


EXACT_SAMPLERS = ("nuts", "mclmc", "chees", "meads")
"""Methods that sample the exact posterior given enough steps: a line after one of them names longer runs, not
``method='nuts'``."""


def _fix(posterior, collapsed: bool = False) -> str:
    """The fix a collapse (``collapsed``) or over-confidence line names (the method or option
    that does fit); never the method that was used, nor standardising data that already is."""
    sampler = posterior.method in EXACT_SAMPLERS
    exact = "run the chains longer (more warmup and draws) and check R-hat" if sampler else "fit with method='nuts'"
    standardize = getattr(posterior.model, "standardize", None)
    if standardize is False:
        return f"fit with standardize=True (bnnpp.models.mlp's default; the CLI without --no-standardize), or {exact}"
    if standardize is None:  # a custom model sees the data as given
        if _standardised(posterior.x) and _standardised(posterior.y):
            return exact if sampler else "fit with method='laplace', method='ensemble' or method='nuts'"
        return f"standardise x and y to unit scale before fitting, or {exact}"
    stats = getattr(posterior, "stats", None)
    if collapsed and posterior.method in ("map", "laplace", "ensemble") and getattr(stats, "options", {}).get("init_loc") == "glorot":
        # from Glorot-small weights a joint point estimate under a hierarchical prior slides into the spike at scale -> 0
        # (Neal 2003's funnel; bnnpp.inference.options.init_loc_option), which a U(±2) start stays clear of
        return f"fit again with init_loc='uniform' (the Glorot start's small weights let the prior's scales shrink), or {exact}"
    if sampler:
        return exact
    if not collapsed and _non_normal_prior(posterior):
        # under a heavy-tailed or mixture prior neither the mode's curvature (laplace) nor the members' spread (ensemble)
        # follows the exact posterior's widening away from the data
        return "under a prior other than Normal fit with method='nuts' (exact on small data; laplace and ensemble stayed sure there)"
    others = " or ".join(f"method='{m}'" for m in ("laplace", "ensemble") if m != posterior.method)
    return f"fit with {others} (they keep the data on small sets), or method='nuts' (exact on small data)"


def _standardised(a) -> bool:
    """Whether every column of ``a`` ``(n, ...)`` has mean within 0.1 and sd within 10% of 0 and 1 (already standardised)."""
    flat = np.asarray(a, np.float64).reshape(np.shape(a)[0], -1)
    if flat.shape[0] < 2:
        return False
    return bool(np.all(np.abs(flat.mean(axis=0)) <= 0.1) and np.all(np.abs(flat.std(axis=0) - 1.0) <= 0.1))


def probes_apply(posterior) -> bool:
    """Whether the post-fit checks' assumptions hold for ``posterior``'s model: a network (bnnpp's
    own or a Flax module, which have a ``spec``, or a model built of bnnpp layers) whose inputs
    are features of each row, so that moving a row's inputs away from the data asks the
    function something. ``False`` for other hand-written models (eight schools' ``x`` holds
    measurement sds, an item-response model's holds indices) and for any model with latents
    per row (:meth:`Posterior.row_latents`): there the checks stay silent."""
    model = posterior.model
    if model is None or not posterior.has_data:
        return False
    try:
        if posterior.row_latents():
            return False
        return is_network(model, posterior.x, posterior.y)
    except Exception:  # noqa: BLE001 - a check must not fail a finished fit
        return False


def _non_normal_prior(posterior) -> bool:
    """Whether some bnnpp layer of ``posterior``'s model has a prior other than a Normal (a scale
    mixture, Laplace, Cauchy, ...); ``False`` when the model has no bnnpp layers or cannot be traced."""
    try:
        layers = find_layers(posterior.model, *probe_rows(posterior.model, posterior.x, posterior.y))
    except Exception:  # the check must not fail a finished fit; the line then names laplace and ensemble as before
        return False
    return not all_normal(layers)


def collapse_message(posterior) -> str | None:
    """One line when ``posterior`` (a regression fit with a gaussian or student_t likelihood and
    its training data) predicts its training targets with an observation sd of at least
    :data:`COLLAPSE_NOISE_RATIO` of the targets' sd and :data:`COLLAPSE_NEIGHBOUR_RATIO` times
    the nearest-neighbour noise estimate, with a mean whose errors are of that size
    (:data:`COLLAPSE_RESIDUAL_RATIO`), or with a mean whose residual sd is itself that large
    against both (a flat mean, whatever its noise sd); ``None`` otherwise (a good fit, targets that do not
    depend on the inputs, classification, counts, no data)."""
    fit = _training_fit(posterior)
    if fit is None:
        return None
    noise, target_sd, x, y, r2 = fit["noise"], fit["target_sd"], fit["x"], fit["y"], fit["r2"]
    residual = np.sqrt(max(1.0 - r2, 0.0)) * target_sd  # the predictive mean's residual sd
    # a noise sd near the targets' that the mean's errors show, or a mean that misses them by that much whatever its
    # noise (a network whose weights all shrank to zero: a constant mean, and softplus(0) from a per-row sd head)
    noisy = noise >= COLLAPSE_NOISE_RATIO * target_sd and residual >= COLLAPSE_RESIDUAL_RATIO * noise
    flat = residual >= COLLAPSE_NOISE_RATIO * target_sd
    if not (noisy or flat):
        return None  # before the neighbour estimate, which costs rows²
    reference = neighbour_noise_sd(x[:MAX_NEIGHBOUR_ROWS], y[:MAX_NEIGHBOUR_ROWS])
    noisy, flat = noisy and noise >= COLLAPSE_NEIGHBOUR_RATIO * reference, flat and residual >= COLLAPSE_NEIGHBOUR_RATIO * reference
    if not (noisy or flat):
        return None
    fix = _fix(posterior, collapsed=True)
    if not noisy:
        return (
            f"the {posterior.method} fit's mean leaves the training targets' structure out (residual sd {residual:.3g} against "
            f"the targets' sd {target_sd:.3g} and a nearest-neighbour noise estimate of {reference:.3g}; R² of the mean "
            f"{r2:.2f}; noise sd {noise:.3g}): {fix}"
        )
    return (
        f"the {posterior.method} fit explains the training targets as noise (noise sd {noise:.3g} against the targets' "
        f"sd {target_sd:.3g} and a nearest-neighbour noise estimate of {reference:.3g}; R² of the mean {r2:.2f}): {fix}"
    )


def outside_growth(posterior, x, sd_at_data: float | None = None) -> float | None:
    """How the predictive sd grows away from the training inputs ``x`` ``(n, ...)``, on the side
    where it grows least: the half of the rows farthest from the inputs' mean (on standardised
    columns), each moved to twice its distance from the mean, split into sides (for each input
    column, the rows above its mean and those below; a side needs at least
    :data:`MIN_SIDE_ROWS` rows and a tenth of the outer half); per side, the root mean
    predictive variance (noise² plus the variance of the mean over draws) at its moved rows
    over the root mean predictive variance at every training row (``sd_at_data`` when the
    caller has it). Returns the least of the sides' ratios, a float, or ``None`` for a fit with
    one draw (a point estimate has no spread to grow) or inputs that are all the same row
    (there is no "away" from them).

    Per side because a fit can be wide on one side of the data and as sure as at the data on
    the other: ReLU ensemble members that extrapolate the same slope past one end of the data
    agree there while they spread past the other, and an average over both sides hides the sure
    side."""
    draws = posterior.num_chains * posterior.num_draws
    if draws < 2:
        return None
    x = np.asarray(x)
    flat = x.astype(np.float64).reshape(x.shape[0], -1)
    centre, sd = flat.mean(axis=0), flat.std(axis=0)
    if not np.any(sd > 0):
        return None
    z = (flat - centre) / np.where(sd > 0, sd, 1.0)
    distance = np.sqrt(np.sum(z**2, axis=1))
    outer = distance >= np.median(distance)
    moved = (centre + 2.0 * (flat - centre)).astype(x.dtype).reshape(x.shape)  # every row: the training inputs' shape

    def variance(points):
        pred = posterior.predict(points, num_samples=min(MAX_DRAWS, draws))
        means = np.asarray(pred.draws, np.float64)  # (S, n, ...)
        noise2 = np.asarray(pred.noise, np.float64) ** 2
        noise2 = np.broadcast_to(noise2.reshape(noise2.shape + (1,) * (means.ndim - noise2.ndim)), means.shape)
        per_row = lambda a: a.reshape(a.shape[0], -1).mean(axis=1)  # (n,): mean over the outputs
        return per_row(noise2.mean(axis=0)) + per_row(means.var(axis=0))

    at_data = sd_at_data**2 if sd_at_data is not None else float(np.mean(variance(x)))
    away = variance(moved)
    sides = np.concatenate([outer & (z > 0).T, outer & (z < 0).T])  # (2 · columns, n): one row per side
    enough = sides.sum(axis=1) >= max(MIN_SIDE_ROWS, 0.1 * outer.sum())
    sides = sides[enough] if np.any(enough) else outer[None]
    per_side = (sides @ away) / sides.sum(axis=1)
    return float(np.sqrt(per_side.min() / at_data))


def overconfidence_message(posterior) -> str | None:
    """One line when ``posterior`` (a regression fit as :func:`collapse_message`'s, on at most
    :data:`SMALL_DATA_ROWS` rows) is over-confident: at the training inputs, a predictive sd
    (noise and the spread of the mean over draws) below :data:`OVERFIT_RATIO` times the
    local-linear noise estimate (:func:`local_linear_noise_sd`; only on rows dense enough for
    their inputs, :data:`OVERFIT_ROWS_PER_AXIS`); away from them (a fit with draws), an sd that grows less
    than :data:`GROWTH_RATIO` times (:func:`outside_growth`). ``None`` otherwise (more rows,
    classification, counts, no data). Records the measures in
    ``posterior.stats.extras["small_data_check"]``."""
    if not posterior.has_data or np.shape(posterior.y)[0] > SMALL_DATA_ROWS:
        return None
    fit = _training_fit(posterior)
    if fit is None:
        return None
    n, d = np.shape(fit["x"])[0], int(np.prod(np.shape(fit["x"])[1:]))
    dense = n >= OVERFIT_ROWS_PER_AXIS**d
    reference = local_linear_noise_sd(fit["x"], fit["y"]) if dense else None  # sparse rows: the estimate bounds nothing
    growth = outside_growth(posterior, fit["x"], fit["sd"])
    posterior.stats.extras["small_data_check"] = {"local_linear_noise_sd": reference, "training_sd": fit["sd"], "outside_growth": growth}
    if reference is not None and fit["sd"] < OVERFIT_RATIO * reference:
        return (
            f"the {posterior.method} fit on {fit['y'].shape[0]} rows fitted the training targets' noise (predictive sd "
            f"{fit['sd']:.3g} at the training inputs against a local-linear noise estimate of {reference:.3g}; R² of "
            f"the mean {fit['r2']:.2f}), so it is over-confident (unless the targets are exact): {_fix(posterior)}"
        )
    if growth is not None and growth < GROWTH_RATIO:
        return (
            f"the {posterior.method} fit on {fit['y'].shape[0]} rows is about as sure away from the training inputs as at "
            f"them (its predictive sd grows {growth:.2f}× at twice their distance from their mean on one side, under "
            f"{GROWTH_RATIO}×): {_fix(posterior)}"
        )
    return None


def small_hierarchical_regression(model, x, y, layers=None) -> bool:
    """Whether a fit of ``model`` on ``(x, y)`` is the small-data case: regression, at most :data:`SMALL_DATA_ROWS` rows, a
    hierarchical prior on bnnpp layers (:func:`~bnnpp.inference.evidence.hierarchical`: a sampled layer scale, under
    Normal, Laplace, Cauchy or other weights); ``layers``: the model's
    :func:`~bnnpp.inference.variational_layers.find_layers` when the caller has them, else traced only when needed."""
    if getattr(model, "task", None) != "regression" or np.shape(x)[0] > SMALL_DATA_ROWS:
        return False
    return hierarchical(find_layers(model, *probe_rows(model, x, y)) if layers is None else layers)


def say_not_suited(line: str) -> dict:
    """Warn (UserWarning, pointing at the runner that collected the method's extras) that the
    method is not suited to the data with ``line``, and return the ``extras`` entry that records
    it (``{SUITABILITY_KEY: line}``, for ``stats.extras`` and ``metrics.json``)."""
    warnings.warn(line, UserWarning, stacklevel=3)
    return {SUITABILITY_KEY: line}


def mean_field_small_data_note(method: str, n: int, held: bool = True) -> str:
    """The line a mean-field method (bbb, advi's ``guide="normal"``) prints after a regression fit on at most
    :data:`SMALL_DATA_ROWS` rows under a hierarchical prior, naming the methods that suit the case. ``held``: the layer
    scales held at an evidence-trained MAP's (the default under Normal weights): its sd grows too little off the data
    (a factorised Gaussian q cannot widen between or beyond the data as the posterior does: Foong et al. 2020, "On the
    expressiveness of approximate inference in Bayesian neural networks"). Else (factors of q: Laplace or Cauchy weights,
    ``"variational"``) it shrinks them and explains targets as noise (mean-field VI's pull towards the prior and a
    constant function: Coker et al. 2022, "Wide mean-field Bayesian neural networks ignore the data")."""
    if not held:
        return (
            f"{method} under a hierarchical prior on small data ({n} rows, at most {SMALL_DATA_ROWS}) with the layer scales "
            "in its mean-field q shrinks them and explains part of the targets as noise (the evidence that holds them "
            "needs Normal weight priors): fit method='laplace', method='ensemble' or method='nuts'"
        )
    return (
        f"{method} under a hierarchical prior on small data ({n} rows, at most {SMALL_DATA_ROWS}) under-states how the "
        "predictive sd grows away from the training inputs (its mean-field q): for uncertainty outside the data fit "
        "method='laplace', method='ensemble' or method='nuts'"
    )


def dropout_small_data_note(method: str, n: int) -> str:
    """mc_dropout's line after a regression fit on at most :data:`SMALL_DATA_ROWS` rows under a hierarchical
    prior: the spread of its predictive is set by the fixed dropout rate, not by the data (Osband 2016, "Risk versus
    uncertainty in deep learning: Bayes, bootstrap and the dangers of dropout"), so it fits the mean loosely and
    under-states how the sd grows away from the data."""
    return (
        f"{method} under a hierarchical prior on small data ({n} rows, at most {SMALL_DATA_ROWS}) fits the mean loosely and "
        "under-states how the predictive sd grows away from the training inputs: fit method='laplace', method='ensemble' "
        "or method='nuts'"
    )


def sparse_inputs_note(method: str, model, x, y, layers=None) -> str | None:
    """The line ``ensemble`` or ``map`` prints after a regression fit on n ≤ :data:`SMALL_DATA_ROWS` rows in d inputs under
    a hierarchical prior (:func:`small_hierarchical_regression`) when n < :data:`ENSEMBLE_ROWS_PER_AXIS` ** d, else
    ``None``: each member (map: the mode) fits its rows, nothing covers its error between them; it names the fits that
    do. ``layers`` as :func:`small_hierarchical_regression`'s."""
    n, d = int(np.shape(x)[0]), int(np.prod(np.shape(x)[1:]))
    if np.log(n) >= d * np.log(ENSEMBLE_ROWS_PER_AXIS) or not small_hierarchical_regression(model, x, y, layers):
        return None
    why = "each member fits the rows and their spread between so few rows does not cover their error"
    why = "the point estimate fits the rows and has no spread between them" if method == "map" else why
    return (
        f"{method} under a hierarchical prior on {n} rows in {d} inputs (fewer than {ENSEMBLE_ROWS_PER_AXIS}**{d}) can be "
        f"sure where it misses: {why}; for calibrated predictions fit method='laplace' or method='nuts'"
    )


def warn_if_collapsed(posterior) -> str | None:
    """Warn (:class:`CollapseWarning`) with :func:`collapse_message`, else (:class:`OverconfidenceWarning`)
    with :func:`overconfidence_message`, and record the line in ``posterior.stats.extras`` under
    ``"collapse_warning"`` or ``"overconfidence_warning"``; returns the line or ``None`` (also for a
    posterior with non-finite draws: the fit's health check names that, and a check that predicts
    would only raise)."""
    try:
        posterior.check_finite()
    except ValueError:
        return None
    if not probes_apply(posterior):
        return None
    message = collapse_message(posterior)
    if message is not None:
        posterior.stats.extras["collapse_warning"] = message
        warnings.warn(message, CollapseWarning, stacklevel=3)
        return message
    message = overconfidence_message(posterior)
    if message is not None:
        posterior.stats.extras["overconfidence_warning"] = message
        warnings.warn(message, OverconfidenceWarning, stacklevel=3)
    return message
