"""Shared fixtures.

Rank promotion is left at JAX's default: NumPyro's distributions rely on it internally, so
``jax_numpy_rank_promotion="raise"`` breaks them; shape checks are explicit in the tests instead.
"""

from __future__ import annotations

import os

# The tests share a GPU with the `bnnpp` processes they start and with other jobs: allocate
# as needed instead of XLA's default 75% of the device at the first computation.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.monitoring  # noqa: E402
import pytest  # noqa: E402

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


def pytest_collection_modifyitems(config, items):
    """Skip the registry-wide cases of the BlackJAX samplers on a BlackJAX older than they
    need (the oldest-versions leg of .ci/run): those methods refuse it in one line instead,
    which tests/test_samplers.py checks."""
    from importlib.metadata import version

    from bnnpp.inference.checks import BLACKJAX_MIN  # not the samplers' modules: importing them registers them

    have = version("blackjax")
    if tuple(int(p) for p in have.split(".")[:2] if p.isdigit()) >= BLACKJAX_MIN:
        return
    skip = pytest.mark.skip(reason=f"blackjax {have} < {'.'.join(map(str, BLACKJAX_MIN))}: mclmc, chees and pathfinder need a newer one")
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("method") in ("mclmc", "chees", "pathfinder") or any(m in item.name for m in ("mclmc", "chees", "pathfinder")):
            item.add_marker(skip)
