"""Which ops to replace: the sources of a report's CSV, op types, or op names (`--patch`, `deterministic()`).

A spec is a path to a report's `sources.csv` (or its report folder), or a comma-separated list whose items are op
types (every op of the type is replaced) or op ids as the CSV spells them (`region::name` inside a body).
A CSV source that is not an op's own variation (an unseeded random op, an input, state not restored, the order
of a sum across processes) has no patch: it is listed with its kind, for the report to say what to do instead.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..errors import UsageError
from ..ir.ids import split_op_id
from ..ir.optypes import KIND_REMEDIES
from .registry import PATCHES

CSV_NAME = "sources.csv"


@dataclasses.dataclass
class Choice:
    spec: str
    ops: list[str]  # op ids to replace, in the step's graph
    unmatched: list[str]  # op ids named that the step does not have
    not_ops: dict[str, str]  # op id -> kind, CSV sources no replacement can fix

    def by_region(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for op in self.ops:
            region, name = split_op_id(op)
            out.setdefault(region, []).append(name)
        return out


def _csv_path(spec: str) -> Path | None:
    path = Path(spec)
    if path.is_dir() and (path / CSV_NAME).is_file():
        return path / CSV_NAME
    if path.suffix == ".csv":
        if not path.is_file():
            raise UsageError(f"--patch {spec}: no such file")
        return path
    return None


def _read_csv(path: Path) -> tuple[list[str], dict[str, str]]:
    import pandas as pd

    try:
        rows = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--patch {path}: not a report's CSV ({exc})") from None
    if not {"op_name", "kind"} <= set(rows.columns):
        raise UsageError(f"--patch {path}: not a report's CSV (no op_name and kind columns)")
    fixable = [r.kind not in KIND_REMEDIES for r in rows.itertuples()]  # an op's or a write's own variation
    ops = [r.op_name for r, ok in zip(rows.itertuples(), fixable) if ok]
    others = {r.op_name: r.kind for r, ok in zip(rows.itertuples(), fixable) if not ok}
    return ops, others


def choose(graph, spec: str) -> Choice:
    """The ops of `graph` (an OpGraph) that `spec` names."""
    path = _csv_path(spec)
    if path is not None:
        names, others = _read_csv(path)
        types: list[str] = []
    else:
        items = [s.strip() for s in spec.split(",") if s.strip()]
        if not items:
            raise UsageError("--patch names nothing")
        types = [s for s in items if s not in graph.g and s in PATCHES]
        names, others = [s for s in items if s not in types], {}
    ops = [n for n in names if n in graph.g]
    ops += [op for op in graph.g if graph.op_type(op) in types and op not in ops and "@" not in op]
    return Choice(spec=spec, ops=ops, unmatched=[n for n in names if n not in graph.g], not_ops=others)
