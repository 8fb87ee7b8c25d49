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
from ..record.model import StepAnalysis
from .runner import Feeder, Runner
from .snapshot import Snapshot


def analyse_steps(runner: Runner, trace, feeder: Feeder, restored: dict, start: Snapshot, inst, fingerprinter,
                  runs: int, magnitude_runs: int, options, results: list[str],
                  differing_batches: list[int] = ()) -> list[tuple[StepAnalysis, Comparison]]:
    analyses, seen = [], set()
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
        comparison = compare(trace.graph, ins.taps, ins.fps, ins.before, results)
        new = [s for s in comparison.sources if s.op not in seen]
        seen.update(s.op for s in new)
        magnitudes = {}
        full = [t for s in new for t in s.tensors]
        if full:
            _, arrays = runner.instrumented(capture.build(trace, [], fingerprinter, full), snapshot, args_for_run,
                                            magnitude_runs, options, "magnitudes of the sources")
            column = {t: [run[i] for run in arrays] for i, t in enumerate(full)}
            magnitudes = {s.op: of_source([column[t] for t in s.tensors]) for s in new}
        analyses.append((StepAnalysis(step=k, instrumented=ins, differing=comparison.differing,
                                      magnitudes=magnitudes, magnitude_runs=magnitude_runs if full else 0),
                         comparison))
        if k < len(reference):  # advance the reference trajectory by one plain step
            runner.restore(snapshot)
            runner.call(args)
            snapshot = Snapshot(restored)
    return analyses
