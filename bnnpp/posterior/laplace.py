"""The Laplace approximation's family (:class:`LaplaceGaussian`, saved as the posterior's
variational parameters) and its predictives: the network's output at a position and the
linearised (GLM) predictive of Immer, Korzepa & Bauer (2021, eq. 6).

It lives beside the posterior, not with the method (:mod:`bnnpp.inference.laplace`), so
that a saved laplace posterior predicts with it in any process, whatever was imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.flatten_util import ravel_pytree
from numpyro import handlers

from bnnpp.introspection import improper_as_zeros, latent_trace, observed_site, unwrap
from bnnpp.posterior.approximation import Approximation
from bnnpp.posterior.prediction import Prediction

if TYPE_CHECKING:
    from bnnpp.posterior.core import Posterior

__all__ = ["LaplaceGaussian"]

# --------------------------------------------------------------------------------------
# The approximation: a pytree of named arrays, saved as the variational_params group
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaplaceGaussian(Approximation):
    """N(θ*, Σ) on the unconstrained space of the Laplace parameters θ, the other latent sites
    fixed. ``params`` (flat named arrays, the saved form):

    * ``<site>__mean``: θ* of each site of θ (site shape); ``<site>__fixed``: the value of every
      other latent site (unconstrained);
    * ``full``: ``covariance_factor`` ``(P, P)`` with Σ = C Cᵀ over θ flattened site by site;
    * ``diag``: ``<site>__precision`` (site shape), Σ = diag(1 / precision);
    * ``kron``: per layer ``<layer>__kron_qa`` ``(F+1, F+1)``, ``<layer>__kron_qg``
      ``(out, out)`` (eigenvectors of A and G) and ``<layer>__kron_eig`` ``(F+1, out)``, the
      posterior precision's eigenvalues s·λ_A λ_G + δ (F: inputs, kh·kw·in for a convolution);
    * ``prior_precision``, ``noise`` (NaN without a Gaussian likelihood) and
      ``log_marginal_likelihood``: scalars.
    """

    params: dict[str, Any]
    kind: str = "laplace"

    def to_params(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in self.params.items()}

    @classmethod
    def from_params(cls, params: dict[str, np.ndarray], sites) -> LaplaceGaussian:
        """Rebuild from a saved ``variational_params`` group (``sites``: the model's site names)."""
        return cls(dict(params))

    @property
    def structure(self) -> str:
        """``"full"``, ``"diag"`` or ``"kron"``."""
        if "covariance_factor" in self.params:
            return "full"
        return "kron" if any(k.endswith("__kron_eig") for k in self.params) else "diag"

    @property
    def mean(self) -> dict[str, Any]:
        """θ*: site → unconstrained value."""
        return {k[: -len("__mean")]: v for k, v in self.params.items() if k.endswith("__mean")}

    @property
    def fixed(self) -> dict[str, Any]:
        """The latent sites outside θ: site → unconstrained value."""
        return {k[: -len("__fixed")]: v for k, v in self.params.items() if k.endswith("__fixed")}

    def covariance(self) -> np.ndarray:
        """Σ as a dense ``(P, P)`` matrix over θ flattened site by site in sorted order, each
        site row-major (for small models and tests: kron builds (Qa ⊗ Qg) diag(1/eig) (Qa ⊗ Qg)ᵀ
        per layer, with a layer's bias as the last row of its weights)."""
        if self.structure == "full":
            c = np.asarray(self.params["covariance_factor"], np.float64)
            return c @ c.T
        mean = self.mean
        blocks: dict[str, np.ndarray] = {}
        if self.structure == "diag":
            blocks = {k: np.diag(1.0 / np.asarray(self.params[f"{k}__precision"], np.float64).ravel()) for k in mean}
        else:
            cov = {}
            for layer in (k[: -len("__kron_eig")] for k in self.params if k.endswith("__kron_eig")):
                qa, qg, eig = (np.asarray(self.params[f"{layer}__kron_{p}"], np.float64) for p in ("qa", "qg", "eig"))
                q = np.kron(qa, qg)
                full = q @ np.diag(1.0 / eig.ravel()) @ q.T
                rows = np.arange(eig.size).reshape(eig.shape)
                w_idx, b_idx = rows[:-1].ravel(), rows[-1]
                cov[layer] = (full, w_idx, b_idx)
                blocks[f"{layer}.w"] = full[np.ix_(w_idx, w_idx)]
                blocks[f"{layer}.b"] = full[np.ix_(b_idx, b_idx)]
        names = sorted(mean)
        sizes = [int(np.size(mean[k])) for k in names]
        out = np.zeros((sum(sizes), sum(sizes)))
        starts = dict(zip(names, np.cumsum([0, *sizes[:-1]]), strict=True))
        for k in names:
            i = starts[k]
            out[i : i + blocks[k].shape[0], i : i + blocks[k].shape[0]] = blocks[k]
        if self.structure == "kron":  # the weight-bias cross terms of each layer
            for layer, (full, w_idx, b_idx) in cov.items():
                iw, ib = starts[f"{layer}.w"], starts[f"{layer}.b"]
                cross = full[np.ix_(w_idx, b_idx)]
                out[iw : iw + len(w_idx), ib : ib + len(b_idx)] = cross
                out[ib : ib + len(b_idx), iw : iw + len(w_idx)] = cross.T
        return out

    def sample_unconstrained(self, key, num_samples: int) -> dict[str, jax.Array]:
        """``num_samples`` draws of θ ~ N(θ*, Σ): site → ``(num_samples, *site_shape)``
        (unconstrained; the sites of θ only). Traceable."""
        mean = self.mean
        if self.structure == "full":
            flat, unravel = ravel_pytree(mean)
            z = jax.random.normal(key, (num_samples, flat.shape[0]), flat.dtype)
            return jax.vmap(unravel)(flat + z @ jnp.asarray(self.params["covariance_factor"]).T)
        out = {}
        keys = jax.random.split(key, max(1, len(mean)))
        if self.structure == "diag":
            for k, (name, m) in zip(keys, mean.items(), strict=False):
                z = jax.random.normal(k, (num_samples, *jnp.shape(m)))
                out[name] = m + z / jnp.sqrt(self.params[f"{name}__precision"])
            return out
        layers = [k[: -len("__kron_eig")] for k in self.params if k.endswith("__kron_eig")]
        for k, layer in zip(keys, layers, strict=False):
            qa, qg, eig = (jnp.asarray(self.params[f"{layer}__kron_{p}"]) for p in ("qa", "qg", "eig"))
            z = jax.random.normal(k, (num_samples, *eig.shape), eig.dtype)
            delta = jnp.einsum("ia,sab,jb->sij", qa, z / jnp.sqrt(eig), qg)  # Qa (Z / sqrt(eig)) Qgᵀ
            w = mean[f"{layer}.w"]
            out[f"{layer}.w"] = w + delta[:, :-1].reshape(num_samples, *jnp.shape(w))
            out[f"{layer}.b"] = mean[f"{layer}.b"] + delta[:, -1]
        return out

    def predict(self, posterior: Posterior, x: np.ndarray, num_samples: int | None, seed: int) -> Prediction | None:
        """The linearised (GLM) predictive at ``x`` when the fit chose ``predictive="linearised"``,
        else ``None`` (``Posterior.predict`` then predicts through the network at the draws).
        Returns a :class:`Prediction` over S draws (S = ``num_samples`` or the posterior's):
        regression ``draws`` f_lin ``(S, n)`` and ``noise`` ``(S, n)``; classification ``probs``
        ``(S, n, C)``, the probit predictive repeated for every draw."""
        if posterior.stats.options.get("predictive") != "linearised":
            return None
        model = posterior.model_or_raise()
        s = int(num_samples or posterior.num_chains * posterior.num_draws)
        key = ("laplace_linearised", s, posterior.stats.options.get("link", "probit"))
        if key not in posterior._jitted:
            link = posterior.stats.options.get("link", "probit")
            posterior._jitted[key] = jax.jit(lambda p, k, xs: _linearised(model, LaplaceGaussian(p), k, xs, s, link))
        out = jax.device_get(posterior._jitted[key](self.params, jax.random.PRNGKey(seed), x))
        if "probs" in out:
            return Prediction("classification", probs=np.asarray(out["probs"]))
        return Prediction("regression", draws=np.asarray(out["loc"]), noise=np.asarray(out["scale"]))


jax.tree_util.register_dataclass(LaplaceGaussian, data_fields=["params"], meta_fields=["kind"])


# --------------------------------------------------------------------------------------
# The model's output: the natural parameter of its observation site
# --------------------------------------------------------------------------------------

_KEY = np.zeros(2, np.uint32)  # the models draw nothing random at a fixed position (as map)


def _observation(trace) -> tuple[str, jax.Array, jax.Array | None]:
    """``(likelihood, f, sd)`` of the observation site (:func:`bnnpp.introspection.observed_site`):
    ``"categorical"`` logits ``(n, C)``, ``"bernoulli"`` logits ``(n,)`` or ``"gaussian"`` mean
    with its sd, both of the targets' shape ``(n,)`` or ``(n, K)`` (a ``.to_event(1)`` site)."""
    site = observed_site(trace)
    fn = unwrap(site["fn"])
    n = jnp.shape(site["value"])[0]
    if isinstance(fn, dist.CategoricalLogits):
        return "categorical", jnp.broadcast_to(fn.logits, (n, fn.logits.shape[-1])), None
    if isinstance(fn, dist.BernoulliLogits):
        return "bernoulli", jnp.broadcast_to(fn.logits, (n,)), None
    if isinstance(fn, dist.Normal):
        shape = jnp.shape(site["value"])
        return "gaussian", jnp.broadcast_to(fn.loc, shape), jnp.broadcast_to(fn.scale, shape)
    raise ValueError(
        f"laplace's GGN and linearised predictive need a Categorical(logits=...), Bernoulli(logits=...) or Normal "
        f"observation site, got {type(fn).__name__}: parameterise it by logits, or use hessian='full' with predictive='mc'"
    )


def _likelihood_kind(model, x, y) -> str:
    """The observation's kind by one abstract trace (no compile); ValueError when unsupported."""
    found = {}

    def probe(xs, ys):
        found["kind"] = _observation(
            handlers.trace(handlers.substitute(handlers.seed(model, _KEY), substitute_fn=improper_as_zeros)).get_trace(xs, ys)
        )[0]
        return 0

    jax.eval_shape(probe, x[:2], y[:2])
    return found["kind"]


def _linearised(model, approx: LaplaceGaussian, key, x, num_samples: int, link: str = "probit") -> dict:
    """The GLM predictive (module docstring) at ``x``: ``{"probs": (S, n, C)}`` or
    ``{"loc": (S, n), "scale": (S, n)}``. Classification: ``link="probit"`` repeats the probit
    approximation for every draw (no spread between draws, so no mutual information);
    ``link="mc"`` gives each draw its own softmax of the linearised logits, keeping the
    correlations between classes that the probit's per-class variances ignore."""
    mean, fixed = approx.mean, approx.fixed

    def output(theta):
        kind, f, sd = _observation(latent_trace(model, {**fixed, **theta}, x, None, _KEY))
        return f, (kind, sd)

    draws = approx.sample_unconstrained(key, num_samples)
    f0, (kind, _) = output(mean)

    def one(theta):
        _, df = jax.jvp(lambda t: output(t)[0], (mean,), (jax.tree_util.tree_map(jnp.subtract, theta, mean),))
        sd = output(theta)[1][1] if kind == "gaussian" else None
        return f0 + df, sd

    f, sd = jax.lax.map(one, draws, batch_size=min(num_samples, 16))
    if kind == "gaussian":
        return {"loc": f, "scale": sd}
    if link == "mc":
        if kind == "categorical":
            return {"probs": jax.nn.softmax(f, axis=-1)}
        p = jax.nn.sigmoid(f)
        return {"probs": jnp.stack([1 - p, p], axis=-1)}
    var = jnp.mean((f - f0) ** 2, axis=0)  # the variance of f_lin over the draws (its mean is f0)
    z = f0 / jnp.sqrt(1.0 + jnp.pi / 8.0 * var)
    if kind == "categorical":
        probs = jax.nn.softmax(z, axis=-1)
    else:
        p = jax.nn.sigmoid(z)
        probs = jnp.stack([1 - p, p], axis=-1)
    return {"probs": jnp.broadcast_to(probs, (num_samples, *probs.shape))}
