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
from .run import InstrumentedRuns, PlainRuns, Trajectory
from .steps import StepAnalysis

RECORD_VERSION = 2


@dataclasses.dataclass
class Record:
    """Everything an `opbisect trace` measured: enough to rebuild the CSV and the summary."""

    meta: dict
    graph: OpGraph
    findings: list[Finding]
    skipped: dict[str, int]
    results: list[str]
    default: Trajectory
    pinned: Trajectory | None
    analyses: list[StepAnalysis]
    analysis_config: str  # "pinned" or "default": the grappler configuration the instrumented runs used
    processes: dict | None = None  # the cross-process comparison (opbisect.processes), when --processes > 1
    fit: Trajectory | None = None  # model.fit itself, per batch (the fit form)

    def comparisons(self) -> list[tuple[StepAnalysis, Comparison]]:
        return [(a, compare(self.graph, a.instrumented.taps, a.instrumented.fps, a.instrumented.before,
                            self.results)) for a in self.analyses]

    @property
    def runs(self) -> int:
        return len(self.analyses[0].instrumented.fps)

    @property
    def steps(self) -> int:
        return self.default.steps

    # -- persistence -------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "version": RECORD_VERSION, "meta": self.meta, "graph": self.graph.to_json(),
            "findings": [dataclasses.asdict(f) for f in self.findings], "skipped": self.skipped,
            "results": self.results, "default": dataclasses.asdict(self.default),
            "pinned": dataclasses.asdict(self.pinned) if self.pinned else None,
            "analyses": [dataclasses.asdict(a) for a in self.analyses], "analysis_config": self.analysis_config,
            "processes": self.processes, "fit": dataclasses.asdict(self.fit) if self.fit else None,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Record":
        if data.get("version") != RECORD_VERSION:
            raise ValueError(f"record version {data.get('version')} (this opbisect reads {RECORD_VERSION})")
        analyses = [StepAnalysis(step=a["step"], instrumented=InstrumentedRuns(**a["instrumented"]),
                                 magnitudes={k: Magnitude(**m) for k, m in a["magnitudes"].items()},
                                 magnitude_runs=a["magnitude_runs"]) for a in data["analyses"]]
        return cls(
            meta=data["meta"], graph=OpGraph.from_json(data["graph"]),
            findings=[Finding(**f) for f in data["findings"]], skipped=data["skipped"], results=data["results"],
            default=Trajectory(**data["default"]), pinned=Trajectory(**data["pinned"]) if data["pinned"] else None,
            analyses=analyses, analysis_config=data["analysis_config"], processes=data.get("processes"),
            fit=Trajectory(**data["fit"]) if data.get("fit") else None,
        )


def table(record: Record, comparisons=None) -> pd.DataFrame:
    """The ranked culprit table: one row per source, at the first step whose analysis names it."""
    comparisons = comparisons or record.comparisons()
    graph = record.graph
    rows, seen = [], set()
    for analysis, comparison in comparisons:
        for s in comparison.sources:
            if s.op in seen:
                continue
            seen.add(s.op)
            mag = analysis.magnitudes.get(s.op)
            op_type = graph.op_type(s.op)
            rows.append({
                "op_name": s.op, "op_type": op_type, "kind": s.kind, "first_step": analysis.step,
                "seen_across": "runs", "runs_differing": s.runs_differing, "runs": record.runs,
                "distinct_values": s.distinct_values, "downstream_differing": s.downstream_differing,
                "affects_result": s.affects_result,
                "max_abs_diff": mag.max_abs_diff if mag else float("nan"),
                "max_ulp_diff": mag.max_ulp_diff if mag else float("nan"),
                "frac_elements_differing": mag.frac_elements_differing if mag else float("nan"),
                "source_location": graph.site(s.op) or graph.attrs(s.op).get("library_site", ""),
                "known_remedy": remedy(op_type, s.kind), "position": graph.position[s.op],
            })
    rows.extend((record.processes or {}).get("rows", []))
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
    write_csv(df, csv_path)
    return csv_path, raw_path


def write_csv(df: pd.DataFrame, path: Path) -> None:
    _atomic_write(path, lambda fh: df.to_csv(fh, index=False))


def load(path: Path) -> Record:
    with open(path) as fh:
        return Record.from_json(json.load(fh))


# -- the human summary ---------------------------------------------------------------------------------------
def observer_check(record: Record) -> str:
    """What capture did to the step: the plain and the instrumented step 1, under one configuration."""
    plain_runs = record.pinned if record.analysis_config == "pinned" and record.pinned else record.default
    plain = plain_runs.at(1)
    inst = record.analyses[0].instrumented.as_plain()
    if plain.deterministic() and inst.deterministic():
        same = plain.after[0] == inst.after[0] and plain.outputs[0] == inst.outputs[0]
        return ("capture did not change the step's result" if same else
                "capture changed the step's final result (grappler rewrote the instrumented graph differently); "
                "the sources below are those of the instrumented graph")
    if not plain.deterministic() and inst.deterministic():
        return ("capture hid the nondeterminism (observer effect: the taps changed how the step runs); "
                "confirm any fix on the uninstrumented step")
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
    trajectories = [record.default] + ([record.pinned] if record.pinned else []) + ([record.fit] if record.fit else [])
    return bool(len(df)) or any(not t.final().deterministic() or t.first_differing_step() for t in trajectories) \
        or any(not a.instrumented.as_plain().deterministic() for a in record.analyses) \
        or bool(record.default.differing_batches()) or bool((record.processes or {}).get("differs"))


def fit_lines(record: Record) -> list[str]:
    """model.fit's own verdict per step, and whether opbisect's step-by-step replay agrees with it."""
    fit = record.fit
    if fit is None:
        return []
    first = fit.first_differing_step()
    lines = [f"model.fit itself: {len(fit.after)} runs of {fit.steps} steps: "
             + (f"step {first} is the first differing step; variables differing after each step: "
                f"{', '.join(map(str, fit.differing_variables()))}" if first else "every run ends identically")]
    metrics = set(record.meta.get("metric_variables", []))
    replay = record.default
    # Compare where both are deterministic: after that, run 0 of each is one draw among many.
    steps = min(fit.steps, replay.steps, (first or fit.steps + 1) - 1,
                (replay.first_differing_step() or replay.steps + 1) - 1)
    if steps == 0:
        return lines + ["note: the replay cannot be checked against model.fit: both differ from step 1"]
    mismatch = next((k for k in range(1, steps + 1)
                     if {v: f for v, f in fit.after[0][k - 1].items() if v not in metrics}
                     != {v: f for v, f in replay.after[0][k - 1].items() if v not in metrics}), None)
    lines.append(f"opbisect's replay of fit's steps matches model.fit bit for bit through step {steps} "
                 f"(metric variables aside)"
                 if mismatch is None else
                 f"note: opbisect's replay of fit's steps leaves other weights than model.fit from step {mismatch} "
                 f"(fit's own tf.function, callbacks, or data order): the op analysis is of the replay")
    return lines


def step_lines(record: Record) -> list[str]:
    t = record.default
    if t.steps <= 1:
        return []
    first = t.first_differing_step()
    growth = ", ".join(str(n) for n in t.differing_variables())
    lines = [f"steps: {t.steps} per run; " + (f"step {first} is the first differing step" if first else
                                               "no step differs") + f"; variables differing after each step: {growth}"]
    batches = t.differing_batches()
    if batches:
        lines.append(f"input: the batch of step {batches[0]} differs between runs (re-created iterators give "
                     f"different data{': steps ' + ', '.join(map(str, batches[:8])) if len(batches) > 1 else ''}); "
                     f"make the pipeline deterministic (tf.data deterministic=True, seeded shuffles)")
    return lines


def summary(record: Record, df: pd.DataFrame, comparisons, csv_path: Path | None = None) -> list[str]:
    m = record.meta
    lines = [f"opbisect: {m['script']} ({m['form']} form), {record.runs} runs on {m['device']} "
             f"(TF {m['tf_version']}, {m['fingerprinter']})"]
    lines.append(verdict_line(record.default.final(), "uninstrumented step, your grappler config"))
    if record.pinned:
        lines.append(verdict_line(record.pinned.final(), "uninstrumented step, grappler pinned"))
    if record.pinned and record.default.final().deterministic() != record.pinned.final().deterministic():
        lines.append("note: pinning grappler's constant folding and arithmetic optimization changes the verdict: "
                     "a grappler rewrite is involved; the analysis ran under your config")
    lines += fit_lines(record) + step_lines(record)
    ins, first = record.analyses[0].instrumented, comparisons[0][1]
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(record.skipped.items()))
    differing = sum(len(c.differing) for _, c in comparisons)
    lines.append(f"instrumented step ({record.analysis_config} grappler): {len(ins.taps)} tensors tapped"
                 f"{f' ({skipped} skipped)' if skipped else ''}, {len(first.differing)} differ"
                 f"{f' ({differing} over all {len(comparisons)} steps)' if len(comparisons) > 1 else ''}; "
                 f"{observer_check(record)}")
    for f in record.findings:
        lines.append(f"{f.level}: {f.message}")
    lines += (record.processes or {}).get("lines", [])
    if df.empty:
        lines.append("no source found" + (" although the step varies: see the notes above"
                                          if nondeterministic(record, df) else
                                          f": nothing differed in {record.runs} runs; a race that fires more "
                                          f"rarely can hide (more --runs look harder)"))
    else:
        lines.append(f"{len(df)} source(s), ranked (what to fix first):")
        for r in df.itertuples():
            where = f"step {r.first_step}, " if record.steps > 1 else ""
            across = "" if r.seen_across == "runs" else " across processes"
            lines.append(f"  #{r.rank} {r.op_name} ({r.op_type}) kind={r.kind}{across}: {where}{r.distinct_values} "
                         f"distinct values in {r.runs} {'processes' if across else 'runs'} ({r.runs_differing} off "
                         f"the common one), {r.downstream_differing} differing ops after it"
                         f"{'' if r.affects_result else ', does not reach the result'}"
                         + ("" if r.max_abs_diff != r.max_abs_diff else  # NaN: no magnitude pass (across processes)
                            f"; max |diff| {r.max_abs_diff:.3g}, {r.max_ulp_diff:.3g} ulp, "
                            f"{100 * r.frac_elements_differing:.3g}% of elements"))
            if r.source_location:
                lines.append(f"     at {r.source_location}")
            if r.known_remedy:
                lines.append(f"     remedy: {r.known_remedy}")
        top = df.iloc[0]
        lines.append(f"{top.op_name} is the first bad op" + (f" (step {top.first_step})" if record.steps > 1 else ""))
    if csv_path is not None:
        lines.append(f"report: {csv_path} (raw runs: {paths(csv_path.parent, csv_path.name[:-4])[1]})")
    return lines
