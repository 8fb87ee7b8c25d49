"""Text shared by the findings and the views."""

from __future__ import annotations


def listed(names: list[str], most: int = 4) -> str:
    """The first `most` names, then " ..." if there are more (the line that lists them says how many)."""
    return ", ".join(names[:most]) + (" ..." if len(names) > most else "")
