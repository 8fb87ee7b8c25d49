"""Rank: order the sources by what to fix first.

The ranking rule (README, "Reading the report"):
  1. sources whose differences reach the step's result (an output or a variable's final value) first;
  2. then the earlier first differing step (with --steps): where the runs start to part;
  3. then the one that spoils more of the step: more differing ops downstream;
  4. then the larger share of differing elements, then the larger ULP distance (unmeasured last);
  5. ties: the earlier op in the graph's topological order, then the op name.
A source that does not reach the result is harmless to reproducibility today, but is one rewrite away.
"""

from __future__ import annotations

import dataclasses
import math

from ..record.model import Source


def _descending(value: float | None) -> float:
    return math.inf if value is None or value != value else -value


def rank(sources: list[Source]) -> list[Source]:
    """The sources sorted by the ranking rule, numbered from 1."""
    ordered = sorted(sources, key=lambda s: (not s.affects_result, s.first_step, -s.downstream_differing,
                                             _descending(s.frac_elements_differing), _descending(s.max_ulp_diff),
                                             s.position, s.op_name))
    return [dataclasses.replace(s, rank=i) for i, s in enumerate(ordered, 1)]
