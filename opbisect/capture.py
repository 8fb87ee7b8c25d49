"""Capture: an instrumented copy of the traced step that also returns fingerprints of chosen tensors.

The flat GraphDef is imported into a fresh tf.function, fed with the user's arguments and the captured values
(variable handles among them), so the step runs on the user's real variables. Taps are added after the import:
- an output `op:i` is fingerprinted where it is produced;
- the state after a write, `op:res<i>`, is read right after the write and before any later use of the variable
  (a ReadVariableOp ordered by control edges), then fingerprinted.
The chosen set of taps is an argument, so bisection can tap only a frontier. `full` names tensors returned
whole (for the magnitude pass of the sources only).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from .fingerprint import Fingerprinter
from .ir import split_id
from .trace import Trace

SCOPE = "opb"


@dataclasses.dataclass
class Instrumented:
    taps: list[str]
    full: list[str]
    fn: Any  # tf.function(*feeds) -> (int64[len(taps)], [step outputs], [full tensors])
    trace: Trace

    def __call__(self, args: tuple) -> tuple[np.ndarray, list, list]:
        fps, outs, full = self.fn(*self.trace.feeds(args))
        return fps.numpy(), list(outs), [t.numpy() for t in full]


def tappable_tensors(trace: Trace, include_states: bool = True) -> tuple[list[str], dict[str, int]]:
    """All tensor ids worth tapping (numeric, integer, boolean outputs and post-write states), and the
    count of outputs skipped per dtype."""
    from .fingerprint import tappable

    graph = trace.graph
    taps, skipped = [], {}
    for op in graph.topo_order():
        for tid in graph.outputs(op):
            dtype = graph.dtype(tid)
            if tappable(dtype):
                taps.append(tid)
            else:
                skipped[dtype] = skipped.get(dtype, 0) + 1
        if include_states:
            taps.extend(f"{op}:res{slot}" for slot, _ in graph.written(op))
    return taps, skipped


def build(trace: Trace, taps: list[str], fingerprinter: Fingerprinter, full: list[str] = ()) -> Instrumented:
    import tensorflow as tf

    graph = trace.graph
    placeholders = trace.arg_names + trace.capture_names
    later_users: dict[tuple[str, str], list[str]] = {}
    for u, v, d in graph.g.edges(data=True):
        if d["kind"] == "resource":
            later_users.setdefault((u, d["var"]), []).append(v)

    def body(*feeds):
        fed = {f"{name}:0": t for name, t in zip(placeholders, feeds)}
        tf.graph_util.import_graph_def(trace.graph_def, input_map=fed, name=SCOPE)
        g = tf.compat.v1.get_default_graph()
        states = {}

        def tensor(tid: str):
            op, port = split_id(tid)
            if port.startswith("res"):
                if tid not in states:
                    states[tid] = _read_after_write(g, graph, op, int(port[3:]), later_users)
                return states[tid]
            if f"{op}:{port}" in fed:  # placeholders are replaced by what feeds them
                return fed[f"{op}:{port}"]
            return g.get_tensor_by_name(f"{SCOPE}/{op}:{port}")

        tapped = [tensor(t) for t in taps]
        fps = fingerprinter.many(tapped)
        outs = [tensor(n) for n in trace.output_names]
        whole = [tf.identity(tensor(t)) for t in full]
        return fps, outs, whole

    fn = tf.function(body, autograph=False, jit_compile=trace.jit_compile)
    return Instrumented(taps=list(taps), full=list(full), fn=fn, trace=trace)


def _read_after_write(g, graph, op: str, slot: int, later_users: dict):
    """The variable at `op`'s resource input `slot`, read right after `op` and before every later user."""
    import tensorflow as tf

    write = g.get_operation_by_name(f"{SCOPE}/{op}")
    var = dict(graph.resources(op))[slot]
    dtype = tf.as_dtype(graph.attrs(op)["res_dtypes"][str(slot)])
    with tf.control_dependencies([write]):
        value = tf.raw_ops.ReadVariableOp(resource=write.inputs[slot], dtype=dtype)
    for user in later_users.get((op, var), []):
        g.get_operation_by_name(f"{SCOPE}/{user}")._add_control_input(value.op)  # noqa: SLF001 - no public API
    return value


def make_state_fingerprinter(variables: dict, fingerprinter: Fingerprinter) -> Callable[[], dict[str, int]]:
    """A callable fingerprinting every variable's current value, keyed like `variables`."""
    import tensorflow as tf

    keys = sorted(variables)
    values = [variables[k] for k in keys]
    fn = tf.function(lambda: fingerprinter.many([v.read_value() for v in values]), autograph=False)

    def state() -> dict[str, int]:
        if not keys:
            return {}
        return dict(zip(keys, fn().numpy().tolist()))

    return state


def make_value_fingerprinter(fingerprinter: Fingerprinter) -> Callable[[list], list[int]]:
    """A callable fingerprinting a list of eager tensors (the step's outputs)."""
    import tensorflow as tf

    fn = tf.function(lambda ts: fingerprinter.many(list(ts)), autograph=False, reduce_retracing=True)

    def values(tensors: list) -> list[int]:
        tensors = [t for t in tensors if t.dtype not in (tf.string, tf.resource, tf.variant)]
        return fn(tensors).numpy().tolist() if tensors else []

    return values
