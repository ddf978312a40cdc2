"""The generalised Gauss–Newton curvature of bnnpp layers (``hessian="diag"`` / ``"kron"``):
each layer's inputs and output gradients captured inside the model (Martens 2020, eq. 27;
Martens & Grosse 2015, eq. 1; Grosse & Martens 2016, eq. 22).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from numpyro.primitives import Messenger

from bnnpp.inference.joint import latent_trace, log_likelihood
from bnnpp.inference.laplace.approximation import _KEY, _observation
from bnnpp.models.layers import CONV_DIMENSION_NUMBERS, LAYER_EFFECT

# --------------------------------------------------------------------------------------
# GGN curvature of bnnpp layers: inputs and output gradients captured inside the model
# --------------------------------------------------------------------------------------


class _Capture(Messenger):
    """Answer the messages of the layers in ``eps`` with their default (``x @ w + b`` or the
    convolution) plus ``eps[layer]`` (zeros: its gradient is the output gradient g), and
    record each layer's input (``inputs``) and output shape (``shapes``)."""

    def __init__(self, fn, eps: dict | None, names):
        super().__init__(fn)
        self.eps, self.names = eps, names
        self.inputs: dict = {}
        self.shapes: dict = {}

    def process_message(self, msg):
        if msg["type"] != LAYER_EFFECT or msg["value"] is not None or msg["layer"] not in self.names:
            return
        h = msg["fn"](*msg["args"], **msg["kwargs"])
        name = msg["layer"]
        self.inputs[name] = msg["args"][1]
        self.shapes[name] = jnp.shape(h)
        msg["value"] = h if self.eps is None else h + self.eps[name]


def _patches(x, layer: dict):
    """``(n, T, F + 1)``: the layer's inputs with a trailing 1 (bias), for a convolution its
    patches with features in the kernel's ``(kh, kw, in)`` order."""
    if layer["kind"] == "dense":
        a = x.reshape(x.shape[0], 1, x.shape[-1])
    else:
        kh, kw = layer["kernel_size"]
        p = jax.lax.conv_general_dilated_patches(
            x, (kh, kw), layer["stride"], layer["padding"], dimension_numbers=CONV_DIMENSION_NUMBERS
        )  # (n, h', w', in·kh·kw), features ordered (in, kh, kw)
        n, h, w, _ = p.shape
        a = p.reshape(n, h, w, x.shape[-1], kh, kw).transpose(0, 1, 2, 4, 5, 3).reshape(n, h * w, kh * kw * x.shape[-1])
    return jnp.concatenate([a, jnp.ones((*a.shape[:2], 1), a.dtype)], axis=-1)


def _lambda_sqrt(kind: str, f, sd):
    """Columns of a square root of Λ = −∂² log p(y | f) / ∂f², ``(K, n, *f.shape[1:])``:
    softmax: diag(√p) − p √pᵀ (Λ = diag(p) − p pᵀ); Bernoulli: √(p(1 − p)); Gaussian: 1/σ."""
    if kind == "categorical":
        p = jax.nn.softmax(f, axis=-1)
        r = jnp.sqrt(p)
        eye = jnp.eye(f.shape[-1], dtype=f.dtype)
        cols = r[:, None, :] * eye[None] - p[:, :, None] * r[:, None, :]  # (n, C out, C col)
        return jnp.moveaxis(cols, -1, 0)
    if kind == "bernoulli":
        p = jax.nn.sigmoid(f)
        return jnp.sqrt(p * (1 - p))[None]
    return (1.0 / sd)[None]


def _ggn(model, u, x, y, layers: dict, structure: str, batch: int):
    """The GGN of the layers' weights at ``u`` over ``(x, y)``, in batches of ``batch`` rows.

    Returns ``(curv, stats)``: ``curv`` layer → ``{"diag": (F+1, out)}`` or
    ``{"A": (F+1, F+1), "G": (out, out)}`` (module docstring); ``stats``: ``loglik`` (Σ log p(y
    | θ*)), ``ssr`` (Σ (y − f)², Gaussian) and ``n``."""
    names = tuple(layers)

    static = {}  # python facts of the trace: the likelihood's kind, the layers' output shapes

    def forward(xb, yb, eps):
        holder = {}

        def capture(m):
            holder["c"] = _Capture(m, eps, names)
            return holder["c"]

        trace = latent_trace(model, u, xb, yb, _KEY, extra_handlers=(capture,))
        kind, f, sd = _observation(trace)
        static["kind"], static["shapes"] = kind, holder["c"].shapes
        ssr = jnp.sum((yb - f) ** 2) if kind == "gaussian" else jnp.zeros(())
        return f, (holder["c"].inputs, sd, log_likelihood(trace), ssr)

    def shapes_for(rows):
        jax.eval_shape(lambda xb, yb: forward(xb, yb, None)[0], x[:rows], y[:rows])
        return dict(static["shapes"])

    def one_batch(xb, yb, shapes):
        eps0 = {k: jnp.zeros(s, x.dtype) for k, s in shapes.items()}
        f, vjp, (inputs, sd, ll, ssr) = jax.vjp(lambda e: forward(xb, yb, e), eps0, has_aux=True)
        cols = _lambda_sqrt(static["kind"], f, sd)
        grads = jax.vmap(lambda c: vjp(c)[0])(cols)  # layer → (K, B, *out_shape)
        acc = {}
        for name in names:
            a = _patches(inputs[name], layers[name])  # (B, T, F+1)
            g = grads[name].reshape(cols.shape[0], a.shape[0], a.shape[1], -1)  # (K, B, T, out)
            if structure == "kron":
                acc[name] = {"A": jnp.einsum("bti,btj->ij", a, a), "G": jnp.einsum("kbto,kbtp->op", g, g) / a.shape[1]}
            elif a.shape[1] == 1:  # dense: (a_i g_o)² = a_i² g_o², a (F+1, B) x (B, out) product
                acc[name] = {"diag": jnp.einsum("bi,bo->io", a[:, 0] ** 2, jnp.sum(g[:, :, 0] ** 2, axis=0))}
            else:  # per-example gradients of each column, squared
                acc[name] = {"diag": jnp.sum(jnp.einsum("bti,kbto->kbio", a, g) ** 2, axis=(0, 1))}
        return acc, ll, ssr

    n = x.shape[0]
    curv, ll, ssr = batched_sum(lambda xb, yb: one_batch(xb, yb, shapes_for(xb.shape[0])), (x, y), batch)
    if structure == "kron":
        curv = {k: {"A": v["A"] / n, "G": v["G"]} for k, v in curv.items()}
    return curv, {"loglik": ll, "ssr": ssr}


def batched_sum(fn, arrays: tuple, batch: int):
    """Σ over row batches of ``fn(*rows)``: the full batches of ``batch`` rows of every array in
    ``arrays`` (same leading length) by one ``lax.scan``, the remaining rows by one more call.
    Returns ``fn``'s pytree, summed."""
    n = arrays[0].shape[0]
    full, rest = divmod(n, batch)
    total = None
    if full:
        stacked = tuple(a[: full * batch].reshape(full, batch, *a.shape[1:]) for a in arrays)
        init = jax.tree_util.tree_map(jnp.zeros_like, jax.eval_shape(fn, *(a[0] for a in stacked)))
        total, _ = jax.lax.scan(lambda acc, rows: (jax.tree_util.tree_map(jnp.add, acc, fn(*rows)), None), init, stacked)
    if rest:
        last = fn(*(a[full * batch :] for a in arrays))
        total = last if total is None else jax.tree_util.tree_map(jnp.add, total, last)
    return total


def largest_hessian_eigenvalue(f, x: jax.Array, iterations: int, key: jax.Array | None = None) -> jax.Array:
    """|λ|max of the Hessian of the scalar ``f`` at the flat vector ``x`` ``(P,)``, by
    ``iterations`` steps of the power iteration on Hessian-vector products (forward over
    reverse mode; no Hessian is formed). Returns a scalar ``()``: ``|vᵀ H v|`` at the last
    iterate ``v``, a lower bound that converges to |λ|max."""
    grad = jax.grad(f)

    def hvp(v):
        return jax.jvp(grad, (x,), (v,))[1]

    def power(_, v):
        w = hvp(v)
        return w / jnp.maximum(jnp.linalg.norm(w), 1e-30)

    v0 = jax.random.normal(jax.random.PRNGKey(1) if key is None else key, x.shape, x.dtype)
    v = jax.lax.fori_loop(0, iterations, power, v0 / jnp.linalg.norm(v0))
    return jnp.abs(jnp.vdot(v, hvp(v)))
