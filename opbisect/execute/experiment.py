"""The experiment over a prepared step: one method per pass, in the shape of torch.fx's Interpreter (`run` calls a
method per pass; a subclass changes one, as --workers' agreement and verify's timed runs could).

    Experiment(settings, step, lap).run(progress) -> Evidence
      passes(runs)                           one round, every run from the one restored state:
        fit(runs)                              model.fit itself (the fit form; else None)
        plain(runs)                            the uninstrumented step, your grappler config: the verdict's evidence
        analysed(runs, default, fit)           the instrumented step, and the plain step with grappler pinned where
          analyse(runs, options, default)      the grappler choice needs it (execute/steps.py: step by step, each
          pinned(runs)                         source measured and replayed alone)
      unsettled(evidence)                    what the round leaves open: where something is, every pass runs
                                             again with --max-runs runs (look harder)
    Experiment.record(evidence, started) -> (Record, the reproducers' files)
      analysis.facts.decide                  every decision once: verdict, grappler, observer effect, fit replay
"""

from __future__ import annotations

import contextlib
import dataclasses
import time

from .. import tfcompat
from ..analysis import facts
from ..analysis.rank import rank
from ..analysis.sources import in_process_rows, replica_count
from ..errors import CannotTest
from ..ir.ids import state_id
from ..record.model import Meta, Record, Trajectory
from . import preflight
from .passes import AnalysisPass, Bench, FitPass, PlainPass
from .prepared import Prepared, device_name, environment
from .runner import Feeder, Runner, pinned_options
from .workers import Agreement

SCRIPT_OUTPUT = "script_output.txt"
PINNED_LABEL = "uninstrumented step, grappler pinned"


@dataclasses.dataclass
class Evidence:
    """What one round of passes saw, and what the rounds before it left."""

    seen: facts.Observed
    analysed: list  # per step: (StepAnalysis, Comparison, {source op: replay inputs})
    unsettled: str = ""  # why the passes ran again with more runs ("" where they did not)


class Experiment:
    def __init__(self, settings, step: Prepared, lap):
        from ..capture import builder

        self.settings, self.step, self.lap = settings, step, lap
        self.agree = Agreement.of(settings)
        if self.agree.count > 1 and step.target.fit is not None:
            raise CannotTest("--workers runs the step form and the model/data form; the fit form's model.fit is not "
                             "kept in step across workers yet")
        self.findings = step.findings + preflight.checks(step.trace, step.target)
        lap("check the graph")
        self.taps, self.skipped = builder.tappable_tensors(step.trace)
        tapped = set(self.taps)
        self.results = [t for t in result_tensors(step.trace) if t in tapped or builder.derived(step.trace, t)]
        self.options = pinned_options(settings.pin_grappler and not step.trace.jit_compile)  # XLA: none to pin
        fit_steps = step.target.form == "fit" and settings.steps == 1  # every step of the fit, unless --steps
        self.steps = step.target.steps_available if fit_steps else settings.steps
        self.bench: Bench | None = None

    # -- the passes ------------------------------------------------------------------------------------------------
    def run(self, progress=None) -> Evidence:
        """Rounds of passes: the first with --runs runs, again with --max-runs where the first leaves a claim open."""
        from ..capture import taps as capture

        s, step = self.settings, self.step
        self.bench = Bench(Runner(step.trace, step.target, step.state_fps, step.value_fps, progress, self.lap),
                           Feeder(step.target, self.steps), step.snapshot(), self.lap)
        self.instrumented = capture.build(step.trace, self.taps, step.fingerprinter)
        self.lap("build the instrumented step")
        runs, first, unsettled = s.runs, None, ""
        while True:
            evidence = self.passes(runs, first)
            first = evidence.seen.first
            unsettled = unsettled or self.unsettled(evidence)
            if runs >= s.max_runs or not self.agree.any("look harder", bool(unsettled)):
                return dataclasses.replace(evidence, unsettled=unsettled if runs > s.runs else "")
            unsettled = unsettled or "another worker's claims needed more runs"
            runs = s.max_runs  # look harder: every pass again, from the same state, with more runs

    def passes(self, runs: int, first=None) -> Evidence:
        fit, default = self.fit(runs), self.plain(runs)
        first = first or facts.verdict(default, fit, None)
        analysed, pinned, choice = self.analysed(runs, default, fit)
        seen = facts.Observed(runs=runs, default=default, fit=fit, pinned=pinned, choice=choice,
                              instrumented=analysed[0][0].instrumented, first=first)
        return Evidence(seen, analysed)

    def fit(self, runs: int) -> Trajectory | None:
        return FitPass(self.bench, self.step.target.fit).run(runs)

    def plain(self, runs: int) -> Trajectory:
        return PlainPass(self.bench).run(runs)

    def pinned(self, runs: int) -> Trajectory:
        return PlainPass(self.bench, self.options, PINNED_LABEL).run(runs)

    def analyse(self, runs: int, options: dict | None, default: Trajectory) -> list:
        s, step = self.settings, self.step
        analysis = AnalysisPass(self.bench, step.trace, self.instrumented, step.fingerprinter, self.results,
                                s.magnitude_runs, s.replay_runs if s.replay else 0, device_name(step.kind), self.agree)
        return analysis.run(runs, options, default.differing_batches())

    def analysed(self, runs: int, default: Trajectory, fit: Trajectory | None) -> tuple:
        """(the analysis, the pinned plain pass or None, the grappler choice). The pinned plain pass is the
        analysis' baseline under pinned grappler. Where the uninstrumented step gave one result (one step, no
        model.fit), the analysis runs first, pinned: if it gives that same result in every run, neither pinning nor
        the taps changed anything and the pinned pass is not needed. A step that varies gets the pinned pass first,
        as the choice needs it. Under --workers, all skip it or none. Under XLA nothing is pinned: grappler does
        not rewrite a jit-compiled step."""
        speculate = self.agree.all("speculate", self.steps == 1 and fit is None
                                   and default.first_differing_step() is None)
        if self.options and speculate:
            return self._speculated(runs, default)
        pinned = self.pinned(runs) if self.options else None
        choice = facts.grappler_choice(default, pinned, bool(self.step.trace.jit_compile))
        return self.analyse(runs, self.options if choice.config == "pinned" else None, default), pinned, choice

    def _speculated(self, runs: int, default: Trajectory) -> tuple:
        analysed = self.analyse(runs, self.options, default)
        same = facts.observer_effect(default.at(1), analysed[0][0].instrumented).effect == "none"
        if self.agree.all("skip the pinned pass", same):
            return analysed, None, facts.pinning_not_needed()
        pinned = self.pinned(runs)
        choice = facts.grappler_choice(default, pinned)
        # Under --workers every worker analyses again when one needs to (their step calls stay matched), and keeps
        # the analysis its own choice names.
        if self.agree.any("analyse under your config", choice.config != "pinned"):
            again = self.analyse(runs, None, default)
            analysed = analysed if choice.config == "pinned" else again
        return analysed, pinned, choice

    def unsettled(self, evidence: Evidence) -> str:
        seen = evidence.seen
        named = any(c.sources for _, c, _ in evidence.analysed)
        return facts.unsettled(seen.default, seen.fit, seen.choice,
                               facts.observer_effect(seen.baseline.at(1), seen.instrumented), named)

    # -- the record ------------------------------------------------------------------------------------------------
    def record(self, evidence: Evidence, started: float) -> tuple[Record, dict]:
        step, seen = self.step, evidence.seen
        meta = self.meta(evidence, started)
        decided = facts.decide(seen, meta.metric_variables + list(step.restart.variables), step.trace.mirrors)
        analyses = [a for a, _, _ in evidence.analysed]
        record = Record(meta=meta, graph=step.trace.graph.to_json(),
                        findings=self.findings + facts.body_findings(analyses, step.trace.graph.regions),
                        skipped=self.skipped, results=self.results, default=seen.default, pinned=seen.pinned,
                        fit=seen.fit, analyses=analyses, sources=[], seeded=step.restart.draws, facts=decided)
        per_step = [(a.step, c.sources, a.magnitudes, a.replays) for a, c, _ in evidence.analysed]
        record.sources = rank(in_process_rows(step.trace.graph, per_step, seen.runs,
                                              plain_varies=decided.verdict.nondeterministic))
        inputs = {op: got for _, _, step_inputs in evidence.analysed for op, got in step_inputs.items()}
        record.sources, files = reproducers(record, inputs, self.settings.replay_runs, step.kind)
        if step.target.intercepted is not None:
            files[SCRIPT_OUTPUT] = step.target.intercepted.output  # what the script printed before its training call
        return record, files

    def meta(self, evidence: Evidence, started: float) -> Meta:
        s, step, trace, fp = self.settings, self.step, self.step.trace, self.step.fingerprinter
        return Meta(script=str(s.script), script_path=str(s.script.resolve()), form=step.target.form,
                    runs=evidence.seen.runs, steps=self.steps, metric_variables=metric_variables(step.target, trace),
                    looked_harder=evidence.unsettled, timings=self.lap.laps, patched=step.patched,
                    mirrored=trace.mirrors, replicas=replica_count(trace.graph), fingerprinter=fp.name,
                    fingerprint=fp.key, jit_compile=bool(trace.jit_compile), ops=len(trace.graph),
                    variables=len(trace.variables), restored_variables=len(step.restored),
                    initial_state=step.initial_state, seconds=round(time.time() - started, 2),
                    intercepted=intercepted_facts(step.target.intercepted, s.at), script_args=list(s.script_args),
                    **environment(step.tf, step.kind))


def result_tensors(trace) -> list[str]:
    """The tensors that make up the step's result: its outputs and each variable's last write."""
    graph = trace.graph
    last = {}
    for op in graph.topo_order():
        for slot, var in graph.written(op):
            last[var] = state_id(op, slot)
    return list(trace.output_names) + sorted(last.values())


def intercepted_facts(caught, at: str = "") -> dict:
    """The record's account of the training call a script run as it is was stopped at ({} for the contract), and
    the `--at` that chose it ("" for the first)."""
    if caught is None:
        return {}
    return {"kind": caught.kind, "name": caught.name, "where": caught.where, "seconds": caught.seconds,
            "steps": len(caught.batches or caught.calls), "at": at}


def metric_variables(target, trace) -> list[str]:
    """Keys of the Keras metrics' variables (fit resets them every epoch; a step-by-step replay does not)."""
    model = getattr(target.fit, "model", None)
    if model is None:
        return []
    handles = tfcompat.keras_variable_handles([v for m in model.metrics for v in m.variables])
    return sorted(k for k, v in trace.variables.items() if id(v.handle) in handles)


def reproducers(record: Record, inputs: dict, runs: int, kind: str) -> tuple[list, dict]:
    """A standalone reproducer for each replayed source: the sources naming theirs, and the files."""
    from ..replay import reproducer
    from ..replay.call import NotReplayable

    sources, files = [], {}
    for s in record.sources:
        if s.op_name in inputs:
            call, values, states = inputs[s.op_name]
            try:
                heading = reproducer.Heading(s.rank, record.meta.script, runs, device_name(kind))
                made = reproducer.files(call, values, states, heading)
                s = dataclasses.replace(s, reproducer=next(p for p in made if p.endswith(".py")))
                files.update(made)
            except NotReplayable as exc:
                s = dataclasses.replace(s, replay_note=f"{s.replay_note}; no reproducer: {exc}".lstrip("; "))
        sources.append(s)
    return sources, files


class Laps:
    """Seconds spent per stage of the experiment (the record's `meta.timings`): where the time goes."""

    def __init__(self):
        self.laps: dict[str, float] = {}
        self.last = time.perf_counter()

    def __call__(self, stage: str) -> None:
        now = time.perf_counter()
        self.laps[stage] = round(self.laps.get(stage, 0.0) + now - self.last, 3)
        self.last = now


def progress_display(enabled: bool):
    if not enabled:
        return contextlib.nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)
