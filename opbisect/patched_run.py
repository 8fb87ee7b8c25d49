"""`opbisect run --patch SPEC train.py -- ARGS`: the user's whole training, unmodified, with only the named ops
replaced in its training steps (targets/intercept.py's hooks apply opbisect.deterministic): how a user keeps a fix
without editing the script."""

from __future__ import annotations

from .settings import RunSettings


def run(settings: RunSettings) -> int:
    """The script's own exit code (125 where it raised)."""
    from .execute.prepared import setup_tensorflow
    from .targets.intercept import run_patched
    from .targets.loader import importable, script_path

    settings.validate()
    script_path(settings.script)  # a path that cannot be resolved cannot be run
    setup_tensorflow(settings.device)
    with importable(settings.script):
        return run_patched(settings.script, list(settings.script_args), settings.patch)
