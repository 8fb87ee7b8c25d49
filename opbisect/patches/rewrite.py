"""Replace exactly the chosen nodes of the traced step with their patches, in the GraphDef.

    chosen node  --(PATCHES[node.op].build traced over the node's input specs)-->  a function F
    the node     becomes  StatefulPartitionedCall(F) with the same name, inputs, control inputs and device
So every consumer (`name:i`, `^name`) is untouched (grappler inlines F at the top level). A node inside a loop or
branch body is replaced in a copy of that body's FunctionDef by F's own nodes, inlined (`edit`: a call there would
stay a call, run as a function every iteration), or, where the node came from a call the trace inlined, by a call
in the body's flat GraphDef traced again as a new function (the machinery capture uses to put taps in bodies); the
loop or branch op (in its parent, up to the step's top level) is pointed at the copy.
"""

from __future__ import annotations

import dataclasses
import functools

from .. import tfcompat
from ..ir.ids import op_id
from . import edit
from .reductions import NotApplicable
from .registry import PATCHES, PatchContext, switch_on


@dataclasses.dataclass
class Rewrite:
    graph_def: object  # the step's top-level GraphDef, patched
    functions: list  # concrete functions the GraphDef calls (patches, rebuilt bodies): register them
    replaced: list[str]  # op ids replaced
    skipped: dict[str, str]  # op id -> why it was left alone
    bodies: list = dataclasses.field(default_factory=list)  # bodies patched in their FunctionDefs (`edit`)
    traced: dict = dataclasses.field(default_factory=dict)  # the step's own functions, traced (tfcompat)

    def register(self, graph) -> None:
        for f in self.functions:
            f.add_to_graph(graph)
        tfcompat.add_functions(graph, self.traced.values())
        for fdef in self.bodies:
            tfcompat.register_function_def(fdef)

    def without_own_functions(self, graph_def=None):
        """`graph_def` (the patched step's by default) without the functions `register` adds: imported from the
        library, they would replace the traced ones, whose graphs a later trace inlines or enters (a loop's
        condition, a branch left unpatched, a body traced again)."""
        from tensorflow.core.framework import graph_pb2

        graph_def = self.graph_def if graph_def is None else graph_def
        own = {f.function_def.signature.name for f in self.functions} | set(self.traced)
        gd = graph_pb2.GraphDef()
        gd.CopyFrom(graph_def)
        del gd.library.function[:]
        gd.library.function.extend(f for f in graph_def.library.function if f.signature.name not in own)
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
    if patch is None:
        raise NotApplicable("no patch for this op type")
    if patch.build is None:
        if switch_on(patch.switch):
            raise NotApplicable(f"no rewrite; {patch.switch}=1, set in this process, makes it deterministic")
        raise NotApplicable(f"only {patch.switch}=1 makes it deterministic")
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


def _patched_calls(graph_def, names: list[str], region: str, xla: bool, rewrite: Rewrite) -> dict:
    """{name: (the node's op, its patch's concrete function)} for the nodes `names` of one scope that have a
    patch; the others noted in `rewrite.skipped`."""
    import tensorflow as tf

    if not names:  # the scope's import below costs seconds at the top level of a large step
        return {}
    scratch = tf.Graph()
    with scratch.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    nodes = {n.name: n for n in graph_def.node}
    out = {}
    for name in names:
        op = scratch.get_operation_by_name(name)
        try:
            out[name] = (op, _patch_function(op, nodes[name], xla))
        except NotApplicable as exc:
            rewrite.skipped[op_id(name, region)] = str(exc)
            continue
        rewrite.functions.append(out[name][1])
        rewrite.replaced.append(op_id(name, region))
    return out


def replace_nodes(graph_def, names: list[str], region: str, xla: bool, rewrite: Rewrite):
    """A copy of `graph_def` (one scope) with the nodes `names` replaced; results noted in `rewrite`."""
    from tensorflow.core.framework import graph_pb2

    gd = graph_pb2.GraphDef()
    gd.CopyFrom(graph_def)
    nodes = {n.name: n for n in gd.node}
    for name, (op, concrete) in _patched_calls(graph_def, names, region, xla, rewrite).items():
        _call_node(nodes[name], concrete, [t.dtype for t in op.inputs])
        _add_to_library(gd, concrete)
    return gd


def _rebuilt_body(region, graph_def, rewrite: Rewrite):
    """The body of `region` traced again from its patched GraphDef; a concrete function."""
    import tensorflow as tf

    from ..graphdef.importer import graph_importer

    run = graph_importer(rewrite.without_own_functions(graph_def), list(region.arg_names),
                         list(region.output_names), "")  # the body's own op names, for a trace of it

    def body(*args):
        rewrite.register(tf.compat.v1.get_default_graph())
        return [tf.identity(v) for v in run({f"{a}:0": x for a, x in zip(region.arg_names, args)})]

    sig = [tf.TensorSpec(shape, dtype) for dtype, shape in region.arg_specs]
    return tf.function(body, input_signature=sig, autograph=False).get_concrete_function()


def _point_at(node, suffix: str, name: str) -> None:
    if suffix.startswith("branch") and node.attr["branches"].list.func:
        node.attr["branches"].list.func[int(suffix[len("branch"):])].name = name
    else:
        node.attr[suffix].func.name = name


def _add_bodies(graph_def, bodies: list) -> None:
    have = {f.signature.name for f in graph_def.library.function}
    graph_def.library.function.extend(f for f in bodies if f.signature.name not in have)


def rewrite(trace, chosen: dict[str, list[str]], edit_bodies: bool = True) -> Rewrite:
    """The step's GraphDef with the nodes `chosen` ({region: [local names]}, "" for the top level) replaced.
    A body is patched in its own FunctionDef where it can be (`edit`), else traced again; `edit_bodies=False`
    traces every body again, for a step that is traced once more (`trace --patch`), whose trace enters bodies
    through their traced graphs."""
    return _Rewriter(trace, chosen, edit_bodies).run()


class _Rewriter:
    """One rewrite: the regions on the way to a chosen node are patched children first, each parent then
    pointed at its children's patched bodies."""

    def __init__(self, trace, chosen: dict, edit_bodies: bool):
        self.trace, self.chosen, self.edit_bodies = trace, chosen, edit_bodies
        self.xla = bool(trace.jit_compile)
        self.out = Rewrite(graph_def=None, functions=[], replaced=[], skipped={},
                           traced=tfcompat.traced_functions(trace.concrete.graph))
        self.dirty, self.inner = set(), {}  # regions on the way to a chosen node; each scope's dirty bodies
        for region in chosen:
            while region:
                self.dirty.add(region)
                self.inner.setdefault(trace.regions[region].parent, set()).add(region)
                region = trace.regions[region].parent
        self.library = edit.functions_of(trace.graph_def)
        self.names = {}  # region -> its patched body's function name

    def run(self) -> Rewrite:
        for rid in reversed(list(self.trace.regions)):  # children before their parents
            if rid in self.dirty:
                self.names[rid] = self._patched_body(rid)
        top = self._pointed(self._replaced(self.trace.graph_def, ""), "")
        for f in self.out.functions:
            _add_to_library(top, f)
        self.out.graph_def = top
        return self.out

    def _patched_body(self, rid: str) -> str:
        """Patch region `rid`'s body; the name of the function that now holds it."""
        region, local = self.trace.regions[rid], self.chosen.get(rid, [])
        fdef = self.library.get(region.function)
        children = [self.trace.regions[c].op for c in self.inner.get(rid, ())]
        if self.edit_bodies and fdef is not None and edit.editable(fdef, local + children):
            calls = _patched_calls(region.graph_def, local, rid, self.xla, self.out)
            patches = {name: (op, f.function_def) for name, (op, f) in calls.items()}
            pointers = {self.trace.regions[c].op: functools.partial(self._point_child, c)
                        for c in self.inner.get(rid, ())}
            self.out.bodies.append(edit.edited(fdef, patches, pointers))
            return self.out.bodies[-1].signature.name
        concrete = _rebuilt_body(region, self._pointed(self._replaced(region.graph_def, rid), rid), self.out)
        self.out.functions.append(concrete)
        return concrete.function_def.signature.name

    def _replaced(self, graph_def, rid: str):
        return replace_nodes(graph_def, self.chosen.get(rid, []), rid, self.xla, self.out)

    def _point_child(self, child: str, node) -> None:
        _point_at(node, self.trace.regions[child].suffix, self.names[child])

    def _pointed(self, gd, rid: str):
        """`gd` (region `rid`'s graph) with its calls into patched children pointed at their new bodies."""
        nodes = {n.name: n for n in gd.node}
        for child in self.inner.get(rid, ()):
            self._point_child(child, nodes[self.trace.regions[child].op])
        _add_bodies(gd, self.out.bodies)
        return gd
