"""Deprecated: bnnpp 0.1's ``bnnpp.inference.base`` held the registry, option checks, data
checks, model introspection, ``Prediction``, ``Posterior`` and ``load``. They now live in
files of one responsibility each; the old names keep working for one release, with a
``DeprecationWarning`` naming the new place."""

from __future__ import annotations

import importlib
import warnings

_MOVED = {
    "Backend": "bnnpp.inference.registry",
    "register": "bnnpp.inference.registry",
    "registered": "bnnpp.inference.registry",
    "get_backend": "bnnpp.inference.registry",
    "check_data": "bnnpp.inference.checks",
    "SiteInfo": "bnnpp.introspection",
    "latent_sites": "bnnpp.introspection",
    "unwrap": "bnnpp.introspection",
    "BATCH_WRAPPERS": "bnnpp.introspection",
    "Prediction": "bnnpp.posterior",
    "Posterior": "bnnpp.posterior",
    "MAX_SAVED_DATA": "bnnpp.posterior",
    "load": "bnnpp.posterior",
}


def __getattr__(name: str):
    if name in _MOVED:
        warnings.warn(
            f"bnnpp.inference.base.{name} moved to {_MOVED[name]}.{name}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module 'bnnpp.inference.base' has no attribute {name!r}")
