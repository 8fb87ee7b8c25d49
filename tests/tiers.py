"""The suite's tiers, as pytest markers (registered in pyproject.toml).

    e2e       the command line, a user's script or a child Python in a fresh process (found by reading the test:
              it, or a helper of its module it calls, calls `cli`, `opbisect` or `subprocess`), or marked so
    races     held to a live CPU race, retried until the oracle of fresh processes sees it (marked by hand)
    browser   opens a page in headless Chromium (marked by hand; skips where there is none)

The fast tier is everything else: `pytest -m "not e2e"` (README, Development). Read, not listed by hand, so a new
test that starts a process is end to end without anyone remembering to say so.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

STARTS_A_PROCESS = {"cli", "opbisect", "subprocess"}  # conftest.cli, test_fresh.opbisect, the module


@functools.cache
def _functions(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def starts_a_process(path: Path, name: str) -> bool:
    """Whether the test `name` in `path`, or a module-level helper it calls (at any depth), starts a process."""
    functions, seen, todo = _functions(path), set(), [name]
    while todo:
        names = _names(functions[todo.pop()])
        if names & STARTS_A_PROCESS:
            return True
        todo += [n for n in names & set(functions) if n not in seen and not n.startswith("test")]
        seen.update(todo)
    return False


def mark(items: list) -> None:
    for item in items:
        name = getattr(item, "originalname", None) or item.name
        if name in _functions(Path(item.path)) and starts_a_process(Path(item.path), name):
            item.add_marker(pytest.mark.e2e)
