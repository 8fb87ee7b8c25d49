"""Which ops to replace: the sources of a report's CSV, op types, or op names (`--patch`, `deterministic()`).

A spec is a comma-separated list whose items are paths to a report's `sources.csv` (or its report folder), op
types (every op of the type is replaced) or op ids as the CSV spells them (`region::name` inside a body).
A CSV source that is not an op's own variation (an unseeded random op, an input, state not restored, the order
of a sum across processes) has no patch: it is listed with its kind, for the report to say what to do instead.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ..errors import UsageError
from ..ir.ids import split_op_id
from ..ir.optypes import KIND_REMEDIES
from .registry import PATCHES

CSV_NAME = "sources.csv"
FIX_CSV_NAME = "patch.csv"  # `opbisect fix`: every op patched, with the round that found it


@dataclasses.dataclass
class Choice:
    spec: str
    ops: list[str]  # op ids to replace, in the step's graph
    unmatched: list[str]  # op ids named that the step does not have
    renamed: dict[str, str] = dataclasses.field(default_factory=dict)  # named -> the step's op, scopes renumbered
    not_ops: dict[str, str] = dataclasses.field(default_factory=dict)  # CSV sources no patch fixes -> their kind
    through_step: int = 1  # the latest step (1-based) at which a CSV's source first differed

    def by_region(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for op in self.ops:
            region, name = split_op_id(op)
            out.setdefault(region, []).append(name)
        return out


def _csv_path(spec: str) -> Path | None:
    """The CSV an item of a spec names: a report's or a fix's folder, any file (read as a CSV: another kind of file
    is refused before anything runs), or a `.csv` that is missing (refused); None for an op type or an op id."""
    path = Path(spec)
    if path.is_dir():
        for name in (CSV_NAME, FIX_CSV_NAME):  # a trace's report folder, or a fix's
            if (path / name).is_file():
                return path / name
        raise UsageError(f"--patch {spec}: a folder with no {CSV_NAME} or {FIX_CSV_NAME} (not a report's folder)")
    if path.is_file():
        return path
    if path.suffix == ".csv":
        raise UsageError(f"--patch {spec}: no such file")
    return None


def csv_paths(spec: str) -> list[Path]:
    """The CSVs a spec's items name (a report's or a fix's folder: the CSV in it); its op types and ids left out."""
    return [p for p in (_csv_path(item.strip()) for item in spec.split(",") if item.strip()) if p is not None]


def _read_csv(path: Path) -> tuple[list[str], dict[str, str], int]:
    import pandas as pd

    try:
        rows = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as exc:  # UnicodeDecodeError (a binary file) is a ValueError
        raise UsageError(f"--patch {path}: not a report's CSV ({str(exc).splitlines()[0][:200]})") from None
    if not {"op_name", "kind"} <= set(rows.columns):
        raise UsageError(f"--patch {path}: not a report's CSV (no op_name and kind columns)")
    fixable = [r.kind not in KIND_REMEDIES for r in rows.itertuples()]  # an op's or a write's own variation
    ops = [r.op_name for r, ok in zip(rows.itertuples(), fixable) if ok]
    others = {r.op_name: r.kind for r, ok in zip(rows.itertuples(), fixable) if not ok}
    steps = pd.to_numeric(rows.get("first_step", pd.Series(dtype=str)), errors="coerce").dropna()
    return ops, others, int(steps.max()) if len(steps) else 1


@dataclasses.dataclass
class Named:
    """What a spec names, read before any step is traced: the ops its CSVs name, the CSV sources no patch fixes,
    and the items given directly (op types or op ids, told apart only against a step's graph)."""

    ops: list[str]
    not_ops: dict[str, str]
    other_items: list[str]
    through_step: int


def read_spec(spec: str) -> Named:
    """Every CSV or report folder `spec` names, read (a missing or foreign one is a usage error), and its other
    items."""
    items = [s.strip() for s in spec.split(",") if s.strip()]
    if not items:
        raise UsageError("--patch names nothing")
    named = Named([], {}, [], 1)
    for item in items:
        path = _csv_path(item)
        if path is None:
            named.other_items.append(item)
            continue
        ops, kinds, step = _read_csv(path)
        named.ops += [op for op in ops if op not in named.ops]
        named.not_ops.update(kinds)
        named.through_step = max(named.through_step, step)
    return named


def choose(graph, spec: str) -> Choice:
    """The ops of `graph` (an OpGraph) that `spec` names: comma-separated CSVs (or report folders), op types and
    op ids, in any mix (a second report, made with `trace --patch`, adds to the first)."""
    named = read_spec(spec)
    types = [item for item in named.other_items if item not in graph.g and item in PATCHES]
    names = list(dict.fromkeys(named.ops + [item for item in named.other_items if item not in types]))
    others = named.not_ops
    everything = names + [n for n in others if n not in names]  # every source named must be an op of this step
    renamed = _renumbered(graph, [n for n in everything if n not in graph.g])
    ops = [renamed.get(n, n) for n in names if n in graph.g or n in renamed]
    ops += [op for op in graph.g if graph.op_type(op) in types and op not in ops]
    return Choice(spec=spec, ops=ops, unmatched=[n for n in everything if n not in graph.g and n not in renamed],
                  renamed=renamed, not_ops=others, through_step=named.through_step)


def _loose(op: str) -> str:
    """An op id with the numbers Keras and TensorFlow append to scope names dropped (`sgd_1/x` -> `sgd/x`; Keras 3
    appends one more within a train step: `sequential_4_1/dense_1/x` -> `sequential/dense/x`); the op's own last
    name stays, since it is unique within its scope."""
    parts = re.split(r"(/|::)", op)
    return "".join(re.sub(r"(_\d+)+$", "", p) for p in parts[:-1]) + parts[-1]


def _renumbered(graph, missing: list[str]) -> dict[str, str]:
    """The step's op for each missing name whose scopes were only renumbered (a model built twice in one process,
    another model built first): only where exactly one op of the step matches."""
    if not missing:
        return {}
    index: dict[str, list[str]] = {}
    for op in graph.g:
        index.setdefault(_loose(op), []).append(op)
    found = {n: index.get(_loose(n), []) for n in missing}
    return {n: ops[0] for n, ops in found.items() if len(ops) == 1}


def through_step(spec: str) -> int:
    """The latest step at which a source of the spec's CSVs first differed (1 without a CSV), read before any
    trace."""
    return read_spec(spec).through_step
