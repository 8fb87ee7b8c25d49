"""`opbisect run --patch SPEC train.py -- ARGS`: the user's whole training, unmodified, with only the named ops
replaced in its training steps (targets/intercept.py's hooks apply opbisect.deterministic): how a user keeps a fix
without editing the script."""

from __future__ import annotations

import runpy
import sys
import traceback
from pathlib import Path
from typing import Any

from .errors import EXIT_CANNOT_TEST, Terminated
from .fix import deterministic
from .settings import RunSettings
from .targets.intercept import hooked, trains


def run(settings: RunSettings) -> int:
    """The script's own exit code (125 where it raised)."""
    from .execute.prepared import setup_tensorflow
    from .targets.loader import importable, script_path

    settings.validate()
    script_path(settings.script)  # a path that cannot be resolved cannot be run
    setup_tensorflow(settings.device)
    with importable(settings.script):
        return run_patched(settings.script, list(settings.script_args), settings.patch)


class PatchHooks:
    """`opbisect run`: every training step of the script gets the ops `spec` names replaced (opbisect.deterministic):
    each Keras model before its train function is made, each custom loop's step at its first call."""

    def __init__(self, spec: str):
        self.spec = spec
        self.steps: dict[int, Any] = {}  # id(tf.function) -> its patched form, or None for a function that trains not
        self.busy = False  # patching a step traces it: its own calls are not the script's

    def make_train_function(self, model, make, args, kwargs):
        if getattr(model, "opbisect_patched", None) is None:
            deterministic(model, self.spec)
        made = make(model, *args, **kwargs)
        for function in (made, getattr(model, "train_function", None)):  # tf_keras returns it, Keras 3 sets it
            if function is not None:  # fit's loop around the patched train step: its graph is not the step's
                self.steps[id(function)] = None
        return made

    def step_call(self, function, args, kwargs, call):
        import tensorflow as tf

        if self.busy or not tf.executing_eagerly() or kwargs:
            return call()
        key = id(function)
        if key not in self.steps:
            self.busy = True
            try:
                training = trains(function.get_concrete_function(*args).graph)
                self.steps[key] = deterministic(function, self.spec) if training else None
            finally:
                self.busy = False
        patched = self.steps[key]
        if patched is None:
            return call()
        self.busy = True
        try:
            return patched(*args)
        finally:
            self.busy = False


def run_patched(path: Path, argv: list[str], spec: str) -> int:
    """`opbisect run --patch SPEC script -- ARGS`: the script's whole training, as `python script ARGS` runs it, with
    only the ops SPEC names replaced in its training steps; the script's exit code (125 where it raised)."""
    saved_argv = list(sys.argv)
    sys.argv = [str(path), *argv]
    try:
        with hooked(PatchHooks(spec)):
            runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except (KeyboardInterrupt, Terminated):
        raise
    except BaseException:  # noqa: BLE001 - the user's own code raised: show it, as python would
        traceback.print_exc()
        return EXIT_CANNOT_TEST
    finally:
        sys.argv = saved_argv
    return 0
