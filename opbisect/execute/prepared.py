"""The prepared step: built once, then run by every pass of `trace`, by `verify` and by their child processes.

    prepare(...)
      load_target                  targets/loader.py; TensorFlowSetup: TensorFlow set up for the device when the
                                   script imports it, before any op runs
      trace_step                   trace/trace.py
      seeded.restarted             each seeded stateful random op started anew every run (execute/seeded.py)
      patched                      `trace --patch`: the chosen ops replaced, the step traced again
      taps.fingerprinter_for       capture/taps.py (capture/fingerprint.py)
      restored, Snapshot           the state restored before every run (execute/snapshot.py)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import re
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from .. import tfcompat
from ..errors import CannotTest, TargetError, UsageError
from ..record.model import Finding
from ..words import listed


@dataclasses.dataclass
class Prepared:
    tf: Any
    kind: str  # "cpu" or "gpu"
    target: Any  # targets.loader.Target (its step the restarted, and under --patch the patched, step)
    trace: Any  # trace.trace.Trace of that step
    restart: Any  # execute.seeded.Restart
    fingerprinter: Any  # capture.fingerprint.Fingerprinter
    restored: dict  # variable key -> variable: the state restored before every run
    state_fps: Callable[[], dict]  # every variable's fingerprint now
    value_fps: Callable[[list], list]  # fingerprints of a list of tensors
    initial_state: dict  # every variable's fingerprint as the script created it
    findings: list[Finding] = dataclasses.field(default_factory=list)  # what preparing it noted
    patched: list[str] = dataclasses.field(default_factory=list)  # --patch: the ops replaced

    def snapshot(self):
        """The restored state as it is now, restored (and its random ops restarted) before each run."""
        from .snapshot import Snapshot

        return Snapshot(self.restored, self.restart)


def prepare(options, setup: Callable[[Any], None] = lambda tf: None, lap: Callable[[str], None] = lambda stage: None,
            starting: dict | None = None, contexts: tuple = ()) -> Prepared:
    """The step `options` name (a command's settings: settings.StepOptions, its `patch` and `steps`, and trace's
    `tap_every`), ready to run.
    `setup(tf)` runs right after TensorFlow is imported (process-wide switches); `starting` ({variable key: value})
    overwrites the script's values (a child of verify); `contexts` are held while the script runs (seeds pinned,
    the variables' making recorded). A script that defines no target runs as `python script ARGS` to its training
    call."""
    from ..capture import builder
    from ..targets.loader import load_target
    from ..trace.trace import trace_step
    from .seeded import restarted

    tensorflow = TensorFlowSetup(options.device, setup)  # when the script imports it (its Keras is its own choice)
    target = load_target(options.script, tensorflow.watching(), *contexts, options=options)
    tf, kind = tensorflow.started()
    lap("load the script" if target.intercepted is None else "run the script to its training call")
    trace = trace_step(target, target.make_inputs())
    target, trace, restart = restarted(target, trace)
    lap("trace")
    target, trace, replaced, findings = patched(options.patch, target, trace)
    if getattr(options, "tap_every", False):  # trace's --tap-every-tensor: before the taps' count picks the digest
        trace = builder.every_tensor_tapped(trace)
    findings += _intercepted(target.intercepted)
    return _fingerprinted(Prepared(tf=tf, kind=kind, target=target, trace=trace, restart=restart, fingerprinter=None,
                                   restored={}, state_fps=None, value_fps=None, initial_state={}, findings=findings,
                                   patched=replaced), options.fingerprint, starting)


def _intercepted(caught) -> list[Finding]:
    if caught is None:
        return []
    what = f"{caught.kind} of {caught.name}" if caught.name else caught.kind
    taken = len(caught.batches or caught.calls)
    return [Finding("note", f"intercepted: the script ran {caught.seconds} s to its training call at "
                            f"{caught.where or 'an unknown line'} ({what}); {taken} step(s) taken; its training was "
                            f"stopped there")]


def _fingerprinted(step: Prepared, fingerprint: str, starting: dict | None) -> Prepared:
    """The prepared step with its fingerprinters, the state as the script created it, and the state restored before
    every run (`starting` written into it)."""
    from ..capture import taps

    fp, note = taps.fingerprinter_for(step.trace, step.kind, fingerprint)
    if note:
        step.findings.append(Finding("note", f"fingerprint: {fp.name}, because {note}"))
    state_fps = taps.make_state_fingerprinter(step.trace.variables, fp)
    initial_state = state_fps()  # as the script created it: compared across processes
    restored = restored_variables(step.trace, step.target, step.restart)
    for key, value in (starting or {}).items():
        if key in restored:
            restored[key].assign(value)
    return dataclasses.replace(step, fingerprinter=fp, restored=restored, state_fps=state_fps,
                               value_fps=taps.make_value_fingerprinter(fp), initial_state=initial_state)


# What TensorFlow writes to stderr on every start where TF_CPP_MIN_LOG_LEVEL hides its own logging (absl's lines,
# and the CUDA probe of a CPU-only machine, escape it): dropped while it starts, every other line passed on.
STARTUP_NOISE = re.compile(r"Could not find cuda drivers on your machine|failed call to cuInit|"
                           r"All log messages before absl::InitializeLog\(\) is called|"
                           r"oneDNN custom operations are on|This TensorFlow binary is optimized|"
                           r"To enable the following instructions|rebuild TensorFlow with the appropriate compiler")


@contextlib.contextmanager
def _quiet_start():
    """Stderr (the file descriptor: TensorFlow's C++ writes there) into a file while TensorFlow starts, then passed
    on without STARTUP_NOISE; as it is where the user asked for TensorFlow's logging (TF_CPP_MIN_LOG_LEVEL 0)."""
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") in ("", "0"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = [line for line in caught.read().decode(errors="replace").splitlines(keepends=True)
                    if not STARTUP_NOISE.search(line)]
            sys.stderr.write("".join(kept))


class TensorFlowSetup:
    """TensorFlow set up for a device kind ('cpu' or 'gpu') before any op runs, and not before the user's script
    imports it (targets/imports.py says why): `watching()` holds while the script runs; `started()` gives (tf, kind),
    importing TensorFlow now where the script never did. `setup(tf)`: process-wide switches, right after."""

    def __init__(self, device: str, setup: Callable[[Any], None] = lambda tf: None):
        self.device, self.setup = device, setup
        self.tf, self.kind = None, ""
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        tfcompat.parallel_xla_compilation(os.environ, tfcompat.installed_tensorflow())

    def watching(self):
        from ..targets.imports import when_imported
        from ..targets.script import passing_through

        return when_imported({"tensorflow": passing_through(self._ready)}, around={"tensorflow": _importing})

    def started(self) -> tuple[Any, str]:
        from ..targets.script import Passthrough

        if self.tf is None:
            with self.watching():
                try:
                    import tensorflow  # noqa: F401 - the watch sets it up
                except Passthrough as carried:
                    raise carried.error from None
                except ImportError as exc:
                    raise CannotTest(f"TensorFlow is not importable here ({exc}); pip install tensorflow") from None
        return self.tf, self.kind

    def _ready(self, tf) -> None:
        if tfcompat.too_old(tf.__version__):
            raise CannotTest(f"TensorFlow {tf.__version__} is older than opbisect supports (2.16 to 2.21): "
                             f"pip install 'tensorflow>=2.16'")
        with _quiet_start():  # the CUDA probe of a machine without a GPU writes to stderr here
            gpus = tf.config.list_physical_devices("GPU")
        if self.device == "gpu" and not gpus:
            raise CannotTest("--device gpu, but TensorFlow sees no GPU")
        if self.device == "cpu" and gpus:
            try:
                tf.config.set_visible_devices([], "GPU")
            except RuntimeError:  # only from Python: the command line starts TensorFlow here, before any op
                raise UsageError("device 'cpu' asked for in a process whose TensorFlow has already started on its "
                                 "GPU; run opbisect in a fresh process (the command line) or hide the GPU first "
                                 "(CUDA_VISIBLE_DEVICES=)") from None
        self.tf, self.kind = tf, ("gpu" if gpus and self.device != "cpu" else "cpu")
        self.setup(tf)


@contextlib.contextmanager
def _importing():
    """TensorFlow's own import, quietly; one that fails inside TensorFlow cannot test this revision (not the user's
    error: the script only imported it)."""
    from ..targets.script import Passthrough

    try:
        with _quiet_start():
            yield
    except ImportError as exc:
        raise Passthrough(CannotTest(f"TensorFlow is not importable here ({exc}); pip install tensorflow")) from None


def setup_tensorflow(device: str):
    """Import TensorFlow (where nothing has yet) and pick the device kind ('cpu' or 'gpu') before any op runs."""
    return TensorFlowSetup(device).started()


def device_name(kind: str) -> str:
    """The TensorFlow device a replay runs on: the step's own kind of device."""
    return "/device:GPU:0" if kind == "gpu" else "/device:CPU:0"


def environment(tf, kind: str) -> dict:
    build = tf.sysconfig.get_build_info()
    gpu = gpu_name(tf, kind)
    info = {"tf_version": tf.__version__, "python": platform.python_version(), "device": device_label(kind, gpu),
            "cuda": build.get("cuda_version", ""), "cudnn": build.get("cudnn_version", ""), "gpu_name": gpu,
            "keras_version": ""}
    with contextlib.suppress(Exception):
        import keras

        info["keras_version"] = keras.__version__
    info["op_determinism"] = tfcompat.op_determinism_enabled()
    return info


def gpu_name(tf, kind: str) -> str:
    """The first GPU's model where the step runs on a GPU (else ""), read without starting TensorFlow's runtime (a
    script may configure its GPUs after)."""
    if kind != "gpu":
        return ""
    return tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0]).get("device_name", "")


def device_label(kind: str, gpu: str) -> str:
    """The device a step runs on as records name it: "CPU", or "GPU (<its model>)"."""
    return f"GPU ({gpu})" if kind == "gpu" else kind.upper()


def restored_variables(trace, target, restart) -> dict:
    """The variables restored before every run: the script's `variables` where it names them (else every variable
    the step uses), and always the state of the restarted random ops."""
    if target.variables is None:
        return dict(trace.variables)
    chosen = {id(v.handle) for v in target.variables} | {id(v.handle) for v in restart.variables.values()}
    used = {id(v.handle) for v in trace.variables.values()}
    unknown = [v.name for v in target.variables if id(v.handle) not in used]
    if unknown:
        raise TargetError(f"`variables` lists {unknown[0]}, which the step does not use")
    return {k: v for k, v in trace.variables.items() if id(v.handle) in chosen}


def patched(patch: str, target, trace) -> tuple:
    """`--patch`: the target and trace of the step with those ops replaced (their sites kept from the first
    trace), the ops replaced, and notes; else all as they were."""
    if not patch:
        return target, trace, [], []
    from ..graphdef.roundtrip import traced_again
    from ..patches.selection import choose
    from ..patches.step import PatchedStep

    step = PatchedStep(trace, choose(trace.graph, patch), for_tracing=True)  # rewritten once
    patched_target = dataclasses.replace(target, step=step.as_function(), fit=None)
    again = traced_again(patched_target, trace)
    notes = [Finding("note", f"traced with {len(step.replaced)} op(s) patched ({listed(step.replaced)}): the "
                             f"sources below are what the patched step still does")]
    notes += [Finding("warning", f"--patch left {op} as it is: {why}") for op, why in step.skipped.items()]
    if target.fit is not None:
        notes.append(Finding("note", "with --patch, model.fit itself is not run: the patched train step is "
                                     "analysed alone"))
    return patched_target, again, step.replaced, notes
