"""A loop or branch body patched in its own FunctionDef: the body TensorFlow traced, with each chosen node
replaced by its patch's ops, inlined, and its nested bodies pointed at their patched copies.

    chosen node N (op T)  -->  the patch's nodes, named N/opbisect_patch/..., fed by N's inputs and control inputs
                               N itself: IdentityN of the patch's results (a NoOp where T has none), ordered
                               after the patch's stateful nodes; consumers' "N:arg:i" become "N:output:k"

Why inline: at the step's top level grappler inlines a call of the patch, but a call inside a loop body stays a
call, and on a GPU each iteration then runs it as a function of its own (on the H200, about 60 us of host time
an iteration for BiasAddGrad's one-reduction patch, in a loop that waits for the GPU every iteration).
Why not trace the body again (what capture does to add taps): the traced copy gains an Identity per result and a
NoOp, run every iteration too. It applies where every node to change is a node of the body's FunctionDef; a node
that came from a call the trace inlined is not, and that body is traced again instead (`rewrite._rebuilt_body`).
"""

from __future__ import annotations

import hashlib

OUTPUT = "output"  # IdentityN's one output argument, a list
INLINED = "opbisect_patch"  # the scope of a patch's inlined nodes, under the replaced node's name


def functions_of(graph_def) -> dict:
    return {f.signature.name: f for f in graph_def.library.function}


def editable(fdef, names) -> bool:
    have = {n.name for n in fdef.node_def}
    return all(n in have for n in names)


def _output_counts(op) -> list[tuple[str, int]]:
    """(output argument name, tensors in it) of an op, in its op definition's order."""
    out = []
    for arg in op.op_def.output_arg:
        if arg.number_attr:
            count = op.get_attr(arg.number_attr)
        elif arg.type_list_attr:
            count = len(op.get_attr(arg.type_list_attr))
        else:
            count = 1
        out.append((arg.name, count))
    return out


def _renamed_outputs(name: str, op) -> dict[str, str]:
    """FunctionDef references to the op's outputs ("name:arg:i") -> the same tensor of an IdentityN
    ("name:output:k")."""
    renamed, flat = {}, 0
    for arg, count in _output_counts(op):
        for i in range(count):
            renamed[f"{name}:{arg}:{i}"] = f"{name}:{OUTPUT}:{flat}"
            flat += 1
    return renamed


def _inlined(node, patch) -> list:
    """The nodes that replace `node`: `patch`'s (a FunctionDef of the node's data inputs), then one under the
    node's own name giving the patch's results."""
    from tensorflow.core.framework import node_def_pb2

    scope = f"{node.name}/{INLINED}/"
    data = [i for i in node.input if not i.startswith("^")]
    controls = [i for i in node.input if i.startswith("^")]
    args = {a.name: x for a, x in zip(patch.signature.input_arg, data)}

    def source(ref: str) -> str:
        if ref.startswith("^"):
            return "^" + scope + ref[1:]
        return args[ref] if ref in args else scope + ref

    out = []
    for inner in patch.node_def:
        new = node_def_pb2.NodeDef()
        new.CopyFrom(inner)
        new.name = scope + inner.name
        new.input[:] = [source(i) for i in inner.input] + controls
        new.device = new.device or node.device
        if "_class" in new.attr:  # colocation with the patch's own node names, which changed
            del new.attr["_class"]
        out.append(new)
    results = [source(patch.ret[a.name]) for a in patch.signature.output_arg]
    last = node_def_pb2.NodeDef(name=node.name, device=node.device, op="IdentityN" if results else "NoOp")
    last.input.extend(results + ["^" + scope + c for c in patch.control_ret.values()])
    if results:
        last.attr["T"].list.type.extend(a.type for a in patch.signature.output_arg)
    return out + [last]


def edited(fdef, patches: dict, pointers: dict):
    """A copy of `fdef` under a new name: each node `patches` names ({name: (scratch op, patch FunctionDef)})
    replaced by the patch's nodes, each nested body op `pointers` names ({name: node -> None}) re-pointed."""
    from tensorflow.core.framework import function_pb2

    out = function_pb2.FunctionDef()
    out.CopyFrom(fdef)
    renamed: dict[str, str] = {}
    kept = []
    for node in out.node_def:
        if node.name in patches:
            op, patch = patches[node.name]
            renamed.update(_renamed_outputs(node.name, op))
            kept += _inlined(node, patch)
        else:
            if node.name in pointers:
                pointers[node.name](node)
            kept.append(node)
    del out.node_def[:]
    out.node_def.extend(kept)
    for node in out.node_def:
        node.input[:] = [renamed.get(i, i) for i in node.input]
    for key in list(out.ret):
        out.ret[key] = renamed.get(out.ret[key], out.ret[key])
    out.signature.name = ""
    digest = hashlib.sha1(out.SerializeToString(deterministic=True)).hexdigest()[:12]
    out.signature.name = f"{fdef.signature.name}_opbisect_{digest}"
    return out
