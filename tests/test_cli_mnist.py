"""``bnnpp fit`` on MNIST: bad input fails before anything compiles and leaves no --out; the
data record in metrics.json reloads the same data; one end-to-end run on the real files (slow)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from test_data_mnist import DATA_DIR, tiny_parts, write_idx

from bnnpp.cli import main
from bnnpp.cli.fit import IMAGE_NUM_SAMPLES
from bnnpp.runs import dataset_from_record


@pytest.fixture
def tiny_dir(tmp_path):
    """Four tiny IDX files (20 training, 6 test images) in tmp/mnist."""
    return write_idx(tmp_path / "data" / "mnist", tiny_parts())


def _fails(argv, tmp_path, capsys, compile_counter, match: str):
    """Run ``bnnpp fit`` in-process: exit status 2, a one-line error containing ``match``,
    nothing compiled and no output folder."""
    out = tmp_path / "run"
    before = compile_counter()
    code = main(["fit", *argv, "--out", str(out), "--quiet", "--no-cache"])
    err = capsys.readouterr().err
    assert code == 2, err
    line = err.strip()
    assert line.startswith("bnnpp fit: error: ") and "\n" not in line, err
    assert match in line, line
    assert compile_counter() == before
    assert not out.exists()
    return line


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--data", "mnist", "--model", "cnn", "--hidden", "5"], "--hidden sets MLP widths; --model cnn has a fixed architecture"),
        (["--data", "moons", "--normalize", "126"], "--normalize applies to mnist/fashion_mnist only"),
        (["--data", "moons", "--train-subset", "10", "--validation", "0"], "--validation, --train-subset apply to mnist/fashion_mnist only"),
        (["--data", "circles", "--model", "lenet5"], "--model lenet5 takes 28×28 images"),
        (["--data", "mnist", "--data-noise", "0.1"], "--data-noise applies to the generated data"),
        (["--data", "mnist", "--train-subset", "0"], "--train-subset must be ≥ 1"),
        (["--data", "mnist", "--validation", "60000"], "validation must be an integer in [0, 59999]"),
        (["--data", "mnist", "--method", "bbb", "--num-samples", "5"], "--num-samples 5 is too few for test metrics on images"),
        (["--data", "mnist", "--method", "bbb", "--num-warmup", "10"], "--num-warmup does not apply to --method bbb"),
    ],
)
def test_bad_flags_fail_before_reading_data(argv, match, tmp_path, capsys, compile_counter):
    # --data-dir points nowhere: each of these errors must come before the data is read
    _fails([*argv, "--data-dir", str(tmp_path / "nowhere")] if "mnist" in argv else argv, tmp_path, capsys, compile_counter, match)


def test_unknown_normalization_is_an_argparse_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["fit", "--data", "mnist", "--normalize", "max", "--out", str(tmp_path / "run")])
    assert e.value.code == 2
    assert "invalid choice: 'max' (choose from '255', '126', 'standardize')" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_data_dir_with_wrong_files(tmp_path, capsys, compile_counter):
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    (wrong / "train.csv").write_text("1,2\n")
    _fails(["--data", "mnist", "--data-dir", str(wrong)], tmp_path, capsys, compile_counter,
           f"data_dir {wrong} does not hold the mnist IDX files (missing train-images-idx3-ubyte.gz")


def test_truncated_idx_file(tiny_dir, tmp_path, capsys, compile_counter):
    path = tiny_dir / "t10k-labels-idx1-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-6])  # drop the gzip trailer
    _fails(["--data", "mnist", "--data-dir", str(tiny_dir), "--validation", "5"], tmp_path, capsys, compile_counter,
           "t10k-labels-idx1-ubyte.gz is truncated or not gzip")


def test_train_subset_larger_than_training_split(tiny_dir, tmp_path, capsys, compile_counter):
    _fails(["--data", "mnist", "--data-dir", str(tiny_dir), "--validation", "5", "--train-subset", "16"],
           tmp_path, capsys, compile_counter, "--train-subset 16 exceeds the 15 training images")


def test_batch_size_checked_against_the_subset(tiny_dir, tmp_path, capsys, compile_counter):
    _fails(["--data", "mnist", "--data-dir", str(tiny_dir), "--validation", "0", "--train-subset", "8",
            "--method", "bbb", "--batch-size", "10"], tmp_path, capsys, compile_counter,
           "batch_size 10 is larger than the 8 training rows")


def test_report_record_reloads_the_same_data(tiny_dir):
    record = {"data": "mnist", "data_dir": str(tiny_dir.parent), "normalize": "126", "validation": 5,
              "train_subset": 4, "flatten": True}
    ds = dataset_from_record(record)
    parts = tiny_parts()
    assert ds.x_train.shape == (4, 784) and ds.x_val.shape == (5, 784) and ds.x_test.shape == (6, 784)
    np.testing.assert_array_equal(ds.x_train, parts["x_train"][:4].reshape(4, -1) / np.float32(126))
    np.testing.assert_array_equal(ds.y_val, parts["y_train"][15:])
    moons = dataset_from_record({"data": "moons", "data_noise": 0.1, "seed": 3})
    assert moons.x_train.shape == (700, 2)
    with pytest.raises(ValueError, match="the report names no known dataset"):
        dataset_from_record({"data": "cifar10"})


@pytest.mark.slow  # ~60 s here, nearly all of it XLA compiling the BBB program
def test_fit_mnist_mlp_end_to_end(tmp_path, monkeypatch):
    import bnnpp

    folder = DATA_DIR / "mnist"
    if not (folder / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST IDX files not found in {folder} (set BNNPP_DATA_DIR to the folder holding mnist/)")
    monkeypatch.setenv("BNNPP_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "run"
    code = main(["fit", "--data", "mnist", "--data-dir", str(DATA_DIR), "--model", "mlp", "--hidden", "50",
                 "--method", "bbb", "--prior", "scale-mixture", "--hyperprior", "fixed", "--epochs", "1",
                 "--batch-size", "100", "--train-subset", "1000", "--validation", "0", "--out", str(out), "--quiet"])
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.toml", "loss.png", "metrics.json", "posterior.nc"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bnnpp-")]
    report = json.loads((out / "metrics.json").read_text())
    assert {k: report[k] for k in ("data", "data_dir", "normalize", "validation", "train_subset", "flatten")} == {
        "data": "mnist", "data_dir": os.path.abspath(DATA_DIR), "normalize": "255", "validation": 0,
        "train_subset": 1000, "flatten": True}
    assert report["options"]["num_samples"] == IMAGE_NUM_SAMPLES and report["test"]["num_draws"] == IMAGE_NUM_SAMPLES
    assert report["steps_run"] == 10  # 1 epoch of 1000 rows in batches of 100
    # 10 minibatch steps from a Glorot start: well above chance (0.1), far from trained
    assert 0.3 < report["test"]["accuracy"] <= 1.0
    post = bnnpp.load(out / "posterior.nc")
    assert post.samples["dense_0.w"].shape == (1, IMAGE_NUM_SAMPLES, 784, 50)
    ds = dataset_from_record(report)
    assert ds.x_train.shape == (1000, 784) and ds.x_test.shape == (10000, 784)
    assert post.predict(ds.x_test[:7]).probs.shape == (IMAGE_NUM_SAMPLES, 7, 10)
    assert Path(out / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
