"""``bnnpp.data.uci``: the standard UCI folder format, standardisation on the training rows,
the validation part, and one-line errors — on a tiny folder written here and on the real
sets in ``../shared/data/uci`` when they are present."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from shared_data import DATA_DIR

import bnnpp
from bnnpp.data import uci

REPO = Path(__file__).resolve().parents[1]
HAVE_UCI = (DATA_DIR / "uci" / "yacht" / "data.txt").is_file()


def _write_set(root: Path, rows: int = 10, splits: int = 2) -> Path:
    """A 3-column set (features 0, 1; target 2) in the standard layout under root/yacht."""
    folder = root / "yacht"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    table = np.c_[rng.normal(size=(rows, 2)) * [1.0, 5.0] + [0.0, 3.0], rng.normal(size=rows) * 4 + 10]
    np.savetxt(folder / "data.txt", table)
    (folder / "index_features.txt").write_text("0\n1\n")
    (folder / "index_target.txt").write_text("2\n")
    (folder / "n_splits.txt").write_text(f"{splits}\n")
    for s in range(splits):
        perm = np.random.default_rng(s).permutation(rows)
        np.savetxt(folder / f"index_train_{s}.txt", perm[: rows - 3], fmt="%d")
        np.savetxt(folder / f"index_test_{s}.txt", perm[rows - 3 :], fmt="%d")
    return folder


def test_tiny_set_is_standardised_on_its_training_rows(tmp_path):
    folder = _write_set(tmp_path)
    table = np.loadtxt(folder / "data.txt")
    train = np.loadtxt(folder / "index_train_1.txt", dtype=int)
    test = np.loadtxt(folder / "index_test_1.txt", dtype=int)
    d = uci("yacht", 1, tmp_path)
    assert d.task == "regression" and d.name == "yacht" and d.num_classes is None
    assert d.x_train.shape == (7, 2) and d.x_test.shape == (3, 2) and d.x_val is None
    assert bnnpp.data.uci_num_splits("yacht", tmp_path) == 2
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.float32
    np.testing.assert_allclose(d.x_train.mean(0), 0.0, atol=1e-6)
    np.testing.assert_allclose(d.x_train.std(0), 1.0, atol=1e-5)
    # back to the original units with y_shift / y_scale
    np.testing.assert_allclose(d.y_test * d.y_scale + d.y_shift, table[test, 2], rtol=1e-5)
    np.testing.assert_allclose(d.y_shift, table[train, 2].mean())
    # the same folder found as data_dir/uci/<set> and as the set folder itself
    (tmp_path / "uci").mkdir()
    os.rename(folder, tmp_path / "uci" / "yacht")
    np.testing.assert_array_equal(uci("yacht", 1, tmp_path).x_test, d.x_test)
    np.testing.assert_array_equal(uci("yacht", 1, tmp_path / "uci" / "yacht").x_test, d.x_test)


def test_validation_part_is_held_out_of_the_training_rows(tmp_path):
    _write_set(tmp_path, rows=40)
    full = uci("yacht", 0, tmp_path)
    d = uci("yacht", 0, tmp_path, validation=0.25, seed=3)
    assert d.x_val.shape == (9, 2) and d.x_train.shape == (28, 2)
    # standardised on the 28 fitting rows only
    np.testing.assert_allclose(d.x_train.mean(0), 0.0, atol=1e-6)
    assert d.y_scale != full.y_scale
    assert uci("yacht", 0, tmp_path, validation=0.25, seed=3).x_val.tolist() == d.x_val.tolist()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "bostn"}, "unknown UCI set"),
        ({"split": 2}, r"split must be in \[0, 1\]"),
        ({"split": 1.5}, "split must be an integer"),
        ({"validation": 1.0}, "validation must be a fraction"),
    ],
)
def test_bad_arguments_give_one_line_errors(tmp_path, kwargs, message):
    _write_set(tmp_path)
    args = {"name": "yacht", "split": 0, "data_dir": tmp_path, **kwargs}
    with pytest.raises((ValueError, TypeError), match=message) as e:
        uci(**args)
    assert "\n" not in str(e.value)


def test_missing_and_damaged_folders(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="no UCI set 'yacht' under"):
        uci("yacht", 0, tmp_path)
    monkeypatch.delenv("BNNPP_DATA_DIR", raising=False)
    with pytest.raises(ValueError, match="BNNPP_DATA_DIR"):
        uci("yacht", 0)
    folder = _write_set(tmp_path)
    first_train = (folder / "index_train_0.txt").read_text().split()[0]
    (folder / "index_test_0.txt").write_text(f"{first_train}\n")  # a training row in the test split
    with pytest.raises(ValueError, match="overlap"):
        uci("yacht", 0, tmp_path)
    (folder / "index_test_0.txt").write_text("99\n")
    with pytest.raises(ValueError, match="row index"):
        uci("yacht", 0, tmp_path)


@pytest.mark.skipif(not HAVE_UCI, reason=f"UCI sets not found under {DATA_DIR}/uci (set BNNPP_DATA_DIR)")
@pytest.mark.parametrize(("name", "n_train", "n_test", "features"), [
    ("boston", 455, 51, 13), ("yacht", 277, 31, 6), ("naval", 10741, 1193, 16), ("protein", 41157, 4573, 9),
])
def test_real_sets_have_the_published_split_sizes(name, n_train, n_test, features):
    d = uci(name, 0, DATA_DIR)
    assert d.x_train.shape == (n_train, features) and d.x_test.shape == (n_test, features)
    assert np.all(np.isfinite(d.x_train)) and abs(float(d.y_train.mean())) < 1e-4
    assert bnnpp.data.uci_num_splits(name, DATA_DIR) == (5 if name == "protein" else 20)
