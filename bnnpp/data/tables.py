"""A user's own table: a CSV (header row) or an ``.npz`` read into a :class:`~bnnpp.data.Dataset`
(:func:`from_file`), the :class:`FileTransform` fitted on its training split, and new inputs
(:func:`read_inputs`) or labelled rows (:func:`read_labelled`) for a model fitted on one.

Errors about a CSV's cells name the column and the file's own line number (1-based, counting
the header and any blank lines), so the line can be found in an editor."""

from __future__ import annotations

import csv
import hashlib
import math
import os
import zipfile
import zlib
from dataclasses import dataclass

import numpy as np

from bnnpp.data.dataset import Dataset, _take

TASKS = ("classification", "regression")
#: An integer-valued target with at most this many distinct values is read as class labels
#: (unless ``task=`` says otherwise).
MAX_INFERRED_CLASSES = 10
_MISSING = {"", "na", "nan", "n/a", "null", "none", "?"}


class MissingColumnError(ValueError):
    """New inputs lack a column the model was fitted on. ``detail`` is the message without the
    hint, so that a command can put its own flags in the hint. By default the hint names how to
    pass a header-less CSV (``how``: ``by_name=False`` in Python, ``--x FILE`` for ``bnnpp
    predict``); ``hint`` replaces it where there is no such reading (labelled rows).
    ``column`` is ``"feature"`` or ``"target"``: which kind of column is missing."""

    def __init__(self, detail: str, how: str = "by_name=False", *, hint: str | None = None, column: str = "feature"):
        super().__init__(f"{detail} ({hint or f'a CSV of values only, without a header, is read with {how}'})")
        self.detail = detail
        self.column = column


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
            raise ValueError(
                f"feature {name!r} of row {int(np.flatnonzero(bad[:, j])[0])} is NaN, inf or beyond float32 after "
                f"standardisation (training mean {self.x_mean.ravel()[j]:.3g}, sd {self.x_sd.ravel()[j]:.3g}): "
                "drop or fix that row"
            )
        return x

    def to_dict(self) -> dict:
        """A JSON-ready dict (``metrics.json``'s ``preprocessing``); :meth:`from_dict` reads it."""
        return {
            "features": list(self.features),
            "target": self.target,
            "task": self.task,
            "x_mean": self.x_mean.tolist(),
            "x_sd": self.x_sd.tolist(),
            "y_shift": self.y_shift,
            "y_scale": self.y_scale,
            "classes": None if self.classes is None else list(self.classes),
        }

    @classmethod
    def from_dict(cls, d: dict) -> FileTransform:
        """The transform written by :meth:`to_dict`."""
        return cls(
            tuple(d["features"]),
            d["target"],
            d["task"],
            np.asarray(d["x_mean"], np.float64),
            np.asarray(d["x_sd"], np.float64),
            float(d["y_shift"]),
            float(d["y_scale"]),
            None if d.get("classes") is None else tuple(d["classes"]),
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
    return _numbered_rows(path)[0]


def _numbered_rows(path: str) -> tuple[list[list[str]], list[int]]:
    """The non-blank rows of a UTF-8 CSV file (as :func:`_csv_rows`) and the 1-based line of
    the file each one ends on (blank lines counted)."""
    rows: list[list[str]] = []
    lines: list[int] = []
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            for r in reader:
                if r and any(c.strip() for c in r):
                    rows.append(r)
                    lines.append(reader.line_num)
        return rows, lines
    except csv.Error as e:  # e.g. a cell longer than the csv module's field limit, a NUL byte in a quoted cell
        raise ValueError(f"{path}: not a readable CSV file near line {reader.line_num} ({e}); check that line") from None
    except UnicodeDecodeError as e:
        with open(path, "rb") as raw:
            bom = raw.read(2)
        source = "utf-16" if bom in (b"\xff\xfe", b"\xfe\xff") else "latin1"
        raise ValueError(
            f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); save it as UTF-8, "
            f"e.g. iconv -f {source} -t utf-8 {os.path.basename(path)} > fixed.csv"
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
    header, rows, _ = read_csv_lines(path, columns)
    return header, rows


def _is_number(text: str) -> bool:
    """Whether ``text`` parses as a float (``nan`` and ``inf`` included)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_csv_lines(path: str, columns: tuple[str, ...] | None = None) -> tuple[list[str], list[list[str]], list[int]]:
    """:func:`read_csv` and the file's 1-based line number of each data row (counting the header
    and the blank lines it skips), for messages that name a cell's line."""
    rows, lines = _numbered_rows(path)
    if len(rows) < 2:
        raise ValueError(f"{path}: needs a header row and at least one data row")
    header = [h.strip() for h in rows[0]]
    if len(header) == 1:
        for sep, name in ((";", "semicolon"), ("\t", "tab")):
            if sep in header[0]:
                raise ValueError(f"{path}: the header {header[0]!r} looks {name}-separated; bnnpp reads comma-separated CSV: convert it")
    if all(_is_number(h) for h in header):
        raise ValueError(f"{path}: the first row holds numbers ({', '.join(header[:3])}, ...), not column names: add a header row")
    if any(not h for h in header) or len(set(header)) != len(header):
        raise ValueError(f"{path}: the header row must name every column once, got {header}")
    for r, line in zip(rows[1:], lines[1:], strict=True):
        if len(r) != len(header):
            raise ValueError(f"{path}: line {line} has {len(r)} fields but the header has {len(header)}")
    missing = [c for c in columns or () if c not in header]
    if missing:
        raise ValueError(f"{path}: no column {', '.join(map(repr, missing))}; its columns are {', '.join(header)}")
    return header, [[c.strip() for c in r] for r in rows[1:]], lines[1:]


def numeric_column(path: str, name: str, cells: list[str], lines: list[int] | None = None) -> np.ndarray:
    """A CSV column as float64; one-line ValueError naming the first empty/NaN or non-numeric
    cell by its line (``lines``: the file's line of each cell, default ``2, 3, …``)."""
    out = np.empty(len(cells))
    for i, c in enumerate(cells):
        line = lines[i] if lines is not None else i + 2
        if c.lower() in _MISSING:
            raise ValueError(f"{path}: column {name!r} has a missing value ({c!r}) on line {line}: drop or impute those rows")
        try:
            if "_" in c:  # Python's float() reads 1_000 as 1000; a CSV cell with a digit separator is text
                raise ValueError(c)
            out[i] = float(c)
        except ValueError:
            raise ValueError(
                f"{path}: column {name!r} is not numeric (line {line}: {c!r}): encode it as numbers or drop the column"
            ) from None
        if not np.isfinite(out[i]):
            raise ValueError(f"{path}: column {name!r} holds {c!r} on line {line}: drop or impute those rows")
    return out


def _read_table(path: str, target: str | None) -> tuple[tuple[str, ...], str, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``(features, target, x, y, x_test, y_test)`` from a CSV or ``.npz`` file (raw values;
    ``y`` may hold strings for a CSV's label column)."""
    if path.endswith(".npz"):
        arrays = load_npz(path)
        if "x" not in arrays or "y" not in arrays:
            raise ValueError(
                f"{path}: an .npz needs arrays 'x' (inputs, one row each) and 'y' (targets); it has {', '.join(arrays) or 'none'}"
            )
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
        return (
            tuple(f"x{i}" for i in range(int(np.prod(x.shape[1:])))),
            "y",
            x.astype(np.float64),
            y,
            None if xt is None else xt.astype(np.float64),
            yt,
        )
    if target is None:
        raise ValueError(f"{path}: name the target column (target=..., CLI --target COLUMN)")
    header, rows, lines = read_csv_lines(path, (target,))
    features = tuple(h for h in header if h != target)
    if not features:
        raise ValueError(f"{path}: no feature columns besides the target {target!r}")
    cols = list(zip(*rows, strict=True))
    x = np.stack([numeric_column(path, f, list(cols[header.index(f)]), lines) for f in features], axis=1)
    labels = list(cols[header.index(target)])
    try:
        y: np.ndarray = numeric_column(path, target, labels, lines)
    except ValueError:
        empty = [i for i, c in enumerate(labels) if c.lower() in _MISSING]
        if empty:
            raise ValueError(f"{path}: column {target!r} has a missing value on line {lines[empty[0]]}: drop those rows") from None
        y = np.asarray(labels)  # text labels: classes
    return features, target, x, y, None, None


def _infer_task(y: np.ndarray, task: str | None, path: str) -> str:
    numeric = y.dtype.kind in "biuf"
    values = np.asarray(y, np.float64) if numeric else None
    # whole numbers a label can be: beyond 2**53 every float64 is "whole", which says nothing
    integer = numeric and bool(np.all((values == np.round(values)) & (np.abs(values) < 2.0**53)))
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
    return _take(
        Dataset(
            transform.inputs(x),
            ys,
            transform.inputs(x_test),
            yts,
            task,
            num_classes,
            name,
            y_shift=shift,
            y_scale=scale,
            transform=transform,
        ),
        shard,
    )


def _check_standardisable(path: str, features: tuple[str, ...], x: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> None:
    """Refuse a feature whose mean or sd overflows float64 (values near ±1e308), which would
    otherwise standardise to a column of zeros; one line naming the column."""
    bad = ~(np.isfinite(mean) & np.isfinite(sd))
    if bad.any():
        j = int(np.flatnonzero(bad.ravel())[0])
        name = features[j] if len(features) == bad.size else f"x[..., {j}]"
        top = float(np.max(np.abs(x.reshape(len(x), -1)[:, j])))
        raise ValueError(
            f"{path}: column {name!r} holds values too large to standardise (up to {top:.3g}): rescale it, e.g. to thousands or millions"
        )


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
            header, rows, lines = read_csv_lines(path, transform.features)
        except ValueError as e:
            if "no column" not in str(e):
                raise
            raise MissingColumnError(str(e), "by_name=False") from None
        cols = list(zip(*rows, strict=True))
        x = np.stack([numeric_column(path, f, list(cols[header.index(f)]), lines) for f in transform.features], axis=1)
    else:
        rows, lines = _numbered_rows(path)
        if not rows:
            raise ValueError(f"{path}: no rows")
        if any(len(r) != len(transform.features) for r in rows):
            raise ValueError(
                f"{path}: every row must hold the {len(transform.features)} feature values ({', '.join(transform.features)}), no header"
            )
        cols = list(zip(*rows, strict=True))
        x = np.stack([numeric_column(path, f, [c.strip() for c in cols[i]], lines) for i, f in enumerate(transform.features)], axis=1)
    if x.ndim >= 1 and x.shape[0] == 0:
        raise ValueError(f"{path}: no rows to predict")
    if x.ndim < 2 or x.shape[1:] != transform.x_mean.shape:
        raise ValueError(
            f"{path}: inputs must have {_row_shape(transform.x_mean.shape)} per row like the training data, got shape {x.shape}"
        )
    return x


LABELLED_HINT = "labelled rows need a CSV header naming the run's features and its target, or an .npz with arrays x and y"
"""The hint of a :class:`MissingColumnError` for labelled rows, which have no header-less CSV form."""


def read_labelled(path: str | os.PathLike, transform: FileTransform, target: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Labelled new rows for a model fitted on a :class:`FileTransform` (or, with
    ``transform.classes`` ``None`` for a classifier, on class indices).

    Args:
        path: a CSV with a header naming the features (any order; other columns are ignored)
            and the target column, or an ``.npz`` with arrays ``x`` and ``y`` (or ``x_test``
            and ``y_test``).
        transform: the run's transform (its standardisation is applied to the inputs).
        target: the CSV's target column (default: ``transform.target``).

    Returns:
        ``(x, y)``: model inputs ``(n, ...)`` float32 and the targets as the model sees them —
        class indices into ``transform.classes`` ``(n,)`` int32, or regression targets
        standardised with ``transform.y_shift``/``y_scale`` ``(n,)`` float32.

    Raises:
        MissingColumnError: a feature or the target column is not in the CSV's header (one
            line; ``column`` says which kind, the hint names the Python arguments).
        ValueError: one line naming the file, the column and the CSV line (or the array index
            of an ``.npz``) of the first empty, non-numeric, fractional or unknown label.
    """
    path = os.fspath(path)
    try:
        raw = read_inputs(path, transform)
    except MissingColumnError as e:
        raise MissingColumnError(e.detail, hint=LABELLED_HINT) from None
    try:
        x = transform.inputs(raw)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
    lines: list[int] | None = None
    if path.endswith(".npz"):
        arrays = load_npz(path)
        name = "y" if "x" in arrays else "y_test"
        if name not in arrays:
            raise ValueError(f"{path}: labelled rows need an array 'y' beside 'x' (or 'y_test' beside 'x_test')")
        labels = arrays[name]
    elif path.endswith(".csv"):
        name = target or transform.target
        try:
            header, rows, lines = read_csv_lines(path, (name,))
        except ValueError as e:
            if "no column" not in str(e):
                raise
            how = "target=COLUMN names the file's target column" + ("" if target else f" (the run's target is {name!r})")
            raise MissingColumnError(str(e), hint=how, column="target") from None
        labels = np.asarray([r[header.index(name)] for r in rows])
    else:
        raise ValueError(f"{path}: labelled rows must be a .csv or .npz file")
    if labels.shape != (len(x),):
        raise ValueError(f"{path}: {name} must hold one target per row, shape ({len(x)},), got {labels.shape}")
    if transform.task == "regression":
        if labels.dtype.kind in "biuf":
            y = labels.astype(np.float64)
            bad = np.flatnonzero(~np.isfinite(y))
            if bad.size:
                raise ValueError(f"{path}: array {name!r} holds {y[bad[0]]} at index {bad[0]}: drop or impute those rows")
        else:
            y = numeric_column(path, name, [str(v).strip() for v in labels], lines)
        return x, ((y - transform.y_shift) / transform.y_scale).astype(np.float32)
    return x, class_indices(path, name, labels, transform.classes, lines)


def class_indices(path: str, name: str, labels, classes: tuple | None, lines: list[int] | None = None) -> np.ndarray:
    """Class labels as indices into ``classes`` (``None``: the labels are the indices 0, 1, …).

    Args:
        path: the file, for messages.
        name: the label column (CSV) or array (``.npz``).
        labels: ``(n,)`` cells as text (a CSV's) or an array of numbers or text (an ``.npz``'s).
        classes: the sorted class labels a run was fitted on (numbers or text), or ``None``.
        lines: a CSV's line number of each cell (:func:`read_csv_lines`); ``None`` for an
            ``.npz``, whose cells are named by their index.

    Returns:
        ``(n,)`` int32 class indices. A one-line ValueError names the column, the line (or
        index) and the value of the first empty cell, the first number that is not a whole
        number where the classes are numbers, and the labels the run was not fitted on.
    """

    def where(i: int) -> str:
        return f"column {name!r} on line {lines[i]}" if lines is not None else f"array {name!r} at index {i}"

    numeric = classes is None or (len(classes) > 0 and all(isinstance(c, (int, np.integer)) for c in classes))
    known = ", ".join(map(str, classes)) if classes is not None else "0, 1, …"
    keys = []
    for i, v in enumerate(np.asarray(labels).tolist()):
        text = str(v).strip()
        if text.lower() in _MISSING:
            raise ValueError(f"{path}: {where(i)} has no label ({text!r}): drop that row or give its class")
        if not numeric:
            keys.append(text)
            continue
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"{path}: {where(i)} holds {text!r}, not a class of this run ({known})") from None
        if not (math.isfinite(number) and number == round(number)) or (classes is None and number < 0):
            raise ValueError(f"{path}: {where(i)} holds {text}, not a class label: this run's classes are the whole numbers {known}")
        keys.append(str(int(number)))
    if classes is None:
        return np.asarray([int(k) for k in keys], np.int32)
    index = {str(c): j for j, c in enumerate(classes)}
    unknown = [i for i, k in enumerate(keys) if k not in index]
    if unknown:
        others = sorted({keys[i] for i in unknown} - {keys[unknown[0]]})
        also = f" (and {len(others)} other unknown label(s): {', '.join(others[:5])}{', …' if len(others) > 5 else ''})" if others else ""
        raise ValueError(
            f"{path}: {where(unknown[0])} holds {keys[unknown[0]]!r}, a label the run was not fitted on{also}; its classes are {known}"
        )
    return np.asarray([index[k] for k in keys], np.int32)
