"""Helpers the benchmark scripts share (imported as ``_common``: each script runs with
``benchmarks/`` on ``sys.path``)."""

from __future__ import annotations

import json
import os
import platform
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def default_data_dir() -> str:
    """``$BNNPP_DATA_DIR``, else ``../shared/data`` beside the repository."""
    return os.environ.get("BNNPP_DATA_DIR") or os.path.join(HERE, "..", "..", "shared", "data")


def machine() -> str:
    """The machine line every result file carries: architecture, cores, Python, jax and its backend."""
    import jax

    return (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"jax {jax.__version__} on {jax.default_backend()}")


def write_results(
    folder: str, name: str, result: dict, markdown: str, figures: dict | None = None, *, dpi: int = 110
) -> list[str]:
    """Write ``<folder>/<name>.json``, ``<name>.md`` and each figure (file name → matplotlib
    Figure), each through a temporary file renamed into place, so an interrupted run leaves
    no half-written table. Returns the paths written."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    umask = os.umask(0)
    os.umask(umask)

    def put(fname: str, write) -> None:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{fname}.")
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600
            os.replace(tmp, os.path.join(folder, fname))
        except BaseException:
            os.unlink(tmp)
            raise
        paths.append(os.path.join(folder, fname))

    for fname, fig in (figures or {}).items():
        put(fname, lambda f, fig=fig: fig.savefig(f, format="png", dpi=dpi, bbox_inches="tight"))
    put(f"{name}.json", lambda f: f.write(json.dumps(result, indent=2).encode()))
    put(f"{name}.md", lambda f: f.write(markdown.encode()))
    return paths
