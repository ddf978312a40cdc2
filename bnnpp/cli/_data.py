"""A user's own ``.csv``/``.npz`` on the command line: the flags that describe it and the data
record every command loads it from (``bnnpp fit``, ``compare``, ``sweep``, ``evaluate``).

The record (``{"data": absolute path, "sha256", "target", "task", "test_fraction", "seed"}``)
is what :func:`bnnpp.runs.dataset_from_record` reads the file back from, so a run folder or a
comparison names exactly the bytes it was fitted to.
"""

from __future__ import annotations

import os

from bnnpp import data
from bnnpp.data import IMAGE_SETS, SYNTHETIC, TASKS

__all__ = ["FILE_SUFFIXES", "add_file_flags", "check_builtin", "check_file", "file_record", "is_file_data", "labelled_rows_message"]

FILE_SUFFIXES = (".csv", ".npz")
"""The file types ``--data`` takes besides the built-in names."""


def is_file_data(name: str) -> bool:
    """Whether ``--data`` names a user's file rather than a built-in set."""
    return name not in SYNTHETIC and name not in IMAGE_SETS


def add_file_flags(group) -> None:
    """Add ``--target``, ``--task`` and ``--test-fraction`` (your own file's flags) to an
    argparse parser or argument group; each defaults to ``None`` (unset)."""
    group.add_argument("--target", default=None, help="a .csv's target column")
    group.add_argument(
        "--task",
        default=None,
        choices=list(TASKS),
        help="your file's task (default: inferred: text or integer labels with at most 10 values are classes, other numbers regression)",
    )
    group.add_argument(
        "--test-fraction",
        type=float,
        default=None,
        help="your file without x_test: share of rows held out "
        "for testing, a random subset drawn with --seed (default 0.2); inputs (and regression targets) are "
        "standardised with the training rows' mean and sd",
    )


def check_builtin(name: str, target=None, task=None, test_fraction=None) -> None:
    """Refuse the file-only flags with a built-in ``--data`` (one-line ValueError naming the flag)."""
    for flag, value in (("--target", target), ("--task", task), ("--test-fraction", test_fraction)):
        if value is not None:
            raise ValueError(f"{flag} applies to your own .csv/.npz file, not to --data {name}")


def check_file(path: str) -> None:
    """Refuse a ``--data`` that is neither a built-in set nor an existing ``.csv``/``.npz``
    (one-line ValueError saying which)."""
    if not path.endswith(FILE_SUFFIXES):
        raise ValueError(f"--data {path}: not a built-in set ({', '.join([*SYNTHETIC, *IMAGE_SETS])}) nor a .csv/.npz file")
    if not os.path.isfile(path):
        raise ValueError(f"--data {path}: no such file")


def file_record(path: str, target: str | None, task: str | None, test_fraction: float | None, seed: int) -> dict:
    """The data record of a user's ``.csv``/``.npz`` (read back by
    :func:`bnnpp.runs.dataset_from_record`), after checking the flags that describe it.

    Returns:
        ``{"data": absolute path, "target", "task", "test_fraction", "seed", "sha256"}``.
        Raises a one-line ValueError for a name that is neither a built-in set nor a
        ``.csv``/``.npz``, a missing file, or a CSV without ``--target``.
    """
    check_file(path)
    if path.endswith(".csv") and target is None:
        raise ValueError(f"--data {path} needs --target COLUMN: the column to predict")
    absolute = os.path.abspath(path)
    return {
        "data": absolute,
        "target": target,
        "task": task,
        "test_fraction": 0.2 if test_fraction is None else test_fraction,
        "seed": seed,
        "sha256": data.file_sha256(absolute),
    }


def labelled_rows_message(error: ValueError) -> str:
    """The one-line message of an error reading ``--data``'s labelled rows (``bnnpp calibrate``):
    a :class:`~bnnpp.data.MissingColumnError`'s Python hint (``target=``, an ``.npz``) becomes
    what the command line takes — ``--target COLUMN`` for a missing target column, a header row
    for missing features (labelled rows have no header-less CSV form); other errors as they are.

    Returns:
        The message, one line.
    """
    from bnnpp.data import MissingColumnError

    if not isinstance(error, MissingColumnError):
        return str(error)
    if error.column == "target":
        return f"{error.detail}: name the file's target column with --target COLUMN"
    return f"{error.detail}: --data needs a header row naming the run's features and its target (or pass an .npz with arrays x and y)"
