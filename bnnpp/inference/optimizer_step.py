"""One optimiser update, ``params ← params + opt.update(grads)``, with the gradients computed once.

XLA:CPU copies an elementwise producer into every fusion that consumes it. An optax optimiser
reads each gradient leaf several times — Adam's first moment, its second moment and, through
them, the update — so the elementwise tail of the backward pass (a prior's derivative, the
chain rule through σ = softplus(ρ), a transpose of the weight gradient) is recomputed in each
of those fusions, which on a Bayes-by-Backprop step of a wide dense network is a sizeable share
of the step's work.

:func:`apply_optimizer` runs the update inside a conditional whose two branches are the same
function: a conditional's operands are buffers, so the gradients are materialised once, and
the update reads them from memory. The predicate is a runtime scalar (the first parameter's
first element), so XLA cannot fold it away. Under ``vmap`` with batched parameters (an
ensemble's members, a sweep's grid points) the conditional becomes a ``select`` of two
identical branches, which XLA merges: the update is computed as without the conditional. The
values are those of ``opt.update`` followed by ``optax.apply_updates``, bit for bit.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

__all__ = ["apply_optimizer"]


def _runtime_scalar(params) -> jax.Array:
    leaves = [leaf for leaf in jax.tree_util.tree_leaves(params) if jnp.size(leaf)]
    return jnp.ravel(leaves[0])[0] if leaves else jnp.zeros(())


def apply_optimizer(opt: optax.GradientTransformation, grads: Any, opt_state: Any, params: Any) -> tuple[Any, Any]:
    """``opt``'s update of ``params`` by ``grads``, computed once (module docstring).

    Args:
        opt: an optax transformation.
        grads, params: pytrees of the same structure; opt_state: ``opt``'s state.

    Returns:
        ``(new_params, new_opt_state)``: ``optax.apply_updates(params, updates)`` and the
        optimiser's new state, as ``opt.update(grads, opt_state, params)`` gives them.
    """

    def update(g, state, p):
        updates, state = opt.update(g, state, p)
        return optax.apply_updates(p, updates), state

    return jax.lax.cond(_runtime_scalar(params) < 0, update, update, grads, opt_state, params)
