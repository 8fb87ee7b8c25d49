"""`opbisect verify`: the plain step, the patched step and TensorFlow's switches, side by side from one state.

    run_verify(settings)
      ReportFolder(<stem>-verify).prepare()      record/store.py
      _Step (prepare: load, trace, snapshot)      execute/prepared.py
      VariantPass(plain), VariantPass(patched)    execute/passes.py on the experiment's Bench, patches/step.py
      timed_in_turn(plain, patched)               the two in turn, --timing-runs steps each
      children: --variant global | family | cpu   this module, in fresh processes (the switches are global;
                                                  cpu: the plain step on the CPU, the numerical reference)
      Verification + decide                       record/verification.py
      views                                       report/verify_view.py

A child restores the parent's starting values (by variable key) and checks that its inputs have the parent's
fingerprints; where either fails its numbers are not compared with the plain step's (`comparable`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from .errors import InternalError, TargetError, UsageError
from .execute.variants import Measured
from .record import store
from .record.verification import (
    CPU_REFERENCE,
    GLOBAL,
    PATCHED,
    PLAIN,
    XLA_FLAGS,
    XLA_SWITCHES,
    Variant,
    Verification,
    decide,
)
from .settings import VerifySettings

_GLOBAL_HOW = "tf.config.experimental.enable_op_determinism(), in a fresh process"


def run_verify(settings: VerifySettings, echo=print) -> int:
    from .report import verify_view  # here, not above: a child (a switch's run) needs no view, nor pandas

    settings.validate()
    if settings.variant:
        return _child(settings)
    from .targets.loader import script_path

    folder = store.ReportFolder(settings.out, f"{settings.script.stem}-verify", str(script_path(settings.script)))
    with folder.prepare():
        verification = experiment(settings)
        written = verify_view.write(verification, folder)
    for line in verify_view.lines(verification, written):
        echo(line)
    return verification.exit_code


@dataclasses.dataclass
class _Step:
    """The user's step, prepared (traced, its starting state saved), and once fed the bench its variants run on:
    the experiment's (execute/passes.py), so verify's runs restore, feed and fingerprint as trace's do."""

    prepared: object  # execute/prepared.Prepared
    snapshot: object
    device: str = ""  # the device it runs on, as the record names it
    bench: object = None  # execute/passes.Bench, once fed
    batches: tuple = ()  # the arguments of each step of one run (`feed`)
    inputs: list = dataclasses.field(default_factory=list)  # their fingerprints, checked by the children

    @property
    def trace(self):
        return self.prepared.trace

    @property
    def kind(self) -> str:
        return self.prepared.kind

    @property
    def fingerprinter(self) -> str:  # its --fingerprint key
        return self.prepared.fingerprinter.key

    def feed(self, steps: int) -> None:
        """Runs of `steps` consecutive steps from the data's first batch (fit_epochs' race fires in step 2 only)."""
        from .execute.passes import Bench
        from .execute.runner import Feeder, Runner

        p = self.prepared
        feeder = Feeder(p.target, steps)
        self.bench = Bench(Runner(p.trace, p.target, p.state_fps, p.value_fps), feeder, self.snapshot,
                           lambda stage: None)
        self.batches = tuple(feeder.run())
        self.inputs = self.bench.runner.arguments(self.batches)  # as the plain pass fingerprints a step's batch

    def variant(self, call):
        from .execute.passes import VariantPass

        return VariantPass(self.bench, call, self.batches)


def _load(settings: VerifySettings, starting: dict | None = None) -> _Step:
    from .execute.prepared import environment, prepare
    from .patches.selection import through_step

    def setup(tf):
        for gpu in tf.config.list_physical_devices("GPU"):  # the children share the GPU: take memory as needed
            try:
                tf.config.experimental.set_memory_growth(gpu, True)
            except RuntimeError:  # this process started TensorFlow's GPU already (verify called in-process): as it is
                break
        if settings.variant == "global":
            tf.config.experimental.enable_op_determinism()

    steps = settings.steps or through_step(settings.patch)  # the batches an intercepted script's step needs
    step = prepare(dataclasses.replace(settings, patch="", steps=steps), setup, starting=starting)  # patched below
    return _Step(step, step.snapshot(), environment(step.tf, step.kind)["device"])


def _measured_in_turn(step: _Step, calls: list, settings: VerifySettings) -> list[Measured]:
    """Each call's runs as a pass on the step's bench, one after the other (`--runs`, on to `--confirm-runs` where
    they agree; not for the CPU reference, whose bits are compared with none), then all timed in turn."""
    from .execute.passes import timed_in_turn

    passes = [step.variant(c) for c in calls]
    confirm = 0 if settings.variant == "cpu" else settings.confirming
    measured = [p.run(settings.runs, confirm) for p in passes]
    timed_in_turn(passes, measured, settings.timing_runs)
    return measured


def _configured(v: Variant, env: dict | None = None) -> Variant:
    """The variant's configuration as data, from what its name names (the names are made here, below), and the
    environment it runs under besides its family switches (`env`: XLA_FLAGS)."""
    parts = v.name.split(" + ")
    v.patched = parts[0] == PATCHED
    v.global_switch = v.name == GLOBAL
    v.switches = [p[:-2] for p in parts if p.endswith("=1")]
    v.env = {k: val for k, val in (env or {}).items() if k not in v.switches}
    return v


def _variant(name: str, how: str, measured, plain=None, comparable: bool = True, env: dict | None = None) -> Variant:
    from .execute.variants import difference, ratio_interval

    v = _configured(Variant(name=name, how=how, runs=len(measured.results), distinct=measured.distinct,
                            step_ms=measured.step_ms, timed=len(measured.samples), error=measured.error,
                            comparable=comparable), env)
    if plain is not None and plain.step_ms and v.step_ms is not None:
        v.ratio = round(v.step_ms / plain.step_ms, 3)
        if measured is not plain:
            v.ratio_low, v.ratio_high = ratio_interval(measured.samples, plain.samples) or (None, None)
    if plain is not None and comparable and measured.first and plain.first:
        m = difference(plain.first, measured.first)
        v.max_abs_diff, v.max_ulp = m.max_abs_diff, int(min(m.max_ulp_diff, 2 ** 62))
        if measured is not plain:
            v.unlike_plain = sorted(set(measured.unchanged) ^ set(plain.unchanged))
    return v


def experiment(settings: VerifySettings) -> Verification:
    from .execute.preflight import autotuned_convolutions
    from .patches.selection import choose
    from .report import verify_view
    from .targets.loader import importable

    with importable(settings.script):
        step = _load(settings)
        choice = choose(step.trace.graph, settings.patch)
        if not choice.ops and not choice.not_ops:
            raise UsageError("--patch names no op of this step")
        settings = dataclasses.replace(settings, steps=settings.steps or choice.through_step)  # the children too
        step.feed(settings.steps)
        began, say = time.monotonic(), _progress(settings)
        say(verify_view.starting(settings.runs, settings.confirming, settings.timing_runs))
        measured, patched, plain = _in_process(settings, step, choice)
        for k, (v, _) in enumerate(measured):  # run in turn: the last line has their seconds
            say(verify_view.finished(v, time.monotonic() - began if k == len(measured) - 1 else None))
        measured += _children(settings, step, plain, _switches(step, choice), _xla_switched(step), say)
    variants = _against_reference([v for v, _ in measured], [m for _, m in measured])
    tuned = bool(autotuned_convolutions(step.trace.graph, step.kind == "gpu"))
    for v in variants:
        v.autotuned = tuned and v.name != GLOBAL and not v.reference
    return Verification(script=str(settings.script), script_path=str(settings.script.resolve()), device=step.device,
                        patch=settings.patch, runs=settings.runs, replaced=patched.replaced, skipped=patched.skipped,
                        renamed=choice.renamed, not_ops=choice.not_ops, plain_spread=plain.spread, variants=variants,
                        recommendation=decide(variants), timing_runs=settings.timing_runs, steps=settings.steps,
                        confirm_runs=settings.confirming)


def _progress(settings: VerifySettings):
    """say(line): a line on stderr as verify starts and as each variant finishes (stdout keeps the answer), unless
    --no-progress; a child says nothing (its parent does)."""
    if not settings.progress or settings.variant:
        return lambda line: None
    return lambda line: print(line, file=sys.stderr, flush=True)


def _in_process(settings: VerifySettings, step: _Step, choice) -> tuple[list[tuple], object, object]:
    """([(variant, measured)] of the plain and the patched step, run side by side in this process; the patched step;
    the plain step's measurement)."""
    from .patches.step import PatchedStep

    patched = PatchedStep(step.trace, choice)
    calls = [step.trace.concrete, patched] if patched.replaced else [step.trace.concrete]
    plain, *fixed = _measured_in_turn(step, calls, settings)
    if plain.error:
        raise TargetError(f"the step raised {plain.error}")
    if fixed and fixed[0].error:
        raise InternalError(f"the patched step failed where the plain step ran ({fixed[0].error})")
    # nothing rewritten (the ops named have only a family switch): the plain step, not a variant
    fixed = fixed[0] if fixed else Measured(error="no op was replaced (the ops named have a family switch and no "
                                                  "rewrite, or are no op's own variation)")
    return [(_variant(PLAIN, "the step as written", plain, plain), plain),
            (_variant(PATCHED, f"{len(patched.replaced)} op(s) replaced by opbisect's patches", fixed, plain), fixed)
            ], patched, plain


def _switches(step: _Step, choice) -> tuple[list[str], list[str]]:
    """(the family switches of the chosen ops' types, those of the types with no rewrite: the patched step needs
    them)."""
    from .patches.registry import has_rewrite, switch_of

    types = {step.trace.graph.op_type(op) for op in choice.ops}
    return (sorted({switch_of(t) for t in types if switch_of(t)}),
            sorted({switch_of(t) for t in types if switch_of(t) and not has_rewrite(t)}))


def _xla_switched(step: _Step) -> bool:
    """Whether XLA's switches apply: XLA compiles the step on a GPU, with a TensorFlow whose XLA was checked to know
    their flags (XLA aborts on one it does not: TF 2.16's did)."""
    from . import tfcompat

    return (bool(step.trace.jit_compile) and step.kind == "gpu"
            and step.prepared.tf.__version__.startswith(tfcompat.XLA_FLAGS_CHECKED_ON))


def _against_reference(variants: list[Variant], measured: list) -> list[Variant]:
    """Each variant's difference from the CPU reference's first run, where the reference ran from the same state."""
    from .execute.variants import difference

    ref = next((m for v, m in zip(variants, measured) if v.reference and v.comparable and not v.error), None)
    if ref is None or not ref.first:
        return variants
    for v, m in zip(variants, measured):
        if not v.reference and v.comparable and m is not None and m.first:
            d = difference(ref.first, m.first)
            v.cpu_abs_diff, v.cpu_ulp = d.max_abs_diff, int(min(d.max_ulp_diff, 2 ** 62))
    return variants


@dataclasses.dataclass(frozen=True)
class _ChildRun:
    """A variant run in a fresh process: the switch it runs under (`variant`), its name, what runs, its environment."""

    variant: str
    name: str
    how: str
    env: dict


def _child_runs(settings: VerifySettings, switches: tuple[list[str], list[str]], xla: bool = False) -> list[_ChildRun]:
    """Unless --no-switches: the global switch, each family switch, and the patched step under each family switch
    some chosen op has instead of a rewrite; where XLA compiles the step on a GPU (`xla`), the patched step under
    each of XLA's switches. Under XLA what varies can be a kernel XLA picks, which capture cannot name: its taps
    change what XLA fuses and picks (BERT-base under mixed precision on an H100: the patched step gave 2-3 results
    in 10; one with XLA's fusion autotuner off on one host; on another, 2 in 10 with it and one in 200 with Triton's
    GEMMs off too)."""
    if not settings.switches:
        return []
    families, needed = switches
    runs = ([_ChildRun("global", GLOBAL, _GLOBAL_HOW, {})]
            + [_ChildRun("family", f"{n}=1", f"the environment variable {n}=1, in a fresh process", {n: "1"})
               for n in families]
            + [_ChildRun("patched", f"{PATCHED} + {n}=1", f"the patched step under {n}=1 (the ops with no rewrite), "
                         f"in a fresh process", {n: "1"}) for n in needed])
    if xla:
        runs += [_ChildRun("patched", f"{PATCHED} + XLA_FLAGS={flag}", f"the patched step with {what} (XLA_FLAGS="
                           f"{flag}), in a fresh process", {XLA_FLAGS: flag})
                 for flag, (what, _) in XLA_SWITCHES.items()]
    return runs


def _children(settings: VerifySettings, step: _Step, plain, switches: tuple[list[str], list[str]],
              xla: bool, say) -> list[tuple]:
    """(variant, measured) of each child process, each from the parent's starting state (`_child_runs`), and the
    plain step on the CPU where the step runs on a GPU (or --cpu-reference on): the numerical reference. Each is
    `say`d as it finishes."""
    reference = settings.cpu_reference == "on" or (settings.cpu_reference == "auto" and step.kind == "gpu")
    runs = _child_runs(settings, switches, xla)
    if not (runs or reference):
        return []
    with store.temporary("opbisect-verify-") as tmp:
        exchange = Path(tmp)
        np.savez(exchange / "start.npz", *[np.asarray(v.numpy()) for v in step.snapshot.saved])
        (exchange / "start.json").write_text(json.dumps({"keys": sorted(step.snapshot.keys), "inputs": step.inputs}))
        out = [_said(say, lambda run=run: _child_variant(settings, exchange, run, plain)) for run in runs]
        if reference:
            # The weighted sum digests the same bits alike on every device (the fused op computes it too), so
            # the child's inputs can be checked against the parent's; farmhash runs only on a CPU.
            same = "farmhash" if step.fingerprinter == "farmhash" else "wsum"
            v, m = _said(say, lambda: _child_variant(dataclasses.replace(settings, fingerprint=same), exchange,
                                                     _ChildRun("cpu", CPU_REFERENCE, _CPU_HOW, {}), plain))
            v.reference = True
            out.append((v, m))
    return out


def _said(say, run) -> tuple:
    """`run()`'s (variant, measured), said with the seconds it took."""
    from .report import verify_view

    began = time.monotonic()
    v, m = run()
    say(verify_view.finished(v, time.monotonic() - began))
    return v, m


_CPU_HOW = "the plain step on the CPU, in a fresh process: the numerical reference (not a remedy)"


def _child_variant(settings, exchange: Path, run: _ChildRun, plain) -> tuple:
    from .execute import children
    from .tfcompat import with_xla_flags

    child = dataclasses.replace(settings, variant=run.variant, exchange=exchange, switches=False, cpu_reference="off",
                                device="cpu" if run.variant == "cpu" else settings.device)
    done = children.run(children.command_line("verify", child.to_argv()), with_xla_flags(os.environ, run.env))
    result = exchange / f"{run.variant}.json"
    if done.returncode != 0 or not result.is_file():
        last = (done.stderr.strip().splitlines() or [""])[-1]
        return _configured(Variant(name=run.name, how=run.how, error=f"the child process failed (exit "
                                                                     f"{done.returncode}): {last}"), run.env), None
    got = json.loads(result.read_text())
    arrays = np.load(exchange / f"{run.variant}.npz")
    measured = Measured(results=got["results"], times=got["times"], timed=got["timed"],
                        first={n: arrays[f"arr_{i}"] for i, n in enumerate(got["names"])}, error=got["error"],
                        unchanged=got["unchanged"])
    result.unlink()
    return _variant(run.name, run.how, measured, plain, comparable=got["comparable"], env=run.env), measured


def _child(settings: VerifySettings) -> int:
    """In a fresh process under one switch: run the plain step from the parent's state, leave the results."""
    from .targets.loader import importable

    exchange = Path(settings.exchange)
    start = json.loads((exchange / "start.json").read_text())
    arrays = np.load(exchange / "start.npz")
    starting = {k: arrays[f"arr_{i}"] for i, k in enumerate(start["keys"])}
    with importable(settings.script):
        step = _load(settings, starting)
        step.feed(settings.steps or 1)
        call = step.trace.concrete
        if settings.variant == "patched":
            from .patches.selection import choose
            from .patches.step import PatchedStep

            call = PatchedStep(step.trace, choose(step.trace.graph, settings.patch))
        measured, = _measured_in_turn(step, [call], settings)
    comparable = sorted(step.snapshot.keys) == start["keys"] and step.inputs == start["inputs"]
    names = list(measured.first)
    np.savez(exchange / f"{settings.variant}.npz", *[measured.first[n] for n in names])
    (exchange / f"{settings.variant}.json").write_text(json.dumps({
        "results": [repr(r) for r in measured.results], "times": measured.times, "timed": measured.timed,
        "names": names,
        "error": measured.error, "comparable": comparable, "unchanged": measured.unchanged}))
    return 0
