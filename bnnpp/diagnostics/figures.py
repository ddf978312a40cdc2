"""ArviZ figures (returned as matplotlib Figures, no pyplot state)."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from bnnpp.diagnostics.convergence import _entry_label, _posterior_only, scale_sites
from bnnpp.posterior import arviz_compat

# --------------------------------------------------------------------------------------
# ArviZ figures (returned as matplotlib Figures, no pyplot state)
# --------------------------------------------------------------------------------------


def forest_plot(posteriors: dict[str, Any], var_names: list[str] | None = None, *, title: str = "") -> Figure:
    """ArviZ forest plot of the scale sites across fits: one row per site entry, one
    colour per fit (94% HDI and quartiles). Under ArviZ 1.x, whose plots draw into figures of
    their own, the same rows are drawn here with matplotlib (94% equal-tailed interval,
    quartiles, median).

    Args:
        posteriors: name → :class:`~bnnpp.Posterior`.
        var_names: sites to show (default: the scale sites common to all fits).
    """
    names = list(posteriors)
    if var_names is None:
        common = [set(scale_sites(p)) for p in posteriors.values()]
        var_names = sorted(set.intersection(*common)) if common else []
    if not var_names:
        raise ValueError("no scale sites to plot: the models have fixed prior scales (use a hyperprior)")
    datas = [_posterior_only(posteriors[n], var_names) for n in names]
    n_rows = sum(int(np.prod(posteriors[names[0]].samples[v].shape[2:], dtype=int)) for v in var_names)
    fig = Figure(figsize=(7, 1.2 + 0.35 * n_rows * len(names)), layout="constrained")
    ax = fig.subplots()
    if arviz_compat.arviz_major() >= 1:
        _forest_rows(ax, {n: posteriors[n] for n in names}, var_names)
        ax.set_title(title or "layer scales across methods (94% interval)")
        return fig
    import arviz as az

    az.plot_forest(datas, model_names=names, var_names=var_names, combined=True, ax=ax)
    ax.set_title(title or "layer scales across methods (94% HDI)")
    return fig


def _forest_rows(ax, posteriors: dict[str, Any], var_names: list[str]) -> None:
    """Forest rows drawn with matplotlib: per site entry and fit, the 94% equal-tailed
    interval (thin), the quartiles (thick) and the median (dot), chains combined."""
    labels, y = [], 0
    for var in reversed(var_names):
        shape = np.shape(next(iter(posteriors.values())).samples[var])[2:]
        for index in reversed(list(np.ndindex(shape))):
            for i, (name, post) in enumerate(posteriors.items()):
                draws = np.asarray(post.samples[var], np.float64).reshape(-1, *shape)[(slice(None), *index)]
                lo, q1, med, q3, hi = np.quantile(draws, [0.03, 0.25, 0.5, 0.75, 0.97])
                colour = f"C{i}"
                ax.plot([lo, hi], [y, y], color=colour, lw=1)
                ax.plot([q1, q3], [y, y], color=colour, lw=3)
                ax.plot([med], [y], "o", color=colour, ms=4, label=name if not labels else None)
                y += 1
            labels.append((y - (len(posteriors) + 1) / 2, _entry_label(var, index)))
            y += 1
    ax.set_yticks([t for t, _ in labels], [text for _, text in labels])
    ax.legend(loc="best", fontsize="small")


def trace_plot(posterior, var_names: list[str] | None = None, *, title: str = "") -> Figure:
    """ArviZ trace plot (per-chain densities and traces) of the scale sites of one fit."""
    var_names = var_names or scale_sites(posterior)
    if not var_names:
        raise ValueError("no scale sites to plot: the model has fixed prior scales (use a hyperprior)")
    fig = Figure(figsize=(10, 2.0 * len(var_names)), layout="constrained")
    axes = fig.subplots(len(var_names), 2, squeeze=False)
    if arviz_compat.arviz_major() >= 1:  # ArviZ 1.x plots into figures of its own: the same panels here
        for (left, right), var in zip(axes, var_names, strict=True):
            draws = np.asarray(posterior.samples[var], np.float64)
            for c, chain in enumerate(draws.reshape(draws.shape[0], draws.shape[1], -1)):
                left.hist(chain.ravel(), bins=30, density=True, histtype="step", color=f"C{c}")
                right.plot(chain, color=f"C{c}", lw=0.5)
            left.set_title(var)
            right.set_title(var)
    else:
        import arviz as az

        az.plot_trace(_posterior_only(posterior, var_names), var_names=var_names, axes=axes, compact=True)
    if title:
        fig.suptitle(title)
    return fig
