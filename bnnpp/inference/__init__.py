"""Inference methods, one per file, all returning a :class:`~bnnpp.Posterior`.

Every iterative method is an :class:`~bnnpp.inference.algorithm.Algorithm` — pure
``init``/``step``/``sample`` functions over a typed state — driven by the one runner in
:mod:`bnnpp.inference.runner`; its options are a frozen dataclass
(:mod:`bnnpp.inference.options`). ``fit(model, data, method=...)`` dispatches by name through
:mod:`bnnpp.inference.registry`; importing this package registers every method but the
experimental ``chees`` (``import bnnpp.inference.chees`` registers it).
"""

from __future__ import annotations

import importlib
import os
import warnings
from typing import Any

from bnnpp.inference import advi, bbb, ensemble, laplace, map_estimate, mc_dropout, mclmc, meads, nuts, pathfinder, sgld, swag, vd  # noqa: F401
from bnnpp.inference.algorithm import Algorithm, Hooks, Keys, RunSpec
from bnnpp.inference.checkpoints import Checkpointing, TrainingInterrupted, has_checkpoint
from bnnpp.inference.checks import check_data
from bnnpp.inference.collapse import warn_if_collapsed
from bnnpp.inference.health import FitHealthWarning
from bnnpp.inference.model_info import ModelInfo
from bnnpp.inference.options import Options, option
from bnnpp.inference.registry import Method, get_backend, get_method, register, registered
from bnnpp.inference.sharding import check_request, global_rows
from bnnpp.inference.start import start_position
from bnnpp.introspection import check_model, refuse_flax_module, rename_observed

# importing registers each method (chees is experimental: ``import bnnpp.inference.chees`` registers it)
from bnnpp.lazy_modules import load_whole
from bnnpp.models.scaling import bind_scaling
from bnnpp.posterior import Posterior, Prediction, load
from bnnpp.posterior.core import seed_integer

__all__ = [
    "Algorithm",
    "Checkpointing",
    "FitHealthWarning",
    "Hooks",
    "Keys",
    "Method",
    "Options",
    "Posterior",
    "Prediction",
    "RunSpec",
    "TrainingInterrupted",
    "check_data",
    "fit",
    "get_backend",
    "get_method",
    "load",
    "option",
    "register",
    "registered",
]


MAX_SEED = 2**32
"""Seeds are integers in [0, MAX_SEED) (JAX's PRNG keys hold 32 bits of seed per word)."""


def fit(
    model,
    data: Any,
    *,
    method: str = "advi",
    seed: Any = 0,
    progress: bool = True,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
    checkpoint_minutes: float | None = 10.0,
    resume: bool | None = None,
    observed: str | None = None,
    devices: int | None = None,
    mesh: str | dict | None = None,
    init: Any = None,
    **options,
) -> Posterior:
    """Fit a NumPyro model ``model(x, y=None)`` to data with the chosen inference method.

    Args:
        model: a NumPyro model called as ``model(x, y)`` (``y=None`` when predicting; the
            targets go by keyword when the model has a parameter ``y``, ``Y``, ``obs`` or
            ``observed`` that is not its second positional one, e.g. ``def model(x, *,
            y=None)``; :func:`bnnpp.introspection.targets_keyword`) that observes one site
            (every :mod:`bnnpp.models` network qualifies). Other arguments are bound
            beforehand, e.g. ``functools.partial(model, D_H=5)``. The targets may be ``(n,)``
            or, for a likelihood with one event per row (``.to_event(1)``), ``(n, K)``.
        data: ``(x, y)`` arrays or a :class:`bnnpp.data.Dataset` (its training split is used).
            In a multi-process fit a Dataset loaded with ``shard=(process, processes)`` holds
            only this process's block of the rows (its ``rows``); every process passes its own.
        method: a registered method name (see :func:`registered`).
        seed: an integer in [0, 2**32) or a JAX key for everything random in the fit
            (``jax.random.PRNGKey(s)`` gives the fit of ``s``;
            :func:`bnnpp.posterior.core.seed_integer`); ``stats.seed`` records the integer.
        progress: show a progress bar.
        checkpoint_dir: save the fit's progress there (orbax-checkpoint) every
            ``checkpoint_every`` steps and every ``checkpoint_minutes`` minutes (either may be
            ``None``), and when SIGINT/SIGTERM stops training after the current chunk.
        resume: ``True``: continue from the newest checkpoint in ``checkpoint_dir`` (the result
            is bit-identical to an uninterrupted fit with the same arguments on the same
            machine); ``False``: delete the checkpoints there and start from step 0; ``None``
            (default): start from step 0 when ``checkpoint_dir`` holds no checkpoint, and refuse
            (ValueError) when it holds one, so an interrupted fit is never discarded silently.
        observed: the name of the model's observed site; needed only when it observes
            several (``None``: the one it observes, ``"Y"`` for NumPyro's ``examples/bnn.py``).
            The posterior's ArviZ groups use this name.
        devices: run on the first ``devices`` of ``jax.devices()`` (every process's, after
            :func:`bnnpp.distributed.initialize`): chains/members one block per device when
            they divide evenly, else the minibatch split over them (data parallel).
        mesh: the mesh's axis sizes, ``"data=2,members=2"`` or a dict: ``data`` splits every
            minibatch, ``members`` (alias ``chains``) the ensemble members / chains
            (:mod:`bnnpp.inference.sharding`). ``None`` for both: one device, unsharded.
        init: start values instead of the method's own random start, for every method: a dict
            ``{site: value}`` of constrained latent values (some or all sites), a nested dict of
            parameters or an ``nnx.State`` / ``nnx.Module`` (sites named by their path,
            ``layers.0.kernel``, as :func:`bnnpp.models.from_flax` names them), or a
            :class:`Posterior` (its mean draw). Optimisers and q's means start there; an
            ensemble's member 0 does (the others start at random); MCMC chains all do;
            pathfinder's first path does. ``laplace`` with
            ``num_steps=0`` and every site given takes the approximation at those weights
            without fitting (post-hoc Laplace). Checked against the model before anything
            compiles (:mod:`bnnpp.inference.start`).
        **options: the method's options (its options dataclass, e.g.
            ``bnnpp.inference.get_method("bbb").options``; defaults in ``.defaults``).

    Returns:
        A :class:`Posterior`.

    Raises:
        ValueError / TypeError: unknown method or option, bad option value, or bad data — all
        before anything compiles.
        ImportError: the method needs a library this environment lacks or has too old
            (:attr:`Method.unavailable`, one line naming the upgrade).
        TrainingInterrupted: SIGINT or SIGTERM stopped training (a ``KeyboardInterrupt``; its
            ``checkpoint_dir`` says where to resume from).
    """
    load_whole()  # NumPyro whole, however ArviZ imported it (bnnpp.lazy_modules)
    chosen = get_method(method)
    chosen.check_available()
    parsed = chosen.parse(options)
    seed = seed_integer(seed)
    if not isinstance(progress, bool) and type(progress).__name__ != "bool_":
        raise TypeError(f"progress must be True or False, got {progress!r}")
    refuse_flax_module(model)
    if not callable(model):
        raise TypeError(f"model must be a NumPyro model function model(x, y=None), got {model!r}")
    if observed is not None and (not isinstance(observed, str) or not observed):
        raise TypeError(f"observed must be the name of the model's observed site, e.g. 'Y', got {observed!r}")
    check_request(devices, mesh)
    if resume and checkpoint_dir is None:
        raise ValueError("resume=True needs checkpoint_dir: the folder the interrupted fit wrote its checkpoints to")
    if resume is None and checkpoint_dir is not None and has_checkpoint(os.fspath(checkpoint_dir)):
        raise ValueError(
            f"checkpoint_dir {os.fspath(checkpoint_dir)} holds a checkpoint of an earlier fit: pass resume=True to "
            "continue it or resume=False to delete it and start over"
        )
    resume = bool(resume)
    checkpoint = None
    if checkpoint_dir is not None:
        checkpoint = Checkpointing(os.fspath(checkpoint_dir), every_steps=checkpoint_every, every_minutes=checkpoint_minutes)
    x, y = check_data(data, model)
    rows = getattr(data, "rows", None)
    if rows is not None and rows.start == 0 and rows.stop == rows.total:
        rows = None  # every row: the ordinary fit
    model = _standardized(model, x, y, rows)  # before the observed site is renamed: it returns a new network
    model = rename_observed(model, observed, x, y)
    parsed.check_data(*((x, y) if rows is None else global_rows(x, y, rows.total)))  # the batch against every row
    info = ModelInfo.of(model, x, y, check_model(model, x, y))  # the one trace of the model's sites for this fit
    start = None
    if init is not None:
        if not chosen.takes_start:
            raise ValueError(f"method {method!r} cannot start from given values: leave init unset (its build has no start argument)")
        start = start_position(model, x, y, init)
    posterior = chosen.run(
        model,
        x,
        y,
        parsed,
        seed=seed,
        progress=progress,
        checkpoint=checkpoint,
        resume=resume,
        devices=devices,
        mesh=mesh,
        rows=rows,
        start=start,
        info=info,
    )
    warn_if_collapsed(posterior)
    return posterior


def _standardized(model, x, y, rows):
    """A bnnpp network built with ``standardize=True`` and no transform yet gets one fitted on
    the training data (:func:`bnnpp.models.scaling.bind_scaling`); other models are unchanged.
    A process of a multi-process fit holds only its block of rows, which would give each
    process another transform: there the network sees the data as given, with a warning."""
    bound = bind_scaling(model, x, y)
    if bound is not model and rows is not None:
        warnings.warn(
            "a multi-process fit does not standardise the data (each process holds only its rows): the network sees it as "
            "given; to standardise, give it the transform of every row, "
            "model.with_scaling(bnnpp.models.scaling.fit_scaling(x, y, model.likelihood))",
            stacklevel=3,
        )
        return model
    return bound


def __getattr__(name: str):
    # the module of method "map" was bnnpp.inference.map, which shadowed a builtin
    if name == "map":
        warnings.warn(
            "bnnpp.inference.map is now bnnpp.inference.map_estimate (method='map' is unchanged); the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module("bnnpp.inference.map_estimate")
    raise AttributeError(f"module 'bnnpp.inference' has no attribute {name!r}")
