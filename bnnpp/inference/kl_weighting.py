"""The KL weight of each minibatch of an epoch in Bayes by Backprop (:mod:`bnnpp.inference.bbb`):
uniform 1/M, or Blundell et al.'s halving weights."""

from __future__ import annotations

import numpy as np

__all__ = ["blundell_weights", "kl_weights"]


def blundell_weights(num_batches: int) -> np.ndarray:
    """π_i = 2^(M−i) / (2^M − 1) for i = 1..M (Blundell et al. 2015, eq. 9), computed as
    2^(−i) / (1 − 2^(−M)) so that large M does not overflow.

    Returns:
        float64 array ``(M,)`` that sums to 1 and halves from one minibatch to the next.
    """
    i = np.arange(1, num_batches + 1, dtype=np.float64)
    return np.exp2(-i) / -np.expm1(-num_batches * np.log(2.0))


def kl_weights(num_batches: int, scheme: str) -> np.ndarray:
    """The KL weight π_i of each minibatch of an epoch, ``(M,)``: ``"uniform"`` 1/M or
    ``"blundell"`` (see :func:`blundell_weights`)."""
    if scheme == "uniform":
        return np.full(num_batches, 1.0 / num_batches)
    return blundell_weights(num_batches)
