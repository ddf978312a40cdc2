"""Datasets: the synthetic sets of the source experiments, generated locally (no download),
MNIST / Fashion-MNIST read from local files (:func:`load`; never downloaded), the UCI
regression benchmark (:func:`uci`) and a user's own CSV / ``.npz`` (:func:`from_file`).

Every loader returns a :class:`Dataset` of numpy arrays. The 2-D sets follow Zharikov,
Isachenko & Bochkarev: n points, split 70/30 into train and test (700/300 for the default
n=1000), features standardised with the training mean and standard deviation.

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

The modules: :mod:`~bnnpp.data.dataset` (the record), :mod:`~bnnpp.data.synthetic`,
:mod:`~bnnpp.data.images` (with :mod:`~bnnpp.data.idx` and :mod:`~bnnpp.data.tfds_source`),
:mod:`~bnnpp.data.uci_sets` and :mod:`~bnnpp.data.tables`; every public name is re-exported here.
"""

from __future__ import annotations

from bnnpp.data.dataset import Dataset, Rows, shard_rows
from bnnpp.data.idx import IDX_FILES
from bnnpp.data.idx import MAX_IDX_BYTES as MAX_IDX_BYTES
from bnnpp.data.idx import _gunzip as _gunzip
from bnnpp.data.images import IMAGE_SETS, NORMALIZATIONS, load
from bnnpp.data.synthetic import SYNTHETIC, circles, load_synthetic, moons, sinusoid
from bnnpp.data.tables import MAX_INFERRED_CLASSES as MAX_INFERRED_CLASSES
from bnnpp.data.tables import TASKS as TASKS
from bnnpp.data.tables import FileTransform, MissingColumnError, file_sha256, from_file, load_npy, load_npz
from bnnpp.data.tables import numeric_column as numeric_column
from bnnpp.data.tables import read_csv as read_csv
from bnnpp.data.tables import read_inputs as read_inputs
from bnnpp.data.uci_sets import UCI_SETS, uci, uci_num_splits

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
