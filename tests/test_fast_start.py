"""`bnnpp --help` and `import bnnpp` load no JAX, NumPyro or ArviZ (the time it takes is measured
in benchmarks/quickstart.py); the lazily loaded names still resolve."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("jax", "numpyro", "arviz", "matplotlib", "scipy", "tensorflow_datasets")


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
        (
            "import contextlib, io, bnnpp.cli\nwith contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "    bnnpp.cli.main(['fit', '--help'])"
        ),
    ],
)
def test_start_up_loads_nothing_heavy(code):
    loaded = _modules_after(code)
    assert not any(loaded.values()), loaded


def test_command_help_snapshot_has_the_live_flags():
    """``bnnpp COMMAND --help`` prints a snapshot (bnnpp/cli/_help_text/); it must name the
    flags and choices the live parser has. Regenerate it with ``python -m bnnpp.cli._help_snapshot``."""
    import re

    from bnnpp.cli import COMMANDS
    from bnnpp.cli._help_snapshot import render
    from bnnpp.cli._help_text import HELP

    words = lambda text: set(re.findall(r"--[a-z][a-z0-9-]*|\{[^}]*\}", text))  # noqa: E731
    assert set(HELP) == set(COMMANDS)
    for name in COMMANDS:
        assert words(HELP[name]) == words(render(name)), f"{name}: run python -m bnnpp.cli._help_snapshot"


@pytest.mark.parametrize("given", [None, "true"])
def test_the_cli_does_not_preallocate_gpu_memory_unless_asked(given):
    """XLA takes 75% of a GPU at its first computation by default; the CLI turns that off
    before JAX starts, unless the user set XLA_PYTHON_CLIENT_PREALLOCATE."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "XLA_PYTHON_CLIENT_PREALLOCATE"}
    if given is not None:
        env["XLA_PYTHON_CLIENT_PREALLOCATE"] = given
    code = "import os, bnnpp.cli; print(os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'])"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == (given or "false")


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
