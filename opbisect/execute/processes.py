"""Fresh processes: the whole experiment in P child processes, each `opbisect trace` with the same settings.

Each child gets its own PYTHONHASHSEED (1..P) unless the environment sets one, so hash-order effects show and
the experiment repeats. A child ends with its parent: on any exception or signal in the parent, and (Linux)
when the parent dies outright.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

from ..errors import EXIT_CANNOT_TEST, EXIT_USAGE, CannotTest, InternalError, UsageError
from ..record import store


def die_with_parent() -> None:
    """In the child, before exec: ask the kernel for SIGTERM when the parent dies (Linux prctl)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run_child(cmd: list[str], env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)
    try:
        out, err = proc.communicate()
    except BaseException:
        with store.signals_held():  # a second Ctrl-C must not cut this short and leave the child behind
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_children(settings, folder: Path, progress=print) -> tuple[list, list[str]]:
    """Run the experiment in `settings.processes` fresh processes; their records and hash seeds."""
    records, seeds = [], []
    for i in range(settings.processes):
        env = dict(os.environ)
        env.setdefault("PYTHONHASHSEED", str(i + 1))
        seeds.append(env["PYTHONHASHSEED"])
        child = dataclasses.replace(settings, processes=1, out=folder / f"process{i + 1}", progress=False, html=False)
        records.append(trace_in_child(child, env, f"process {i + 1} of {settings.processes}"))
        if settings.progress:
            progress(f"opbisect: process {i + 1}/{settings.processes} done (PYTHONHASHSEED={seeds[-1]})")
    return records, seeds


def child_error(code: int) -> type:
    """The error a child's exit code names (not 0 or 1): cannot test, usage, or else internal."""
    return {EXIT_CANNOT_TEST: CannotTest, EXIT_USAGE: UsageError}.get(code, InternalError)


def trace_in_child(child, env: dict, what: str):
    """`opbisect trace` with the child's settings in a fresh process: its record. A child that could not give a
    verdict raises the error its exit code names (its stderr's tail shown), never a verdict."""
    done = _run_child([sys.executable, "-m", "opbisect", "trace", *child.to_argv()], env)
    if done.returncode not in (0, 1):
        sys.stderr.write(done.stderr[-4000:])
        raise child_error(done.returncode)(f"{what} failed (exit {done.returncode})")
    return store.load(child.out / child.script.stem)
