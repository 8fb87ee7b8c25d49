"""`--workers`: the records of a MultiWorkerMirroredStrategy's workers merged into one.

Each worker sees its own program: its ops, and the collectives that join it to the others. A collective whose
inputs were identical in every run of worker A, but whose output varied, is a `collective` source in A's record;
yet it may only carry worker B's difference (B's input to the all-reduce varied). So a collective source of one
worker stands only if no other worker fed it a varying input; otherwise it is dropped with a note naming the worker
and the sources that explain it. The verdict is nondeterministic when any worker's step varied.
"""

from __future__ import annotations

import dataclasses

from ..ir.ids import TensorRef
from ..record.model import Finding, Record, Source, Verdict
from .rank import rank


def merge(records: list[Record]) -> Record:
    """Worker 0's record, with every worker's sources (each naming its worker) and the merged verdict."""
    rows, findings = [], []
    for w, record in enumerate(records):
        for s in record.sources:
            why = _explained_elsewhere(s, w, records)
            if why:
                findings.append(Finding("note", why))
            else:
                rows.append(dataclasses.replace(s, worker=w))
    chief = records[0]
    verdict = _verdict([r.facts.verdict for r in records])
    findings += [Finding("note", f"worker {w}: {'; '.join(r.facts.verdict.evidence)}")
                 for w, r in enumerate(records) if w]
    return dataclasses.replace(
        chief, meta=dataclasses.replace(chief.meta, workers=len(records)), sources=rank(rows),
        findings=chief.findings + findings, facts=dataclasses.replace(chief.facts, verdict=verdict))


def _explained_elsewhere(source: Source, worker: int, records: list[Record]) -> str:
    """Why a collective source of `worker` is another worker's difference (its input varied there), or ""."""
    if source.kind != "collective":
        return ""
    for other, record in enumerate(records):
        if other == worker:
            continue
        differs = {TensorRef.parse(t).op for a in record.analyses for t in a.differing}
        there = {s.op_name for s in record.sources}
        if source.op_name in differs and source.op_name not in there:
            causes = ", ".join(f"{s.op_name} ({s.op_type})" for s in record.sources[:3]) or "no source found there"
            return (f"worker {worker}'s {source.op_name} ({source.op_type}) is not a source: its inputs were identical "
                    f"in worker {worker}, but worker {other}'s input to it varied (worker {other}'s sources: {causes})")
    return ""


def _verdict(verdicts: list[Verdict]) -> Verdict:
    """The first nondeterministic worker's verdict (worker 0's when none varied), its evidence naming the worker."""
    w, chosen = next(((w, v) for w, v in enumerate(verdicts) if v.nondeterministic), (0, verdicts[0]))
    return dataclasses.replace(chosen, evidence=[f"worker {w}: {e}" for e in chosen.evidence])
