"""The ranked CSV: one row per source, the columns of record.model.Source that are marked for the CSV."""

from __future__ import annotations

import dataclasses

import pandas as pd

from ..record.model import CSV_COLUMNS, Record

FILENAME = "sources.csv"


def frame(record: Record) -> pd.DataFrame:
    rows = [{k: v for k, v in dataclasses.asdict(s).items() if k in CSV_COLUMNS} for s in record.sources]
    return pd.DataFrame(rows, columns=CSV_COLUMNS)


class CsvReporter:
    filename = FILENAME

    def render(self, record: Record) -> str:
        return frame(record).to_csv(index=False)
