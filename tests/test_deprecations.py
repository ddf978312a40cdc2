"""The 0.1 shims (``bnnpp.inference.base``, ``bnnpp.inference._loop``, ``get_backend``) warn on
use and are no longer used inside bnnpp."""

import ast
import importlib
import pathlib
import sys

import pytest

import bnnpp
from bnnpp.inference import get_backend, get_method


def test_get_backend_warns_and_returns_the_method():
    with pytest.warns(DeprecationWarning, match="use bnnpp.inference.get_method"):
        assert get_backend("map") is get_method("map")


def test_loop_module_warns_on_import():
    sys.modules.pop("bnnpp.inference._loop", None)
    with pytest.warns(DeprecationWarning, match="_loop is deprecated"):
        importlib.import_module("bnnpp.inference._loop")


def test_no_module_of_bnnpp_uses_the_shims():
    root = pathlib.Path(bnnpp.__file__).parent
    shims = {root / "inference" / "base.py", root / "inference" / "_loop.py"}
    for path in root.rglob("*.py"):
        if path in shims:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not modules & {"bnnpp.inference.base", "bnnpp.inference._loop"}, path
        calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        calls |= {n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
        assert "get_backend" not in calls, path
