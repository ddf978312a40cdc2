"""`bnnpp --help` and `import bnnpp` load no JAX, NumPyro or ArviZ (the time it takes is measured
in benchmarks/quickstart.py); the lazily loaded names still resolve."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("jax", "numpyro", "arviz", "matplotlib", "scipy")


def _modules_after(code: str) -> dict:
    script = code + "\nimport sys, json; print(json.dumps({m: m in sys.modules for m in " + repr(HEAVY) + "}))"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "code",
    [
        "import bnnpp",
        (
            "import contextlib, io, bnnpp.cli\nwith contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "    bnnpp.cli.main(['--help'])"
        ),
        (
            "import contextlib, io, bnnpp.cli\nwith contextlib.suppress(SystemExit), contextlib.redirect_stderr(io.StringIO()):\n"
            "    bnnpp.cli.main(['no-such-command'])"
        ),
    ],
)
def test_start_up_loads_nothing_heavy(code):
    loaded = _modules_after(code)
    assert not any(loaded.values()), loaded


def test_the_help_lists_every_command():
    from bnnpp.cli import COMMANDS

    proc = subprocess.run([sys.executable, "-m", "bnnpp", "--help"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    for name in COMMANDS:
        assert name in proc.stdout


def test_lazy_names_resolve():
    import bnnpp

    assert callable(bnnpp.fit) and callable(bnnpp.load) and "map" in bnnpp.registered()
    assert bnnpp.models.mlp is not None and bnnpp.Posterior.__name__ == "Posterior"
    assert set(bnnpp.__all__) <= set(dir(bnnpp))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        bnnpp.nope  # noqa: B018


def test_every_submodule_resolves_on_first_use():
    """``import bnnpp`` then ``bnnpp.diagnostics`` / ``bnnpp.inference`` / ``bnnpp.plots`` work
    as attribute access (benchmarks/uci.py uses bnnpp.inference.registered()), and a name that
    is no submodule still raises AttributeError."""
    code = ("import bnnpp; assert callable(bnnpp.diagnostics.loo); assert 'map' in bnnpp.inference.registered(); "
            "assert bnnpp.plots.__name__ == 'bnnpp.plots'\n"
            "try:\n    bnnpp.no_such_thing\nexcept AttributeError:\n    pass\nelse:\n    raise SystemExit(1)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
