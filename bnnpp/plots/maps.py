"""Decision maps of 2-D classifiers and predictive bands of 1-D regressions."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from matplotlib.figure import Figure

CLASS_COLOURS = (
    "tab:blue",
    "tab:red",
    "tab:green",
    "tab:orange",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "tab:gray",
)
"""The colour of each class in the 2-D classification figures (cycled past ten classes)."""


def _class_names(num_classes: int, class_names) -> list[str]:
    if class_names is None:
        return [f"class {c}" for c in range(num_classes)]
    if len(class_names) != num_classes:
        raise ValueError(f"got {len(class_names)} class names for {num_classes} classes: pass one per class or None")
    return [str(c) for c in class_names]


def _grid(x: np.ndarray, resolution: int, margin: float):
    lo, hi = x.min(0) - margin, x.max(0) + margin
    g0, g1 = np.meshgrid(np.linspace(lo[0], hi[0], resolution), np.linspace(lo[1], hi[1], resolution))
    return g0, g1, np.c_[g0.ravel(), g1.ravel()].astype(np.float32)


def _class_panels(probs: np.ndarray, names: list[str], short: bool = False) -> list[tuple]:
    """The two panels of a 2-D classification map from per-draw grid probabilities ``(S, m, C)``:
    ``(values, label, cmap, limits)``. Two classes: the predictive probability of the second
    and its sd over draws; more: the mean probabilities mixed as colours (``values`` an RGB
    image ``(m, 3)``, cmap ``None``) and the mutual information between label and weights."""
    from bnnpp import metrics

    if probs.shape[-1] == 2:
        p1 = probs[..., 1]
        return [
            (p1.mean(0), f"p({names[1]})" if short else f"predictive p({names[1]})", "RdBu_r", (0.0, 1.0)),
            (p1.std(0), "sd over draws" if short else f"sd of p({names[1]}) over draws", "viridis", (0.0, 0.5)),
        ]
    colours = np.array([_rgb(CLASS_COLOURS[c % len(CLASS_COLOURS)]) for c in range(probs.shape[-1])])
    mixed = probs.mean(0) @ colours  # each grid point: the classes' colours weighted by their probabilities
    mi = metrics.mutual_information(probs)
    return [
        (mixed, "class probabilities (mixed colours)" if short else "predicted class (colours mixed by probability)", None, None),
        (mi, "mutual information" if short else "mutual information (epistemic, nats)", "viridis", None),
    ]


def _rgb(colour: str) -> np.ndarray:
    from matplotlib.colors import to_rgb

    return np.array(to_rgb(colour))


def _draw_panel(fig, ax, g0, g1, panel, *, levels: int | None = None) -> None:
    z, label, cmap, lim = panel
    if cmap is None:  # an RGB image of mixed class colours
        ax.imshow(z.reshape(*g0.shape, 3), origin="lower", extent=(g0.min(), g0.max(), g1.min(), g1.max()), aspect="auto")
        return
    kw = {"levels": np.linspace(*lim, 21), "extend": "max"} if lim else {"levels": levels or 20}
    cs = ax.contourf(g0, g1, z.reshape(g0.shape), cmap=cmap, **kw)
    fig.colorbar(cs, ax=ax, label=label)


def _draw_points(ax, x, y, names, *, size=8, lw=0.3) -> None:
    """Every class's points in its colour, labelled with its name."""
    binary = len(names) == 2
    for c, name in enumerate(names):
        colour = ("tab:blue", "tab:red")[c] if binary else CLASS_COLOURS[c % len(CLASS_COLOURS)]
        ax.scatter(x[y == c, 0], x[y == c, 1], s=size, c=colour, edgecolors="k", linewidths=lw, label=name)


def decision_map(
    predict: Callable[[np.ndarray], object],
    x: np.ndarray,
    y: np.ndarray,
    *,
    resolution: int = 100,
    margin: float = 0.5,
    title: str = "",
    class_names=None,
):
    """Two panels over a grid covering ``x`` (2-D inputs), with the points ``(x, y)`` on top,
    every class in its colour and with its name (the uncertainty picture of Zharikov, Isachenko
    & Bochkarev). Two classes: the posterior-predictive probability of the second class and its
    standard deviation over posterior draws. ``C > 2`` classes: the predictive class
    probabilities shown as a mix of the classes' colours, and the mutual information between
    label and weights (the epistemic part of the uncertainty; Depeweg et al. 2018).

    Args:
        predict: ``predict(grid) -> Prediction`` with ``probs`` ``(S, m, C)``, e.g.
            ``posterior.predict``.
        x: ``(n, 2)`` points to show; y: ``(n,)`` their class indices ``0..C-1``.
        resolution: grid points per axis.
        class_names: ``C`` names for the legend and titles (default ``class 0``, ``class 1``, ...).
    Returns:
        A matplotlib Figure with two axes.
    """
    if x.ndim != 2 or x.shape[1] != 2:
        raise ValueError(f"decision_map needs 2-D inputs (n, 2), got shape {x.shape}")
    g0, g1, grid = _grid(x, resolution, margin)
    probs = np.asarray(predict(grid).probs)
    names = _class_names(probs.shape[-1], class_names)
    # fixed margins, not layout="constrained": its layout pass costs as much as drawing the
    # panels, and two panels need no solver
    fig = Figure(figsize=(10, 4.2))
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.12, top=0.84 if title else 0.9, wspace=0.25)
    axes = fig.subplots(1, 2)
    for ax, panel in zip(axes, _class_panels(probs, names), strict=False):
        _draw_panel(fig, ax, g0, g1, panel)
        _draw_points(ax, x, y, names)
        ax.set_xlabel("x₁")
        ax.set_ylabel("x₂")
        ax.set_title(panel[1])
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


def decision_maps(predicts: dict, x: np.ndarray, y: np.ndarray, *, resolution: int = 80, margin: float = 0.5, class_names=None):
    """One row per fit of :func:`decision_map`'s two panels on a grid covering the 2-D inputs
    ``x``, with ``(x, y)`` on top — methods side by side on the same grid. Two classes: the
    probability of the second class and its sd over draws; more: the class probabilities as
    mixed colours and the mutual information.

    Args:
        predicts: name → ``predict(grid) -> Prediction`` (e.g. ``posterior.predict``).
        x: ``(n, 2)`` points; y: ``(n,)`` class indices.
        class_names: ``C`` names (default ``class 0``, ...).
    Returns:
        A Figure with ``len(predicts)`` rows and two columns.
    """
    if x.ndim != 2 or x.shape[1] != 2:
        raise ValueError(f"decision_maps needs 2-D inputs (n, 2), got shape {x.shape}")
    if not predicts:
        raise ValueError("decision_maps needs at least one fit")
    g0, g1, grid = _grid(x, resolution, margin)
    fig = Figure(figsize=(9, 3.2 * len(predicts)), layout="constrained")
    axes = fig.subplots(len(predicts), 2, squeeze=False)
    names = None
    for row, (name, predict) in zip(axes, predicts.items(), strict=True):
        probs = np.asarray(predict(grid).probs)
        names = _class_names(probs.shape[-1], class_names)
        for ax, panel in zip(row, _class_panels(probs, names, short=True), strict=True):
            _draw_panel(fig, ax, g0, g1, panel)
            _draw_points(ax, x, y, names, size=5, lw=0.2)
            ax.set_title(f"{name}: {panel[1]}", fontsize=10)
            ax.set_xticks([])
            ax.set_yticks([])
    axes[0, 0].legend(loc="lower left", fontsize=7)
    return fig


def regression_bands_grid(predictions: dict, x_grid: np.ndarray, x: np.ndarray, y: np.ndarray):
    """:func:`regression_bands` for several fits side by side on one y-axis range.

    Args:
        predictions: name → regression ``Prediction`` at ``x_grid`` ``(m, 1)``.
        x, y: the training points ``(n, 1)``, ``(n,)``.
    Returns:
        A Figure with one panel per fit.
    """
    if not predictions:
        raise ValueError("regression_bands_grid needs at least one fit")
    xg = np.asarray(x_grid)[:, 0]
    order = np.argsort(xg)
    fig = Figure(figsize=(4.0 * len(predictions), 3.6), layout="constrained")
    axes = fig.subplots(1, len(predictions), squeeze=False, sharey=True)[0]
    span = float(np.ptp(y)) or 1.0
    for ax, (name, p) in zip(axes, predictions.items(), strict=True):
        mean, epi, tot = p.mean[order], p.epistemic_std[order], p.std[order]
        ax.fill_between(xg[order], mean - 2 * tot, mean + 2 * tot, color="tab:orange", alpha=0.25, label="±2σ total")
        ax.fill_between(xg[order], mean - 2 * epi, mean + 2 * epi, color="tab:blue", alpha=0.35, label="±2σ epistemic")
        ax.plot(xg[order], mean, color="tab:blue", lw=1.2, label="mean")
        ax.scatter(np.asarray(x)[:, 0], y, s=8, c="k", zorder=3)
        ax.set_ylim(float(np.min(y)) - 1.5 * span, float(np.max(y)) + 1.5 * span)
        ax.set_title(name, fontsize=10)
    axes[0].legend(fontsize=7, loc="lower left")
    return fig
