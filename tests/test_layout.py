"""The package's layering: no import circle between opbisect's modules, counting the imports made inside
functions (they hide a circle from Python, not from a reader)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "opbisect"


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(name: str) -> bool:
    base = PACKAGE.parent / name.replace(".", "/")
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _imported(path: Path) -> set[str]:
    """The opbisect modules `path` imports anywhere in it."""
    here = _module(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("opbisect")}
        elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("opbisect")):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            names = [f"{target}.{a.name}" for a in node.names]
            modules = [n for n in names if _exists(n)]
            found |= set(modules) | ({target} if len(modules) < len(names) else set())
    return {m for m in found if m != here and _exists(m)}


def import_graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for path in PACKAGE.rglob("*.py"):
        graph.add_node(_module(path))
        graph.add_edges_from((_module(path), m) for m in _imported(path))
    return graph


def test_no_module_imports_one_that_imports_it_back():
    graph = import_graph()
    assert graph.number_of_nodes() > 50 and graph.number_of_edges() > 100  # the walk saw the package
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert circles == []


def test_a_planted_circle_is_found(tmp_path, monkeypatch):
    """The check finds a circle made only of imports inside functions."""
    package = tmp_path / "opbisect"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from .b import g\n")
    (package / "b.py").write_text("def g():\n    from . import a\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    graph = import_graph()
    assert [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1] == [["opbisect.a", "opbisect.b"]]


def test_the_ir_and_the_record_import_nothing_above_them():
    """ir/ (the graph and the op-type table) and record/ (what is stored) sit at the bottom: every other layer
    reads them, and they read only each other, the errors and the words."""
    graph = import_graph()
    allowed = ("opbisect.ir", "opbisect.record", "opbisect.errors", "opbisect.words")
    upward = sorted((m, n) for m, n in graph.edges if m.startswith(("opbisect.ir", "opbisect.record"))
                    and not n.startswith(allowed))
    assert upward == []
    assert ("opbisect.record.store", "opbisect.ir.graph") in graph.edges  # the walk saw these modules' imports
