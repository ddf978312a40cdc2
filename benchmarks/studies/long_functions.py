"""Functions in bnnpp/ whose body (docstring included) is over 80 lines (issue 37):
``python benchmarks/studies/long_functions.py [folder]``, longest first."""

from __future__ import annotations

import ast
import pathlib
import sys


def long_functions(root: pathlib.Path, limit: int = 80) -> list[tuple[int, str, str]]:
    """``(lines, path:line, name)`` of every function whose body, docstring included, is over ``limit`` lines."""
    rows = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.body[0].lineno + 1
                if lines > limit:
                    rows.append((lines, f"{path}:{node.lineno}", node.name))
    return sorted(rows, reverse=True)


if __name__ == "__main__":
    for lines, where, name in long_functions(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "bnnpp")):
        print(f"{lines:4d}  {where}  {name}")
