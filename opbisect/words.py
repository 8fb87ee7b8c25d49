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


def confirmed_on(runs: int) -> str:
    """verify's runs past --runs (settings.VerifySettings.confirming), after "N runs of each variant"; "" for none."""
    return f" (those alike in all of them on to {runs})" if runs else ""


def ruled_out(bound: float, trials: str = "runs") -> str:
    """A bound on a rate of firing (record.model.rate_bound), in words: 'a difference firing in over 14% of runs is
    ruled out at 95%'. Two significant figures: a long user's test rules out rates near 1%."""
    return f"a difference firing in over {100 * bound:.2g}% of {trials} is ruled out at 95%"
