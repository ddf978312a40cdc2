"""Flax modules (NNX first, and Linen) as Bayesian networks: :func:`from_flax`.

Every parameter of the module becomes a latent NumPyro site named by its module path
(``layers.0.kernel``, ``Dense_0.bias``, ``conv1.kernel`` …) with a bnnpp prior; the module's
output is observed exactly as in :func:`bnnpp.models.mlp` (``likelihood``, ``num_classes``,
``noise``). ``prior`` covers every parameter, ``priors`` maps module-path patterns
(:mod:`fnmatch` globs such as ``"*.kernel"`` or ``"layers.0.*"``; the first matching pattern
wins) to bnnpp priors or ``None``.

Hyperprior scopes, as with ``mlp``: ``per="layer"`` samples one scale per module owning the
parameters (``layers.0.scale`` shared by ``layers.0.kernel`` and ``layers.0.bias``);
``per="unit"`` one per entry of the parameters' last axis (the output units / filters);
``per="network"`` one ``network.scale`` for every parameter under that prior. When two
different hierarchical priors fall on the parameters of one module, each parameter gets its
own scale (``layers.0.kernel.scale``). A scale site never takes a parameter's name: a
LayerNorm or GroupNorm ``norm`` has a parameter ``norm.scale``, so its module's prior scale
is ``norm.prior.scale``.

Layers bnnpp recognises — a plain ``nnx.Linear`` / ``linen.Dense`` on ``(n, in)`` inputs and
a 2-D ``nnx.Conv`` / ``linen.Conv`` on NHWC images (with bias, "SAME"/"VALID" padding, no
dilation, no feature groups, called once per forward pass) — send the same layer message as
:func:`bnnpp.models.dense` / :func:`bnnpp.models.conv2d` (see :mod:`bnnpp.models.layers`), so
Bayes by Backprop answers them with its ``local`` / ``flipout`` estimators; every other
parameter is an ordinary sample site (the reparameterisation estimator).

Stateful layers:

* **Dropout is switched off** inside the model (``nnx.view(deterministic=True)`` for NNX; a
  ``linen.Dropout`` call returns its input): the posterior over weights is the randomness.
* **BatchNorm is refused** with a one-line ``ValueError``: its running statistics are state
  that a posterior over weights does not carry (use ``LayerNorm`` / ``GroupNorm``, whose
  scale and bias become ordinary latent sites).

``priors={pattern: None}`` means *no prior* on those parameters: an improper flat prior
(log-density 0) — MAP fits them by maximum likelihood; the sampling and variational methods
treat them as latents under that flat prior.

A saved posterior never pickles the module: its ``spec`` records the module's class and the
observation settings, and ``bnnpp.load(path, model=from_flax(MyModule(...), ...))`` rebuilds
it from the user's constructor.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpyro

from bnnpp.introspection import is_flax_module
from bnnpp.models._flax_parts import (
    _ACTIVE,
    _BATCHNORM,
    _NAMES,
    _NNX_SWAPS,
    _conv_settings,
    _dense_ok,
    _dims,
    _Forward,
    _free_scope,
    _Layer,
    _linen_dropout_off,
    _name,
    _nest,
    _nnx_swaps,
    _Param,
    _Plan,
)
from bnnpp.models.layers import CONV_DIMENSION_NUMBERS, _send
from bnnpp.models.mlp import check_observation, observe
from bnnpp.priors import Prior, flat, normal


class FlaxModel:
    """A Flax module made Bayesian; call it as a NumPyro model ``model(x, y=None, *, subsample_size=None)``.

    Sites: one per module parameter, named by its path (``layers.0.kernel`` …), shape as in
    the module; hyperprior scales ``<scope>.scale`` / ``<scope>.variance`` (module docstring);
    ``noise`` for a Gaussian likelihood with learned σ; deterministic ``logits`` / ``mean``;
    observed ``y`` ``(n,)`` inside ``numpyro.plate("data", n, subsample_size=...)``.
    Build one with :func:`from_flax`.
    """

    input_rank = None

    def __init__(self, module, api: str, likelihood: str, num_classes, noise, noise_scale, prior: Prior, priors: dict):
        self.module, self.api = module, api
        self.likelihood, self.num_classes, self.noise, self.noise_scale = likelihood, num_classes, noise, noise_scale
        self.prior, self.priors = prior, priors
        self._plans: dict = {}
        if api == "nnx":
            from flax import nnx

            self._graphdef, self._params, self._rest = nnx.split(module, nnx.Param, ...)
            self._shapes = {tuple(p): tuple(v.shape) for p, v in nnx.to_flat_state(self._params)}
            self._assign(self._shapes)  # bad patterns fail here, before any data is seen

    @property
    def task(self) -> str:
        """``"classification"`` or ``"regression"``."""
        return "regression" if self.likelihood == "gaussian" else "classification"

    # -- parameters and their priors ----------------------------------------------------

    def _linen_shapes(self, x) -> dict:
        import flax.linen as nn

        def init(key):
            with nn.intercept_methods(_linen_dropout_off):
                return self.module.init(key, jnp.zeros((1, *x.shape[1:]), x.dtype))

        variables = jax.eval_shape(init, jax.ShapeDtypeStruct((2,), jnp.uint32))
        extra = sorted(set(variables) - {"params"})
        if "batch_stats" in extra:
            raise ValueError(_BATCHNORM)
        if extra:
            raise ValueError(f"from_flax: the Linen module keeps state collections {extra}; only 'params' can be made Bayesian")
        flat = jax.tree_util.tree_flatten_with_path(variables["params"])[0]
        return {tuple(k.key for k in path): tuple(v.shape) for path, v in flat}

    def _assign(self, shapes: dict) -> dict[str, _Param]:
        """Match every parameter to its prior and hyperprior scope (module docstring)."""
        chosen, used = {}, set()
        for path in shapes:
            site = _name(path)
            prior = self.prior
            for pattern, p in self.priors.items():
                if fnmatch.fnmatchcase(site, pattern):
                    prior, _ = (flat() if p is None else p), used.add(pattern)
                    break
            chosen[path] = prior
        unused = [p for p in self.priors if p not in used]
        if unused:
            raise ValueError(f"from_flax: priors pattern(s) {unused} match no parameter; parameters are {[_name(p) for p in shapes]}")
        # priors are compared by identity: a sweep passes priors whose numbers are traced (unhashable)
        network = {id(p) for p in chosen.values() if p.hierarchical and p.per == "network"}
        if len(network) > 1:
            raise ValueError("from_flax: use one per='network' hyperprior at most (its scale is the single site network.scale)")
        groups: dict[str, set] = {}
        for path, p in chosen.items():
            if p.hierarchical and p.per != "network":
                groups.setdefault(_name(path[:-1]), set()).add((id(p), shapes[path][-1:] if p.per == "unit" else ()))
        out, dims = {}, {}
        names = {_name(path) for path in shapes}
        for path, shape in shapes.items():
            p, owner, site = chosen[path], _name(path[:-1]), _name(path)
            if p.per == "unit" and p.hierarchical and not shape:
                raise ValueError(f"from_flax: per='unit' needs parameters with a last axis; {site} is a scalar")
            scope = None
            if p.hierarchical:
                scope = "network" if p.per == "network" else (owner if owner and len(groups[owner]) == 1 else site)
                scope = _free_scope(scope, p, names)
            out[site] = _Param(site, path, shape, p, scope, _dims(owner, site, shape))
            for d, n in zip(out[site].dims, shape, strict=True):
                dims.setdefault(d, set()).add(n)
        clash = {d for d, sizes in dims.items() if len(sizes) > 1}
        for site, q in out.items():  # a module whose parameters disagree on axis sizes: per-site names
            if clash.intersection(q.dims):
                out[site] = _Param(q.site, q.path, q.shape, q.prior, q.scope, tuple(f"{site}_dim_{i}" for i in range(len(q.shape))))
        return out

    # -- planning: which layers bnnpp answers ------------------------------------------

    def _plan(self, x):
        key = (tuple(x.shape[1:]), str(x.dtype))
        if key not in self._plans:
            shapes = self._shapes if self.api == "nnx" else self._linen_shapes(x)
            params = self._assign(shapes)
            fwd = _Forward(self, {})
            zeros = {s: jnp.zeros(q.shape) for s, q in params.items()}
            jax.eval_shape(lambda a, z: self._run(a, z, params, fwd), jax.ShapeDtypeStruct((1, *x.shape[1:]), x.dtype), zeros)
            layers = {}
            for name, (kind, conv, ndim) in fwd.kinds.items():
                kernel, bias = f"{name}.kernel" if name else "kernel", f"{name}.bias" if name else "bias"
                if fwd.calls[name] == 1 and ndim == (2 if kind == "dense" else 4) and kernel in params and bias in params:
                    layers[name] = _Layer(name, kind, kernel, bias, params[bias].shape[0], conv or {})
            self._plans[key] = _Plan(params, layers)
        return self._plans[key]

    # -- the forward pass -------------------------------------------------------------

    def _run(self, x, values: dict, params: dict, fwd: _Forward):
        """The module's output at parameter ``values`` (site → array), recognised layers
        going through ``fwd``."""
        _ACTIVE.fwd = fwd
        try:
            if self.api == "nnx":
                return self._run_nnx(x, values, params)
            return self._run_linen(x, values, params)
        finally:
            _ACTIVE.fwd = None

    def _run_nnx(self, x, values, params):
        from flax import nnx

        state = jax.tree_util.tree_map(lambda a: a, self._params)  # a copy: the module is never mutated
        # a recognised layer's kernel and bias are sampled in its message: zeros stand in here
        nnx.replace_by_pure_dict(state, _nest({q.path: values[s] if s in values else jnp.zeros(q.shape) for s, q in params.items()}))
        module = nnx.merge(self._graphdef, state, self._rest)
        for path, sub in nnx.iter_modules(module):
            cls = _NNX_SWAPS.get(type(sub))
            if cls is not None:
                sub.__class__ = cls
                _NAMES[id(sub)] = _name(path)
        try:
            return module(x)
        finally:
            for _, sub in nnx.iter_modules(module):
                _NAMES.pop(id(sub), None)

    def _run_linen(self, x, values, params):
        import flax.linen as nn

        nested = _nest({q.path: values[s] for s, q in params.items() if s in values})  # a Linen layer never read needs none

        def intercept(next_fun, args, kwargs, context):
            mod = context.module
            if context.method_name == "__call__" and type(mod) in (nn.Dense, nn.Conv) and args:
                conv = _conv_settings(mod, len(mod.kernel_size) + 2) if type(mod) is nn.Conv else None
                if conv is not None or (type(mod) is nn.Dense and _dense_ok(mod)):
                    kind = "dense" if type(mod) is nn.Dense else "conv2d"
                    return _ACTIVE.fwd.layer(_name(mod.path), kind, conv, args[0], lambda: next_fun(*args, **kwargs))
            return _linen_dropout_off(next_fun, args, kwargs, context)

        with nn.intercept_methods(intercept):
            return self.module.apply({"params": nested}, x)

    def _layer_message(self, layer: _Layer, x, params: dict):
        """Send bnnpp's layer message for one recognised layer; by default it samples the
        layer's kernel and bias sites and returns ``x @ kernel + bias`` (or the convolution)."""
        pk, pb = params[layer.kernel], params[layer.bias]
        sk, sb = _ACTIVE.fwd.scale(pk), _ACTIVE.fwd.scale(pb)

        def default(name, x, units, prior, scale, **conv):
            w = pk.prior.sample(pk.site, pk.shape, sk, pk.dims)
            b = pb.prior.sample(pb.site, pb.shape, sb, pb.dims)
            if layer.kind == "dense":
                return x @ w + b
            return jax.lax.conv_general_dilated(x, w, conv["stride"], conv["padding"], dimension_numbers=CONV_DIMENSION_NUMBERS) + b

        extra = {"sites": (pk.site, pb.site), "bias_prior": (pb.prior, sb)}
        return _send(layer.kind, layer.name, default, (layer.name, x, layer.units, pk.prior, sk), dict(layer.conv), extra)

    def __call__(self, x: jnp.ndarray, y: jnp.ndarray | None = None, *, subsample_size: int | None = None):
        x = jnp.asarray(x)
        if x.ndim < 2:
            raise ValueError(f"from_flax models take inputs of shape (n, ...), got shape {x.shape}")
        plan = self._plan(x)
        data = numpyro.plate("data", x.shape[0], subsample_size=subsample_size)
        with data:
            h = numpyro.subsample(x, event_dim=x.ndim - 1)
        fwd = _Forward(self, plan.params, plan)
        values = {}
        layer_sites = {s for lay in plan.layers.values() for s in (lay.kernel, lay.bias)}
        for s, q in plan.params.items():
            if s not in layer_sites:
                values[s] = q.prior.sample(s, q.shape, fwd.scale(q), q.dims)
        out = self._run(h, values, plan.params, fwd)
        out = self._check_output(out, h.shape[0])
        observe(data, out, y, self.likelihood, self.noise, self.noise_scale)

    def _check_output(self, out, n: int):
        out = jnp.asarray(out)
        want = self.num_classes if self.likelihood == "categorical" else 1
        if out.ndim == 1 and want == 1:
            out = out[:, None]
        if out.shape != (n, want):
            raise ValueError(
                f"from_flax: the module returns shape {out.shape}, but likelihood={self.likelihood!r} needs "
                f"({n}, {want}) (one {'logit per class' if want > 1 else 'output'} per row)"
            )
        return out

    def spec(self) -> dict:
        """A JSON description (no pickle): module class and observation settings. A Flax
        module cannot be rebuilt from it: pass the model to :func:`bnnpp.load`."""
        cls = type(self.module)
        return {
            "type": "flax",
            "api": self.api,
            "module": f"{cls.__module__}.{cls.__qualname__}",
            "likelihood": self.likelihood,
            "num_classes": self.num_classes,
            "noise": self.noise,
            "noise_scale": self.noise_scale,
            "prior": self.prior.spec(),
            "priors": {k: (None if v is None else v.spec()) for k, v in self.priors.items()},
        }

    def __repr__(self) -> str:
        return f"from_flax({type(self.module).__name__} [{self.api}], likelihood={self.likelihood!r}, prior={self.prior})"


def from_flax(
    module,
    *,
    likelihood: str = "categorical",
    num_classes: int | None = None,
    noise: float | None = None,
    prior: Prior | None = None,
    priors: Mapping[str, Prior | None] | None = None,
    noise_scale: float = 1.0,
) -> FlaxModel:
    """A Flax module (``flax.nnx.Module`` or ``flax.linen.Module``) as a Bayesian network.

    Args:
        module: an NNX module instance (its parameters' shapes are read from it), a Linen
            module instance (its parameters are created by ``init`` on the first inputs'
            shape), or a zero-argument constructor returning one. The module maps inputs
            ``(n, ...)`` to outputs ``(n, num_classes)`` (categorical) or ``(n, 1)`` / ``(n,)``.
        likelihood, num_classes, noise, noise_scale: the observation model, as for
            :func:`bnnpp.models.mlp`.
        prior: the prior of every parameter (default ``priors.normal(1.0)``); hierarchical
            scales per layer / unit / network as described in the module docstring.
        priors: module-path pattern → prior, overriding ``prior`` where the pattern matches
            (``fnmatch`` globs on dotted paths such as ``"*.kernel"``, ``"layers.0.*"``; the
            first match wins; every pattern must match a parameter). ``None``: no prior (a
            flat prior; MAP fits the parameter by maximum likelihood).

    Returns:
        A :class:`FlaxModel`, callable as ``model(x, y=None, *, subsample_size=None)``.

    Raises:
        TypeError / ValueError: one line, for a module class instead of an instance,
        BatchNorm layers, bad priors or patterns, or bad observation settings.
    """
    if isinstance(module, type):
        raise TypeError(f"from_flax takes a module instance, e.g. from_flax({module.__name__}(...)), not the class")
    if not is_flax_module(module) and callable(module):
        module = module()
    if not is_flax_module(module):
        raise TypeError(f"from_flax takes a flax.nnx.Module or flax.linen.Module (or a constructor of one), got {type(module).__name__}")
    num_classes, noise, noise_scale = check_observation(likelihood, num_classes, noise, noise_scale, who="from_flax")
    prior = normal(1.0) if prior is None else prior
    if not isinstance(prior, Prior):
        raise TypeError(f"prior must be a bnnpp.priors.Prior such as priors.normal(1.0), got {prior!r}")
    priors = dict(priors or {})
    for pattern, p in priors.items():
        if not isinstance(pattern, str) or not (p is None or isinstance(p, Prior)):
            raise TypeError(
                f"priors maps module-path patterns to bnnpp priors or None, e.g. {{'*.bias': priors.normal(1.0)}}; got {pattern!r}: {p!r}"
            )
    import flax.linen as nn
    from flax import nnx

    if isinstance(module, nn.Module):
        api = "linen"
        if module.scope is not None:
            raise ValueError("from_flax takes an unbound Linen module (as constructed), not one bound to variables")
    else:
        api = "nnx"
        if any(isinstance(m, nnx.BatchNorm) for _, m in nnx.iter_modules(module)) or nnx.state(module, nnx.BatchStat):
            raise ValueError(_BATCHNORM)
        module = nnx.view(module, deterministic=True, raise_if_not_found=False)  # dropout off
        _nnx_swaps()
    return FlaxModel(module, api, likelihood, num_classes, noise, noise_scale, prior, priors)
