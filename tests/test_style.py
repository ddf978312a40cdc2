"""The linter and the formatter on bnnpp/, with pyproject.toml's [tool.ruff] settings."""

from __future__ import annotations

import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _ruff(*args: str) -> subprocess.CompletedProcess:
    pytest.importorskip("ruff", reason="ruff is not installed (pip install -e .[test])")
    from ruff.__main__ import find_ruff_bin

    return subprocess.run([find_ruff_bin(), *args, "--no-cache", "bnnpp"], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check():
    proc = _ruff("check")
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_ruff_format():
    proc = _ruff("format", "--check")
    assert proc.returncode == 0, proc.stdout[-3000:]
