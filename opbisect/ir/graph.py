"""The op graph: a tiny IR over networkx. Ops are nodes, keyed by their id (opbisect.ir.ids); edges are of kind
'data' (key: the consumer's input slot), 'control', 'resource' (from each write of a variable to the reads
and writes after it) and 'region' (into a loop or branch body's arguments, and from its results to the loop or
branch op: a body's ops are nodes too, `region::op`, described in the graph attribute `regions`).

The same class holds the unrolled instance graph (opbisect.ir.unroll): its nodes are op instances, `op@7`, with
attributes `base` (the op) and `iteration`, so tensor ids carry the iteration.

Node attributes hold what tracing saw (type, outputs, resources, creation site). Analysis results never go on
the graph: they live in side tables keyed by ids.
"""

from __future__ import annotations

from functools import cached_property

import networkx as nx

from . import optypes
from .ids import TensorRef

OPAQUE_STATE = "<opaque resource>"


class OpGraph:
    """Ops as nodes; edges of kind 'data' (key: consumer input slot), 'control' and 'resource'."""

    def __init__(self, g: nx.MultiDiGraph | None = None):
        self.g = g if g is not None else nx.MultiDiGraph()

    # -- building (trace time only) --------------------------------------------------------------------
    def add_op(self, op_id: str, **attrs) -> None:
        attrs.setdefault("outputs", [])  # [(dtype name, shape string)]
        attrs.setdefault("resources", [])  # [(input slot, variable key)]
        self.g.add_node(op_id, **attrs)

    def add_data_edge(self, src: str, out_index: int, dst: str, slot: int) -> None:
        self.g.add_edge(src, dst, key=f"d{slot}", kind="data", tensor=self.output(src, out_index), slot=slot)

    def add_control_edge(self, src: str, dst: str) -> None:
        self.g.add_edge(src, dst, key="c", kind="control")

    def add_region_edge(self, src: str, dst: str) -> None:
        """Order without a data edge of the op's own: into a body's arguments, out of its results."""
        self.g.add_edge(src, dst, key="g", kind="region")

    def add_region(self, region: str, **info) -> None:
        """A loop or branch body: kind ('loop' or 'branch'), op (the loop or branch op), parent (its region),
        args (the body's argument ops, in order), outputs (its result tensors), offset (the op's input slot of
        argument 0)."""
        self.g.graph.setdefault("regions", {})[region] = info

    def add_resource_edges(self) -> None:
        """Edges from each write of a variable to every later read or write of it (order from the graph)."""
        order = nx.DiGraph((u, v) for u, v, k in self.g.edges(data="kind") if k != "resource")
        order.add_nodes_from(self.g.nodes)
        users: dict[str, list[str]] = {}
        for op in self.g.nodes:
            for _, var in self.resources(op):
                users.setdefault(var, []).append(op)
        for var, ops in users.items():
            if var == OPAQUE_STATE:
                continue
            for w in ops:
                if self.is_write(w):
                    later = nx.descendants(order, w)
                    for c in ops:
                        if c != w and c in later:
                            self.g.add_edge(w, c, key=f"r:{var}", kind="resource", var=var)

    # -- queries -----------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.g.number_of_nodes()

    @property
    def ops(self) -> list[str]:
        return list(self.g.nodes)

    def op_type(self, op: str) -> str:
        return self.g.nodes[op]["type"]

    def attrs(self, op: str) -> dict:
        return self.g.nodes[op]

    def output(self, op: str, port: int) -> str:
        """The id of output `port` of op (or op instance) `op`."""
        a = self.g.nodes[op]
        return str(TensorRef.output(a.get("base", op), port, a.get("iteration")))

    def state(self, op: str, slot: int) -> str:
        """The id of the variable at `op`'s resource input `slot`, right after `op`."""
        a = self.g.nodes[op]
        return str(TensorRef.state(a.get("base", op), slot, a.get("iteration")))

    def outputs(self, op: str) -> list[str]:
        return [self.output(op, i) for i in range(len(self.g.nodes[op]["outputs"]))]

    def states(self, op: str) -> list[str]:
        """The pseudo-tensors of the variables `op` writes, right after it."""
        return [self.state(op, slot) for slot, _ in self.written(op)]

    @staticmethod
    def is_state(tid: str) -> bool:
        return TensorRef.parse(tid).is_state

    def dtype(self, tid: str) -> str:
        ref = TensorRef.parse(tid)
        node = self.g.nodes[ref.instance] if ref.instance in self.g else self.g.nodes[ref.op]
        if ref.is_state or ref.is_prior:  # the variable at that resource input, after or before the op
            return node.get("res_dtypes", {}).get(str(ref.port), "unknown")
        return node["outputs"][ref.port][0]

    # -- loop and branch bodies --------------------------------------------------------------------------
    @property
    def regions(self) -> dict[str, dict]:
        """region id -> its description (add_region), parents before their children."""
        return self.g.graph.get("regions", {})

    def region_of(self, op: str) -> str:
        return self.g.nodes[op].get("region", "")

    def region_ops(self, region: str) -> list[str]:
        return [op for op, r in self.g.nodes(data="region", default="") if r == region]

    def subregions(self, region: str) -> list[str]:
        """`region` and every region nested in it, parents first."""
        out = [region]
        for r, info in self.regions.items():
            if info["parent"] in out:
                out.append(r)
        return out

    def _chain(self, op: str) -> list[str]:
        """The regions around `op`, outermost first."""
        chain, region = [], self.region_of(op)
        while region:
            chain.insert(0, region)
            region = self.regions[region]["parent"]
        return chain

    def exclusive(self, a: str, b: str) -> bool:
        """Whether ops `a` and `b` lie in different branches of one branch op (never both run in one execution)."""
        for ra, rb in zip(self._chain(a), self._chain(b)):
            if ra != rb:
                ia, ib = self.regions[ra], self.regions[rb]
                return ia["op"] == ib["op"] and ia["kind"] == "branch"
        return False

    def regions_of_op(self, op: str) -> list[str]:
        """The bodies of a loop or branch op, in its attribute order."""
        return [r for r, info in self.regions.items() if info["op"] == op]

    def resources(self, op: str) -> list[tuple[int, str]]:
        return [tuple(r) for r in self.g.nodes[op]["resources"]]

    def is_write(self, op: str) -> bool:
        a = self.g.nodes[op]
        return bool(a["resources"]) and a.get("stateful", False) and not optypes.has(a["type"], optypes.READ)

    def written(self, op: str) -> list[tuple[int, str]]:
        """(slot, variable) pairs this op writes."""
        if not self.is_write(op):
            return []
        return [(s, v) for s, v in self.resources(op) if v != OPAQUE_STATE]

    def data_inputs(self, op: str) -> list[str]:
        """Tensor ids feeding `op`, in input-slot order."""
        edges = [(d["slot"], d["tensor"]) for _, _, d in self.g.in_edges(op, data=True) if d["kind"] == "data"]
        return [t for _, t in sorted(edges)]

    def prior_writes(self, op: str, var: str) -> list[str]:
        """Writes of `var` ordered before `op`, latest last."""
        ws = [u for u, _, d in self.g.in_edges(op, data=True) if d["kind"] == "resource" and d["var"] == var]
        return sorted(ws, key=self.position.__getitem__)

    @cached_property
    def position(self) -> dict[str, int]:
        """Each op's index in one fixed topological order (ties broken by id, so it is reproducible)."""
        return {op: i for i, op in enumerate(nx.lexicographical_topological_sort(self.g))}

    def topo_order(self) -> list[str]:
        return sorted(self.g.nodes, key=self.position.__getitem__)

    def downstream(self, op: str) -> set[str]:
        return nx.descendants(self.g, op)

    def site(self, op: str) -> str:
        return self.g.nodes[op].get("site", "")

    # -- persistence -------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return nx.node_link_data(self.g, edges="edges")

    @classmethod
    def from_json(cls, data: dict) -> "OpGraph":
        g = nx.node_link_graph(data, directed=True, multigraph=True, edges="edges")
        for _, attrs in g.nodes(data=True):
            attrs["outputs"] = [tuple(o) for o in attrs["outputs"]]
            attrs["resources"] = [tuple(r) for r in attrs["resources"]]
        return cls(g)
