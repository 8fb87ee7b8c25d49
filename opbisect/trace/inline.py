"""Inline nested function calls ((Stateful)PartitionedCall) into one flat GraphDef.

A nested tf.function appears in the traced graph as one call op; its ops are what can be nondeterministic, so
they are spliced into the caller, named `<call>/<inner name>`. The call op's name survives as a NoOp that waits
for the whole body, so control edges on the call still mean "after the call". While/If bodies stay opaque.
"""

from __future__ import annotations

import dataclasses

from .. import tfcompat
from ..ir import optypes


def parse_input(spec: str) -> tuple[str, int, bool]:
    """'op:1' -> ('op', 1, False); 'op' -> ('op', 0, False); '^op' -> ('op', -1, True)."""
    if spec.startswith("^"):
        return spec[1:], -1, True
    name, _, idx = spec.rpartition(":")
    if name and idx.isdigit():
        return name, int(idx), False
    return spec, 0, False


def tensor_spec(name: str, idx: int) -> str:
    return f"{name}:{idx}"


@dataclasses.dataclass
class Origin:
    """Where an inlined node came from: the tf Graph holding it and its name there (for its traceback)."""

    graph: object
    name: str


def inline_calls(graph_def, graph, max_depth: int = 32):
    """Return (flat GraphDef, {node name: Origin}) with every call op inlined, recursively.

    `graph` is the tf Graph that `graph_def` came from; it resolves called functions to their FuncGraphs.
    Library functions are kept (While/If bodies need them).
    """
    origins = {n.name: Origin(graph, n.name) for n in graph_def.node}
    for _ in range(max_depth):
        flatter = _inline_once(graph_def, origins)
        if flatter is None:  # no call left, or only opaque ones
            return graph_def, origins
        graph_def = flatter
    raise RecursionError(f"function calls nested deeper than {max_depth} levels")


def _inline_once(graph_def, origins: dict):
    """`graph_def` with each call op it holds replaced by its body (one level), or None when none could be."""
    from tensorflow.core.framework import graph_pb2

    rewire: dict[str, str] = {}  # "call:i" -> inner tensor now carrying that output
    taken = {n.name for n in graph_def.node}
    new_nodes, spliced = [], False
    for node in graph_def.node:
        inner = None
        if optypes.has(node.op, optypes.CALL):
            inner = tfcompat.function_graph(origins[node.name].graph, node.attr["f"].func.name)
        if inner is None:  # not a call, or a function we cannot see into (loaded from a SavedModel): kept
            new_nodes.append(node)
            continue
        body, outputs = _splice(node, inner, taken, origins)
        new_nodes.extend(body)
        spliced = True
        rewire.update({tensor_spec(node.name, i): spec for i, spec in enumerate(outputs)})
    if not spliced:
        return None
    for node in new_nodes:
        fixed = [_rewired(spec, rewire) for spec in node.input]
        del node.input[:]
        node.input.extend(fixed)
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    out.node.extend(new_nodes)
    return out


def _rewired(spec: str, rewire: dict) -> str:
    """An input spec pointing at a call's output, pointed at the body tensor that now carries it."""
    name, idx, control = parse_input(spec)
    return spec if control else rewire.get(tensor_spec(name, idx), spec)


@dataclasses.dataclass
class _Splice:
    """One call being replaced: its arguments' sources, its control inputs and the body's new names."""

    arg_map: dict  # argument placeholder in the body -> the call's data input feeding it
    control_inputs: list
    names: dict  # body node -> its name in the outer graph


def _splice(call, inner, taken: set, origins: dict):
    """NodeDefs replacing `call`, and the specs of the tensors that carry its outputs."""
    from tensorflow.core.framework import node_def_pb2

    inner_gd = inner.as_graph_def()
    data_inputs = [s for s in call.input if not s.startswith("^")]
    arg_map = {t.op.name: data_inputs[i] for i, t in enumerate(inner.inputs)}
    names = {n.name: _fresh_name(call.name + "/" + n.name, taken) for n in inner_gd.node if n.name not in arg_map}
    where = _Splice(arg_map, [s for s in call.input if s.startswith("^")], names)
    body = []
    for n in inner_gd.node:
        if n.name not in arg_map:
            body.append(_copied(n, where))
            origins[body[-1].name] = Origin(inner, n.name)
    outputs = [arg_map.get(t.op.name) or tensor_spec(names[t.op.name], t.value_index) for t in inner.outputs]
    # The call's name lives on as a NoOp after the whole body, so "^call" keeps its meaning.
    done = node_def_pb2.NodeDef(name=call.name, op="NoOp")
    done.input.extend("^" + n.name for n in body)
    body.append(done)
    origins[call.name] = Origin(origins[call.name].graph, call.name)
    return body, outputs


def _fresh_name(name: str, taken: set) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def _copied(n, where: _Splice):
    """A body node renamed into the outer graph, its argument inputs replaced by the call's inputs."""
    from tensorflow.core.framework import node_def_pb2

    copy = node_def_pb2.NodeDef()
    copy.CopyFrom(n)
    copy.name = where.names[n.name]
    inputs, from_inside = [], False
    for spec in n.input:
        name, idx, control = parse_input(spec)
        if name in where.arg_map:
            if not control:  # a control edge on an argument is implied by the data edge into the call
                inputs.append(where.arg_map[name])
            continue
        from_inside = True
        inputs.append("^" + where.names[name] if control else tensor_spec(where.names[name], idx))
    if not from_inside:  # an entry node of the body: nothing in a call runs before the call's control inputs
        inputs.extend(where.control_inputs)
    del copy.input[:]
    copy.input.extend(inputs)
    _recolocate(copy, where.names)
    return copy


def _recolocate(node, names: dict) -> None:
    """A spliced node's colocation constraints (`_class: loc:@name`) follow the body's nodes to their new names; one
    on an argument (which is now the caller's tensor) is dropped: the import refuses a constraint on a node that
    is not there (tf_keras's recurrent layers' gradients carry them)."""
    if "_class" not in node.attr:
        return
    kept = []
    for c in node.attr["_class"].list.s:
        target = c.decode(errors="replace").removeprefix("loc:@")
        if target in names:
            kept.append(f"loc:@{names[target]}".encode())
    del node.attr["_class"].list.s[:]
    if kept:
        node.attr["_class"].list.s.extend(kept)
    else:
        del node.attr["_class"]
