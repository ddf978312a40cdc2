"""Figures are matplotlib Figures to save with ``fig.savefig``; a run's loss figure gives every
term its own axes, so a large KL cannot hide the loss."""

from __future__ import annotations

import io

import numpy as np
from matplotlib.figure import Figure

from bnnpp import plots, runs
from bnnpp.introspection import SiteInfo
from bnnpp.posterior import Posterior, Prediction


def _png_pixels(fig: Figure) -> np.ndarray:
    import matplotlib.image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    buf.seek(0)
    return matplotlib.image.imread(buf)


def test_loss_figure_has_one_axes_per_term():
    steps = np.arange(1, 501, dtype=np.float64)
    nll = 50.0 / np.sqrt(steps)  # falls from 50 to about 2
    kl = 3000.0 + 0.0 * steps  # 1000 times the end of the data term: on one axes it flattens the loss
    info = {"method": "bbb", "seed": 0, "options": {}, "loss": nll + kl / 100, "nll": nll, "kl": kl}
    post = Posterior({"w": np.zeros((1, 2, 1))}, info, None, np.zeros((1, 1)), np.zeros(1), {"w": SiteInfo((1,), ("w_dim_0",))})
    fig = runs.loss_figure(post, title="mnist: bbb")
    assert isinstance(fig, Figure)
    axes = fig.get_axes()
    assert [ax.get_ylabel() for ax in axes] == [label for _, label in runs.LOSS_TERMS]
    for ax, key in zip(axes, ("loss", "nll", "kl")):
        (line,) = ax.get_lines()
        np.testing.assert_allclose(line.get_ydata(), info[key])
        lo, hi = ax.get_ylim()
        assert lo <= np.min(info[key]) and np.max(info[key]) <= hi  # each term spans its own axes
    assert axes[1].get_yscale() == "linear" and axes[2].get_yscale() == "linear"  # under two decades: linear
    assert _png_pixels(fig).std() > 0


def test_loss_figure_without_a_trace_is_none():
    post = Posterior({"w": np.zeros((1, 2, 1))}, {"method": "nuts", "seed": 0, "options": {}}, None, np.zeros((1, 1)),
                     np.zeros(1), {"w": SiteInfo((1,), ("w_dim_0",))})
    assert runs.loss_figure(post) is None


def test_plot_helpers_return_figures_that_save_what_they_show():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 2)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)

    def predict(grid):
        p1 = 1 / (1 + np.exp(-3 * grid[:, 0]))
        probs = np.stack([1 - p1, p1], -1)[None] * np.ones((4, 1, 1))
        return Prediction("classification", probs=probs)

    fig = plots.decision_map(predict, x, y, resolution=20)
    assert isinstance(fig, Figure) and len(fig.get_axes()) == 4  # two panels, two colour bars
    pixels = _png_pixels(fig)
    assert pixels.std() > 0.05  # not a blank page
