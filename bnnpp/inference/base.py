"""The contract every backend shares: the backend registry, input checks, `Prediction` and
`Posterior`.

A backend is one file in ``bnnpp/inference/`` that calls :func:`register` with a ``fit``
function ``fit(model, x, y, *, seed, progress, **options) -> Posterior``, the defaults of its
options and a validator that rejects bad values before anything compiles.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers

from bnnpp import metrics

__all__ = [
    "Backend",
    "Posterior",
    "Prediction",
    "Program",
    "SiteInfo",
    "check_data",
    "get_backend",
    "latent_sites",
    "register",
    "registered",
]


# --------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------


class Program(NamedTuple):
    """One fit as pure functions that trace inside ``jit``/``vmap``: what a backend's ``fit``
    compiles and drives chunk by chunk, and what :func:`bnnpp.sweep.sweep` ``vmap``s over
    prior hyperparameters and seeds so that a grid of fits compiles once.

    Attributes:
        init: ``init(key) -> state``.
        step: ``step(state) -> (state, loss)``, one optimisation step.
        draws: ``draws(key, state) -> {site: (S, *site_shape)}``, posterior draws.
        key_init, key_draw: the keys ``fit`` passes to ``init`` and ``draws`` for its seed.
        num_steps: steps ``fit`` runs.
        sites: the model's latent sites (:func:`latent_sites`).
    """

    init: Callable
    step: Callable
    draws: Callable
    key_init: Any
    key_draw: Any
    num_steps: int
    sites: dict


@dataclass(frozen=True)
class Backend:
    """A registered inference method.

    Attributes:
        name: the ``method=`` string.
        fit: ``fit(model, x, y, *, seed, progress, **options) -> Posterior``.
        defaults: every option the backend takes, with its default.
        validate: ``validate(options) -> None``; raises ValueError/TypeError on a bad value.
        summary: one line for help texts.
        exclusive: pairs of options that must not be given together (the first replaces the
            second, e.g. ``("optimizer", "learning_rate")``).
        validate_data: ``validate_data(options, x, y) -> None`` for checks that need the data
            (e.g. ``batch_size`` against the number of rows); run before anything compiles.
        program: ``program(model, x, y, seed, options) -> Program`` for backends whose fit
            is one optimisation loop (``map``, ``advi``); ``None`` otherwise. Enables the
            vmapped sweep.
    """

    name: str
    fit: Callable[..., Posterior]
    defaults: dict[str, Any]
    validate: Callable[[dict[str, Any]], None]
    summary: str = ""
    exclusive: tuple[tuple[str, str], ...] = ()
    validate_data: Callable[[dict[str, Any], np.ndarray, np.ndarray], None] | None = None
    program: Callable[..., Program] | None = None

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """Reject unknown options, validate values, return defaults updated with ``options``."""
        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            raise ValueError(
                f"method {self.name!r} does not take option(s) {', '.join(unknown)}; "
                f"it takes: {', '.join(sorted(self.defaults))}"
            )
        for a, b in self.exclusive:
            if a in options and b in options:
                raise ValueError(f"pass either {a} or {b}, not both: {a} replaces {b}")
        merged = {**self.defaults, **options}
        self.validate(merged)
        return merged


_REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    """Add a backend to the registry under ``backend.name``; returns it."""
    _REGISTRY[backend.name] = backend
    return backend


def registered() -> tuple[str, ...]:
    """Names of the registered methods, sorted."""
    return tuple(sorted(_REGISTRY))


def get_backend(method: str) -> Backend:
    """The backend registered as ``method``; ValueError listing the registered ones otherwise."""
    if method not in _REGISTRY:
        raise ValueError(f"unknown method {method!r}; registered methods: {', '.join(registered())}")
    return _REGISTRY[method]


# --------------------------------------------------------------------------------------
# Option checks shared by backends
# --------------------------------------------------------------------------------------


def positive_int(options: dict, name: str) -> None:
    """Raise unless ``options[name]`` is an integer ≥ 1."""
    v = options[name]
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
        raise ValueError(f"{name} must be an integer ≥ 1, got {v!r}")


def positive_float(options: dict, name: str) -> None:
    """Raise unless ``options[name]`` is a finite number > 0."""
    v = options[name]
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not (
        math.isfinite(v) and v > 0
    ):
        raise ValueError(f"{name} must be a positive number, got {v!r}")


def non_negative_int(options: dict, name: str) -> None:
    """Raise unless ``options[name]`` is an integer ≥ 0."""
    v = options[name]
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
        raise ValueError(f"{name} must be an integer ≥ 0, got {v!r}")


def check_optimizer(opt) -> None:
    """Raise unless ``opt`` is ``None`` or an optax GradientTransformation."""
    if opt is not None and not (hasattr(opt, "init") and hasattr(opt, "update")):
        raise TypeError(f"optimizer must be an optax GradientTransformation such as optax.adam(1e-2), got {opt!r}")


def one_of(options: dict, name: str, choices: tuple[str, ...]) -> None:
    """Raise unless ``options[name]`` is one of ``choices``."""
    if options[name] not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, got {options[name]!r}")


def check_batch_size(options: dict, x: np.ndarray, y: np.ndarray) -> None:
    """Raise unless ``options["batch_size"]`` is ``None`` or at most the number of rows."""
    n = int(x.shape[0])
    b = options.get("batch_size")
    if b is not None and b > n:
        raise ValueError(f"batch_size {b} is larger than the {n} training rows; use batch_size ≤ {n} or None for full batch")


# --------------------------------------------------------------------------------------
# Data checks
# --------------------------------------------------------------------------------------


def check_data(data: Any, model: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate training data for ``model`` before anything compiles.

    Args:
        data: ``(x, y)`` or a :class:`bnnpp.data.Dataset` (its training part is used).
        model: the NumPyro model; its optional attributes ``likelihood``, ``num_classes`` and
            ``input_rank`` sharpen the checks.

    Returns:
        ``x`` as float32 ``(n, ...)`` and ``y`` as int32 (classification) or float32 ``(n,)``.
    """
    if hasattr(data, "x_train") and hasattr(data, "y_train"):
        x, y = data.x_train, data.y_train
    elif isinstance(data, (tuple, list)) and len(data) == 2:
        x, y = data
    else:
        raise TypeError("data must be (x, y) or a bnnpp.data.Dataset")
    try:
        x = np.asarray(x, dtype=np.float32)
        y = np.asarray(y)
    except (TypeError, ValueError) as e:
        raise TypeError(f"x and y must be numeric arrays ({e})") from None
    if y.dtype.kind not in "biuf":
        raise TypeError(f"y must be numeric, got dtype {y.dtype}")
    if x.ndim == 0 or x.shape[0] == 0:
        raise ValueError("data is empty: x needs at least one row")
    rank = getattr(model, "input_rank", None)
    if rank is not None and x.ndim != rank:
        hint = "; reshape a single feature with x.reshape(-1, 1)" if x.ndim == 1 and rank == 2 else ""
        layout = "(n, features)" if rank == 2 else "(n, height, width, channels)" if rank == 4 else f"rank {rank}"
        raise ValueError(f"x must have rank {rank} {layout}, got shape {x.shape}{hint}")
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D with one target per row of x, got shape {y.shape}")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x has {x.shape[0]} rows but y has {y.shape[0]}: pass one target per row")
    if not np.all(np.isfinite(x)):
        raise ValueError("x contains NaN or inf: drop or impute those rows before fitting")
    if not np.all(np.isfinite(y.astype(np.float64))):
        raise ValueError("y contains NaN or inf: drop or impute those rows before fitting")
    likelihood = getattr(model, "likelihood", None)
    if likelihood in ("categorical", "bernoulli"):
        k = int(getattr(model, "num_classes", 2) or 2)
        if np.any(y != np.round(y)):
            raise ValueError("classification labels must be integers 0..num_classes-1")
        if y.min() < 0 or y.max() >= k:
            raise ValueError(
                f"labels must lie in [0, {k}) for num_classes={k}, got range [{y.min()}, {y.max()}]; "
                "re-code the labels or set num_classes"
            )
        return x, y.astype(np.int32)
    if likelihood == "gaussian":
        return x, y.astype(np.float32)
    return x, (y.astype(np.int32) if y.dtype.kind in "biu" else y.astype(np.float32))


# --------------------------------------------------------------------------------------
# Model introspection (abstract tracing only: nothing is compiled or run)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SiteInfo:
    """A latent sample site: its shape and ArviZ dimension names."""

    shape: tuple[int, ...]
    dims: tuple[str, ...]


def latent_sites(model: Callable, x: np.ndarray, y: np.ndarray | None = None) -> dict[str, SiteInfo]:
    """The model's latent (unobserved) sample sites with shapes and dims, in trace order.

    Dims come from a site's ``infer={"dims": ...}`` (as set by :func:`bnnpp.models.dense`),
    else ``<site>_dim_<i>``. Traced abstractly with ``jax.eval_shape``: no compilation.
    """
    found: dict[str, SiteInfo] = {}

    def improper_as_zeros(site):
        # an improper prior (priors.flat) cannot be sampled; only its shape matters here
        fn = site.get("fn") if site["type"] == "sample" else None
        return jnp.zeros(fn.shape()) if fn is not None and isinstance(unwrap(fn), dist.ImproperUniform) else None

    def trace_once(key):
        seeded = handlers.seed(model, key)
        tr = handlers.trace(handlers.substitute(seeded, substitute_fn=improper_as_zeros)).get_trace(x, y)
        for name, site in tr.items():
            if site["type"] != "sample" or site["is_observed"]:
                continue
            shape = tuple(jnp.shape(site["value"]))
            dims = tuple((site.get("infer") or {}).get("dims", ()))
            if len(dims) != len(shape):
                dims = tuple(f"{name}_dim_{i}" for i in range(len(shape)))
            found[name] = SiteInfo(shape, dims)
        return 0

    jax.eval_shape(trace_once, jax.random.PRNGKey(0))
    return found


BATCH_WRAPPERS = (dist.ExpandedDistribution, dist.Independent)
"""Wrappers that only reshape a distribution (``.expand``, ``.to_event``)."""


def unwrap(fn: dist.Distribution, through: tuple[type, ...] = (*BATCH_WRAPPERS, dist.MaskedDistribution)) -> dist.Distribution:
    """The distribution inside ``fn``'s wrappers of the types ``through`` (default: reshaping
    and masking; pass :data:`BATCH_WRAPPERS` where a mask changes what matters)."""
    while isinstance(fn, through):
        fn = fn.base_dist
    return fn


def _observation(model: Callable, sample: dict, key, x, y):
    """Trace the model at one posterior draw; return the likelihood's parameters and, when
    ``y`` is given, the per-observation log-likelihood ``(n,)``."""
    tr = handlers.trace(handlers.substitute(handlers.seed(model, key), data=sample)).get_trace(x, y)
    if "y" not in tr:
        raise ValueError("the model has no observation site named 'y': sample the targets as numpyro.sample('y', ...)")
    site = tr["y"]
    fn = site["fn"]
    base = unwrap(fn)
    n = x.shape[0]
    if isinstance(base, dist.CategoricalProbs | dist.CategoricalLogits):
        out = {"probs": jnp.broadcast_to(base.probs, (n, base.probs.shape[-1]))}
    elif isinstance(base, dist.BernoulliProbs | dist.BernoulliLogits):
        p = jnp.broadcast_to(base.probs, (n,))
        out = {"probs": jnp.stack([1 - p, p], axis=-1)}
    elif isinstance(base, dist.Normal):
        out = {"loc": jnp.broadcast_to(base.loc, (n,)), "scale": jnp.broadcast_to(base.scale, (n,))}
    else:
        raise TypeError(
            f"prediction supports Categorical, Bernoulli and Normal observation sites, got {type(base).__name__}"
        )
    if y is not None:
        out["log_likelihood"] = jnp.broadcast_to(fn.log_prob(y), (n,))
    return out


# --------------------------------------------------------------------------------------
# Prediction
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """Posterior-predictive output at ``n`` inputs from ``S`` posterior draws.

    Classification: ``probs`` ``(S, n, C)``. Regression: ``draws`` ``(S, n)`` (the network's
    mean function per draw) and ``noise`` ``(S, n)`` (the observation sd per draw).
    """

    task: str
    probs: np.ndarray | None = None
    draws: np.ndarray | None = None
    noise: np.ndarray | None = None

    @property
    def mean(self) -> np.ndarray:
        """Predictive mean: class probabilities ``(n, C)``, or regression mean ``(n,)``."""
        return (self.probs if self.task == "classification" else self.draws).mean(axis=0)

    @property
    def std(self) -> np.ndarray:
        """Classification: sd of the class probabilities over draws ``(n, C)``.
        Regression: total predictive sd ``(n,)`` = sqrt(epistemic² + aleatoric²)."""
        if self.task == "classification":
            return self.probs.std(axis=0)
        return np.sqrt(self.epistemic_std**2 + self.aleatoric_std**2)

    @property
    def variance(self) -> np.ndarray:
        """Variance over posterior draws: of the class probabilities ``(n, C)`` (classification),
        or of the mean function ``(n,)`` (regression, = ``epistemic_std**2``)."""
        return (self.probs if self.task == "classification" else self.draws).var(axis=0)

    @property
    def epistemic_std(self) -> np.ndarray:
        """Regression: sd of the mean function over draws ``(n,)``."""
        self._need("regression")
        return self.draws.std(axis=0)

    @property
    def aleatoric_std(self) -> np.ndarray:
        """Regression: root mean observation variance over draws ``(n,)``."""
        self._need("regression")
        return np.sqrt(np.mean(self.noise**2, axis=0))

    @property
    def entropy(self) -> np.ndarray:
        """Predictive entropy (total uncertainty) ``(n,)``."""
        self._need("classification")
        return metrics.predictive_entropy(self.probs)

    @property
    def expected_entropy(self) -> np.ndarray:
        """Expected entropy over draws (aleatoric) ``(n,)``."""
        self._need("classification")
        return metrics.expected_entropy(self.probs)

    @property
    def mutual_information(self) -> np.ndarray:
        """Mutual information between label and weights (epistemic) ``(n,)``."""
        self._need("classification")
        return metrics.mutual_information(self.probs)

    @property
    def expected_error_rate(self) -> np.ndarray:
        """1 − max class probability of the mean prediction ``(n,)``."""
        self._need("classification")
        return metrics.expected_error_rate(self.mean)

    def scores(self, y) -> dict:
        """Classification test scores against labels ``y`` ``(n,)``: accuracy, NLL, Brier, ECE
        (of the mean prediction) and the means of entropy, mutual information and expected
        error rate over the points, as floats."""
        self._need("classification")
        m = self.mean
        return {
            "accuracy": metrics.accuracy(m, y),
            "nll": metrics.nll(m, y),
            "brier": metrics.brier(m, y),
            "ece": metrics.ece(m, y),
            "mean_entropy": float(self.entropy.mean()),
            "mean_mutual_information": float(self.mutual_information.mean()),
            "mean_expected_error_rate": float(self.expected_error_rate.mean()),
        }

    def _need(self, task: str) -> None:
        if self.task != task:
            raise AttributeError(f"this quantity is defined for {task}, not {self.task}")


# --------------------------------------------------------------------------------------
# Posterior
# --------------------------------------------------------------------------------------


#: Training data larger than this many values (x.size) is not written by
#: :meth:`Posterior.save` unless asked for (50,000 MNIST images are 39 million values).
MAX_SAVED_DATA = 5_000_000


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


@dataclass
class Posterior:
    """What every backend returns.

    Attributes:
        samples: site name → array ``(chain, draw, *site_shape)`` of latent draws (VI and MAP
            backends use one chain).
        info: ``method``, ``options``, ``seed``, seconds (``compile_seconds``, ``run_seconds``,
            ``sample_seconds``) and traces such as ``loss`` ``(steps,)``; JSON-safe except the
            trace arrays.
        model: the NumPyro model; ``None`` after loading a custom model without passing it.
        x, y: the training data (for log-likelihoods and ArviZ's observed/constant data). A
            posterior loaded from a file saved without its data has ``x`` of shape
            ``(0, *features)`` and ``y`` of shape ``(0,)`` (see :meth:`save`).
        sites: latent site shapes and dims (see :func:`latent_sites`).
    """

    samples: dict[str, np.ndarray]
    info: dict[str, Any]
    model: Callable | None
    x: np.ndarray
    y: np.ndarray
    sites: dict[str, SiteInfo]
    _jitted: dict = field(default_factory=dict, repr=False)

    # -- shape helpers --------------------------------------------------------------

    @property
    def has_data(self) -> bool:
        """True when the training data is present (False after loading a file saved without it)."""
        return self.x.shape[0] > 0

    @property
    def num_chains(self) -> int:
        """Number of chains (1 for VI/MAP)."""
        return next(iter(self.samples.values())).shape[0]

    @property
    def num_draws(self) -> int:
        """Draws per chain."""
        return next(iter(self.samples.values())).shape[1]

    def _flat(self, num_samples: int | None) -> dict[str, jnp.ndarray]:
        total = self.num_chains * self.num_draws
        if num_samples is None:
            idx = np.arange(total)
        else:
            if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
                raise ValueError(f"num_samples must be an integer ≥ 1, got {num_samples!r}")
            # evenly spaced over all chains' draws; repeat draws only if asked for more than exist
            idx = np.floor(np.arange(num_samples) * total / num_samples).astype(int)
        return {k: jnp.asarray(v.reshape((total, *v.shape[2:]))[idx]) for k, v in self.samples.items()}

    def _model_or_raise(self) -> Callable:
        if self.model is None:
            raise ValueError(
                "this posterior was saved from a custom model; pass it when loading: bnnpp.load(path, model=my_model)"
            )
        return self.model

    def _observe(self, kind: str):
        """The jitted, draw-vmapped observation function, built once per posterior."""
        if kind not in self._jitted:
            model = self._model_or_raise()
            if kind == "predict":
                f = lambda s, k, x: _observation(model, s, k, x, None)  # noqa: E731
            else:
                f = lambda s, k, x, y: _observation(model, s, k, x, y)  # noqa: E731
            in_axes = (0, 0, None) if kind == "predict" else (0, 0, None, None)
            self._jitted[kind] = jax.jit(jax.vmap(f, in_axes=in_axes))
        return self._jitted[kind]

    # -- public API -------------------------------------------------------------------

    def predict(self, x: Any, num_samples: int | None = None, seed: int = 0) -> Prediction:
        """Posterior-predictive quantities at inputs ``x`` ``(n, features)``.

        Args:
            x: new inputs with the training data's feature shape.
            num_samples: number of posterior draws S to use (default: all, chains pooled).
            seed: key for any randomness the model draws while predicting.

        Returns:
            A :class:`Prediction`: ``probs`` ``(S, n, C)`` for classifiers, or ``draws`` and
            ``noise`` ``(S, n)`` for regression.
        """
        x = np.asarray(x, dtype=np.float32)
        if x.shape[1:] != self.x.shape[1:]:
            raise ValueError(f"x must have shape (n, {', '.join(map(str, self.x.shape[1:]))}), got {x.shape}")
        if x.shape[0] == 0:
            raise ValueError("x is empty: pass at least one input row")
        if not np.all(np.isfinite(x)):
            raise ValueError("x contains NaN or inf")
        flat = self._flat(num_samples)
        s = next(iter(flat.values())).shape[0]
        keys = jax.random.split(jax.random.PRNGKey(seed), s)
        out = jax.device_get(self._observe("predict")(flat, keys, x))
        if "probs" in out:
            return Prediction("classification", probs=np.asarray(out["probs"]))
        return Prediction("regression", draws=np.asarray(out["loc"]), noise=np.asarray(out["scale"]))

    def log_likelihood(self) -> np.ndarray:
        """Pointwise log-likelihood of the training data, ``(chain, draw, n)``."""
        if not self.has_data:
            raise ValueError(
                "this posterior was saved without its training data, so it has no log-likelihood; "
                "save with include_data=True to keep it"
            )
        flat = self._flat(None)
        s = self.num_chains * self.num_draws
        keys = jax.random.split(jax.random.PRNGKey(0), s)
        ll = self._observe("loglik")(flat, keys, self.x, self.y)["log_likelihood"]
        return np.asarray(ll).reshape(self.num_chains, self.num_draws, -1)

    def posterior_predictive(self, seed: int = 0) -> np.ndarray:
        """One replicated data set per draw at the training inputs, ``(chain, draw, n)``:
        labels sampled from each draw's class probabilities, or targets from N(mean, noise²)."""
        if not self.has_data:
            raise ValueError("this posterior was saved without its training data: no posterior predictive at it")
        pred = self.predict(self.x, seed=seed)
        rng = np.random.default_rng(seed)
        if pred.task == "classification":
            cum = np.cumsum(pred.probs, axis=-1)
            u = rng.random(cum.shape[:-1] + (1,))
            rep = np.minimum((u > cum).sum(-1), cum.shape[-1] - 1).astype(np.int32)
        else:
            rep = (pred.draws + pred.noise * rng.standard_normal(pred.draws.shape)).astype(np.float32)
        return rep.reshape(self.num_chains, self.num_draws, -1)

    def to_arviz(self, include_data: bool | None = None):
        """An ``arviz.InferenceData`` with groups posterior (named dims), log_likelihood,
        posterior_predictive, observed_data, constant_data and sample_stats; see
        :func:`bnnpp.diagnostics.to_arviz`. ``include_data`` as in :meth:`save`."""
        from bnnpp import diagnostics

        return diagnostics.to_arviz(self, include_data=include_data)

    def save(self, path: str | os.PathLike, include_data: bool | None = None) -> None:
        """Write the posterior as one netCDF file (the InferenceData of :meth:`to_arviz`, with
        info and the model spec as JSON in its attributes; guide parameters in the
        ``variational_params`` group). The parent folder is created if needed; the file is
        written to a temporary name and moved into place, so a failure leaves nothing
        half-written. Never pickles.

        Args:
            path: the ``.nc`` file to write.
            include_data: write the training data (``constant_data``/``observed_data``) and
                the groups computed from it (``log_likelihood``, ``posterior_predictive``).
                ``None`` (default): only when ``x`` has at most :data:`MAX_SAVED_DATA` values,
                so an MNIST-size fit stores its draws and variational parameters but not 50,000
                images; reload the data separately (``bnnpp evaluate`` does so from
                ``metrics.json``). A posterior loaded without data predicts as before, but
                ``log_likelihood``/``loo`` need the data.
        """
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise ValueError(f"{folder} is a file, not a folder: choose another path")
        idata = self.to_arviz(include_data=include_data)
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".nc.tmp", dir=folder)
        os.close(fd)
        try:
            idata.to_netcdf(tmp)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def meta_json(self) -> str:
        """The JSON stored in a saved file: info (without trace arrays), model spec, sites."""
        # arrays (traces, guide parameters) live in their own netCDF groups, not in the JSON
        info = {
            k: v
            for k, v in self.info.items()
            if not isinstance(v, (np.ndarray, jax.Array)) and k not in ("guide_params", "sample_stats")
        }
        spec = self.model.spec() if hasattr(self.model, "spec") else None
        sites = {k: {"shape": list(v.shape), "dims": list(v.dims)} for k, v in self.sites.items()}
        data = {"feature_shape": list(self.x.shape[1:]), "n": int(self.x.shape[0]), "y_dtype": str(self.y.dtype)}
        return json.dumps(_json_safe({"info": info, "model": spec, "sites": sites, "data": data}))

    def include_data(self, include_data: bool | None) -> bool:
        """Resolve ``include_data=None`` (see :meth:`save`): True when the data is present and small."""
        if include_data is None:
            return self.has_data and self.x.size <= MAX_SAVED_DATA
        if include_data and not self.has_data:
            raise ValueError("this posterior has no training data to include (it was loaded from a file saved without it)")
        return bool(include_data)

    def __repr__(self) -> str:
        return (
            f"Posterior(method={self.info.get('method')!r}, chains={self.num_chains}, draws={self.num_draws}, "
            f"sites={list(self.samples)})"
        )


def load(path: str | os.PathLike, model: Callable | None = None) -> Posterior:
    """Read a posterior written by :meth:`Posterior.save`.

    Args:
        path: the ``.nc`` file.
        model: the NumPyro model, needed only when the file came from a custom model (a
            ``bnnpp.models`` network is rebuilt from the spec stored in the file).

    Returns:
        A :class:`Posterior` whose ``predict`` and ``to_arviz`` work as before saving.
    """
    from bnnpp import diagnostics, models

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"no posterior file at {path}: pass the .nc file written by Posterior.save")
    idata = diagnostics.read_netcdf(path)
    meta_text = idata.posterior.attrs.get("bnnpp")
    if meta_text is None:
        raise ValueError(f"{path} is not a bnnpp posterior (no 'bnnpp' attribute); save it with Posterior.save")
    meta = json.loads(meta_text)
    sites = {k: SiteInfo(tuple(v["shape"]), tuple(v["dims"])) for k, v in meta["sites"].items()}
    samples = {k: np.asarray(idata.posterior[k].values) for k in sites}
    info = dict(meta["info"])
    if "sample_stats" in idata.groups():
        for name, var in idata.sample_stats.data_vars.items():
            if "draw" in var.dims:
                info.setdefault("sample_stats", {})[name] = np.asarray(var.values)
            else:  # an optimisation trace, (chain=1, step) or (step,)
                info[name] = np.asarray(var.values[0] if var.ndim == 2 else var.values)
    if "variational_params" in idata.groups():
        info["guide_params"] = {k: np.asarray(v.values) for k, v in idata.variational_params.data_vars.items()}
    if model is None and meta["model"] is not None:
        model = models.from_spec(meta["model"])
    if "constant_data" in idata.groups():
        x = np.asarray(idata.constant_data["x"].values)
        y = np.asarray(idata.observed_data["y"].values)
    else:  # saved without its training data
        data = meta.get("data") or {}
        x = np.zeros((0, *data.get("feature_shape", ())), np.float32)
        y = np.zeros((0,), data.get("y_dtype", "int32"))
    return Posterior(samples, info, model, x, y, sites)
