"""A loop or branch body patched in its own FunctionDef: the body TensorFlow traced, with only the chosen nodes
turned into calls of their patches and its nested bodies pointed at their patched copies.

Why not trace the body again (what capture does to add taps): a traced copy gains an Identity per result from
the import, another per result and a NoOp from automatic control dependencies (which also make every result
wait for the patch's call), about 25 ops more in the grad_accumulation example's body. A loop runs its body's
ops one at a time, every iteration: on the H200 that step's loop is host-bound (4.7 ms a step for 0.6 ms of
device time), and the copy cost more than the patch saved. The edited FunctionDef has the body's own ops, one
for one. It applies where every node to change is a node of the body's FunctionDef; a node that came from a
call the trace inlined is not, and that body is traced again instead (`rewrite._rebuilt_body`).
"""

from __future__ import annotations

import hashlib

CALL_OUTPUT = "output"  # a (Stateful)PartitionedCall's one output argument, a list


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
    """FunctionDef references to the op's outputs ("name:arg:i") -> the same tensor of a call ("name:output:k")."""
    renamed, flat = {}, 0
    for arg, count in _output_counts(op):
        for i in range(count):
            renamed[f"{name}:{arg}:{i}"] = f"{name}:{CALL_OUTPUT}:{flat}"
            flat += 1
    return renamed


def edited(fdef, calls: dict, pointers: dict):
    """A copy of `fdef` under a new name: each node `calls` names ({name: (scratch op, node -> None)}) changed by
    its function, each nested body op `pointers` names ({name: node -> None}) re-pointed."""
    from tensorflow.core.framework import function_pb2

    out = function_pb2.FunctionDef()
    out.CopyFrom(fdef)
    nodes = {n.name: n for n in out.node_def}
    renamed: dict[str, str] = {}
    for name, (op, change) in calls.items():
        renamed.update(_renamed_outputs(name, op))
        change(nodes[name])
    for name, change in pointers.items():
        change(nodes[name])
    for node in out.node_def:
        node.input[:] = [renamed.get(i, i) for i in node.input]
    for key in list(out.ret):
        out.ret[key] = renamed.get(out.ret[key], out.ret[key])
    out.signature.name = ""
    digest = hashlib.sha1(out.SerializeToString(deterministic=True)).hexdigest()[:12]
    out.signature.name = f"{fdef.signature.name}_opbisect_{digest}"
    return out
