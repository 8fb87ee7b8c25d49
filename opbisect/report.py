"""Report: the raw run record (saved, so the report can be re-made without re-running), the ranked CSV, and
the short human summary for the terminal.

Writes are atomic (a temporary file renamed into place): a failed run never leaves a half-written report.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path

import pandas as pd

from . import rank as ranking
from .compare import Comparison, compare
from .ir import Finding, OpGraph
from .magnitude import Magnitude
from .remedies import remedy
from .run import InstrumentedRuns, PlainRuns

RECORD_VERSION = 1


@dataclasses.dataclass
class Record:
    """Everything an `opbisect trace` measured: enough to rebuild the CSV and the summary."""

    meta: dict
    graph: OpGraph
    findings: list[Finding]
    skipped: dict[str, int]
    results: list[str]
    default: PlainRuns
    pinned: PlainRuns | None
    instrumented: InstrumentedRuns
    analysis_config: str  # "pinned" or "default": the grappler configuration the instrumented runs used
    magnitudes: dict[str, Magnitude]
    magnitude_runs: int

    def compare(self) -> Comparison:
        ins = self.instrumented
        return compare(self.graph, ins.taps, ins.fps, ins.before, self.results)

    @property
    def runs(self) -> int:
        return len(self.instrumented.fps)

    # -- persistence -------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "version": RECORD_VERSION, "meta": self.meta, "graph": self.graph.to_json(),
            "findings": [dataclasses.asdict(f) for f in self.findings], "skipped": self.skipped,
            "results": self.results, "default": dataclasses.asdict(self.default),
            "pinned": dataclasses.asdict(self.pinned) if self.pinned else None,
            "instrumented": dataclasses.asdict(self.instrumented), "analysis_config": self.analysis_config,
            "magnitudes": {k: dataclasses.asdict(m) for k, m in self.magnitudes.items()},
            "magnitude_runs": self.magnitude_runs,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Record":
        if data.get("version") != RECORD_VERSION:
            raise ValueError(f"record version {data.get('version')} (this opbisect reads {RECORD_VERSION})")
        return cls(
            meta=data["meta"], graph=OpGraph.from_json(data["graph"]),
            findings=[Finding(**f) for f in data["findings"]], skipped=data["skipped"], results=data["results"],
            default=PlainRuns(**data["default"]), pinned=PlainRuns(**data["pinned"]) if data["pinned"] else None,
            instrumented=InstrumentedRuns(**data["instrumented"]), analysis_config=data["analysis_config"],
            magnitudes={k: Magnitude(**m) for k, m in data["magnitudes"].items()},
            magnitude_runs=data["magnitude_runs"],
        )


def table(record: Record, comparison: Comparison | None = None) -> pd.DataFrame:
    """The ranked culprit table (one row per source)."""
    comparison = comparison or record.compare()
    graph = record.graph
    rows = []
    for s in comparison.sources:
        mag = record.magnitudes.get(s.op)
        op_type = graph.op_type(s.op)
        rows.append({
            "op_name": s.op, "op_type": op_type, "kind": s.kind, "runs_differing": s.runs_differing,
            "runs": record.runs, "distinct_values": s.distinct_values,
            "downstream_differing": s.downstream_differing, "affects_result": s.affects_result,
            "max_abs_diff": mag.max_abs_diff if mag else float("nan"),
            "max_ulp_diff": mag.max_ulp_diff if mag else float("nan"),
            "frac_elements_differing": mag.frac_elements_differing if mag else float("nan"),
            "source_location": graph.site(s.op) or graph.attrs(s.op).get("library_site", ""),
            "known_remedy": remedy(op_type, s.kind), "position": graph.position[s.op],
        })
    return ranking.rank(pd.DataFrame(rows))


def paths(out: Path, stem: str) -> tuple[Path, Path]:
    return out / f"{stem}.csv", out / f"{stem}.runs.json"


def _atomic_write(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def save(record: Record, df: pd.DataFrame, out: Path, stem: str) -> tuple[Path, Path]:
    csv_path, raw_path = paths(out, stem)
    _atomic_write(raw_path, lambda fh: json.dump(record.to_json(), fh))
    _atomic_write(csv_path, lambda fh: df.to_csv(fh, index=False))
    return csv_path, raw_path


def load(path: Path) -> Record:
    with open(path) as fh:
        return Record.from_json(json.load(fh))


# -- the human summary ---------------------------------------------------------------------------------------
def observer_check(record: Record) -> str:
    """What capture did to the step, comparing the plain step with the instrumented one under one config."""
    plain = record.pinned if record.analysis_config == "pinned" and record.pinned else record.default
    inst = record.instrumented.as_plain()
    if plain.deterministic() and inst.deterministic():
        same = plain.after[0] == inst.after[0] and plain.outputs[0] == inst.outputs[0]
        return ("capture did not change the step's result" if same else
                "capture changed the step's final result (grappler rewrote the instrumented graph differently); "
                "the sources below are those of the instrumented graph")
    if not plain.deterministic() and inst.deterministic():
        return ("capture hid the nondeterminism (observer effect: the taps changed how the step runs); "
                "run `opbisect trace --bisect` to tap fewer tensors")
    if plain.deterministic() and not inst.deterministic():
        return ("capture created nondeterminism the plain step did not show (observer effect, or a race that did "
                "not fire in the plain runs: try more --runs)")
    same = set(plain.varying_variables()) == set(inst.varying_variables())
    return "the plain and the instrumented step both vary" + (
        ", in the same variables" if same else ", in different variables (capture moved the race)")


def verdict_line(runs: PlainRuns, label: str) -> str:
    n, d = len(runs.outputs), runs.distinct()
    if d <= 1:
        return f"{label}: {n} runs, 1 result: deterministic"
    vary = runs.varying_variables()
    shown = ", ".join(vary[:4]) + (" ..." if len(vary) > 4 else "")
    return f"{label}: {n} runs, {d} distinct results: NONDETERMINISTIC ({len(vary)} variables differ: {shown})" \
        if vary else f"{label}: {n} runs, {d} distinct results: NONDETERMINISTIC (outputs differ)"


def nondeterministic(record: Record, df: pd.DataFrame) -> bool:
    plains = [record.default] + ([record.pinned] if record.pinned else [])
    return bool(len(df)) or any(not p.deterministic() for p in plains) or \
        not record.instrumented.as_plain().deterministic()


def summary(record: Record, df: pd.DataFrame, comparison: Comparison, csv_path: Path | None = None) -> list[str]:
    m = record.meta
    lines = [f"opbisect: {m['script']} ({m['form']} form), {record.runs} runs on {m['device']} "
             f"(TF {m['tf_version']}, {m['fingerprinter']})"]
    lines.append(verdict_line(record.default, "uninstrumented step, your grappler config"))
    if record.pinned:
        lines.append(verdict_line(record.pinned, "uninstrumented step, grappler pinned"))
    if record.default.deterministic() != (record.pinned or record.default).deterministic():
        lines.append("note: pinning grappler's constant folding and arithmetic optimization changes the verdict: "
                     "a grappler rewrite is involved; the analysis ran under your config")
    ins = record.instrumented
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(record.skipped.items()))
    lines.append(f"instrumented step ({record.analysis_config} grappler): {len(ins.taps)} tensors tapped"
                 f"{f' ({skipped} skipped)' if skipped else ''}, {len(comparison.differing)} differ; "
                 f"{observer_check(record)}")
    for f in record.findings:
        lines.append(f"{f.level}: {f.message}")
    if df.empty:
        lines.append("no source found" + ("" if not nondeterministic(record, df) else
                                          " although the step varies: see the notes above"))
    else:
        lines.append(f"{len(df)} source(s), ranked (what to fix first):")
        for r in df.itertuples():
            lines.append(f"  #{r.rank} {r.op_name} ({r.op_type}) kind={r.kind}: {r.distinct_values} distinct values "
                         f"in {r.runs} runs ({r.runs_differing} off the common one), "
                         f"{r.downstream_differing} differing ops after it"
                         f"{'' if r.affects_result else ', does not reach the result'}; "
                         f"max |diff| {r.max_abs_diff:.3g}, {r.max_ulp_diff:.3g} ulp, "
                         f"{100 * r.frac_elements_differing:.3g}% of elements")
            if r.source_location:
                lines.append(f"     at {r.source_location}")
            if r.known_remedy:
                lines.append(f"     remedy: {r.known_remedy}")
        first = df.iloc[0]
        lines.append(f"{first.op_name} is the first bad op")
    if csv_path is not None:
        lines.append(f"report: {csv_path} (raw runs: {paths(csv_path.parent, csv_path.name[:-4])[1]})")
    return lines
