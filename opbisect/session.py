"""Orchestration only: settings -> (load, trace, run the passes, decide, rank) -> Record -> report folder.

    run_trace(settings)
      ReportFolder.prepare()          record/store.py    (an unusable --out fails before any run)
      checked_experiment(settings)                       (or across_processes: P children; across_workers: N
                                                          workers in lockstep; across_replicas: the ladder)
        FreshRun                      execute/fresh.py   (a second fresh process of the script, beside the passes)
        experiment(settings)
          prepare                     execute/prepared.py (loaded or intercepted, traced, seeded ops restarted,
                                                          patched, snapshotted: what verify shares)
          Experiment.run              execute/experiment.py (one method per pass; the grappler choice; looking
                                                          harder)
          Experiment.record           analysis/facts.decide, sources, rank, the reproducers
      report.write(record, folder)    report/            (one Reporter per view)
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

from . import tfcompat
from .analysis import facts
from .analysis.rank import rank
from .errors import UsageError
from .execute.prepared import prepare
from .patches.registry import switches_on
from .record import store
from .record.model import Record
from .settings import TraceSettings
from .targets.loader import script_path
from .targets.seeding import seeded


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
        # imported once the record is made: pandas and networkx (0.3 s) would delay the fresh-process check's child
        from . import report
        from .analysis.sources import hidden_behind

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
    from .execute.experiment import Experiment, Laps, progress_display

    lap = Laps()

    def setup(tf):
        tfcompat.limit_mirrored_strategies(settings.replica_limit)  # a rung of --replicas

    step = prepare(settings, setup, lap, contexts=seeded(settings.seed))
    experiment = Experiment(settings, step, lap)
    with progress_display(settings.progress) as progress:
        evidence = experiment.run(progress)
        if probe is not None:
            probe(experiment.bench, step.trace, step.restart)
    return experiment.record(evidence, started)


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
    rows = [dataclasses.replace(r, observer_effect=r.affects_result and not verdict.nondeterministic) for r in rows
            if not _read_of_fresh_init(r, merged)]
    return dataclasses.replace(
        merged, meta=dataclasses.replace(merged.meta, processes=settings.processes),
        findings=merged.findings + found, processes=info, sources=rank(merged.sources + rows),
        facts=dataclasses.replace(merged.facts, verdict=verdict)), files


def _read_of_fresh_init(row, record: Record) -> bool:
    """A step-1 `state` row across processes where the fresh-process check already named the variables that start
    apart, with their cause (its `init` rows): the row is one of their reads, said twice."""
    return row.kind == "state" and row.first_step == 1 and any(s.kind == "init" for s in record.sources)


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


def rerun_report(path: Path, out: Path | None = None, html: bool = False, echo=print) -> int:
    """`opbisect report`: re-make the views from a saved record, running nothing. The record is validated
    before anything is written. The views go into the record's own report folder (whatever its name), or with
    `--out` into `<out>/<script>/`, which must not hold another report."""
    from . import report

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
