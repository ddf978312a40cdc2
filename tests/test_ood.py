"""Out-of-distribution scores: AUROC against a brute-force pair count and known cases, the
rejection rule, and bnnpp.evaluation on a hand-built posterior whose in- and
out-of-distribution inputs are trivially separable."""

from __future__ import annotations

import numpy as np
import pytest

from bnnpp import evaluation, metrics, models, plots
from bnnpp.introspection import latent_sites
from bnnpp.posterior import Posterior


def _brute_auroc(a, b):
    """P(out > in) + ½ P(out = in) over all m·n pairs."""
    a, b = np.asarray(a)[:, None], np.asarray(b)[None, :]
    return float(np.mean((b > a) + 0.5 * (b == a)))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auroc_matches_pairwise_count(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 6, size=37).astype(float)  # many ties
    b = rng.integers(2, 9, size=23).astype(float)
    assert metrics.auroc(a, b) == pytest.approx(_brute_auroc(a, b), abs=1e-12)
    c, d = rng.normal(size=50), rng.normal(0.7, 1, size=80)
    assert metrics.auroc(c, d) == pytest.approx(_brute_auroc(c, d), abs=1e-12)


def test_auroc_known_cases():
    assert metrics.auroc([0.1, 0.2, 0.3], [0.5, 0.9]) == 1.0  # separable
    assert metrics.auroc([0.5, 0.9], [0.1, 0.2, 0.3]) == 0.0  # separable the wrong way
    x = np.random.default_rng(0).normal(size=100)
    assert metrics.auroc(x, x) == pytest.approx(0.5, abs=1e-12)  # identical samples
    assert metrics.auroc(np.ones(5), np.ones(7)) == 0.5  # all tied
    with pytest.raises(ValueError, match="at least one"):
        metrics.auroc([], [1.0])
    with pytest.raises(ValueError, match="NaN"):
        metrics.auroc([np.nan], [1.0])


def test_rejection_rate():
    p = np.array([[0.15, 0.15, 0.7], [0.34, 0.33, 0.33]])
    assert metrics.rejection_rate(p, tau=0.5) == 0.5  # only the second row's max (0.34) is < 0.5
    assert metrics.rejection_rate(np.full((4, 10), 0.1), tau=0.2) == 1.0  # uniform over 10 classes
    assert metrics.rejection_rate(np.full((4, 10), 0.1), tau=0.1) == 0.0  # strictly below τ
    for tau in (0, 1, -0.2, float("nan"), True):
        with pytest.raises(ValueError, match=r"tau must be a number in \(0, 1\)"):
            metrics.rejection_rate(p, tau)
    with pytest.raises(ValueError, match=r"\(n, C\)"):
        metrics.rejection_rate(np.full((3, 4, 10), 0.1))


# --------------------------------------------------------------------------------------
# A constructed case: feature 0 carries the class, feature 1 is seen only out of distribution
# --------------------------------------------------------------------------------------

C, S = 4, 30


def _separable_posterior():
    """A linear classifier (mlp with no hidden layer) on 2 features. Row 0 of the weights maps
    feature 0 to the class scores identically in every draw; row 1 (for feature 1, zero on
    in-distribution inputs) is large and different in every draw. In distribution every draw
    agrees and is confident; out of distribution the draws are confident but disagree, so the
    predictive entropy and the mutual information are both higher there."""
    model = models.mlp((), num_classes=C)
    rng = np.random.default_rng(0)
    w = np.zeros((1, S, 2, C), np.float32)
    w[..., 0, :] = np.array([0.0, 10.0, 20.0, 30.0])
    w[..., 1, :] = rng.normal(0, 20, size=(S, C))
    b = np.zeros((1, S, C), np.float32)
    x_fit = np.zeros((1, 2), np.float32)
    sites = latent_sites(model, x_fit, None)
    return Posterior({"dense_0.w": w, "dense_0.b": b}, {"method": "nuts"}, model, x_fit, np.zeros(1, np.int32), sites)


def _inputs(rng, n):
    # in distribution: logits f0·(0, 10, 20, 30) with f0 ≥ 0.5, so p(class 3) ≥ 0.99 in every
    # draw; out of distribution: logits f1·w1_s, a different confident class per draw
    x_in = np.c_[rng.uniform(0.5, 1.5, n), np.zeros(n)].astype(np.float32)
    x_out = np.c_[np.zeros(n), rng.uniform(0.5, 1.5, n)].astype(np.float32)
    return x_in, x_out


def test_ood_auroc_is_one_when_trivially_separable():
    post = _separable_posterior()
    rng = np.random.default_rng(1)
    x_in, x_out = _inputs(rng, 200)
    y = np.full(200, 3)
    report, figs, per_image = evaluation.evaluate(post, x_in, y, ood={"shifted": x_out}, num_samples=S, tau=0.5, figures=False)
    assert figs == {}
    o = report["ood"]["shifted"]
    assert o["auroc_entropy"] == 1.0
    assert o["auroc_mutual_information"] == 1.0
    assert report["test"]["error"] == 0.0 and report["test"]["rejected"] == 0.0
    # in distribution every draw agrees: mutual information is 0 up to float32 rounding
    assert report["test"]["mean_mutual_information"] < 1e-4 < o["mean_mutual_information"]
    assert per_image["mean_probs"].shape == (200, C) and per_image["variance"].shape == (200,)
    assert report["num_samples"] == S
    # the per-image variance is the per-draw variance summed over classes
    probs = post.predict(x_in[:5]).probs
    np.testing.assert_allclose(per_image["variance"][:5], probs.var(0).sum(-1), rtol=1e-5, atol=1e-9)


def test_predict_probs_batches_match_one_call():
    post = _separable_posterior()
    x_in, x_out = _inputs(np.random.default_rng(2), 25)
    x = np.concatenate([x_in, x_out])
    whole = post.predict(x, num_samples=7).probs
    np.testing.assert_allclose(evaluation.predict_probs(post, x, num_samples=7, batch_size=8), whole, rtol=1e-6, atol=1e-7)


def test_uniform_noise_matches_the_inputs_range_and_shape():
    like = np.random.default_rng(0).uniform(0.2, 2.0, size=(30, 5, 5, 1)).astype(np.float32)
    noise = evaluation.uniform_noise(like, seed=3)
    assert noise.shape == like.shape and noise.dtype == np.float32
    assert like.min() <= noise.min() and noise.max() <= like.max()
    np.testing.assert_array_equal(noise, evaluation.uniform_noise(like, seed=3))  # fixed seed


def test_evaluate_bad_input():
    post = _separable_posterior()
    x_in, _x_out = _inputs(np.random.default_rng(3), 5)
    y = np.full(5, 3)
    with pytest.raises(ValueError, match="tau"):
        evaluation.evaluate(post, x_in, y, tau=1.0)
    with pytest.raises(ValueError, match="num_samples"):
        evaluation.evaluate(post, x_in, y, num_samples=0)
    with pytest.raises(ValueError, match="y_test"):
        evaluation.evaluate(post, x_in, y[:3])
    with pytest.raises(ValueError, match="OOD set 'bad'"):
        evaluation.evaluate(post, x_in, y, ood={"bad": np.zeros((3, 5), np.float32)})


def test_ood_histograms_figure():
    rng = np.random.default_rng(0)
    scores = {"entropy": rng.random(50), "max probability": rng.random(50)}
    fig = plots.ood_histograms(scores, {"noise": {k: v + 1 for k, v in scores.items()}}, tau=0.2)
    assert len(fig.axes) == 2
    assert [ax.get_xlabel() for ax in fig.axes] == ["entropy", "max probability"]
    with pytest.raises(ValueError, match="lacks the score"):
        plots.ood_histograms(scores, {"noise": {"entropy": rng.random(5)}})


def test_image_grid_and_uncertainty_histograms():
    imgs = np.random.default_rng(0).random((5, 784))
    fig = plots.image_grid(imgs, [f"#{i}" for i in range(5)], ncols=3, title="t")
    assert sum(ax.get_images() != [] for ax in fig.axes) == 5  # a 2×3 grid, one cell left empty
    assert len(fig.axes) == 6
    assert plots.image_grid(imgs[:0]).texts  # an empty selection still gives a figure
    with pytest.raises(ValueError, match="titles"):
        plots.image_grid(imgs, ["one"])
    with pytest.raises(ValueError, match="flattened square"):
        plots.image_grid(np.zeros((2, 10)))
    fig = plots.uncertainty_histograms(np.random.default_rng(1).random(100), np.random.default_rng(2).random(100))
    assert len(fig.axes) == 2
