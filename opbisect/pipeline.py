"""The `opbisect trace` pipeline: load, trace, check, run, compare, measure, rank, report.

Each stage is its own module; this one only wires them together and decides nothing they could.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time

from . import capture, fingerprint, preflight, report
from .errors import CannotTest, TargetError
from .ir import Finding, state_id
from .run import Feeder, Runner, pinned_options
from .settings import TraceSettings
from .steps import analyse_steps
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
    return list(trace.output_names) + sorted(last.values())


def progress_display(enabled: bool):
    if not enabled:
        return contextlib.nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=True)


def run_trace(settings: TraceSettings, echo=print) -> int:
    settings.validate()
    if settings.processes > 1:
        from .processes import run_processes

        return run_processes(settings, echo)
    record, df, comparisons = experiment(settings)
    csv_path, _ = report.save(record, df, settings.out, settings.script.stem)
    for line in report.summary(record, df, comparisons, csv_path):
        echo(line)
    return 1 if report.nondeterministic(record, df) else 0


def experiment(settings: TraceSettings):
    """Run the whole in-process experiment: (record, ranked table, per-step comparisons)."""
    started = time.time()
    tf, kind = setup_tensorflow(settings.device)
    target = load_target(settings.script, settings.step_name, settings.inputs_name)
    args = target.make_inputs()
    trace = trace_step(target, args)
    findings = trace.graph.check() + preflight.checks(trace, target)
    fp, fp_note = fingerprint.for_device(kind, jit=bool(trace.jit_compile), choice=settings.fingerprint)
    if fp_note:
        findings.append(Finding("note", f"fingerprint: {fp.name}, because {fp_note}"))

    state_fps = capture.make_state_fingerprinter(trace.variables, fp)
    initial_state = state_fps()  # as the script created it: compared across processes
    restored = _restored_variables(trace, target)
    start = Snapshot(restored)
    output_fps = capture.make_value_fingerprinter(fp)
    taps, skipped = capture.tappable_tensors(trace)
    tapped = set(taps)
    results = [t for t in result_tensors(trace) if t in tapped]
    pinned = pinned_options(settings.pin_grappler)
    steps = settings.steps
    if target.form == "fit" and steps == 1:
        steps = target.steps_available  # every step of the fit, unless --steps says fewer
    feeder = Feeder(target, steps)

    with progress_display(settings.progress) as progress:
        runner = Runner(trace, target, state_fps, output_fps, progress)
        fit_runs = runner.fit(start, target.fit, settings.runs, "model.fit") if target.fit else None
        default_runs = runner.plain(start, feeder, settings.runs, None, "uninstrumented step")
        pinned_runs = runner.plain(start, feeder, settings.runs, pinned, "uninstrumented step, grappler pinned") \
            if pinned else None
        # When pinning hides the nondeterminism, a grappler rewrite causes it: analyse under the user's config.
        use_pinned = pinned is not None and not (pinned_runs.final().deterministic()
                                                 and not default_runs.final().deterministic())
        options = pinned if use_pinned else None
        analyses = analyse_steps(runner, trace, feeder, restored, start, capture.build(trace, taps, fp), fp,
                                 settings.runs, settings.magnitude_runs or settings.runs, options, results,
                                 default_runs.differing_batches())
    meta = {
        "script": str(settings.script), "form": target.form, "runs": settings.runs, "steps": steps,
        "metric_variables": metric_variables(target, trace),
        "fingerprinter": fp.name, "fingerprint": fp.key, "jit_compile": bool(trace.jit_compile),
        "ops": len(trace.graph), "variables": len(trace.variables), "restored_variables": len(restored),
        "initial_state": initial_state, "seconds": round(time.time() - started, 2), **environment(tf, kind),
    }
    record = report.Record(meta=meta, graph=trace.graph, findings=findings, skipped=skipped, results=results,
                           default=default_runs, pinned=pinned_runs, analyses=analyses,
                           analysis_config="pinned" if use_pinned else "default", fit=fit_runs)
    comparisons = record.comparisons()
    return record, report.table(record, comparisons), comparisons


def metric_variables(target, trace) -> list[str]:
    """Keys of the Keras metrics' variables (fit resets them every epoch; a step-by-step replay does not)."""
    model = getattr(target.fit, "model", None)
    if model is None:
        return []
    handles = {id(v.value.handle if hasattr(v, "value") else v.handle) for m in model.metrics for v in m.variables}
    return sorted(k for k, v in trace.variables.items() if id(v.handle) in handles)


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
    comparisons = record.comparisons()
    df = report.table(record, comparisons)
    stem = path.name[: -len(".runs.json")] if path.name.endswith(".runs.json") else path.stem
    csv_path = (Path(out) if out else path.parent) / f"{stem}.csv"
    report.write_csv(df, csv_path)
    for line in report.summary(record, df, comparisons, csv_path):
        echo(line)
    return 1 if report.nondeterministic(record, df) else 0
