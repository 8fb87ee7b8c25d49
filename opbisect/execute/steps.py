"""Step analysis: the op-level analysis of each of K consecutive steps, from the identical state before it.

Runs diverge after their first differing step, so later steps cannot be compared run against run. Instead the
analysis follows one reference trajectory (the reference batches, each step from the state the previous plain
step left): before step k it snapshots that state, runs the instrumented step k N times from the snapshot,
compares, measures the new sources, then advances the reference by one plain step. A source's `first_step`
is the first step whose analysis names it.
"""

from __future__ import annotations

from ..analysis.compare import Comparison, compare
from ..analysis.magnitude import of_source
from ..capture import taps as capture
from ..ir.ids import TensorRef, state_id
from ..ir.unroll import unroll
from ..record.model import StepAnalysis
from ..replay.call import NotReplayable, op_call
from ..replay.rerun import not_replayed, replay
from .runner import Feeder, Runner
from .snapshot import Snapshot
from .workers import Agreement


def analyse_steps(runner: Runner, trace, feeder: Feeder, restored: dict, start: Snapshot, inst, fingerprinter,
                  runs: int, magnitude_runs: int, options, results: list[str], differing_batches: list[int] = (),
                  replay_runs: int = 0, device: str = "/device:CPU:0",
                  agree: Agreement | None = None) -> list[tuple[StepAnalysis, Comparison, dict]]:
    """Per step: its analysis, its comparison, and {source op: (OpCall, input values, states)} of the sources
    replayed alone (what their reproducers need). Under --workers the magnitude pass runs in every worker when
    any needs it (`agree`): their step calls stay in step."""
    agree = agree or Agreement()
    analyses, seen = [], set()
    node_defs = {n.name: n for n in trace.graph_def.node}
    runner.restore(start)
    reference = list(feeder.run())
    snapshot = start
    for k, args in enumerate(reference, 1):
        # Each run takes its own arguments where they may differ (inputs() on a single step; a re-created
        # iterator's k-th batch where the trajectory saw batches differ): then the argument is the source.
        # Elsewhere every run takes the reference batch.
        if feeder.steps == 1:
            args_for_run = lambda: next(feeder.run())  # noqa: E731
        elif k in differing_batches:
            args_for_run = lambda k=k: feeder.batch(k)  # noqa: E731
        else:
            args_for_run = lambda args=args: args  # noqa: E731
        label = "instrumented step" if feeder.steps == 1 else f"instrumented step {k}/{feeder.steps}"
        ins, _ = runner.instrumented(inst, snapshot, args_for_run, runs, options, label)
        comparison = compare(unroll(trace.graph, ins.executions, ins.enclosing), ins.taps, ins.fps, ins.before, results)
        runner.lap("op analysis: compare")
        new = [s for s in comparison.sources if s.op not in seen]
        seen.update(s.op for s in new)
        replays, calls = {}, {}
        if replay_runs:
            calls, replays = _replay_calls(trace.graph, node_defs, new, snapshot)
        # Whole values come from the step's top level only (a body's tensors are digested inside the body).
        full = list(dict.fromkeys([t for s in new for t in s.tensors if not TensorRef.parse(t).region]
                                  + [t for c, pre in calls.values() for t in c.captured + list(pre.values()) if t]))
        magnitudes, inputs = {}, {}
        if agree.any(f"magnitude pass of step {k}", bool(full)):
            _, arrays = runner.instrumented(capture.build(trace, [], fingerprinter, full, descend=False), snapshot,
                                            args_for_run, magnitude_runs, options, "magnitudes of the sources",
                                            "magnitude pass")
            column = {t: [run[i] for run in arrays] for i, t in enumerate(full)}
            magnitudes = {s.op: of_source([column[t] for t in s.tensors]) for s in new
                          if s.tensors and all(t in column for t in s.tensors)}
            for op, (call, pre) in calls.items():
                values = {t: column[t][0] for t in call.captured}
                states = {v: column[t][0] if t else _saved(snapshot, v) for v, t in pre.items()}
                replays[op] = replay(call, values, states, replay_runs, device)
                inputs[op] = (call, values, states)
            runner.lap("op analysis: magnitudes and replays alone")
        analyses.append((StepAnalysis(step=k, instrumented=ins, differing=comparison.differing,
                                      magnitudes=magnitudes, magnitude_runs=magnitude_runs if full else 0,
                                      replays=replays), comparison, inputs))
        if k < len(reference):  # advance the reference trajectory by one plain step
            runner.restore(snapshot)
            runner.call(args)
            snapshot = Snapshot(restored)
    return analyses


REPLAYED_KINDS = ("op", "write", "random")  # input and state sources vary because of what feeds them


def _replay_calls(graph, node_defs: dict, sources, snapshot: Snapshot):
    """({op: (OpCall, {variable: tensor id of its state before the op, or "" for the snapshot's})}, {op: Replay
    of the sources that cannot be replayed})."""
    calls, refused = {}, {}
    for s in sources:
        if s.kind not in REPLAYED_KINDS:
            continue
        if graph.region_of(s.op):
            refused[s.op] = not_replayed(NotReplayable("inside a loop or branch body: its inputs are not recorded"))
            continue
        try:
            call = op_call(graph, node_defs[s.op], s.op)
            if any(graph.dtype(t) in ("variant", "resource") for t in call.captured):
                raise NotReplayable("an input is a variant or a resource that is not a variable")
            pre = {}
            for var in call.variables:
                writes = graph.prior_writes(s.op, var)
                if not writes and var not in snapshot.keys:
                    raise NotReplayable(f"the variable {var} is not restored between runs")
                last = writes[-1] if writes else None
                pre[var] = next((state_id(last, slot) for slot, v in graph.written(last) if v == var), "") \
                    if last else ""
            calls[s.op] = (call, pre)
        except NotReplayable as exc:
            refused[s.op] = not_replayed(exc)
    return calls, refused


def _saved(snapshot: Snapshot, var: str):
    return snapshot.saved[snapshot.keys.index(var)].numpy()
