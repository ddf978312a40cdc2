"""``pathfinder``: Pathfinder variational inference (Zhang, Carpenter, Gelman & Vehtari 2022),
from BlackJAX's ``vi.pathfinder``, and the starting points of the many-chain samplers.

One path: L-BFGS maximises the log joint on the unconstrained space from a random start;
at every iterate the L-BFGS inverse-Hessian factors define a Gaussian (Zhang et al.,
Algorithm 1), each is scored by a Monte-Carlo ELBO from ``num_elbo_draws`` draws, and the
path keeps the Gaussian with the highest ELBO (Algorithm 3). ``num_paths`` paths run one
after another (:func:`approximate` says why) from independent starts (uniform in ``(-init_radius, init_radius)``, NumPyro's
``init_to_uniform``; the first path from ``init=`` values when given).

Multi-path Pathfinder (Zhang et al., Algorithm 2; ``resample="on"``, and ``"auto"`` for a model
not built of bnnpp layers): ``num_samples`` draws from each path's Gaussian are weighted by
their importance ratios p(θ, y) / q_k(θ), truncated at the mean ratio times √S (Ionides 2008),
and ``num_samples`` of them are resampled into one chain; the ratios' Pareto k̂ is reported
(``extras["psis_khat"]``) with a line above 0.7, where the paths' Gaussians miss part of the
posterior (the neck of a funnel). ``resample="off"`` (``"auto"`` for networks): each path is one
chain, so R-hat across paths says whether they found the same mode; a network's modes are its
hidden-unit permutations, which draws from every path cover and one Gaussian's ratios do not.

On the runner the whole L-BFGS run of ``num_steps`` iterations is one runner step: the step's loss is
minus the best ELBO of every path (mean over paths); a path whose L-BFGS never produced a
finite ELBO makes it non-finite and the NaN guard keeps the start, a unit Gaussian around
the uniform start (with a warning).

:func:`starts` gives ``chees`` and ``mclmc`` their chains' starting points (option
``init_loc="pathfinder"``): draws from a few paths' approximations.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from bnnpp.inference.algorithm import Algorithm, Hooks, RunSpec
from bnnpp.inference.checks import blackjax_missing, require_blackjax
from bnnpp.inference.joint import constrained_values, init_uniform, joint_terms
from bnnpp.inference.options import Options, option, positive_float, positive_int
from bnnpp.inference.registry import Method, register
from bnnpp.introspection import latent_sites, probe_rows

__all__ = [
    "STARTS",
    "PathfinderOptions",
    "Resampled",
    "start_options",
    "approximate",
    "build",
    "log_joint",
    "paths",
    "starts",
    "truncated_weights",
]

RESAMPLE = ("auto", "on", "off")
KHAT_THRESHOLD = 0.7
"""Above this Pareto k̂ the importance ratios have infinite variance and the resampled draws are
not a reliable posterior (Vehtari et al. 2024, "Pareto smoothed importance sampling", §3)."""
KEY_MODEL = np.zeros(2, np.uint32)
"""The models draw nothing random at a fixed position: their seed handler gets PRNGKey(0)."""


STARTS = ("uniform", "pathfinder")
"""How a sampler's chains start: uniform on the unconstrained space, or from :func:`starts`."""


def start_options() -> tuple:
    """The options of a sampler whose chains can start from Pathfinder draws, as dataclass fields
    ``(init_loc, pathfinder_paths, pathfinder_maxiter)``: one definition for nuts, mclmc, chees
    and meads."""
    return (
        option(
            "uniform",
            "chain starts: uniform (U(-init_radius, init_radius)) or pathfinder (draws from Pathfinder paths' Gaussians)",
            choices=STARTS,
        ),
        option(4, "Pathfinder paths for the chains' starts (init_loc=pathfinder)", check=positive_int),
        option(200, "L-BFGS iterations of each start path (init_loc=pathfinder)", check=positive_int),
    )


@dataclass(frozen=True)
class PathfinderOptions(Options):
    """Options of ``method="pathfinder"`` (module docstring)."""

    num_paths: int = option(4, "Pathfinder: independent L-BFGS paths, one chain each", check=positive_int)
    num_samples: int = option(1000, "posterior draws kept (per chain for MCMC)", check=positive_int)
    num_steps: int = option(200, "pathfinder: L-BFGS iterations per path (the path's length)", check=positive_int)
    history: int = option(10, "Pathfinder: L-BFGS history size (rank of the covariance update)", check=positive_int)
    num_elbo_draws: int = option(20, "Pathfinder: draws per ELBO estimate along the path", check=positive_int)
    init_radius: float = option(2.0, "start values uniform in (-r, r) on the unconstrained space", check=positive_float)
    resample: str = option(
        "auto",
        "pathfinder: importance-resample the paths' draws into one chain (multi-path Pathfinder; auto: on unless the model "
        "is built of bnnpp layers)",
        choices=RESAMPLE,
    )

    refused: ClassVar[dict[str, str]] = {"epochs": "pathfinder is not trained in epochs: pass num_steps (L-BFGS iterations per path)"}


class Resampled(NamedTuple):
    """Multi-path Pathfinder's state: ``paths`` the paths' ``PathfinderState`` (leading
    ``(paths,)`` axis); ``draws`` site → ``(paths · num_samples, *site_shape)`` unconstrained
    draws, ``num_samples`` from each path's Gaussian; ``log_weights`` ``(paths · num_samples,)``
    their log importance ratios log p(θ, y) − log q_k(θ) under their own path's Gaussian."""

    paths: object
    draws: dict
    log_weights: jax.Array


class PathfinderStart(NamedTuple):
    """What the paths found, one row per path: ``state`` a BlackJAX ``PathfinderState``
    whose leaves carry a leading ``(paths,)`` axis (position, grad, alpha ``(paths, D)``,
    beta ``(paths, D, 2m)``, gamma ``(paths, 2m, 2m)``, elbo ``(paths,)``)."""

    state: object


def log_joint(model: Callable) -> Callable:
    """``f(u, (x, y)) -> log p(u, y | x)``, the log joint on the unconstrained space with the
    log-Jacobians (:func:`bnnpp.inference.joint.joint_terms`), a scalar."""

    def f(u, data):
        log_prior, log_lik, _ = joint_terms(model, u, *data, KEY_MODEL)
        return log_prior + log_lik

    return f


def _unit_state(u: dict, history: int):
    """A PathfinderState at ``u`` with the identity as its covariance (alpha 1, beta and
    gamma 0) and ELBO −inf: the fallback of a path that found nothing."""
    from blackjax.vi.pathfinder import PathfinderState

    flat, _ = ravel_pytree(u)
    d = flat.shape[0]
    return PathfinderState(
        -jnp.inf * jnp.ones(()),
        u,
        jax.tree.map(jnp.zeros_like, u),
        jnp.ones((d,)),
        jnp.zeros((d, 2 * history)),
        jnp.zeros((2 * history, 2 * history)),
    )


def approximate(key, logdensity: Callable, u0: dict, num_elbo_draws: int, *, maxiter: int, history: int):
    """One Pathfinder path (Zhang et al. 2022, Algorithms 1 and 3): BlackJAX's
    ``vi.pathfinder.approximate`` with its Gaussians scored one L-BFGS iterate after another
    (``lax.map``) instead of all at once (``vmap``).

    Vmapped, each iterate's matrix inverse and QR become two batched LAPACK calls that
    XLA's CPU runtime can run at the same time, and two such calls can wait on each other
    for ever inside jaxlib's ``jax::ParallelBatchMap``.
    Scored one at a time, every LAPACK call has a batch of one.

    Returns:
        The ``PathfinderState`` of the iterate with the highest ELBO (ELBO −inf where no
        iterate's was finite).
    """
    from blackjax.optimizers.lbfgs import _minimize_lbfgs, bfgs_sample, lbfgs_inverse_hessian_factors
    from blackjax.vi.pathfinder import PathfinderState

    flat0, unravel = ravel_pytree(u0)
    objective = lambda x: -logdensity(unravel(x))
    (_, status), hist = _minimize_lbfgs(objective, flat0, maxiter, history, 1e-08, 1e-05, 1000)
    position, grad, alpha = hist.x, hist.g, hist.alpha
    mask = hist.update_mask[1:]
    s = jnp.pad(jnp.where(mask, jnp.diff(position, axis=0), 0.0), ((history, 0), (0, 0)))
    z = jnp.pad(jnp.where(mask, jnp.diff(grad, axis=0), 0.0), ((history, 0), (0, 0)))

    def score(args):
        i, k = args
        window = i + jnp.arange(history)
        beta, gamma = lbfgs_inverse_hessian_factors(s[window].T, z[window].T, alpha[i])
        phi, logq = bfgs_sample(k, num_elbo_draws, position[i], grad[i], alpha[i], beta, gamma)
        logp = -jax.vmap(objective)(phi)
        return jnp.mean(logp - logq), beta, gamma

    size = maxiter + 1
    elbo, beta, gamma = jax.lax.map(score, (jnp.arange(size), jax.random.split(key, size)))
    elbo = jnp.where((jnp.arange(size) < status.iter_num) & jnp.isfinite(elbo), elbo, -jnp.inf)
    best = jnp.argmax(elbo)
    return PathfinderState(elbo[best], unravel(position[best]), unravel(grad[best]), alpha[best], beta[best], gamma[best])


def paths(logdensity: Callable, key, u0: dict, *, maxiter: int, history: int, num_elbo_draws: int):
    """Run one Pathfinder path per start (the leading axis of ``u0``'s leaves), one path
    after another (``lax.map``, for the reason :func:`approximate` gives).

    Returns:
        A BlackJAX ``PathfinderState`` per path (leaves with a leading ``(paths,)`` axis);
        a path with no finite ELBO keeps its start with a unit covariance and ELBO −inf.
    """

    def one(args):
        k, u = args
        state = approximate(k, logdensity, u, num_elbo_draws, maxiter=maxiter, history=history)
        fallback = _unit_state(u, history)
        ok = jnp.isfinite(state.elbo)
        return jax.tree.map(lambda a, b: jnp.where(ok, a, b), state, fallback)

    num = jax.tree.leaves(u0)[0].shape[0]
    return jax.lax.map(one, (jax.random.split(key, num), u0))


def draw(key, state, num_samples: int, with_log_density: bool = False):
    """``num_samples`` unconstrained draws from each path's Gaussian: leaves
    ``(paths, num_samples, *site_shape)``; with ``with_log_density`` also their log density
    under their path's Gaussian, ``(paths, num_samples)``."""
    from blackjax.vi.pathfinder import sample

    num = state.elbo.shape[0]
    # one path after another: one batched QR per path (see approximate)
    drawn, logq = jax.lax.map(lambda ks: sample(ks[0], ks[1], num_samples), (jax.random.split(key, num), state))
    return (drawn, logq) if with_log_density else drawn


def starts(
    logdensity: Callable,
    key,
    shapes: dict,
    num_chains: int,
    *,
    num_paths: int,
    radius: float,
    maxiter: int,
    history: int = 10,
    num_elbo_draws: int = 20,
) -> dict:
    """Starting points for ``num_chains`` chains: ``num_paths`` Pathfinder paths from
    uniform starts, then ``ceil(num_chains / num_paths)`` draws from each path's Gaussian,
    the first ``num_chains`` kept (chain ``c`` from path ``c mod num_paths``). A draw that is
    not finite, or whose log density is not, is replaced by its path's start.

    Returns:
        site → ``(num_chains, *site_shape)`` unconstrained values.
    """
    k_start, k_path, k_draw = jax.random.split(key, 3)
    u0 = jax.vmap(lambda k: init_uniform(shapes, k, radius))(jax.random.split(k_start, num_paths))
    found = paths(logdensity, k_path, u0, maxiter=maxiter, history=history, num_elbo_draws=num_elbo_draws)
    per_path = -(-num_chains // num_paths)
    drawn = draw(k_draw, found, per_path)  # (paths, per_path, ...)
    # chain c from path c mod P: (per_path, paths, ...) flattened
    flat = jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1).reshape(-1, *a.shape[2:])[:num_chains], drawn)
    home = jax.tree.map(lambda a: jnp.tile(a, (per_path,) + (1,) * (a.ndim - 1))[:num_chains], found.position)
    ok = jax.vmap(lambda u: jnp.isfinite(logdensity(u)) & jnp.all(jnp.isfinite(ravel_pytree(u)[0])))(flat)
    return jax.tree.map(lambda a, b: jnp.where(ok.reshape(-1, *([1] * (a.ndim - 1))), a, b), flat, home)


class PathfinderInfo(NamedTuple):
    """loss and negative_elbo: minus the mean over paths of each path's best ELBO, scalar
    (the same number under both names: ``negative_elbo`` is the trace a saved fit's
    ELBO is read from)."""

    loss: jax.Array
    negative_elbo: jax.Array


def build(model, x, y, options: PathfinderOptions, start: dict | None = None) -> Algorithm:
    """Pathfinder as an :class:`Algorithm` of one step (module docstring). ``start``: site →
    unconstrained value where the first path starts (the others start uniform).

    Returns:
        The algorithm; its posterior has ``num_paths`` chains of ``num_samples`` draws
        ``(num_paths, num_samples, *site_shape)`` (constrained values), or with resampling one
        chain ``(1, num_samples, *site_shape)``; ``extras["elbo"]`` the best ELBO of each path
        and, with resampling, ``extras["psis_khat"]`` of the importance ratios.
    """
    require_blackjax("pathfinder")
    sites = latent_sites(model, x, y)
    shapes = {name: s.shape for name, s in sites.items()}
    joint = log_joint(model)
    num_paths, num_samples = int(options.num_paths), int(options.num_samples)
    from bnnpp.inference.variational_layers import is_network  # a method-side module, loaded when asked

    resample = options.resample == "on" or (options.resample == "auto" and not is_network(model, x, y))
    values = lambda v: constrained_values(model, v, *probe_rows(model, x, y), KEY_MODEL, sites)

    def init(key, data):
        u0 = jax.vmap(lambda k: init_uniform(shapes, k, float(options.init_radius)))(jax.random.split(key, num_paths))
        if start:  # the first path from the given values
            u0 = {k: v.at[0].set(jnp.asarray(start[k], v.dtype)) if k in start else v for k, v in u0.items()}
        found = jax.vmap(lambda u: _unit_state(u, int(options.history)))(u0)
        if not resample:
            return found
        pool = jax.tree.map(lambda a: jnp.zeros((num_paths * num_samples, *a.shape[1:]), a.dtype), u0)
        return Resampled(found, pool, jnp.zeros((num_paths * num_samples,), jnp.float32))

    def step(key, state, batch):
        k_path, k_draw = jax.random.split(key) if resample else (key, None)
        found = paths(
            lambda u: joint(u, batch),
            k_path,
            (state.paths if resample else state).position,
            maxiter=int(options.num_steps),
            history=int(options.history),
            num_elbo_draws=int(options.num_elbo_draws),
        )
        loss = -jnp.mean(found.elbo)
        if not resample:
            return found, PathfinderInfo(loss, loss)
        drawn, logq = draw(k_draw, found, num_samples, with_log_density=True)  # (paths, num_samples, ...)
        pool = jax.tree.map(lambda a: a.reshape(num_paths * num_samples, *a.shape[2:]), drawn)
        logp = jax.lax.map(lambda u: joint(u, batch), pool)
        log_weights = logp - logq.reshape(-1)
        log_weights = jnp.where(jnp.isfinite(log_weights), log_weights, -jnp.inf)
        return Resampled(found, pool, log_weights), PathfinderInfo(loss, loss)

    def sample(key, state, n):
        if not resample:
            return jax.vmap(jax.vmap(values))(draw(key, state, n))
        picked = jax.random.choice(key, state.log_weights.shape[0], (n,), p=truncated_weights(state.log_weights))
        return jax.vmap(values)(jax.tree.map(lambda a: a[picked], state.draws))  # one chain

    def extras(state) -> dict:
        found = state.paths if resample else state
        out = {"elbo": [float(e) for e in np.asarray(found.elbo)], "resampled": resample}
        if resample:
            from bnnpp.inference.health import pareto_khat

            lw = np.asarray(state.log_weights, np.float64)
            khat = pareto_khat(lw[np.isfinite(lw)])
            out["psis_khat"] = khat
            if not khat <= KHAT_THRESHOLD:
                warnings.warn(
                    f"pathfinder: PSIS k̂ = {khat:.2f} > {KHAT_THRESHOLD} over the paths' importance ratios: the paths' "
                    "Gaussians miss part of the posterior and the resampled draws are not reliable (Zhang et al. 2022, "
                    "§3.2); fit with method='nuts', or use pathfinder only as a start (nuts with init_loc='pathfinder')",
                    UserWarning,
                    stacklevel=2,
                )
        return out

    return Algorithm(
        init,
        step,
        sample,
        RunSpec(num_steps=1, num_samples=num_samples, name="pathfinder", num_chains=1 if resample else num_paths),
        Hooks(extras=extras),
    )


def truncated_weights(log_weights: jax.Array) -> jax.Array:
    """Resampling probabilities ``(S,)`` from log importance ratios ``(S,)`` (−inf: weight 0):
    the ratios truncated at their mean times √S (truncated importance sampling, Ionides 2008,
    which bounds their variance as PSIS's smoothing of the largest ones does), normalised."""
    finite = jnp.isfinite(log_weights)
    w = jnp.where(finite, jnp.exp(log_weights - jnp.max(jnp.where(finite, log_weights, -jnp.inf))), 0.0)
    w = jnp.where(jnp.any(finite), w, 1.0)  # no finite ratio: every draw alike (the k̂ line says so)
    s = log_weights.shape[0]
    w = jnp.minimum(w, jnp.mean(w) * jnp.sqrt(s))
    return w / jnp.sum(w)


register(
    Method(
        "pathfinder",
        PathfinderOptions,
        build=build,
        summary="Pathfinder variational inference (BlackJAX): Gaussians along L-BFGS paths, one chain per path",
        requires=functools.partial(blackjax_missing, "pathfinder"),
        smoke={"num_paths": 2, "num_steps": 20, "num_samples": 20},
    )
)
