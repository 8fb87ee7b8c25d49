"""Align the op graphs of two processes by structure, not by name.

Op names shift between processes (Keras name uniquification, Python set and dict order), so an op is known by
what it computes: its type and attributes (names excluded), its role if it is a placeholder (argument i, or the
variable it carries, by the variable's name), and recursively its inputs (bottom-up) and its consumers
(top-down). For commutative ops (AddN, Add, Mul...) the bottom-up signature also comes in an order-free
variant: two ops that match only that way sum (or multiply) the same inputs in a different order, which
changes floating-point results: a finding of kind `order`.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib

from ..ir import optypes
from ..ir.graph import OpGraph
from ..ir.ids import TensorRef, op_of

COMMUTATIVE = optypes.with_role(optypes.COMMUTATIVE)


def _h(*parts) -> str:
    return hashlib.sha1("\x1f".join(map(str, parts)).encode()).hexdigest()[:20]


@dataclasses.dataclass
class Signatures:
    ordered: dict[str, str]  # bottom-up, inputs in slot order
    free: dict[str, str]  # bottom-up, the inputs of commutative ops as a multiset
    down: dict[str, str]  # top-down, consumers as a multiset (slot kept for non-commutative consumers)


def signatures(graph: OpGraph) -> Signatures:
    label = {op: _h(graph.op_type(op), graph.attrs(op).get("attrs_digest", ""), graph.attrs(op).get("role", ""),
                    len(graph.attrs(op)["outputs"])) for op in graph.ops}
    order = graph.topo_order()
    ordered, free = {}, {}
    for op in order:
        inputs = [TensorRef.parse(t) for t in graph.data_inputs(op)]
        ins_o = [f"{ordered[ref.op]}:{ref.port}" for ref in inputs]
        ins_f = [f"{free[ref.op]}:{ref.port}" for ref in inputs]
        if graph.op_type(op) in COMMUTATIVE:
            ins_f = sorted(ins_f)
        ordered[op] = _h(label[op], *ins_o)
        free[op] = _h(label[op], *ins_f)
    down = {}
    for op in reversed(order):
        uses = []
        for _, consumer, d in graph.g.out_edges(op, data=True):
            if d["kind"] == "data":
                slot = "" if graph.op_type(consumer) in COMMUTATIVE else d["slot"]
                uses.append(f"{down[consumer]}:{slot}:{TensorRef.parse(d['tensor']).port}")
        down[op] = _h(label[op], *sorted(uses))
    return Signatures(ordered=ordered, free=free, down=down)


@dataclasses.dataclass
class Alignment:
    pairs: dict[str, str]  # op in graph a -> op in graph b
    only_a: list[str]
    only_b: list[str]
    reordered: list[tuple[str, str]]  # (a, b): the same inputs in a different order, at this very op

    def tensor(self, tid: str) -> str | None:
        ref = TensorRef.parse(tid)
        return str(TensorRef(self.pairs[ref.op], ref.port, ref.kind, ref.iteration)) if ref.op in self.pairs else None


def align(a: OpGraph, b: OpGraph) -> Alignment:
    sa, sb = signatures(a), signatures(b)
    pairs: dict[str, str] = {}
    # Structure without commutative order, seen from both ends; ties in topological order.
    for key in (lambda s, op: (s.free[op], s.down[op]), lambda s, op: s.free[op]):
        groups_a, groups_b = collections.defaultdict(list), collections.defaultdict(list)
        for op in a.topo_order():
            if op not in pairs:
                groups_a[key(sa, op)].append(op)
        taken = set(pairs.values())
        for op in b.topo_order():
            if op not in taken:
                groups_b[key(sb, op)].append(op)
        for k, ops in groups_a.items():
            for x, y in zip(ops, groups_b.get(k, [])):
                pairs[x] = y
    matched_b = set(pairs.values())
    reordered = []
    for x, y in pairs.items():
        if sa.ordered[x] != sb.ordered[y] and a.op_type(x) in COMMUTATIVE:
            # the reorder happens here (not upstream) when every input already matches in order
            ins_a = [sa.ordered[op_of(t)] for t in a.data_inputs(x)]
            ins_b = [sb.ordered[op_of(t)] for t in b.data_inputs(y)]
            if sorted(ins_a) == sorted(ins_b) and ins_a != ins_b:
                reordered.append((x, y))
    return Alignment(pairs=pairs, only_a=[op for op in a.topo_order() if op not in pairs],
                     only_b=[op for op in b.topo_order() if op not in matched_b], reordered=reordered)
