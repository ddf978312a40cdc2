"""Old homes of moved names, kept importable for one release."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def deprecated_aliases(old_module: str, moved: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old_module`` that keeps moved names importable for one
    release: ``moved`` maps each old name to the new dotted path (``"bnnpp.runs.open_run"``).

    Returns:
        The ``__getattr__`` function: it warns with a DeprecationWarning naming the new path
        and returns the object there; other names raise AttributeError as usual.
    """

    def __getattr__(name: str) -> Any:
        if name not in moved:
            raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
        module, _, attr = moved[name].rpartition(".")
        warnings.warn(
            f"{old_module}.{name} moved to {moved[name]}; the old name will be removed in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module), attr)

    return __getattr__
