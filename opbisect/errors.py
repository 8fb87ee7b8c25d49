"""Named errors and the exit codes they map to: the contract `git bisect run` reads.

  0    the step is deterministic (the uninstrumented step, your grappler configuration)
  1    nondeterminism found
  125  this revision cannot be tested: the script fails to load, trace or run; no TensorFlow; no GPU;
       state that cannot be restored (git bisect skips the revision)
  128  usage error: bad flags, an unreadable or invalid record, an --out that cannot hold the report
       (git bisect aborts: a wrong command line must not mark revisions bad)
  129  the report could not be written (disk full, permissions changed during the run)
  130  interrupted (SIGINT); 143 terminated (SIGTERM)
  170  internal error: a bug in opbisect (never 0, 1 or 125, so it is never read as a verdict)
"""

import contextlib
import signal

EXIT_CLEAN = 0
EXIT_FOUND = 1
EXIT_CANNOT_TEST = 125
EXIT_USAGE = 128
EXIT_WRITE = 129
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
EXIT_INTERNAL = 170


class LacksPatchedOps(UserWarning):
    """A step lacks some of the ops a patch names (opbisect.deterministic warns of it, step by step; `opbisect run`
    leaves these out and says once at its end which ops no step had)."""


class OpbisectError(Exception):
    """Base class: `str(err)` is the one-line message shown to the user."""

    exit_code = EXIT_INTERNAL


def one_line(exc: BaseException) -> str:
    """An error's message as one line. TensorFlow re-raises an error from code it was tracing as a new one of the
    same class whose message is the user code's frames, then the message: that last line is the message."""
    text = str(exc)
    if "in user code:" not in text:
        return text
    last = [line.strip() for line in text.splitlines() if line.strip()][-1]
    prefix = f"{type(exc).__name__}: "
    return last[len(prefix):] if last.startswith(prefix) else last


class UsageError(OpbisectError):
    """The command line, or a file or folder named on it, is wrong."""

    exit_code = EXIT_USAGE


class RecordError(UsageError):
    """A file given as a record is not a valid opbisect record."""


class TargetError(OpbisectError):
    """The user's script is wrong or raised: this revision cannot be tested. `user_traceback` holds its
    formatted traceback."""

    exit_code = EXIT_CANNOT_TEST

    def __init__(self, message: str, user_traceback: str = ""):
        super().__init__(message)
        self.user_traceback = user_traceback


class CannotTest(OpbisectError):
    """Something outside the user's script stops the experiment (no TensorFlow, no GPU, state that cannot be
    restored)."""

    exit_code = EXIT_CANNOT_TEST


class GraphCheckError(OpbisectError):
    """`preflight.graph_findings` found the traced graph unusable; the message says how to fix it."""

    exit_code = EXIT_CANNOT_TEST


class InternalError(OpbisectError):
    """opbisect itself failed where the user's step ran: a bug to report."""

    exit_code = EXIT_INTERNAL


class ReportWriteError(OpbisectError):
    """The report could not be written; nothing was left half-written."""

    exit_code = EXIT_WRITE


class Terminated(BaseException):
    """Raised from a SIGTERM handler so that cleanup runs as for Ctrl-C."""


# The stop signals that came to this process (`on_stop`), kept so that one whose exception Python dropped still stops
# the run at the next `stop_if_came`.
_stops_came: list[int] = []


def on_stop(signum, frame) -> None:
    """SIGINT's and SIGTERM's handler: KeyboardInterrupt or Terminated, raised where the main thread is, and the
    signal kept. Where that is inside a __del__ or a weakref callback (TensorFlow's objects have many), Python drops
    the exception ("Exception ignored in ...") and the run would go on to its verdict: the one route found by which
    a SIGTERM ends a trace with exit 0, as one did in CI (planted in tests/test_contract.py)."""
    _stops_came.append(signum)
    raise _stop(signum)


@contextlib.contextmanager
def stops_caught():
    """`on_stop` handles SIGTERM and SIGINT while a command runs, and what was handled before comes back after. A
    SIGINT left ignored stays ignored (a background job of a non-interactive shell inherits it so). The stops that
    came are the command's own: forgotten after it (a later command in this process, a test's, starts clean)."""
    caught = [signal.SIGTERM] + ([signal.SIGINT] if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN else [])
    previous = {s: signal.signal(s, on_stop) for s in caught}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _stops_came.clear()


def stop_if_came() -> None:
    """Raise the first stop signal that came, if any: a checkpoint where one dropped would otherwise be lost (each
    run of the step, before a report moves into place, before the exit code)."""
    if _stops_came:
        raise _stop(_stops_came[0])


def _stop(signum: int) -> BaseException:
    """What a stop signal raises: Ctrl-C's KeyboardInterrupt, SIGTERM's Terminated."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated()
