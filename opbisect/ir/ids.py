"""The one ID scheme for ops and tensors: `TensorRef` is its only parser and formatter.

Spelling (what the CSV, the record and the terminal show):

    op                      an op in the step's top-level (flat, inlined) graph: its name there
    region::op              an op inside a loop or branch body; region e.g. `while/body`, `cond/then_branch`
    op:3                    output 3 of op (TensorFlow's own spelling)
    op:res0                 the state of the variable at op's resource input 0 right after op (a write)
    op:pre0                 the state of that variable right before op (what replaying op alone starts from)
    region::op:0@7          output 0 of an op in a body, at iteration 7 of its loop

TensorFlow op names never contain `::`, `@` or a colon, so the parts are unambiguous.

An op inside a body runs once per execution of its region; one execution of it is an *instance*, spelled
`region::op@7` (the 8th time its region ran in the step). The analysis compares instances (`ir.unroll`); the
report names the op and the first iteration where it differs.
"""

from __future__ import annotations

import dataclasses

OUTPUT = "output"
STATE = "state"
PRIOR = "prior"
_REGION = "::"
_PORTS = {STATE: "res", PRIOR: "pre"}  # the spelling of a port of each kind but OUTPUT


def op_id(name: str, region: str = "") -> str:
    """The id of op `name` in `region` ("" for the top-level graph)."""
    return f"{region}{_REGION}{name}" if region else name


def split_op_id(op: str) -> tuple[str, str]:
    """'while/body::add' -> ('while/body', 'add'); 'add' -> ('', 'add')."""
    region, sep, name = op.rpartition(_REGION)
    return (region, name) if sep else ("", op)


@dataclasses.dataclass(frozen=True, order=True)
class TensorRef:
    """A tensor: output `port` of `op`, or (kind STATE) the variable at resource input `port` right after `op`, or
    (kind PRIOR) that variable right before `op`."""

    op: str  # the op's id (region included)
    port: int
    kind: str = OUTPUT
    iteration: int | None = None

    @classmethod
    def output(cls, op: str, port: int, iteration: int | None = None) -> "TensorRef":
        return cls(op, int(port), OUTPUT, iteration)

    @classmethod
    def state(cls, op: str, slot: int, iteration: int | None = None) -> "TensorRef":
        return cls(op, int(slot), STATE, iteration)

    @classmethod
    def parse(cls, text: str) -> "TensorRef":
        body, at, iteration = text.partition("@")
        op, colon, port = body.rpartition(":")
        if not colon or not op:
            raise ValueError(f"not a tensor id: {text!r}")
        kind = next((k for k, prefix in _PORTS.items() if port.startswith(prefix)), OUTPUT)
        digits = port[len(_PORTS[kind]):] if kind in _PORTS else port
        if not digits.isdigit() or (at and not iteration.isdigit()):
            raise ValueError(f"not a tensor id: {text!r}")
        return cls(op, int(digits), kind, int(iteration) if at else None)

    @property
    def is_state(self) -> bool:
        return self.kind == STATE

    @property
    def is_prior(self) -> bool:
        return self.kind == PRIOR

    def at(self, iteration: int | None) -> "TensorRef":
        """The same tensor at another execution of its body (None: the tensor, no execution named)."""
        return dataclasses.replace(self, iteration=iteration)

    @property
    def region(self) -> str:
        return split_op_id(self.op)[0]

    @property
    def instance(self) -> str:
        """The op instance that produced this tensor: the op, at its iteration."""
        return instance_id(self.op, self.iteration)

    def __str__(self) -> str:
        port = f"{_PORTS[self.kind]}{self.port}" if self.kind in _PORTS else str(self.port)
        at = "" if self.iteration is None else f"@{self.iteration}"
        return f"{self.op}:{port}{at}"


def instance_id(op: str, iteration: int | None) -> str:
    """'while/body::add', 7 -> 'while/body::add@7'; an op outside any body is its own instance."""
    return op if iteration is None else f"{op}@{iteration}"


def split_instance(instance: str) -> tuple[str, int | None]:
    """'while/body::add@7' -> ('while/body::add', 7); 'add' -> ('add', None)."""
    op, at, iteration = instance.partition("@")
    return (op, int(iteration)) if at else (op, None)


def output_id(op: str, port: int) -> str:
    return str(TensorRef.output(op, port))


def state_id(op: str, slot: int) -> str:
    return str(TensorRef.state(op, slot))


def op_of(tensor: str) -> str:
    """The op instance of a tensor id (the op id itself outside loop and branch bodies)."""
    return TensorRef.parse(tensor).instance
