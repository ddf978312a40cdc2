"""Figures come back as matplotlib Figures with the documented panels."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

from bnnpp import plots
from bnnpp.posterior import Prediction


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


def test_decision_maps_one_row_per_method():
    x = np.random.default_rng(0).normal(size=(40, 2)).astype(np.float32)
    y = (x[:, 0] > 0).astype(int)
    fig = plots.decision_maps({"a": _fake_predict, "b": _fake_predict}, x, y, resolution=15)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["a: p(class 1)", "a: sd over draws", "b: p(class 1)", "b: sd over draws"]
    with pytest.raises(ValueError, match="at least one fit"):
        plots.decision_maps({}, x, y)


class _Post:
    def __init__(self, draws):
        rng = np.random.default_rng(0)
        self.samples = {"dense_0.w": rng.normal(size=(1, draws, 3, 4)), "dense_0.b": rng.normal(size=(1, draws, 4)),
                        "dense_1.w": rng.laplace(size=(1, draws, 4, 2))}
        self.num_chains, self.num_draws = 1, draws


def test_weight_histograms_means_and_sds_per_layer():
    fig = plots.weight_histograms(_Post(50))
    assert [ax.get_title() for ax in fig.axes] == [
        "dense_0.w: posterior means", "dense_1.w: posterior means", "dense_0.w: posterior sds", "dense_1.w: posterior sds",
    ]
    counts = sum(p.get_height() for p in fig.axes[0].patches)
    assert counts == 12  # one mean per entry of the (3, 4) matrix
    assert len(plots.weight_histograms(_Post(1)).axes) == 2  # a point estimate has no sds


def test_snr_histogram_marks_cutoffs():
    snr = np.exp(np.random.default_rng(0).normal(size=1000))
    cut = {"50%": float(np.quantile(snr, 0.5)), "95%": float(np.quantile(snr, 0.95))}
    fig = plots.snr_histogram({"a": snr[:500], "b": snr[500:]}, cut)
    ax_h, ax_c = fig.axes
    assert sum(p.get_height() for p in ax_h.patches) == 1000
    xs = [line.get_xdata()[0] for line in ax_h.get_lines()]
    np.testing.assert_allclose(xs, [10 * np.log10(v) for v in cut.values()])
    cdf = ax_c.get_lines()[0].get_ydata()
    assert cdf[-1] == 1.0 and np.all(np.diff(cdf) > 0)
    with pytest.raises(ValueError, match="positive"):
        plots.snr_histogram(np.zeros(3))


def test_reliability_diagram_overlays_fits():
    rng = np.random.default_rng(0)
    p1 = rng.uniform(size=2000)
    y = (rng.uniform(size=2000) < p1).astype(int)  # calibrated by construction
    probs = np.stack([1 - p1, p1], -1)
    fig = plots.reliability_diagram({"calibrated": (probs, y), "sharpened": (np.round(probs), y)}, num_bins=10)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["perfect calibration", "calibrated", "sharpened"]
    conf, acc = ax.get_lines()[1].get_data()
    np.testing.assert_allclose(acc, conf, atol=0.06)  # within sampling noise of ~200 points per bin
