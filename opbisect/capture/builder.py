"""The GraphDef of the instrumented step, built node by node: which tensors can be tapped, a tap's spec (an
output as it is; the state after a write read right after it), and the digest nodes that turn the taps into one
int64 vector (stamped per tap, fused per group, or a tree of concats). capture/taps.py and capture/regions.py
(the bodies) both build with it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..ir import optypes
from ..ir.ids import TensorRef, split_op_id
from ..record.model import ELEMENT_WISE, FUSED_BY_XLA  # the skipped counts compare derives (outside XLA, under it)
from ..trace.inline import parse_input
from ..trace.trace import Trace
from .fingerprint import tappable

PREFIX = "opbisect_capture"  # node names of capture nodes
WORKSPACE = "workspace"  # the skipped count of outputs whose bytes have no defined value (optypes.workspace)
FAN_IN = 32  # grappler slows down sharply on nodes with thousands of inputs: pack in a tree


def tappable_tensors(trace: Trace, region: str = "") -> tuple[list[str], dict[str, int]]:
    """All tensor ids of one scope worth tapping (numeric, integer, boolean outputs and post-write states),
    and the count of outputs skipped per dtype (and of cuDNN workspace outputs, whose bytes mean nothing: compare
    derives them from what feeds them, as it does every untapped tensor). The top level by default; `region` names
    a body. Every scope is listed in one pass over the graph, once per trace (capture asks for each body several
    times).

    The outputs and post-write states of ops whose inputs and the state they read fix them bit for bit
    (optypes.FUSED: element-wise arithmetic, casts, reshapes, slices, copies, a variable's plain read and
    assignments) are not tapped either, unless `trace.tap_every`: compare derives whether they differ from what
    feeds them (and names a read of state that differed before the step as its source). Under XLA the compiled step
    never writes them out, and a tap would (compiling every tap as an output of the cluster is most of an XLA
    trace's cost). Outside XLA they are a third to a half of the bytes a step writes, each read again by its digest
    (the BERT-like base step on the H200: reading every tapped byte once is 1.13x of the plain step, capture's goal
    1.10x), for no source: none of them can vary on identical inputs."""
    if not trace.tappable:
        graph = trace.graph
        for op in graph.topo_order():
            taps, skipped = trace.tappable.setdefault(graph.region_of(op), ([], {}))
            if derived_op(trace, op):
                why = FUSED_BY_XLA if trace.jit_compile else ELEMENT_WISE
                skipped[why] = skipped.get(why, 0) + len(graph.outputs(op) + graph.states(op))
                continue
            workspace = optypes.workspace(graph.op_type(op))
            for tid in graph.outputs(op):
                dtype = graph.dtype(tid)
                if workspace and TensorRef.parse(tid).port in workspace:
                    skipped[WORKSPACE] = skipped.get(WORKSPACE, 0) + 1
                elif tappable(dtype):
                    taps.append(tid)
                else:
                    skipped[dtype] = skipped.get(dtype, 0) + 1
            taps.extend(graph.states(op))
    taps, skipped = trace.tappable.get(region, ([], {}))
    return list(taps), dict(skipped)


def every_tensor_tapped(trace: Trace) -> Trace:
    """The trace with every tensor tapped (--tap-every-tensor): element-wise outputs too, its tap cache empty."""
    return dataclasses.replace(trace, tap_every=True, tappable={})


def derived(trace: Trace, tid: str) -> bool:
    """Whether tensor `tid` is left untapped because what feeds its op fixes it (see tappable_tensors)."""
    return derived_op(trace, TensorRef.parse(tid).op)


def derived_op(trace: Trace, op: str) -> bool:
    """Under XLA every FUSED op (the compiled step writes none of them out). Outside it, the FUSED ops but the
    THREAD_ORDER (AddN) and COARSE ones (a shape, a predicate, a part of the input: tapped, their outputs are
    small): what compare derives for an untapped output, "differs where what feeds it differs", is then exact but
    where a difference vanishes inside one op (a Relu of values below zero, a mask of zeros), and there it only
    counts a tensor after a source as differing (which the source's 'ops after it' counts) or hides a second source
    right after it (which fix's next round finds, as it finds every source the first hides)."""
    op_type = trace.graph.op_type(op)
    if trace.tap_every or not optypes.has(op_type, optypes.FUSED):
        return False
    return bool(trace.jit_compile) or not (optypes.has(op_type, optypes.THREAD_ORDER) or
                                           optypes.has(op_type, optypes.COARSE))


class GraphDefBuilder:
    """Appends capture nodes to a copy of the step's GraphDef."""

    def __init__(self, graph_def):
        from tensorflow.core.framework import graph_pb2

        self.gd = graph_pb2.GraphDef()
        self.gd.CopyFrom(graph_def)
        self.nodes = {n.name: n for n in self.gd.node}
        self.shared: dict[tuple, str] = {}  # (template key, const name) -> stamped name
        self.functions: list = []  # rebuilt body functions the GraphDef calls, at any depth (capture.regions)

    def register(self, graph) -> None:
        """Register the rebuilt body functions in the graph importing the GraphDef (its library alone is not
        enough: a function that calls them must find them in its own graph)."""
        for f in self.functions:
            f.add_to_graph(graph)

    def add(self, name: str, op: str, inputs=(), **attrs):
        from tensorflow.core.framework import attr_value_pb2

        if name in self.nodes:
            raise ValueError(f"capture node name {name} is taken in the step's graph")
        node = self.gd.node.add(name=name, op=op, input=list(inputs))  # add(): append() would store a copy
        for key, value in attrs.items():  # ints are counts and axes; dtypes come as tf.DType
            node.attr[key].CopyFrom(value if isinstance(value, attr_value_pb2.AttrValue) else
                                    attr_value_pb2.AttrValue(i=value) if isinstance(value, int) else
                                    attr_value_pb2.AttrValue(type=value.as_datatype_enum))
        self.nodes[name] = node
        return node

    def stamp(self, key, template, source: str, prefix: str) -> str:
        """Copy `template` reading tensor `source`; its input-less Consts are shared by all stamps."""
        names = {}
        for n in template.nodes:
            shared = n.op == "Const" and not n.input
            if shared:
                names[n.name] = self.shared.setdefault((key, n.name), f"{PREFIX}/t{len(self.shared)}/{n.name}")
                if names[n.name] in self.nodes:
                    continue
            else:
                names[n.name] = f"{prefix}/{n.name}"
            copy = self.gd.node.add()
            copy.CopyFrom(n)
            copy.name = names[n.name]
            self.nodes[copy.name] = copy
        for n in template.nodes:
            node = self.nodes[names[n.name]]
            fixed = []
            for spec in node.input:
                name, idx, control = parse_input(spec)
                if name == template.source:
                    fixed.append(f"^{source.split(':')[0]}" if control else source)
                else:
                    fixed.append(f"^{names[name]}" if control else f"{names[name]}:{idx}")
            del node.input[:]
            node.input.extend(fixed)
        out_name, out_idx, _ = parse_input(template.output)
        return f"{names[out_name]}:{out_idx}"


def _concat_tree(b: GraphDefBuilder, parts: list[str], dtype) -> str:
    """One tensor of the parts, concatenated on axis 0 by a tree of small ConcatV2 nodes."""
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2, tensor_pb2

    axis = tensor_pb2.TensorProto(dtype=tf.int32.as_datatype_enum, int_val=[0])
    b.add(f"{PREFIX}/axis", "Const", dtype=tf.int32, value=attr_value_pb2.AttrValue(tensor=axis))
    level, depth = parts, 0
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level), FAN_IN):
            part = level[i:i + FAN_IN]
            if len(part) == 1:  # ConcatV2 wants at least two inputs
                nxt.append(part[0])
                continue
            name = f"{PREFIX}/concat/{depth}/{i}"
            b.add(name, "ConcatV2", part + [f"{PREFIX}/axis:0"], N=len(part), T=dtype, Tidx=tf.int32)
            nxt.append(name + ":0")
        level, depth = nxt, depth + 1
    return level[0]


def _empty_digests(b: GraphDefBuilder) -> str:
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2, tensor_pb2

    zeros = tensor_pb2.TensorProto(dtype=tf.int64.as_datatype_enum)
    zeros.tensor_shape.dim.add(size=0)
    b.add(f"{PREFIX}/fingerprints", "Const", dtype=tf.int64, value=attr_value_pb2.AttrValue(tensor=zeros))
    return f"{PREFIX}/fingerprints:0"


def _stamped_digests(b: GraphDefBuilder, specs: list[tuple[str, str]], fingerprinter) -> str:
    """A template stamped next to each tensor, the [1, 8] uint8 rows concatenated and bitcast to int64[n]."""
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2, tensor_pb2

    rows = [b.stamp(dtype, fingerprinter.template(dtype), spec, f"{PREFIX}/tap/{i}")
            for i, (spec, dtype) in enumerate(specs)]
    block = _concat_tree(b, rows, tf.uint8)
    b.add(f"{PREFIX}/bitcast", "Bitcast", [block], T=tf.uint8, type=tf.int64)  # [n, 8] uint8 -> [n] int64
    shape = tensor_pb2.TensorProto(dtype=tf.int32.as_datatype_enum, int_val=[-1])
    shape.tensor_shape.dim.add(size=1)
    b.add(f"{PREFIX}/flat", "Const", dtype=tf.int32, value=attr_value_pb2.AttrValue(tensor=shape))
    b.add(f"{PREFIX}/fingerprints", "Reshape", [f"{PREFIX}/bitcast:0", f"{PREFIX}/flat:0"], T=tf.int64,
          Tshape=tf.int32)
    return f"{PREFIX}/fingerprints:0"


FUSED_GROUP = 512  # taps per fused node, in topological order: an early group runs (and frees) early
# On the side stream a node's reads overlap the step only once its last input exists, and the last node's reads are
# all the step waits for at its end: one launch batch a node (kernels/fingerprint.h, kBatch) starts each soonest.
SIDE_GROUP = 96


def _fused_digests(b: GraphDefBuilder, specs: list[tuple[str, str]], fingerprinter) -> tuple[str, list[int]]:
    """One OpbisectFingerprint node per group of taps, their int64 vectors concatenated; and the layout.

    Taps of the fingerprinter's `host_dtypes` (int32 on a GPU, which TensorFlow keeps in host memory) go to
    nodes on the CPU, so they are not copied to the GPU one by one. The others are grouped by the device their
    producer asked for, and each node is pinned there: a replicated step's taps are digested on their replica's
    GPU, never copied to another (8k tensors, 14 GB, on a two-GPU BERT-like step). With the fingerprinter's
    `side_stream`, a device's nodes read on a second stream and one OpbisectAwaitDigests node, colocated with them,
    takes all their vectors: the step's stream waits there, once, after the device's last group has started.
    """
    import tensorflow as tf

    on_device, on_host = fingerprinter.split([d for _, d in specs])
    families: dict[tuple[str, str], list[int]] = {}
    for k in on_device:
        families.setdefault(("device", b.nodes[specs[k][0].split(":")[0]].device), []).append(k)
    if on_host:
        families[("host", "/device:CPU:0")] = on_host
    parts, layout = [], []
    for f, ((where, device), members) in enumerate(families.items()):
        side = fingerprinter.side_stream and where == "device"
        group = SIDE_GROUP if side else FUSED_GROUP
        names = [_fused_node(b, specs, members[i:i + group], f"{PREFIX}/fused/{where}{f}/{i}", device, side)
                 for i in range(0, len(members), group)]
        parts.extend(_awaited(b, names, f"{PREFIX}/fused/{where}{f}/await") if side else [n + ":0" for n in names])
        layout.extend(members)
    b.add(f"{PREFIX}/fingerprints", "Identity", [_concat_tree(b, parts, tf.int64)], T=tf.int64)
    return f"{PREFIX}/fingerprints:0", layout


def _fused_node(b: GraphDefBuilder, specs, group: list[int], name: str, device: str, side: bool) -> str:
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2

    types = attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(
        type=[tf.as_dtype(specs[k][1]).as_datatype_enum for k in group]))
    node = b.add(name, "OpbisectFingerprint", [specs[k][0] for k in group], T=types)
    if side:
        node.attr["side_stream"].b = True
    node.device = device  # empty: the placer's choice, as for the step's own unpinned ops
    return name


def _awaited(b: GraphDefBuilder, names: list[str], name: str) -> list[str]:
    """The vectors of `names` (side-stream digests of one device) once the step's stream has waited for them: one
    node taking them all, colocated with them, since a copy to another device would read before the wait."""
    node = b.add(name, "OpbisectAwaitDigests", [n + ":0" for n in names], N=len(names))
    node.attr["_class"].list.s.extend(f"loc:@{n}".encode() for n in names)
    node.device = b.nodes[names[0]].device
    return [f"{name}:{i}" for i in range(len(names))]


def tap_specs(b: GraphDefBuilder, graph, region: str, taps: list[str]) -> Callable[[str], str]:
    """A function giving the GraphDef spec of a tap of scope `region` (whose GraphDef `b` holds): an output is
    itself; the state after a write gets a ReadVariableOp right after the write, before anything else touches it;
    the state before an op, one after what the op waits for, which the op then waits for too."""
    import tensorflow as tf

    later_users: dict[tuple[str, str], list[str]] = {}
    for u, v, d in graph.g.edges(data=True):
        if d["kind"] == "resource" and graph.region_of(u) == region == graph.region_of(v):
            later_users.setdefault((u, d["var"]), []).append(split_op_id(v)[1])
    states: dict[str, str] = {}

    def spec(tid: str) -> str:
        ref = TensorRef.parse(tid)
        local = split_op_id(ref.op)[1]
        if ref.is_prior:
            return _prior_state(b, graph, ref)
        if not ref.is_state:
            return f"{local}:{ref.port}"
        if tid not in states:
            write = b.nodes[local]
            dtype = tf.as_dtype(graph.attrs(ref.op)["res_dtypes"][str(ref.port)])
            name = f"{PREFIX}/state/{local}/res{ref.port}"
            b.add(name, "ReadVariableOp", [write.input[ref.port], f"^{local}"], dtype=dtype).device = write.device
            for user in later_users.get((ref.op, dict(graph.resources(ref.op))[ref.port]), []):
                b.nodes[user].input.append(f"^{name}")
            states[tid] = f"{name}:0"
        return states[tid]

    return spec


def _prior_state(b: GraphDefBuilder, graph, ref: TensorRef) -> str:
    """The variable at resource input `ref.port` of `ref.op`, read right before the op: after every op the op waits
    for (its control inputs, which order it after the writes before it), and the op waits for the read."""
    import tensorflow as tf

    local = split_op_id(ref.op)[1]
    name = f"{PREFIX}/prior/{local}/pre{ref.port}"
    if name not in b.nodes:
        op = b.nodes[local]
        dtype = graph.attrs(ref.op).get("res_dtypes", {}).get(str(ref.port))
        dtype = tf.as_dtype(dtype) if dtype else tf.as_dtype(op.attr["dtype"].type)
        waits = [i for i in op.input if i.startswith("^")]
        b.add(name, "ReadVariableOp", [op.input[ref.port], *waits], dtype=dtype).device = op.device
        op.input.append(f"^{name}")
    return f"{name}:0"


def digest_vector(b: GraphDefBuilder, graph, specs: list[tuple[str, str]], fingerprinter) -> tuple[str, list | None]:
    """Capture nodes digesting the tensors `specs` ((spec, dtype) pairs): the spec of the int64 vector, and the
    tap index of each of its positions (None: tap order)."""
    if not specs:
        return _empty_digests(b), None
    if fingerprinter.fused:
        return _fused_digests(b, specs, fingerprinter)
    return _stamped_digests(b, specs, fingerprinter), None
