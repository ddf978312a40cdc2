"""What the diagnostics share: the scale-site suffixes, the R-hat threshold, ArviZ's quiet mode and the
small dict-like result type."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import warnings
from collections.abc import Mapping
from typing import ClassVar

#: Suffixes of the latent sites that hold a layer's prior scale (see bnnpp.models.layers).
SCALE_SUFFIXES = (".scale", ".variance")
RHAT_THRESHOLD = 1.01  # Vehtari et al. (2021): R-hat below 1.01 before trusting a chain


@contextlib.contextmanager
def _quiet_arviz():
    """Silence ArviZ's one-chain shape warnings (its logger and UserWarnings) for a block."""
    logger = logging.getLogger("arviz")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        logger.setLevel(level)


class _Result(Mapping):
    """A small frozen result: attributes, plus read-only dict access (``r["elpd"]``,
    ``dict(r)``) over its fields and :attr:`_aliases` (keys that are not identifiers), as
    bnnpp 0.1's dicts were read."""

    _aliases: ClassVar[dict[str, str]] = {}

    def _keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self)] + list(self._aliases)

    def __getitem__(self, key: str):
        if key in self._aliases:
            return getattr(self, self._aliases[key])
        if key not in {f.name for f in dataclasses.fields(self)}:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())
