"""The experiment's passes over the prepared step: each a small object whose one method, `run(runs)`, runs the step
`runs` times from the one restored state and returns what it saw. session.py decides which run and in what order.

    FitPass       model.fit itself, from the restored state         -> Trajectory, or None (not the fit form)
    PlainPass     the uninstrumented step, grappler as configured   -> Trajectory (the verdict's evidence)
                  (or pinned: the baseline the analysis compares)
    AnalysisPass  the instrumented step, per step: taps, compare,   -> [(StepAnalysis, Comparison, replay inputs)]
                  the magnitude of each source, each replayed alone
    VariantPass   verify's variants: a step like the plain one (the    -> Measured (execute/variants.py)
                  patched step, the plain step under a switch), its
                  results, times and first values; `timed_in_turn`
                  times several side by side

Every pass reads the same `Bench` (runner, feeder, starting snapshot, stage clock), so none of them loads, traces or
restores anything of its own: the prepared step (execute/prepared.py) did that once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .variants import Measured, measure, time_steps

PLAIN_STAGE = "plain passes (and model.fit)"  # the record's meta.timings key these passes add to


@dataclasses.dataclass(frozen=True)
class Bench:
    """What every pass runs on: the runner (execute/runner.py), the batches, the state each run starts from, and
    the clock that times each stage."""

    runner: Any
    feeder: Any
    start: Any
    lap: Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class FitPass:
    """model.fit, as the script calls it, `runs` times from the restored state (only in the fit form)."""

    bench: Bench
    plan: Any  # the target's FitPlan, or None

    def run(self, runs: int):
        if self.plan is None:
            return None
        return self.bench.runner.fit(self.bench.start, self.plan, runs, "model.fit")


@dataclasses.dataclass(frozen=True)
class PlainPass:
    """The uninstrumented step under `options` (None: the user's grappler config; else the pinned one)."""

    bench: Bench
    options: dict | None = None
    label: str = "uninstrumented step"

    def run(self, runs: int):
        done = self.bench.runner.plain(self.bench.start, self.bench.feeder, runs, self.options, self.label)
        self.bench.lap(PLAIN_STAGE)
        return done


@dataclasses.dataclass(frozen=True)
class AnalysisPass:
    """The instrumented step, step by step (execute/steps.py): what differs, where it starts, how much, and each
    source replayed alone. `differing_batches`: the steps whose batches the plain pass saw differ."""

    bench: Bench
    trace: Any
    instrumented: Any
    fingerprinter: Any
    results: list[str]
    magnitude_runs: int
    replay_runs: int
    device: str
    agree: Any

    def run(self, runs: int, options: dict | None = None, differing_batches: list[int] = ()):
        from .steps import StepAnalyser

        done = StepAnalyser(self, runs, options, differing_batches).run()
        self.bench.lap("op analysis: the reference's steps")
        return done


@dataclasses.dataclass(frozen=True)
class VariantPass:
    """`call` (called like the step) over one run's batches, from the bench's state every run: what verify measures
    of each variant. The batches are fed once, so every run and every variant reads the same ones."""

    bench: Bench
    call: Any
    batches: tuple

    def one_run(self):
        """Every batch in turn; the last step's outputs (the state is the whole run's)."""
        outputs = None
        for args in self.batches:
            outputs = self.call(*args)
        return outputs

    def fingerprint(self, outputs) -> tuple:
        """One run's comparable result: the outputs' fingerprints and the state's, as the plain pass reads them."""
        import tensorflow as tf

        runner = self.bench.runner
        return (tuple(runner.output_fps(tf.nest.flatten(outputs, expand_composites=True))),
                tuple(sorted(runner.state_fps().items())))

    def run(self, runs: int, confirm: int = 0) -> Measured:
        """`runs` runs, each from the bench's state, on to `confirm` in all where they agree; times per step."""
        done = measure(self.one_run, self.bench.start.restore, self.fingerprint,
                       self.bench.runner.trace.variables, runs, confirm)
        done.times = [t / len(self.batches) for t in done.times]
        return done


def timed_in_turn(passes: list[VariantPass], measured: list[Measured], steps: int) -> None:
    """`steps` more timed runs of each pass, the passes in turn (a drift of the machine's speed falls on all alike),
    into its Measured (`timed`, per step); none where a pass failed."""
    if not steps or any(m.error for m in measured):
        return
    times = time_steps([p.one_run for p in passes], (), passes[0].bench.start.restore, steps)
    for p, m, t in zip(passes, measured, times):
        m.timed = [x / len(p.batches) for x in t]
