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
from .runner import Pass
from .snapshot import Snapshot
from .workers import Agreement


class StepAnalyser:
    """The analysis pass's run over each step of the reference trajectory (`analysis`: an execute.passes.AnalysisPass,
    what every step shares: the bench, the trace, the instrumented step, the fingerprinter, the result tensors, the
    magnitude and replay runs, the device, the workers' agreement).

        run()                  per step: its analysis, its comparison, and {source op: (OpCall, input values, states)}
          step(k, args, snap)    the instrumented step's runs, compared; the new sources measured and replayed alone
            magnitudes(...)        their whole values: from the top level, and out of the bodies (in_bodies)
            replays(...)           each replayable source alone on its recorded inputs
    Under --workers the magnitude and body passes run in every worker when any needs them: their calls stay in step.
    """

    def __init__(self, analysis, runs: int, options, differing_batches=()):
        self.a, self.runs, self.options = analysis, runs, options
        self.differing_batches = list(differing_batches)
        self.runner, self.trace, self.feeder = analysis.bench.runner, analysis.trace, analysis.bench.feeder
        self.magnitude_runs = analysis.magnitude_runs or runs
        self.agree = analysis.agree or Agreement()
        self.node_defs = {n.name: n for n in self.trace.graph_def.node}
        self.seen: set[str] = set()

    def run(self) -> list[tuple[StepAnalysis, Comparison, dict]]:
        analyses, snapshot = [], self.a.bench.start
        self.runner.restore(snapshot)
        reference = list(self.feeder.run())
        for k, args in enumerate(reference, 1):
            analyses.append(self.step(k, args, snapshot))
            if k < len(reference):  # advance the reference trajectory by one plain step
                self.runner.restore(snapshot)
                self.runner.call(args)
                snapshot = snapshot.now()
        return analyses

    def args_for_run(self, k: int, args):
        """Each run takes its own arguments where they may differ (inputs() on a single step; a re-created iterator's
        k-th batch where the trajectory saw batches differ): then the argument is the source. Elsewhere every run
        takes the reference batch."""
        if self.feeder.steps == 1:
            return lambda: next(self.feeder.run())
        if k in self.differing_batches:
            return lambda: self.feeder.batch(k)
        return lambda: args

    def step(self, k: int, args, snapshot: Snapshot) -> tuple[StepAnalysis, Comparison, dict]:
        feeds = self.args_for_run(k, args)
        label = "instrumented step" if self.feeder.steps == 1 else f"instrumented step {k}/{self.feeder.steps}"
        ins, _ = self.runner.instrumented(self.a.instrumented, snapshot, feeds, Pass(self.runs, self.options, label))
        comparison = compare(unroll(self.trace.graph, ins.executions, ins.enclosing), ins.taps, ins.fps, ins.before,
                             self.a.results)
        self.runner.lap("op analysis: compare")
        new = [s for s in comparison.sources if s.op not in self.seen]
        self.seen.update(s.op for s in new)
        calls, refused = _replay_calls(self.trace, self.node_defs, new, snapshot) if self.a.replay_runs else ({}, {})
        at = {op: _execution(op, new) for op in calls}  # a body's source: its inputs at its differing execution
        column, failed, without_xla, measured = self.magnitudes(k, new, calls, at, (snapshot, feeds))
        magnitudes = {s.op: of_source([column[t] for t in s.tensors]) for s in new  # each tensor in every run
                      if s.tensors and all(len(column.get(t, ())) == self.magnitude_runs for t in s.tensors)}
        replays, inputs = self.replays(calls, at, column, (failed, snapshot, without_xla))
        return (StepAnalysis(step=k, instrumented=ins, differing=comparison.differing, magnitudes=magnitudes,
                             magnitude_runs=self.magnitude_runs if measured else 0, replays={**refused, **replays}),
                comparison, inputs)

    def magnitudes(self, k: int, new, calls: dict, at: dict, where: tuple) -> tuple[dict, str, bool, bool]:
        """({tensor: its value in each run}, why the body values failed, whether they ran without XLA, whether any
        was measured) for the new sources' outputs and the replays' inputs: the step's top level returns them, a
        body's come out in a pass of its own (under XLA, threaded out)."""
        snapshot, feeds = where
        needed = [_at(t, at[op]) for op, (c, pre) in calls.items() for t in c.captured + list(pre.values()) if t]
        full = list(dict.fromkeys([t for s in new for t in s.tensors if not TensorRef.parse(t).region]
                                  + [t for t in needed if not TensorRef.parse(t).region]))
        measured = [t for s in new for t in s.tensors if TensorRef.parse(t).region]
        column: dict[str, list] = {}
        if self.agree.any(f"magnitude pass of step {k}", bool(full)):
            step = capture.build(self.trace, [], self.a.fingerprinter, full, descend=False)
            how = Pass(self.magnitude_runs, self.options, "magnitudes of the sources", "magnitude pass")
            _, arrays = self.runner.instrumented(step, snapshot, feeds, how)
            column = {t: [run[i] for run in arrays] for i, t in enumerate(full)}
        runs = self.magnitude_runs if measured else 1
        in_bodies, failed, without_xla = self.in_bodies(needed + measured, runs, (snapshot, feeds), k)
        # a run without the XLA the step compiles with computes other numbers: no magnitude from it
        column.update({t: v for t, v in in_bodies.items() if not without_xla or t not in measured or t in needed})
        if full or needed:
            self.runner.lap("op analysis: magnitudes and replays alone")
        return column, failed, without_xla, bool(full or measured)

    def replays(self, calls: dict, at: dict, column: dict, context: tuple) -> tuple[dict, dict]:
        """(Replay of each source, {source: (call, values, states)} of those run alone)."""
        failed, snapshot, without_xla = context
        replays, inputs = {}, {}
        for op, (call, pre) in calls.items():
            replays[op], inputs[op] = _replayed(call, pre, at[op], column, (failed, snapshot, without_xla),
                                                (self.a.replay_runs, self.a.device))
        return replays, {op: got for op, got in inputs.items() if got}

    def in_bodies(self, tensors: list[str], runs: int, where: tuple, k: int) -> tuple[dict[str, list], str, bool]:
        """({tensor id@execution: its value there in each of `runs` runs}, "" or why none was recorded, whether they
        were recorded without the XLA the step compiles with) for the `tensors` inside bodies (the others are left
        out): runs of the step whose bodies hand them over (capture.values): threaded out of a step that compiles
        with XLA (their shapes first, where tracing left them open: `_probed`); to the host otherwise. The replay is
        an extra: where this pass fails, the sources inside bodies are reported as not replayed, with the error, and
        the rest of the analysis stands."""
        snapshot, feeds = where
        inside = [t for t in dict.fromkeys(tensors) if TensorRef.parse(t).region]
        if not self.agree.any(f"body values pass of step {k}", bool(inside)):
            return {}, "", False

        def build(values: BodyValues):
            return capture.build(self.trace, [], self.a.fingerprinter, [], descend=True, values=values)

        def run(inst, count: int, label: str):
            return self.runner.instrumented(inst, snapshot, feeds, Pass(count, self.options, label, "body values pass"))

        values = BodyValues(inside, threaded=bool(self.trace.jit_compile))
        try:
            try:
                inst = build(values)
            except UnfixedShape:
                values = _probed(inside, build, run)
                inst = build(values)
            run(inst, runs, "values inside bodies")
        except InternalError as exc:  # on the H200: a host callback in a body run whole on the GPU
            return {}, f"recording its inputs inside the body failed: {exc}", False
        taken = {t for got in values.runs for t in got}
        without_xla = bool(self.trace.jit_compile) and not values.threaded
        return {t: [got[t] for got in values.runs if t in got] for t in taken}, "", without_xla


REPLAYED_KINDS = ("op", "write", "random")  # input and state sources vary because of what feeds them
WITHOUT_XLA = "its inputs recorded in a run of the step without XLA (XLA cannot compile the callback taking them)"


def _replayed(call, pre: dict, execution: int | None, column: dict, context: tuple, how: tuple):
    """(the Replay of one source, its (call, values, states) for a reproducer, or None where it was not run).
    `context`: (why the body values failed, the snapshot, whether they ran without XLA); `how`: (runs, device)."""
    failed, snapshot, without_xla = context
    missing = [t for t in call.captured + list(pre.values()) if t and _at(t, execution) not in column]
    if missing:  # inside a body that did not run in the pass that recorded them, or that pass failed
        where = " (its body did not run that execution there)" if execution is not None else ""
        why = f"its input {missing[0]} was not computed in the run that recorded the inputs{where}"
        return not_replayed(NotReplayable(failed or why)), None
    values = {t: column[_at(t, execution)][0] for t in call.captured}
    states = {v: column[_at(t, execution)][0] if t else _saved(snapshot, v) for v, t in pre.items()}
    result = replay(call, values, states, *how)
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
