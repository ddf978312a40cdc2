"""Shared fixtures.

Rank promotion is left at JAX's default: NumPyro's distributions rely on it internally, so
``jax_numpy_rank_promotion="raise"`` breaks them; shape checks are explicit in the tests instead.
"""

from __future__ import annotations

import jax
import jax.monitoring
import pytest

_COMPILES: list[float] = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kw: _COMPILES.append(duration) if event == "/jax/core/compile/backend_compile_duration" else None
)


@pytest.fixture
def compile_counter():
    """Number of XLA backend compilations so far (call it before and after)."""
    return lambda: len(_COMPILES)


@pytest.fixture(scope="session")
def moons():
    import bnnpp

    return bnnpp.data.moons()
