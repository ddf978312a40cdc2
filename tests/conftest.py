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


@pytest.fixture(autouse=True)
def _reference_cache(tmp_path_factory, monkeypatch):
    """``bnnpp compare --reference`` caches its reference fit under ``$BNNPP_CACHE_DIR``: the
    tests' go to a temporary folder, never to the user's ``~/.cache``."""
    monkeypatch.setenv("BNNPP_CACHE_DIR", str(tmp_path_factory.mktemp("bnnpp_cache")))


@pytest.fixture
def compile_counter():
    """Number of XLA backend compilations so far (call it before and after)."""
    return lambda: len(_COMPILES)


@pytest.fixture(scope="session")
def moons():
    import bnnpp

    return bnnpp.data.moons()


def pytest_collection_modifyitems(config, items):
    """Skip the cases parametrised with a ``method`` this environment cannot run (the registry's
    ``Method.unavailable``: mclmc and pathfinder below BlackJAX 1.4, the oldest-versions leg of
    .ci/run); those methods refuse it in one line instead, which tests/test_samplers.py checks.
    Tests that name such a method themselves carry their own skip mark."""
    from bnnpp.inference.registry import get_method, registered

    for item in items:
        method = getattr(getattr(item, "callspec", None), "params", {}).get("method")
        if isinstance(method, str) and method in registered():
            why = get_method(method).unavailable
            if why is not None:
                item.add_marker(pytest.mark.skip(reason=why))
