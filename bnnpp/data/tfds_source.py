"""MNIST / Fashion-MNIST prepared by tensorflow-datasets, read through ``tfds.data_source``
(no TensorFlow needed): whole, or one process's share by split slices."""

from __future__ import annotations

import os

import numpy as np

from bnnpp.data.idx import _CHUNK, _NUM_CLASSES, _SIDE

# tfds formats that tfds.data_source can read by index (TFRecord cannot)
_RANDOM_ACCESS_FORMATS = ("array_record", "parquet")


def _default_tfds_dir() -> str:
    return os.environ.get("TFDS_DATA_DIR") or os.path.join(os.path.expanduser("~"), "tensorflow_datasets")


def _tfds_builder(name: str, tfds_dir: str):
    """``(builder, "")`` when ``name`` is prepared in ``tfds_dir`` in a format that
    ``tfds.data_source`` reads, else ``(None, reason)``. Reads local metadata only."""
    if not os.path.isdir(os.path.join(tfds_dir, name)):
        return None, f"{name} is not prepared there (no {os.path.join(tfds_dir, name)})"
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        return None, 'tensorflow-datasets is not installed: pip install "bnnpp[tfds]"'
    builder = tfds.builder(name, data_dir=tfds_dir)
    if not builder.is_prepared():
        return None, f"{name} is not prepared there (no dataset_info.json in {builder.data_dir})"
    fmt = builder.info.file_format
    fmt = getattr(fmt, "value", fmt)
    if fmt not in _RANDOM_ACCESS_FORMATS:
        return None, (
            f"{name} is prepared there as {fmt}, which tfds.data_source cannot read; prepare it again with --file_format=array_record"
        )
    return builder, ""


def _read_tfds(name: str, tfds_dir: str) -> tuple[np.ndarray, ...]:
    """x_train, y_train, x_test, y_test as uint8 through ``tfds.data_source`` (no TensorFlow)."""
    import tensorflow_datasets as tfds

    sources = tfds.data_source(name, split=["train", "test"], data_dir=tfds_dir, download=False)
    out = []
    for split, source in zip(("train", "test"), sources, strict=True):
        out += _tfds_arrays(source, 0, len(source), name, tfds_dir, split)
    return tuple(out)


def _tfds_arrays(source, a: int, b: int, name: str, tfds_dir: str, split: str) -> list[np.ndarray]:
    """Records ``[a, b)`` of a ``tfds.data_source`` as ``[images uint8 (m, 28, 28), labels (m,)]``."""
    # one record at a time: data_source decodes each PNG-encoded image on its own
    records = [source[i] for i in range(a, b)]
    if not records:
        raise ValueError(f"tensorflow-datasets {name} in {tfds_dir} has an empty {split} split: prepare it again")
    x = np.stack([np.asarray(r["image"]) for r in records])
    y = np.asarray([r["label"] for r in records])
    if x.shape[1:] != (_SIDE, _SIDE, 1) or x.dtype != np.uint8:
        raise ValueError(f"tensorflow-datasets {name} in {tfds_dir}: images are {x.dtype} {x.shape[1:]}, expected uint8 (28, 28, 1)")
    if y.min() < 0 or y.max() >= _NUM_CLASSES:
        raise ValueError(f"tensorflow-datasets {name} in {tfds_dir}: labels outside 0..9")
    return [x[..., 0], y]


class _TfdsTrain:
    """The tensorflow-datasets training split read by rows (``load(shard=...)``): each read is
    the split slice ``train[a:b]`` (tfds' own slicing API), so only those records are read."""

    def __init__(self, name: str, tfds_dir: str):
        import tensorflow_datasets as tfds

        self.tfds, self.name, self.dir = tfds, name, tfds_dir
        self.n = int(tfds.builder(name, data_dir=tfds_dir).info.splits["train"].num_examples)

    def _read(self, split: str) -> list[np.ndarray]:
        source = self.tfds.data_source(self.name, split=split, data_dir=self.dir, download=False)
        return _tfds_arrays(source, 0, len(source), self.name, self.dir, split)

    def rows(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        x, y = self._read(f"train[{a}:{b}]")
        return x, y

    def sums(self, stop: int) -> tuple[int, int]:
        s1 = s2 = 0
        for a in range(0, stop, _CHUNK):
            c = self.rows(a, min(stop, a + _CHUNK))[0].astype(np.int64)
            s1, s2 = s1 + int(c.sum()), s2 + int((c * c).sum())
        return s1, s2

    def test(self) -> tuple[np.ndarray, np.ndarray]:
        x, y = self._read("test")
        return x, y
