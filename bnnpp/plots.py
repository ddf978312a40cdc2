"""Matplotlib figures of posterior-predictive uncertainty. Every function returns a Figure.

Figures are built with ``matplotlib.figure.Figure`` rather than pyplot: nothing touches the
global backend or figure registry, so they work headless and leak nothing in loops. In a
notebook, display one by leaving it as the cell's value; save with ``fig.savefig(path)``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from matplotlib.figure import Figure

__all__ = [
    "CLASS_COLOURS",
    "calibration_curve",
    "decision_map",
    "decision_maps",
    "image_grid",
    "ood_histograms",
    "predicted_vs_observed",
    "reference_agreement",
    "regression_bands",
    "regression_bands_grid",
    "regression_diagnostics",
    "reliability_diagram",
    "residuals_by_feature",
    "snr_histogram",
    "top_features",
    "uncertainty_histograms",
    "weight_histograms",
]


CLASS_COLOURS = ("tab:blue", "tab:red", "tab:green", "tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
                 "tab:cyan", "tab:gray")
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
        return [(p1.mean(0), f"p({names[1]})" if short else f"predictive p({names[1]})", "RdBu_r", (0.0, 1.0)),
                (p1.std(0), "sd over draws" if short else f"sd of p({names[1]}) over draws", "viridis", (0.0, 0.5))]
    colours = np.array([_rgb(CLASS_COLOURS[c % len(CLASS_COLOURS)]) for c in range(probs.shape[-1])])
    mixed = probs.mean(0) @ colours  # each grid point: the classes' colours weighted by their probabilities
    mi = metrics.mutual_information(probs)
    return [(mixed, "class probabilities (mixed colours)" if short else "predicted class (colours mixed by probability)", None, None),
            (mi, "mutual information" if short else "mutual information (epistemic, nats)", "viridis", None)]


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
    # fixed margins, not layout="constrained": its layout pass was half of drawing this figure
    # (a run folder's write time, benchmarks/quickstart.py), and two panels need no solver
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


def weight_histograms(posterior, *, bins: int = 40, title: str = ""):
    """Histograms of the per-weight posterior means (top row) and posterior standard
    deviations (bottom row, when there is more than one draw), one column per layer's
    weight matrix (``<layer>.w``). Zharikov, Isachenko & Bochkarev read off these how a Laplace prior makes
    many weights sit at zero while a Cauchy prior lets a few grow large.

    Returns:
        A Figure with one or two rows and one column per weight site.
    """
    names = [n for n in posterior.samples if n.endswith((".w", ".kernel"))]
    if not names:
        raise ValueError("no weight sites named '<layer>.w' (or a Flax '<module>.kernel') in this posterior")
    with_sd = posterior.num_chains * posterior.num_draws > 1
    fig = Figure(figsize=(3.2 * len(names), 5.2 if with_sd else 2.8), layout="constrained")
    axes = fig.subplots(2 if with_sd else 1, len(names), squeeze=False)
    for j, name in enumerate(names):
        w = np.asarray(posterior.samples[name])
        w = w.reshape(-1, *w.shape[2:])
        axes[0, j].hist(w.mean(0).ravel(), bins=bins, color="tab:blue")
        axes[0, j].set_title(f"{name}: posterior means", fontsize=9)
        if with_sd:
            axes[1, j].hist(w.std(0).ravel(), bins=bins, color="tab:orange")
            axes[1, j].set_title(f"{name}: posterior sds", fontsize=9)
    if title:
        fig.suptitle(title)
    return fig


def snr_histogram(values, cutoffs=None, *, bins: int = 60, title: str = ""):
    """The distribution of weight signal-to-noise ratios |μ|/σ (Blundell et al. 2015, §5.1,
    Fig. 4): a histogram of 10·log10(SNR) in decibels and its empirical CDF, with pruning
    cut-offs marked.

    Args:
        values: SNR per weight, an array of any shape or a dict of arrays (pooled).
        cutoffs: thresholds to mark, a sequence or a dict label → threshold (e.g.
            ``{"75%": t}``: the SNR below which that share of weights is removed).
    Returns:
        A Figure with two axes (histogram, CDF).
    """
    if isinstance(values, dict):
        values = np.concatenate([np.ravel(v) for v in values.values()]) if values else np.zeros(0)
    v = np.ravel(np.asarray(values, np.float64))
    v = v[np.isfinite(v) & (v > 0)]
    if v.size == 0:
        raise ValueError("snr_histogram needs at least one positive, finite signal-to-noise value")
    db = 10 * np.log10(v)
    if cutoffs is None:
        marks: dict = {}
    elif isinstance(cutoffs, dict):
        marks = dict(cutoffs)
    else:
        marks = {f"{c:.3g}": c for c in cutoffs}
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    ax_h, ax_c = fig.subplots(1, 2)
    ax_h.hist(db, bins=bins, color="tab:blue")
    ax_h.set_xlabel("signal-to-noise ratio |μ|/σ (dB)")
    ax_h.set_ylabel("weights")
    s = np.sort(db)
    ax_c.plot(s, np.arange(1, s.size + 1) / s.size, color="tab:blue")
    ax_c.set_xlabel("signal-to-noise ratio |μ|/σ (dB)")
    ax_c.set_ylabel("share of weights (CDF)")
    for i, (label, t) in enumerate(marks.items()):
        if t is None or not np.isfinite(t) or t <= 0:
            continue
        x_db = 10 * np.log10(t)
        colour = f"C{(i + 1) % 10}"
        for ax in (ax_h, ax_c):
            ax.axvline(x_db, color=colour, ls="--", lw=1)
        ax_c.text(x_db, 0.02 + 0.08 * (i % 10), f" {label}", color=colour, fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def selective_figure(curves: dict, score: str = "accuracy", *, title: str = ""):
    """Selective prediction: the score of the kept inputs against coverage (the share kept,
    most certain first), one line per uncertainty measure (``"oracle"`` dashed).

    Args:
        curves: measure → ``(coverage (n,), score (n,))``
            (:func:`bnnpp.evaluation.selective_curves`).
        score: the y-axis label (``"accuracy"`` or ``"rmse"``).
    Returns:
        A Figure.
    """
    fig = Figure(figsize=(5.5, 4), layout="constrained")
    ax = fig.subplots()
    for name, (coverage, values) in curves.items():
        ax.plot(coverage, values, label=name, ls="--" if name == "oracle" else "-", color="0.4" if name == "oracle" else None)
    ax.set_xlabel("coverage (share of inputs kept, most certain first)")
    ax.set_ylabel(f"{score} of the kept inputs")
    ax.set_xlim(0, 1)
    ax.legend(fontsize="small")
    ax.set_title(title or f"selective prediction: {score} against coverage")
    return fig


def reliability_diagram(predictions: dict, *, num_bins: int = 10, title: str = ""):
    """Reliability diagram (Guo et al. 2017, Fig. 1), fits overlaid: accuracy against mean
    confidence in equal-width confidence bins, with the diagonal of perfect calibration, and
    below it the share of points per bin.

    Args:
        predictions: name → ``(mean_probs (n, C), y (n,))``.
    Returns:
        A Figure with two axes.
    """
    if not predictions:
        raise ValueError("reliability_diagram needs at least one (mean_probs, y) pair")
    edges = np.linspace(0.0, 1.0, num_bins + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    fig = Figure(figsize=(5.5, 6), layout="constrained")
    ax, ax_n = fig.subplots(2, 1, height_ratios=(3, 1), sharex=True)
    ax.plot([0, 1], [0, 1], color="0.5", ls=":", label="perfect calibration")
    width = (edges[1] - edges[0]) / (len(predictions) + 1)
    for i, (name, (p, y)) in enumerate(predictions.items()):
        p = np.asarray(p)
        conf = p.max(-1)
        correct = p.argmax(-1) == np.asarray(y)
        idx = np.clip(np.digitize(conf, edges[1:-1], right=True), 0, num_bins - 1)
        counts = np.bincount(idx, minlength=num_bins)
        has = counts > 0
        acc = np.bincount(idx, weights=correct, minlength=num_bins)[has] / counts[has]
        mconf = np.bincount(idx, weights=conf, minlength=num_bins)[has] / counts[has]
        ax.plot(mconf, acc, marker="o", ms=4, label=name)
        ax_n.bar(edges[:-1] + (i + 0.5) * width, counts / counts.sum(), width=width, align="edge", label=name)
    ax.set_ylabel("accuracy")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(title or "reliability")
    ax_n.set_xlabel("confidence (max predictive probability)")
    ax_n.set_ylabel("share")
    ax_n.set_xticks(centres[:: max(1, num_bins // 5)].round(2))
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
    for ax, name in zip(axes, names, strict=False):
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


def _as_images(x: np.ndarray) -> np.ndarray:
    """``(k, h, w)``, ``(k, h, w, 1)`` or flattened square ``(k, h·w)`` images → ``(k, h, w)``."""
    x = np.asarray(x)
    if x.ndim == 4 and x.shape[-1] == 1:
        return x[..., 0]
    if x.ndim == 3:
        return x
    if x.ndim == 2 and round(x.shape[1] ** 0.5) ** 2 == x.shape[1]:
        side = round(x.shape[1] ** 0.5)
        return x.reshape(len(x), side, side)
    raise ValueError(f"images must be (k, h, w), (k, h, w, 1) or flattened square (k, h*w), got shape {x.shape}")


def image_grid(images: np.ndarray, titles=None, *, ncols: int = 8, title: str = ""):
    """Grayscale images in a grid, each with an optional caption (e.g. label, prediction and
    expected error rate), as in Zharikov, Isachenko & Bochkarev's "misclassified with zero expected error"
    and "lowest confidence" pictures.

    Args:
        images: ``(k, h, w)``, ``(k, h, w, 1)`` or flattened square ``(k, h·w)``.
        titles: ``k`` captions, or None.
        ncols: images per row.
    Returns:
        A Figure with one axis per image (an empty grid says "no images").
    """
    imgs = _as_images(images)
    k = len(imgs)
    if titles is not None and len(titles) != k:
        raise ValueError(f"got {len(titles)} titles for {k} images: pass one per image or None")
    if k == 0:
        fig = Figure(figsize=(4, 1), layout="constrained")
        fig.text(0.5, 0.5, f"{title}: no images" if title else "no images", ha="center", va="center")
        return fig
    cols = min(ncols, k)
    rows = -(-k // cols)
    fig = Figure(figsize=(1.5 * cols, 1.75 * rows + (0.4 if title else 0)), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols)).ravel()
    for i, ax in enumerate(axes):
        ax.set_axis_off()
        if i < k:
            ax.imshow(imgs[i], cmap="gray_r", interpolation="nearest")
            if titles is not None:
                ax.set_title(titles[i], fontsize=7)
    if title:
        fig.suptitle(title)
    return fig


def uncertainty_histograms(variance: np.ndarray, expected_error_rate: np.ndarray, *, bins: int = 50, title: str = ""):
    """Zharikov, Isachenko & Bochkarev's per-image uncertainty picture: histograms of the predictive variance
    over posterior draws summed over classes, and of the expected error rate 1 − max_c p̄_c
    (counts on a log scale, as most images sit near zero).

    Args:
        variance, expected_error_rate: ``(n,)`` per image.
    Returns:
        A Figure with two axes.
    """
    panels = (
        (np.ravel(variance), "variance of the class probabilities over draws, summed over classes"),
        (np.ravel(expected_error_rate), "expected error rate 1 − max class probability"),
    )
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    for ax, (v, label) in zip(fig.subplots(1, 2), panels, strict=True):
        ax.hist(v, bins=bins, color="tab:blue", log=True)
        ax.set_xlabel(label, fontsize=9)
        ax.set_ylabel("images")
        ax.set_title(f"mean {v.mean():.4f}, median {np.median(v):.4f}", fontsize=9)
    if title:
        fig.suptitle(title)
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


def reference_agreement(results: dict):
    """Bars of each method's agreement with the reference posterior, from
    :func:`bnnpp.compare.compare_methods`'s results (run with ``reference=...``):
    classification — top-1 agreement and total variation; regression — W2 to the reference
    and the predictive sd ratios (dashed line at the exact value).

    Returns:
        A Figure with two panels.
    """
    if not results.get("reference"):
        raise ValueError("these results have no reference posterior: run compare with reference='nuts'")
    names = list(results["methods"])
    rows = results["methods"]
    if results.get("task") == "regression":
        panels = (("ref_w2", "W2 to the reference (lower is better)", 0.0),
                  ("ref_sd_ratio", "predictive sd / reference's (1 is exact)", 1.0))
    else:
        panels = (("ref_agreement", "top-1 agreement with the reference (1 is exact)", 1.0),
                  ("ref_total_variation", "total variation to the reference (0 is exact)", 0.0))
    fig = Figure(figsize=(4.5 + 0.5 * len(names), 3.4), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, (key, label, exact) in zip(axes, panels, strict=True):
        values = [np.nan if rows[m].get(key) is None else rows[m][key] for m in names]
        ax.bar(names, values, color="tab:blue")
        ax.axhline(exact, color="k", ls="--", lw=0.8)
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelrotation=45, labelsize=8)
    fig.suptitle(f"against {results['reference']['method']} (max R-hat {results['reference']['max_r_hat']})", fontsize=9)
    return fig


# --- regression with any number of features: predicted vs observed, calibration, residuals ---


def _draw_predicted_vs_observed(ax, check: dict, y: np.ndarray, name: str = "") -> None:
    y = np.asarray(y)
    mean, lower, upper = check["mean"], check["lower"], check["upper"]
    inside = (y >= lower) & (y <= upper)
    lo = float(min(y.min(), lower.min()))
    hi = float(max(y.max(), upper.max()))
    ax.plot([lo, hi], [lo, hi], color="0.5", ls=":", lw=1)
    for keep, colour, label in ((inside, "tab:blue", "inside"), (~inside, "tab:red", "outside")):
        ax.errorbar(y[keep], mean[keep], yerr=np.stack([mean[keep] - lower[keep], upper[keep] - mean[keep]]), fmt="o", ms=3,
                    color=colour, ecolor=colour, elinewidth=0.6, alpha=0.7, label=f"{label} the interval ({keep.sum()})")
    ax.set_xlabel("observed")
    ax.set_ylabel(f"predicted mean, {check['level']:.0%} interval")
    ax.set_title(f"{name + ': ' if name else ''}{inside.mean():.0%} inside the central {check['level']:.0%} intervals", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def _draw_calibration(ax, checks: dict) -> None:
    ax.plot([0, 1], [0, 1], color="0.5", ls=":", label="calibrated")
    for name, c in checks.items():
        ax.plot(c["levels"], c["coverage"], marker="o", ms=3, label=name)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("nominal level of the central interval")
    ax.set_ylabel("share of targets inside")
    ax.set_title("calibration: interval coverage vs nominal", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def top_features(x: np.ndarray, residuals: list[np.ndarray], k: int, bins: int = 8) -> list[int]:
    """The ``k`` feature columns of ``x`` ``(n, F)`` along which the residuals ``(n,)`` leave the
    most structure: by the variance over ``bins`` quantile bins of the feature of the mean
    residual in each bin (summed over the residual arrays given), largest first; every column,
    in order, when ``F ≤ k``.

    Returns:
        Column indices.
    """
    f = x.shape[1]
    if f <= k:
        return list(range(f))
    scores = np.zeros(f)
    for j in range(f):
        edges = np.unique(np.quantile(x[:, j], np.linspace(0, 1, bins + 1)))
        idx = np.clip(np.searchsorted(edges, x[:, j], side="right") - 1, 0, max(len(edges) - 2, 0))
        for r in residuals:
            counts = np.bincount(idx, minlength=len(edges))
            means = np.bincount(idx, weights=r, minlength=len(edges))[counts > 0] / counts[counts > 0]
            scores[j] += np.average((means - r.mean()) ** 2, weights=counts[counts > 0])
    return [int(j) for j in np.argsort(-scores, kind="stable")[:k]]


def _draw_residuals(ax, x_col: np.ndarray, check: dict, feature: str, name: str = "") -> None:
    r = check["residual"]
    ax.axhline(0, color="0.5", ls=":", lw=1)
    ax.errorbar(x_col, r, yerr=np.stack([check["upper"] - check["mean"], check["mean"] - check["lower"]]), fmt="o", ms=2.5,
                color="tab:blue", ecolor="tab:blue", elinewidth=0.4, alpha=0.6)
    ax.set_xlabel(feature)
    ax.set_ylabel("observed − predicted")
    if name:
        ax.set_title(name, fontsize=9)


def _check_fits(checks: dict, what: str) -> None:
    if not checks:
        raise ValueError(f"{what} needs at least one fit's checks (bnnpp.evaluation.regression_checks)")


def predicted_vs_observed(checks: dict, y: np.ndarray, *, title: str = ""):
    """Predicted mean against observed target with each row's central predictive interval as
    an error bar (blue inside, red outside), the diagonal, and the share inside; one panel per fit.

    Args:
        checks: name → :func:`bnnpp.evaluation.regression_checks` of that fit at the rows.
        y: the observed targets ``(n,)``, in the same units.
    Returns:
        A Figure with one panel per fit.
    """
    _check_fits(checks, "predicted_vs_observed")
    fig = Figure(figsize=(4.2 * len(checks), 4.0), layout="constrained")
    axes = fig.subplots(1, len(checks), squeeze=False)[0]
    for ax, (name, c) in zip(axes, checks.items(), strict=True):
        _draw_predicted_vs_observed(ax, c, y, name)
    if title:
        fig.suptitle(title)
    return fig


def calibration_curve(checks: dict, *, title: str = ""):
    """Share of targets inside the central predictive interval against its nominal level, fits
    overlaid, with the diagonal of calibration (above it: intervals too wide; below: too narrow).

    Args:
        checks: name → :func:`bnnpp.evaluation.regression_checks` (its ``levels`` and ``coverage``).
    Returns:
        A Figure with one axes.
    """
    _check_fits(checks, "calibration_curve")
    fig = Figure(figsize=(5, 4.6), layout="constrained")
    _draw_calibration(fig.subplots(), checks)
    if title:
        fig.suptitle(title)
    return fig


def residuals_by_feature(checks: dict, x: np.ndarray, feature_names, *, max_features: int = 4, title: str = ""):
    """Residuals (observed − predicted mean, with the central interval as error bar) against
    each feature, or against the ``max_features`` along which they leave the most structure
    (:func:`top_features`); one row per fit.

    Args:
        checks: name → :func:`bnnpp.evaluation.regression_checks`.
        x: ``(n, F)`` the rows' features (in their original units, for readable axes).
        feature_names: ``F`` names.
    Returns:
        A Figure with one row per fit and one column per feature shown.
    """
    _check_fits(checks, "residuals_by_feature")
    x = np.asarray(x).reshape(len(x), -1)
    if len(feature_names) != x.shape[1]:
        raise ValueError(f"got {len(feature_names)} feature names for {x.shape[1]} features: pass one per column")
    cols = top_features(x, [c["residual"] for c in checks.values()], max_features)
    fig = Figure(figsize=(3.4 * len(cols), 2.8 * len(checks) + (0.4 if title else 0)), layout="constrained")
    axes = fig.subplots(len(checks), len(cols), squeeze=False, sharey="row")
    for row, (name, c) in zip(axes, checks.items(), strict=True):
        for ax, j in zip(row, cols, strict=True):
            _draw_residuals(ax, x[:, j], c, feature_names[j], name if j == cols[0] else "")
    if title:
        fig.suptitle(title)
    return fig


def regression_diagnostics(check: dict, y: np.ndarray, x: np.ndarray, feature_names, *, max_features: int = 4, title: str = ""):
    """One fit's regression picture for any number of features: predicted vs observed with
    central intervals and the calibration curve on top, residuals against each feature (or
    the ``max_features`` with most structure, :func:`top_features`) below.

    Args:
        check: :func:`bnnpp.evaluation.regression_checks` of the fit at the rows.
        y: observed targets ``(n,)``; x: the rows' features ``(n, F)``; feature_names: ``F`` names.
    Returns:
        A Figure with two panels above and up to ``max_features`` below.
    """
    x = np.asarray(x).reshape(len(x), -1)
    if len(feature_names) != x.shape[1]:
        raise ValueError(f"got {len(feature_names)} feature names for {x.shape[1]} features: pass one per column")
    cols = top_features(x, [check["residual"]], max_features)
    fig = Figure(figsize=(max(9.0, 3.2 * len(cols)), 8.2), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=(1.25, 1))
    ax_po, ax_cal = top.subplots(1, 2)
    _draw_predicted_vs_observed(ax_po, check, y)
    _draw_calibration(ax_cal, {"this fit": check})
    axes = bottom.subplots(1, len(cols), squeeze=False, sharey=True)[0]
    for ax, j in zip(axes, cols, strict=True):
        _draw_residuals(ax, x[:, j], check, feature_names[j])
    shown = "every feature" if len(cols) == x.shape[1] else f"the {len(cols)} of {x.shape[1]} features with most structure left"
    bottom.suptitle(f"residuals against {shown}", fontsize=9)
    if title:
        fig.suptitle(title)
    return fig
