"""Orchestration only: settings -> (load, trace, check, run, compare, measure, rank) -> Record -> report folder.

Each stage is its own module and decides what it can; this one wires them and stores their decisions:

    run_trace(settings)
      ReportFolder.prepare()          record/store.py    (an unusable --out fails before any run)
      experiment(settings)                               (or across_processes(settings): P children;
                                                          across_workers(settings): N workers in lockstep)
        prepare                       execute/prepared.py (loaded or intercepted, traced, seeded ops restarted,
                                                          patched, snapshotted: what verify shares)
        preflight.checks              execute/preflight.py
        FitPass, PlainPass            execute/passes.py  (the verdict's evidence; PlainPass pinned: the baseline)
        _analysis_passes              here               (which passes run, in what order: the grappler choice)
        AnalysisPass                  execute/passes.py -> execute/steps.py (capture/, analysis/compare.py,
                                                          magnitude.py, replay/)
        sources, rank, facts          analysis/
      report.write(record, folder)    report/            (one Reporter per view)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
import time
from pathlib import Path

from . import report, tfcompat
from .analysis import facts
from .analysis.rank import rank
from .analysis.sources import hidden_behind, in_process_rows, replica_count
from .errors import CannotTest, UsageError
from .execute import preflight
from .execute.prepared import device_name, environment, prepare
from .ir.ids import state_id
from .patches.registry import switches_on
from .record import store
from .record.model import Facts, Meta, Record
from .settings import TraceSettings
from .targets.loader import script_path
from .targets.seeding import seeded


def result_tensors(trace) -> list[str]:
    """The tensors that make up the step's result: its outputs and each variable's last write."""
    graph = trace.graph
    last = {}
    for op in graph.topo_order():
        for slot, var in graph.written(op):
            last[var] = state_id(op, slot)
    return list(trace.output_names) + sorted(last.values())


def progress_display(enabled: bool):
    if not enabled:
        return contextlib.nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)


def run_trace(settings: TraceSettings, echo=print) -> int:
    """`opbisect trace`: the exit code is the verdict on the uninstrumented step (0 or 1)."""
    settings.validate()
    folder = store.ReportFolder(settings.out, settings.script.stem, str(script_path(settings.script)))
    with folder.prepare():
        if settings.processes > 1:
            record, files = across_processes(settings)
        elif settings.workers > 1 and settings.agree_dir == Path():
            record, files = across_workers(settings), {}
        elif settings.replicas:
            record, files = across_replicas(settings)
        else:
            record, files = checked_experiment(settings)
        patches = ",".join(p for p in (settings.patch, str(folder.final / report.csv.FILENAME)) if p)
        record.findings = hidden_behind(record.findings, record.sources, str(settings.script), patches,
                                        switches_on())
        written = report.write(record, folder, html=settings.html, extra=files)
    for line in report.text.lines(record, written):
        echo(line)
    return record.facts.verdict.exit_code


def checked_experiment(settings: TraceSettings) -> tuple[Record, dict]:
    """The experiment, and beside it the fresh-process check (execute/fresh.py), unless --no-fresh-check or this is a
    worker of --workers (whose peers are its fresh processes)."""
    if not settings.fresh or settings.workers > 1:
        return experiment(settings)
    from .execute.fresh import FreshRun

    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")  # two processes share the GPU: neither takes it all
    with FreshRun(settings) as fresh:
        record, files = experiment(settings, fresh.own)
        return fresh.checked(record), files


def experiment(settings: TraceSettings, probe=None) -> tuple[Record, dict]:
    """The whole in-process experiment: the record, and the reproducers' files for the report folder. `probe(bench,
    trace, restart)`, where given, takes this process's probe for the fresh-process check once the passes ran."""
    from .targets.loader import importable

    started = time.time()
    with importable(settings.script):
        return _experiment(settings, started, probe)


def _experiment(settings: TraceSettings, started: float, probe=None) -> tuple[Record, dict]:
    from .capture import builder
    from .capture import taps as capture
    from .execute.passes import AnalysisPass, Bench, FitPass, PlainPass
    from .execute.runner import Feeder, Runner, pinned_options
    from .execute.workers import Agreement

    lap = Laps()
    agree = Agreement.of(settings)

    def setup(tf):
        if settings.replica_limit:  # a rung of --replicas
            tfcompat.limit_mirrored_strategies(settings.replica_limit)

    step = prepare(settings.script, settings.step_name, settings.inputs_name, settings.device, settings.fingerprint,
                   settings.patch, setup, lap, argv=settings.script_args, at=settings.at, steps=settings.steps,
                   contexts=seeded(settings.seed))
    tf, kind, target, trace, fp = step.tf, step.kind, step.target, step.trace, step.fingerprinter
    if agree.count > 1 and target.fit is not None:
        raise CannotTest("--workers runs the step form and the model/data form; the fit form's model.fit is not "
                         "kept in step across workers yet")
    findings = step.findings + preflight.checks(trace, target)
    lap("check the graph")
    taps, skipped = builder.tappable_tensors(trace)
    tapped = set(taps)
    results = [t for t in result_tensors(trace) if t in tapped or builder.fused_by_xla(trace, t)]
    pinned = pinned_options(settings.pin_grappler and not trace.jit_compile)  # XLA: no grappler to pin
    steps = settings.steps
    if target.form == "fit" and steps == 1:
        steps = target.steps_available  # every step of the fit, unless --steps says fewer

    with progress_display(settings.progress) as progress:
        bench = Bench(Runner(trace, target, step.state_fps, step.value_fps, progress, lap), Feeder(target, steps),
                      step.snapshot(), lap)
        inst = capture.build(trace, taps, fp)
        lap("build the instrumented step")
        fit_pass, plain_pass = FitPass(bench, target.fit), PlainPass(bench)
        pinned_pass = PlainPass(bench, pinned, "uninstrumented step, grappler pinned")
        analysis = AnalysisPass(bench, trace, inst, fp, results, settings.magnitude_runs,
                                settings.replay_runs if settings.replay else 0, device_name(kind), agree)
        runs, unsettled, first_verdict = settings.runs, "", None
        while True:
            fit_runs, default_runs = fit_pass.run(runs), plain_pass.run(runs)
            first_verdict = first_verdict or facts.verdict(default_runs, fit_runs, None)
            speculate = agree.all("speculate", steps == 1 and fit_runs is None
                                  and default_runs.first_differing_step() is None)
            analysed, pinned_runs, choice = _analysis_passes(
                functools.partial(analysis.run, runs, differing_batches=default_runs.differing_batches()),
                functools.partial(pinned_pass.run, runs), default_runs, pinned, speculate, agree,
                bool(trace.jit_compile))
            plain = pinned_runs if pinned_runs is not None and choice.config == "pinned" else default_runs
            named = any(c.sources for _, c, _ in analysed)
            unsettled = unsettled or facts.unsettled(default_runs, fit_runs, choice,
                                                     facts.observer_effect(plain.at(1), analysed[0][0].instrumented),
                                                     named)
            if runs >= settings.max_runs or not agree.any("look harder", bool(unsettled)):
                break
            unsettled = unsettled or "another worker's claims needed more runs"
            runs = settings.max_runs  # look harder: every pass again, from the same state, with more runs
        if probe is not None:
            probe(bench, trace, step.restart)
    meta = Meta(script=str(settings.script), script_path=str(settings.script.resolve()), form=target.form,
                runs=runs, steps=steps, metric_variables=metric_variables(target, trace),
                looked_harder=unsettled if runs > settings.runs else "", timings=lap.laps, patched=step.patched,
                mirrored=trace.mirrors, replicas=replica_count(trace.graph),
                fingerprinter=fp.name, fingerprint=fp.key, jit_compile=bool(trace.jit_compile),
                ops=len(trace.graph), variables=len(trace.variables), restored_variables=len(step.restored),
                initial_state=step.initial_state, seconds=round(time.time() - started, 2),
                intercepted=intercepted_facts(target.intercepted), script_args=list(settings.script_args),
                **environment(tf, kind))
    plain = pinned_runs if pinned_runs is not None and choice.config == "pinned" else default_runs
    verdict = facts.verdict(default_runs, fit_runs, None)
    if first_verdict.nondeterministic and not verdict.nondeterministic:  # looked harder and missed what it had seen
        verdict = facts.kept_from_first_runs(first_verdict, runs)
    findings += facts.body_findings([a for a, _, _ in analysed], trace.graph.regions)
    record = Record(
        meta=meta, graph=trace.graph.to_json(), findings=findings, skipped=skipped, results=results,
        default=default_runs, pinned=pinned_runs, fit=fit_runs, analyses=[a for a, _, _ in analysed], sources=[],
        seeded=step.restart.draws,
        facts=Facts(verdict=verdict, grappler=choice,
                    observer=facts.observer_effect(plain.at(1), analysed[0][0].instrumented),
                    fit_replay=facts.fit_replay(fit_runs, default_runs,
                                                meta.metric_variables + list(step.restart.variables))
                    if fit_runs else None,
                    replica_divergence=facts.replica_divergence(default_runs, trace.mirrors)))
    per_step = [(a.step, c.sources, a.magnitudes, a.replays) for a, c, _ in analysed]
    record.sources = rank(in_process_rows(trace.graph, per_step, runs,
                                          plain_varies=record.facts.verdict.nondeterministic))
    inputs = {op: got for _, _, step_inputs in analysed for op, got in step_inputs.items()}
    record.sources, files = reproducers(record, inputs, settings.replay_runs, kind)
    if target.intercepted is not None:
        files[SCRIPT_OUTPUT] = target.intercepted.output  # what the script printed before its training call
    return record, files


SCRIPT_OUTPUT = "script_output.txt"


def intercepted_facts(caught) -> dict:
    """The record's account of the training call a script run as it is was stopped at ({} for the contract)."""
    if caught is None:
        return {}
    return {"kind": caught.kind, "name": caught.name, "where": caught.where, "seconds": caught.seconds,
            "steps": len(caught.batches or caught.calls)}


def _analysis_passes(analyse, pinned_pass, default_runs, pinned: dict | None, speculate: bool, agree,
                     xla: bool) -> tuple:
    """(analysed, the pinned plain pass or None, the grappler choice). `analyse(options)` runs the analysis pass
    under grappler `options`, `pinned_pass()` the plain pass under pinned grappler.

    The pinned plain pass is the baseline of the analysis under pinned grappler. When the uninstrumented step gave
    one result (`speculate`: one step, no model.fit), the analysis runs first under pinned grappler: if the
    instrumented step gives that same result in every run, neither pinning nor the taps changed anything and the
    pinned pass (its grappler optimization and first call of the whole step) is not needed. Otherwise the pinned
    pass runs, and the analysis runs again under your config where the choice says so. A step that varies gets
    the pinned pass first, as the choice needs it before any analysis. Under --workers, all skip it or none.
    Under XLA (`xla`) there is no pinned configuration: grappler does not run on a jit-compiled step."""
    if pinned and speculate:
        analysed = analyse(pinned)
        if agree.all("skip the pinned pass",
                     facts.observer_effect(default_runs.at(1), analysed[0][0].instrumented).effect == "none"):
            return analysed, None, facts.pinning_not_needed()
        pinned_runs = pinned_pass()
        choice = facts.grappler_choice(default_runs, pinned_runs)
        # Under --workers every worker analyses again when one needs to (their step calls stay matched), and
        # keeps the analysis its own choice names.
        if agree.any("analyse under your config", choice.config != "pinned"):
            again = analyse(None)
            analysed = analysed if choice.config == "pinned" else again
        return analysed, pinned_runs, choice
    pinned_runs = pinned_pass() if pinned else None
    choice = facts.grappler_choice(default_runs, pinned_runs, xla)
    return analyse(pinned if choice.config == "pinned" else None), pinned_runs, choice


class Laps:
    """Seconds spent per stage of the experiment (the record's `meta.timings`): where the time goes."""

    def __init__(self):
        self.laps: dict[str, float] = {}
        self.last = time.perf_counter()

    def __call__(self, stage: str) -> None:
        now = time.perf_counter()
        self.laps[stage] = round(self.laps.get(stage, 0.0) + now - self.last, 3)
        self.last = now


def reproducers(record: Record, inputs: dict, runs: int, kind: str) -> tuple[list, dict]:
    """A standalone reproducer for each replayed source: the sources naming theirs, and the files."""
    from .replay import reproducer
    from .replay.call import NotReplayable

    sources, files = [], {}
    for s in record.sources:
        if s.op_name in inputs:
            call, values, states = inputs[s.op_name]
            try:
                made = reproducer.files(call, values, states, rank=s.rank, script=record.meta.script, runs=runs,
                                        device=device_name(kind))
                s = dataclasses.replace(s, reproducer=next(p for p in made if p.endswith(".py")))
                files.update(made)
            except NotReplayable as exc:
                s = dataclasses.replace(s, replay_note=f"{s.replay_note}; no reproducer: {exc}".lstrip("; "))
        sources.append(s)
    return sources, files


def across_processes(settings: TraceSettings) -> tuple[Record, dict]:
    """The experiment in fresh processes, merged into process 1's record with the cross-process facts; and process
    1's reproducers, which the merged record's sources name."""
    from .analysis.crossproc import cross_process
    from .execute.processes import run_children

    with store.temporary("opbisect-processes-") as tmp:
        records, seeds = run_children(settings, Path(tmp), progress=lambda m: print(m, file=sys.stderr))
        files = store.reproducers_of(Path(tmp) / "process1" / settings.script.stem)
    merged = records[0]
    info, found, rows = cross_process(records, seeds)
    verdict = facts.verdict(merged.default, merged.fit, info)
    if merged.facts.verdict.nondeterministic and not verdict.nondeterministic:
        verdict = merged.facts.verdict  # process 1 looked harder and kept what its first runs had seen
    rows = [dataclasses.replace(r, observer_effect=r.affects_result and not verdict.nondeterministic) for r in rows]
    return dataclasses.replace(
        merged, meta=dataclasses.replace(merged.meta, processes=settings.processes),
        findings=merged.findings + found, processes=info, sources=rank(merged.sources + rows),
        facts=dataclasses.replace(merged.facts, verdict=verdict)), files


def across_workers(settings: TraceSettings) -> Record:
    """The experiment as the script's MultiWorkerMirroredStrategy workers, one process each, in lockstep: their
    records merged (every worker's sources, the verdict nondeterministic when any worker's step varied)."""
    from .analysis.workers import merge
    from .execute.workers import run_workers

    with store.temporary("opbisect-workers-") as tmp:
        return merge(run_workers(settings, Path(tmp), progress=lambda m: print(m, file=sys.stderr)))


def across_replicas(settings: TraceSettings) -> tuple[Record, dict]:
    """The replica ladder: the experiment once per rung, in fresh processes; the full rung's record (what the
    script runs), with every rung and the ladder's conclusion, and its reproducers."""
    from .analysis import ladder
    from .execute.ladder import describe, run_ladder

    with store.temporary("opbisect-replicas-") as tmp:
        rungs = run_ladder(settings, Path(tmp), progress=lambda m: print(m, file=sys.stderr))
        full = max((r for r in rungs if not r.env), key=lambda r: (r.limit == 0, r.record.meta.replicas))
        files = store.reproducers_of(Path(tmp) / f"rung{rungs.index(full) + 1}" / settings.script.stem)
    decided = ladder.decide([ladder.rung(r.limit, r.env, describe(r.limit, r.env), r.record) for r in rungs],
                            analysed=describe(full.limit, full.env))
    return dataclasses.replace(full.record, ladder=decided), files


def metric_variables(target, trace) -> list[str]:
    """Keys of the Keras metrics' variables (fit resets them every epoch; a step-by-step replay does not)."""
    model = getattr(target.fit, "model", None)
    if model is None:
        return []
    handles = tfcompat.keras_variable_handles([v for m in model.metrics for v in m.variables])
    return sorted(k for k, v in trace.variables.items() if id(v.handle) in handles)


def rerun_report(path: Path, out: Path | None = None, html: bool = False, echo=print) -> int:
    """`opbisect report`: re-make the views from a saved record, running nothing. The record is validated
    before anything is written. The views go into the record's own report folder (whatever its name), or with
    `--out` into `<out>/<script>/`, which must not hold another report."""
    path = Path(path)
    record = store.load(path)
    own = store.report_folder_of(path)
    if out is None and own is None:
        for line in report.text.lines(record, None):
            echo(line)
        echo(f"note: {path} is not a file in a report folder: nothing written (--out DIR writes the report)")
        return record.facts.verdict.exit_code
    out, stem = (own.absolute().parent, own.name) if out is None else (Path(out), record.stem)
    target = Path(out) / stem
    if target.exists() and (own is None or target.resolve() != own.resolve()):
        where = f"in {own}" if own is not None else "where the record is"
        raise UsageError(f"{target} holds another report, which `report` never replaces: pick another --out, or "
                         f"leave --out out to re-make the views {where}")
    folder = store.ReportFolder(out, stem, record.meta.script_path)
    with folder.prepare():
        written = report.write(record, folder, html=html, extra=store.reproducers_of(path))
    for line in report.text.lines(record, written):
        echo(line)
    return record.facts.verdict.exit_code
