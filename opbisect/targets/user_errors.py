"""What a user needs to see of an error their own code raised: the one line that says what went wrong, and the
frames from their script on (not opbisect's or TensorFlow's)."""

from __future__ import annotations

import itertools
import linecache
import re
import traceback
from pathlib import Path


def user_traceback(exc: BaseException, path: Path) -> str:
    """What the user needs of `exc`'s traceback: the frames from their script on, without opbisect's own.

    Errors raised while tracing carry the user's frames in their message ("in user code:"), and errors raised
    while running the graph name where the failing op was defined; for those the message's frames in the
    script are shown instead of TensorFlow's internals.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    here = path.resolve()
    start = next((i for i, f in enumerate(frames) if Path(f.filename).resolve() == here), None)
    if start is not None:
        lines = ["Traceback (most recent call last):\n"] + traceback.format_list(frames[start:])
        if isinstance(exc, SyntaxError):  # the offending line is in the exception, not in a frame
            lines += traceback.format_exception_only(type(exc), exc)
        else:
            lines.append(f"{type(exc).__name__}: {exc}\n")
        return "".join(lines)
    if isinstance(exc, SyntaxError):
        return "".join(traceback.format_exception_only(type(exc), exc))
    text = str(exc)
    if "in user code:" in text:
        return text.strip() + "\n"
    shown = []
    for line in text.splitlines():
        if line.strip().startswith("File ") and str(here) in line:
            shown.append(line.rstrip() + "\n")
            number = line.split(", line ")[-1].split(",")[0]
            if number.isdigit():
                source = linecache.getline(str(here), int(number)).strip()
                if source:
                    shown.append(f"    {source}\n")
    return ("The failing op was created at:\n" + "".join(shown)) if shown else ""


def error_summary(exc: BaseException) -> str:
    """'<type>: <the one line of its text that says what went wrong>'."""
    name = type(exc).__name__
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(exc).splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return name
    at = 0
    if "in user code:" in lines[0]:  # after the frames: "ValueError: the batch is empty"
        at = max((i for i, x in enumerate(lines) if x.startswith(name + ":")), default=len(lines) - 1)
    elif lines[0].startswith("Graph execution error"):
        body = [i for i, x in enumerate(lines)
                if i and not x.startswith(("File ", "Detected at", "[[", "[Op:", "<stack traces unavailable>"))]
        at = body[0] if body else 0
    line = lines[at]
    if "Exception encountered when calling" in line and at + 1 < len(lines):
        # a Keras layer's wrapper: Keras' own message follows (one or more lines), then the layer's arguments
        said = itertools.takewhile(lambda x: not x.startswith("Arguments received"), lines[at + 1:])
        line = " ".join(said) or line
    return line if line.startswith(name + ":") else f"{name}: {line}"
