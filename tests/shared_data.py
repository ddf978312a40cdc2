"""Where the tests find the real datasets: ``$BNNPP_DATA_DIR``, else ``../shared/data`` beside
the repository (the folder holding ``mnist/``, ``fashion_mnist/`` and ``uci/``)."""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR = Path(os.environ.get("BNNPP_DATA_DIR") or Path(__file__).resolve().parents[1].parent / "shared" / "data")

