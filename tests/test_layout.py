"""The package's layering: no import circle between opbisect's modules, counting the imports made inside
functions (they hide a circle from Python, not from a reader)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

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


DATA = {"words", "errors", "ir", "record", "settings", "digests"}
GLUE = {"tfcompat", "targets", "trace", "capture", "kernels", "replay", "patches"}  # TensorFlow, the user's script
GRAPHDEF = {"tfcompat", "targets", "trace"}  # the GraphDef room's floor: what a step and its trace are
# What each floor may import besides itself, bottom up: the data (ids, the op-type table, the record), the pure
# decisions (analysis: no TensorFlow), the views (report), the TensorFlow glue, the execution, the commands.
LAYERS = {
    "words": set(), "errors": set(), "digests": set(), "settings": {"errors"}, "ir": {"errors", "words"},
    "record": {"errors", "ir", "words"},
    "analysis": DATA | {"patches"},  # patches.registry: which op types have a patch or a switch (a table)
    "report": DATA | {"analysis"},
    **{glue: DATA | GLUE | {"graphdef"} for glue in GLUE - GRAPHDEF}, **{glue: DATA | GRAPHDEF for glue in GRAPHDEF},
    "graphdef": DATA | GRAPHDEF,  # below capture, patches and replay, which change a step's GraphDef
    "execute": DATA | GLUE | {"analysis", "graphdef"},
}
COMMANDS = {"session", "verify", "fix", "patched_run", "deterministic", "cli", "__main__", "opbisect"}


def _floor(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_each_floor_imports_only_the_floors_below_it():
    graph = import_graph()
    floors = {_floor(m) for m in graph.nodes}
    assert floors - COMMANDS <= set(LAYERS), f"a package with no floor: {sorted(floors - COMMANDS - set(LAYERS))}"
    wrong = sorted((m, n) for m, n in graph.edges if _floor(m) in LAYERS and _floor(n) != _floor(m)
                   and _floor(n) not in LAYERS[_floor(m)])
    assert wrong == []
    tables = {n for m, n in graph.edges if _floor(m) == "analysis" and _floor(n) == "patches"}
    assert tables <= {"opbisect.patches.registry"}  # the table, none of the patches (they build TensorFlow ops)


def test_the_pure_floors_import_no_tensorflow():
    """analysis/, record/, ir/ and report/ decide and show from records: a saved record is re-rendered, and every
    decision tested, without TensorFlow."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if _floor(_module(path)) in ("analysis", "record", "ir", "report", "words", "errors", "settings", "digests"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                found += [(path.name, n) for n in names if n.split(".")[0] in ("tensorflow", "keras", "tf_keras")
                          or n.endswith("tfcompat")]
    assert found == []


def _functions(path: Path):
    """(name, lines, parameters) of every function in `path`; `self`/`cls` and `*`/`**` catch-alls count as one."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
            if params and params[0].arg in ("self", "cls"):
                params = params[1:]
            yield node.name, node.end_lineno - node.lineno + 1, len(params)


def _oversized(package: Path, max_lines: int = 40, max_params: int = 6) -> list[str]:
    return sorted(f"{path.relative_to(package.parent)}:{name} ({lines} lines, {params} parameters)"
                  for path in package.rglob("*.py") for name, lines, params in _functions(path)
                  if lines > max_lines or params > max_params)


def test_functions_stay_short_with_few_parameters():
    """A function a reader takes in at once: at most 40 lines (docstring included), at most 6 parameters; where
    more are needed, a dataclass names what travels together."""
    assert _oversized(PACKAGE) == []


def test_a_long_function_and_a_wide_one_are_found(tmp_path):
    package = tmp_path / "opbisect"
    package.mkdir()
    long_body = "".join(f"    x{i} = {i}\n" for i in range(41))
    (package / "a.py").write_text(f"def long():\n{long_body}\n\ndef wide(self, a, b, c, d, e, f, g):\n    pass\n"
                                  f"\n\nclass C:\n    def fine(self, a, b, c, d, e, f):\n        pass\n")
    assert _oversized(package) == ["opbisect/a.py:long (42 lines, 0 parameters)",
                                   "opbisect/a.py:wide (2 lines, 7 parameters)"]


def test_a_test_that_starts_a_process_through_a_helper_is_in_the_end_to_end_tier(tmp_path):
    from tiers import starts_a_process

    planted = tmp_path / "test_planted.py"
    planted.write_text("def _trace(s):\n    return cli('trace', s)\n\n\n"
                       "def _twice(s):\n    return [_trace(s), _trace(s)]\n\n\n"
                       "def test_far(tmp_path):\n    _twice('x.py')\n\n\n"
                       "def test_child():\n    subprocess.run(['python'])\n\n\n"
                       "def test_pure():\n    assert sum([1]) == 1\n\n\n"
                       "def rounds(tmp_path):\n    return main(['fix', 's.py'])\n\n\n"
                       "def test_fixture(rounds):\n    assert rounds == 0\n\n\n"
                       "def test_fresh_check(capsys):\n    run_main(capsys, 'trace', 's.py')\n\n\n"
                       "def test_in_process(capsys):\n    run_main(capsys, 'trace', 's.py', '--no-fresh-check')\n")
    tests = ("test_far", "test_child", "test_pure", "test_fixture", "test_fresh_check", "test_in_process")
    assert [starts_a_process(planted, t) for t in tests] == [True, True, False, True, True, False]


def _text_lines(root: Path) -> dict[str, int]:
    """Lines of each tracked text file (a file holding a NUL byte is binary: no lines)."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    counts = {}
    for name in filter(None, names.decode().split("\0")):
        path = root / name
        data = path.read_bytes() if path.is_file() else b""
        counts[name] = 0 if b"\0" in data else data.count(b"\n")
    return counts


def test_the_reports_are_at_most_a_quarter_of_the_tracked_lines():
    """The repository is the product: generated reports are a small gallery, the campaigns' outputs in history."""
    root = PACKAGE.parent
    if not (root / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    lines = _text_lines(root)
    reports = sum(n for name, n in lines.items() if name.startswith("reports/"))
    assert reports <= sum(lines.values()) / 4, f"reports/: {reports} of {sum(lines.values())} tracked lines"
