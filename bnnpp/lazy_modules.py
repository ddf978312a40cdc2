"""Whole modules where another library left lazy ones: ArviZ 1.x imports JAX and NumPyro through
``lazy_loader`` (:class:`importlib.util.LazyLoader`), and a NumPyro whose submodules are first
imported through that lazy parent lacks attributes such as ``numpyro.distributions.distribution``,
which NumPyro itself reads (``numpyro.factor``), so a model with a constrained latent fails inside
a fit. :func:`load_whole` loads a lazy parent before its submodules are imported, and sets any
submodule attribute that is still missing. It reads only :data:`sys.modules`: cheap to call at
every entry point."""

from __future__ import annotations

import sys

__all__ = ["LIBRARIES", "load_whole"]

LIBRARIES = ("jax", "numpyro")
"""The top-level packages :func:`load_whole` repairs."""


def load_whole() -> None:
    """Load each of :data:`LIBRARIES` already in :data:`sys.modules` (a lazy module loads on
    its first attribute access), then give every parent module of theirs the attribute of each
    loaded submodule that it lacks. Nothing is imported that was not imported already."""
    for name in LIBRARIES:
        module = sys.modules.get(name)
        if module is not None:
            getattr(module, "__version__", None)  # a lazy module runs its __init__ here
    prefixes = tuple(f"{name}." for name in LIBRARIES)
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(prefixes):
            continue
        parent_name, _, child = name.rpartition(".")
        parent = sys.modules.get(parent_name)
        if parent is not None and child not in vars(parent):
            setattr(parent, child, module)
