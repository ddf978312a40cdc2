"""Fit several inference methods to the same data with the same seed and read them the same
way: test metrics, convergence (R-hat, ESS, PSIS k̂), PSIS-LOO and ArviZ's ranking.

:func:`compare_methods` returns numbers and posteriors; ``bnnpp compare`` (``bnnpp/cli``)
writes them as ``compare.md``/``compare.json`` with the figures.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence

import numpy as np

from bnnpp import diagnostics
from bnnpp.inference import fit
from bnnpp.inference.registry import get_method, registered
from bnnpp.posterior import MeanFieldGaussian
from bnnpp.posterior.io import UNRECORDED_OPTIONS
from bnnpp.records import CompareResult
from bnnpp.references import reference_posterior
from bnnpp.reports import compare_markdown

__all__ = ["COMPARE_DEFAULTS", "REFERENCE_OPTIONS", "base_options", "check_methods", "compare_methods", "markdown"]

#: Options that differ from a method's own defaults in a comparison: an empirical default that
#: halves NUTS's warm-up and draws to keep a comparison short, while four chains of 500 draws
#: still leave room for a bulk ESS above 400 (Vehtari et al. 2021).
COMPARE_DEFAULTS: dict[str, dict] = {"nuts": {"num_warmup": 500, "num_samples": 500}}


def base_options(methods, quick: bool) -> dict[str, dict]:
    """Method → the options a comparison starts from: each method's smoke settings
    (:attr:`~bnnpp.inference.registry.Method.smoke`, a fit of seconds) with ``quick``, else
    :data:`COMPARE_DEFAULTS`."""
    return {m: dict(get_method(m).smoke) if quick else COMPARE_DEFAULTS.get(m, {}) for m in methods}


#: The reference posterior of ``reference="nuts"``: long chains (three times NUTS's default
#: draws), so that its R-hat passes; fitted once and cached (:mod:`bnnpp.references`).
#: ``"quick"`` is for smoke tests only (its R-hat is not expected to pass).
REFERENCE_OPTIONS: dict[str, dict] = {
    "full": {"num_chains": 4, "num_warmup": 1000, "num_samples": 3000},
    "quick": {"num_chains": 2, "num_warmup": 50, "num_samples": 50},
}


def check_methods(methods: Sequence[str]) -> list[str]:
    """Validate a list of method names; returns it without duplicates, in order.

    Raises:
        ValueError: none given, or a name that is not registered.
        ImportError: a method this environment cannot run (:attr:`Method.unavailable`).
    """
    methods = [m.strip() for m in methods if m.strip()]
    if not methods:
        raise ValueError(f"give at least one method, e.g. --methods {','.join(registered())}")
    unknown = [m for m in methods if m not in registered()]
    if unknown:
        raise ValueError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(registered())}")
    for m in methods:  # a method this environment cannot run: refused before the first fit
        get_method(m).check_available()
    return list(dict.fromkeys(methods))


def compare_methods(
    model,
    dataset,
    methods: Sequence[str],
    *,
    seed: int = 0,
    options: dict[str, dict] | None = None,
    quick: bool = False,
    progress: bool = True,
    num_ref: int = 20,
    reference: str | None = None,
    reference_options: dict | None = None,
    reference_cache: str | os.PathLike | bool | None = True,
) -> tuple[dict, dict]:
    """Fit ``model`` to ``dataset`` with each method (same data, same seed) and analyse.

    Args:
        model: a network (``bnnpp.models``) whose likelihood matches the dataset's task.
        dataset: a :class:`~bnnpp.data.Dataset` with a test split (classification or
            regression).
        methods: registered method names.
        seed: the seed of every fit.
        options: method → options, on top of :func:`base_options`.
        quick: each method's smoke settings (``Method.smoke``), for smoke tests.
        num_ref: test inputs whose predictive probabilities enter the R-hat/ESS check.
        reference: a method (normally ``"nuts"``) fitted once more with long chains
            (for nuts :data:`REFERENCE_OPTIONS`, updated by ``reference_options``) as the exact
            posterior; every method's predictive agreement with it on the test inputs is
            added to its row (:func:`bnnpp.diagnostics.reference`): ``ref_agreement`` and
            ``ref_total_variation`` (classification) or ``ref_w2``, ``ref_sd_ratio`` and
            ``ref_epistemic_sd_ratio`` (regression); ``results["reference"]`` holds the
            reference's R-hat check, options and seconds, ``cache_file`` and ``from_cache``.
        reference_cache: where the reference fit is cached (:func:`bnnpp.references.reference_posterior`):
            ``True`` (default) ``$BNNPP_CACHE_DIR/references`` or ``~/.cache/bnnpp/references``,
            a folder, or ``False`` (always fit, write nothing). A second comparison with the
            same model, data, reference options and seed loads the reference instead of refitting.

    Returns:
        ``(results, posteriors)``: ``results`` the dict of a :class:`~bnnpp.records.CompareResult`
        (``compare.json``'s entries); ``results["methods"][m]`` holds the test scores
        (classification: ``accuracy``, ``nll``, ``brier``, ``ece``, ``mean_entropy``,
        ``mean_mutual_information``; regression: ``rmse``, ``nll``, ``coverage_95``,
        ``mean_sd``, ``mean_epistemic_sd``, in the targets' original units when the dataset
        standardised them, ``y_scale``), ``max_r_hat``, ``min_ess_bulk``, ``divergences``, ``psis_khat``
        (+ ``psis_reading``), ``elbo_converged``, ``loo_elpd``, ``loo_se``, ``seconds`` and ``options``; ``results["ranking"]`` is
        ArviZ's LOO comparison of the methods with several draws (a list of rows; a row's
        ``unreliable`` is True when some of its Pareto k̂ exceed 0.7, counted in
        ``khat_above_0.7``: the ranking is then unreliable, and a
        :class:`~bnnpp.diagnostics.UnreliableComparisonWarning` says so).
        ``posteriors`` maps method → :class:`~bnnpp.Posterior`.
    """
    methods = check_methods(methods)
    task = getattr(model, "task", dataset.task)
    if task != dataset.task:
        raise ValueError(
            f"the model is a {task} network but {dataset.name!r} is a {dataset.task} dataset: build the model with a matching likelihood"
        )
    base = base_options(methods, quick)
    per_method = {m: {**base[m], **((options or {}).get(m, {}))} for m in methods}
    for m in methods:  # every option checked before the first fit compiles
        get_method(m).check_options(per_method[m])
    if reference is not None:
        check_methods([reference])
        long_chains = REFERENCE_OPTIONS["quick" if quick else "full"] if reference == "nuts" else {}
        reference_options = {**long_chains, **(reference_options or {})}
        get_method(reference).check_options(reference_options)
    x_ref = np.asarray(dataset.x_test[:num_ref], np.float32)
    results = CompareResult(methods={}, ranking=[], seed=seed, data=dataset.name, task=dataset.task)
    posteriors: dict = {}
    ref_post = ref_check = None
    if reference is not None:
        ref_post, cached = reference_posterior(
            model, dataset, reference, reference_options, seed=seed, cache=reference_cache, progress=progress
        )
        ref_check = diagnostics.reference_check(ref_post, dataset.x_test, num_ref)
        results.reference = {**ref_check, "options": reference_options, **cached}
    for m in methods:
        t0 = time.perf_counter()
        post = fit(model, dataset, method=m, seed=seed, progress=progress, **per_method[m])
        seconds = time.perf_counter() - t0
        posteriors[m] = post
        row = _method_row(post, dataset, ref_post, ref_check, x_ref, seed)
        row["seconds"] = seconds
        row["options"] = {k: v for k, v in post.stats.options.items() if k not in UNRECORDED_OPTIONS}
        results.methods[m] = row
    results.ranking = _ranking(methods, posteriors)
    return results.to_json(), posteriors


def _method_row(post, dataset, ref_post, ref_check, x_ref: np.ndarray, seed: int) -> dict:
    """One method's row of :func:`compare_methods`: its test scores, agreement with the
    reference posterior (when there is one), R-hat / ESS / divergences, PSIS k̂ and ELBO
    convergence (mean-field Gaussians) and PSIS-LOO (several draws)."""
    pred = post.predict(dataset.x_test)
    row = pred.scores(dataset.y_test)
    if dataset.task == "regression":  # a user's file standardised its targets: scores in their units
        row = _in_target_units(row, float(dataset.y_scale))
    if ref_post is not None:
        with warnings.catch_warnings():  # the reference's R-hat is reported once, in results["reference"]
            warnings.simplefilter("ignore", UserWarning)
            agreement = diagnostics.reference(post, ref_post, dataset.x_test, check=ref_check)
        keys = ("agreement", "total_variation") if dataset.task == "classification" else ("w2", "sd_ratio", "epistemic_sd_ratio")
        row.update({f"ref_{k}": agreement[k] for k in keys})
    s = diagnostics.summary(post, x_ref=x_ref)
    row.update({"max_r_hat": s["max_r_hat"], "min_ess_bulk": s["min_ess_bulk"], "divergences": s["divergences"]})
    row["psis_khat"] = row["psis_reading"] = row["elbo_converged"] = None
    if isinstance(post.approximation, MeanFieldGaussian):
        k = diagnostics.psis_khat(post, num_draws=1000, seed=seed)
        row["psis_khat"], row["psis_reading"] = k["khat"], k["reading"]
        row["elbo_converged"] = diagnostics.elbo_convergence(post)["converged"]
    row["loo_elpd"] = row["loo_se"] = None
    if post.num_chains * post.num_draws > 1:
        with warnings.catch_warnings():  # ArviZ warns on high Pareto k; the k̂ is in the row
            warnings.simplefilter("ignore")
            loo = diagnostics.loo(post)
        row["loo_elpd"], row["loo_se"] = loo["elpd"], loo["se"]
        row["loo_max_khat"] = loo["max_khat"]
    return row


def _ranking(methods: Sequence[str], posteriors: dict) -> list[dict]:
    """ArviZ's LOO comparison of the methods with several draws, one dict per method (empty
    with fewer than two); warns once when Pareto k̂ make it unreliable."""
    rows: list[dict] = []
    ranked = [m for m in methods if posteriors[m].num_chains * posteriors[m].num_draws > 1]
    if len(ranked) >= 2:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = diagnostics.compare({m: posteriors[m] for m in ranked})
        unreliable = [f"{name} ({int(r['khat_above_0.7'])})" for name, r in table.iterrows() if r["unreliable"]]
        if unreliable:  # said once, here, where the ArviZ warnings above were silenced
            warnings.warn(
                f"compare: the LOO ranking is unreliable: Pareto k̂ > 0.7 for some observations of {', '.join(unreliable)}; "
                "compare those methods on the test scores instead",
                diagnostics.UnreliableComparisonWarning,
                stacklevel=3,
            )
        for name, r in table.iterrows():
            rows.append(
                {
                    "method": str(name),
                    "rank": int(r["rank"]),
                    "elpd_loo": float(r["elpd_loo"]),
                    "elpd_diff": float(r["elpd_diff"]),
                    "dse": float(r["dse"]),
                    "weight": float(r["weight"]),
                    "p_loo": float(r["p_loo"]),
                    "khat_above_0.7": int(r["khat_above_0.7"]),
                    "unreliable": bool(r["unreliable"]),
                }
            )
    return rows


def _in_target_units(row: dict, scale: float) -> dict:
    """Regression scores of standardised targets in the targets' original units: RMSE and sds
    times ``scale``, the NLL (a log-density) plus ``log scale``; coverage is unchanged."""
    if scale == 1.0:
        return row
    out = dict(row)
    for key in ("rmse", "mean_sd", "mean_epistemic_sd"):
        out[key] = row[key] * scale
    out["nll"] = row["nll"] + float(np.log(scale))
    return out


markdown = compare_markdown
"""``compare.md``: the metrics table and the LOO ranking (see :func:`bnnpp.reports.compare_markdown`)."""
