"""Across processes: the records of P fresh processes, compared step by step and op by op.

What differs only between processes (cuDNN autotuning's choice, a graph traced in hash-seed-dependent order,
an unseeded initializer) is invisible to runs inside one process. The graphs are aligned by structure
(opbisect.analysis.align), then compared:
- the traced graphs: ops only one process has, ops that sum the same inputs in another order (kind `order`);
- the variables as the script created them, and every step's batch;
- the result after every step (the first step whose result differs between processes);
- op by op, for every step whose starting state agrees in all processes: an op that is deterministic inside every
  process but differs between processes while its aligned inputs agree is a source seen across processes.
Pure: records in, facts out.
"""

from __future__ import annotations

import dataclasses

from ..ir.graph import OpGraph
from ..ir.optypes import KIND_REMEDIES
from ..ir.unroll import unroll
from ..record.model import CrossProcess, Finding, Record, Source, Trajectory
from ..words import listed
from .align import Alignment, align
from .compare import compare
from .sources import Seen, source_row


def _first_runs_differ(trajectories: list[Trajectory], step: int) -> list[str] | None:
    """The variables whose value after `step` differs between the processes' first runs (None: none differ)."""
    afters = [t.after[0][step - 1] for t in trajectories]
    outputs = [t.outputs[0][step - 1] for t in trajectories]
    differ = sorted(k for k in afters[0] if any(a.get(k) != afters[0][k] for a in afters[1:]))
    return differ if differ or any(o != outputs[0] for o in outputs[1:]) else None


def _first_differing(per_step: list[list[str] | None]) -> int | None:
    return next((k for k, d in enumerate(per_step, 1) if d is not None), None)


def _graph_findings(alignments: list[Alignment]) -> list[Finding]:
    found = []
    for i, al in enumerate(alignments, 2):
        if al.only_a or al.only_b:
            shown = ", ".join((al.only_a + al.only_b)[:4])
            found.append(Finding("warning", f"the traced graphs differ between process 1 and {i}: "
                                            f"{len(al.only_a)} ops only in 1, {len(al.only_b)} only in {i} "
                                            f"({shown}); the step is built differently per process"))
    return found


def _input_findings(records: list[Record]) -> list[Finding]:
    found = []
    initial = [r.meta.initial_state for r in records]
    differing = sorted(k for k in initial[0] if any(s.get(k) != initial[0][k] for s in initial[1:] if k in s))
    if differing:
        shown = listed(differing)
        found.append(Finding("warning", f"{len(differing)} variable(s) start with different values in different "
                                        f"processes ({shown}): an unseeded initializer; call "
                                        f"keras.utils.set_random_seed(...) before building the model"))
    batches = [r.default.batches[0] for r in records]
    steps = [k + 1 for k in range(len(batches[0])) if any(b[k] != batches[0][k] for b in batches[1:])]
    if steps:
        found.append(Finding("warning", f"input: the batch of step {steps[0]} differs between processes: seed the "
                                        f"input pipeline (shuffle seeds, tf.random.set_seed)"))
    return found


def _synthetic_runs(records: list[Record], alignments: list[Alignment], step: int):
    """One 'run' per process for `step`: each process's first instrumented run, mapped onto process 1's taps. A
    tap missing in a process, or varying inside one, counts as differing (a value no other process has)."""
    taps = records[0].analyses[step - 1].instrumented.taps
    mine = set(records[0].analyses[step - 1].differing)
    fps, before = [], []
    for p, r in enumerate(records):
        ins = r.analyses[step - 1].instrumented
        index = {t: j for j, t in enumerate(ins.taps)}
        varying = set(r.analyses[step - 1].differing)
        mapped = []
        for t in taps:
            other = t if p == 0 else alignments[p - 1].tensor(t)
            j = index.get(other) if other is not None else None
            mapped.append(hash((t, p)) if j is None or other in varying or t in mine else ins.fps[0][j])
        fps.append(mapped)
        before.append(ins.before[0])
    return taps, fps, before


def cross_process(records: list[Record], seeds: list[str]) -> tuple[CrossProcess, list[Finding], list[Source]]:
    base = records[0]
    graph = OpGraph.from_json(base.graph)
    alignments = [align(graph, OpGraph.from_json(r.graph)) for r in records[1:]]
    reordered = sorted({a for al in alignments for a, _ in al.reordered})
    steps = min(r.default.steps for r in records)
    differing = [_first_runs_differ([r.default for r in records], k) for k in range(1, steps + 1)]
    first = _first_differing(differing)
    pinned_first = _first_differing([_first_runs_differ([r.pinned for r in records], k) for k in range(1, steps + 1)]) \
        if all(r.pinned for r in records) else None
    # Op by op while every process starts the step from the same state; after that, differences are inherited.
    comparable = 0
    for k in range(1, min(steps, *(len(r.analyses) for r in records)) + 1):
        starts = [r.analyses[k - 1].instrumented.before[0] for r in records]
        if any(s != starts[0] for s in starts[1:]) and k > 1:
            break
        comparable = k
    in_process = {s.op_name for r in records for s in r.sources if s.seen_across == "runs"}
    rows, seen = [], set()
    for k in range(1, comparable + 1):
        taps, fps, before = _synthetic_runs(records, alignments, k)
        ins = base.analyses[k - 1].instrumented
        for s in compare(unroll(graph, ins.executions, ins.enclosing), taps, fps, before, base.results).sources:
            if s.op in in_process or s.op in seen:
                continue
            seen.add(s.op)
            row = source_row(graph, s, Seen(k, "processes", len(records)),
                             kind="order" if s.op in reordered else s.kind)
            if row.kind == "state" and k == 1:
                row = dataclasses.replace(row, known_remedy=KIND_REMEDIES["initial"])
            rows.append(row)
    for op in reordered:
        if op not in seen:  # reordered, though the sum came out the same here
            rows.append(source_row(graph, None, Seen(1, "processes", len(records)), op=op, kind="order"))
    info = CrossProcess(processes=len(records), hash_seeds=seeds, first_differing_step=first,
                        pinned_first_differing_step=pinned_first,
                        differing_variables=[len(d or []) for d in differing], compared_steps=comparable,
                        reordered=reordered)
    return info, _graph_findings(alignments) + _input_findings(records), rows
