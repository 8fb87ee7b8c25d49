"""Views of a record: each a small Reporter that renders one file of the report folder from the record alone.

To add a format: one module with a class that has `filename` and `render(record)`, listed in `reporters()`.
Views decide nothing: every fact they show is in the record (opbisect.analysis.facts made the decisions).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from ..record import store
from ..record.model import Record
from . import csv, json_view, text


class Reporter(Protocol):
    filename: str

    def render(self, record: Record) -> str | bytes:
        """The whole file's content."""


def reporters(html: bool = False) -> list[Reporter]:
    views: list[Reporter] = [csv.CsvReporter(), text.TextReporter(), json_view.JsonReporter()]
    if html:
        from . import html as html_view

        views.append(html_view.HtmlReporter())
    return views


def write(record: Record, folder: store.ReportFolder, html: bool = False,
          extra: dict[str, str | bytes] | None = None) -> Path:
    """Render every view into the staged folder (with `extra` files: the reproducers), then move it into place as
    one unit."""
    views = [(r.filename, r.render(record)) for r in reporters(html)]  # render all before writing any
    folder.write(store.RECORD, json.dumps(store.to_json(record)))
    for name, content in views + list((extra or {}).items()):
        folder.write(name, content)
    return folder.commit()
