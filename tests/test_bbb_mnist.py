"""Bayes by Backprop on MNIST (the real IDX files; skipped without them) and its
``validation_data`` option (on moons, fast)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numpyro import handlers
from numpyro.distributions.transforms import biject_to
from shared_data import DATA_DIR

import bnnpp
from bnnpp import metrics, priors


def _data_dir() -> Path:
    return DATA_DIR


@pytest.fixture(scope="module")
def mnist():
    if not (_data_dir() / "mnist" / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST IDX files not found under {_data_dir()}/mnist (set BNNPP_DATA_DIR)")
    return bnnpp.data.load("mnist", _data_dir())


def _mean_network_error(post, x, y):
    """Error rate of the network at the variational means (on the unconstrained space: a scale
    site's mean is one of log σ), computed here from the guide parameters: the truth that
    ``info["val_error"]`` must match."""
    loc = {k[: -len("_loc")]: v for k, v in post.info["guide_params"].items() if k.endswith("_loc")}

    def at_mean(site):
        return biject_to(site["fn"].support)(loc[site["name"]]) if site["name"] in loc else None

    tr = handlers.trace(handlers.substitute(handlers.seed(post.model, 0), substitute_fn=at_mean)).get_trace(x)
    return float(np.mean(np.argmax(np.asarray(tr["logits"]["value"]), -1) != y))


@pytest.mark.slow
def test_one_epoch_on_2000_mnist_images_reaches_85_percent(mnist):
    """Issue 5: one epoch of BBB on 2,000 training images, ≥ 85% on 2,000 test images (10 draws).

    LeNet-5, not an MLP: after one pass over 2,000 images even a deterministic 784-400-10 MLP
    reached only 0.83–0.86 (Adam, batch 10–100, two seeds), BBB MLPs 0.80–0.85, while BBB
    LeNet-5 at batch 10 reached 0.87–0.88 (seeds 0, 1; deterministic LeNet-5 0.88–0.91).
    Small initial σ (1e-3): one epoch is too short to undo a noisy start. About 40 s on the
    2-core CI machine under load, nearly all of it compiling."""
    x, y = mnist.x_train[:2000], mnist.y_train[:2000]
    post = bnnpp.fit(
        bnnpp.models.lenet5(), (x, y), method="bbb", seed=0, progress=False,
        epochs=1, batch_size=10, learning_rate=3e-3, init_scale=1e-3, num_samples=10,
    )  # fmt: skip
    assert post.info["steps_run"] == 200 and np.all(np.isfinite(post.info["loss"]))
    pred = post.predict(mnist.x_test[:2000])
    assert pred.probs.shape == (10, 2000, 10)
    assert metrics.accuracy(pred.mean, mnist.y_test[:2000]) >= 0.85


@pytest.mark.slow
def test_seed_study_cnn_trains_with_flipout_and_reports_validation_error(mnist):
    """The conv path trains under Flipout with a hierarchical prior: one epoch on 500 images is
    well above chance (0.1), and the validation error is the mean network's (checked against
    the guide means)."""
    x, y = mnist.x_train[:500], mnist.y_train[:500]
    xv, yv = mnist.x_val[:300], mnist.y_val[:300]
    post = bnnpp.fit(
        bnnpp.models.cnn(prior=priors.normal(priors.half_normal(1.0))), (x, y), method="bbb", seed=0,
        progress=False, epochs=1, batch_size=25, learning_rate=3e-3, init_scale=1e-3, estimator="flipout",
        num_samples=10, chunk_size=10, validation_data=(xv, yv),
    )  # fmt: skip
    assert post.info["val_step"] == [10, 20]
    assert post.info["val_error"][-1] < 0.6
    np.testing.assert_allclose(post.info["val_error"][-1], _mean_network_error(post, xv, yv), atol=1.5 / len(yv))
    acc = metrics.accuracy(post.predict(mnist.x_test[:500]).mean, mnist.y_test[:500])
    assert acc > 0.4
    assert post.samples["conv_1.scale"].shape == (1, 10)


# --------------------------------------------------------------------------------------
# validation_data (moons: fast)
# --------------------------------------------------------------------------------------


def test_validation_error_is_recorded_per_chunk_and_falls(moons):
    model = bnnpp.models.mlp((5, 5), num_classes=2)
    post = bnnpp.fit(
        model, moons, method="bbb", seed=0, progress=False, epochs=20, batch_size=100, num_samples=20,
        validation_data=(moons.x_test, moons.y_test),
    )  # fmt: skip
    val, steps = post.info["val_error"], post.info["val_step"]
    m = post.info["num_batches"]
    assert m == 7 and steps[-1] == 20 * m and all(s % m == 0 for s in steps)  # measured at whole epochs
    assert steps == sorted(set(steps)) and len(val) == len(steps) == 20
    assert all(0.0 <= v <= 1.0 for v in val)
    assert val[-1] < val[0] and val[-1] < 0.2  # moons at noise 0.3: ~0.1 is attainable
    # the last measurement is the mean network's error computed from the returned means
    assert val[-1] == pytest.approx(_mean_network_error(post, moons.x_test, moons.y_test), abs=1e-6)
    assert post.info["options"]["validation_data"] == [[300, 2], [300]]


@pytest.mark.parametrize(
    "validation, error, match",
    [
        (
            (np.zeros((5, 3), np.float32), np.zeros(5)),
            ValueError,
            r"validation_data inputs must have shape \(n_val, 2\)",
        ),
        ((np.zeros((5, 2), np.float32), np.zeros(4)), ValueError, r"targets must have shape \(5,\)"),
        ((np.zeros((5, 2), np.float32), np.full(5, 7)), ValueError, r"validation_data: labels must lie in \[0, 2\)"),
        ((np.full((5, 2), np.nan, np.float32), np.zeros(5)), ValueError, "validation_data: x contains NaN"),
        (np.zeros((5, 2)), TypeError, "validation_data must be a pair"),
    ],
)
def test_bad_validation_data_fails_before_compiling(validation, error, match, moons, compile_counter):
    before = compile_counter()
    with pytest.raises(error, match=match):
        bnnpp.fit(
            bnnpp.models.mlp((3,), num_classes=2), moons, method="bbb", progress=False, validation_data=validation
        )
    assert compile_counter() == before


def test_revision_ab_refuses_an_unknown_revision_before_timing(tmp_path):
    """benchmarks/studies/revision_ab.py: a revision git does not know is a one-line SystemExit, and no
    result file is written."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "studies" / "revision_ab.py"
    proc = subprocess.run([sys.executable, str(script), "--baseline", "no-such-revision", "--data-dir", str(_data_dir()),
                           "--results", str(tmp_path)], capture_output=True, text=True, timeout=300, check=False)
    if "no mnist/ folder" in proc.stderr:
        pytest.skip("MNIST not found (set BNNPP_DATA_DIR)")
    assert proc.returncode != 0
    assert "is not a revision of this repository" in proc.stderr.strip().splitlines()[-1]
    assert not list(tmp_path.iterdir())


@pytest.mark.slow  # two fresh processes, each loading MNIST and compiling BBB and MAP: ~1 minute on 2 cores
def test_revision_ab_quick_times_both_revisions(mnist, tmp_path):
    """The quick run against HEAD times BBB and MAP at both revisions and writes its table."""
    import json
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "studies" / "revision_ab.py"
    proc = subprocess.run([sys.executable, str(script), "--baseline", "HEAD", "--quick", "--data-dir", str(_data_dir()),
                           "--results", str(tmp_path)], capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads((tmp_path / "revision_ab.json").read_text())
    assert len(result["rows"]) == 2 and {r["revision"] for r in result["rows"]} == set(result["summary"])
    assert all(r["bbb"] > 0 and r["map"] > 0 and r["ratio"] == pytest.approx(r["bbb"] / r["map"]) for r in result["rows"])
