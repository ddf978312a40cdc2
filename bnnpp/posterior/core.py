"""``Posterior``: what every inference method returns — latent draws, the approximation they
came from, the fit's statistics, and the model and data to predict and to build ArviZ's
``InferenceData``."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bnnpp import calibrate
from bnnpp.introspection import SiteInfo, deterministic_sites, latent_sites, observation, probe_rows
from bnnpp.posterior import io
from bnnpp.posterior.approximation import Approximation, FitStats
from bnnpp.posterior.families import from_guide_params
from bnnpp.posterior.prediction import Prediction

__all__ = ["MAX_DRAW_ROWS", "MAX_SAVED_DATA", "Posterior", "seed_integer"]

#: Training data larger than this many values (x.size) is not written by
#: :meth:`Posterior.save` unless asked for (50,000 MNIST images are 39 million values).
MAX_DRAW_ROWS = 1 << 17
"""Most (draw, row) pairs one prediction call evaluates at once (:meth:`Posterior.predict`,
the log-likelihood): a network's activations take that many times its layers' widths, 0.4 GB
in float32 for two hidden layers of 400 units, however many draws and rows are asked for."""
MAX_SAVED_DATA = 5_000_000


def seed_integer(seed) -> int:
    """The integer seed in [0, 2**32) that ``seed`` stands for, as :func:`bnnpp.fit` and
    :meth:`Posterior.predict` take it: an integer itself; a JAX key made by
    ``jax.random.PRNGKey(s)`` / ``jax.random.key(s)`` (threefry, ``s < 2**32``) is ``s``, so
    it gives the same result as the integer; any other key (e.g. one from
    ``jax.random.split``) the integer numpy's generator seeded by the key's words draws.

    Raises:
        ValueError: one line, for anything else (JAX's own error for a string names no fix;
            a negative integer would wrap).
    """
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        if 0 <= seed < 2**32:
            return int(seed)
    elif isinstance(seed, (jax.Array, np.ndarray)):
        words = None
        if jax.dtypes.issubdtype(seed.dtype, jax.dtypes.prng_key) and seed.ndim == 0:
            words = np.asarray(jax.random.key_data(seed))
        elif seed.dtype == np.uint32 and seed.shape == (2,):
            words = np.asarray(seed)
        if words is not None:
            words = words.ravel()
            if words.size == 2 and words[0] == 0:
                return int(words[1])
            return int(np.random.default_rng([int(w) for w in words]).integers(2**32))
    raise ValueError(f"seed must be an integer in [0, 2**32) or a JAX PRNG key (jax.random.PRNGKey(s) or jax.random.key(s)), got {seed!r}")


@dataclass
class Posterior:
    """What every method returns.

    Attributes:
        samples: site name → array ``(chain, draw, *site_shape)`` of latent draws (VI and MAP
            methods use one chain).
        stats: the fit's :class:`~bnnpp.posterior.approximation.FitStats` (method, options,
            seed, per-step traces, per-draw sample statistics, seconds). A plain ``info`` dict
            of bnnpp 0.1 is accepted here and converted.
        model: the NumPyro model; ``None`` after loading a custom model without passing it.
        x, y: the training data (for log-likelihoods and ArviZ's observed/constant data). A
            posterior loaded from a file saved without its data has ``x`` of shape
            ``(0, *features)`` and ``y`` of shape ``(0,)`` (see :meth:`save`).
        sites: latent site shapes and dims (:func:`bnnpp.introspection.latent_sites`).
        approximation: the variational family the draws came from
            (:class:`~bnnpp.posterior.approximation.MeanFieldGaussian` for mean-field advi and
            bbb, :class:`~bnnpp.posterior.approximation.GuideParameters` for other guides) or
            ``None`` (samplers, MAP).
        calibration: a :class:`~bnnpp.calibrate.Calibration` fitted by :meth:`calibrate`
            (conformal intervals/sets, temperature) that :meth:`predict` applies, or ``None``.
    """

    samples: dict[str, np.ndarray]
    stats: FitStats
    model: Callable | None
    x: np.ndarray
    y: np.ndarray
    sites: dict[str, SiteInfo]
    approximation: Approximation | None = None
    calibration: calibrate.Calibration | None = None
    _jitted: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        if isinstance(self.stats, dict):  # an info dict (bnnpp 0.1): split into typed parts
            info = self.stats
            if self.approximation is None:
                self.approximation = from_guide_params(info.get("guide_params"), list(self.sites))
            self.stats = FitStats.from_info(info)

    # -- compatibility ----------------------------------------------------------------

    @property
    def info(self) -> dict[str, Any]:
        """A flat dict view of :attr:`stats` and the approximation's parameters
        (``guide_params``), as bnnpp 0.1 returned it. Built on each access: change
        :attr:`stats` instead."""
        info = self.stats.as_info()
        if self.approximation is not None:
            info["guide_params"] = self.approximation.to_params()
        return info

    @property
    def method(self) -> str:
        """The method name the posterior came from."""
        return self.stats.method

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

    def flat_draws(self, num_samples: int | None = None) -> dict[str, jnp.ndarray]:
        """Draws with chains pooled, ``{site: (S, *site_shape)}``: all of them, or
        ``num_samples`` evenly spaced over all chains' draws (repeating draws only if asked
        for more than exist)."""
        total = self.num_chains * self.num_draws
        idx = self.draw_index(num_samples)
        return {k: jnp.asarray(v.reshape((total, *v.shape[2:]))[idx]) for k, v in self.samples.items()}

    def draw_index(self, num_samples: int | None = None) -> np.ndarray:
        """Which pooled draws :meth:`flat_draws` takes: ``(S,)`` int indices into the chains'
        draws laid end to end (all of them, or ``num_samples`` evenly spaced)."""
        total = self.num_chains * self.num_draws
        if num_samples is None:
            return np.arange(total)
        if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
            raise ValueError(f"num_samples must be an integer ≥ 1, got {num_samples!r}")
        return np.floor(np.arange(num_samples) * total / num_samples).astype(int)

    _flat = flat_draws  # the name bnnpp 0.1 used internally

    def draws_to_use(self, num_samples: int | None, *, stacklevel: int = 2) -> int | None:
        """``num_samples`` checked and capped at the draws kept (chains pooled): ``None`` stays
        ``None`` (all of them); a larger number becomes the number kept, with a one-line
        ``UserWarning`` (``stacklevel`` as :func:`warnings.warn`'s, counted from the caller), so
        that a mistyped 10⁹ never allocates for 10⁹ draws. One-line ValueError for anything
        but an integer ≥ 1."""
        if num_samples is None:
            return None
        if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 1:
            raise ValueError(f"num_samples must be an integer ≥ 1, got {num_samples!r}")
        total = self.num_chains * self.num_draws
        if num_samples > total:
            warnings.warn(
                f"num_samples={num_samples} is more than the {total} posterior draws kept: using all {total}",
                UserWarning,
                stacklevel=stacklevel + 1,
            )
            return total
        return int(num_samples)

    def check_finite(self) -> None:
        """Raise a one-line ValueError when a latent site's draws hold NaN or inf, naming the
        site and how many draws: predictions from such a posterior are NaN (a fit that
        diverged, or a damaged file)."""
        key = ("finite", tuple(id(v) for v in self.samples.values()))
        if self._jitted.get("finite") == key:
            return
        broken = self.non_finite_site()
        if broken is not None:
            name, bad, total = broken
            raise ValueError(
                f"the posterior's site {name!r} holds NaN or inf in {bad} of its {total} draws, so its "
                "predictions would be NaN: the fit diverged or the file is damaged; fit again (e.g. with a "
                "smaller learning rate or step size)"
            )
        self._jitted["finite"] = key

    def non_finite_site(self) -> tuple[str, int, int] | None:
        """The first latent site whose draws hold NaN or inf: ``(site, draws affected, draws)``,
        or ``None`` when every draw is finite."""
        total = self.num_chains * self.num_draws
        for name, v in self.samples.items():
            a = np.asarray(v)
            if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                return name, int((~np.isfinite(a.reshape(total, -1))).any(axis=1).sum()), total
        return None

    def model_or_raise(self) -> Callable:
        """The model; ValueError naming the fix when it was not passed to :func:`bnnpp.load`."""
        if self.model is None:
            raise ValueError("this posterior was saved from a custom model; pass it when loading: bnnpp.load(path, model=my_model)")
        return self.model

    _model_or_raise = model_or_raise

    @property
    def deterministic_names(self) -> tuple[str, ...]:
        """The ``numpyro.deterministic`` sites of a custom model (bnnpp's own networks, which
        have a ``spec``, report none: their ``logits``/``mean`` are the prediction itself)."""
        if "deterministic_names" not in self._jitted:
            model = self.model
            names: tuple[str, ...] = ()
            if model is not None and not hasattr(model, "spec"):
                # the training rows that give the latents their shapes; without data a row of ones (x may be a scale)
                probe = probe_rows(model, self.x, self.y)[0] if self.has_data else np.ones((1, *self.x.shape[1:]), np.float32)
                names = tuple(deterministic_sites(model, probe))
            self._jitted["deterministic_names"] = names
        return self._jitted["deterministic_names"]

    def row_latents(self, x=None) -> tuple[str, ...]:
        """The latent sites whose size follows the number of input rows (one effect per school,
        one step per day; empty for a network): the sites whose shape at one row of ``x``
        (default: the training inputs) differs from their draws'. Such a posterior predicts only
        at inputs with as many rows as it was fitted on."""
        if "row_latents" not in self._jitted:
            model = self.model_or_raise()
            probe = self.x[:1] if self.has_data else (None if x is None else np.asarray(x, np.float32)[:1])
            if probe is None:
                return ()
            one = latent_sites(model, probe)
            self._jitted["row_latents"] = tuple(k for k, v in self.samples.items() if k in one and one[k].shape != np.shape(v)[2:])
        return self._jitted["row_latents"]

    def _check_rows(self, x) -> None:
        """One-line ValueError when ``x`` would change the size of a latent site that follows the
        rows (:meth:`row_latents`): its draws cannot be used there."""
        names = self.row_latents(x)
        if not names:
            return
        at = latent_sites(self.model_or_raise(), x)
        wrong = [k for k in names if k not in at or at[k].shape != np.shape(self.samples[k])[2:]]
        if wrong:
            k = wrong[0]
            fitted = np.shape(self.samples[k])[2:]
            raise ValueError(
                f"latent site {k!r} has shape {fitted} from the {self.x.shape[0] if self.has_data else 'training'} rows it was "
                f"fitted on, and {at[k].shape if k in at else 'none'} at these {x.shape[0]} rows: predict at inputs with as "
                "many rows as the fit (its draws are per row)"
            )

    def deterministic(self) -> dict[str, np.ndarray]:
        """A custom model's ``numpyro.deterministic`` sites at every draw and the training
        inputs, name → ``(chain, draw, *site_shape)`` (empty when it has none)."""
        if not self.deterministic_names:
            return {}
        if not self.has_data:
            raise ValueError("this posterior was saved without its training data: no deterministic sites at it")
        out = self._evaluate("loglik", None, 0, self.x, self.y)["deterministic"]
        return {k: np.asarray(v).reshape(self.num_chains, self.num_draws, *np.shape(v)[1:]) for k, v in out.items()}

    def _evaluate(self, kind: str, num_samples: int | None, seed: int, x, y=None) -> dict:
        """:func:`~bnnpp.introspection.observation` at ``num_samples`` draws (``None``: all;
        one key per draw from ``seed``) and inputs ``x`` (targets ``y`` for ``kind="loglik"``),
        as host arrays with a leading draw axis ``(S, n, ...)``. At most
        :data:`MAX_DRAW_ROWS` (draw, row) pairs are evaluated at once: larger requests go in
        blocks of draws (and of rows, for a model without per-row latents or deterministic
        sites), each block's draws moved to the device only for its call and every block
        padded to one shape, so one program serves them all. Peak memory then grows with the
        block, not with S × n (NumPyro's ``Predictive`` holds every draw's output at once)."""
        idx = self.draw_index(num_samples)
        s, n = len(idx), int(np.shape(x)[0])
        keys = jax.random.split(jax.random.PRNGKey(seed), s)
        total = self.num_chains * self.num_draws
        pooled = {k: np.asarray(v).reshape((total, *np.shape(v)[2:])) for k, v in self.samples.items()}
        f = self._observe(kind)
        data = (x,) if y is None else (x, y)
        if s * n <= MAX_DRAW_ROWS:
            return jax.device_get(f({k: jnp.asarray(v[idx]) for k, v in pooled.items()}, keys, *data))
        rows = n if (self.row_latents(x) or self.deterministic_names) else min(n, MAX_DRAW_ROWS)
        block = max(1, min(s, MAX_DRAW_ROWS // rows))
        out: dict = {}
        for d0 in range(0, s, block):
            di = _padded(np.arange(d0, min(d0 + block, s)), block)
            draws = {k: jnp.asarray(v[idx[di]]) for k, v in pooled.items()}
            m = min(block, s - d0)
            for r0 in range(0, n, rows):
                ri = _padded(np.arange(r0, min(r0 + rows, n)), rows)
                res = jax.device_get(f(draws, keys[di], *(np.asarray(a)[ri] for a in data)))
                mr = min(rows, n - r0)
                for name, value in res.items():
                    if name == "deterministic":  # rows whole here: one block of draws
                        det = out.setdefault(name, {})
                        for k, v in value.items():
                            det.setdefault(k, np.empty((s, *np.shape(v)[1:]), np.asarray(v).dtype))[d0 : d0 + m] = np.asarray(v)[:m]
                        continue
                    value = np.asarray(value)
                    target = out.setdefault(name, np.empty((s, n, *value.shape[2:]), value.dtype))
                    target[d0 : d0 + m, r0 : r0 + mr] = value[:m, :mr]
        return out

    def _observe(self, kind: str):
        """The jitted, draw-vmapped observation function, built once per posterior."""
        if kind not in self._jitted:
            model = self.model_or_raise()
            det = bool(self.deterministic_names)
            if kind == "predict":
                f = lambda s, k, x: observation(model, s, k, x, None, det)
            else:
                f = lambda s, k, x, y: observation(model, s, k, x, y, det)
            in_axes = (0, 0, None) if kind == "predict" else (0, 0, None, None)
            self._jitted[kind] = jax.jit(jax.vmap(f, in_axes=in_axes))
        return self._jitted[kind]

    # -- public API -------------------------------------------------------------------

    def predict(self, x: Any, num_samples: int | None = None, seed: Any = 0) -> Prediction:
        """Posterior-predictive quantities at inputs ``x`` ``(n, features)``.

        Args:
            x: new inputs with the training data's feature shape.
            num_samples: number of posterior draws S to use (default: all, chains pooled).
            seed: an integer or a JAX key (:func:`seed_integer`) for any randomness the model
                draws while predicting.

        Returns:
            A :class:`Prediction` over S draws (``num_samples``, at most the draws kept: a
            larger number is capped with a warning): ``probs`` ``(S, n, C)`` for classifiers, or ``draws`` and
            ``noise`` ``(S, n)`` (``(S, n, K)`` for targets ``(n, K)``) for regression, with its
            ``likelihood`` (gaussian, student_t, poisson); a custom model's deterministic
            sites in ``deterministic`` ``(S, *site_shape)``. A calibrated posterior
            (:meth:`calibrate`) returns temperature-scaled ``probs`` and adds the conformal
            ``interval_lo``/``interval_hi`` ``(n, ...)`` or ``sets`` ``(n, C)``. One-line
            ValueError for inputs of the wrong shape or not finite, and for a posterior whose
            draws hold NaN or inf (:meth:`check_finite`).
        """
        prediction = self._predict_uncalibrated(x, num_samples, seed)
        if self.calibration is None:
            return prediction
        return self.calibration.apply(prediction, seed_integer(seed))

    def _predict_uncalibrated(self, x: Any, num_samples: int | None, seed: Any) -> Prediction:
        """:meth:`predict` without the calibration."""
        seed = seed_integer(seed)
        if np.ma.isMaskedArray(x) and np.ma.is_masked(x):
            raise ValueError("x is a masked array with masked entries: drop or impute those rows (the values under the mask would be used)")
        if hasattr(x, "dtype") and np.iscomplexobj(x):
            raise TypeError(f"x is complex ({x.dtype}): pass real numbers")
        with np.errstate(over="ignore"):  # beyond float32 becomes inf, refused below
            x = np.asarray(x, dtype=np.float32)
        if x.shape[1:] != self.x.shape[1:]:
            raise ValueError(f"x must have shape (n, {', '.join(map(str, self.x.shape[1:]))}), got {x.shape}")
        if x.shape[0] == 0:
            raise ValueError("x is empty: pass at least one input row")
        if not np.all(np.isfinite(x)):
            raise ValueError("x contains NaN or inf")
        self._check_rows(x)
        num_samples = self.draws_to_use(num_samples)
        self.check_finite()
        own = None
        if self.approximation is not None and self.approximation.predict is not None:
            own = self.approximation.predict(self, x, num_samples, seed)  # e.g. the linearised Laplace
            if own is not None and not self.deterministic_names:
                return own
        at_draws = self._prediction(self._evaluate("predict", num_samples, seed, x))
        if own is not None:
            return dataclasses.replace(own, deterministic=at_draws.deterministic)  # its sites at the draws
        return at_draws

    def calibrate(
        self,
        x: Any,
        y: Any,
        alpha: float | None = 0.1,
        *,
        score: str | None = None,
        temperature_scaling: bool | None = None,
        temperature_loss: str = "auto",
        randomized: bool = True,
        raps_lambda: float = 0.01,
        raps_k: int = 1,
        num_samples: int | None = None,
        seed: Any = 0,
    ) -> Posterior:
        """This posterior calibrated on a held-out split (:func:`bnnpp.calibrate.fit`): split-
        conformal intervals (regression) or prediction sets (classification) with coverage
        ≥ ``1 − alpha``, and for classifiers temperature scaling of the predictive.

        Args:
            x, y: calibration inputs ``(n, *features)`` and targets ``(n, ...)`` (class indices
                for a classifier), in the model's units, not used for fitting.
            alpha: the miscoverage (0.1: 90% intervals or sets); ``None``: temperature only.
            score, temperature_scaling, temperature_loss, randomized, raps_lambda, raps_k: see
                :func:`bnnpp.calibrate.fit` (``temperature_loss``: ``"auto"`` picks the NLL or
                the Brier score for the temperature by cross-validated ECE on this split;
                ``randomized``: randomised APS/RAPS sets, ``False`` for deterministic ones).
            num_samples, seed: the draws and seed of the calibration prediction (:meth:`predict`).

        Returns:
            A new :class:`Posterior` sharing the draws, with :attr:`calibration` set (an earlier
            calibration is replaced, not compounded); :meth:`save` keeps it.
        """
        if alpha is not None:
            calibrate.check_alpha(alpha)
        calibrate.check_temperature_loss(temperature_loss)
        y = np.asarray(y)
        if y.ndim == 0 or np.ndim(x) == 0 or np.shape(x)[0] != y.shape[0]:
            raise ValueError(f"x and y must hold the same number of calibration rows, got {np.shape(x)} and {y.shape}")
        if alpha is not None:
            calibrate.check_rows(y.shape[0], alpha)  # before the calibration rows are predicted
        prediction = self._predict_uncalibrated(x, num_samples, seed)
        fitted = calibrate.fit(
            prediction,
            y,
            alpha,
            score=score,
            temperature_scaling=temperature_scaling,
            temperature_loss=temperature_loss,
            randomized=randomized,
            raps_lambda=raps_lambda,
            raps_k=raps_k,
            seed=seed_integer(seed),
        )
        return dataclasses.replace(self, calibration=fitted)

    @staticmethod
    def _prediction(out: dict) -> Prediction:
        """A :class:`Prediction` from the draw-vmapped output of :func:`observation`."""
        det = {k: np.asarray(v) for k, v in out.get("deterministic", {}).items()}
        if "probs" in out:
            return Prediction("classification", probs=np.asarray(out["probs"]), deterministic=det)
        if "rate" in out:
            return Prediction("regression", draws=np.asarray(out["rate"]), likelihood="poisson", deterministic=det)
        if "df" in out:
            return Prediction(
                "regression",
                draws=np.asarray(out["loc"]),
                noise=np.asarray(out["scale"]),
                likelihood="student_t",
                df=np.asarray(out["df"]),
                deterministic=det,
            )
        return Prediction("regression", draws=np.asarray(out["loc"]), noise=np.asarray(out["scale"]), deterministic=det)

    def log_likelihood(self) -> np.ndarray:
        """Pointwise log-likelihood of the training data, ``(chain, draw, n)``."""
        if not self.has_data:
            raise ValueError(
                "this posterior was saved without its training data, so it has no log-likelihood; save with include_data=True to keep it"
            )
        if self.approximation is not None and self.approximation.predict is not None:
            # a family that predicts with its own predictive (the linearised Laplace) is scored by
            # it, so that LOO/WAIC read the distribution the method predicts with, not the
            # network evaluated at weight-space draws it never predicts through
            own = self.approximation.predict(self, self.x, None, 0)
            if own is not None:
                return own.pointwise_log_likelihood(self.y).reshape(self.num_chains, self.num_draws, -1)
        ll = self._evaluate("loglik", None, 0, self.x, self.y)["log_likelihood"]
        return np.asarray(ll).reshape(self.num_chains, self.num_draws, -1)

    def posterior_predictive(self, seed: int = 0) -> np.ndarray:
        """One replicated data set per draw at the training inputs, ``(chain, draw, *y.shape)``:
        labels sampled from each draw's class probabilities, or targets from each draw's
        likelihood (:meth:`Prediction.sample`)."""
        seed = seed_integer(seed)
        if not self.has_data:
            raise ValueError("this posterior was saved without its training data: no posterior predictive at it")
        if self.approximation is not None and self.approximation.predict is not None:
            pred = self._predict_uncalibrated(self.x, None, seed)  # the approximation's own predictive (Laplace's GLM)
        else:  # the log-likelihood's program also returns the likelihood's parameters: no second compile
            pred = self._prediction(self._evaluate("loglik", None, seed, self.x, self.y))
        rep = pred.sample(np.random.default_rng(seed))
        return rep.reshape(self.num_chains, self.num_draws, *np.shape(self.y))

    def to_arviz(self, include_data: bool | None = None):
        """An ``arviz.InferenceData`` with groups posterior (named dims), log_likelihood,
        posterior_predictive, observed_data, constant_data, sample_stats and
        variational_params; see :func:`bnnpp.posterior.io.to_arviz`. ``include_data`` as in
        :meth:`save`."""
        return io.to_arviz(self, include_data=include_data)

    def save(self, path: str | os.PathLike, include_data: bool | None = None) -> None:
        """Write the posterior as one netCDF file (the InferenceData of :meth:`to_arviz`, with
        the fit's statistics, the approximation's family and the model spec as JSON in its
        attributes; the approximation's parameters in the ``variational_params`` group). The
        parent folder is created if needed; the file is written to a temporary name and
        moved into place, so a failure leaves nothing half-written. Never pickles.

        Args:
            path: the ``.nc`` file to write.
            include_data: write the training data (``constant_data``/``observed_data``) and
                the groups computed from it (``log_likelihood``, ``posterior_predictive``).
                ``None`` (default): only when ``x`` has at most :data:`MAX_SAVED_DATA` values,
                so an MNIST-size fit stores its draws and variational parameters but not 50,000
                images. A posterior loaded without data predicts as before, but
                ``log_likelihood``/``loo`` need the data.
        """
        io.save(self, path, include_data)

    def meta_json(self) -> str:
        """The JSON stored in a saved file: statistics (without arrays), the approximation's
        family, the model spec, sites and the data's shape."""
        return io.meta_json(self)

    def include_data(self, include_data: bool | None) -> bool:
        """Resolve ``include_data=None`` (see :meth:`save`): True when the data is present and small."""
        if include_data is None:
            return self.has_data and self.x.size <= MAX_SAVED_DATA
        if include_data and not self.has_data:
            raise ValueError("this posterior has no training data to include (it was loaded from a file saved without it)")
        return bool(include_data)

    def __repr__(self) -> str:
        return f"Posterior(method={self.method!r}, chains={self.num_chains}, draws={self.num_draws}, sites={list(self.samples)})"


def _padded(index: np.ndarray, size: int) -> np.ndarray:
    """``index`` ``(m,)`` padded to ``(size,)`` with copies of its first entry: every block one shape, one program."""
    return index if index.size == size else np.concatenate([index, np.repeat(index[:1], size - index.size)])
