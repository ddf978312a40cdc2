"""MNIST and Fashion-MNIST from local files (:func:`load`; never downloaded): the IDX files
(:mod:`bnnpp.data.idx`) or a tensorflow-datasets data dir (:mod:`bnnpp.data.tfds_source`)."""

from __future__ import annotations

import os
from fractions import Fraction

import numpy as np

from bnnpp.data.dataset import Dataset, shard_rows
from bnnpp.data.idx import (
    _MAX_TRAIN,
    _NUM_CLASSES,
    _SIDE,
    IDX_FILES,
    _files_list,
    _idx_folder,
    _IdxTrain,
    _read_idx_folder,
)
from bnnpp.data.tfds_source import _default_tfds_dir, _read_tfds, _tfds_builder, _TfdsTrain

IMAGE_SETS = ("mnist", "fashion_mnist")
NORMALIZATIONS = ("255", "126", "standardize")


def load(
    name: str,
    data_dir: str | os.PathLike | None = None,
    *,
    normalize: str = "255",
    validation: int = 10000,
    flatten: bool = False,
    seed: int = 0,
    tfds_data_dir: str | os.PathLike | None = None,
    train_subset: int | None = None,
    shard: tuple[int, int] | None = None,
) -> Dataset:
    """MNIST or Fashion-MNIST from local files (nothing is downloaded).

    Where the data come from, first match wins:

    1. ``data_dir`` given: the four original IDX files (:data:`IDX_FILES`) in ``data_dir`` or
       in ``data_dir/<name>``.
    2. ``tfds_data_dir`` given: the dataset prepared there by tensorflow-datasets in the
       ``array_record`` format, read with ``tfds.data_source`` (no TensorFlow needed).
    3. Neither given: the tensorflow-datasets data dir (``$TFDS_DATA_DIR``, else
       ``~/tensorflow_datasets``) if ``<name>`` is prepared there, else the IDX files in
       ``$BNNPP_DATA_DIR/<name>``; otherwise one error that names both ways.

    The IDX headers are checked (magic number 2051 for images / 2049 for labels, counts
    against the file size and against each other, 28×28 pixels) before any pixel is used.

    Args:
        name: ``"mnist"`` or ``"fashion_mnist"``.
        data_dir: a folder holding the four IDX ``.gz`` files, or a parent holding ``<name>/``.
        normalize: ``"255"`` (pixels / 255, in [0, 1]), ``"126"`` (pixels / 126, as Blundell et
            al. 2015, sec. 5.1) or ``"standardize"`` (minus the mean, over the sd, of all pixels
            of the training split; validation and test use the same two numbers).
        validation: the last ``validation`` of the 60,000 training images become the
            validation split (10,000 gives Blundell et al.'s 50,000 / 10,000); 0 for none.
        flatten: return images as ``(n, 784)`` rows (for an MLP) instead of ``(n, 28, 28, 1)``.
        seed: has no effect (the split is fixed: the last images); accepted so that every
            loader takes a seed.
        tfds_data_dir: the tensorflow-datasets data dir to read (see above).
        train_subset: train on the first ``train_subset`` training images only (``None``: all).
        shard: ``(process, processes)``: read only process ``p``'s contiguous block of the
            ``N`` training images (:func:`shard_rows`; ``N`` must split evenly), plus the
            validation and test splits whole. IDX: the images file is inflated as a stream
            and only those rows are kept; tensorflow-datasets: the split ``train[a:b]`` is
            read. With ``normalize="standardize"`` the mean and sd of every training pixel
            are summed in a second streamed pass (exact integer sums), so every process
            uses the same two numbers.

    Returns:
        A :class:`Dataset` with float32 images ``(n, 28, 28, 1)`` (or ``(n, 784)``) and int32
        labels ``(n,)`` in 0..9: ``x_train`` ``(60000 − validation, ...)``, ``x_val``
        ``(validation, ...)`` (``None`` when 0), ``x_test`` ``(10000, ...)``; task
        ``"classification"``, ``num_classes`` 10; with ``shard`` ``x_train`` holds the block
        ``rows`` (a :class:`Rows`).
    """
    normalize = _check_load_args(name, data_dir, normalize, validation, flatten, seed, tfds_data_dir, train_subset)
    kind, where = _locate(name, data_dir, tfds_data_dir)
    if shard is None:
        splits, shift, div = _read_whole(name, kind, where, validation, train_subset, normalize)
        rows = None
    else:
        splits, shift, div, rows = _read_share(name, kind, where, validation, train_subset, normalize, shard)

    def prep(x, y):
        if x is None:
            return None, None
        out = x.astype(np.float32)
        if shift:
            out -= np.float32(shift)
        out /= np.float32(div)
        out = out.reshape(len(out), -1) if flatten else out.reshape(len(out), _SIDE, _SIDE, 1)
        return out, y.astype(np.int32)

    (x_train, y_train), (x_test, y_test), (x_val, y_val) = (prep(*split) for split in splits)
    return Dataset(x_train, y_train, x_test, y_test, "classification", _NUM_CLASSES, name, x_val, y_val, rows=rows)


def _check_load_args(name, data_dir, normalize, validation, flatten, seed, tfds_data_dir, train_subset) -> str:
    """Refuse bad :func:`load` arguments (one line each); returns ``normalize`` as a string."""
    if name not in IMAGE_SETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(IMAGE_SETS)}")
    if isinstance(normalize, int) and not isinstance(normalize, bool):
        normalize = str(normalize)
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"unknown normalize={normalize!r}; choose one of {', '.join(NORMALIZATIONS)}")
    if isinstance(validation, bool) or not isinstance(validation, (int, np.integer)) or not 0 <= validation < _MAX_TRAIN:
        raise ValueError(f"validation must be an integer in [0, {_MAX_TRAIN - 1}] (training images kept apart), got {validation!r}")
    if not isinstance(flatten, (bool, np.bool_)):
        raise TypeError(f"flatten must be True or False, got {flatten!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer ≥ 0, got {seed!r}")
    if data_dir is not None and tfds_data_dir is not None:
        raise ValueError("pass data_dir (IDX files) or tfds_data_dir (tensorflow-datasets), not both")
    for arg, value in (("data_dir", data_dir), ("tfds_data_dir", tfds_data_dir)):
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"{arg} must be a folder path, got {value!r}")

    if train_subset is not None and (isinstance(train_subset, bool) or not isinstance(train_subset, (int, np.integer)) or train_subset < 1):
        raise ValueError(f"train_subset must be an integer ≥ 1 (the first N training images), got {train_subset!r}")
    return normalize


def _read_whole(name, kind, where, validation, train_subset, normalize):
    """Every split read whole: ``((x_train, y_train), (x_test, y_test), (x_val, y_val)), shift, div``
    (uint8 images; the validation pair ``(None, None)`` when ``validation`` is 0)."""
    x_train, y_train, x_test, y_test = _read_idx_folder(name, where) if kind == "idx" else _read_tfds(name, where)
    n = len(x_train)
    _check_validation(validation, n)
    x_val, y_val = (x_train[n - validation :], y_train[n - validation :]) if validation else (None, None)
    x_train, y_train = x_train[: n - validation], y_train[: n - validation]
    if normalize == "standardize":
        # scalar mean and sd over every pixel of the training split (float64 sums: exact)
        shift, div = float(x_train.mean(dtype=np.float64)), float(x_train.std(dtype=np.float64))
    else:
        shift, div = 0.0, float(normalize)
    if train_subset is not None:
        x_train, y_train = x_train[: _check_subset(train_subset, len(x_train))], y_train[:train_subset]
    return ((x_train, y_train), (x_test, y_test), (x_val, y_val)), shift, div


def _read_share(name, kind, where, validation, train_subset, normalize, shard):
    """Process ``p``'s block of the training rows plus the validation and test splits whole:
    as :func:`_read_whole`, and the :class:`Rows` read."""
    source = _IdxTrain(name, where) if kind == "idx" else _TfdsTrain(name, where)
    n = source.n
    _check_validation(validation, n)
    m = n - validation
    rows = shard_rows(m if train_subset is None else _check_subset(train_subset, m), shard)
    x_train, y_train = source.rows(rows.start, rows.stop)
    x_val, y_val = source.rows(m, n) if validation else (None, None)
    x_test, y_test = source.test()
    if normalize == "standardize":  # every training pixel, streamed: the same numbers on every process
        shift, div = _mean_sd(*source.sums(m), m * _SIDE * _SIDE)
    else:
        shift, div = 0.0, float(normalize)
    return ((x_train, y_train), (x_test, y_test), (x_val, y_val)), shift, div, rows


def _check_validation(validation: int, n: int) -> None:
    if validation >= n:
        raise ValueError(f"validation={validation} leaves no training images: the training split has {n}; use validation < {n}")


def _check_subset(subset: int, n: int) -> int:
    if subset > n:
        raise ValueError(f"train_subset={subset} exceeds the {n} training images (CLI: --train-subset); use at most {n}")
    return int(subset)


def _mean_sd(s1: int, s2: int, count: int) -> tuple[float, float]:
    """Mean and (population) sd of ``count`` integers from their exact sum and sum of squares:
    the mean is what ``np.mean(dtype=float64)`` gives (integer partial sums below 2**53 are
    exact in float64), the variance ``(count·s2 − s1²) / count²`` is exact before one rounding."""
    return s1 / count, float(np.sqrt(float(Fraction(count * s2 - s1 * s1, count * count))))


def _both_ways(name: str, tfds_dir: str) -> str:
    return (
        f"either prepare it with tensorflow-datasets in array_record format into its data dir "
        f"(`tfds build {name} --file_format=array_record --data_dir {tfds_dir}`; the data dir is $TFDS_DATA_DIR "
        f"or ~/tensorflow_datasets), or put the four IDX files ({_files_list()}) in a folder DIR and pass "
        f"data_dir=DIR (CLI: --data-dir DIR) or set BNNPP_DATA_DIR so that $BNNPP_DATA_DIR/{name} is DIR"
    )


def _locate(name: str, data_dir, tfds_data_dir) -> tuple[str, str]:
    """Where :func:`load` reads: ``("idx", folder)`` or ``("tfds", data dir)`` (see its docstring)."""
    if data_dir is not None:
        return "idx", _idx_folder(name, os.fspath(data_dir), "data_dir")
    if tfds_data_dir is not None:
        builder, why = _tfds_builder(name, os.fspath(tfds_data_dir))
        if builder is None:
            raise ValueError(f"tfds_data_dir {os.fspath(tfds_data_dir)}: {why}")
        return "tfds", os.fspath(tfds_data_dir)
    return _default_source(name)


def _default_source(name: str) -> tuple[str, str]:
    """No folder given: the tfds data dir if prepared there, else ``$BNNPP_DATA_DIR/<name>``."""
    tfds_dir = _default_tfds_dir()
    builder, why = _tfds_builder(name, tfds_dir)
    if builder is not None:
        return "tfds", tfds_dir
    env = os.environ.get("BNNPP_DATA_DIR")
    if env:
        folder = os.path.join(env, name)
        if all(os.path.isfile(os.path.join(folder, f)) for f in IDX_FILES.values()):
            return "idx", folder
        idx_why = f"$BNNPP_DATA_DIR/{name} ({folder}) does not hold the four IDX files"
    else:
        idx_why = "BNNPP_DATA_DIR is not set and no data_dir was given"
    raise ValueError(f"{name} not found: tensorflow-datasets dir {tfds_dir}: {why}; {idx_why}. To provide it, {_both_ways(name, tfds_dir)}")
