"""Each method's options as one frozen dataclass: defaults, validation, help text and
choices in one place. ``bnnpp.fit`` checks the options a user passes against it before
anything compiles, and the CLI generates its flags from it.

A method declares its options as fields made with :func:`option`::

    @dataclass(frozen=True)
    class MyOptions(Options):
        num_steps: int = option(1000, "optimisation steps", check=positive_int)
        guide: str = option("normal", "variational family", choices=("normal", "lowrank"))

Checks are functions ``check(name, value)`` that raise ``ValueError``/``TypeError`` with a
one-line message; :meth:`Options.check` (override it) adds checks across fields and
:meth:`Options.check_data` checks that need the training data.

One vocabulary across methods: a method trained in steps names its length ``num_steps`` and,
where passes over the data make sense, also takes ``epochs`` (exactly one of the two;
:func:`steps_for` converts with the data size and ``batch_size``); minibatches are
``batch_size``, draws kept ``num_samples``, the optimiser ``learning_rate`` or ``optimizer``
and its learning-rate curve ``schedule``;
the seed is :func:`bnnpp.fit`'s ``seed``. :meth:`Options.resolve` fixes such derived
lengths once the number of training rows is known, before the method is built.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import optax

__all__ = [
    "OptionSpec",
    "Options",
    "check_batch_size",
    "fraction",
    "non_negative_int",
    "one_of",
    "optimizer",
    "optimizer_of",
    "option",
    "optional",
    "positive_float",
    "positive_int",
    "schedule_option",
    "steps_for",
    "temperature_option",
]


# --------------------------------------------------------------------------------------
# Value checks: check(name, value) -> None, raising a one-line ValueError/TypeError
# --------------------------------------------------------------------------------------


MAX_INT = 2**31 - 1
"""The largest integer option: step counters and sizes are int32 inside the compiled programs."""


def positive_int(name: str, value) -> None:
    """Raise unless ``value`` is an integer in [1, 2**31 − 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_INT:
        raise ValueError(f"{name} must be an integer ≥ 1 (and at most {MAX_INT:,}), got {value!r}")


def non_negative_int(name: str, value) -> None:
    """Raise unless ``value`` is an integer in [0, 2**31 − 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= MAX_INT:
        raise ValueError(f"{name} must be an integer ≥ 0 (and at most {MAX_INT:,}), got {value!r}")


def positive_float(name: str, value) -> None:
    """Raise unless ``value`` is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def boolean(name: str, value) -> None:
    """Raise unless ``value`` is True or False."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def optimizer(name: str, value) -> None:
    """Raise unless ``value`` is ``None`` or an optax GradientTransformation."""
    if value is not None and not (hasattr(value, "init") and hasattr(value, "update")):
        raise TypeError(f"{name} must be an optax GradientTransformation such as optax.adam(1e-2), got {value!r}")


def optional(check: Callable[[str, Any], None]) -> Callable[[str, Any], None]:
    """``check`` that also accepts ``None``."""

    def inner(name: str, value) -> None:
        if value is not None:
            check(name, value)

    return inner


INIT_LOCS = ("auto", "auto_wide", "glorot", "fan_in", "uniform")
"""The ``init_loc`` choices of :func:`init_loc_option` (:func:`bnnpp.inference.joint.init_start`)."""


def init_loc_option(default: str = "auto"):
    """The ``init_loc`` option of the point-estimate methods (map, laplace's MAP, ensemble,
    swag/multiswag, mc_dropout), per bnnpp layer: ``"glorot"`` starts the weights
    U(±sqrt(6 / (fan_in + fan_out))) (Glorot & Bengio 2010, eq. 16) and the biases at 0;
    ``"fan_in"`` weights and biases U(±init_radius / sqrt(fan_in)); ``"uniform"`` every site
    U(±init_radius) (NumPyro's ``init_to_uniform``); ``"auto"``: glorot for layers whose prior
    has a fixed scale, fan_in for layers with a hierarchical prior; ``"auto_wide"``: glorot for
    fixed-scale layers, uniform for hierarchical ones on networks of at most two inputs
    (:data:`bnnpp.inference.joint.WIDE_START_INPUTS`), fan_in for them on more. Every other site (prior scales, noise, the
    weights of models without bnnpp layers) starts U(±init_radius) on its unconstrained space.

    Why: U(±2) on hundreds of inputs saturates the first layer (pre-activation sd ≈
    2·sqrt(fan_in/3)) and leaves logits in the hundreds, an over-confident optimum; under a
    hierarchical prior the joint density of the weights and their scale is unbounded as both
    shrink together (the funnel of Neal 2003, "Slice sampling", §8), so a point estimate started
    from Glorot-small weights slides into the spike at scale → 0, while U(±2/sqrt(fan_in)) starts
    the weights at a scale where the likelihood's pull outweighs the prior's. Ensembles and
    mc_dropout take ``"auto_wide"``: on few inputs the members' spread comes from their
    independent wide starts (Lakshminarayanan et al. 2017), which a narrow start removes; on many
    inputs the wide start saturates the first layer as above and leaves the members' outputs far
    off the data, hence fan_in there."""
    return option(
        default,
        "start values per layer: glorot (weights U(±sqrt(6/(fan_in+fan_out))), biases 0), fan_in (U(±init_radius/"
        "sqrt(fan_in))), uniform (U(±init_radius)), auto (glorot for fixed-scale priors, fan_in for hierarchical ones) or "
        "auto_wide (glorot for fixed-scale priors; for hierarchical ones uniform on networks of at most 2 inputs, else fan_in); "
        "other sites U(±init_radius)",
        choices=INIT_LOCS,
    )


def temperature_option():
    """The ``temperature`` option of the methods that fit a tempered posterior: every
    site's log-density (prior and likelihood) is multiplied by ``1/T``, so the method targets
    ``p_T(θ | D) ∝ [p(D | θ) p(θ)]^(1/T)`` (posterior tempering, Wenzel et al. 2020, eq. 2;
    ``T < 1`` a cold posterior). Applied once, by wrapping the model in NumPyro's
    ``handlers.scale`` (:func:`bnnpp.inference.registry.tempered`): NUTS samples the tempered
    density, SG-MCMC takes its gradient, ADVI's ELBO is ``E_q[log p(D, θ)]/T + H(q)`` (the
    KL to the tempered posterior), and MAP-type fits minimise ``−log p(D, θ)/T`` (the same
    mode). ``T = 1`` leaves the model untouched. ``T`` must lie in
    [:data:`TEMPERATURE_RANGE`]: Wenzel et al. study 10⁻⁴ ≤ T ≤ 1; far outside it the
    float32 log densities scaled by ``1/T`` overflow (T → 0) or the data's weight rounds
    away next to the prior's (T → ∞), so such a value is refused before anything compiles."""
    return option(
        1.0,
        "posterior temperature T in [1e-4, 1e4]: fit p(θ|D)^(1/T) (every log-density divided by T; Wenzel et al. 2020); 1: the posterior",
        check=_temperature,
    )


TEMPERATURE_RANGE = (1e-4, 1e4)
"""The posterior temperatures accepted (:func:`temperature_option`)."""


def _temperature(name: str, value) -> None:
    positive_float(name, value)
    low, high = TEMPERATURE_RANGE
    if not low <= value <= high:
        raise ValueError(f"{name} must lie in [{low:g}, {high:g}] (Wenzel et al. 2020 study 1e-4 to 1), got {value!r}")


def _is_one(value) -> bool:
    """Whether ``value`` is the number 1 (an int, float or NumPy scalar; not a bool)."""
    return not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating)) and value == 1


def fraction(low: float = 0.0, high: float = 1.0, *, low_open: bool, high_open: bool) -> Callable[[str, Any], None]:
    """A check that the value is a number in the interval between ``low`` and ``high``."""

    def inner(name: str, value) -> None:
        ok = (
            not isinstance(value, bool)
            and isinstance(value, (int, float, np.floating, np.integer))
            and math.isfinite(value)
            and (value > low if low_open else value >= low)
            and (value < high if high_open else value <= high)
        )
        if not ok:
            interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
            raise ValueError(f"{name} must be a number in {interval}, got {value!r}")

    return inner


def one_of(name: str, value, choices: tuple) -> None:
    """Raise unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}")


def schedule_option() -> Any:
    """The ``schedule`` field of a method whose Adam rate :func:`optimizer_of` may decay:
    ``"cosine"`` (default: to 0 over the run; cosine annealing, Loshchilov & Hutter 2017,
    eq. 5) or ``"constant"``. An empirical default: the decay settles advi and bbb in lower
    validation optima, at the price of narrower predictive bands off the data (the last iterates
    no longer carry the noise of a constant rate). Declare it together with the exclusive pair
    ``("optimizer", "schedule")``."""
    return option(
        "cosine",
        "learning-rate curve: cosine (decays to 0 over the run, Loshchilov & Hutter 2017: lower optima, narrower bands "
        "off the data) or constant",
        choices=("cosine", "constant"),
    )


def optimizer_of(options, num_steps: int | None = None) -> Any:
    """The optax transformation of options with ``optimizer`` and ``learning_rate`` fields:
    ``options.optimizer`` when given, else Adam at ``options.learning_rate`` — held constant,
    or, for options with ``schedule="cosine"``, decayed to 0 by a half cosine over the
    ``num_steps`` steps of the run (Loshchilov & Hutter 2017; ``optax.cosine_decay_schedule``;
    the step count lives in Adam's state, so a resumed fit continues the same curve)."""
    if options.optimizer is not None:
        return options.optimizer
    if getattr(options, "schedule", "constant") == "cosine":
        if num_steps is None:
            raise TypeError("optimizer_of: a cosine schedule needs the run's num_steps")
        return optax.adam(optax.cosine_decay_schedule(options.learning_rate, max(int(num_steps), 1)))
    return optax.adam(options.learning_rate)


def check_batch_size(batch_size: int | None, x: np.ndarray) -> None:
    """Raise unless ``batch_size`` is ``None`` or at most the number of rows of ``x``."""
    n = int(x.shape[0])
    if batch_size is not None and batch_size > n:
        raise ValueError(f"batch_size {batch_size} is larger than the {n} training rows; use batch_size ≤ {n} or None for full batch")


def check_validation_pair(value) -> None:
    """Raise TypeError unless ``value`` is ``None`` or a pair ``(x_val, y_val)``."""
    if value is not None and (not isinstance(value, (tuple, list)) or len(value) != 2):
        raise TypeError(f"validation_data must be a pair (x_val, y_val) or None, got {type(value).__name__}")


def check_validation_data(value, x: np.ndarray) -> None:
    """Raise unless the pair ``value`` (or ``None``) has inputs shaped like the training inputs
    ``x`` per row, one target per input and at least one row."""
    if value is None:
        return
    xv, yv = (np.asarray(a) for a in value)
    if xv.ndim == 0 or xv.shape[1:] != x.shape[1:]:
        raise ValueError(
            f"validation_data inputs must have shape (n_val, {', '.join(map(str, x.shape[1:]))}) like the training inputs, got {xv.shape}"
        )
    if yv.shape != (xv.shape[0],):
        raise ValueError(f"validation_data targets must have shape ({xv.shape[0]},), one per input, got {yv.shape}")
    if xv.shape[0] == 0:
        raise ValueError("validation_data is empty: pass at least one row, or None")


def steps_for(options, n: int) -> int:
    """Optimisation steps of options with ``num_steps``, ``epochs`` and (optionally)
    ``batch_size`` on ``n`` training rows: ``epochs × (n // batch_size)`` (one step per full
    minibatch; the runner drops the last partial batch of an epoch) when ``epochs`` was given
    — it is set and either ``num_steps`` is ``None`` or ``epochs`` has no default — else
    ``num_steps``."""
    batches = max(1, n // (getattr(options, "batch_size", None) or n))
    epochs_given = options.epochs is not None and (options.num_steps is None or type(options).defaults()["epochs"] is None)
    return options.epochs * batches if epochs_given else options.num_steps


# --------------------------------------------------------------------------------------
# Option fields and the Options base
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OptionSpec:
    """What the CLI and the checks know about one option.

    Attributes:
        name: the keyword of ``bnnpp.fit``.
        default: its default.
        help: one line of help text.
        check: ``check(name, value)``, or ``None``.
        choices: the allowed values, or ``None``.
        flag: the option's CLI flag without dashes — always its name (``num_steps`` →
            ``--num-steps``); ``None``: not on the command line (Python objects such as an
            optax optimizer).
        aliases: older flag names (without dashes) the CLI also accepts (``("steps",)``).
        type: the CLI's value type (``int``, ``float``, ``str``, ``bool`` for a switch).
    """

    name: str
    default: Any
    help: str
    check: Callable[[str, Any], None] | None
    choices: tuple | None
    flag: str | None
    type: type
    aliases: tuple[str, ...] = ()

    @property
    def cli_flag(self) -> str | None:
        """``--flag-name`` or ``None``."""
        return None if self.flag is None else "--" + self.flag.replace("_", "-")


def option(
    default: Any,
    help: str,
    *,
    check: Callable[[str, Any], None] | None = None,
    choices: tuple | None = None,
    flag: str | None | bool = True,
    type: type | None = None,
) -> Any:
    """A dataclass field of an :class:`Options` class (see the module docstring).

    ``flag=True`` (default) puts the option on the command line as ``--option-name``, a
    string does too and keeps that string as an alias (an older flag name such as ``"steps"``
    for ``num_steps``), and ``False`` keeps the option off the command line. ``type`` defaults
    to the default's type.
    """
    meta = {"help": help, "check": check, "choices": None if choices is None else tuple(choices), "flag": flag, "type": type}
    return dataclasses.field(default=default, metadata={"bnnpp": meta})


@dataclass(frozen=True)
class Options:
    """Base of every method's options dataclass (frozen; see the module docstring).

    Class attributes:
        exclusive: pairs of options that must not be given together (the first replaces
            the second, e.g. ``("optimizer", "learning_rate")``).
        refused: options of the common vocabulary the method cannot take, with why.
        validates_chunks: whether a ``validation_data`` option is scored by the runner after
            every chunk (``False`` where the method uses it otherwise, e.g. Laplace's prior
            precision).
    """

    exclusive: ClassVar[tuple[tuple[str, str], ...]] = ()
    validates_chunks: ClassVar[bool] = True
    refused: ClassVar[dict[str, str]] = {}
    """Names of the common vocabulary the method does not take → the one-line reason and fix."""

    def __post_init__(self):
        for spec in self.specs():
            value = getattr(self, spec.name)
            if spec.choices is not None:
                one_of(spec.name, value, spec.choices)
            if spec.check is not None:
                spec.check(spec.name, value)
        self.check()

    def check(self) -> None:
        """Checks across fields (override); raise ValueError/TypeError with one line."""

    def placement(self, info, devices: int | None, mesh: str | dict | None):
        """Where the fit runs: ``(devices, mesh, device)`` from the model's
        :class:`~bnnpp.inference.model_info.ModelInfo` and the ``devices``/``mesh`` asked
        for, ``device`` a ``jax.Device`` to run on or ``None`` for JAX's default (override:
        NUTS's ``chain_method="parallel"`` asks for one device per chain). Default: as asked."""
        return devices, mesh, None

    def check_data(self, x: np.ndarray, y: np.ndarray) -> None:
        """Checks that need the training data, run before anything compiles (override;
        the default checks a ``batch_size`` field against the rows)."""
        if "batch_size" in self.names():
            check_batch_size(self.batch_size, x)

    @classmethod
    def specs(cls) -> tuple[OptionSpec, ...]:
        """Every option's :class:`OptionSpec`, in declaration order."""
        out = []
        for f in dataclasses.fields(cls):
            meta = f.metadata.get("bnnpp", {})
            flag = meta.get("flag", True)
            aliases = (flag,) if isinstance(flag, str) and flag != f.name else ()
            kind = meta.get("type") or (type(f.default) if f.default is not None else str)
            out.append(
                OptionSpec(
                    f.name,
                    f.default,
                    meta.get("help", ""),
                    meta.get("check"),
                    meta.get("choices"),
                    None if flag is False else f.name,
                    kind,
                    aliases,
                )
            )
        return tuple(out)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Option name → default."""
        return {spec.name: spec.default for spec in cls.specs()}

    @classmethod
    def parse(cls, method: str, given: dict[str, Any]) -> Options:
        """The options from keyword arguments: unknown names and exclusive pairs are
        rejected, then every value is checked (one-line ValueError/TypeError).

        ``temperature`` means the posterior temperature for every method
        (:func:`temperature_option`): a method that cannot temper accepts ``temperature=1``
        (the posterior itself, which it fits) and refuses any other value in one line."""
        if "temperature" in given and "temperature" not in cls.names():
            t = given["temperature"]
            if _is_one(t):
                given = {k: v for k, v in given.items() if k != "temperature"}
            else:
                reason = cls.refused.get("temperature") or f"{method} cannot temper its posterior"
                raise ValueError(f"temperature={t!r} refused: {reason}; only 1 (the untempered posterior) is accepted")
        for name in given:
            if name in cls.refused:
                raise ValueError(cls.refused[name])
        unknown = sorted(set(given) - set(cls.names()))
        if unknown:
            close = difflib.get_close_matches(unknown[0], cls.names(), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ValueError(
                f"method {method!r} does not take option(s) {', '.join(unknown)}; {hint}it takes: {', '.join(sorted(cls.names()))}"
            )
        for a, b in cls.exclusive:
            if given.get(a) is not None and given.get(b) is not None:  # None is an option's "unset"
                raise ValueError(f"pass either {a} or {b}, not both: {a} replaces {b}")
        return cls(**given)

    def resolve(self, n: int) -> Options:
        """The options with lengths that depend on the data fixed for ``n`` training rows
        (called before the method is built; the result is what a posterior records; calling
        it twice changes nothing more). The default sets ``num_steps`` from ``epochs``
        (:func:`steps_for`) where ``epochs`` is the alternative to a ``num_steps`` default
        (a method whose own length is ``epochs``, such as bbb, keeps it); methods override it
        to derive their own lengths (sgld, swag, nuts)."""
        names = self.names()
        if {"num_steps", "epochs"} <= set(names) and self.epochs is not None and self.defaults()["epochs"] is None:
            return dataclasses.replace(self, num_steps=steps_for(self, n))
        return self

    def as_dict(self) -> dict[str, Any]:
        """Option name → value (shallow)."""
        return {name: getattr(self, name) for name in self.names()}
