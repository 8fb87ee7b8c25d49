"""ScriptRunner: the one way opbisect runs a user's script, as `python script.py ARGS` runs it (coverage.py's
PyRunner in shape). trace, verify and fix stop it at its training call (targets/intercept.py) or read the target
contract from it (targets/loader.py); `opbisect run` runs it to its end with its training steps patched.

    runner = ScriptRunner(path, argv)     a folder or a file that is no Python script: usage (128); a missing
                                          file: cannot test at this revision (125)
    names = runner.run(contexts...)       sys.argv; a fresh module as __main__ (or as the contract's module);
                                          the file's code run in it; each context (hooks on TensorFlow and Keras,
                                          attached when the script imports them) held meanwhile

One policy for what comes out of a script:
- `sys.exit(...)`: ScriptExit, with the code and the message python would print;
- its own error (from its code, or a syntax error): ScriptError, a TargetError (125) whose traceback starts at the
  script's own frames, opbisect's and runpy's peeled off;
- opbisect's control flow (a training call taken: intercept.Intercepted) and opbisect's own errors raised by a hook
  while the script runs (carried as Passthrough, so that the script's own `except Exception` cannot swallow them),
  Ctrl-C and SIGTERM: raised as they are.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import sys
import tokenize
import types
from pathlib import Path

from ..errors import OpbisectError, TargetError, Terminated, UsageError
from .user_errors import error_summary, user_traceback

MAIN = "__main__"


class ScriptStop(BaseException):
    """opbisect's own way out of a script (a training call taken): a BaseException, past the script's handlers."""


class Passthrough(BaseException):
    """An opbisect error raised by a hook while the user's script runs, carried past the script's handlers."""

    def __init__(self, error: OpbisectError):
        super().__init__(str(error))
        self.error = error


def passing_through(function):
    """`function` as a hook the script's code calls: an OpbisectError it raises reaches opbisect, not the script."""

    def hook(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except OpbisectError as exc:
            raise Passthrough(exc) from None

    return hook


class ScriptExit(Exception):
    """The script called sys.exit: `code` as python would exit with it, `message` what python would print."""

    def __init__(self, value):
        if value is None or isinstance(value, int):
            self.code, self.message = value or 0, ""
        else:
            self.code, self.message = 1, str(value)
        super().__init__(f"sys.exit({value!r})")
        self.value = value


class ScriptError(TargetError):
    """The script's own code raised (this revision cannot be tested): `summary` names the error."""

    def __init__(self, message: str, user_traceback: str, summary: str):
        super().__init__(message, user_traceback)
        self.summary = summary


def checked_path(script) -> Path:
    """The script's path as given, once it names a Python file: a folder or a file of another kind is a usage error;
    a missing one cannot be tested (git bisect skips a revision that lacks it)."""
    path = Path(script)
    try:
        path.resolve()
    except (RuntimeError, OSError) as exc:  # a symbolic link loop
        raise TargetError(f"{script} cannot be loaded ({exc})") from None
    if path.is_dir() or (path.exists() and path.suffix != ".py"):
        raise UsageError(f"expected a Python script (train.py), got {path}")
    if not path.is_file():
        raise TargetError(f"no such file: {path}")
    return path


class ScriptRunner:
    def __init__(self, script, argv=(), module_name: str = MAIN):
        self.path = checked_path(script)
        self.argv = [str(a) for a in argv]
        self.module_name = module_name
        self.loaded: types.ModuleType | None = None  # the module the script ran in, once it has

    def code(self):
        try:
            with tokenize.open(self.path) as fh:  # honours the file's encoding declaration, as python does
                source = fh.read()
            return compile(source, str(self.path), "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise ScriptError(f"{self.path} has a syntax error (line {exc.lineno})", user_traceback(exc, self.path),
                              error_summary(exc)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise TargetError(f"{self.path} cannot be read ({exc})") from None

    def module(self) -> types.ModuleType:
        module = types.ModuleType(self.module_name)
        module.__file__ = str(self.path)
        module.__loader__ = importlib.machinery.SourceFileLoader(self.module_name, str(self.path))
        module.__builtins__ = sys.modules["builtins"]
        return module

    def run(self, *contexts, during: str = "") -> dict:
        """Run the script with `contexts` held (each entered in turn); its names. `during` ends the message of its
        own error ("before its training call")."""
        code, module = self.code(), self.module()
        self.loaded = module
        saved = (list(sys.argv), sys.modules.get(self.module_name), os.getcwd())
        sys.argv = [str(self.path), *self.argv]
        sys.modules[self.module_name] = module
        try:
            with contextlib.ExitStack() as stack:
                for context in contexts:
                    stack.enter_context(context)
                exec(code, module.__dict__)
        except SystemExit as exc:
            raise ScriptExit(exc.code) from None
        except Passthrough as carried:
            raise carried.error from None
        except (KeyboardInterrupt, Terminated, OpbisectError, ScriptStop):
            raise
        except BaseException as exc:  # noqa: BLE001 - the user's own code raised: shown as the user's
            summary = error_summary(exc)
            raise ScriptError(f"{self.path} raised {summary}{' ' + during if during else ''}",
                              user_traceback(exc, self.path), summary) from None
        finally:
            sys.argv = saved[0]
            if self.module_name == MAIN:
                _put_back(MAIN, saved[1])
            with contextlib.suppress(OSError):  # the next stage starts where the script did
                os.chdir(saved[2])
        return module.__dict__


def _put_back(name: str, module) -> None:
    if module is None:
        sys.modules.pop(name, None)
    else:
        sys.modules[name] = module
