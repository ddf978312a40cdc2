"""``swag`` and ``multiswag``: SWA-Gaussian (Maddox, Izmailov, Garipov, Vetrov & Wilson 2019)
and MultiSWAG, SWAG on every member of a deep ensemble (Wilson & Izmailov 2020).

One fit is one program of ``pretrain_steps + swag_epochs · N // batch_size`` steps:

1. **pretrain**: MAP with Adam on the negative log joint, ``map_estimate``'s own step;
2. **SWAG**: SGD on the same objective divided by N (the per-example loss of the papers,
   with the prior as weight decay) at a constant or cyclical (cosine, restarting every
   ``collect_every`` epochs) learning rate; after every ``collect_every``-th epoch the
   iterate ``θ`` (all latent sites on the unconstrained space, flattened to ``(D,)``) is
   collected: running first and second moments ``θ̄``, ``θ²̄`` and the last ``K = rank``
   deviations ``θ − θ̄`` (a ring buffer ``(K, D)``), Maddox et al. Algorithm 1.

A draw is (their §4, SWAG with diagonal plus low-rank covariance)::

    θ = θ̄ + (1/√2) · Σ_diag^{1/2} z₁ + (1/√(2(K−1))) · D̂ z₂,
    Σ_diag = max(θ²̄ − θ̄², 0),  D̂ (D, K) the deviations,  z₁ ~ N(0, I_D),  z₂ ~ N(0, I_K)

so the covariance is ``½ Σ_diag + D̂ D̂ᵀ / (2(K−1))``. With fewer than ``K`` collections
only the filled columns are used (``K`` is then the number collected).

The SWAG-phase rate: SGD on a loss whose Hessian has largest eigenvalue ``λ`` is stable only
at rates below ``2/λ`` (near a mode the iterate's component along that eigenvector is
multiplied by ``1 − η λ`` each step), and ``λ`` of the per-example loss grows with the inverse
noise variance of a regression: on data with little noise a fixed rate such as 0.01 can be
many times past ``2/λ``, and SGD diverges. By default (``swag_learning_rate=None``) each member measures ``λ`` at the end
of its pretraining, by :data:`POWER_ITERATIONS` steps of the power iteration on Hessian-vector
products of the per-example loss over :data:`PROBE_ROWS` evenly spaced training rows, and runs
SGD at ``min(RATE_CAP, RATE_FACTOR / λ)``.

``multiswag`` trains ``members`` such runs side by side as one vmapped program (each from
its own initial key, on the same minibatches); its posterior has ArviZ ``chain`` = member,
``num_samples`` draws each. ``swag`` is one member, one chain. No batch normalisation (bnnpp
has none): the moments are of the parameters alone, no running statistics to recompute.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from bnnpp.inference.algorithm import Algorithm, Hooks, RunSpec
from bnnpp.inference.collapse import SMALL_DATA_ROWS, say_not_suited
from bnnpp.inference.ensemble import map_options, member_keys, vmapped_map
from bnnpp.inference.evidence import hierarchical_normal
from bnnpp.inference.joint import joint_terms
from bnnpp.inference.laplace.curvature import largest_hessian_eigenvalue
from bnnpp.inference.map_estimate import MAPState
from bnnpp.inference.optimizer_step import apply_optimizer
from bnnpp.inference.options import (
    Options,
    check_batch_size,
    init_loc_option,
    non_negative_int,
    optimizer,
    option,
    optional,
    positive_float,
    positive_int,
    steps_for,
    temperature_option,
)
from bnnpp.inference.registry import Method, register
from bnnpp.inference.variational_layers import find_layers
from bnnpp.introspection import latent_sites, probe_rows

__all__ = ["MultiSWAGOptions", "SWAGInfo", "SWAGMoments", "SWAGOptions", "SWAGState", "build", "swag_draw"]

SCHEDULES = ("constant", "cyclical")
RATE_CAP = 0.01
"""The largest default SWAG-phase rate (on the per-example loss), the rate of flat losses (moons)."""
RATE_FACTOR = 1.5
"""The default SWAG-phase rate is at most ``RATE_FACTOR / λ`` (SGD's stability needs ``< 2 / λ``)."""
POWER_ITERATIONS = 30
"""Power-iteration steps of the curvature estimate ``λ``."""
PROBE_ROWS = 512
"""Training rows (evenly spaced) of the curvature estimate."""
DEFAULT_BATCH = 32
"""The default minibatch; on fewer than 2 × 32 rows it is capped at half the rows (at least 1),
so that every epoch has two minibatches and the SWAG phase its SGD noise."""


@dataclass(frozen=True)
class SWAGOptions(Options):
    """Options of ``method="swag"``."""

    exclusive = (
        ("optimizer", "learning_rate"),
        ("epochs", "num_steps"),
        ("num_steps", "pretrain_steps"),
        ("num_steps", "swag_epochs"),
        ("epochs", "pretrain_steps"),
        ("epochs", "swag_epochs"),
    )

    pretrain_steps: int = option(2_000, "MAP (Adam) steps before SWAG starts", check=non_negative_int)
    swag_epochs: int = option(100, "epochs of SGD during which the iterates are collected", check=positive_int)
    num_steps: int | None = option(
        None,
        "total steps, replacing pretrain_steps and swag_epochs: the first half MAP pretraining, the rest SWAG epochs (at least 2 x collect_every)",
        check=optional(positive_int),
        type=int,
    )
    epochs: int | None = option(
        None, "the same length in passes over the data: num_steps = epochs x (N // batch_size)", check=optional(positive_int), type=int
    )
    batch_size: int | None = option(
        DEFAULT_BATCH,
        "minibatch rows per step (SWAG needs SGD noise: None means full batch, no noise); the default is capped at half the rows",
        check=optional(positive_int),
        type=int,
    )
    learning_rate: float = option(1e-2, "pretraining Adam learning rate", check=positive_float)
    optimizer: Any = option(None, "pretraining optax transformation (replaces learning_rate)", check=optimizer, flag=False)  # noqa: RUF009
    swag_learning_rate: float | None = option(
        None,
        "SGD learning rate of the SWAG phase, on the per-example loss (log joint / N); None: each member's "
        "min(0.01, 1.5 / the largest Hessian eigenvalue of that loss at its pretrained mode), below SGD's "
        "stability limit 2 / eigenvalue",
        check=optional(positive_float),
        type=float,
    )
    schedule: str = option(
        "constant",
        "SWAG-phase learning rate: constant, or cyclical (cosine from the rate to 0 over each collection period)",
        choices=SCHEDULES,
    )
    rank: int = option(20, "K: deviations kept for the low-rank part of the covariance", check=positive_int)
    collect_every: int = option(1, "collect the iterate every this many epochs", check=positive_int)
    num_samples: int = option(30, "draws from the Gaussian (per member)", check=positive_int)
    init_loc: str = init_loc_option()
    init_radius: float = option(
        2.0,
        "start values uniform in (-r, r) on the unconstrained space (init_loc uniform; non-layer sites under glorot)",
        check=positive_float,
    )
    chunk_size: int | None = option(None, "steps per compiled chunk", check=optional(positive_int), flag=False, type=int)
    temperature: float = temperature_option()

    members = 1

    def check(self) -> None:
        if self.rank < 2:
            raise ValueError(f"rank must be at least 2 (the low-rank part divides by K − 1), got {self.rank}")
        collections = self.swag_epochs // self.collect_every
        if collections < 2:
            raise ValueError(
                f"swag_epochs={self.swag_epochs} with collect_every={self.collect_every} collects {collections} iterate(s); "
                "raise swag_epochs to at least 2 x collect_every"
            )
        if self.num_steps is not None and self.num_steps < 2:
            raise ValueError(
                f"num_steps={self.num_steps} is too short for SWAG: the first half of the run is MAP pretraining and needs "
                "at least 1 step, so give num_steps ≥ 2 (a useful run takes hundreds)"
            )
        if self.pretrain_steps == 0 and self.num_steps is None and self.epochs is None:
            raise ValueError(
                "pretrain_steps=0 is too short: SWAG collects around a MAP mode and needs at least 1 pretraining step (the default is 2000)"
            )

    def check_data(self, x, y) -> None:
        if self.batch_size != DEFAULT_BATCH:  # the default is capped by resolve
            check_batch_size(self.batch_size, x)

    def resolve(self, n: int) -> SWAGOptions:
        """The default ``batch_size`` capped at ``max(1, n // 2)`` (:data:`DEFAULT_BATCH`); with
        ``num_steps`` or ``epochs`` (a total length T): ``pretrain_steps = T // 2`` and
        ``swag_epochs`` the epochs that fit in the rest (at least ``2 × collect_every``)."""
        if self.batch_size == DEFAULT_BATCH and n < 2 * DEFAULT_BATCH:
            self = dataclasses.replace(self, batch_size=max(1, n // 2))
        if self.num_steps is None and self.epochs is None:
            return self
        total = steps_for(self, n)
        if total < 2:
            raise ValueError(
                f"epochs={self.epochs} gives {total} step(s) on {n} rows, too short for SWAG: the first half of the "
                "run is MAP pretraining and needs at least 1 step; give epochs ≥ 2 or a smaller batch_size"
            )
        batches = max(1, n // (self.batch_size or n))
        swag_epochs = max(2 * self.collect_every, (total - total // 2) // batches)
        return dataclasses.replace(self, pretrain_steps=total // 2, swag_epochs=swag_epochs)


@dataclass(frozen=True)
class MultiSWAGOptions(SWAGOptions):
    """Options of ``method="multiswag"``: SWAG's, plus the number of members."""

    members: int = option(5, "independent SWAG runs (ensemble members), trained as one vmapped program", check=positive_int)
    init_loc: str = init_loc_option("auto_wide")  # an ensemble's members spread from a wide start (init_loc_option)
    num_samples: int = option(20, "draws from the Gaussian (per member)", check=positive_int)


class SWAGMoments(NamedTuple):
    """One member's collected statistics on the flattened unconstrained parameters.

    Attributes:
        mean: θ̄ ``(D,)``; sq_mean: θ²̄ ``(D,)``; dev: the last deviations ``(K, D)`` (ring
        buffer, row ``count mod K`` next); count: collections so far (int32 scalar).
    """

    mean: jax.Array
    sq_mean: jax.Array
    dev: jax.Array
    count: jax.Array


class SWAGState(NamedTuple):
    """t: steps done (shared); pre: :class:`MAPState` of the pretraining (Adam) phase, leading
    member axis; sgd: the SWAG-phase optimizer state (member axis); moments: :class:`SWAGMoments`
    (member axis); pretrain_loss: each member's loss at the last pretraining step ``(M,)``
    (NaN without pretraining); swag_loss: the running mean of its SWAG-phase losses ``(M,)``
    — together they tell a SWAG phase that left the mode (rate too high) from one around it;
    rate: each member's SWAG-phase learning rate ``(M,)``; curvature: the largest Hessian
    eigenvalue of its per-example loss at the pretrained mode ``(M,)`` (0 until measured, and
    when the rate was given: the runner's guard takes a NaN anywhere in the state for a diverged step)."""

    t: jax.Array
    pre: MAPState
    sgd: Any
    moments: SWAGMoments
    pretrain_loss: jax.Array
    swag_loss: jax.Array
    rate: jax.Array
    curvature: jax.Array


class SWAGInfo(NamedTuple):
    """loss: the members' minibatch negative log joint ``(M,)`` (the per-example loss times N
    in the SWAG phase, so the trace is continuous); collected: whether this step collected."""

    loss: jax.Array
    collected: jax.Array


def collect(m: SWAGMoments, theta: jax.Array) -> SWAGMoments:
    """Add iterate ``theta`` ``(D,)`` to the moments (Maddox et al. Algorithm 1)."""
    n = m.count.astype(theta.dtype)
    mean = (n * m.mean + theta) / (n + 1)
    sq_mean = (n * m.sq_mean + theta**2) / (n + 1)
    dev = m.dev.at[m.count % m.dev.shape[0]].set(theta - mean)
    return SWAGMoments(mean, sq_mean, dev, m.count + 1)


def swag_draw(key, m: SWAGMoments) -> jax.Array:
    """One draw ``(D,)`` from the SWAG Gaussian of moments ``m`` (Maddox et al. 2019, §4): diagonal
    half from ``max(θ²̄ − θ̄², 0)``, low-rank half from the ``min(count, K)`` filled deviations."""
    k1, k2 = jax.random.split(key)
    rank = m.dev.shape[0]
    filled = jnp.minimum(m.count, rank)
    var = jnp.maximum(m.sq_mean - m.mean**2, 0.0)
    z1 = jax.random.normal(k1, m.mean.shape, m.mean.dtype)
    z2 = jax.random.normal(k2, (rank,), m.mean.dtype) * (jnp.arange(rank) < filled)  # unfilled rows are 0
    low_rank = (z2 @ m.dev) / jnp.sqrt(2.0 * jnp.maximum(filled - 1, 1))
    return m.mean + jnp.sqrt(var / 2.0) * z1 + low_rank


def build(model, x, y, options: SWAGOptions, start: dict | None = None) -> Algorithm:
    """SWAG (``options.members == 1``) or MultiSWAG as an :class:`Algorithm`. ``start``: the
    (first member's) MAP pretraining starts there (:func:`bnnpp.inference.ensemble.vmapped_map`).

    ``sample`` returns ``{site: (num_samples, *site)}`` for SWAG and
    ``{site: (members, num_samples, *site)}`` for MultiSWAG (``num_chains = members``).
    """
    options = options.resolve(int(x.shape[0]))  # num_steps / epochs → pretrain_steps, swag_epochs (idempotent)
    members, n = int(options.members), int(x.shape[0])
    # small data: a hierarchical prior (any task), or regression under any prior: SWAG's Gaussian, fitted to the SGD
    # iterates about one mode, does not widen away from the data as the posterior does there
    small = None  # the case named by the small-data line, if any
    if n <= SMALL_DATA_ROWS and hierarchical_normal(find_layers(model, *probe_rows(model, x, y))):
        small = "small data under a hierarchical prior"
    elif n <= SMALL_DATA_ROWS and getattr(model, "task", None) == "regression":
        small = "small regression data"
    batch = options.batch_size or n
    num_batches = n // batch
    period = num_batches * options.collect_every  # steps between collections
    pretrain = options.pretrain_steps
    num_steps = pretrain + options.swag_epochs * num_batches
    init_pre, step_pre, _, one, _ = vmapped_map(model, x, y, map_options(options, num_steps=max(pretrain, 1)), members, start=start)
    zero = {k: jnp.zeros(s.shape) for k, s in latent_sites(model, x, y).items()}
    flat_zero, unravel = ravel_pytree(zero)  # the (D,) layout of every latent site, unconstrained
    dim = int(flat_zero.shape[0])
    key_model = jax.random.PRNGKey(0)  # as map_estimate: the models draw nothing random at a fixed position

    # the per-example loss = log joint / N; each member's rate multiplies its gradient (SGD is linear in it)
    if options.schedule == "constant":
        schedule = 1.0 / n
    else:  # cosine from the rate to 0 within each collection period, restarting: collect at the lowest rate
        cosine = optax.cosine_decay_schedule(1.0 / n, period)
        schedule = lambda count: cosine(count % period)
    sgd = optax.sgd(schedule)
    given_rate = options.swag_learning_rate
    probe = np.linspace(0, n - 1, min(n, PROBE_ROWS)).astype(np.int64)
    x_probe, y_probe = jnp.asarray(x[probe]), jnp.asarray(y[probe])

    def curvature(position):
        """The largest |eigenvalue| of the per-example loss's Hessian at ``position`` (power iteration)."""
        flat, unravel_member = ravel_pytree(position)

        def per_example(f):
            log_prior, log_lik, _ = joint_terms(model, unravel_member(f), x_probe, y_probe, key_model)
            return -(log_prior / n + log_lik / len(probe))

        return largest_hessian_eigenvalue(per_example, flat, POWER_ITERATIONS)

    def rates(position):
        """Each member's SWAG-phase rate and curvature ``(M,)`` at the pretrained ``position``."""
        lam = jax.vmap(curvature)(position)
        rate = jnp.where(jnp.isfinite(lam) & (lam > 0), jnp.minimum(RATE_CAP, RATE_FACTOR / lam), RATE_CAP)
        return rate, lam

    def init(key, data):
        pre = init_pre(key, data)
        moments = SWAGMoments(
            jnp.zeros((members, dim)),
            jnp.zeros((members, dim)),
            jnp.zeros((members, options.rank, dim)),
            jnp.zeros((members,), jnp.int32),
        )
        nan = jnp.full((members,), jnp.nan)
        rate = jnp.full((members,), RATE_CAP if given_rate is None else given_rate)
        zero = jnp.zeros((members,))
        return SWAGState(jnp.zeros((), jnp.int32), pre, jax.vmap(sgd.init)(pre.position), moments, nan, zero, rate, zero)

    def pretrain_step(key, state, batch_data):
        pre, loss = step_pre(key, state.pre, batch_data)
        return state._replace(t=state.t + 1, pre=pre, pretrain_loss=loss), SWAGInfo(loss, jnp.array(False))

    def swag_step(key, state, batch_data):
        rate, lam = state.rate, state.curvature
        if given_rate is None:  # measured once, at the first SWAG step
            rate, lam = jax.lax.cond(state.t == pretrain, lambda: rates(state.pre.position), lambda: (rate, lam))

        def one_member(position, sgd_state, member_rate):
            loss, grads = jax.value_and_grad(lambda u: one_loss(u, batch_data))(position)
            grads = jax.tree_util.tree_map(lambda g: member_rate * g, grads)
            position, sgd_state = apply_optimizer(sgd, grads, sgd_state, position)
            return position, sgd_state, loss

        position, sgd_state, loss = jax.vmap(one_member)(state.pre.position, state.sgd, rate)
        due = (state.t + 1 - pretrain) % period == 0
        moments = jax.lax.cond(
            due,
            lambda: jax.vmap(lambda m, p: collect(m, ravel_pytree(p)[0]))(state.moments, position),
            lambda: state.moments,
        )
        pre = MAPState(position, state.pre.opt_state)
        done = (state.t - pretrain).astype(loss.dtype)  # SWAG steps before this one
        swag_loss = (done * state.swag_loss + loss) / (done + 1)
        return SWAGState(state.t + 1, pre, sgd_state, moments, state.pretrain_loss, swag_loss, rate, lam), SWAGInfo(loss, due)

    def one_loss(u, batch_data):
        log_prior, log_lik, _ = joint_terms(model, u, *batch_data, key_model)
        return -(log_prior + (n / batch) * log_lik)

    def step(key, state, batch_data):
        return jax.lax.cond(state.t < pretrain, pretrain_step, swag_step, key, state, batch_data)

    def member_draws(key, moments, num_samples):
        flat = jax.vmap(lambda k: swag_draw(k, moments))(jax.random.split(key, num_samples))
        # map_estimate's sample maps a position to the constrained values, (1, *site) each
        values = jax.vmap(lambda f: one.sample(None, MAPState(unravel(f), None), 1))(flat)
        return {k: v[:, 0] for k, v in values.items()}

    def sample(key, state, num_samples):
        draws = jax.vmap(lambda k, m: member_draws(k, m, num_samples))(member_keys(key, members), state.moments)
        return {k: v[0] for k, v in draws.items()} if members == 1 else draws  # (M, S, *site)

    return Algorithm(
        init,
        step,
        sample,
        RunSpec(
            num_steps=num_steps,
            num_samples=options.num_samples,
            batch_size=options.batch_size,
            name="swag" if members == 1 else f"multiswag ({members})",
            num_chains=members,
        ),
        Hooks(
            extras=lambda state: _extras(state, members, options, n, small),
            postfix=lambda info: {"-log joint": f"{info.loss.mean():.4g}"},
        ),
    )


def _extras(state: SWAGState, members: int, options: SWAGOptions, n: int, small: str | None = None) -> dict:
    """Host facts of a finished fit; warns when a member's SWAG phase left its mode, and (``small``)
    that the method does not suit the small-data case it names (:data:`SMALL_DATA_ROWS`; under a
    hierarchical prior, or regression under any prior)."""
    name = "swag" if members == 1 else "multiswag"
    line = f"{name} is not suited to {small} ({n} rows, at most {SMALL_DATA_ROWS}): its SGD phase gives each member almost no "
    said = say_not_suited(line + "spread on so few rows; fit method='laplace', method='ensemble' or method='nuts' instead") if small else {}
    pretrain_loss, swag_loss = np.asarray(state.pretrain_loss, np.float64), np.asarray(state.swag_loss, np.float64)
    # Around a mode, constant-rate SGD raises the mean loss by about lr·tr(H·C)/4 (Mandt et al.
    # 2017, §3), small against the loss itself; a mean above 1.5× the pretrained loss (plus
    # 0.5 nat per example) means the iterates diverged or wandered off, and the Gaussian they
    # give is far wider than the posterior.
    left = swag_loss > pretrain_loss + 0.5 * np.abs(pretrain_loss) + 0.5 * n
    if np.any(left):
        warnings.warn(
            f"{int(left.sum())} of {members} SWAG run(s) left the pretrained mode (mean SWAG-phase loss "
            f"{swag_loss[left].max():.4g} against {pretrain_loss[left].max():.4g} after pretraining): "
            f"lower swag_learning_rate (now {float(np.max(np.asarray(state.rate)[left])):.3g}) or raise pretrain_steps",
            RuntimeWarning,
            stacklevel=2,
        )
    return {
        **said,
        "members": members,
        "collected": int(state.moments.count.min()),
        "rank": options.rank,
        "pretrain_loss": [float(v) if np.isfinite(v) else None for v in pretrain_loss],
        "swag_mean_loss": [float(v) if np.isfinite(v) else None for v in swag_loss],
        "swag_learning_rate": [float(v) for v in np.asarray(state.rate)],
        "curvature": [float(v) if v > 0 else None for v in np.asarray(state.curvature, np.float64)],
    }


register(
    Method(
        "swag",
        SWAGOptions,
        build=build,
        summary="SWA-Gaussian: MAP, then SGD iterates' diagonal + low-rank Gaussian (Maddox et al. 2019)",
        smoke={"pretrain_steps": 20, "swag_epochs": 4, "rank": 3, "num_samples": 10},
    )
)
register(
    Method(
        "multiswag",
        MultiSWAGOptions,
        build=build,
        summary="MultiSWAG: SWAG on every member of a deep ensemble, vmapped (Wilson & Izmailov 2020)",
        smoke={"pretrain_steps": 20, "swag_epochs": 4, "rank": 3, "num_samples": 5, "members": 2},
    )
)
