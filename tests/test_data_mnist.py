"""MNIST / Fashion-MNIST loading: the IDX path (tiny hand-made files and the real ones in
../shared/data), the tensorflow-datasets path (a tiny prepared ArrayRecord set and
``tfds.testing.mock_data``), normalisation, and bad input."""

from __future__ import annotations

import gzip
import io
import struct
from pathlib import Path

import numpy as np
import pytest
from shared_data import DATA_DIR

from bnnpp import data

REPO = Path(__file__).resolve().parents[1]

# Published label counts of the original files (shared/data/README.md; LeCun's and Zalando's).
MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


# --------------------------------------------------------------------------------------
# helpers: IDX files and a prepared tensorflow-datasets folder written by hand
# --------------------------------------------------------------------------------------


def idx_bytes(arr: np.ndarray, magic: int | None = None) -> bytes:
    """The IDX encoding of a uint8 array: magic (0x08 = ubyte, then the rank), dims, data."""
    arr = np.asarray(arr, np.uint8)
    magic = 0x0800 + arr.ndim if magic is None else magic
    return struct.pack(f">{1 + arr.ndim}I", magic, *arr.shape) + arr.tobytes()


def write_idx(folder: Path, parts: dict[str, np.ndarray]) -> Path:
    """Write the four gzipped IDX files for ``parts`` (keys as in data.IDX_FILES)."""
    folder.mkdir(parents=True, exist_ok=True)
    for key, fname in data.IDX_FILES.items():
        (folder / fname).write_bytes(gzip.compress(idx_bytes(parts[key])))
    return folder


def tiny_parts(n_train: int = 20, n_test: int = 6, seed: int = 0) -> dict[str, np.ndarray]:
    """Random 28×28 uint8 images with the full 0..255 range and labels cycling 0..9."""
    rng = np.random.default_rng(seed)
    x_train = rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8)
    x_train[0, 0, 0], x_train[0, 0, 1] = 0, 255
    return {
        "x_train": x_train,
        "y_train": (np.arange(n_train) % 10).astype(np.uint8),
        "x_test": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "y_test": (np.arange(n_test) % 10).astype(np.uint8),
    }


@pytest.fixture
def tiny(tmp_path):
    parts = tiny_parts()
    return write_idx(tmp_path / "mnist", parts), parts


def prepare_tfds(root: Path, name: str, parts: dict[str, np.ndarray], file_format: str = "array_record") -> None:
    """Write ``name`` into the tfds data dir ``root`` as `tfds build --file_format=array_record`
    would: PNG-encoded images in tf.Example records in ArrayRecord shards, plus
    dataset_info.json/features.json. TensorFlow is not needed (tfds' own protos, PIL)."""
    tfds = pytest.importorskip("tensorflow_datasets")
    from array_record.python import array_record_module
    from PIL import Image
    from tensorflow_datasets.core import naming
    from tensorflow_datasets.proto import tf_example_pb2

    builder = tfds.builder(name, data_dir=str(root), file_format=file_format)
    splits = []
    for split in ("train", "test"):
        x, y = parts[f"x_{split}"], parts[f"y_{split}"]
        template = naming.ShardedFileTemplate(
            data_dir=builder.data_path, dataset_name=name, split=split, filetype_suffix=file_format
        )
        path = template.sharded_filepath(shard_index=0, num_shards=1)
        path.parent.mkdir(parents=True, exist_ok=True)
        if file_format == "array_record":
            writer = array_record_module.ArrayRecordWriter(str(path), "group_size:1")
            for img, label in zip(x, y, strict=True):
                png = io.BytesIO()
                Image.fromarray(img).save(png, format="PNG")
                ex = tf_example_pb2.Example()
                ex.features.feature["image"].bytes_list.value.append(png.getvalue())
                ex.features.feature["label"].int64_list.value.append(int(label))
                writer.write(ex.SerializeToString())
            writer.close()
        splits.append(tfds.core.SplitInfo(name=split, shard_lengths=[len(x)], num_bytes=0, filename_template=template))
    builder.info.set_splits(tfds.core.SplitDict(splits))
    builder.info.write_to_directory(builder.data_path)


# --------------------------------------------------------------------------------------
# IDX path on tiny files: exact values
# --------------------------------------------------------------------------------------


def test_idx_tiny_exact_values_split_and_shapes(tiny):
    folder, parts = tiny
    ds = data.load("mnist", folder, validation=5)
    assert ds.x_train.shape == (15, 28, 28, 1) and ds.x_val.shape == (5, 28, 28, 1) and ds.x_test.shape == (6, 28, 28, 1)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int32
    assert ds.task == "classification" and ds.num_classes == 10 and ds.name == "mnist"
    # validation is the LAST 5 training images (Blundell et al.'s 50,000 / 10,000 split)
    raw = parts["x_train"].astype(np.float32)[..., None]
    np.testing.assert_array_equal(ds.x_train, raw[:15] / np.float32(255))
    np.testing.assert_array_equal(ds.x_val, raw[15:] / np.float32(255))
    np.testing.assert_array_equal(ds.y_val, parts["y_train"][15:])
    np.testing.assert_array_equal(ds.y_test, parts["y_test"])
    assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0


def test_idx_parent_folder_flatten_no_validation(tiny):
    folder, parts = tiny
    ds = data.load("mnist", folder.parent, validation=0, flatten=True)  # parent holding mnist/
    assert ds.x_train.shape == (20, 784) and ds.x_test.shape == (6, 784)
    assert ds.x_val is None and ds.y_val is None
    np.testing.assert_array_equal(ds.x_test[2], parts["x_test"][2].reshape(-1) / np.float32(255))


def test_normalize_126_divides_by_126(tiny):
    folder, parts = tiny
    ds = data.load("mnist", folder, normalize="126", validation=0)
    np.testing.assert_array_equal(ds.x_train[..., 0], parts["x_train"].astype(np.float32) / np.float32(126))
    assert ds.x_train.max() == np.float32(255) / np.float32(126)


def test_standardize_uses_training_split_statistics(tiny):
    folder, parts = tiny
    ds = data.load("mnist", folder, normalize="standardize", validation=5)
    train = parts["x_train"][:15].astype(np.float64)
    mu, sd = train.mean(), train.std()
    x = ds.x_train.astype(np.float64)
    # float32 results of (x - mu)/sd with |values| < 2: rounding error ~1e-7 per pixel
    assert abs(x.mean()) < 1e-6 and abs(x.std() - 1.0) < 1e-6
    # validation and test use the training mean and sd, not their own
    np.testing.assert_allclose(ds.x_val[..., 0] * sd + mu, parts["x_train"][15:], atol=1e-4)
    np.testing.assert_allclose(ds.x_test[..., 0] * sd + mu, parts["x_test"], atol=1e-4)


def test_bnnpp_data_dir_env_is_used(tiny, tmp_path, monkeypatch):
    folder, parts = tiny
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "no_tfds"))
    monkeypatch.setenv("BNNPP_DATA_DIR", str(folder.parent))
    ds = data.load("mnist", validation=0)
    np.testing.assert_array_equal(ds.y_train, parts["y_train"])


# --------------------------------------------------------------------------------------
# IDX path: bad files
# --------------------------------------------------------------------------------------


def test_truncated_gzip_is_rejected(tiny):
    folder, _ = tiny
    path = folder / data.IDX_FILES["x_train"]
    path.write_bytes(path.read_bytes()[:-2000])  # cut inside the deflate stream
    with pytest.raises(ValueError, match=r"train-images-idx3-ubyte.gz is truncated or not gzip.*replace it"):
        data.load("mnist", folder, validation=0)


def test_truncated_idx_payload_is_rejected(tiny):
    folder, parts = tiny
    # a complete gzip stream whose IDX payload is short by one image row
    path = folder / data.IDX_FILES["x_test"]
    path.write_bytes(gzip.compress(idx_bytes(parts["x_test"])[:-28]))
    with pytest.raises(ValueError, match=r"is truncated: its header announces 6 images"):
        data.load("mnist", folder, validation=0)


def test_wrong_magic_is_rejected(tiny):
    folder, parts = tiny
    # labels where the test images should be
    (folder / data.IDX_FILES["x_test"]).write_bytes(gzip.compress(idx_bytes(parts["y_test"])))
    with pytest.raises(ValueError, match=r"magic number 2049, expected 2051 \(images\): it is a labels file"):
        data.load("mnist", folder, validation=0)


def test_wrong_image_size_is_rejected(tiny):
    folder, _ = tiny
    (folder / data.IDX_FILES["x_train"]).write_bytes(gzip.compress(idx_bytes(np.zeros((20, 32, 32), np.uint8))))
    with pytest.raises(ValueError, match="holds 32×32 images, expected 28×28"):
        data.load("mnist", folder, validation=0)


def test_mismatched_counts_are_rejected(tiny):
    folder, _ = tiny
    (folder / data.IDX_FILES["y_train"]).write_bytes(gzip.compress(idx_bytes(np.zeros(19, np.uint8))))
    with pytest.raises(ValueError, match="has 20 images but .* has 19 labels: the files do not belong together"):
        data.load("mnist", folder, validation=0)


def test_folder_with_wrong_files_is_rejected(tmp_path):
    folder = tmp_path / "stuff"
    folder.mkdir()
    (folder / "train-images.idx3-ubyte").write_bytes(b"")  # uncompressed name, not the .gz file
    (folder / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"does not hold the mnist IDX files \(missing train-images-idx3-ubyte.gz"):
        data.load("mnist", folder)


def test_missing_folder_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="does not exist: pass the folder that holds the four mnist IDX files"):
        data.load("mnist", tmp_path / "nope")


def test_neither_source_names_both_ways(tmp_path, monkeypatch):
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "tfds"))
    monkeypatch.delenv("BNNPP_DATA_DIR", raising=False)
    with pytest.raises(ValueError) as e:
        data.load("fashion_mnist")
    msg = str(e.value)
    assert "\n" not in msg
    assert "tfds build fashion_mnist --file_format=array_record" in msg  # way 1
    assert "data_dir=DIR" in msg and "BNNPP_DATA_DIR" in msg and "t10k-labels-idx1-ubyte.gz" in msg  # way 2


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"name": "cifar10"}, "unknown dataset 'cifar10'; choose one of mnist, fashion_mnist"),
        ({"normalize": "max"}, "unknown normalize='max'; choose one of 255, 126, standardize"),
        ({"validation": 60000}, r"validation must be an integer in \[0, 59999\]"),
        ({"validation": -1}, r"validation must be an integer in \[0, 59999\]"),
        ({"validation": True}, r"validation must be an integer in \[0, 59999\]"),
        ({"flatten": "yes"}, "flatten must be True or False"),
        ({"tfds_data_dir": "/tmp"}, "pass data_dir .* or tfds_data_dir .*, not both"),
    ],
)
def test_bad_arguments_are_rejected_before_reading(kwargs, match, tmp_path):
    # data_dir does not exist: each check must fire before any file is looked at
    kwargs = {"name": "mnist", "data_dir": tmp_path / "nope", **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        data.load(kwargs.pop("name"), **kwargs)


def test_validation_larger_than_training_split(tiny):
    folder, _ = tiny
    with pytest.raises(ValueError, match="validation=20 leaves no training images: the training split has 20"):
        data.load("mnist", folder, validation=20)


def test_normalize_accepts_the_integers():
    # load is validated before reading: an int 255/126 is the same choice as its string
    with pytest.raises(ValueError, match="does not exist"):
        data.load("mnist", "/nonexistent-folder", normalize=126)


# --------------------------------------------------------------------------------------
# tensorflow-datasets path
# --------------------------------------------------------------------------------------


def test_tfds_prepared_array_record_is_read_without_tensorflow(tmp_path, monkeypatch):
    import sys

    parts = tiny_parts(12, 5, seed=1)
    prepare_tfds(tmp_path / "tfds", "mnist", parts)
    ds = data.load("mnist", tfds_data_dir=tmp_path / "tfds", validation=2)
    np.testing.assert_array_equal(ds.x_train[..., 0], parts["x_train"][:10] / np.float32(255))
    np.testing.assert_array_equal(ds.x_val[..., 0], parts["x_train"][10:] / np.float32(255))
    np.testing.assert_array_equal(ds.y_test, parts["y_test"])
    assert "tensorflow" not in sys.modules  # data_source decodes with numpy and PIL
    # with no folder given, the prepared set in $TFDS_DATA_DIR comes first
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "tfds"))
    monkeypatch.setenv("BNNPP_DATA_DIR", str(tmp_path / "nothing"))
    np.testing.assert_array_equal(data.load("mnist", validation=0).y_train, parts["y_train"])


def test_tfds_prepared_as_tfrecord_is_not_used(tmp_path):
    prepare_tfds(tmp_path / "tfds", "mnist", tiny_parts(), file_format="tfrecord")
    with pytest.raises(ValueError, match="prepared there as tfrecord, which tfds.data_source cannot read"):
        data.load("mnist", tfds_data_dir=tmp_path / "tfds")


def test_tfds_missing_names_the_extra(tmp_path, monkeypatch):
    # tensorflow-datasets is the optional extra bnnpp[tfds]; the IDX path never needs it
    monkeypatch.setitem(__import__("sys").modules, "tensorflow_datasets", None)  # import fails
    (tmp_path / "tfds" / "mnist").mkdir(parents=True)
    with pytest.raises(ValueError, match=r'tensorflow-datasets is not installed: pip install "bnnpp\[tfds\]"'):
        data.load("mnist", tfds_data_dir=tmp_path / "tfds")


def test_tfds_mock_data_through_data_source(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    # the prepared metadata marks the set as present; mock_data then replaces the records
    # (tfds.data_source → builder.as_data_source) with 30 random examples per split
    prepare_tfds(tmp_path / "tfds", "mnist", tiny_parts(12, 5))
    with tfds.testing.mock_data(num_examples=30, data_dir=str(tmp_path / "tfds")):
        ds = data.load("mnist", tfds_data_dir=tmp_path / "tfds", validation=10, normalize="126")
    assert ds.x_train.shape == (20, 28, 28, 1) and ds.x_val.shape == (10, 28, 28, 1) and ds.x_test.shape == (30, 28, 28, 1)
    assert ds.y_train.dtype == np.int32 and set(np.unique(ds.y_test)) <= set(range(10))
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 255 / 126
    # mock_data yields the same examples in every split: the first 20 test images are the
    # training images, which shows the records came through the mocked data_source
    np.testing.assert_array_equal(ds.x_test[:20], ds.x_train)


# --------------------------------------------------------------------------------------
# the real files in ../shared/data
# --------------------------------------------------------------------------------------


def _real(name: str) -> Path:
    folder = DATA_DIR / name
    if not all((folder / f).is_file() for f in data.IDX_FILES.values()):
        pytest.skip(f"{name} IDX files not found in {folder} (set BNNPP_DATA_DIR to the folder holding {name}/)")
    return folder


@pytest.fixture(scope="module")
def mnist():
    return data.load("mnist", _real("mnist"))


def test_real_mnist_shapes_counts_and_range(mnist):
    ds = mnist
    assert ds.x_train.shape == (50000, 28, 28, 1) and ds.x_val.shape == (10000, 28, 28, 1)
    assert ds.x_test.shape == (10000, 28, 28, 1) and ds.y_test.shape == (10000,)
    assert np.bincount(np.r_[ds.y_train, ds.y_val], minlength=10).tolist() == MNIST_TRAIN_COUNTS
    assert np.bincount(ds.y_test, minlength=10).tolist() == MNIST_TEST_COUNTS
    assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
    # the well-known pixel statistics of the 60,000 training images: mean 0.1307, sd 0.3081
    n = ds.x_train.size + ds.x_val.size
    m1 = sum(float(x.sum(dtype=np.float64)) for x in (ds.x_train, ds.x_val)) / n
    m2 = sum(float(np.square(x).sum(dtype=np.float64)) for x in (ds.x_train, ds.x_val)) / n
    assert abs(m1 - 0.1307) < 1e-4 and abs(np.sqrt(m2 - m1**2) - 0.3081) < 1e-4


def test_real_mnist_standardize_flatten():
    ds = data.load("mnist", _real("mnist"), normalize="standardize", flatten=True)
    assert ds.x_train.shape == (50000, 784) and ds.x_test.shape == (10000, 784)
    x = ds.x_train
    # float32 rounding of values |x| < 3, summed in float64: mean and sd exact to ~1e-6
    m1 = float(x.mean(dtype=np.float64))
    m2 = float(np.square(x).mean(dtype=np.float64))
    assert abs(m1) < 1e-5 and abs(np.sqrt(m2 - m1**2) - 1.0) < 1e-5


def test_real_fashion_mnist_balanced_classes():
    ds = data.load("fashion_mnist", _real("fashion_mnist"), validation=0)
    assert ds.x_train.shape == (60000, 28, 28, 1) and ds.x_val is None
    assert np.bincount(ds.y_train).tolist() == [6000] * 10 and np.bincount(ds.y_test).tolist() == [1000] * 10
