"""The `opbisect trace` pipeline: load, trace, check, run, compare, measure, rank, report.

Each stage is its own module; this one only wires them together and decides nothing they could.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time

from . import capture, fingerprint, report
from .errors import CannotTest, TargetError
from .ir import Finding, state_id
from .magnitude import of_source
from .run import Runner, pinned_options
from .settings import TraceSettings
from .state import Snapshot
from .target import load_target
from .trace import trace_step


def setup_tensorflow(device: str):
    """Import TensorFlow and pick the device kind ('cpu' or 'gpu') before any op runs."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise CannotTest(f"TensorFlow is not importable here ({exc}); pip install tensorflow") from None
    gpus = tf.config.list_physical_devices("GPU")
    if device == "gpu" and not gpus:
        raise CannotTest("--device gpu, but TensorFlow sees no GPU")
    if device == "cpu" and gpus:
        tf.config.set_visible_devices([], "GPU")
    return tf, ("gpu" if gpus and device != "cpu" else "cpu")


def environment(tf, kind: str) -> dict:
    build = tf.sysconfig.get_build_info()
    info = {"tf_version": tf.__version__, "python": platform.python_version(), "device": kind.upper(),
            "cuda": build.get("cuda_version", ""), "cudnn": build.get("cudnn_version", ""), "gpu_name": ""}
    with contextlib.suppress(Exception):
        import keras

        info["keras_version"] = keras.__version__
    if kind == "gpu":
        details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
        info["gpu_name"] = details.get("device_name", "")
        info["device"] = f"GPU ({info['gpu_name']})"
    from tensorflow.python.framework.config import is_op_determinism_enabled

    info["op_determinism"] = bool(is_op_determinism_enabled())
    return info


def result_tensors(trace) -> list[str]:
    """The tensors that make up the step's result: its outputs and each variable's last write."""
    graph = trace.graph
    last = {}
    for op in graph.topo_order():
        for slot, var in graph.written(op):
            last[var] = state_id(op, slot)
    return [n for n in trace.output_names] + sorted(last.values())


def progress_display(enabled: bool):
    if not enabled:
        return contextlib.nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)


def run_trace(settings: TraceSettings, echo=print) -> int:
    settings.validate()
    started = time.time()
    tf, kind = setup_tensorflow(settings.device)
    target = load_target(settings.script, settings.step_name, settings.inputs_name)
    args = target.make_inputs()
    trace = trace_step(target, args)
    findings = trace.graph.check()
    fp, fp_note = fingerprint.for_device(kind, jit=bool(trace.jit_compile), choice=settings.fingerprint)
    if fp_note:
        findings.append(Finding("note", f"fingerprint: {fp.name}, because {fp_note}"))

    restored = _restored_variables(trace, target)
    snapshot = Snapshot(restored)
    state_fps = capture.make_state_fingerprinter(trace.variables, fp)
    output_fps = capture.make_value_fingerprinter(fp)
    taps, skipped = capture.tappable_tensors(trace)
    results = [t for t in result_tensors(trace) if t in set(taps)]
    pinned = pinned_options(settings.pin_grappler)

    with progress_display(settings.progress) as progress:
        runner = Runner(trace, target, snapshot, state_fps, output_fps, progress)
        default_runs = runner.plain(settings.runs, None, "uninstrumented step")
        pinned_runs = runner.plain(settings.runs, pinned, "uninstrumented step, grappler pinned") if pinned else None
        # When pinning hides the nondeterminism, a grappler rewrite causes it: analyse under the user's config.
        use_pinned = pinned is not None and not (pinned_runs.deterministic() and not default_runs.deterministic())
        options = pinned if use_pinned else None
        inst_runs, _ = runner.instrumented(capture.build(trace, taps, fp), settings.runs, options,
                                           "instrumented step")
        partial = report.Record(
            meta={}, graph=trace.graph, findings=findings, skipped=skipped, results=results,
            default=default_runs, pinned=pinned_runs, instrumented=inst_runs,
            analysis_config="pinned" if use_pinned else "default", magnitudes={}, magnitude_runs=0)
        comparison = partial.compare()
        magnitudes, mag_runs = {}, settings.magnitude_runs or settings.runs
        full = [t for s in comparison.sources for t in s.tensors]
        if full:
            _, arrays = runner.instrumented(capture.build(trace, [], fp, full), mag_runs, options,
                                            "magnitudes of the sources")
            column = {t: [run[i] for run in arrays] for i, t in enumerate(full)}
            magnitudes = {s.op: of_source([column[t] for t in s.tensors]) for s in comparison.sources}

    partial.meta = {
        "script": str(settings.script), "form": target.form, "runs": settings.runs, "fingerprinter": fp.name, "fingerprint": fp.key,
        "jit_compile": bool(trace.jit_compile), "ops": len(trace.graph), "variables": len(trace.variables),
        "restored_variables": len(restored), "seconds": round(time.time() - started, 2),
        **environment(tf, kind),
    }
    partial.magnitudes, partial.magnitude_runs = magnitudes, (mag_runs if full else 0)
    df = report.table(partial, comparison)
    csv_path, _ = report.save(partial, df, settings.out, target.name)
    for line in report.summary(partial, df, comparison, csv_path):
        echo(line)
    return 1 if report.nondeterministic(partial, df) else 0


def _restored_variables(trace, target) -> dict:
    if target.variables is None:
        return dict(trace.variables)
    chosen = {id(v.handle) for v in target.variables}
    used = {id(v.handle) for v in trace.variables.values()}
    unknown = [v.name for v in target.variables if id(v.handle) not in used]
    if unknown:
        raise TargetError(f"`variables` lists {unknown[0]}, which the step does not use")
    return {k: v for k, v in trace.variables.items() if id(v.handle) in chosen}


def rerun_report(path, out=None, echo=print) -> int:
    """Re-make the CSV and the summary from a saved record, without running anything."""
    from pathlib import Path

    path = Path(path)
    record = report.load(path)
    comparison = record.compare()
    df = report.table(record, comparison)
    stem = path.name[: -len(".runs.json")] if path.name.endswith(".runs.json") else path.stem
    csv_path = (Path(out) if out else path.parent) / f"{stem}.csv"
    report._atomic_write(csv_path, lambda fh: df.to_csv(fh, index=False))  # noqa: SLF001
    for line in report.summary(record, df, comparison, csv_path):
        echo(line)
    return 1 if report.nondeterministic(record, df) else 0
