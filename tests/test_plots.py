"""Figures come back as matplotlib Figures with the documented panels."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

from bnnpp import plots
from bnnpp.inference.base import Prediction


def _fake_predict(grid):
    # p(class 1) = sigmoid(x1) per draw, with two draws that disagree in slope
    p1 = np.stack([1 / (1 + np.exp(-a * grid[:, 0])) for a in (1.0, 3.0)])
    return Prediction("classification", probs=np.stack([1 - p1, p1], axis=-1))


def test_decision_map(tmp_path):
    x = np.random.default_rng(0).normal(size=(50, 2)).astype(np.float32)
    y = (x[:, 0] > 0).astype(int)
    fig = plots.decision_map(_fake_predict, x, y, resolution=20, title="t")
    assert isinstance(fig, Figure)
    assert [a.get_title() for a in fig.axes[:2]] == ["predictive p(class 1)", "sd of p(class 1) over draws"]
    fig.savefig(tmp_path / "m.png")
    assert (tmp_path / "m.png").stat().st_size > 0
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        plots.decision_map(_fake_predict, x[:, :1], y)


def test_regression_bands():
    xg = np.linspace(-1, 1, 30)[:, None]
    pred = Prediction("regression", draws=np.stack([xg[:, 0], 2 * xg[:, 0]]), noise=np.ones((2, 30)))
    fig = plots.regression_bands(pred, xg, xg[::5], xg[::5, 0])
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels == ["±2σ total", "±2σ epistemic", "predictive mean", "training data"]
