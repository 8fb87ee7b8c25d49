"""The one row builder: a source op found by compare() becomes a `Source`, the CSV's row and the record's."""

from __future__ import annotations

from ..ir.graph import OpGraph
from ..ir.optypes import remedy
from ..record.model import Magnitude, Replay, Source
from .compare import SourceOp


def source_row(graph: OpGraph, found: SourceOp | None, *, op: str | None = None, kind: str | None = None,
               first_step: int, seen_across: str, runs: int, magnitude: Magnitude | None = None,
               observer_effect: bool = False, replay: Replay | None = None) -> Source:
    """A row for `found` (or for `op` where nothing was compared: a reorder that changed no value)."""
    op = found.op if found else op
    kind = kind or found.kind
    op_type = graph.op_type(op)
    return Source(
        rank=0, op_name=op, op_type=op_type, kind=kind, first_step=first_step, seen_across=seen_across,
        region=graph.region_of(op), iteration=found.iteration if found else None,
        runs_differing=found.runs_differing if found else 0, runs=runs,
        distinct_values=found.distinct_values if found else 1,
        downstream_differing=found.downstream_differing if found else 0,
        affects_result=bool(found and found.affects_result),
        max_abs_diff=magnitude.max_abs_diff if magnitude else None,
        max_ulp_diff=magnitude.max_ulp_diff if magnitude else None,
        frac_elements_differing=magnitude.frac_elements_differing if magnitude else None,
        source_location=graph.site(op) or graph.attrs(op).get("library_site", ""),
        known_remedy=remedy(op_type, kind), observer_effect=observer_effect,
        position=graph.position[op], tensors=list(found.tensors) if found else [],
        replay_distinct=replay.distinct if replay and replay.runs else None,
        replay_runs=replay.runs if replay and replay.runs else None, replay_note=replay.note if replay else "",
    )


def in_process_rows(graph: OpGraph, per_step: list[tuple[int, list[SourceOp], dict[str, Magnitude],
                                                         dict[str, Replay]]], runs: int,
                    plain_varies: bool) -> list[Source]:
    """One row per source op, at the first step whose analysis names it. A source whose difference reaches the
    step's result while the uninstrumented step never varied is an observer effect."""
    rows, seen = [], set()
    for step, found, magnitudes, replays in per_step:
        for s in found:
            if s.op not in seen:
                seen.add(s.op)
                rows.append(source_row(graph, s, first_step=step, seen_across="runs", runs=runs,
                                       magnitude=magnitudes.get(s.op),
                                       observer_effect=s.affects_result and not plain_varies,
                                       replay=replays.get(s.op)))
    return rows
