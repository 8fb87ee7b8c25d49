"""Unroll: the instance graph of one step, where an op inside a loop or branch body is one node per execution.

compare() works on op instances, since an op in a loop body can be identical at iteration 3 and differ at
iteration 4. The instance graph has the step's top-level ops, and `op@k` for the k-th execution of each body op,
with edges:
- within one execution of a body, the body's own data and control edges;
- into an execution: each argument from what feeds it (the loop or branch op's input; for iteration k > 0 of a
  loop, the body's result k-1), and everything ordered before the loop or branch op before the arguments;
- out of an execution: its last ops before the loop or branch op, and (a loop) before the next iteration.
So resource edges (a write before every later read of the variable) come out right across iterations.

Capture records, for each execution of a body, the execution of the enclosing body it ran in (`enclosing`).
"""

from __future__ import annotations

import dataclasses

from .graph import OpGraph
from .ids import TensorRef, instance_id


def unroll(graph: OpGraph, executions: dict[str, list[int]], enclosing: dict[str, list[int]]) -> OpGraph:
    """The instance graph for bodies that ran `max(executions[region])` times in the runs compared."""
    if not graph.regions:
        return graph
    counts = {r: max(executions.get(r, [0]) or [0]) for r in graph.regions}
    out = OpGraph()
    out.g.graph.update(graph.g.graph)
    copies: dict[str, list[str]] = {}
    for op, attrs in graph.g.nodes(data=True):
        region = attrs.get("region", "")
        if not region:
            out.add_op(op, **attrs)
            copies[op] = [op]
            continue
        copies[op] = [instance_id(op, k) for k in range(counts[region])]
        for k, inst in enumerate(copies[op]):
            out.add_op(inst, **attrs, base=op, iteration=k)
    for u, v, d in graph.g.edges(data=True):
        for a, b in zip(copies[u], copies[v]):  # same scope: the same executions
            if d["kind"] == "data":
                out.add_data_edge(a, TensorRef.parse(d["tensor"]).port, b, d["slot"])
            elif d["kind"] == "control":
                out.add_control_edge(a, b)
    instances = _Instances(graph, out, counts, copies)
    for region in graph.regions:
        _link(instances, region, enclosing.get(region, []))
    out.add_resource_edges()
    return out


@dataclasses.dataclass
class _Instances:
    """The graph being unrolled and its instance graph so far: how often each body ran, each op's copies."""

    graph: OpGraph
    out: OpGraph
    counts: dict  # region -> executions
    copies: dict  # op -> its instances


def _link(instances: _Instances, region: str, enclosing: list[int]) -> None:
    """Edges into, between and out of the executions of `region`'s body."""
    graph, out, counts, copies = instances.graph, instances.out, instances.counts, instances.copies
    info = graph.regions[region]
    op, n = info["op"], counts[region]
    ops = graph.region_ops(region)
    sinks = [x for x in ops if not any(graph.region_of(v) == region for v in graph.g.successors(x))]
    inputs = graph.data_inputs(op)
    before = [u for u, _, kind in graph.g.in_edges(op, data="kind") if kind in ("control", "data")]
    first = 0  # a loop's execution k that began the current execution of the loop op (a nested loop restarts)
    for k in range(n):
        owners = copies[op] if not info["parent"] else \
            [instance_id(op, enclosing[k])] if k < len(enclosing) and enclosing[k] < counts[info["parent"]] else []
        continues = info["kind"] == "loop" and k > 0 and enclosing[k - 1:k + 1][:1] == enclosing[k:k + 1]
        first = first if continues else k
        # The iteration a user means: of the innermost loop around this execution (a branch: its loop's).
        at = k - first if info["kind"] == "loop" else next((out.attrs(o).get("loop_iteration") for o in owners), None)
        for x in ops:
            out.attrs(instance_id(x, k))["loop_iteration"] = at
        for j, arg in enumerate(info["args"]):
            a = instance_id(arg, k)
            if continues:
                ref = TensorRef.parse(info["outputs"][j])
                out.add_data_edge(instance_id(ref.op, k - 1), ref.port, a, 0)
                continue
            ref = TensorRef.parse(inputs[j + info["offset"]])
            feeders = [_at(graph, ref.op, o) for o in owners]
            if len(feeders) == 1:
                out.add_data_edge(feeders[0], ref.port, a, 0)
            for o in owners:
                for u in before:
                    out.add_control_edge(_at(graph, u, o), a)
        for s in sinks:
            for o in owners:
                out.add_control_edge(instance_id(s, k), o)
            if info["kind"] == "loop" and k + 1 < n and enclosing[k:k + 1] == enclosing[k + 1:k + 2]:
                for arg in info["args"]:
                    out.add_control_edge(instance_id(s, k), instance_id(arg, k + 1))


def _at(graph: OpGraph, op: str, owner: str) -> str:
    """`op` (in the scope of `owner`, a loop or branch op instance) at owner's execution."""
    _, _, k = owner.partition("@")
    return instance_id(op, int(k)) if graph.region_of(op) and k else op
