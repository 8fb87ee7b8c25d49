"""The user's own test, run: two fresh runs of the script side by side, compared after every training step.

    runs = UserTestRuns.started(settings, folder, intercepted, patch=..., seed=..., env=...)
        a script that trains: two `opbisect run SCRIPT --steps K --digests FILE` (the script as `python` runs it);
        the target contract, which trains nothing by itself: two fresh probes of its step (`trace --probe`)
    runs.compared(command) -> UserTest      each run's digests read back; the first step after which they differ,
                                            the variables that differ there and the training call it was in
    runs.stopped()                          both ended unread (the verdict no longer needs them)

`opbisect fix` runs it on its recommendation; `opbisect trace` where its step came out deterministic, so that its
exit 0 holds for the runs the user makes and not only for the training call it analysed.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from ..record import store
from ..record.model import UserTest
from ..settings import CHECK_STEPS, RunSettings, TraceSettings, shared
from ..tfcompat import with_xla_flags
from . import children
from .digest import combined, first_apart


class UserTestRuns:
    def __init__(self, runs: list[tuple], steps: int, read):
        self.runs, self.steps, self.read = runs, steps, read

    @classmethod
    def started(cls, settings, folder: Path, intercepted: bool, patch: str = "", seed: str = "",
                env: dict | None = None) -> "UserTestRuns":
        """Both runs started at once. `settings` (fix's or trace's) gives every option `run` shares by name: the
        device, `--at`, the script's arguments; `check_steps` the steps (0: to the script's end)."""
        # the target contract trains nothing by itself, so it has no end to run to: 0 takes the default there
        steps = settings.check_steps if intercepted else settings.check_steps or CHECK_STEPS
        settings = dataclasses.replace(settings, check_steps=steps)
        runs = [_started(settings, Path(folder) / f"check{i}", intercepted, patch, seed, env or {}) for i in (1, 2)]
        return cls(runs, steps, _run_digests if intercepted else _probe_digests)

    def stopped(self) -> None:
        for proc, _, _ in self.runs:
            children.end(proc)

    def compared(self, command: str) -> UserTest:
        digests, calls, failed = [], [], ""
        for proc, cmd, out in self.runs:
            done = children.finish(proc, cmd)
            if done.returncode != 0 or not Path(out).is_file():
                failed = failed or children.failure(done.returncode, done.stderr, "a run").args[0]
                continue
            steps_of, calls = self.read(out)
            digests.append(steps_of)
        ran = [len(d) - 1 for d in digests]
        if not failed and any(not d for d in digests):
            failed = "the script made no training call"
        if failed or len(digests) < 2:
            return UserTest(command=command, steps=self.steps, ran=ran, agreed=False, error=failed)
        apart = first_apart(*digests)
        return UserTest(command=command, steps=self.steps, ran=ran, agreed=apart is None and ran[0] == ran[1],
                        first_apart=apart[0] if apart else None, apart=apart[1] if apart else [],
                        final=[combined({k: str(v) for k, v in d[-1].items()}) for d in digests],
                        calls=list(dict.fromkeys(calls)),
                        apart_call=calls[apart[0]] if apart and apart[0] < len(calls) else "")


def _started(settings, folder: Path, intercepted: bool, patch: str, seed: str, env: dict) -> tuple:
    out = folder.with_suffix(".json")
    if intercepted:
        command = "run", shared(settings, RunSettings, patch=patch, seed=seed, steps=settings.check_steps,
                                digests=out)
    else:
        command = "trace", shared(settings, TraceSettings, patch=patch, seed=seed, steps=settings.check_steps,
                                  probe=out, fresh=False, progress=False, out=folder)
    cmd = children.command_line(command[0], command[1].to_argv())
    # side by side on one GPU: each takes memory as it needs it (TensorFlow takes the whole GPU otherwise, and the
    # second ran out of it on the H200); where memory is put changes no bit
    full = with_xla_flags({"TF_FORCE_GPU_ALLOW_GROWTH": "true", **os.environ}, env)
    return children.start(cmd, full, stdout=children.PIPE, stderr=children.PIPE), cmd, out


def _run_digests(path: Path) -> tuple[list[dict], list[str]]:
    """A run's digests, and the training call (as `--at` names it) each was taken in."""
    written = json.loads(Path(path).read_text())
    return written["steps"], written["calls"]


def _probe_digests(path: Path) -> tuple[list[dict], list[str]]:
    probe = store.load_probe(path)
    return [probe.initial, *probe.after], []
