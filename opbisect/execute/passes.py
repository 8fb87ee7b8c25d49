"""The experiment's passes over the prepared step: each a small object whose one method, `run(runs)`, runs the step
`runs` times from the one restored state and returns what it saw. session.py decides which run and in what order.

    FitPass       model.fit itself, from the restored state         -> Trajectory, or None (not the fit form)
    PlainPass     the uninstrumented step, grappler as configured   -> Trajectory (the verdict's evidence)
                  (or pinned: the baseline the analysis compares)
    AnalysisPass  the instrumented step, per step: taps, compare,   -> [(StepAnalysis, Comparison, replay inputs)]
                  the magnitude of each source, each replayed alone

Every pass reads the same `Bench` (runner, feeder, starting snapshot, stage clock), so none of them loads, traces or
restores anything of its own: the prepared step (execute/prepared.py) did that once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

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
