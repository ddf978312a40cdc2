"""Where the tests find the real datasets: ``$BNNPP_DATA_DIR``, else ``../shared/data`` beside
the repository (the folder holding ``mnist/``, ``fashion_mnist/`` and ``uci/``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA_DIR = Path(os.environ.get("BNNPP_DATA_DIR") or Path(__file__).resolve().parents[1].parent / "shared" / "data")


def need(*names: str) -> Path:
    """``DATA_DIR``; skips the calling test unless every ``DATA_DIR/name`` exists."""
    missing = [n for n in names if not (DATA_DIR / n).exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not found in {DATA_DIR} (set BNNPP_DATA_DIR to the folder holding them)")
    return DATA_DIR
