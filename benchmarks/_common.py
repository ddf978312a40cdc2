"""Helpers the benchmark scripts share (imported as ``_common``: each script runs with
``benchmarks/`` on ``sys.path``)."""

from __future__ import annotations

import json
import os
import platform

HERE = os.path.dirname(os.path.abspath(__file__))


def default_data_dir() -> str:
    """``$BNNPP_DATA_DIR``, else ``../shared/data`` beside the repository."""
    return os.environ.get("BNNPP_DATA_DIR") or os.path.join(HERE, "..", "..", "shared", "data")


def parse_seeds(text: str, quick: bool = False) -> list[int]:
    """The ``--fit-seeds`` list, ``"0,1,2"`` → ``[0, 1, 2]`` (``[0]`` with ``quick``); a
    one-line ``SystemExit`` for anything else, before any fit starts."""
    if quick:
        return [0]
    try:
        seeds = [int(t) for t in text.split(",") if t]
    except ValueError:
        raise SystemExit(f"--fit-seeds: comma-separated integers, got {text!r}") from None
    if not seeds:
        raise SystemExit("--fit-seeds: give at least one seed, e.g. 0,1,2")
    return seeds


def machine() -> str:
    """The machine line every result file carries: architecture, cores, Python, jax and its backend."""
    import jax

    return (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"jax {jax.__version__} on {jax.default_backend()}")


def write_results(
    folder: str, name: str, result: dict, markdown: str, figures: dict | None = None, *, dpi: int = 110
) -> list[str]:
    """Write ``<folder>/<name>.json``, ``<name>.md`` and each figure (file name → matplotlib
    Figure), each through :func:`bnnpp.files.atomic_file` (a temporary file renamed into
    place), so an interrupted run leaves no half-written table. Returns the paths written."""
    # imported here, not at the top: importing bnnpp imports JAX, and speed.py's workers
    # import this module before they time their own imports of JAX and bnnpp
    from bnnpp.files import atomic_file

    writers = {fname: lambda f, fig=fig: fig.savefig(f, format="png", dpi=dpi, bbox_inches="tight") for fname, fig in (figures or {}).items()}
    writers[f"{name}.json"] = lambda f: f.write(json.dumps(result, indent=2).encode())
    writers[f"{name}.md"] = lambda f: f.write(markdown.encode())
    paths = []
    for fname, write in writers.items():
        with atomic_file(os.path.join(folder, fname), "wb") as f:
            write(f)
        paths.append(os.path.join(folder, fname))
    return paths
