"""The suite's tiers, as pytest markers (registered in pyproject.toml).

    e2e       the command line, a user's script or a child Python in a fresh process (found by reading the test:
              it, or a helper or fixture of its module it uses, calls `cli`, `opbisect` or `subprocess`, or runs
              `fix`, or `trace` with its fresh-process check, in this process)
    races     held to a live CPU race, retried until the oracle of fresh processes sees it (marked by hand)
    browser   opens a page in headless Chromium (marked by hand; skips where there is none)

The fast tier is everything else: `pytest -n 2 -m "not e2e and not races"` (README, Development; tests/run.sh runs
the tiers in turn, the races alone). Read, not listed by hand, so a new test that starts a process is end to end
without anyone remembering to say so.
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


COMMANDS = {"main", "run_main"}  # opbisect's command line, called in this process


def _words(call: ast.Call) -> set[str]:
    return {n.value for n in ast.walk(call) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _command_with_children(node: ast.AST) -> bool:
    """A command called in this process that starts children: `fix` (its rounds), `trace` with its fresh-process
    check (on by default)."""
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        if isinstance(call.func, ast.Name) and call.func.id in COMMANDS:
            words = _words(call)
            if "fix" in words or ("trace" in words and "--no-fresh-check" not in words):
                return True
    return False


def starts_a_process(path: Path, name: str) -> bool:
    """Whether the test `name` in `path`, or a module-level helper or fixture it uses (at any depth), starts a
    process."""
    functions, seen, todo = _functions(path), set(), [name]
    while todo:
        node = functions[todo.pop()]
        names = _names(node) | {a.arg for a in node.args.args}  # a fixture of the module is a parameter
        if names & STARTS_A_PROCESS or _command_with_children(node):
            return True
        todo += [n for n in names & set(functions) if n not in seen and not n.startswith("test")]
        seen.update(todo)
    return False


def mark(items: list) -> None:
    for item in items:
        name = getattr(item, "originalname", None) or item.name
        if name in _functions(Path(item.path)) and starts_a_process(Path(item.path), name):
            item.add_marker(pytest.mark.e2e)
