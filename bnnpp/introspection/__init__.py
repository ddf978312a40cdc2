"""What a NumPyro model is made of, found by abstract tracing (``jax.eval_shape``: nothing
is compiled or run): its latent sites with shapes and ArviZ dims, its observed site checked
against the targets, and the parameters of its observation site at one set of latent values.

bnnpp calls a model as ``model(x, y)`` with ``y=None`` to predict: the targets go by keyword
when the model has a parameter named ``y``, ``Y``, ``obs`` or its observed site's name that
is not its second positional parameter (``def model(x, *, y=None)``,
``def model(X, D_H=5, Y=None)``), else as the second positional argument
(:func:`targets_keyword`). bnnpp's networks observe the site ``"y"``; a model whose observed
site has another name (NumPyro's ``examples/bnn.py`` samples ``"Y"``, many examples
``"obs"``) is wrapped by :func:`rename_observed`, which renames that site to the reserved
:data:`RESERVED_OBSERVED` while bnnpp traces it, so no user site can clash with it; readers
find the site with :func:`observed_site`.

This module sits between the models and everything that consumes them (inference, the
posterior, the sweep); it imports neither.
"""

from __future__ import annotations

from bnnpp.introspection.checks import (
    BYTES_PER_PARAMETER,
    MODEL_ERRORS,
    PREDICTABLE,
    available_memory,
    check_model,
    check_sites,
    find_observed,
    is_flax_module,
    refuse_flax_module,
)
from bnnpp.introspection.observed import RenamedObservation, rename_observed, targets_keyword
from bnnpp.introspection.sites import (
    BATCH_WRAPPERS,
    OBSERVED,
    RESERVED_OBSERVED,
    RESERVED_PREFIX,
    TARGET_KEYWORDS,
    SiteInfo,
    deterministic_sites,
    improper_as_zeros,
    is_tracer,
    latent_sites,
    latent_trace,
    num_parameters,
    observation,
    observed_site,
    probe_rows,
    row_latents,
    shape_rows,
    unwrap,
)

__all__ = [
    "BATCH_WRAPPERS",
    "BYTES_PER_PARAMETER",
    "MODEL_ERRORS",
    "OBSERVED",
    "PREDICTABLE",
    "RESERVED_OBSERVED",
    "RESERVED_PREFIX",
    "RenamedObservation",
    "SiteInfo",
    "TARGET_KEYWORDS",
    "available_memory",
    "check_model",
    "check_sites",
    "deterministic_sites",
    "find_observed",
    "improper_as_zeros",
    "is_flax_module",
    "is_tracer",
    "latent_sites",
    "latent_trace",
    "num_parameters",
    "observation",
    "observed_site",
    "probe_rows",
    "refuse_flax_module",
    "rename_observed",
    "row_latents",
    "shape_rows",
    "targets_keyword",
    "unwrap",
]
