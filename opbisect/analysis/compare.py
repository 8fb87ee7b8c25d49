"""Compare: which tensors differ between runs, and which ops are the sources.

A tensor differs if its fingerprint is not the same in every run. A source is an op with a differing output
(or, for a write, a differing variable state after it) while every data input and every variable state it
reads was bitwise identical. Kinds:
  op      varies on identical inputs            write   variable update varies on identical inputs
  random  stateful random op                    input   input-pipeline op, or an argument of the step
  state   reads a variable that differed before the step with no write before it in the step (state not
          restored, or changed outside the step), or reads state opbisect cannot restore
Everything here is pure: tests build graphs and fingerprint tables literally.
"""

from __future__ import annotations

import collections
import dataclasses

from ..ir import optypes
from ..ir.graph import OPAQUE_STATE, OpGraph
from ..ir.ids import TensorRef, op_of


@dataclasses.dataclass
class SourceOp:
    op: str
    kind: str
    tensors: list[str]  # the differing outputs (or post-write states) of the op
    runs_differing: int  # runs whose value is not the most common one
    distinct_values: int
    downstream_differing: int  # ops after it (data, control or state) with a differing result
    affects_result: bool = False  # a differing step output or final variable value lies downstream
    iteration: int | None = None  # inside a loop: the iteration of the innermost loop where it first is a source


@dataclasses.dataclass
class Comparison:
    differs: dict[str, bool]  # tensor id -> differs (tapped tensors; derived for untapped ones)
    initial_differs: dict[str, bool]  # variable key -> its value before the step differs between runs
    sources: list[SourceOp]

    @property
    def differing(self) -> list[str]:
        return [t for t, d in self.differs.items() if d]


def distinct(values) -> int:
    return len(set(values))


def runs_off_mode(values) -> int:
    counts = collections.Counter(values)
    return len(values) - max(counts.values()) if counts else 0


def compare(graph: OpGraph, taps: list[str], fps: list[list[int]], before: list[dict[str, int]],
            results: list[str] = ()) -> Comparison:
    """`fps[run][i]` is the fingerprint of `taps[i]`; `before[run]` fingerprints each variable before the step.

    `results` names the tensors that make up the step's result (its outputs, the last write of each variable):
    a source whose differences reach one of them `affects_result`.
    """
    c = _Comparer(graph, {t: [run[i] for run in fps] for i, t in enumerate(taps)}, before)
    c.derive_untapped()
    sources = [s for s in (c.source(op) for op in graph.topo_order()) if s is not None]
    c.reach(sources, results)
    return Comparison(differs={t: c.differs[t] for t in taps}, initial_differs=c.initial_differs,
                      sources=_by_op(graph, sources, c.differs))


class _Comparer:
    """Which tensors differ (`differs`: tapped ones by their fingerprints, the others derived), and each op's claim
    to be a source."""

    def __init__(self, graph: OpGraph, per_tap: dict[str, list], before: list[dict[str, int]]):
        self.graph, self.per_tap, self.before = graph, per_tap, before
        self.differs = {t: distinct(v) > 1 for t, v in per_tap.items()}
        keys = sorted({k for b in before for k in b})
        self.initial_differs = {k: distinct(b.get(k) for b in before) > 1 for k in keys}

    def tensor_differs(self, tid: str) -> bool:
        return self.differs.get(tid, False)

    def reads_differing_state(self, op: str, var: str) -> bool:
        if var == OPAQUE_STATE:
            return False
        writes = self.graph.prior_writes(op, var)
        if writes:
            last = writes[-1]
            return any(self.tensor_differs(self.graph.state(last, s)) for s, v in self.graph.written(last) if v == var)
        return self.initial_differs.get(var, False)

    def derive_untapped(self) -> None:
        """Untapped tensors (resources, strings, variants) differ when what produced them saw a difference: derived
        in topological order, so no recursion (a loop unrolled over many iterations chains thousands of them)."""
        g = self.graph
        for op in g.topo_order():
            untapped = [t for t in g.outputs(op) + g.states(op) if t not in self.differs]
            if not untapped:
                continue
            inputs = g.data_inputs(op)
            if optypes.has(g.op_type(op), optypes.PORTWISE) and len(inputs) == len(g.outputs(op)):
                self.differs.update({t: self.tensor_differs(inputs[TensorRef.parse(t).port]) for t in untapped})
            else:
                seen = any(self.tensor_differs(t) for t in inputs) or \
                    any(self.reads_differing_state(op, var) for _, var in g.resources(op))
                self.differs.update(dict.fromkeys(untapped, seen))

    def source(self, op: str) -> SourceOp | None:
        """`op` as a source: a differing output while every input and every state it reads was identical."""
        g, per_tap = self.graph, self.per_tap
        produced = g.outputs(op) + g.states(op)
        varying = [t for t in produced if t in per_tap and self.differs[t]]
        # A read or assignment left untapped (capture derives them) differs only through what it reads: a source if
        # that is state that differed before the step, as its tapped outputs would have shown.
        derived = not varying and _untapped_state_op(g, op, produced, per_tap)
        if derived:
            varying = [t for t in produced if self.differs[t]]
        if not varying or g.attrs(op).get("role", "").startswith("region_arg"):
            return None  # a body's argument is what feeds it: never a source
        if any(v is None for t in varying for v in per_tap.get(t, ())):
            return None  # ran in some runs only: the loop's trip count or the branch taken differs (upstream)
        if any(self.tensor_differs(t) for t in g.data_inputs(op)):
            return None
        resources = g.resources(op)
        stale = [var for _, var in resources if not g.prior_writes(op, var) and self.initial_differs.get(var, False)]
        if any(self.reads_differing_state(op, var) for _, var in resources if var not in stale) or \
                (derived and not stale):
            return None
        values = [tuple(self.before[r].get(v) for v in stale) if derived else tuple(per_tap[t][r] for t in varying)
                  for r in range(len(self.before))]
        return SourceOp(op=op, kind=_kind(g, op, varying, stale), tensors=varying, runs_differing=runs_off_mode(values),
                        distinct_values=distinct(values), downstream_differing=0)

    def reach(self, sources: list[SourceOp], results: list[str]) -> None:
        """How many ops after each source differ, and whether the difference reaches the step's result."""
        result_ops = {op_of(t) for t in results if self.differs.get(t, False)}
        for s in sources:
            after = self.graph.downstream(s.op)
            s.downstream_differing = sum(1 for d in after if any(self.differs.get(t, False)
                                                                 for t in self.graph.outputs(d) + self.graph.states(d)))
            s.affects_result = any(op in result_ops for op in after | {s.op})


def _by_op(graph: OpGraph, sources: list[SourceOp], differs: dict[str, bool]) -> list[SourceOp]:
    """Instances folded into their op, at the first execution where it is a source. A loop or branch op whose
    bodies hold a difference is not a source: what differs inside it is (or its arguments came in differing)."""
    busy = {TensorRef.parse(t).region for t, d in differs.items() if d}
    folded: dict[str, tuple[int, SourceOp]] = {}
    for s in sources:
        a = graph.attrs(s.op)
        base, execution = a.get("base", s.op), a.get("iteration", 0)
        if any(busy & set(graph.subregions(r)) for r in graph.regions_of_op(base)):
            continue
        if base not in folded or execution < folded[base][0]:
            folded[base] = (execution, dataclasses.replace(s, op=base, iteration=a.get("loop_iteration")))
    return [s for _, s in folded.values()]


def _untapped_state_op(graph: OpGraph, op: str, produced: list[str], tapped: dict) -> bool:
    """A read or plain assignment of a variable none of whose results (`produced`) is tapped (optypes.FUSED: capture
    derives them). The type first: it rules out most ops with one lookup."""
    op_type = graph.op_type(op)
    return (optypes.has(op_type, optypes.READ) or optypes.has(op_type, optypes.FUSED)) \
        and bool(graph.attrs(op)["resources"]) and not any(t in tapped for t in produced)


def _kind(graph: OpGraph, op: str, varying: list[str], stale: list[str]) -> str:
    op_type = graph.op_type(op)
    if optypes.has(op_type, optypes.INPUT):
        return "input"
    if optypes.has(op_type, optypes.RANDOM):
        return "random"
    if stale or any(var == OPAQUE_STATE for _, var in graph.resources(op)):
        return "state"
    if optypes.has(op_type, optypes.READ):
        return "state"
    if optypes.has(op_type, optypes.COLLECTIVE):  # a cross-replica reduction: identical inputs, another result
        return "collective"
    if all(graph.is_state(t) for t in varying):
        return "write"
    return "op"
