"""Replace exactly the chosen nodes of the traced step with their patches, in the GraphDef.

    chosen node  --(PATCHES[node.op].build traced over the node's input specs)-->  a function F
    the node     becomes  StatefulPartitionedCall(F) with the same name, inputs, control inputs and device
So every consumer (`name:i`, `^name`) is untouched. A node inside a loop or branch body is replaced in that
body's GraphDef; the body is traced again as a new function, and the loop or branch op (in its parent, up to the
step's top level) is pointed at it: the machinery capture uses to put taps in bodies.
"""

from __future__ import annotations

import dataclasses

from ..ir.ids import op_id
from .reductions import NotApplicable
from .registry import PATCHES, PatchContext


@dataclasses.dataclass
class Rewrite:
    graph_def: object  # the step's top-level GraphDef, patched
    functions: list  # concrete functions the GraphDef calls (patches, rebuilt bodies): register them
    replaced: list[str]  # op ids replaced
    skipped: dict[str, str]  # op id -> why it was left alone

    def register(self, graph) -> None:
        for f in self.functions:
            f.add_to_graph(graph)

    def without_own_functions(self):
        """The GraphDef without the functions `register` adds: imported from the library, they would shadow the
        traced ones, whose graphs a later trace inlines."""
        from tensorflow.core.framework import graph_pb2

        own = {f.function_def.signature.name for f in self.functions}
        gd = graph_pb2.GraphDef()
        gd.CopyFrom(self.graph_def)
        del gd.library.function[:]
        gd.library.function.extend(f for f in self.graph_def.library.function if f.signature.name not in own)
        return gd


def _attrs(node) -> dict:
    from ..replay.call import NotReplayable, attr_value

    out = {}
    for key, value in node.attr.items():
        try:
            out[key] = attr_value(value)
        except NotReplayable:
            continue  # a function or tensor attribute: no patch reads those
    return out


def _patch_function(op, node, xla: bool):
    """The traced patch of one node, checked to give what the node gives."""
    import tensorflow as tf

    patch = PATCHES.get(op.type)
    if patch is None or patch.build is None:
        why = f"only {patch.switch}=1 makes it deterministic" if patch else "no patch for this op type"
        raise NotApplicable(why)
    on_cpu = "CPU" in node.device.upper() or not tf.config.list_logical_devices("GPU")
    ctx = PatchContext(op_type=op.type, attrs=_attrs(node), xla=xla, on_cpu=on_cpu)
    specs = [tf.TensorSpec(t.shape, t.dtype) for t in op.inputs]
    concrete = tf.function(lambda *xs: patch.build(ctx, *xs), input_signature=specs,
                           autograph=False).get_concrete_function()
    got = [t.dtype for t in concrete.outputs]
    want = [t.dtype for t in op.outputs]
    if got != want:
        raise NotApplicable(f"the patch gives {got}, the op {want} (an opbisect bug)")
    return concrete


def _call_node(node, concrete, input_dtypes) -> None:
    """Turn `node` into a call of `concrete`, keeping its name, inputs and device."""
    from tensorflow.core.framework import attr_value_pb2

    name, device, inputs = node.name, node.device, list(node.input)
    node.Clear()
    node.name, node.op, node.device = name, "StatefulPartitionedCall", device
    node.input.extend(inputs)
    types = attr_value_pb2.AttrValue.ListValue
    node.attr["Tin"].list.CopyFrom(types(type=[d.as_datatype_enum for d in input_dtypes]))
    node.attr["Tout"].list.CopyFrom(types(type=[t.dtype.as_datatype_enum for t in concrete.outputs]))
    node.attr["f"].func.name = concrete.function_def.signature.name


def _add_to_library(graph_def, concrete) -> None:
    have = {f.signature.name for f in graph_def.library.function}
    for f in [concrete.function_def, *concrete.graph.as_graph_def().library.function]:
        if f.signature.name not in have:
            graph_def.library.function.add().CopyFrom(f)
            have.add(f.signature.name)


def replace_nodes(graph_def, names: list[str], region: str, xla: bool, rewrite: Rewrite):
    """A copy of `graph_def` (one scope) with the nodes `names` replaced; results noted in `rewrite`."""
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2

    gd = graph_pb2.GraphDef()
    gd.CopyFrom(graph_def)
    if not names:
        return gd
    scratch = tf.Graph()
    with scratch.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    nodes = {n.name: n for n in gd.node}
    for name in names:
        op = scratch.get_operation_by_name(name)
        try:
            concrete = _patch_function(op, nodes[name], xla)
        except NotApplicable as exc:
            rewrite.skipped[op_id(name, region)] = str(exc)
            continue
        _call_node(nodes[name], concrete, [t.dtype for t in op.inputs])
        _add_to_library(gd, concrete)
        rewrite.functions.append(concrete)
        rewrite.replaced.append(op_id(name, region))
    return gd


def _rebuilt_body(region, graph_def, rewrite: Rewrite):
    """The body of `region` traced again from its patched GraphDef; a concrete function."""
    import tensorflow as tf

    from ..capture.taps import graph_importer

    run = graph_importer(graph_def, list(region.arg_names), list(region.output_names), "body")
    functions = list(rewrite.functions)

    def body(*args):
        graph = tf.compat.v1.get_default_graph()
        for f in functions:
            f.add_to_graph(graph)
        return [tf.identity(v) for v in run({f"{a}:0": x for a, x in zip(region.arg_names, args)})]

    sig = [tf.TensorSpec(shape, dtype) for dtype, shape in region.arg_specs]
    return tf.function(body, input_signature=sig, autograph=False).get_concrete_function()


def _point_at(node, suffix: str, name: str) -> None:
    if suffix.startswith("branch") and node.attr["branches"].list.func:
        node.attr["branches"].list.func[int(suffix[len("branch"):])].name = name
    else:
        node.attr[suffix].func.name = name


def rewrite(trace, chosen: dict[str, list[str]]) -> Rewrite:
    """The step's GraphDef with the nodes `chosen` ({region: [local names]}, "" for the top level) replaced."""
    xla = bool(trace.jit_compile)
    out = Rewrite(graph_def=None, functions=[], replaced=[], skipped={})
    dirty = set()
    for region in chosen:
        while region:
            dirty.add(region)
            region = trace.regions[region].parent
    scopes = {}

    def scope(rid: str):
        """The patched GraphDef of a scope, made once."""
        if rid not in scopes:
            original = trace.regions[rid].graph_def if rid else trace.graph_def
            scopes[rid] = replace_nodes(original, chosen.get(rid, []), rid, xla, out)
        return scopes[rid]

    for rid in reversed(list(trace.regions)):  # children before their parents
        if rid not in dirty:
            continue
        region = trace.regions[rid]
        concrete = _rebuilt_body(region, scope(rid), out)
        out.functions.append(concrete)
        parent = scope(region.parent)
        _point_at({n.name: n for n in parent.node}[region.op], region.suffix, concrete.function_def.signature.name)
        _add_to_library(parent, concrete)
    out.graph_def = scope("")
    return out
