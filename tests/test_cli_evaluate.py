"""``bnnpp evaluate`` and ``bnnpp prune`` on run folders.

Fast: a run folder built by hand from a nearest-class-mean linear classifier on the real
MNIST files (no training, no large compile): the reports agree with the per-image arrays they
were computed from, pruning 0% keeps the test error and pruning everything gives a constant
prediction. Bad input fails with one line and exit status 2. Slow: a real ``bnnpp fit``
(Bayes by Backprop on 500 images) followed by both commands.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from shared_data import DATA_DIR

import bnnpp
from bnnpp import metrics, models
from bnnpp.cli import main
from bnnpp.introspection import latent_sites
from bnnpp.posterior import Posterior

REPO = Path(__file__).resolve().parents[1]
needs_data = pytest.mark.skipif(
    not (DATA_DIR / "mnist").is_dir() or not (DATA_DIR / "fashion_mnist").is_dir(),
    reason=f"MNIST / Fashion-MNIST IDX files not found in {DATA_DIR} (set BNNPP_DATA_DIR)",
)
S = 10


def _record(flatten=True) -> dict:
    return {"data": "mnist", "data_dir": str(DATA_DIR / "mnist"), "normalize": "255", "validation": 10000, "train_subset": None, "flatten": flatten}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run folder like ``bnnpp fit`` writes, holding a linear classifier with logits
    x·μ_c − ½‖μ_c‖² (nearest class mean, μ_c the mean training image of class c) and S
    draws of Gaussian noise around it, with guide parameters so that SNR pruning works."""
    if not (DATA_DIR / "mnist").is_dir():
        pytest.skip(f"MNIST IDX files not found in {DATA_DIR} (set BNNPP_DATA_DIR)")
    ds = bnnpp.data.load("mnist", DATA_DIR / "mnist", flatten=True)
    mu = np.stack([ds.x_train[ds.y_train == c].mean(0) for c in range(10)], axis=1)  # (784, 10)
    loc_w, loc_b = 5 * mu, -2.5 * (mu**2).sum(0)  # × 5: a sharper softmax, same argmax
    rng = np.random.default_rng(0)
    scale_w = np.full_like(loc_w, 0.05) * rng.uniform(0.5, 2.0, loc_w.shape)
    scale_b = np.full_like(loc_b, 0.05)
    w = loc_w + scale_w * rng.normal(size=(1, S, *loc_w.shape))
    b = loc_b + scale_b * rng.normal(size=(1, S, *loc_b.shape))
    model = models.mlp((), num_classes=10)
    x0, y0 = ds.x_train[:0], ds.y_train[:0]
    params = {"dense_0.w_loc": loc_w, "dense_0.w_scale": scale_w, "dense_0.b_loc": loc_b, "dense_0.b_scale": scale_b}
    post = Posterior(
        {"dense_0.w": w.astype(np.float32), "dense_0.b": b.astype(np.float32)},
        {"method": "bbb", "seed": 0, "options": {}, "guide_params": {k: v.astype(np.float32) for k, v in params.items()}},
        model, x0, y0, latent_sites(model, ds.x_train[:1], ds.y_train[:1]),
    )
    out = tmp_path_factory.mktemp("run")
    post.save(out / "posterior.nc")
    (out / "metrics.json").write_text(json.dumps({**_record(), "method": "bbb"}))
    return out


@needs_data
def test_evaluate_end_to_end(run_dir, capsys):
    code = main(["evaluate", str(run_dir), "--num-samples", str(S), "--shift", "200"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "test error" in out.out and "OOD fashion_mnist" in out.out and "under shift (200 images)" in out.out
    rep = json.loads((run_dir / "evaluation.json").read_text())
    names = {p.name for p in run_dir.iterdir()}
    assert {"evaluation.json", "evaluation.md", "evaluation.npz", *rep["figures"]} <= names
    assert not [n for n in names if n.startswith(".")]  # the temporary folder is gone
    for fig in rep["figures"]:
        assert (run_dir / fig).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "selective.png" in rep["figures"] and "Selective prediction" in (run_dir / "evaluation.md").read_text()
    arr = np.load(run_dir / "evaluation.npz")
    mean, y = arr["mean_probs"], arr["y"]
    assert mean.shape == (10000, 10) and rep["num_samples"] == S
    # the report is what the per-image arrays say
    assert rep["test"]["error"] == pytest.approx(1 - metrics.accuracy(mean, y), abs=1e-12)
    assert rep["test"]["nll"] == pytest.approx(metrics.nll(mean, y), rel=1e-9)
    assert rep["test"]["rejected"] == pytest.approx(metrics.rejection_rate(mean, 0.2), abs=1e-12)
    np.testing.assert_allclose(arr["expected_error_rate"], 1 - mean.max(-1), atol=1e-6)
    assert rep["test"]["error"] < 0.25  # nearest class mean: about 18% on MNIST
    sure = rep["test"]["sure_but_wrong"]
    assert len(sure) == 16 and all(e["label"] != e["predicted"] for e in sure)
    assert [e["expected_error_rate"] for e in sure] == sorted(e["expected_error_rate"] for e in sure)
    low = rep["test"]["lowest_confidence"]
    assert low[0]["expected_error_rate"] == pytest.approx(arr["expected_error_rate"].max(), abs=1e-6)
    assert set(rep["ood"]) == {"noise", "fashion_mnist"}
    for o in rep["ood"].values():
        assert o["n"] == 10000 and 0 <= o["auroc_entropy"] <= 1 and 0 <= o["rejected"] <= 1
    assert "| noise | 10000 |" in (run_dir / "evaluation.md").read_text()
    # dataset shift: 7 rotations + 3 corruptions x 3 severities of the first 200 test images; upright
    # (rotation 0 is the identity) they score what the per-image arrays say about those 200
    shift = rep["shift"]
    assert shift["n"] == 200 and len(shift["rows"]) == 16 and "shift.png" in rep["figures"]
    upright = shift["rows"][0]
    assert (upright["shift"], upright["level"]) == ("rotation", 0.0)
    assert upright["accuracy"] == pytest.approx(metrics.accuracy(mean[:200], y[:200]), abs=1e-12)
    assert upright["nll"] == pytest.approx(metrics.nll(mean[:200], y[:200]), rel=1e-5)
    by = {(r["shift"], r["level"]): r for r in shift["rows"]}
    assert by[("rotation", 90.0)]["accuracy"] < upright["accuracy"] - 0.3  # a class-mean template fails on rotated digits
    assert "| rotation | 90 |" in (run_dir / "evaluation.md").read_text()


@needs_data
def test_prune_end_to_end(run_dir, capsys):
    code = main(["prune", str(run_dir), "--fractions", "0,50,100"])
    out = capsys.readouterr()
    assert code == 0, out.err
    rep = json.loads((run_dir / "prune.json").read_text())
    assert rep["num_weights"] == 7840
    rows = {(r["rule"], r["fraction"]): r for r in rep["rows"]}
    assert set(rows) == {(r, f) for r in ("snr", "magnitude") for f in (0.0, 0.5, 1.0)}
    ds = bnnpp.data.load("mnist", DATA_DIR / "mnist", flatten=True)
    post = bnnpp.load(run_dir / "posterior.nc")
    base = 1 - metrics.accuracy(post.predict(ds.x_test, num_samples=S).mean, ds.y_test)
    assert rows[("snr", 0.0)]["test_error"] == pytest.approx(base, abs=1e-12)  # 0% changes nothing
    # every weight gone: the logits are the biases, one class for every image
    share = np.bincount(ds.y_test, minlength=10) / len(ds.y_test)
    assert any(rows[("magnitude", 1.0)]["test_error"] == pytest.approx(1 - s, abs=1e-12) for s in share)
    assert rows[("magnitude", 0.5)]["remaining"] == 3920
    md = (run_dir / "prune.md").read_text()
    assert "| proportion removed | # weights | test error (SNR) | test error (magnitude) |" in md
    assert "Blundell et al. 2015, Table 2" in md
    assert (run_dir / "snr.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _bad(argv, capsys, match):
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.startswith(f"bnnpp {argv[0]}: error: ") and "\n" not in err, err
    assert match in err, err


@pytest.mark.parametrize("command", ["evaluate", "prune"])
def test_bad_run_dirs(command, tmp_path, capsys):
    _bad([command, str(tmp_path / "missing")], capsys, "is not a folder")
    _bad([command, str(tmp_path)], capsys, "holds no posterior.nc")
    (tmp_path / "posterior.nc").write_bytes(b"")
    _bad([command, str(tmp_path)], capsys, "holds no metrics.json")
    (tmp_path / "metrics.json").write_text(json.dumps({"data": "moons"}))
    if command == "prune":
        _bad([command, str(tmp_path)], capsys, "works on image runs")
    else:  # a table run is evaluated: this one's posterior.nc is not a posterior
        _bad([command, str(tmp_path)], capsys, "is empty (0 bytes)")
        _bad([command, str(tmp_path), "--tau", "0.3"], capsys, "--tau apply to image runs")


def test_bad_options(tmp_path, capsys):
    (tmp_path / "posterior.nc").write_bytes(b"")
    (tmp_path / "metrics.json").write_text(json.dumps(_record()))
    d = str(tmp_path)
    for tau in ("0", "1", "1.5", "-0.1"):
        _bad(["evaluate", d, "--tau", tau], capsys, "tau must be a number in (0, 1)")
    _bad(["evaluate", d, "--num-samples", "0"], capsys, "num_samples must be an integer ≥ 1")
    _bad(["evaluate", d, "--ood", "cifar10"], capsys, "unknown OOD set(s) cifar10")
    _bad(["prune", d, "--rule", "random"], capsys, "rule must be one of snr, magnitude")
    with pytest.raises(SystemExit):
        main(["prune", d, "--fractions", "50,120"])
    assert "--fractions are percentages in [0, 100]" in capsys.readouterr().err


@needs_data
@pytest.mark.slow  # a real Bayes-by-Backprop fit: mostly XLA compile time
def test_fit_evaluate_prune_real_run(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["fit", "--data", "mnist", "--data-dir", str(DATA_DIR / "mnist"), "--train-subset", "500", "--validation", "0",
                 "--hidden", "32", "--method", "bbb", "--epochs", "30", "--batch-size", "100", "--num-samples", "20",
                 "--prior", "scale-mixture", "--hyperprior", "fixed", "--out", str(out), "--quiet", "--no-cache"])
    assert code == 0, capsys.readouterr().err
    assert main(["evaluate", str(out), "--num-samples", "20"]) == 0
    rep = json.loads((out / "evaluation.json").read_text())
    assert rep["test"]["error"] < 0.25  # 500 training images
    # trained on digits: noise and clothes are less certain than digits, on average
    for name in ("noise", "fashion_mnist"):
        assert rep["ood"][name]["auroc_mutual_information"] > 0.5
    assert main(["prune", str(out)]) == 0
    rows = json.loads((out / "prune.json").read_text())["rows"]
    assert rows[0]["fraction"] == 0 and rows[0]["test_error"] == pytest.approx(rep["test"]["error"], abs=0.02)
