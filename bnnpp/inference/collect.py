"""The runner's last stages (:mod:`bnnpp.inference.runner`): collect the draws, statistics,
approximation and facts of a finished fit from its final state, and assemble the
:class:`~bnnpp.Posterior` — the one place one is built."""

from __future__ import annotations

import warnings
from typing import Any

import jax
import numpy as np

from bnnpp.inference import health, sharding
from bnnpp.inference.algorithm import Outcome
from bnnpp.introspection import latent_sites
from bnnpp.posterior import MAX_SAVED_DATA, FitStats, Posterior

_Fit = Any  # bnnpp.inference.runner._Fit (the plan of one fit); not imported: runner imports this module


def warn_nan_stop(name: str, step: int, stacklevel: int = 2) -> None:
    """The RuntimeWarning of a run that stopped at a NaN/inf at step ``step`` (0-based), keeping
    the parameters after step ``step − 1``.

    Raises:
        ValueError: ``step`` is 0: no step finished, so there is nothing fitted to keep.
    """
    if step == 0:
        raise ValueError(
            f"{name}: the loss or parameters were NaN/inf at the first step, from the start values: nothing was fitted; "
            "check that the model's log density is finite at the start (init=...), lower the learning rate or use a tighter prior"
        )
    warnings.warn(
        f"{name}: the loss or parameters became NaN/inf at step {step}; training stopped there and kept the "
        f"parameters after step {step - 1}. Lower the learning rate or use a tighter prior.",
        RuntimeWarning,
        stacklevel=stacklevel + 1,
    )


def _collect(fit: _Fit, programs, rs, unit_rows, units_run: int, bad_unit: int | None):
    """Collect: the draws (from ``sample``, or the emitted rows of the kept steps), their
    statistics, the approximation and the algorithm's extras, with the warnings of a NaN stop.
    Returns ``(outcome, steps_run, stopped_at)``."""
    algorithm, plan, name = fit.algorithm, fit.plan, fit.algorithm.run.name or fit.method
    _, emitted, bad_steps = unit_rows
    extras: dict[str, Any] = {}
    if plan.num_batches > 1 or algorithm.run.batch_size is not None:
        extras["num_batches"] = plan.num_batches
    if plan.ends is None:
        steps_run, stopped_at = units_run, bad_unit
        samples, approximation = sharding.to_host(programs["sample"](plan.keys.sample, rs.state))
        # one chain: sample gives (num_samples, ...); several (members): (num_chains, num_samples, ...)
        samples = {k: np.asarray(v)[None] if algorithm.run.num_chains == 1 else np.asarray(v) for k, v in samples.items()}
        overflow = [k for k, v in samples.items() if v.dtype.kind == "f" and not np.all(np.isfinite(v))]
        if overflow:  # finite parameters whose draws are not (e.g. exp of a huge log-scale)
            warnings.warn(
                f"{name}: the draws of {', '.join(overflow)} overflow to NaN/inf from the parameters "
                f"after step {units_run - 1 if bad_unit is None else bad_unit - 1}; lower the learning rate or use a tighter prior",
                RuntimeWarning,
                stacklevel=5,  # the caller of bnnpp.fit
            )
        sample_stats: dict = {}
    else:
        samples, sample_stats, steps_run, stopped_at = _kept(fit, emitted, bad_steps, units_run, bad_unit)
        approximation = None
    if stopped_at is not None:
        warn_nan_stop(name, stopped_at, stacklevel=5)  # the caller of bnnpp.fit
    if plan.ends is not None and samples[next(iter(samples))].shape[1] == 0:
        raise RuntimeError(
            f"{name}: the chains became NaN/inf at step {stopped_at}, before the first kept draw; lower step_size or use a tighter prior"
        )
    if "approximation" in programs:
        approximation = sharding.to_host(programs["approximation"](rs.state))
    if approximation is not None:
        approximation = jax.tree_util.tree_map(np.asarray, approximation)
    if algorithm.hooks.extras is not None:
        extras.update(algorithm.hooks.extras(sharding.to_host(rs.state)))
    if algorithm.run.num_chains > 1 and algorithm.run.emit is None:  # how the independent members were stepped
        extras["layout"] = "in_turn" if algorithm.hooks.member_step is not None and not fit.place.placed else "vmap"
    return Outcome(samples, approximation, sample_stats, extras), steps_run, stopped_at


def _kept(fit: _Fit, emitted, bad_steps, units_run: int, bad_unit: int | None):
    """An emitting sampler's kept draws ``{site: (chains, draws, ...)}`` and statistics, the
    steps run and the step that went bad (else ``None``)."""
    algorithm, ends = fit.algorithm, fit.plan.ends
    done = units_run - (bad_unit is not None)  # segments whose results were kept
    stopped_at = None
    if bad_unit is not None:  # the step that went bad, else the failed segment's last step
        first_bad = int(bad_steps[-1])
        stopped_at = first_bad if first_bad >= 0 else int(ends[bad_unit]) - 1
    draws, stats = jax.tree_util.tree_map(lambda a: a[:done][fit.plan.keep[:done]], emitted)
    # (draws, chains, ...) -> (chains, draws, ...)
    samples = {k: np.ascontiguousarray(np.swapaxes(v, 0, 1)) for k, v in draws.items()}
    sample_stats = {k: np.ascontiguousarray(np.swapaxes(v, 0, 1)) for k, v in stats.items()}
    if algorithm.run.kept_stats is not None:
        kept_steps = np.asarray(algorithm.run.emit_steps)[: samples[next(iter(samples))].shape[1]]
        for k, v in algorithm.run.kept_stats(kept_steps).items():
            sample_stats[k] = np.broadcast_to(np.asarray(v), (algorithm.run.num_chains, len(kept_steps))).copy()
    return samples, sample_stats, (int(ends[done - 1]) if done else 0), stopped_at


def _traces(unit_rows, ends) -> dict:
    """The ``info`` fields per step (none for emitting samplers: theirs are ``sample_stats``)."""
    return {k: np.asarray(v) for k, v in unit_rows[0]._asdict().items()} if ends is None else {}


def _placement_facts(fit: _Fit, rs, x, compile_seconds: float, seconds_per_step: float) -> dict:
    """``extras["placement"]`` of a fit on a mesh."""
    held = (0, int(x.shape[0])) if fit.share is None else (fit.share.start, fit.share.stop)
    return {
        **fit.place.facts(fit.plan.batch),
        "compile_seconds": compile_seconds,
        "seconds_per_step": seconds_per_step,
        "chains_per_device": sharding.chains_per_device(rs.state, fit.algorithm.run.num_chains) if fit.algorithm.run.num_chains > 1 else {},
        "training_rows": fit.n,
        "rows_loaded": sharding.rows_loaded(*held),
        "minibatches": "full batch"
        if fit.plan.batch == fit.n
        else "each device from its own rows"
        if fit.plan.local is not None
        else "one permutation of all rows",
    }


def _assemble(fit: _Fit, model, x, y, outcome: Outcome, stats: FitStats, sites: dict | None) -> Posterior:
    """Assemble: the :class:`Posterior` (the one place one is built), with its health notes."""
    x_post, y_post = x, y
    if fit.share is not None:  # the whole (small) training set for the posterior, gathered once
        small = fit.n * int(np.prod(x.shape[1:])) <= MAX_SAVED_DATA
        x_post, y_post = tuple(np.asarray(a) for a in sharding.to_host(fit.data)) if small else (x[:0], y[:0])
    sites = latent_sites(model, x, y) if sites is None else sites
    posterior = Posterior(outcome.samples, stats, model, x_post, y_post, sites, outcome.approximation)
    health.warn(posterior, stacklevel=5)  # not converged, or a q that PSIS rejects: one line each
    return posterior
