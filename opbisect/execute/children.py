"""Child processes: `opbisect COMMAND ...` in a fresh Python, one protocol for all of them (fix's rounds and its
verify, --processes, the fresh-process check): a child gives its verdict (0 or 1) and leaves its record where the
parent said; any other exit is the parent's too, by the contract, said once.

    exit of the child                  the parent
    0, 1                               reads the child's record
    125, 128, 129, 130, 143            exits the same, with the child's own `opbisect:` line (and the user's
                                       traceback where the child showed one), prefixed with what the child was
    anything else (170, a crash)       exits 170 (an opbisect bug), with the child's last lines

A child ends with its parent: on any exception or signal in the parent, and (Linux) when the parent dies outright.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import NoReturn

from ..errors import (
    EXIT_CANNOT_TEST,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    EXIT_WRITE,
    OpbisectError,
)
from ..record import store

PIPE = subprocess.PIPE
PASSED_ON = (EXIT_CANNOT_TEST, EXIT_USAGE, EXIT_WRITE, EXIT_INTERRUPTED, EXIT_TERMINATED)
VERDICTS = (0, 1)


class ChildFailed(OpbisectError):
    """A child exited with no verdict: the parent exits as the contract says (`exit_code`)."""

    def __init__(self, message: str, exit_code: int, shown: str = ""):
        super().__init__(message)
        self.exit_code = exit_code
        self.shown = shown  # what the parent prints before its one line (the user's traceback, or a crash's tail)


def leave_now(code: int) -> NoReturn:
    """End this child once its result is written: exit handlers run (the user script's too), the interpreter's
    teardown does not. With TensorFlow loaded that teardown took 0.65 s on the 2-core CPU, time the parent spends
    waiting for an answer it already has; the child's script output is scratch, so objects it left unclosed go too."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def die_with_parent() -> None:
    """In the child, before exec: ask the kernel for SIGTERM when the parent dies (Linux prctl)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def start(cmd: list[str], env: dict, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(cmd, env=env, text=True, preexec_fn=die_with_parent if sys.platform.startswith("linux")
                            else None, **kwargs)


def finish(proc: subprocess.Popen, cmd: list[str]) -> subprocess.CompletedProcess:
    """Wait for a child started with pipes; on any exception here (Ctrl-C, SIGTERM) it is ended first."""
    try:
        out, err = proc.communicate()
    except BaseException:
        end(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def end(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s, with a second Ctrl-C held meanwhile (it must not leave the child behind)."""
    with store.signals_held():
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(cmd: list[str], env: dict) -> subprocess.CompletedProcess:
    """`cmd` in a child process, its output kept."""
    return finish(start(cmd, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE), cmd)


def run_telling(cmd: list[str], env: dict, tell: Callable[[str], None]) -> subprocess.CompletedProcess:
    """`cmd` in a child process, its output kept, each line of its stderr passed to `tell` as it comes: a child's
    progress shown while it runs (fix's verify of BERT-base ran over 10 minutes on an H100 without a line)."""
    proc = start(cmd, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out: list[str] = []
    drain = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)  # a full pipe would block
    drain.start()
    err: list[str] = []
    try:
        for line in proc.stderr:
            err.append(line)
            tell(line.rstrip("\n"))
        proc.wait()
        drain.join()
    except BaseException:
        end(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, "".join(out), "".join(err))


def command_line(command: str, argv: list[str]) -> list[str]:
    """`opbisect COMMAND ARGV` in a fresh Python."""
    return [sys.executable, "-m", "opbisect", command, *argv]


def verdict(done: subprocess.CompletedProcess, what: str) -> int:
    """The child's verdict (0 or 1); any other exit raises ChildFailed as the contract says."""
    if done.returncode in VERDICTS:
        return done.returncode
    raise failure(done.returncode, done.stderr, what)


def failure(code: int, stderr: str, what: str) -> ChildFailed:
    """The parent's error for a child that exited `code` with `stderr`: its own `opbisect:` line, once."""
    lines = stderr.rstrip().splitlines()
    said = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith("opbisect: ")), None)
    if code in PASSED_ON and said is not None:
        before = "\n".join(lines[:said]).strip()
        shown = _user_traceback(before)
        return ChildFailed(f"{what}: {lines[said][len('opbisect: '):]}", code, shown)
    if code in PASSED_ON:
        return ChildFailed(f"{what} exited {code}", code, "\n".join(lines[-20:]))
    tail = "\n".join(lines[-40:])
    return ChildFailed(f"{what} failed (exit {code}): an opbisect bug, its last lines above", 170, tail)


def _user_traceback(text: str) -> str:
    """The user's traceback the child printed before its line (from its last 'Traceback' on), or nothing."""
    start = text.rfind("Traceback (most recent call last):")
    return text[start:] + "\n" if start >= 0 else ""
