"""Matplotlib figures of posterior-predictive uncertainty. Every function returns a Figure.

Figures are built with ``matplotlib.figure.Figure`` rather than pyplot: nothing touches the
global backend or figure registry, so they work headless and leak nothing in loops. In a
notebook, display one by leaving it as the cell's value; save with ``fig.savefig(path)``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from matplotlib.figure import Figure

__all__ = ["decision_map", "ood_histograms", "regression_bands"]


def decision_map(
    predict: Callable[[np.ndarray], object],
    x: np.ndarray,
    y: np.ndarray,
    *,
    resolution: int = 100,
    margin: float = 0.5,
    title: str = "",
):
    """Two panels over a grid covering ``x`` (2-D inputs): the posterior-predictive
    probability of class 1 and its standard deviation over posterior draws, with the points
    ``(x, y)`` on top (the seed study's uncertainty picture).

    Args:
        predict: ``predict(grid) -> Prediction`` with ``probs`` ``(S, m, C)``, e.g.
            ``posterior.predict``.
        x: ``(n, 2)`` points to show; y: ``(n,)`` their labels.
        resolution: grid points per axis.
    Returns:
        A matplotlib Figure with two axes.
    """
    if x.ndim != 2 or x.shape[1] != 2:
        raise ValueError(f"decision_map needs 2-D inputs (n, 2), got shape {x.shape}")
    lo, hi = x.min(0) - margin, x.max(0) + margin
    g0, g1 = np.meshgrid(np.linspace(lo[0], hi[0], resolution), np.linspace(lo[1], hi[1], resolution))
    grid = np.c_[g0.ravel(), g1.ravel()].astype(np.float32)
    pred = predict(grid)
    p1 = pred.probs[..., 1]
    panels = [(p1.mean(0), "predictive p(class 1)", "RdBu_r", (0, 1)), (p1.std(0), "sd of p(class 1) over draws", "viridis", None)]
    fig = Figure(figsize=(10, 4.2), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, (z, label, cmap, lim) in zip(axes, panels):
        kw = {"vmin": lim[0], "vmax": lim[1]} if lim else {}
        cs = ax.contourf(g0, g1, z.reshape(g0.shape), levels=20, cmap=cmap, **kw)
        fig.colorbar(cs, ax=ax, label=label)
        ax.scatter(x[y == 0, 0], x[y == 0, 1], s=8, c="tab:blue", edgecolors="k", linewidths=0.3, label="class 0")
        ax.scatter(x[y == 1, 0], x[y == 1, 1], s=8, c="tab:red", edgecolors="k", linewidths=0.3, label="class 1")
        ax.set_xlabel("x₁")
        ax.set_ylabel("x₂")
        ax.set_title(label)
    axes[0].legend(loc="lower left", fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def regression_bands(prediction, x_grid: np.ndarray, x: np.ndarray, y: np.ndarray, *, title: str = ""):
    """The predictive mean with ±2σ epistemic and ±2σ total bands over ``x_grid`` ``(m, 1)``,
    with the training points ``(x, y)``.

    Args:
        prediction: a regression ``Prediction`` at ``x_grid``.
    Returns:
        A matplotlib Figure.
    """
    xg = np.asarray(x_grid)[:, 0]
    order = np.argsort(xg)
    xg = xg[order]
    mean = prediction.mean[order]
    epi, tot = prediction.epistemic_std[order], prediction.std[order]
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.subplots()
    ax.fill_between(xg, mean - 2 * tot, mean + 2 * tot, color="tab:orange", alpha=0.25, label="±2σ total")
    ax.fill_between(xg, mean - 2 * epi, mean + 2 * epi, color="tab:blue", alpha=0.35, label="±2σ epistemic")
    ax.plot(xg, mean, color="tab:blue", lw=1.5, label="predictive mean")
    ax.scatter(np.asarray(x)[:, 0], y, s=12, c="k", zorder=3, label="training data")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.legend(loc="upper right", fontsize=8)
    if title:
        ax.set_title(title)
    return fig


def ood_histograms(
    scores_in: dict[str, np.ndarray],
    scores_out: dict[str, dict[str, np.ndarray]],
    *,
    tau: float | None = None,
    in_label: str = "test set",
    bins: int = 40,
):
    """One panel per uncertainty score with its histogram (as a density) on the test set and
    on each out-of-distribution set: how well the score separates them.

    Args:
        scores_in: score name → ``(n,)`` values on the in-distribution test set, e.g.
            ``{"entropy": ..., "mutual information": ..., "max probability": ...}``.
        scores_out: OOD set name → the same score names → ``(m,)`` values.
        tau: if given, a dashed line at τ on the ``"max probability"`` panel (inputs left of
            it are rejected).
    Returns:
        A matplotlib Figure with one axis per score.
    """
    names = list(scores_in)
    if not names:
        raise ValueError("scores_in is empty: pass at least one score, e.g. {'entropy': values}")
    for ood_name, d in scores_out.items():
        missing = [k for k in names if k not in d]
        if missing:
            raise ValueError(f"OOD set {ood_name!r} lacks the score(s) {', '.join(missing)}")
    fig = Figure(figsize=(4.2 * len(names), 3.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(names)))
    for ax, name in zip(axes, names):
        groups = {in_label: np.asarray(scores_in[name], float)} | {k: np.asarray(v[name], float) for k, v in scores_out.items()}
        lo = min(float(v.min()) for v in groups.values())
        hi = max(float(v.max()) for v in groups.values())
        edges = np.linspace(lo, hi if hi > lo else lo + 1e-9, bins + 1)
        for label, values in groups.items():
            ax.hist(values, bins=edges, density=True, histtype="step", lw=1.5, label=f"{label} ({len(values)})")
        if tau is not None and name == "max probability":
            ax.axvline(tau, color="k", ls="--", lw=1, label=f"τ = {tau:g}")
        ax.set_xlabel(name)
        ax.set_ylabel("density")
    axes[0].legend(fontsize=8)
    return fig
