"""Named errors, each with the exit code a script can act on (git bisect's vocabulary)."""

EXIT_CLEAN = 0  # the step is deterministic
EXIT_FOUND = 1  # nondeterminism found
EXIT_USAGE = 2  # bad command line or bad input script
EXIT_CANNOT_TEST = 125  # opbisect could not run the experiment


class OpbisectError(Exception):
    """Base class: `str(err)` is the one-line message shown to the user."""

    exit_code = EXIT_USAGE


class UsageError(OpbisectError):
    """The command line or a file named on it is wrong."""


class TargetError(OpbisectError):
    """The user's script is wrong or raised: `user_traceback` holds its formatted traceback."""

    def __init__(self, message: str, user_traceback: str = ""):
        super().__init__(message)
        self.user_traceback = user_traceback


class CannotTest(OpbisectError):
    """Something outside the user's script stops the experiment (no GPU, state that cannot be restored)."""

    exit_code = EXIT_CANNOT_TEST


class GraphCheckError(OpbisectError):
    """`OpGraph.check()` found the traced graph unusable; the message says how to fix it."""

    exit_code = EXIT_CANNOT_TEST
