"""One op as a `tf.raw_ops` call: its type, its arguments by name, its attributes, its device.

The same `OpCall` drives the replay of a source alone (opbisect.replay.rerun) and the standalone reproducer
(opbisect.replay.reproducer), so the script a user sends to TensorFlow's maintainers runs exactly what opbisect
replayed. Arguments are filled from the source's recorded inputs; a resource argument (a variable the op reads
or writes) is filled with a fresh variable holding the variable's value right before the op.
"""

from __future__ import annotations

import dataclasses

from .. import tfcompat
from ..ir import optypes
from ..ir.graph import OpGraph


class NotReplayable(Exception):
    """The op cannot run alone; the message says why."""


@dataclasses.dataclass
class Arg:
    name: str  # the OpDef's argument name, the raw_ops keyword
    tensors: list[str]  # tensor ids feeding it (several for a list argument)
    is_list: bool
    variable: str = ""  # a resource argument: the key of the variable behind it


@dataclasses.dataclass
class OpCall:
    op: str  # the source's op id
    op_type: str
    args: list[Arg]
    attrs: dict  # raw_ops keyword -> Python value (tf.DType for types)
    device: str

    @property
    def captured(self) -> list[str]:
        """The tensor ids whose values the call needs (resource arguments aside)."""
        return [t for a in self.args if not a.variable for t in a.tensors]

    @property
    def variables(self) -> list[str]:
        return [a.variable for a in self.args if a.variable]


def attr_value(value):
    import tensorflow as tf

    kind = value.WhichOneof("value")
    if kind == "list":
        lst = value.list
        for field, convert in (("s", bytes.decode), ("i", int), ("f", float), ("b", bool), ("type", tf.as_dtype),
                               ("shape", _shape)):
            items = list(getattr(lst, field))
            if items:
                return [convert(x) for x in items]
        if list(lst.func) or list(lst.tensor):
            raise NotReplayable("it takes a list of functions or tensors as an attribute")
        return []
    if kind in ("func", "tensor", "placeholder"):
        raise NotReplayable(f"it takes a {kind} as an attribute")
    return {"s": lambda v: v.s.decode(), "i": lambda v: int(v.i), "f": lambda v: float(v.f), "b": lambda v: v.b,
            "type": lambda v: tf.as_dtype(v.type), "shape": lambda v: _shape(v.shape)}[kind](value)


def _shape(proto) -> list[int] | None:
    return None if proto.unknown_rank else [d.size for d in proto.dim]


def op_call(graph: OpGraph, node_def, op: str) -> OpCall:
    """The raw_ops call of `op`, whose NodeDef in the flat GraphDef is `node_def`."""
    op_type = graph.op_type(op)
    if optypes.has(op_type, optypes.COLLECTIVE):
        raise NotReplayable("a cross-replica collective runs only with every replica taking part (alone it would "
                            "wait for the others forever)")
    op_def = tfcompat.op_def(op_type)
    if op_def is None:
        raise NotReplayable(f"{op_type} is not a registered op here")
    inputs = graph.data_inputs(op)
    resources = dict(graph.resources(op))
    inferred, args, i = set(), [], 0
    for arg in op_def.input_arg:
        inferred.update(a for a in (arg.type_attr, arg.number_attr, arg.type_list_attr) if a)
        if arg.number_attr:
            count = node_def.attr[arg.number_attr].i
        elif arg.type_list_attr:
            count = len(node_def.attr[arg.type_list_attr].list.type)
        else:
            count = 1
        slots = list(range(i, i + count))
        variable = resources.get(slots[0], "") if count == 1 else ""
        if variable == "<opaque resource>":
            raise NotReplayable("it uses state that is not a tf.Variable")
        args.append(Arg(name=arg.name, tensors=inputs[i:i + count], is_list=bool(arg.number_attr or
                                                                                  arg.type_list_attr),
                        variable=variable))
        i += count
    attrs = {k: attr_value(v) for k, v in sorted(node_def.attr.items()) if k not in inferred and not k.startswith("_")}
    return OpCall(op=op, op_type=op_type, args=args, attrs=attrs, device=node_def.device)
