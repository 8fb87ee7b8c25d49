"""Rank: order the sources by what to fix first.

The ranking rule (README, "Reading the report"):
  1. sources whose differences reach the step's result (an output or a variable's final value) first;
  2. then the earlier first differing step (with --steps): where the runs start to part;
  3. then the one that spoils more of the step: more differing ops downstream;
  4. then the larger share of differing elements, then the larger ULP distance;
  5. ties: the earlier op in the graph's topological order, then the op name.
A source that does not reach the result is harmless to reproducibility today, but is one rewrite away.
"""

from __future__ import annotations

import pandas as pd

COLUMNS = [
    "rank", "op_name", "op_type", "kind", "first_step", "seen_across", "runs_differing", "runs", "distinct_values",
    "downstream_differing",
    "affects_result", "max_abs_diff", "max_ulp_diff", "frac_elements_differing", "source_location",
    "known_remedy",
]

_ORDER = [("affects_result", False), ("first_step", True), ("downstream_differing", False),
          ("frac_elements_differing", False), ("max_ulp_diff", False), ("position", True), ("op_name", True)]


def rank(rows: pd.DataFrame) -> pd.DataFrame:
    """Sort `rows` (COLUMNS minus rank, plus `position`) by the ranking rule; number them from 1."""
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    keys, ascending = zip(*_ORDER)
    ordered = rows.sort_values(list(keys), ascending=list(ascending), kind="mergesort", na_position="last")
    ordered = ordered.reset_index(drop=True)
    ordered["rank"] = range(1, len(ordered) + 1)
    return ordered[COLUMNS]
