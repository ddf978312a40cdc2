"""Start values a user gives (``bnnpp.fit(..., init=...)``): a fit that starts from weights
the user already has — a network trained elsewhere, a Flax module's current parameters, another
bnnpp posterior — instead of the method's own random start.

``init`` may be

- a mapping ``{site: value}`` of constrained latent values (what ``posterior.samples`` holds
  per draw), or a nested mapping whose leaves are such values, joined with ``"."`` into site
  names — a Linen ``variables["params"]`` tree, ``nnx.State`` or an ``nnx.Module`` (its
  ``nnx.Param`` state) give the sites of :func:`bnnpp.models.from_flax` (``layers.0.kernel``);
- a :class:`~bnnpp.Posterior`: its mean over chains and draws (a MAP's single point).

Sites left out start as the method starts them. Every given value is checked before anything
compiles: the site must be a latent site of the model, with its shape, finite and inside the
site's support. Methods take the result of :func:`start_position` — site → value on the
unconstrained space, where every method works — through their ``build``'s ``start`` argument.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.distributions.transforms import biject_to

from bnnpp.introspection import improper_as_zeros, latent_sites, probe_rows

__all__ = ["apply_start", "digest", "flatten_start", "start_position"]


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def flatten_start(init: Any) -> dict[str, np.ndarray]:
    """``init`` as a flat ``{site: numpy array}`` (see the module docstring).

    Raises:
        TypeError: ``init`` is not a mapping, Flax state or module, or posterior.
    """
    samples = getattr(init, "samples", None)
    if isinstance(samples, dict) and hasattr(init, "num_chains"):  # a bnnpp Posterior: its mean draw
        return {k: np.asarray(v).mean(axis=(0, 1)) for k, v in samples.items()}
    init = _flax_params(init)
    if not isinstance(init, Mapping):
        raise TypeError(
            "init must be a dict {site: value} of start values, a nested dict of parameters (Flax params), an nnx.State or "
            f"nnx.Module, or a bnnpp Posterior; got {type(init).__name__}"
        )
    out: dict[str, np.ndarray] = {}

    def walk(prefix: str, node) -> None:
        for key, value in node.items():
            name = f"{prefix}.{key}" if prefix else str(key)
            value = getattr(value, "value", value)  # an nnx.Variable / VariableState holds its array in .value
            if isinstance(value, Mapping):
                walk(name, value)
            else:
                try:
                    out[name] = np.asarray(value)
                except Exception as e:
                    raise TypeError(f"init[{name!r}] must be an array, got {type(value).__name__}") from e
                if np.iscomplexobj(out[name]):
                    raise TypeError(f"init[{name!r}] is complex ({out[name].dtype}): start values must be real numbers")
                if out[name].dtype == object or not np.issubdtype(out[name].dtype, np.number):
                    raise TypeError(f"init[{name!r}] must be a numeric array, got dtype {out[name].dtype}")

    walk("", init)
    return out


def _flax_params(init):
    """An ``nnx.Module`` → its ``nnx.Param`` state as a pure nested dict; an ``nnx.State`` → its
    pure dict; anything else unchanged. Flax is imported only when ``init`` comes from it."""
    if "flax" not in sys.modules or isinstance(init, Mapping):  # a Flax object means Flax is imported already
        return init
    from flax import nnx

    if isinstance(init, nnx.Module):
        init = nnx.state(init, nnx.Param)
    if hasattr(init, "to_pure_dict"):
        return init.to_pure_dict()
    return init


def start_position(model: Callable, x, y, init: Any) -> dict[str, jnp.ndarray]:
    """The unconstrained start position of the given sites, checked against the model.

    Args:
        model: the model as the method sees it (standardised and renamed by ``bnnpp.fit``).
        x, y: training data (one row is traced).
        init: see the module docstring.

    Returns:
        site → float32 array of the site's shape, on the unconstrained space (only the given sites).

    Raises:
        ValueError: an unknown site, a wrong shape, a non-finite value, one beyond float32's
            range or one outside the site's support — one line naming the site.
        TypeError: see :func:`flatten_start` (also a complex value).
    """
    given = flatten_start(init)
    if not given:
        raise ValueError("init is empty: give start values {site: value} for some of the model's latent sites, or init=None")
    sites = latent_sites(model, x, y)
    unknown = sorted(set(given) - set(sites))
    if unknown:
        raise ValueError(f"init: {', '.join(map(repr, unknown))} not latent site(s) of the model; its latent sites are: {', '.join(sites)}")
    for name, value in given.items():
        if tuple(value.shape) != tuple(sites[name].shape):
            raise ValueError(f"init[{name!r}] has shape {tuple(value.shape)}; the site has shape {tuple(sites[name].shape)}")
        if not np.all(np.isfinite(value)):
            raise ValueError(f"init[{name!r}] has non-finite values (nan or inf): start values must be finite")
        big = float(np.max(np.abs(value), initial=0.0))
        if big > _FLOAT32_MAX:  # finite in float64, inf once the fit casts it to float32
            raise ValueError(
                f"init[{name!r}] holds {big:.3g}, beyond float32's range (±3.4e38) the fit computes in: give a smaller start value"
            )
    supports = _supports(model, x, y)
    out = {}
    for name, value in given.items():
        support = supports[name]
        v = jnp.asarray(value, jnp.float32)
        if not bool(jnp.all(support(v))):
            raise ValueError(f"init[{name!r}] has values outside the site's support ({support}): e.g. scales must be > 0")
        u = biject_to(support).inv(v)
        if not bool(jnp.all(jnp.isfinite(u))):
            raise ValueError(f"init[{name!r}] lies on the edge of the site's support ({support}): move it inside")
        out[name] = u
    return out


def _supports(model: Callable, x, y) -> dict:
    """Site → support from one concrete trace on one row (latent values drawn from the prior:
    the given ones may be invalid, which is what is checked)."""
    substituted = handlers.substitute(handlers.seed(model, 0), substitute_fn=improper_as_zeros)
    trace = handlers.trace(substituted).get_trace(*(jnp.asarray(a) for a in probe_rows(model, x, y)))
    return {k: s["fn"].support for k, s in trace.items() if s["type"] == "sample" and not s["is_observed"]}


def apply_start(position: dict, start: dict | None) -> dict:
    """``position`` (site → unconstrained value, as a method starts) with the given sites replaced
    by ``start`` (:func:`start_position`); ``position`` itself when ``start`` is ``None``. Inside
    ``jit``: the values are constants of the program."""
    if not start:
        return position
    return {**position, **{k: jnp.asarray(v, jnp.result_type(position[k])) for k, v in start.items() if k in position}}


def digest(start: dict) -> str:
    """A short content hash of start values (recorded in the run and the checkpoint fingerprint)."""
    h = hashlib.sha256()
    for name in sorted(start):
        a = np.asarray(start[name], np.float32)
        h.update(name.encode())
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return "sha256:" + h.hexdigest()[:16]
