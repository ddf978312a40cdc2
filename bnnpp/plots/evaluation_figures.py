"""Figures of an evaluation: weight and SNR histograms, reliability, selective-prediction and
shift curves, OOD and uncertainty histograms, image grids, agreement with a reference posterior."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure


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


def shift_figure(rows: list[dict], *, title: str = ""):
    """Accuracy, ECE and NLL under dataset shift: the top row against the rotation angle, the
    bottom row against each corruption's severity (1–3), one line per corruption.

    Args:
        rows: :func:`bnnpp.evaluation.shift.shift_report`'s rows (``shift``, ``level`` and the
            three scores), or the same with a ``method`` key per row for one line per method
            and shift.
    Returns:
        A Figure with 2 × 3 axes.
    """
    fig = Figure(figsize=(11, 6.5), layout="constrained")
    axes = fig.subplots(2, 3)
    groups = list(dict.fromkeys(r.get("method", "") for r in rows))
    for j, stat in enumerate(("accuracy", "ece", "nll")):
        for g in groups:
            mine = [r for r in rows if r.get("method", "") == g]
            rot = [r for r in mine if r["shift"] == "rotation"]
            axes[0, j].plot([r["level"] for r in rot], [r[stat] for r in rot], marker="o", label=g or "rotation")
            for kind in dict.fromkeys(r["shift"] for r in mine if r["shift"] != "rotation"):
                sel = [r for r in mine if r["shift"] == kind]
                label = f"{g} {kind}".strip()
                axes[1, j].plot(range(1, len(sel) + 1), [r[stat] for r in sel], marker="o", label=label)
        axes[0, j].set_xlabel("rotation (degrees)")
        axes[1, j].set_xlabel("corruption severity")
        axes[1, j].set_xticks([1, 2, 3])
        for ax in axes[:, j]:
            ax.set_ylabel(stat.upper() if stat != "accuracy" else stat)
    axes[0, 0].legend(fontsize="small")
    axes[1, 0].legend(fontsize="x-small")
    fig.suptitle(title or "under dataset shift")
    fig.supxlabel("severity 1 / 2 / 3: noise sd 0.1 / 0.3 / 0.5, blur sigma 0.5 / 1 / 1.5 pixels, contrast 0.5 / 0.3 / 0.1", fontsize=8)
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
        panels = (
            ("ref_w2", "W2 to the reference (lower is better)", 0.0),
            ("ref_sd_ratio", "predictive sd / reference's (1 is exact)", 1.0),
        )
    else:
        panels = (
            ("ref_agreement", "top-1 agreement with the reference (1 is exact)", 1.0),
            ("ref_total_variation", "total variation to the reference (0 is exact)", 0.0),
        )
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
