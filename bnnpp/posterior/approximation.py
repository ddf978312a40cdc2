"""The approximating distribution a posterior came from, in typed form, and the statistics
of the fit that produced it. Consumers (pruning, PSIS k̂, compare) ask these types instead
of probing dictionary keys or guide parameter names."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

__all__ = ["Approximation", "FitStats", "GuideParameters", "MeanFieldGaussian", "VariationalDropout"]


class Approximation(abc.ABC):
    """Base of the variational families a posterior can carry (``Posterior.approximation``);
    ``None`` there means the draws are all there is (samplers, MAP)."""

    kind: str = ""

    #: ``predict(posterior, x, num_samples, seed) -> Prediction | None``: a family whose
    #: predictive is not the network at its draws (e.g. the linearised Laplace) defines it;
    #: ``Posterior.predict`` uses its answer unless it is ``None``.
    predict = None

    @abc.abstractmethod
    def to_params(self) -> dict[str, np.ndarray]:
        """The parameters as flat named arrays, for the ``variational_params`` netCDF group."""


@dataclass(frozen=True)
class MeanFieldGaussian(Approximation):
    """q(u) = Π_site N(u_site | loc, scale²) on each site's unconstrained space (identity for
    weights, log for scales): mean-field ADVI (Kucukelbir et al. 2017) and Bayes by Backprop
    (Blundell et al. 2015).

    Attributes:
        loc, scale: site name → array of the site's shape (``scale`` > 0).
    """

    loc: dict[str, np.ndarray]
    scale: dict[str, np.ndarray]
    kind: str = "mean_field_gaussian"

    def to_params(self) -> dict[str, np.ndarray]:
        return {**{f"{k}_loc": np.asarray(v) for k, v in self.loc.items()}, **{f"{k}_scale": np.asarray(v) for k, v in self.scale.items()}}

    def with_loc(self, loc: dict[str, np.ndarray]) -> MeanFieldGaussian:
        """The same family with some means replaced (e.g. pruned weights set to zero)."""
        return MeanFieldGaussian({**self.loc, **loc}, dict(self.scale))


@dataclass(frozen=True)
class GuideParameters(Approximation):
    """Another variational family (e.g. NumPyro's low-rank or full-rank autoguide): its
    constrained parameters by NumPyro's names, kept so that a saved fit keeps its guide."""

    params: dict[str, np.ndarray]
    kind: str = "guide_parameters"

    def to_params(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in self.params.items()}


jax.tree_util.register_dataclass(MeanFieldGaussian, data_fields=["loc", "scale"], meta_fields=["kind"])
jax.tree_util.register_dataclass(GuideParameters, data_fields=["params"], meta_fields=["kind"])
# (pytrees, so that a method computes its approximation inside a compiled program)


@dataclass(frozen=True)
class VariationalDropout(Approximation):
    """q(w) = N(θ, α θ²) per weight of every bnnpp layer (Molchanov et al. 2017;
    the method is :mod:`bnnpp.inference.vd`).

    Attributes:
        loc: weight site → θ (site shape). log_alpha: weight site → log α (site shape,
            clipped to [−10, 10]). threshold: log α above which a weight is dropped.
    """

    loc: dict[str, np.ndarray]
    log_alpha: dict[str, np.ndarray]
    threshold: float = 3.0
    kind: str = "variational_dropout"

    def to_params(self) -> dict[str, np.ndarray]:
        return {
            **{f"{k}_loc": np.asarray(v) for k, v in self.loc.items()},
            **{f"{k}_log_alpha": np.asarray(v) for k, v in self.log_alpha.items()},
            "threshold": np.asarray(self.threshold, np.float64),
        }

    @classmethod
    def from_params(cls, params: dict[str, np.ndarray], sites) -> VariationalDropout:
        """Rebuild from a saved ``variational_params`` group."""
        names = [k[: -len("_log_alpha")] for k in params if k.endswith("_log_alpha")]
        return cls({n: params[f"{n}_loc"] for n in names}, {n: params[f"{n}_log_alpha"] for n in names}, float(params["threshold"]))

    def keep(self) -> dict[str, np.ndarray]:
        """Weight site → boolean mask (site shape), True where log α ≤ threshold."""
        return {k: np.asarray(v) <= self.threshold for k, v in self.log_alpha.items()}

    @property
    def scale(self) -> dict[str, np.ndarray]:
        """Weight site → σ = √α·|θ| (site shape)."""
        return {k: np.exp(0.5 * np.asarray(self.log_alpha[k])) * np.abs(np.asarray(v)) for k, v in self.loc.items()}


jax.tree_util.register_dataclass(VariationalDropout, data_fields=["loc", "log_alpha"], meta_fields=["threshold", "kind"])


@dataclass
class FitStats:
    """What a fit reports besides its draws.

    Attributes:
        method, seed, options: how it was run (``options``: the method's options as a dict).
        traces: per-step records ``(steps_run,)`` (or ``(steps_run, k)``), e.g. ``loss``,
            ``negative_elbo``, ``nll``, ``kl``; the fields of the algorithm's ``Info``.
        sample_stats: per-draw statistics ``(chain, draw)`` (ArviZ names: ``lp``,
            ``step_size``, ``diverging``, …).
        steps_run: steps whose results were kept; stopped_at: the first non-finite step or
            ``None``.
        compile_seconds, run_seconds, sample_seconds: wall time of each phase (a program
            compiled in the background while training runs, as mclmc's grouped chains after
            their warm-up, counts in ``run_seconds`` only where the run waits for it).
        extras: JSON-safe facts particular to a method (``num_batches``, ``divergences``,
            ``learned_prior``, ``val_step``/``val_error``, ``pruning``, …).
    """

    method: str
    seed: int = 0
    options: dict = field(default_factory=dict)
    traces: dict[str, np.ndarray] = field(default_factory=dict)
    sample_stats: dict[str, np.ndarray] = field(default_factory=dict)
    steps_run: int | None = None
    stopped_at: int | None = None
    compile_seconds: float = 0.0
    run_seconds: float = 0.0
    sample_seconds: float = 0.0
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def negative_elbo(self) -> np.ndarray | None:
        """The per-step negative ELBO estimate of a variational fit ``(steps,)``, else ``None``."""
        v = self.traces.get("negative_elbo")
        return None if v is None else np.asarray(v)

    def as_info(self) -> dict[str, Any]:
        """The flat ``info`` dict of bnnpp 0.1 (method, seed, options, seconds, traces,
        ``sample_stats``, extras)."""
        info: dict[str, Any] = {
            "method": self.method,
            "seed": self.seed,
            "options": self.options,
            "steps_run": self.steps_run,
            "stopped_at": self.stopped_at,
            "compile_seconds": self.compile_seconds,
            "run_seconds": self.run_seconds,
            "sample_seconds": self.sample_seconds,
            **self.traces,
            **self.extras,
        }
        if self.sample_stats:
            info["sample_stats"] = self.sample_stats
        return info

    @classmethod
    def from_info(cls, info: dict[str, Any]) -> FitStats:
        """The inverse of :meth:`as_info` (``guide_params`` is not a statistic and is ignored)."""
        known = {
            "method",
            "seed",
            "options",
            "steps_run",
            "stopped_at",
            "compile_seconds",
            "run_seconds",
            "sample_seconds",
            "sample_stats",
            "guide_params",
        }
        traces = {k: np.asarray(v) for k, v in info.items() if k not in known and isinstance(v, np.ndarray)}
        extras = {k: v for k, v in info.items() if k not in known and k not in traces}
        if "negative_elbo" not in traces and "nll" in traces and "kl" in traces:  # bbb fits of bnnpp 0.1
            traces["negative_elbo"] = np.asarray(traces["nll"], np.float64) + np.asarray(traces["kl"], np.float64)
        elif (
            "negative_elbo" not in traces
            and "loss" in traces
            and info.get("method")
            not in (
                "map",
                "sgld",
                "nuts",
                "ensemble",
                "swag",
                "multiswag",
                "mc_dropout",
                "laplace",  # losses that are no ELBO
            )
        ):
            traces["negative_elbo"] = traces["loss"]  # bnnpp 0.1 read any other loss trace as a negative ELBO
        return cls(
            method=str(info.get("method")),
            seed=int(info.get("seed", 0) or 0),
            options=dict(info.get("options") or {}),
            traces=traces,
            sample_stats={k: np.asarray(v) for k, v in (info.get("sample_stats") or {}).items()},
            steps_run=info.get("steps_run"),
            stopped_at=info.get("stopped_at"),
            compile_seconds=float(info.get("compile_seconds", 0.0) or 0.0),
            run_seconds=float(info.get("run_seconds", 0.0) or 0.0),
            sample_seconds=float(info.get("sample_seconds", 0.0) or 0.0),
            extras=extras,
        )
