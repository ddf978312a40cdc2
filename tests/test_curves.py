"""Training curves of minibatch fits (issue 38): the validation error of every epoch, per-epoch
loss terms in metrics.json, and a validation panel in loss.png."""

from __future__ import annotations

import warnings

import numpy as np

import bnnpp
from bnnpp import runs


def _fit(**options):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 2)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    xv = rng.normal(size=(40, 2)).astype(np.float32)
    yv = (xv[:, 0] > 0).astype(np.int32)
    model = bnnpp.models.mlp((4,), num_classes=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bnnpp.fit(model, (x, y), method="bbb", batch_size=32, progress=False, validation_data=(xv, yv), num_samples=5, **options), model


def test_every_epoch_is_validated_and_the_curves_reach_metrics_and_the_figure():
    post, model = _fit(epochs=7)
    extras = post.stats.extras
    assert extras["val_step"] == [3 * e for e in range(1, 8)]  # 96 rows / 32 = 3 steps an epoch
    curves = runs.training_curves(post)
    assert curves["epoch"] == list(range(1, 8))
    assert len(curves["loss"]) == len(curves["nll"]) == len(curves["kl"]) == 7
    np.testing.assert_allclose(curves["loss"][0], np.mean(np.asarray(post.info["loss"])[:3]), rtol=1e-6)
    assert curves["val_error"] == [float(e) for e in extras["val_error"]] and all(0 <= e <= 1 for e in curves["val_error"])
    report = runs.fit_report(post, model, {"data": "toy"}, seed=0, test={}, seconds={})
    assert report["curves"]["val_step"] == extras["val_step"]
    fig = runs.loss_figure(post)
    assert [ax.get_ylabel() for ax in fig.axes][-1] == "validation error"


def test_an_explicit_chunk_size_keeps_its_own_validation_points():
    post, _ = _fit(epochs=6, chunk_size=9)
    assert post.stats.extras["val_step"] == [9, 18]


def test_a_full_batch_fit_has_no_curves():
    post = bnnpp.fit(bnnpp.models.mlp((3,), num_classes=2), (np.zeros((8, 2), np.float32), np.arange(8) % 2), method="map",
                     num_steps=5, progress=False)
    assert runs.training_curves(post) is None
