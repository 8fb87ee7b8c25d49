"""The one row builder: a source op found by compare() becomes a `Source`, the CSV's row and the record's."""

from __future__ import annotations

import collections
import dataclasses
import functools
import re

from ..ir.graph import OpGraph
from ..ir.ids import split_op_id
from ..ir.optypes import KIND_REMEDIES
from ..patches.registry import has_rewrite, remedy, switch_of
from ..record.model import Finding, Magnitude, Replay, Source
from .compare import SourceOp


@dataclasses.dataclass(frozen=True)
class Seen:
    """Where a source was first named: the step, across what ("runs" or "processes"), and over how many."""

    first_step: int
    across: str
    runs: int


def source_row(graph: OpGraph, found: SourceOp | None, seen: Seen, *, op: str | None = None,
               kind: str | None = None) -> Source:
    """A row for `found` (or for `op` where nothing was compared: a reorder that changed no value)."""
    op = found.op if found else op
    kind = kind or found.kind
    op_type = graph.op_type(op)
    return Source(
        rank=0, op_name=op, op_type=op_type, kind=kind, first_step=seen.first_step, seen_across=seen.across,
        region=graph.region_of(op), iteration=found.iteration if found else None,
        runs_differing=found.runs_differing if found else 0, runs=seen.runs,
        distinct_values=found.distinct_values if found else 1,
        downstream_differing=found.downstream_differing if found else 0,
        affects_result=bool(found and found.affects_result),
        max_abs_diff=None, max_ulp_diff=None, frac_elements_differing=None, observer_effect=False,
        source_location=graph.site(op) or graph.attrs(op).get("library_site", ""),
        known_remedy=remedy(op_type, kind), position=graph.position[op],
        tensors=list(found.tensors) if found else [],
        replica=replica_of(graph, op), device=device_of(graph, op),
    )


def with_evidence(row: Source, magnitude: Magnitude | None, replay: Replay | None) -> Source:
    """`row` with what the magnitude pass measured and what its reproducer showed when replayed alone."""
    return dataclasses.replace(
        row, max_abs_diff=magnitude.max_abs_diff if magnitude else None,
        max_ulp_diff=magnitude.max_ulp_diff if magnitude else None,
        frac_elements_differing=magnitude.frac_elements_differing if magnitude else None,
        replay_distinct=replay.distinct if replay and replay.runs else None,
        replay_runs=replay.runs if replay and replay.runs else None, replay_note=replay.note if replay else "")


_REPLICA = re.compile(r"(?:^|/)replica_(\d+)/")


@functools.lru_cache(maxsize=2)  # the graph of the step being reported
def _replica_devices(graph: OpGraph) -> dict[str, int]:
    """Device -> replica under tf.distribute. MirroredStrategy names replica k's ops (k > 0) `.../replica_k/...`
    and places them on its k-th device; replica 0's ops carry no mark (and Keras renumbers their layer scopes), so
    replica 0 is the one device of the same kind that no marked op uses."""
    votes: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for op in graph.g:
        found, device = _REPLICA.search(split_op_id(op)[1]), device_of(graph, op)
        if found and device:
            votes[int(found.group(1))][device] += 1
    devices = {count.most_common(1)[0][0]: k for k, count in votes.items()}
    kinds = {d.split(":")[0] for d in devices}
    unmarked = {device_of(graph, op) for op in graph.g} - set(devices) - {""}
    first = [d for d in unmarked if d.split(":")[0] in kinds]
    if devices and len(first) == 1:
        devices[first[0]] = 0
    return devices


def replica_count(graph: OpGraph) -> int:
    """How many replicas the step runs in under tf.distribute (1 without a strategy, or with one device)."""
    marked = [int(found.group(1)) for op in graph.g if (found := _REPLICA.search(split_op_id(op)[1]))]
    return max(marked, default=0) + 1


def replica_of(graph: OpGraph, op: str) -> int | None:
    """The replica an op ran in under tf.distribute (its device's, for the per-device updates of mirrored
    variables too), or None: no strategy, or a device no replica runs on."""
    found = _REPLICA.search(split_op_id(op)[1])
    if found:
        return int(found.group(1))
    return _replica_devices(graph).get(device_of(graph, op))


def device_of(graph: OpGraph, op: str) -> str:
    """'/job:localhost/replica:0/task:0/device:GPU:1' -> 'GPU:1'; "" where the graph places nothing."""
    device = graph.attrs(op).get("device", "") if op in graph.g else ""
    return device.rsplit("device:", 1)[-1] if device else ""


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
                row = source_row(graph, s, Seen(step, "runs", runs))
                row = dataclasses.replace(row, observer_effect=s.affects_result and not plain_varies)
                rows.append(with_evidence(row, magnitudes.get(s.op), replays.get(s.op)))
    return rows


def patchable(s: Source) -> bool:
    """An op's own variation (a patch may replace it), as opposed to a kind no patch fixes (a seed's, an input's)."""
    return s.kind not in KIND_REMEDIES


def replaceable(s: Source) -> bool:
    """An op's own variation that opbisect's patch or a family switch replaces (`fix`'s next round applies it).
    Another (a numpy_function's Python code) keeps its own remedy: no round or patch changes it."""
    return patchable(s) and (has_rewrite(s.op_type) or bool(switch_of(s.op_type)))


def spreads_behind(s: Source) -> bool:
    """A source with a fix whose difference reaches other ops: a source behind it cannot show until it is fixed
    (`opbisect fix`'s next round applies the fix; the trace's note says how to look behind it)."""
    return replaceable(s) and s.downstream_differing > 0


_HIDDEN = "cannot show here"  # the note's mark: a child's record carries one that names its temporary folder


def hidden_behind(findings: list[Finding], sources: list[Source], script: str, patches: str,
                  switches_on: list[str] = ()) -> list[Finding]:
    """`findings` and a note on what the sources may hide. A source is an op that varies on identical inputs, so
    an op after one whose difference spreads is never named, even if it varies by itself too (on the H200 the LM
    head's cross-entropy hid two BiasAddGrads and Adam's segment sums). Where a source that a patch or a family
    switch fixes reaches other ops, the note says how to look behind it: `patches`, what the next trace replaces
    (this report's CSV, after what this trace already replaced), under the family switches that the sources with no
    rewrite need and those `switches_on` (already set for this trace; ResNet50's MaxPoolGrad hid its first
    BiasAddGrad, and a trace without TF_CUDNN_DETERMINISTIC names it again). A note already there, from a child
    process's record (of --processes, --workers or --replicas), is replaced."""
    findings = [f for f in findings if _HIDDEN not in f.message]
    spreading = [s for s in sources if spreads_behind(s)]
    if not spreading:
        return findings
    first, more = spreading[0], len(spreading) - 1
    also = f" (as do ops after {more} more source(s) with a fix)" if more else ""
    needed = {switch_of(s.op_type) for s in spreading if not has_rewrite(s.op_type)}
    env = "".join(f"{name}=1 " for name in sorted(needed | set(switches_on)))
    return findings + [Finding("note", f"{first.downstream_differing} op(s) after {first.op_name} differ because it "
                                       f"does{also}, so a source among them {_HIDDEN}: `{env}opbisect trace "
                                       f"{script} --patch {patches}` traces the step with those sources fixed and "
                                       f"names what they hid")]
