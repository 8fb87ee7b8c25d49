"""Cross-process runs: the whole experiment in P fresh Python processes, compared op by op.

What differs only between processes (cuDNN autotuning's choice, a graph traced in hash-seed-dependent order,
an unseeded initializer) is invisible to runs inside one process. Each process runs `opbisect trace` on the
script and saves its record; the graphs are aligned by structure (opbisect.align), then compared:
- the traced graphs themselves: ops only one process has, and ops that sum the same inputs in another order
  (kind `order`);
- pre-flight: the variables as the script created them, and the batches;
- the result after the step(s), and op by op: an op that is deterministic inside every process but differs
  between processes while its aligned inputs agree is a source seen across processes.
Each process gets its own PYTHONHASHSEED (1..P) unless the environment sets one, so hash-order effects show
and the experiment repeats.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from . import report
from .align import align
from .compare import compare
from .errors import CannotTest, TargetError
from .ir import Finding
from .remedies import remedy

INITIAL_REMEDY = ("this variable starts with another value in another process: an unseeded initializer; call "
                  "keras.utils.set_random_seed(...) (or tf.random.set_seed) before creating it")
ORDER_REMEDY = ("the same inputs are summed in another order in another process (iteration over a set or a "
                "dict of strings while building the step: PYTHONHASHSEED): sum in a fixed order, e.g. sorted by "
                "name, or set PYTHONHASHSEED")


def child_command(settings, out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "opbisect", "trace", str(settings.script), "--runs", str(settings.runs),
           "--steps", str(settings.steps), "--out", str(out), "--device", settings.device, "--no-progress",
           "--fingerprint", settings.fingerprint, "--step", settings.step_name, "--inputs", settings.inputs_name]
    if settings.magnitude_runs:
        cmd += ["--magnitude-runs", str(settings.magnitude_runs)]
    if not settings.pin_grappler:
        cmd.append("--no-pin-grappler")
    return cmd


def run_children(settings, folder: Path) -> tuple[list, list[str]]:
    seeds = []
    records = []
    for i in range(settings.processes):
        env = dict(os.environ)
        env.setdefault("PYTHONHASHSEED", str(i + 1))
        seeds.append(env["PYTHONHASHSEED"])
        out = folder / f"process{i + 1}"
        done = subprocess.run(child_command(settings, out), capture_output=True, text=True, env=env)
        if done.returncode not in (0, 1):
            sys.stderr.write(done.stderr[-4000:])
            error = TargetError if done.returncode == 2 else CannotTest
            raise error(f"process {i + 1} of {settings.processes} failed (exit {done.returncode})")
        records.append(report.load(out / f"{settings.script.stem}.runs.json"))
        if settings.progress:
            print(f"opbisect: process {i + 1}/{settings.processes} done (PYTHONHASHSEED={seeds[-1]})",
                  file=sys.stderr)
    return records, seeds


def constant_within(record) -> dict[str, bool]:
    """Tensor id -> its value is the same in every instrumented run of step 1 of this process."""
    ins = record.analyses[0].instrumented
    return {t: len({run[i] for run in ins.fps}) == 1 for i, t in enumerate(ins.taps)}


def cross_process(records: list, seeds: list[str]) -> dict:
    """Compare the processes' records: findings, rows (seen across processes) and summary lines."""
    base = records[0]
    graph, taps = base.graph, base.analyses[0].instrumented.taps
    findings, rows, lines = [], [], []
    alignments = [align(graph, r.graph) for r in records[1:]]
    reordered = {}
    for i, al in enumerate(alignments, 2):
        if al.only_a or al.only_b:
            shown = ", ".join((al.only_a + al.only_b)[:4])
            findings.append(Finding("warning", f"the traced graphs differ between process 1 and {i}: "
                                               f"{len(al.only_a)} ops only in 1, {len(al.only_b)} only in {i} "
                                               f"({shown}); the step is built differently per process"))
        for a_op, b_op in al.reordered:
            reordered.setdefault(a_op, []).append((i, b_op))
    # pre-flight across processes: the variables as created, the batches
    initial = [r.meta.get("initial_state", {}) for r in records]
    differing_init = sorted(k for k in initial[0] if any(s.get(k) != initial[0][k] for s in initial[1:] if k in s))
    if differing_init:
        shown = ", ".join(differing_init[:4]) + (" ..." if len(differing_init) > 4 else "")
        findings.append(Finding("warning", f"{len(differing_init)} variable(s) start with different values in "
                                           f"different processes ({shown}): an unseeded initializer; call "
                                           f"keras.utils.set_random_seed(...) before building the model"))
    batches = [r.default.batches[0] for r in records]
    differing_steps = [k + 1 for k in range(len(batches[0])) if any(b[k] != batches[0][k] for b in batches[1:])]
    if differing_steps:
        findings.append(Finding("warning", f"input: the batch of step {differing_steps[0]} differs between "
                                           f"processes: seed the input pipeline (shuffle seeds, "
                                           f"tf.random.set_seed)"))
    finals = [r.default.final() for r in records]
    differ_vars = sorted(k for k in finals[0].after[0]
                         if any(f.after[0].get(k) != finals[0].after[0][k] for f in finals[1:]))
    differs = bool(differ_vars) or any(f.outputs[0] != finals[0].outputs[0] for f in finals[1:])
    lines.append(f"across {len(records)} processes (PYTHONHASHSEED {', '.join(seeds)}): "
                 + (f"{len(differ_vars)} of {len(finals[0].after[0])} variables differ after the step(s)"
                    if differs else "the first run of every process ends identically"))
    # op by op: a synthetic "run" per process, each process's first instrumented run mapped onto process 1
    within = [constant_within(r) for r in records]
    fps, before = [], []
    for p, r in enumerate(records):
        ins = r.analyses[0].instrumented
        index = {t: j for j, t in enumerate(ins.taps)}
        mapped = []
        for t in taps:
            other = t if p == 0 else alignments[p - 1].tensor(t)
            j = index.get(other) if other is not None else None
            if j is None or not within[p].get(other, False) or not within[0].get(t, False):
                mapped.append(hash((t, p)))  # missing, or varying inside a process: count it as differing
            else:
                mapped.append(ins.fps[0][j])
        fps.append(mapped)
        before.append(ins.before[0])
    comparison = compare(graph, taps, fps, before, base.results)
    in_process = {s.op for rec in records for _, c in rec.comparisons() for s in c.sources}
    for s in comparison.sources:
        if s.op in in_process:
            continue
        kind = "order" if s.op in reordered else s.kind
        rows.append(_row(graph, s, kind, len(records)))
    for op in reordered:
        if not any(r["op_name"] == op for r in rows):  # reordered, though the sum came out the same here
            rows.append({**_row(graph, None, "order", len(records), op=op), "distinct_values": 1})
    return {"processes": len(records), "hash_seeds": seeds, "rows": rows, "lines": lines, "differs": differs,
            "differing_variables": differ_vars}, findings


def _row(graph, source, kind: str, processes: int, op: str | None = None) -> dict:
    op = op or source.op
    op_type = graph.op_type(op)
    return {
        "op_name": op, "op_type": op_type, "kind": kind, "first_step": 1, "seen_across": "processes",
        "runs_differing": source.runs_differing if source else 0, "runs": processes,
        "distinct_values": source.distinct_values if source else 1,
        "downstream_differing": source.downstream_differing if source else 0,
        "affects_result": bool(source and source.affects_result), "max_abs_diff": float("nan"),
        "max_ulp_diff": float("nan"), "frac_elements_differing": float("nan"),
        "source_location": graph.site(op) or graph.attrs(op).get("library_site", ""),
        "known_remedy": {"order": ORDER_REMEDY, "state": INITIAL_REMEDY}.get(kind) or remedy(op_type, kind),
        "position": graph.position[op],
    }


def run_processes(settings, echo) -> int:
    with tempfile.TemporaryDirectory(prefix="opbisect-processes-") as tmp:
        records, seeds = run_children(settings, Path(tmp))
    merged = records[0]
    info, findings = cross_process(records, seeds)
    merged.processes = info
    merged.findings = merged.findings + findings
    merged.meta["processes"] = settings.processes
    comparisons = merged.comparisons()
    df = report.table(merged, comparisons)
    csv_path, _ = report.save(merged, df, settings.out, settings.script.stem)
    for line in report.summary(merged, df, comparisons, csv_path):
        echo(line)
    return 1 if report.nondeterministic(merged, df) else 0
