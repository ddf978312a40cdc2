"""Hyperparameters by evidence: the online marginal-likelihood step of Immer et al. (2021,
"Scalable marginal likelihood estimation for model selection in deep learning", Algorithm 1).

A MAP-type fit (``map``, the MAP of ``laplace``, every member of ``ensemble`` and the
pretraining of ``swag``/``multiswag``) with ``hyperparameters="evidence"`` trains the weights
θ of the bnnpp layers by the negative log joint with the *hyperparameters* h held — every
other latent site: the scales of a hierarchical prior (``<scope>.scale``/``.variance``) and a
learned noise sd — and every ``evidence_every`` steps takes ``evidence_steps`` Adam steps
(rate 0.1, on the unconstrained h) on the Laplace-GGN log marginal likelihood at the current
weights (MacKay 1992; Immer et al. 2021, eq. 4, diagonal GGN):

    log Z(h) ≈ log p(y | θ, h) + log p(θ | h) + log p(h) − ½ Σ_i log(s(h)·G_ii + Π_ii(h)) + const

G: the diagonal generalised Gauss–Newton of the negative log-likelihood in θ
(:func:`bnnpp.inference.laplace.curvature._ggn`), computed once per update at the current θ
and h₀; s(h) = σ(h₀)² / σ(h)² for a Gaussian likelihood with a learned sd σ (its curvature
scales with 1/σ²), else 1; Π(h) = −diag ∂²/∂θ² log p(θ | h), the prior's precision (exact
for the factorised priors of :mod:`bnnpp.priors`: their Hessian in θ is diagonal, so it is
the Hessian-vector product with a vector of ones). log p(h) is the hyperprior with the
log-Jacobian of h's unconstrained space (a MAP-II estimate: the hyperprior keeps h proper).
With minibatches the log-likelihood and G are the batch's scaled by N/B.

Why: a point estimate of θ and its scale jointly runs to the mode where every weight and its
scale shrink together (the joint density has a spike at scale → 0), explaining the targets
as noise; the evidence integrates θ out around the mode and rewards scales that fit.

Everything runs inside the method's compiled program (a ``lax.cond`` on the runner's step index, the ``periodic`` hook): no
host round-trip.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree
from numpyro.distributions.transforms import biject_to

from bnnpp.inference.joint import joint_terms, latent_trace, prior_diag
from bnnpp.inference.variational_layers import find_layers
from bnnpp.introspection import latent_sites, probe_rows
from bnnpp.posterior.laplace import _KEY, _observation

__all__ = [
    "EVIDENCE_LEARNING_RATE",
    "FULL_LIMIT",
    "EvidencePlan",
    "EvidenceState",
    "NOISE_START",
    "auto_takes_evidence",
    "evidence_plan",
    "hierarchical",
    "hierarchical_normal",
    "hyper_start",
    "log_evidence",
    "member_hyperparameters",
    "resolve_every",
    "scheduled_update",
]

EVIDENCE_LEARNING_RATE = 0.1
"""Adam's rate on the unconstrained hyperparameters (Immer et al. 2021 use 0.1)."""


FULL_LIMIT = 2000
"""Networks with at most this many weights use the full GGN (a P × P matrix, its log
determinant by Cholesky); larger ones its diagonal. The diagonal's log determinant is the
sum of the log diagonal, an upper bound of the full one (Hadamard's inequality) that grows
with every weight whether the data determine it or not, so on a small network it
over-charges a small noise and the evidence chooses too large a noise sd. 2,000 weights
keep the P × P matrix at 16 MB of float32 and its Cholesky at about 3·10⁹ flops."""


class EvidenceState(NamedTuple):
    """The optimiser state of a MAP step under ``hyperparameters="evidence"``.

    opt: the weights' optimiser state; hyper_opt: Adam's state on the hyperparameters (the
    sites of :attr:`EvidencePlan.hyper`). The steps done come from the runner's loop (the
    ``periodic`` hook of :class:`~bnnpp.inference.algorithm.Hooks`), not from this state."""

    opt: Any
    hyper_opt: Any


class EvidencePlan(NamedTuple):
    """layers: the bnnpp layers (name → record of :func:`find_layers`) whose ``.w``/``.b``
    are θ; weights: θ's site names; hyper: h's site names (every other latent site); structure:
    the GGN used, ``"full"`` (P ≤ :data:`FULL_LIMIT`) or ``"diag"``; fixed_prior: every layer's
    prior has a fixed scale (its precision does not depend on h)."""

    layers: dict
    weights: tuple
    hyper: tuple
    structure: str
    fixed_prior: bool = False


class _Spectrum(NamedTuple):
    """The full GGN under a fixed-scale prior, once per update: log det(c·MᵀM + D) = Σ log D +
    Σ_j log(1 + c·μ_j), μ the eigenvalues of M D⁻¹ Mᵀ (or of D^-½ MᵀM D^-½, whichever is
    smaller; the same non-zero ones). log_prec: Σ log D, scalar; eigenvalues: μ, ``(min(R, P),)``."""

    log_prec: jax.Array
    eigenvalues: jax.Array


def evidence_plan(model, x, y, *, required: bool) -> EvidencePlan | None:
    """The plan for ``model``, or ``None`` when there is nothing to learn by evidence (no
    bnnpp layer, or no hyperparameter site). ``required``: raise ``ValueError`` instead; when
    not required (``hyperparameters="auto"``), also ``None`` unless every layer's prior is
    Normal (fixed or hierarchical): the log determinant needs a positive prior precision, and a
    flat, Laplace, Cauchy, Student-t or mixture prior's curvature is zero or negative in places
    (:func:`hierarchical_normal`)."""
    layers = find_layers(model, *probe_rows(model, x, y))
    sites = latent_sites(model, x, y)
    layers = {k: v for k, v in layers.items() if f"{k}.w" in sites and f"{k}.b" in sites}
    weights = tuple(s for k in layers for s in (f"{k}.w", f"{k}.b"))
    hyper = tuple(s for s in sites if s not in weights)
    if not layers or not hyper:
        if required:
            why = "has no bnnpp layer with latent weights and bias" if not layers else "has no prior scale or noise site to learn"
            raise ValueError(f"hyperparameters='evidence': the model {why}; use hyperparameters='map' (or 'auto', which falls back to it)")
        return None
    if not required and not all_normal(layers):
        return None
    size = sum(int(np.prod(sites[k].shape)) for k in weights)
    fixed = all(not getattr(v["prior"], "hierarchical", True) for v in layers.values())
    return EvidencePlan(layers, weights, hyper, "full" if size <= FULL_LIMIT else "diag", fixed)


def all_normal(layers: dict) -> bool:
    """Whether every layer of ``layers`` (:func:`~bnnpp.inference.variational_layers.find_layers`)
    has a Normal weight prior (fixed or hierarchical scale); ``True`` for no layers."""
    return all(getattr(lay["prior"], "kind", None) == "normal" for lay in layers.values())


def hierarchical(layers: dict) -> bool:
    """Whether some bnnpp layer of ``layers`` has a sampled prior scale (a hierarchical prior),
    whatever its weights' family (Normal, Laplace, Cauchy, ...)."""
    return any(getattr(lay["prior"], "hierarchical", False) for lay in layers.values())


def hierarchical_normal(layers: dict) -> bool:
    """Whether every bnnpp layer has a Normal prior and some layer's scale is sampled (a
    hierarchical prior): the case ``hyperparameters="auto"`` resolves to ``"evidence"``. Other
    priors keep the variational factors: a Cauchy or Student-t prior's curvature is negative
    away from 0, and the Laplace evidence's log determinant was NaN at the first step (a
    half-Cauchy-scaled Cauchy net on moons, ``tests/test_advi.py``)."""
    return bool(layers) and all_normal(layers) and hierarchical(layers)


def auto_takes_evidence(model, x, y) -> bool:
    """Whether advi's and bbb's ``hyperparameters="auto"`` resolves to ``"evidence"``: a
    hierarchical Normal prior (:func:`hierarchical_normal`) on bnnpp layers the evidence runs on
    (:func:`evidence_plan`; a Flax module's layers have no ``.w``/``.b`` sites, and asking them for
    the evidence raised ``ValueError``)."""
    plan = evidence_plan(model, x, y, required=False)
    return plan is not None and hierarchical_normal(plan.layers)


def member_hyperparameters(choice: str, model, x, y, layers=None) -> str:
    """The ensemble's ``hyperparameters`` for its members' :class:`MAPOptions`: ``"auto"`` stays
    ``"auto"`` (map's rule: the evidence on at most 2,000 weights) under a hierarchical Normal
    prior (:func:`~bnnpp.inference.evidence.hierarchical_normal`, as advi's and bbb's ``"auto"``)
    and is ``"map"`` otherwise: with fixed prior scales only a learned noise sd is left to the
    evidence, and pulling every member's noise to the same value narrows the members'
    disagreement away from the data. ``layers``: the model's
    :func:`~bnnpp.inference.variational_layers.find_layers`, when the caller has them. mc_dropout
    resolves its ``hyperparameters`` by the same rule."""
    if choice != "auto":
        return choice
    return "auto" if hierarchical_normal(find_layers(model, *probe_rows(model, x, y)) if layers is None else layers) else "map"


NOISE_START = (0.1, 1.0)
"""A learned noise sd ``noise`` starts at 1 in the targets' units, kept within these fractions
of its prior's scale (bnnpp's networks: HalfNormal(``noise_scale`` × the targets' sd), so within
0.1–1 of the targets' sd). Unbounded, 1 in the targets' units is a tiny fraction of the sd of
targets in the hundreds: the evidence's Adam, its second moment filled by the first updates'
huge gradients, then moves it by ever smaller steps (Adam's step is about the rate times
m/√v: Kingma & Ba 2015, Algorithm 1) and the noise stays far below the residuals. Inside the
band the start is unchanged (standardised targets: 1). An empirical band: a start of 0.1
everywhere starts a noise too small for noisy data, one of 1 everywhere too large for
data of little noise."""


def hyper_start(model, plan: EvidencePlan, x, y) -> dict[str, jax.Array]:
    """Unconstrained start values of the hyperparameters ``plan.hyper`` (site → array of the
    site's shape): 0 (a prior scale or variance of 1, the data standardised; a noise sd of 1),
    except that a learned noise sd ``noise`` with a ``scale``-parameterised prior is kept within
    :data:`NOISE_START` times that scale. Computed once per build."""
    trace = latent_trace(model, {}, *probe_rows(model, x, y), _KEY)
    out = {}
    for name in plan.hyper:
        fn = trace[name]["fn"]
        value = jnp.zeros(jnp.shape(trace[name]["value"]), jnp.float32)
        scale = getattr(fn, "scale", None)
        if name == "noise" and scale is not None and jnp.ndim(scale) == 0:
            scale = jnp.asarray(scale, jnp.float32)
            value = value + biject_to(fn.support).inv(jnp.clip(1.0, NOISE_START[0] * scale, NOISE_START[1] * scale))
        out[name] = value
    return out


def resolve_every(every: int | None, num_steps: int) -> int:
    """Steps between evidence updates: ``every``, or by default 1/50 of the run (≥ 1)."""
    return int(every) if every is not None else max(1, int(num_steps) // 50)


def _noise(model, u, x) -> jax.Array:
    kind, _, sd = _observation(latent_trace(model, u, probe_rows(model, x)[0], None, _KEY))
    return jnp.mean(sd) if kind == "gaussian" else jnp.ones(())


def _full_ggn(model, theta: dict, hyper: dict, xb) -> jax.Array:
    """A square root M of the GGN J^T Λ J of the negative log-likelihood over ``xb`` in the flat
    weights (``ravel_pytree`` order): ``(R, P)`` with GGN = MᵀM, R = K·n rows (K: the columns
    of Λ's square root, n: the rows of ``xb``; P ≤ :data:`FULL_LIMIT`). The Jacobian is taken
    in reverse mode when the network has fewer outputs than weights, else forward."""
    from bnnpp.inference.laplace.curvature import _lambda_sqrt

    flat, unravel = ravel_pytree(theta)

    def outputs(v):
        return _observation(latent_trace(model, {**unravel(v), **hyper}, xb, None, _KEY))[1]

    kind, f, sd = _observation(latent_trace(model, {**theta, **hyper}, xb, None, _KEY))
    n = f.shape[0]
    jacobian = jax.jacrev if f.size < flat.shape[0] else jax.jacfwd
    jac = jacobian(outputs)(flat).reshape(n, -1, flat.shape[0])  # (n, C, P)
    cols = _lambda_sqrt(kind, f, sd)
    cols = cols.reshape(cols.shape[0], n, -1)  # (K, n, C)
    return jnp.einsum("knc,ncp->knp", cols, jac).reshape(-1, flat.shape[0])


def _full_logdet(root: jax.Array, prec: jax.Array, c) -> jax.Array:
    """log det(c·MᵀM + diag(prec)) for M = ``root`` ``(R, P)``, ``prec`` ``(P,)`` > 0 and a
    scalar c ≥ 0, by Cholesky. With fewer rows than weights (R < P: a small batch, or a
    network wider than its data) by the matrix determinant lemma, log det D + log det(I_R + c
    M D⁻¹ Mᵀ) with D = diag(prec): an R × R factorisation instead of P × P (the
    same value; D must be positive, as a Normal prior's precision is). Returns a scalar."""
    rows, size = root.shape
    if rows < size:
        prec = jnp.maximum(prec, 1e-12)
        small = jnp.eye(rows, dtype=root.dtype) + c * (root / prec) @ root.T
        return jnp.sum(jnp.log(prec)) + 2.0 * jnp.sum(jnp.log(jnp.diagonal(jnp.linalg.cholesky(small))))
    h = c * root.T @ root + jnp.diag(prec)
    return 2.0 * jnp.sum(jnp.log(jnp.diagonal(jnp.linalg.cholesky(h))))


def _spectrum(root: jax.Array, prec: jax.Array) -> _Spectrum:
    """:class:`_Spectrum` of the GGN square root ``root`` ``(R, P)`` and a fixed prior
    precision ``prec`` ``(P,)`` > 0."""
    a = root * jax.lax.rsqrt(prec)
    gram = a @ a.T if a.shape[0] < a.shape[1] else a.T @ a
    return _Spectrum(jnp.sum(jnp.log(prec)), jnp.maximum(jnp.linalg.eigvalsh(gram), 0.0))


def log_evidence(model, plan: EvidencePlan, theta: dict, hyper: dict, curv, sd0, xb, yb, scale: float) -> jax.Array:
    """The Laplace-GGN log marginal likelihood (module docstring, without its constant) as a
    function of the unconstrained hyperparameters ``hyper``, at weights ``theta`` with the GGN
    ``curv`` over ``(xb, yb)`` computed at the noise sd ``sd0``: the full GGN as its square root
    M ``(R, P)`` of :func:`_full_ggn` (flat weights in ``ravel_pytree`` order), its
    :class:`_Spectrum` under a fixed-scale prior, or per layer ``{"diag": (F+1, out)}``.
    ``scale``: N/B, the minibatch's weight. Returns a scalar."""

    lp, ll, _ = joint_terms(model, {**theta, **hyper}, xb, yb, _KEY)
    prec = prior_diag(model, theta, hyper, xb, yb, _KEY)
    s = (sd0 / _noise(model, {**theta, **hyper}, xb)) ** 2
    if isinstance(curv, _Spectrum):  # the full GGN, fixed prior precision: its eigenvalues, once per update
        return lp + scale * ll - 0.5 * (curv.log_prec + jnp.sum(jnp.log1p(s * scale * curv.eigenvalues)))
    if not isinstance(curv, dict):  # the full GGN: log det by Cholesky
        return lp + scale * ll - 0.5 * _full_logdet(curv, ravel_pytree(prec)[0], s * scale)
    logdet = 0.0
    for name, c in curv.items():
        g = scale * c["diag"]
        w, b = theta[f"{name}.w"], theta[f"{name}.b"]
        pw, pb = prec[f"{name}.w"], prec[f"{name}.b"]
        logdet += jnp.sum(jnp.log(jnp.maximum(s * g[:-1].reshape(w.shape) + pw, 1e-12)))
        logdet += jnp.sum(jnp.log(jnp.maximum(s * g[-1].reshape(b.shape) + pb, 1e-12)))
    return lp + scale * ll - 0.5 * logdet


def _prior_precision(model, theta: dict, hyper: dict, xb, yb) -> jax.Array:
    """:func:`~bnnpp.inference.joint.prior_diag` in the flat weights (``ravel_pytree`` order), floored at 1e-12, ``(P,)``."""
    return jnp.maximum(ravel_pytree(prior_diag(model, theta, hyper, xb, yb, _KEY))[0], 1e-12)


def evidence_update(model, plan: EvidencePlan, position: dict, hyper_opt, xb, yb, n: int, steps: int):
    """``steps`` Adam steps on −log Z over the hyperparameters of ``position`` at its weights.
    Returns ``(position, hyper_opt)`` with the hyperparameter sites replaced, or both as they
    were when the steps end on a non-finite hyperparameter."""
    hyper0 = {k: jax.lax.stop_gradient(position[k]) for k in plan.hyper}
    hyper, new_opt = hyper_steps(model, plan, position, hyper_opt, xb, yb, n, steps)
    # A network far from any fit (e.g. a U(±2) start on many inputs with a per-row sd head: sds of
    # 1e-6, GGN entries of 1e7) gives a float32 log determinant that is NaN; the update is then
    # skipped (h and Adam's state kept) and the weights go on, rather than the fit stopping there.
    ok = jnp.all(jnp.stack([jnp.all(jnp.isfinite(v)) for v in jax.tree_util.tree_leaves(hyper)]))
    hyper = jax.tree_util.tree_map(lambda new, old: jnp.where(ok, new, old), hyper, hyper0)
    hyper_opt = jax.tree_util.tree_map(lambda new, old: jnp.where(ok, new, old), new_opt, hyper_opt)
    return {**position, **hyper}, hyper_opt


def scheduled_update(model, plan: EvidencePlan, t, position: dict, hyper_opt, batch_data, n: int, every: int, num_steps: int, steps: int):
    """The ``periodic`` hook's update after step ``t`` (0-based): :func:`evidence_update` every ``every`` steps,
    except where it would leave the weights fewer than ``every`` steps after it; else ``(position, hyper_opt)``
    unchanged. Returns ``(position, hyper_opt)``."""
    done = t + 1
    return jax.lax.cond(
        (done % every == 0) & (done + every <= num_steps),
        lambda: evidence_update(model, plan, position, hyper_opt, *batch_data, n, steps),
        lambda: (position, hyper_opt),
    )


def hyper_steps(model, plan: EvidencePlan, position: dict, hyper_opt, xb, yb, n: int, steps: int):
    """The Adam steps of :func:`evidence_update`, unguarded: ``(hyper, hyper_opt)`` after them."""
    from bnnpp.inference.laplace.curvature import _ggn

    batch = xb.shape[0]
    position = jax.lax.stop_gradient(position)
    theta = {k: position[k] for k in plan.weights}
    hyper0 = {k: position[k] for k in plan.hyper}
    if plan.structure == "full":
        curv = _full_ggn(model, theta, hyper0, xb)
        if plan.fixed_prior:  # the precision does not move with h: one eigendecomposition, no factorisation per step
            curv = _spectrum(curv, _prior_precision(model, theta, hyper0, xb, yb))
    else:
        curv, _ = _ggn(model, position, xb, yb, plan.layers, "diag", batch)
    sd0 = _noise(model, position, xb)
    opt = optax.adam(EVIDENCE_LEARNING_RATE)

    def body(carry, _):
        hyper, state = carry
        grads = jax.grad(lambda h: -log_evidence(model, plan, theta, h, curv, sd0, xb, yb, n / batch))(hyper)
        upd, state = opt.update(grads, state, hyper)
        return (optax.apply_updates(hyper, upd), state), None

    (hyper, hyper_opt), _ = jax.lax.scan(body, (hyper0, hyper_opt), None, length=steps)
    return hyper, hyper_opt


def hyper_optimizer():
    """Adam on the hyperparameters (:data:`EVIDENCE_LEARNING_RATE`)."""
    return optax.adam(EVIDENCE_LEARNING_RATE)
