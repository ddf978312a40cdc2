"""One process's share of the training rows (``shard=(process, processes)``, bnnpp.data):
every loader returns exactly its contiguous block of the rows it returns whole, the
validation and test splits whole, the same standardisation, and one-line errors when the
rows do not split; a share fitted without the other processes is refused before compiling.
The multi-process fits themselves are in test_sharding.py (two processes, slow)."""

from __future__ import annotations

import numpy as np
import pytest
from test_data_mnist import DATA_DIR, prepare_tfds, tiny_parts, write_idx

import bnnpp
from bnnpp import data


def _blocks(load, processes: int) -> list[data.Dataset]:
    return [load((p, processes)) for p in range(processes)]


def _assert_blocks_make_whole(whole: data.Dataset, parts: list[data.Dataset]) -> None:
    """The blocks, in process order, are the whole training split; the rest is unchanged."""
    n, procs = len(whole.x_train), len(parts)
    for p, part in enumerate(parts):
        assert part.rows == data.Rows(p * n // procs, (p + 1) * n // procs, n)
        assert len(part.x_train) == part.rows.count == n // procs
        np.testing.assert_array_equal(part.x_test, whole.x_test)
        np.testing.assert_array_equal(part.y_test, whole.y_test)
        if whole.x_val is not None:
            np.testing.assert_array_equal(part.x_val, whole.x_val)
    np.testing.assert_array_equal(np.concatenate([p.x_train for p in parts]), whole.x_train)
    np.testing.assert_array_equal(np.concatenate([p.y_train for p in parts]), whole.y_train)
    assert whole.rows is None


def test_shard_rows_blocks_and_errors():
    assert data.shard_rows(700, (0, 2)) == data.Rows(0, 350, 700)
    assert data.shard_rows(700, (3, 4)) == data.Rows(525, 700, 700)
    with pytest.raises(ValueError, match="700 training rows do not split evenly over 3 processes: use a multiple of 3 rows") as e:
        data.shard_rows(700, (0, 3))
    assert "\n" not in str(e.value)
    for bad in ((2, 2), (-1, 2), (0, 0)):
        with pytest.raises(ValueError, match="0 ≤ process < processes"):
            data.shard_rows(10, bad)
    with pytest.raises(TypeError, match="two integers"):
        data.shard_rows(10, (0.5, 2))


def test_generated_sets_and_files_give_their_block(tmp_path):
    _assert_blocks_make_whole(data.moons(), _blocks(lambda s: data.moons(shard=s), 4))
    _assert_blocks_make_whole(data.circles(seed=3), _blocks(lambda s: data.load_synthetic("circles", seed=3, shard=s), 2))
    _assert_blocks_make_whole(data.sinusoid(), _blocks(lambda s: data.sinusoid(shard=s), 2))
    rng = np.random.default_rng(0)
    path = tmp_path / "table.npz"
    np.savez(path, x=rng.normal(size=(50, 3)), y=rng.integers(0, 3, 50))
    whole = data.from_file(path, test_fraction=0.2)  # 40 training rows
    parts = _blocks(lambda s: data.from_file(path, test_fraction=0.2, shard=s), 4)
    _assert_blocks_make_whole(whole, parts)
    for part in parts:  # the standardisation of every training row, on every process
        np.testing.assert_array_equal(part.transform.x_mean, whole.transform.x_mean)
    with pytest.raises(ValueError, match="40 training rows do not split evenly over 3 processes"):
        data.from_file(path, shard=(0, 3))


@pytest.mark.parametrize("normalize", ["255", "standardize"])
def test_idx_reads_only_its_rows(tmp_path, normalize):
    """The IDX images are read by rows (validation 5 of 20: 15 training rows, 3 processes);
    with train_subset the block is of the subset; standardisation uses every training pixel."""
    folder = write_idx(tmp_path / "mnist", tiny_parts())
    whole = data.load("mnist", folder, validation=5, normalize=normalize)
    _assert_blocks_make_whole(whole, _blocks(lambda s: data.load("mnist", folder, validation=5, normalize=normalize, shard=s), 3))
    sub = data.load("mnist", folder, validation=5, normalize=normalize, train_subset=6, flatten=True)
    assert len(sub.x_train) == 6
    _assert_blocks_make_whole(sub, _blocks(
        lambda s: data.load("mnist", folder, validation=5, normalize=normalize, train_subset=6, flatten=True, shard=s), 2))
    with pytest.raises(ValueError, match="15 training rows do not split evenly over 2 processes"):
        data.load("mnist", folder, validation=5, shard=(0, 2))
    with pytest.raises(ValueError, match="train_subset=16 exceeds the 15 training images"):
        data.load("mnist", folder, validation=5, train_subset=16, shard=(0, 1))


def test_idx_share_rejects_a_truncated_images_file(tmp_path):
    folder = write_idx(tmp_path / "mnist", tiny_parts())
    path = folder / data.IDX_FILES["x_train"]
    import gzip

    raw = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(raw[:-100]))
    with pytest.raises(ValueError, match="is truncated: its header announces 20 images"):
        data.load("mnist", folder, validation=5, shard=(0, 3))


def test_real_mnist_share_standardised_like_the_whole():
    """On the real files the streamed integer sums give the same float32 shift and scale as
    numpy over the whole split: every pixel of block 1 of 4 equals the whole load's."""
    if not (DATA_DIR / "mnist").is_dir():
        pytest.skip(f"no MNIST files in {DATA_DIR}")
    whole = data.load("mnist", DATA_DIR, normalize="standardize", flatten=True)
    part = data.load("mnist", DATA_DIR, normalize="standardize", flatten=True, shard=(1, 4))
    assert part.rows == data.Rows(12500, 25000, 50000)
    np.testing.assert_array_equal(part.x_train, whole.x_train[12500:25000])
    np.testing.assert_array_equal(part.x_val, whole.x_val)


def test_tfds_reads_the_train_slice(tmp_path):
    """tensorflow-datasets: the block is read as the split slice train[a:b] of a prepared
    ArrayRecord set (real files rather than tfds.testing.mock_data, whose mock source has the
    same length for every split string and so could not show the slice was taken)."""
    parts = tiny_parts()
    prepare_tfds(tmp_path / "tfds", "mnist", parts)
    whole = data.load("mnist", tfds_data_dir=tmp_path / "tfds", validation=2, normalize="standardize")
    shares = _blocks(lambda s: data.load("mnist", tfds_data_dir=tmp_path / "tfds", validation=2, normalize="standardize", shard=s), 2)
    _assert_blocks_make_whole(whole, shares)
    np.testing.assert_array_equal(shares[1].y_train, parts["y_train"][9:18])


def test_a_share_alone_is_refused_before_compiling(compile_counter):
    """A process's share fitted without the other processes (or without a mesh) is one line,
    before anything compiles; a 'share' of every row is the ordinary fit."""
    net = bnnpp.models.mlp((3,), likelihood="categorical", num_classes=2)
    before = compile_counter()
    half = data.moons(shard=(0, 2))
    for kw in ({}, {"devices": 1}):
        with pytest.raises(ValueError, match=r"holds training rows \[0, 350\) of 700, one process's share") as e:
            bnnpp.fit(net, half, method="map", num_steps=5, progress=False, **kw)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="needs every training row in every process"):
        bnnpp.fit(net, half, method="laplace", progress=False)
    assert compile_counter() == before
    one = bnnpp.fit(net, data.moons(shard=(0, 1)), method="map", num_steps=5, progress=False)
    two = bnnpp.fit(net, data.moons(), method="map", num_steps=5, progress=False)
    for k in one.samples:
        np.testing.assert_array_equal(one.samples[k], two.samples[k])
