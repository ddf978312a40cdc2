"""A grid of weight priors × scale hyperpriors, fitted on the same data (the priors experiment of Zharikov, Isachenko & Bochkarev:
normal / laplace / cauchy / flat × fixed / half-normal / half-cauchy / inverse-gamma on
moons and circles).

Configurations that share structure — the same prior family and hyperprior family, with
different numbers (a fixed scale on a log grid, hyperprior parameters) or different seeds —
are trained together: their numbers and seeds become arrays, and one ``jax.vmap``-ed program
runs init, every optimisation step (``lax.scan``), posterior sampling and test prediction for
the whole group, compiled once. Fitting the same configurations one by one with
:func:`bnnpp.fit` gives the same numbers (``tests/test_sweep.py``), only slower: each fit
compiles its own programs.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from bnnpp import metrics, models, priors
from bnnpp.data import Dataset
from bnnpp.inference import fit
from bnnpp.inference.checks import check_data
from bnnpp.inference.registry import get_method
from bnnpp.inference.runner import guarded_trace_fit
from bnnpp.introspection import observation

__all__ = ["Config", "grid", "summarise", "sweep"]

HYPERPRIOR_CHOICES = ("fixed", "half-normal", "half-cauchy", "inverse-gamma")
PRIOR_CHOICES = ("normal", "laplace", "cauchy", "flat", "student-t", "scale-mixture")


@dataclass(frozen=True)
class Config:
    """One cell of the grid: a label, a weight prior and the cell's group.

    Attributes:
        prior: the :class:`bnnpp.priors.Prior` of every layer.
        weight_prior: CLI name of the family (``normal``, ``laplace``, …).
        hyperprior: ``fixed`` or the hyperprior's CLI name.
        scale: the fixed scale (``fixed`` cells; ``None`` otherwise and for ``flat``).
    """

    prior: priors.Prior
    weight_prior: str
    hyperprior: str
    scale: float | None = None

    @property
    def label(self) -> str:
        """e.g. ``normal/inverse-gamma`` or ``laplace/fixed(0.3)``."""
        s = f"({self.scale:g})" if self.scale is not None else ""
        return f"{self.weight_prior}/{self.hyperprior}{s}"


def grid(
    weight_priors: Sequence[str] = ("normal", "laplace", "cauchy", "flat"),
    hyperpriors: Sequence[str] = HYPERPRIOR_CHOICES,
    fixed_scales: Sequence[float] = (0.1, 0.3, 1.0, 3.0, 10.0),
    *,
    per: str = "layer",
) -> list[Config]:
    """The configurations of a weight-prior × hyperprior grid.

    ``fixed`` expands into one configuration per entry of ``fixed_scales`` (Zharikov, Isachenko &
    Bochkarev tuned the fixed scale on a logarithmic grid); hyperpriors use their default parameters
    (half-normal(1), half-cauchy(1), inverse-gamma(1, 1) on the variance). ``flat`` has no
    scale: it appears once, with ``fixed``, and is skipped with a hyperprior.

    Returns:
        A list of :class:`Config`; ValueError when it would be empty.
    """
    for name in weight_priors:
        if name.replace("_", "-") not in PRIOR_CHOICES:
            raise ValueError(f"unknown weight prior {name!r}; choose from {', '.join(PRIOR_CHOICES)}")
    for name in hyperpriors:
        if name.replace("_", "-") not in HYPERPRIOR_CHOICES:
            raise ValueError(f"unknown hyperprior {name!r}; choose from {', '.join(HYPERPRIOR_CHOICES)}")
    if "fixed" in hyperpriors:
        for s in fixed_scales:
            if not (isinstance(s, (int, float)) and math.isfinite(s) and s > 0):
                raise ValueError(f"fixed scales must be positive numbers, got {s!r}")
        if not fixed_scales:
            raise ValueError("hyperprior 'fixed' needs at least one fixed scale, e.g. fixed_scales=(0.3, 1, 3)")
    out: list[Config] = []
    for wp, hp in itertools.product(weight_priors, hyperpriors):
        wp, hp = wp.replace("_", "-"), hp.replace("_", "-")
        if wp == "flat":
            if hp == "fixed":
                out.append(Config(priors.flat(), wp, hp))
            continue
        if hp == "fixed":
            out += [Config(priors.prior(wp, float(s), per=per), wp, hp, float(s)) for s in fixed_scales]
        else:
            out.append(Config(priors.prior(wp, priors.hyperprior(hp), per=per), wp, hp))
    if not out:
        raise ValueError(
            "the grid is empty: give at least one weight prior and one hyperprior "
            "(flat takes only 'fixed'), e.g. weight_priors=('normal',), hyperpriors=('fixed',)"
        )
    return out


# --------------------------------------------------------------------------------------
# A prior's numbers as an array, so that a group of configurations can be vmapped
# --------------------------------------------------------------------------------------


def _structure(p: priors.Prior) -> tuple:
    hp = p.scale if p.hierarchical else None
    return (p.kind, p.per, None if hp is None else (hp.kind, hp.param), p.kind == "flat", len(p.params))


def _numbers(p: priors.Prior) -> np.ndarray:
    """The prior's numeric parameters: fixed scale or hyperprior parameters, then family params."""
    if p.kind == "flat":
        head: tuple = ()
    elif p.hierarchical:
        head = tuple(p.scale.params)
    else:
        head = (p.scale,)
    return np.asarray(head + tuple(p.params), np.float32)


def _with_numbers(template: priors.Prior, nums) -> priors.Prior:
    """``template`` with its numbers replaced by ``nums`` (possibly traced). Bypasses the
    constructors' checks, which need concrete floats: the numbers came from valid priors."""
    if template.kind == "flat":
        return template
    if template.hierarchical:
        k = len(template.scale.params)
        scale = priors.Hyperprior(template.scale.kind, tuple(nums[i] for i in range(k)), template.scale.param)
    else:
        k = 1
        scale = nums[0]
    new = object.__new__(priors.Prior)
    for name, value in (
        ("kind", template.kind),
        ("scale", scale),
        ("per", template.per),
        ("params", tuple(nums[k + i] for i in range(len(template.params)))),
    ):
        object.__setattr__(new, name, value)
    return new


# --------------------------------------------------------------------------------------
# The sweep
# --------------------------------------------------------------------------------------


def _model(dataset: Dataset, prior, hidden, activation, model_fn=None):
    if model_fn is not None:  # the user's network for a prior (see sweep)
        return model_fn(prior)
    return models.mlp(hidden, activation=activation, likelihood="categorical", num_classes=dataset.num_classes, prior=prior)


def _test_scores(mean_probs: np.ndarray, y: np.ndarray) -> dict:
    return {"accuracy": metrics.accuracy(mean_probs, y), "nll": metrics.nll(mean_probs, y)}


def _vmapped_group(method, dataset, template, numbers, seeds, hidden, activation, options, model_fn=None):
    """Fit every (numbers[i], seeds[i]) of one structure group in one compiled program: the
    method's algorithm traced whole by :func:`bnnpp.inference.runner.guarded_trace_fit` and
    ``vmap``-ed: a fit stops at its first non-finite step and keeps the state before it, as
    :func:`bnnpp.fit` (the ``vmap=False`` path) does.

    Returns:
        Mean test probabilities ``(B, n_test, C)``, the last step's losses ``(B,)`` and the
        step each fit stopped at ``(B,)`` (-1: it ran to the end).
    """
    x, y = check_data(dataset, _model(dataset, template, hidden, activation, model_fn))
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    x_test = jnp.asarray(dataset.x_test, jnp.float32)

    def one(nums, seed):
        model = _model(dataset, _with_numbers(template, nums), hidden, activation, model_fn)
        draws, info, stopped_at = guarded_trace_fit(method.build(model, x, y, options), jax.random.PRNGKey(seed), xj, yj)
        s = next(iter(draws.values())).shape[0]
        keys = jax.random.split(jax.random.PRNGKey(0), s)  # as Posterior.predict(x, seed=0)
        probs = jax.vmap(lambda d, k: observation(model, d, k, x_test, None)["probs"])(draws, keys)
        return probs.mean(0), info.loss, stopped_at

    return jax.jit(jax.vmap(one))(jnp.asarray(numbers), jnp.asarray(seeds, jnp.int32))


def sweep(
    datasets: Sequence[Dataset],
    configs: Sequence[Config],
    *,
    method: str = "advi",
    seeds: Sequence[int] = (0, 1, 2),
    hidden: Sequence[int] = (5, 5),
    activation: str = "tanh",
    vmap: bool = True,
    progress: bool = True,
    model_fn=None,
    **options,
) -> dict:
    """Fit every configuration with every seed on every dataset; score on the test split.

    Args:
        datasets: classification :class:`~bnnpp.data.Dataset` s (e.g. moons and circles).
        configs: from :func:`grid`.
        method: a registered method (every one is an algorithm the runner drives, so
            ``vmap=True`` takes any).
        seeds: inference seeds (the data stay fixed).
        hidden, activation: the MLP (default the 2-5-5-2 tanh net of Zharikov, Isachenko & Bochkarev).
        vmap: train each structure group in one vmapped program (``False``: one
            :func:`bnnpp.fit` per configuration and seed, the reference loop).
        progress: a bar over groups (vmap) or fits (loop).
        model_fn: prior → model, to sweep another network than the MLP (``hidden`` and
            ``activation`` are then unused), e.g. ``lambda p: models.from_flax(Net(), num_classes=2, prior=p)``.
        **options: the method's options (e.g. ``num_steps``, ``num_samples``), the same for
            every fit.

    Returns:
        ``{"runs": [...], "seconds": float, "compiled_groups": int}``; each run is a dict with
        ``data``, ``label``, ``weight_prior``, ``hyperprior``, ``scale``, ``seed``,
        ``accuracy`` and ``nll`` (test set, from the posterior-predictive mean probability) and
        ``stopped_at`` (the step at which the fit met a non-finite loss and stopped, else ``None``).
    """
    if not configs:
        raise ValueError("the sweep grid is empty: pass at least one configuration (see bnnpp.sweep.grid)")
    if not datasets:
        raise ValueError("pass at least one dataset, e.g. [bnnpp.data.moons()]")
    seeds = [int(s) for s in seeds]
    if not seeds or any(not 0 <= s < 2**32 for s in seeds):
        raise ValueError(f"seeds must be a non-empty list of integers ≥ 0 and < 2**32, got {seeds!r}")
    for d in datasets:
        if d.task != "classification":
            raise ValueError(
                f"sweep scores classifiers; dataset {d.name!r} is {d.task}: compare priors on it with "
                "bnnpp compare --prior ... or fit each with bnnpp fit"
            )
    chosen = get_method(method)
    parsed = chosen.parse(options)
    for d in datasets:
        x, y = check_data(d, _model(d, configs[0].prior, hidden, activation, model_fn))
        parsed.check_data(x, y)
    runs: list[dict] = []
    t0 = time.perf_counter()
    groups: dict[tuple, list[Config]] = {}
    for c in configs:
        groups.setdefault(_structure(c.prior), []).append(c)
    if vmap:
        work = [(d, g) for d in datasets for g in groups.values()]
        for d, group in tqdm(work, desc=f"sweep ({method}, vmapped groups)", disable=not progress, leave=False):
            cells = [(c, s) for c in group for s in seeds]
            numbers = (
                np.stack([_numbers(c.prior) for c, _ in cells]) if _numbers(group[0].prior).size else np.zeros((len(cells), 0), np.float32)
            )
            probs, _, stops = jax.device_get(
                _vmapped_group(chosen, d, group[0].prior, numbers, [s for _, s in cells], hidden, activation, parsed, model_fn)
            )
            for (c, s), p, stop in zip(cells, np.asarray(probs), np.asarray(stops), strict=True):
                runs.append(_row(d, c, s, _test_scores(p, d.y_test), None if stop < 0 else int(stop)))
        stopped = [r for r in runs if r["stopped_at"] is not None]
        if stopped:  # the vmap=False path warns per fit (bnnpp.fit)
            warnings.warn(
                f"{method}: {len(stopped)} of {len(runs)} sweep fits met a NaN/inf loss and stopped there, keeping the "
                f"state before it (e.g. {stopped[0]['label']}, seed {stopped[0]['seed']}, at step {stopped[0]['stopped_at']}; "
                "each run's 'stopped_at'). Lower the learning rate or use a tighter prior.",
                RuntimeWarning,
                stacklevel=2,
            )
    else:
        work = [(d, c, s) for d in datasets for c in configs for s in seeds]
        for d, c, s in tqdm(work, desc=f"sweep ({method}, one by one)", disable=not progress, leave=False):
            post = fit(_model(d, c.prior, hidden, activation, model_fn), d, method=method, seed=s, progress=False, **options)
            runs.append(_row(d, c, s, _test_scores(post.predict(d.x_test).mean, d.y_test), post.stats.stopped_at))
    return {"runs": runs, "seconds": time.perf_counter() - t0, "compiled_groups": len(groups) * len(datasets) if vmap else len(runs)}


def _row(d: Dataset, c: Config, seed: int, scores: dict, stopped_at: int | None) -> dict:
    return {
        "data": d.name,
        "label": c.label,
        "weight_prior": c.weight_prior,
        "hyperprior": c.hyperprior,
        "scale": c.scale,
        "seed": seed,
        **scores,
        "stopped_at": stopped_at,
    }


def summarise(runs: list[dict]) -> list[dict]:
    """Mean ± sd over seeds per (data, weight prior, hyperprior); for ``fixed`` the best
    scale of the grid by mean test accuracy (as Zharikov, Isachenko & Bochkarev tuned it), with the scale.

    Returns:
        Rows ``{"data", "weight_prior", "hyperprior", "scale", "accuracy_mean",
        "accuracy_sd", "nll_mean", "nll_sd", "seeds"}``.
    """
    cells: dict[tuple, list[dict]] = {}
    for r in runs:
        cells.setdefault((r["data"], r["weight_prior"], r["hyperprior"], r["scale"]), []).append(r)
    stats = []
    for (data, wp, hp, scale), rs in cells.items():
        acc = np.array([r["accuracy"] for r in rs])
        nll = np.array([r["nll"] for r in rs])
        stats.append(
            {
                "data": data,
                "weight_prior": wp,
                "hyperprior": hp,
                "scale": scale,
                "accuracy_mean": float(acc.mean()),
                "accuracy_sd": float(acc.std(ddof=1)) if acc.size > 1 else 0.0,
                "nll_mean": float(nll.mean()),
                "nll_sd": float(nll.std(ddof=1)) if nll.size > 1 else 0.0,
                "seeds": len(rs),
            }
        )
    best: dict[tuple, dict] = {}
    for row in stats:
        key = (row["data"], row["weight_prior"], row["hyperprior"])
        if key not in best or row["accuracy_mean"] > best[key]["accuracy_mean"]:
            best[key] = row
    return list(best.values())
