"""Method name → how to fit it: its options dataclass and its ``build`` of an
:class:`~bnnpp.inference.algorithm.Algorithm`, which the one runner
(:func:`bnnpp.inference.runner.run`) drives for every method."""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import jax
import numpy as np
from numpyro import handlers

from bnnpp.inference.algorithm import Algorithm
from bnnpp.inference.checkpoints import Checkpointing
from bnnpp.inference.checks import check_data
from bnnpp.inference.model_info import ModelInfo
from bnnpp.inference.options import Options
from bnnpp.inference.runner import run
from bnnpp.inference.sharding import global_rows
from bnnpp.inference.start import digest
from bnnpp.introspection import num_parameters
from bnnpp.introspection.checks import available_memory
from bnnpp.posterior import Posterior

__all__ = ["Backend", "Method", "get_backend", "get_method", "register", "registered", "tempered"]


def check_draw_memory(method: str, options: Options, info: ModelInfo) -> None:
    """Refuse, in one line before anything compiles, a fit whose kept draws alone would not fit in
    this machine's memory: ``num_samples × num_chains × members`` copies of the latent
    parameters (float32; an option a method lacks counts 1)."""
    copies = 1
    for name in ("num_samples", "num_chains", "members"):
        value = getattr(options, name, None)
        copies *= int(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value > 0 else 1
    params = num_parameters(info.sites)
    need = copies * params * 4
    memory = available_memory()
    if memory is not None and need > memory:
        counts = " × ".join(f"{n} {getattr(options, n)}" for n in ("num_samples", "num_chains", "members") if getattr(options, n, None))
        raise ValueError(
            f"{method}: {counts} copies of the model's {params:,} parameters need about {need / 2**30:,.0f} GiB, more than this "
            f"machine's {memory / 2**30:.0f} GiB: lower num_samples (or num_chains / members)"
        )


@dataclass(frozen=True)
class Method:
    """A registered inference method.

    Attributes:
        name: the ``method=`` string.
        options: the method's :class:`~bnnpp.inference.options.Options` dataclass.
        build: ``build(model, x, y, options[, start]) -> Algorithm``, which the runner drives.
        summary: one line for help texts.
        smoke: options for a fit of seconds on a tiny network (``bnnpp compare --quick`` and the
            test tables use them); checked against ``options`` when the method is made.
        requires: ``requires() -> str | None``: why the method cannot run in this environment
            (one line naming the fix, e.g. a library too old), or ``None`` when it can; unset:
            it always can. The method stays registered either way (:attr:`unavailable`).
    """

    name: str
    options: type[Options]
    build: Callable[..., Algorithm]
    summary: str = ""
    smoke: dict[str, Any] = field(default_factory=dict, compare=False)
    requires: Callable[[], str | None] | None = field(default=None, compare=False)

    def __post_init__(self):
        if not callable(self.build):
            raise TypeError(f"method {self.name!r}: build must be a function build(model, x, y, options) -> Algorithm")
        try:
            self.options.parse(self.name, dict(self.smoke))
        except (TypeError, ValueError) as e:
            raise type(e)(f"method {self.name!r}: smoke settings: {e}") from None

    @property
    def unavailable(self) -> str | None:
        """Why the method cannot run here (:attr:`requires`' line), or ``None``."""
        return None if self.requires is None else self.requires()

    def check_available(self) -> None:
        """Raise :attr:`unavailable` as a one-line ImportError, before anything is traced."""
        why = self.unavailable
        if why is not None:
            raise ImportError(why)

    # -- options --------------------------------------------------------------------

    @property
    def defaults(self) -> dict[str, Any]:
        """Every option the method takes, with its default."""
        return self.options.defaults()

    @property
    def exclusive(self) -> tuple[tuple[str, str], ...]:
        """Pairs of options that must not be given together."""
        return self.options.exclusive

    def parse(self, given: dict[str, Any]) -> Options:
        """The checked options dataclass from keyword arguments (one-line errors)."""
        return self.options.parse(self.name, given)

    def check_options(self, given: dict[str, Any]) -> dict[str, Any]:
        """Reject unknown options, validate values, return the defaults updated with ``given``."""
        return self.parse(given).as_dict()

    def validate_data(self, options: dict[str, Any] | Options, x: np.ndarray, y: np.ndarray) -> None:
        """The data-dependent option checks (e.g. ``batch_size`` against the rows)."""
        # a dict here is the full merged option set (check_options' result), so it is built
        # directly: the exclusive pairs were checked on what the user gave
        opts = options if isinstance(options, Options) else self.options(**{**self.defaults, **options})
        opts.check_data(x, y)

    # -- fitting --------------------------------------------------------------------

    def run(
        self,
        model: Callable,
        x: np.ndarray,
        y: np.ndarray,
        options: Options,
        *,
        seed: int,
        progress: bool,
        checkpoint: Checkpointing | None = None,
        resume: bool = False,
        devices: int | None = None,
        mesh: str | dict | None = None,
        rows=None,
        start: dict | None = None,
        info: ModelInfo | None = None,
    ) -> Posterior:
        """Fit checked data with checked options (see :func:`bnnpp.fit`); lengths given in
        epochs and the like are fixed first (:meth:`Options.resolve`). ``rows``: a
        :class:`bnnpp.data.Rows` when ``x``, ``y`` are one process's block of the training rows
        (the method is built for the global row count; :func:`~bnnpp.inference.runner.run`).
        ``start``: site → unconstrained start value (``bnnpp.fit``'s ``init``, checked by
        :func:`bnnpp.inference.start.start_position`), for methods that :attr:`takes_start`.
        ``info``: the model's :class:`~bnnpp.inference.model_info.ModelInfo` (found here when
        not given), handed to a ``build`` that takes ``info`` and to the runner."""
        if start and not self.takes_start:
            raise ValueError(f"method {self.name!r} cannot start from given values: leave init unset (its build has no start argument)")
        options = options.resolve(int(x.shape[0]) if rows is None else int(rows.total))
        if info is None:
            info = ModelInfo.of(model, *((x, y) if rows is None else global_rows(x, y, rows.total)))
        info.check_rows(self.name, getattr(options, "batch_size", None), rows)
        check_draw_memory(self.name, options, info)
        devices, mesh, device = options.placement(info, devices, mesh)
        given_model = model
        model = tempered(model, getattr(options, "temperature", 1.0))
        with contextlib.nullcontext() if device is None else jax.default_device(device):
            posterior = self._run(
                model,
                x,
                y,
                options,
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
        if model is not given_model:  # the posterior predicts with (and saves) the model as given
            posterior = replace(posterior, model=given_model, _jitted={})
        return posterior

    def _run(self, model, x, y, options, *, seed, progress, checkpoint, resume, devices, mesh, rows, start, info) -> Posterior:
        validation = getattr(options, "validation_data", None)
        if validation is not None:  # shapes checked by Options.check_data; labels against the model here, before anything compiles
            try:
                validation = check_data(tuple(validation), model)
            except (TypeError, ValueError) as e:
                raise type(e)(f"validation_data: {e}") from None
        algorithm = self.build(
            model,
            *((x, y) if rows is None else global_rows(x, y, rows.total)),
            options,
            **({"start": start} if start else {}),
            **({"info": info} if self.takes_info else {}),
        )
        if rows is not None and algorithm.hooks.finalize is not None:
            raise ValueError(f"method {self.name!r} needs every training row in every process: load the data whole (shard=None)")
        recorded = _recorded(options)
        if start:
            recorded["init"] = digest(start)  # in the record and the checkpoint fingerprint
        return run(
            algorithm,
            model,
            x,
            y,
            method=self.name,
            seed=seed,
            options=recorded,
            progress=progress,
            chunk_size=getattr(options, "chunk_size", None),
            validation_data=validation if options.validates_chunks else None,
            checkpoint=checkpoint,
            resume=resume,
            devices=devices,
            mesh=mesh,
            rows=rows,
            sites=info.sites,
        )

    @property
    def takes_start(self) -> bool:
        """Whether the method can start from given values (``bnnpp.fit``'s ``init``): its
        ``build`` takes ``start``."""
        return "start" in inspect.signature(self.build).parameters

    @property
    def takes_info(self) -> bool:
        """Whether its ``build`` takes the fit's :class:`~bnnpp.inference.model_info.ModelInfo` as ``info``."""
        return "info" in inspect.signature(self.build).parameters


Backend = Method
"""The name of :class:`Method` in bnnpp 0.1."""


def _recorded(options: Options) -> dict[str, Any]:
    """The options as recorded in a posterior: validation data as its shapes, not its values."""
    out = options.as_dict()
    v = out.get("validation_data")
    if v is not None:
        out["validation_data"] = [list(np.shape(a)) for a in v]
    return out


_REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add a method to the registry under ``method.name`` (replacing one of that name); returns it."""
    if not isinstance(method, Method):
        raise TypeError(f"register takes a bnnpp.inference.registry.Method, got {type(method).__name__}")
    _REGISTRY[method.name] = method
    return method


def unregister(name: str) -> None:
    """Remove a method (for tests that register a temporary one)."""
    _REGISTRY.pop(name, None)


def registered() -> tuple[str, ...]:
    """Names of the registered methods, sorted."""
    return tuple(sorted(_REGISTRY))


def get_method(name: str) -> Method:
    """The method registered as ``name``; ValueError listing the registered ones otherwise."""
    if name not in _REGISTRY:
        close = difflib.get_close_matches(str(name), registered(), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"unknown method {name!r}; {hint}registered methods: {', '.join(registered())}")
    return _REGISTRY[name]


def get_backend(name: str) -> Method:
    """Deprecated (bnnpp 0.1's name of :func:`get_method`): warns with a DeprecationWarning and
    returns ``get_method(name)``; nothing in bnnpp calls it. Removed in the next release."""
    warnings.warn("bnnpp.inference.get_backend is deprecated: use bnnpp.inference.get_method", DeprecationWarning, stacklevel=2)
    return get_method(name)


@dataclass(frozen=True)
class CommandLineOption:
    """One inference flag of ``bnnpp fit``, merged over the methods that take it.

    Attributes:
        flag: ``--num-steps``; dest: the argparse destination (``num_steps``, the option
            name); option: the keyword of :func:`bnnpp.fit` (``num_steps``); type: ``int``,
            ``float``, ``str`` or ``bool`` (a switch); choices: the allowed values (union over
            methods) or ``None``; help: the help text (``"a: …; b: …"`` when methods whose
            choices share none give it different meanings); takers: method → its default, for
            every method that takes it; aliases: older flags also accepted (``--steps``).
    """

    flag: str
    dest: str
    option: str
    type: type
    choices: tuple | None
    help: str
    takers: dict[str, Any]
    aliases: tuple[str, ...] = ()


def command_line_options() -> list[CommandLineOption]:
    """Every command-line flag of the registered methods' options (those with a ``flag``), in
    order of first appearance over the methods sorted by name: the CLI generates its flags
    from this, so a new option or choice needs one edit, in its options dataclass.

    Raises:
        TypeError: two methods give one flag different option names or types.
    """
    merged: dict[str, CommandLineOption] = {}
    # per flag, its meanings: [takers, help, choices]; a method whose choices share none with a
    # meaning's (sgld's and vd's --variant) starts its own, else it joins the first one
    meanings: dict[str, list[list]] = {}
    for name in registered():
        for spec in get_method(name).options.specs():
            if spec.flag is None:
                continue
            known = merged.get(spec.flag)
            if known is None:
                merged[spec.flag] = CommandLineOption(
                    spec.cli_flag,
                    spec.flag,
                    spec.name,
                    spec.type,
                    spec.choices,
                    spec.help,
                    {name: spec.default},
                    tuple("--" + a.replace("_", "-") for a in spec.aliases),
                )
                meanings[spec.flag] = [[[name], spec.help, set(spec.choices or ())]]
                continue
            if (known.option, known.type) != (spec.name, spec.type):
                raise TypeError(
                    f"flag {spec.cli_flag} means {known.option} ({known.type.__name__}) for "
                    f"{', '.join(known.takers)} but {spec.name} ({spec.type.__name__}) for {name}: rename one"
                )
            choices = known.choices
            if spec.choices is not None:
                choices = tuple(dict.fromkeys((*(choices or ()), *spec.choices)))
            aliases = tuple(dict.fromkeys((*known.aliases, *("--" + a.replace("_", "-") for a in spec.aliases))))
            groups = meanings[spec.flag]
            if spec.choices and all(g[2] and not g[2] & set(spec.choices) for g in groups):
                groups.append([[name], spec.help, set(spec.choices)])
            else:
                groups[0][0].append(name)
            merged[spec.flag] = CommandLineOption(
                known.flag,
                known.dest,
                known.option,
                known.type,
                choices,
                known.help,
                {**known.takers, name: spec.default},
                aliases,
            )
    for flag, groups in meanings.items():
        if len(groups) > 1:
            text = "; ".join(f"{', '.join(takers)}: {text}" for takers, text, _ in groups)
            merged[flag] = replace(merged[flag], help=text)
    return list(merged.values())


class _Tempered:
    """``model`` with every sample site's log-density scaled by ``1 / temperature`` (NumPyro's
    ``handlers.scale``); other attributes are the model's (a bnnpp network's ``spec``, layers, ...)."""

    def __init__(self, model: Callable, temperature: float):
        functools.update_wrapper(self, model, updated=())  # inspect.signature sees the model's parameters
        self.model, self.temperature = model, float(temperature)

    def __call__(self, *args, **kwargs):
        with handlers.scale(scale=1.0 / self.temperature):
            return self.model(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.__dict__["model"], name)


def tempered(model: Callable, temperature: float) -> Callable:
    """The model a method fits at posterior temperature ``T``
    (:func:`bnnpp.inference.options.temperature_option`): ``model`` itself for ``T = 1``, else
    a wrapper whose prior and likelihood log-densities are divided by ``T``."""
    if temperature == 1.0:
        return model
    return _Tempered(model, temperature)
