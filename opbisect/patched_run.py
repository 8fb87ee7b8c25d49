"""`opbisect run [--patch SPEC] [--seed N] train.py -- ARGS`: the user's whole training, unmodified, with only the named
ops replaced in its training steps (targets/intercept.py's hooks apply opbisect.deterministic) and the seeds pinned:
how a user keeps a fix without editing the script. At its end it prints a digest of the trained state, the user's
own test made easy: two fresh runs that print one digest trained to the same bits.

    run(settings)
      check_patch             the spec read before the script runs: a bad one is one line, 128
      fix_conditions          warnings where a fix's patch runs without what its user's test had
      ScriptRunner.run        targets/script.py: the script as python runs it, with
        TensorFlowSetup         TensorFlow set up when the script imports it; device_conditions: a warning where
                                the fix was checked on another device
        pinned                  --seed: every seed pinned (targets/seeding.py)
        hooked(PatchHooks)      each training step patched, its state digested after each step (--steps, --digests)
      its exit                the script's own: sys.exit passed on as python would; its own error 125
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from . import tfcompat
from .deterministic import deterministic
from .errors import LacksPatchedOps, UsageError
from .execute import digest
from .patches.selection import FIX_CSV_NAME, csv_paths
from .record.store import FIX_RECORD
from .record.verification import XLA_FLAGS
from .settings import RunSettings
from .targets.intercept import Point, TrainingCalls, function_name, hooked, trains
from .targets.script import ScriptStop


class StepsDone(ScriptStop):
    """--steps K: the script's K-th training step has run."""


class PatchHooks:
    """Every training step of the script gets the ops `spec` names replaced (opbisect.deterministic; nothing where
    `spec` is empty): each Keras model before its train function is made, each custom loop's step at its first
    call. From the training call `at` names on (the first by default: the one a patch of `fix --at` was made for),
    the state is digested at that call and after each step where `steps` or `keep` asks."""

    def __init__(self, spec: str, steps: int = 0, keep: bool = False, at: str = ""):
        self.spec, self.limit, self.keep, self.at = spec, steps, keep, Point.parse(at)
        self.reached = self.at.kind == "any"  # steps before the point run patched, neither digested nor counted
        self.counted = TrainingCalls(self.at)
        self.steps: dict[int, Any] = {}  # id(tf.function) -> its patched form (or itself), None: trains not
        self.busy = False  # patching a step traces it, fit runs Keras' functions: their calls are not steps
        self.models: dict[int, Any] = {}  # id -> each Keras model the script trained
        self.variables: dict[int, list] = {}  # id(tf.function) -> the variables each training step reads
        self.digests: list[dict[str, str]] = []  # per variable: at the first training call, then after each step
        self.calls_of: list[str] = []  # for each digest, the training step it was taken at (as --at names its call)
        self.replaced: set[str] = set()  # ops replaced in any step
        self.patched: dict[int, Any] = {}  # id -> each patched step that ran (a model's, anew after each compile)

    # -- Keras: the train function fit and train_on_batch run --------------------------------------------------
    def make_train_function(self, model, make, args, kwargs):
        self.reached = self.counted.fit() or self.reached
        if self.spec and getattr(model, "opbisect_patched", None) is None:
            deterministic(model, self.spec, strict=self._first())
        made = make(model, *args, **kwargs)
        function = made if made is not None else model.train_function  # tf_keras returns it, Keras 3 sets it
        if getattr(function, "opbisect_call", None):  # made before, by an earlier fit: counted already
            return function
        self.steps[id(function)] = None  # fit's loop around the patched train step: its graph is not the step's
        self.models[id(model)] = model
        # the optimizer's slots may appear at the first call (tf_keras makes them as it traces): read each time
        call = f"fit:{self.counted.fits}"
        model.train_function = self._counted(function, lambda: _model_variables(model), model, call)
        return model.train_function

    def _counted(self, function, variables, owner, call: str):
        def train_function(*args, **kwargs):
            self._before(variables(), call)
            self.busy = True  # Keras 3's train function is Python around its own tf.functions: not the script's steps
            try:
                out = function(*args, **kwargs)
            finally:
                self.busy = False
            self._after(variables(), owner, call)
            return out
        train_function.opbisect_call = call  # the training call that made it: `--at` reaches its step there
        return train_function

    # -- a custom loop: a tf.function that computes gradients and writes variables -------------------------------
    def step_call(self, function, args, kwargs, call):
        import tensorflow as tf

        if self.busy or not tf.executing_eagerly() or kwargs:
            return call()
        key = id(function)
        if key not in self.steps:
            self.steps[key] = self._judged(function, args)
        step = self.steps[key]
        if step is None:
            return call()
        name = function_name(function)
        self.reached = self.counted.call(name) or self.reached
        self._before(self.variables[key], f"step:{name}")
        self.busy = True
        try:
            out = step(*args) if step is not function else call()
        finally:
            self.busy = False
        self._after(self.variables[key], step, f"step:{name}")
        return out

    def _judged(self, function, args):
        """The step to run in place of `function` (it, patched, or itself), or None where it trains nothing."""
        self.busy = True
        try:
            graph = function.get_concrete_function(*args).graph
            if not trains(graph):
                return None
            strict = self._first()
            self.variables[id(function)] = list(graph.variables)
            return deterministic(function, self.spec, strict=strict) if self.spec else function
        finally:
            self.busy = False

    def _first(self) -> bool:
        """Whether no training step was patched before: only the first has to have some of the patch's ops (one
        with none was made for another script: one line, 128); later ones may be other steps of this script, and
        so may every step where `--at` says the patch was made for a later one."""
        return not (self.models or self.variables) and self.at.kind == "any"

    # -- the state, step by step ---------------------------------------------------------------------------
    def _before(self, variables: list, call: str) -> None:
        if self.reached and not self.digests and (self.keep or self.limit):
            self.digests.append(digest.per_variable(variables))  # the state at the training call `at` names
            self.calls_of.append(call)

    def _after(self, variables: list, step, call: str) -> None:
        patched = getattr(step, "opbisect_patched", step)
        self.replaced.update(getattr(patched, "replaced", []) or [])
        if hasattr(patched, "lacking"):
            self.patched[id(patched)] = patched
        if not self.reached:
            return
        if self.keep or self.limit:
            self.digests.append(digest.per_variable(variables))
            self.calls_of.append(call)
        if self.limit and len(self.digests) > self.limit:
            raise StepsDone()

    @property
    def lacking(self) -> list[str]:
        """The ops the patch names that no training step had."""
        lacking = [set(patched.lacking) for patched in self.patched.values()]
        return sorted(set.intersection(*lacking)) if lacking else []

    @property
    def trained(self) -> bool:
        return bool(self.models or self.variables)

    def final_digest(self) -> tuple[str, int]:
        """One digest of every variable the script's training steps read, now; how many there are."""
        every = [_model_variables(m) for m in self.models.values()] + list(self.variables.values())
        seen = {id(v): v for variables in every for v in variables}
        digests = digest.per_variable(list(seen.values()))
        return digest.combined(digests), len(digests)


def _model_variables(model) -> list:
    """The tf.Variables a Keras model's training reads and writes: its weights and its optimizer's state (not its
    metrics', which fit resets and Keras 3 lists among the weights once they are built)."""
    from .targets.loader import flatten_variables

    optimizer = getattr(model, "optimizer", None)
    state = getattr(optimizer, "variables", [])
    every = flatten_variables(list(model.weights) + list(state() if callable(state) else state))
    metrics = {id(v) for v in flatten_variables([m.variables for m in getattr(model, "metrics", [])])}
    return [v for v in every if id(v) not in metrics]


def check_patch(spec: str) -> None:
    """Read every report or CSV a --patch spec names before the script runs (a missing, empty or foreign file is a
    usage error, one line); a spec whose CSVs name no op to replace is one too, with what to do instead."""
    from .patches.selection import read_spec

    if not spec:
        return
    named = read_spec(spec)
    if named.ops or named.other_items:
        return
    if named.not_ops:
        kinds = ", ".join(sorted(set(named.not_ops.values())))
        raise UsageError(f"--patch {spec} names no op to replace: its sources are of kind {kinds}, which no patch "
                         f"fixes (the report's remedies say what does: a seed, PYTHONHASHSEED, the input pipeline)")
    raise UsageError(f"--patch {spec} names no op to replace (a fix that found nothing to patch writes its patch.csv "
                     f"so): run the script as it is, or `opbisect run --seed N` where a seed is what the fix asks")


def fix_conditions(spec: str, seed: str) -> list[str]:
    """Warnings, before the script runs, where a fix's patch.csv is run without what that fix's user's test had:
    the environment its recommendation sets (a family switch, XLA's flags, PYTHONHASHSEED), its seed, its
    TensorFlow. A fix kept for months is run from a shell's history or a job file, and these are what it loses
    without a sound: two runs that then differ would look like the patch's failure."""
    from .record.fixing import Recommendation

    out = []
    for path, fix in _fixes(spec):
        rec = fix["recommendation"]
        missing = [f"{k}={v}" for k, v in sorted(rec.get("env", {}).items()) if not _has(k, v)]
        missing += [f"--seed {rec['seed']}"] if rec.get("seed") and rec["seed"] != seed else []
        if missing:
            known = {k: v for k, v in rec.items() if k in Recommendation.__dataclass_fields__}
            command = Recommendation(**known).command(fix.get("script", "SCRIPT"), fix.get("script_args", []))
            out.append(f"opbisect: warning: the fix that made {path} had two fresh runs agree with "
                       f"{', '.join(missing)} as well, not given here: two runs may differ (its command: {command})")
        made, now = fix.get("checked_on", {}).get("tensorflow"), tfcompat.installed_tensorflow()
        if made and now and made != now:
            out.append(f"opbisect: warning: the fix that made {path} was checked under TensorFlow {made}, and this "
                       f"is {now}: `opbisect verify --patch {path} SCRIPT` checks the patch under this one")
    return out


def device_conditions(spec: str, device: str) -> list[str]:
    """Warnings, as the script imports TensorFlow, where a fix's patch runs on another device than its user's test
    did ("CPU", "GPU (<model>)"): a GPU's sources are its kernels' choices, so another card, or a CPU, can vary in
    ops the fix never saw (BERT-base mixed's patch from an H200 gave 3 results in 10 runs on an H100, whose Triton
    GEMMs vary: reports/h100/shapes/README.md)."""
    out = []
    for path, fix in _fixes(spec):
        made = fix.get("checked_on", {}).get("device")
        if made and made != device:
            out.append(f"opbisect: warning: the fix that made {path} was checked on {made}, and this is {device}, "
                       f"where other ops may vary: `opbisect verify --patch {path} SCRIPT` checks the patch here, "
                       f"`opbisect fix` makes this device's")
    return out


def _fixes(spec: str):
    """(patch.csv, its fix record) for each CSV of `spec` that a fix made and recommends."""
    for path in csv_paths(spec):
        fix = _fix_beside(path)
        if (fix.get("recommendation") or {}).get("patch"):
            yield path, fix


def _fix_beside(path: Path) -> dict:
    """The fix record beside a fix's patch.csv ({} for another CSV, or a record this opbisect cannot read)."""
    if path.name != FIX_CSV_NAME:
        return {}
    try:
        return json.loads((path.parent / FIX_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _has(name: str, value: str) -> bool:
    """Whether this process's environment sets `name` to `value` (XLA_FLAGS: has each of the flags)."""
    given = os.environ.get(name)
    if name == XLA_FLAGS:
        return given is not None and set(value.split()) <= set(given.split())
    return given == value


def run(settings: RunSettings, echo=lambda line: print(line, file=sys.stderr)) -> int:
    """The script's own exit code (125 where its own code raised: the cli shows its error)."""
    from .targets.loader import importable
    from .targets.script import ScriptExit, ScriptRunner
    from .targets.seeding import KERAS, pinned

    settings.validate()
    runner = ScriptRunner(settings.script, settings.script_args)
    check_patch(settings.patch)
    for line in fix_conditions(settings.patch, settings.seed):
        echo(line)
    hooks = PatchHooks(settings.patch, settings.steps, keep=settings.digests != Path(), at=settings.at)
    seeds = pinned({KERAS}, int(settings.seed)) if settings.seed else contextlib.nullcontext()
    code = 0
    with importable(settings.script), warnings.catch_warnings():
        warnings.simplefilter("ignore", LacksPatchedOps)  # said once at the end: the ops no step had
        try:
            runner.run(_tensorflow(settings, echo).watching(), seeds, hooked(hooks), during="while it ran")
        except StepsDone:
            pass
        except ScriptExit as exc:
            if exc.message:
                print(exc.message, file=sys.stderr)  # as python prints it
            code = exc.code
    for line in _said(settings, hooks, code):
        echo(line)
    if settings.digests != Path():
        _write(settings.digests, {"steps": hooks.digests, "calls": hooks.calls_of})
    return code


def _tensorflow(settings: RunSettings, echo):
    """TensorFlow set up as the script imports it; then, with the device known and nothing built yet, the warnings
    where a fix was checked on another."""
    from .execute.prepared import TensorFlowSetup, device_label, gpu_name

    def on_import(tf):
        if not settings.patch:
            return
        for line in device_conditions(settings.patch, device_label(setup.kind, gpu_name(tf, setup.kind))):
            echo(line)

    setup = TensorFlowSetup(settings.device, setup=on_import)
    return setup


def _said(settings: RunSettings, hooks: PatchHooks, code: int) -> list[str]:
    if not hooks.trained:
        return ["opbisect: the script made no training call (Keras fit/train_on_batch, or a tf.function that "
                "computes gradients and writes variables): nothing was patched or digested"]
    out = []
    if settings.patch and not hooks.replaced:
        out.append(f"opbisect: warning: --patch {settings.patch} replaced no op in the steps the script trained "
                   f"with: it was made for another step (`opbisect fix` on this script makes one for it)")
    elif hooks.lacking:
        out.append(f"opbisect: warning: --patch {settings.patch} names {len(hooks.lacking)} op(s) that no training "
                   f"step had, e.g. {hooks.lacking[0]} (from another version of the script?); the rest were replaced")
    if code == 0:
        value, count = hooks.final_digest()
        steps = f" after {len(hooks.digests) - 1} training step(s) (--steps)" if settings.steps else ""
        out.append(f"opbisect: final weights {value} ({count} variables of the trained models and steps{steps}; "
                   f"two runs that print one digest trained to the same bits)")
    return out


def _write(path: Path, digests: dict) -> None:
    try:
        Path(path).write_text(json.dumps(digests))
    except OSError as exc:
        from .errors import ReportWriteError

        raise ReportWriteError(f"writing --digests {path} failed ({exc.strerror})") from None
