"""``ensemble``: deep ensembles (Lakshminarayanan, Pritzel & Blundell 2017) — M independently
initialised MAP fits trained side by side as **one** compiled program.

Each member minimises the model's negative log joint on the unconstrained space (the
log-likelihood, a proper scoring rule, plus the prior as weight decay), exactly the
objective and update of ``method="map"`` (:mod:`bnnpp.inference.map_estimate`, whose
``init``/``step``/``sample`` are reused here under ``jax.vmap``): the state carries a leading
member axis ``(M, ...)`` and one step updates every member on the same minibatch. Member
``m`` starts from ``init_uniform`` with the key ``fold_in(keys.init, m)``, so members are
independent; with the same keys and batches a member is bit-for-bit the MAP fit it would be
alone (up to float reassociation in the batched matmuls), see ``tests/test_ensembles.py``.

Adversarial training (``adversarial_epsilon = ε > 0``, the paper's §2.3; by default ``"auto"``:
1% of each input's range for bnnpp regression networks, unless a hierarchical Normal prior has
the members' scales fitted by the evidence): each step also
scores the fast-gradient-sign inputs ``x' = x + ε sign(∇ₓ ℓ(θ, x, y))`` (Goodfellow et al.
2015) with ``ℓ`` the minibatch negative log-likelihood, and the likelihood term becomes
``½ (log p(y|x, θ) + log p(y|x', θ))`` — the paper's ``ℓ(x) + ℓ(x')`` halved, so that the
balance with the prior (weight decay) is unchanged. ``ε`` is in the units of ``x`` (the
paper used 1% of the input range).

How the members share the program (``layout``): with ``"vmap"`` every step updates all
members at once; with ``"in_turn"`` each compiled chunk of steps runs member 0 through all
of its steps, then member 1, ... (the runner's ``Hooks.member_step``), on the same
minibatches and keys, so the fit is the same up to float reassociation. On a CPU a step of
all members sweeps every member's parameters, gradients and Adam moments through memory;
once those exceed the last-level cache each vmapped step pays main-memory traffic that a
member stepped on its own does not. The
default ``"auto"`` therefore steps members in turn on a CPU above :data:`IN_TURN_BYTES` of
members' state and vmaps them otherwise (small nets, where one wide step beats five narrow
ones, and accelerators). Either way it is one program, compiled once.

The posterior: ArviZ ``chain`` = member, one draw per member (its mode), so
``Posterior.samples[site]`` is ``(M, 1, *site_shape)``, ``predict`` averages the members'
predictive distributions (the paper's mixture) and R-hat across members measures how far
apart the modes are. ``stats.traces["loss"]`` is ``(steps, M)``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bnnpp.inference.algorithm import Algorithm, Hooks, RunSpec
from bnnpp.inference.collapse import say_not_suited, sparse_inputs_note
from bnnpp.inference.evidence import member_hyperparameters
from bnnpp.inference.joint import joint_terms
from bnnpp.inference.map_estimate import HYPERPARAMETERS, MAPOptions, MAPState
from bnnpp.inference.map_estimate import build as build_map
from bnnpp.inference.optimizer_step import apply_optimizer
from bnnpp.inference.options import (
    Options,
    init_loc_option,
    optimizer,
    optimizer_of,
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

__all__ = ["COPY_ROWS_LIMIT", "IN_TURN_BYTES", "EnsembleInfo", "EnsembleOptions", "build", "member_keys", "resolve_layout", "vmapped_map"]


ADVERSARIAL_RANGE_FRACTION = 0.01
"""``adversarial_epsilon="auto"``: ε is this fraction of each input's range on the training rows
(Lakshminarayanan et al. 2017, their experimental set-up in §3: ε = 0.01 × the range of the
training data along each input), the paper's adversarial training that smooths each member's
predictive around the training inputs (their §2.3)."""


def adversarial_epsilon_check(name: str, value) -> None:
    """``"auto"`` or a number ≥ 0 (also as a string, from the CLI)."""
    if value == "auto":
        return
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not (math.isfinite(number) and number >= 0):
        raise ValueError(f"{name} must be 'auto' or a number ≥ 0 such as 0.01 (0: off), got {value!r}")


def adversarial_epsilon_for(choice, hyperparameters: str, x, network: bool = True) -> float | np.ndarray | jax.Array:
    """The ε of the members' fast-gradient-sign step: a given number as it is; ``"auto"``:
    :data:`ADVERSARIAL_RANGE_FRACTION` of each input's range over the training rows ``x``
    (``x.shape[1:]``, float32; 0 where an input is constant) for a ``network`` (a bnnpp regression
    network) whose members' resolved ``hyperparameters`` are ``"map"`` (fitted jointly with the
    weights); else 0: under the evidence (its updates take the plain likelihood), for classifiers
    (an empirical default: the step is for regression networks only), for a user's own NumPyro
    model (its members stay the posterior's modes) and for inputs that are not floating point."""
    if choice != "auto":
        return float(choice)
    if not network or hyperparameters != "map" or not jnp.issubdtype(x.dtype, jnp.floating):
        return 0.0  # integer inputs (indices, counts) have no gradient to step along
    if isinstance(x, np.ndarray):
        return (ADVERSARIAL_RANGE_FRACTION * (x.max(axis=0) - x.min(axis=0))).astype(np.float32)
    # a device array (perhaps sharded: the reduction is replicated) or, inside a traced sweep, a tracer
    eps = ADVERSARIAL_RANGE_FRACTION * (jnp.max(x, axis=0) - jnp.min(x, axis=0)).astype(jnp.float32)
    return eps if isinstance(eps, jax.core.Tracer) else np.asarray(eps)


@dataclass(frozen=True)
class EnsembleOptions(Options):
    """Options of ``method="ensemble"``."""

    exclusive = (("optimizer", "learning_rate"), ("epochs", "num_steps"), ("members_per_batch", "layout"))

    members: int = option(5, "ensemble members M (independent MAP fits, trained as one program)", check=positive_int)
    num_steps: int = option(5_000, "optimisation steps of every member", check=positive_int, flag="steps")
    epochs: int | None = option(
        None, "passes over the data (replaces num_steps: steps = epochs x (N // batch_size))", check=optional(positive_int), type=int
    )
    batch_size: int | None = option(None, "minibatch rows per step (None: full batch)", check=optional(positive_int), type=int)
    learning_rate: float = option(1e-2, "Adam learning rate", check=positive_float)
    optimizer: Any = option(None, "any optax transformation (replaces learning_rate)", check=optimizer, flag=False)  # noqa: RUF009
    init_loc: str = init_loc_option("auto_wide")
    init_radius: float = option(
        2.0,
        "members start uniform in (-r, r) on the unconstrained space (init_loc uniform; non-layer sites under glorot), each from its own key",
        check=positive_float,
    )
    members_per_batch: int | None = option(
        None,
        "members stepped at once (vmapped); the rest in a loop inside the same program (None: all at once)",
        check=optional(positive_int),
        type=int,
    )
    layout: str = option(
        "auto",
        "vmap: every step updates all members at once; in_turn: each compiled chunk runs member 0's steps, then member 1's, ... "
        "(same updates, one member's state in cache at a time); auto: in_turn on a CPU when the members' training state "
        "exceeds 20 MiB, else vmap",
        choices=("auto", "vmap", "in_turn"),
    )
    adversarial_epsilon: str | float = option(
        "auto",
        "fast-gradient-sign step on the inputs (Lakshminarayanan et al. 2017), in the units of x: a number (0: off) or auto "
        "(the paper's 0.01 x each input's range on the training rows for bnnpp regression networks whose members fit their "
        "hyperparameters jointly, i.e. without a hierarchical Normal prior; off under one, whose evidence takes the plain "
        "likelihood, for classifiers and for a user's own NumPyro model)",
        check=adversarial_epsilon_check,
        type=str,
    )
    hyperparameters: str = option(
        "auto",
        "how each member fits prior scales and a learned noise sd: evidence (map's Laplace-GGN evidence every evidence_every steps), "
        "map (jointly with the weights), auto (evidence under a hierarchical Normal prior on networks of at most 2,000 weights, "
        "as advi's and bbb's auto; else map)",
        choices=HYPERPARAMETERS,
    )
    chunk_size: int | None = option(None, "steps per compiled chunk", check=optional(positive_int), flag=False, type=int)
    temperature: float = temperature_option()

    def steps_for(self, n: int) -> int:
        """Steps of the fit on ``n`` training rows (:func:`~bnnpp.inference.options.steps_for`)."""
        return steps_for(self, n)

    def check(self) -> None:
        super().check()
        if self.hyperparameters == "evidence" and self.adversarial_epsilon != "auto" and float(self.adversarial_epsilon) > 0:
            raise ValueError(
                "hyperparameters='evidence' does not take adversarial training: set adversarial_epsilon=0 or hyperparameters='map'"
            )
        if self.hyperparameters == "evidence" and self.temperature != 1.0:
            raise ValueError(
                "hyperparameters='evidence' does not take a temperature (the evidence is of the untempered model): "
                "use hyperparameters='map' or temperature=1"
            )


class EnsembleInfo(NamedTuple):
    """loss: every member's (minibatch estimate of its) negative log joint, ``(M,)``."""

    loss: jax.Array


IN_TURN_BYTES = 20 << 20
"""``layout="auto"`` steps the members in turn on a CPU when their training state — parameters,
gradients and Adam's two moments, ``M × P × 4`` float32 numbers — is larger than this (20 MiB,
about the last-level cache of a desktop or small server CPU).

Past the cache every vmapped step sweeps all members' state through main memory, while a
member stepped alone keeps its own in cache from one step to the next; below it one wide step
beats several narrow ones. An empirical default: a lower bound gives up the wide step on nets
that fit in cache, a higher one pays main-memory traffic at every step. On accelerators
``auto`` is always vmap (their parallelism is the point)."""


def resolve_layout(layout: str, members: int, params: int, backend: str | None = None) -> str:
    """``"vmap"`` or ``"in_turn"``: ``layout`` with ``"auto"`` decided by :data:`IN_TURN_BYTES`
    for ``members`` networks of ``params`` numbers on ``backend`` (default: JAX's)."""
    if layout != "auto":
        return layout
    backend = backend or jax.default_backend()
    return "in_turn" if backend == "cpu" and members * params * 4 * 4 > IN_TURN_BYTES else "vmap"


COPY_ROWS_LIMIT = 1 << 22
"""The most numbers (members x rows x features, 16 MiB of float32) for which an ensemble's
step gives every member its own copy of a rank-2 minibatch (see :func:`vmapped_map`)."""


def member_keys(key: jax.Array, members: int) -> jax.Array:
    """The members' keys ``(M, 2)``: member ``m`` gets ``fold_in(key, m)``."""
    return jax.vmap(lambda m: jax.random.fold_in(key, m))(jnp.arange(members))


def map_options(options, **overrides) -> MAPOptions:
    """The :class:`MAPOptions` of one member from an options dataclass with MAP's fields; the
    hyperparameters as the options say (``ensemble``, resolved by :func:`member_hyperparameters`),
    else jointly with the weights (``hyperparameters="map"``: swag's and multiswag's pretraining)."""
    fields = ("batch_size", "learning_rate", "optimizer", "init_loc", "init_radius", "hyperparameters", "temperature")
    given = {f: getattr(options, f) for f in fields if hasattr(options, f)}
    return MAPOptions(**{"hyperparameters": "map", **given, **overrides})


def vmapped_map(
    model,
    x,
    y,
    options: MAPOptions,
    members: int,
    *,
    adversarial_epsilon: float | jax.Array = 0.0,
    members_per_batch: int | None = None,
    start: dict | None = None,
):
    """MAP's ``init``/``step``/``sample`` for ``members`` fits side by side.

    ``members_per_batch = b``: the step vmaps ``b`` members at a time and loops over the
    groups inside the program (``jax.lax.map(..., batch_size=b)``; ``None``: one vmap over all);
    the result is the same, only memory and time differ (fewer members at once need less
    memory, at the price of a sequential loop over the groups inside every step).

    Rows ``(B, D)`` (rank-2 inputs) are copied to every member, ``(M, B, D)``, when the
    minibatch is smaller than twice a member's parameters (``B·D < 2P``) and the copy has at
    most :data:`COPY_ROWS_LIMIT` numbers. With the rows shared, ``vmap`` folds the members into
    the first layer's weight, ``x @ W`` with ``W`` ``(M, D, H)`` becomes one matmul against
    ``(D, M·H)``, which XLA CPU pays for with a transpose of ``W`` and of its gradient (about
    ``2P`` numbers) at every step; with a copy it is one batched matmul on ``M·B·D`` copied
    numbers. E.g. a 784-400-400-10 net in batches of 128 copies; 700 rows of a 2-input,
    47-weight net are shared, one wide first-layer matmul. Inputs with more axes
    (images) stay shared: there the folded form is one convolution with ``M·C`` filters,
    cheaper than the grouped convolution a copy would give.

    Returns:
        ``(init, step, sample, one, member_step)``: ``init(key, data)`` → :class:`MAPState`
        with a leading ``(M,)`` axis on every leaf; ``step(key, state, batch)`` → ``(state,
        loss (M,))`` (every member on the same batch); ``sample(state)`` → ``{site: (M,
        *site_shape)}`` constrained modes; ``one`` is the single-member MAP
        :class:`Algorithm`; ``member_step(key, state, batch)`` → ``(state, loss ())`` is one
        member's step, which ``step`` vmaps with the keys ``fold_in(key, m)``.

    ``start`` (site → unconstrained value, :func:`bnnpp.inference.start.start_position`):
    member 0 starts there, the others from their own random starts (a given network joins the
    ensemble as one member; members started at one point would stay one point under full-batch
    steps).
    """
    # a traced ε (a sweep tracing the whole fit) is on: "auto" returns 0.0 itself when off
    adversarial = isinstance(adversarial_epsilon, jax.core.Tracer) or bool(np.any(np.asarray(adversarial_epsilon) > 0))
    if adversarial:  # the adversarial step below updates every site by the joint
        options = dataclasses.replace(options, hyperparameters="map")
    one = build_map(model, x, y, options)
    given = build_map(model, x, y, options, start=start) if start else None
    n = x.shape[0]
    batch = options.batch_size or n
    opt = optimizer_of(options)  # the one map_estimate.build uses
    key_model = jax.random.PRNGKey(0)  # as map_estimate: the models draw nothing random at a fixed position
    params = sum(math.prod(s.shape) for s in latent_sites(model, x, y).values())
    copy_rows = x.ndim == 2 and batch * x.shape[1] < 2 * params and members * batch * x.shape[1] <= COPY_ROWS_LIMIT

    def init(key, data):
        # a loop over members, not a vmap: the same values, and init runs once, while the vmapped
        # init (threefry loops batched over members) is a larger program to compile than MAP's whole init
        states = jax.lax.map(lambda m: one.init(jax.random.fold_in(key, m), data), jnp.arange(members))
        if given is None:
            return states
        first = given.init(jax.random.fold_in(key, 0), data)
        return jax.tree_util.tree_map(lambda s, f: s.at[0].set(f), states, first)

    def adversarial_step(key, state, batch_data):
        xb, yb = batch_data

        def nll(u, xv):
            return -joint_terms(model, u, xv, yb, key_model)[1]

        def loss(u):
            x_adv = xb + adversarial_epsilon * jnp.sign(jax.grad(nll, argnums=1)(jax.lax.stop_gradient(u), xb))  # no gradient through x'
            log_prior, log_lik, _ = joint_terms(model, u, xb, yb, key_model)
            return -(log_prior + (n / batch) * 0.5 * (log_lik - nll(u, x_adv)))

        value, grads = jax.value_and_grad(loss)(state.position)
        position, opt_state = apply_optimizer(opt, grads, state.opt_state, state.position)
        return MAPState(position, opt_state), value

    def member_step(key, state, batch_data):
        if adversarial:
            return adversarial_step(key, state, batch_data)
        new, info = one.step(key, state, batch_data)
        return new, info.loss

    def step(key, state, batch_data):
        keys = member_keys(key, members)
        if members_per_batch is None or members_per_batch >= members:
            if copy_rows:  # each member its own (identical) rows: batched matmuls from the first layer on
                xb, yb = batch_data
                return jax.vmap(member_step, in_axes=(0, 0, (0, None)))(keys, state, (jnp.broadcast_to(xb, (members, *xb.shape)), yb))
            return jax.vmap(member_step, in_axes=(0, 0, None))(keys, state, batch_data)
        return jax.lax.map(lambda ks: member_step(*ks, batch_data), (keys, state), batch_size=members_per_batch)

    def sample(state):
        return jax.vmap(lambda s: jax.tree_util.tree_map(lambda v: v[0], one.sample(None, s, 1)))(state)

    return init, step, sample, one, member_step


def build(model, x, y, options: EnsembleOptions, start: dict | None = None) -> Algorithm:
    """The ensemble as an :class:`Algorithm` with ``num_chains = M``; ``sample`` returns
    ``{site: (M, num_samples, *site_shape)}``, each member's mode repeated. ``start``: member 0
    starts there (:func:`vmapped_map`)."""
    members = options.members
    num_steps = options.steps_for(x.shape[0])
    layers = find_layers(model, *probe_rows(model, x, y))  # once, for the three rules below
    hyperparameters = member_hyperparameters(options.hyperparameters, model, x, y, layers)
    # the adversarial step is for regression networks; classification nets keep the plain MAP members
    network = getattr(model, "task", None) == "regression" and bool(layers)
    epsilon = adversarial_epsilon_for(options.adversarial_epsilon, hyperparameters, x, network)
    epsilon_mean = None if isinstance(epsilon, jax.core.Tracer) else float(np.mean(epsilon))
    init, vstep, modes, one, one_step = vmapped_map(
        model,
        x,
        y,
        map_options(options, num_steps=num_steps, hyperparameters=hyperparameters),
        members,
        adversarial_epsilon=epsilon,
        members_per_batch=options.members_per_batch,
        start=start,
    )
    params = sum(math.prod(s.shape) for s in latent_sites(model, x, y).values())
    layout = "vmap" if options.members_per_batch is not None else resolve_layout(options.layout, members, params)
    # small regression data too sparse for its inputs: the members are sure between the rows where they miss
    sparse = sparse_inputs_note("ensemble", model, x, y, layers)

    def extras(state):
        said = say_not_suited(sparse) if sparse else {}
        return {"members": members, "adversarial_epsilon_mean": epsilon_mean, **said}  # the runner adds "layout"

    def step(key, state, batch_data):
        state, loss = vstep(key, state, batch_data)
        return state, EnsembleInfo(loss)

    def member_step(key, state, batch_data):
        state, loss = one_step(key, state, batch_data)
        return state, EnsembleInfo(loss)

    member_periodic = vperiodic = None
    if one.hooks.periodic is not None:  # evidence updates: t is the runner's, shared by every member
        member_periodic = one.hooks.periodic
        vperiodic = lambda t, state, batch_data: jax.vmap(member_periodic, in_axes=(None, 0, None))(t, state, batch_data)

    def sample(key, state, num_samples):
        return jax.tree_util.tree_map(lambda v: jnp.broadcast_to(v[:, None], (v.shape[0], num_samples, *v.shape[1:])), modes(state))

    return Algorithm(
        init,
        step,
        sample,
        RunSpec(num_steps=num_steps, num_samples=1, batch_size=options.batch_size, name=f"ensemble ({members})", num_chains=members),
        Hooks(
            extras=extras,
            postfix=lambda info: {"-log joint": f"{info.loss.mean():.4g}"},
            member_step=member_step if layout == "in_turn" else None,
            periodic=vperiodic,
            member_periodic=member_periodic,
        ),
    )


register(
    Method(
        "ensemble",
        EnsembleOptions,
        build=build,
        summary="deep ensemble: M MAP fits trained as one compiled program (Lakshminarayanan et al. 2017)",
        smoke={"num_steps": 60, "members": 3},
    )
)
