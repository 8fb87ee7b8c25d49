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
from ..capture.values import BodyValues, UnfixedShape
from ..errors import InternalError
from ..ir.ids import PRIOR, TensorRef, split_op_id, state_id
from ..ir.unroll import unroll
from ..record.model import StepAnalysis
from ..replay.call import NotReplayable, op_call
from ..replay.rerun import not_replayed, replay
from .runner import Feeder, Runner
from .snapshot import Snapshot
from .workers import Agreement


def analyse_steps(runner: Runner, trace, feeder: Feeder, start: Snapshot, inst, fingerprinter,
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
            calls, replays = _replay_calls(trace, node_defs, new, snapshot)
        at = {op: _execution(op, new) for op in calls}  # a body's source: its inputs at its differing execution
        needed = [_at(t, at[op]) for op, (c, pre) in calls.items() for t in c.captured + list(pre.values()) if t]
        # Whole values: the step's top level returns them; a body's come out in a pass of its own (its sources'
        # outputs too, for their magnitudes, where that pass runs the step as it is: under XLA, threaded out)
        full = list(dict.fromkeys([t for s in new for t in s.tensors if not TensorRef.parse(t).region]
                                  + [t for t in needed if not TensorRef.parse(t).region]))
        measured = [t for s in new for t in s.tensors if TensorRef.parse(t).region]
        column: dict[str, list] = {}
        if agree.any(f"magnitude pass of step {k}", bool(full)):
            _, arrays = runner.instrumented(capture.build(trace, [], fingerprinter, full, descend=False), snapshot,
                                            args_for_run, magnitude_runs, options, "magnitudes of the sources",
                                            "magnitude pass")
            column = {t: [run[i] for run in arrays] for i, t in enumerate(full)}
        body_runs = magnitude_runs if measured else 1
        in_bodies, failed, without_xla = _in_bodies(needed + measured, body_runs, runner, trace, fingerprinter,
                                                    snapshot, args_for_run, options, agree, k)
        # a run without the XLA the step compiles with computes other numbers: no magnitude from it
        column.update({t: v for t, v in in_bodies.items() if not without_xla or t not in measured or t in needed})
        magnitudes = {s.op: of_source([column[t] for t in s.tensors]) for s in new  # each tensor in every run
                      if s.tensors and all(len(column.get(t, ())) == magnitude_runs for t in s.tensors)}
        inputs = {}
        for op, (call, pre) in calls.items():
            replays[op], inputs[op] = _replayed(call, pre, at[op], column, failed, snapshot, replay_runs, device,
                                                without_xla)
        inputs = {op: got for op, got in inputs.items() if got}
        if full or needed:
            runner.lap("op analysis: magnitudes and replays alone")
        analyses.append((StepAnalysis(step=k, instrumented=ins, differing=comparison.differing,
                                      magnitudes=magnitudes, magnitude_runs=magnitude_runs if full or measured else 0,
                                      replays=replays), comparison, inputs))
        if k < len(reference):  # advance the reference trajectory by one plain step
            runner.restore(snapshot)
            runner.call(args)
            snapshot = snapshot.now()
    return analyses


REPLAYED_KINDS = ("op", "write", "random")  # input and state sources vary because of what feeds them
WITHOUT_XLA = "its inputs recorded in a run of the step without XLA (XLA cannot compile the callback taking them)"


def _replayed(call, pre: dict, execution: int | None, column: dict, failed: str, snapshot: Snapshot, runs: int,
              device: str, without_xla: bool):
    """(the Replay of one source, its (call, values, states) for a reproducer, or None where it was not run)."""
    missing = [t for t in call.captured + list(pre.values()) if t and _at(t, execution) not in column]
    if missing:  # inside a body that did not run in the pass that recorded them, or that pass failed
        where = " (its body did not run that execution there)" if execution is not None else ""
        why = f"its input {missing[0]} was not computed in the run that recorded the inputs{where}"
        return not_replayed(NotReplayable(failed or why)), None
    values = {t: column[_at(t, execution)][0] for t in call.captured}
    states = {v: column[_at(t, execution)][0] if t else _saved(snapshot, v) for v, t in pre.items()}
    result = replay(call, values, states, runs, device)
    if without_xla and execution is not None:
        result.note = "; ".join(n for n in (result.note, WITHOUT_XLA) if n)
    return result, (call, values, states)


def _execution(op: str, sources) -> int | None:
    """The execution of its body at which a source inside one first differs (None at the top level)."""
    s = next(s for s in sources if s.op == op)
    refs = [TensorRef.parse(t) for t in s.tensors]
    return next((r.iteration for r in refs if r.iteration is not None), 0 if split_op_id(op)[0] else None)


def _at(tensor: str, execution: int | None) -> str:
    """A tensor id at an execution of its body (a tensor of the top level: itself)."""
    ref = TensorRef.parse(tensor)
    return tensor if not ref.region else str(ref.at(execution))


def _node_def(trace, top_level: dict, op: str):
    """The NodeDef of `op`: in the flat GraphDef, or in its body's."""
    region, local = split_op_id(op)
    if not region:
        return top_level[op]
    return next(n for n in trace.regions[region].graph_def.node if n.name == local)


def _in_bodies(tensors: list[str], runs: int, runner: Runner, trace, fingerprinter, snapshot: Snapshot,
               args_for_run, options, agree: Agreement, k: int) -> tuple[dict[str, list], str, bool]:
    """({tensor id@execution: its value there in each of `runs` runs}, "" or why none was recorded, whether they
    were recorded without the XLA the step compiles with) for the `tensors` inside bodies (the others are left
    out): runs of the step whose bodies hand them over (capture.values): threaded out of a step that compiles with
    XLA (their shapes first, where tracing left them open: `_probed`); to the host otherwise. The replay is an
    extra: where this pass fails, the sources inside bodies are reported as not replayed, with the error, and the
    rest of the analysis stands."""
    inside = [t for t in dict.fromkeys(tensors) if TensorRef.parse(t).region]
    if not agree.any(f"body values pass of step {k}", bool(inside)):
        return {}, "", False

    def build(values: BodyValues):
        return capture.build(trace, [], fingerprinter, [], descend=True, values=values)

    values = BodyValues(inside, threaded=bool(trace.jit_compile))
    try:
        try:
            inst = build(values)
        except UnfixedShape:
            values = _probed(inside, build, lambda inst, runs, label: runner.instrumented(
                inst, snapshot, args_for_run, runs, options, label, "body values pass"))
            inst = build(values)
        runner.instrumented(inst, snapshot, args_for_run, runs, options, "values inside bodies", "body values pass")
    except InternalError as exc:  # session 16, on the H200: a host callback in a body run whole on the GPU
        return {}, f"recording its inputs inside the body failed: {exc}", False
    taken = {t for run in values.runs for t in run}
    without_xla = bool(trace.jit_compile) and not values.threaded
    return {t: [run[t] for run in values.runs if t in run] for t in taken}, "", without_xla


def _probed(inside: list[str], build, run) -> BodyValues:
    """Values to thread out of an XLA step whose trace left their shapes open: one run threads out their shapes
    (those whose body ran at their execution), to which they are then built. Past a probe's dimensions, values the
    host takes, in a run without XLA. `build(values)` is the instrumented step, `run(it, runs, label)` runs it."""
    try:
        probe = BodyValues(inside, probe=True)
        run(build(probe), 1, "shapes of the values inside bodies")
        known = probe.probed()
    except UnfixedShape:
        return BodyValues(inside)
    return BodyValues([t for t in inside if t in known], threaded=True, known=known)


def _replay_calls(trace, node_defs: dict, sources, snapshot: Snapshot):
    """({op: (OpCall, {variable: tensor id of its state before the op, or "" for the snapshot's})}, {op: Replay
    of the sources that cannot be replayed})."""
    graph = trace.graph
    calls, refused = {}, {}
    for s in sources:
        if s.kind not in REPLAYED_KINDS:
            continue
        try:
            call = op_call(graph, _node_def(trace, node_defs, s.op), s.op)
            if any(graph.dtype(t) in ("variant", "resource") for t in call.captured):
                raise NotReplayable("an input is a variant or a resource that is not a variable")
            if split_op_id(s.op)[0]:  # in a body: read right before it, at the execution replayed
                slots = dict((v, slot) for slot, v in graph.resources(s.op))
                calls[s.op] = (call, {v: str(TensorRef(s.op, slots[v], PRIOR)) for v in call.variables})
                continue
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
