"""One room, one job, kept so: no shipped class over 250 lines and no function over 60 (cli/,
labgate/, webhook/, rbac/; the benchmarks and the dev cluster are not shipped). A class or function
that grows past them is doing two jobs: split it by job rather than raising the bound."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SHIPPED = ("cli", "labgate", "webhook", "rbac")
MAX_CLASS_LINES = 250
MAX_FUNCTION_LINES = 60


def sizes() -> list[tuple[int, str, str]]:
    """(lines, "class" or "function", path:name) of every class and function shipped."""
    found = []
    for package in SHIPPED:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                    kind = "class" if isinstance(node, ast.ClassDef) else "function"
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    found.append((lines, kind, f"{path.relative_to(REPO)}:{node.name}"))
    return found


def test_no_shipped_class_or_function_does_two_jobs() -> None:
    found = sizes()
    assert len(found) > 500  # the walk found the code
    too_long = [
        (lines, where)
        for lines, kind, where in found
        if lines > (MAX_CLASS_LINES if kind == "class" else MAX_FUNCTION_LINES)
    ]
    assert too_long == []
