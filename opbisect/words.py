"""Text shared by the findings and the views."""

from __future__ import annotations

import re


def listed(names: list[str], most: int = 4) -> str:
    """The first `most` names, then " ..." if there are more (the line that lists them says how many)."""
    return ", ".join(names[:most]) + (" ..." if len(names) > most else "")


_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)?|[\x00-\x08\x0b-\x1f\x7f\x9b]")


def printable(text: str) -> str:
    """`text` without terminal control sequences or control characters (a record is read from a file: what it says
    must not set a terminal's title or colours); tabs and newlines stay."""
    return _CONTROL.sub("", text)
