"""Replay a source alone: its op, on its recorded inputs, K times on the same device, counting distinct results.

A result is the op's outputs (cuDNN workspace aside: optypes.workspace) and, for a write, the variable's value
after it (the variable is put back to its value before the op before every run). An op that varies alone is
"confirmed alone"; one that does not needs its context to vary (concurrency with other ops, memory layout, a
neighbour).
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..digests import value_bytes
from ..ir import optypes
from ..record.model import Replay
from .call import NotReplayable, OpCall


def digest(arrays) -> str:
    """One digest of several arrays: their dtypes, shapes and bytes."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(value_bytes(a))
    return h.hexdigest()


def replay(call: OpCall, values: dict[str, np.ndarray], states: dict[str, np.ndarray], runs: int,
           device: str) -> Replay:
    import tensorflow as tf

    try:
        op = getattr(tf.raw_ops, call.op_type)
    except AttributeError:
        return Replay(runs=0, distinct=0, note=f"tf.raw_ops has no {call.op_type}")
    seen, workspace = set(), optypes.workspace(call.op_type)
    with tf.device(call.device or device):
        variables = {v: tf.Variable(states[v]) for v in call.variables}
        kwargs = {}
        for a in call.args:
            if a.variable:
                kwargs[a.name] = variables[a.variable].handle
            elif a.is_list:
                kwargs[a.name] = [tf.constant(values[t]) for t in a.tensors]
            else:
                kwargs[a.name] = tf.constant(values[a.tensors[0]])
        for _ in range(runs):
            for key, v in variables.items():
                v.assign(states[key])
            try:
                out = op(**kwargs, **call.attrs)
            except Exception as exc:  # noqa: BLE001 - the op alone refused what the step fed it: say so
                return Replay(runs=0, distinct=0, note=f"running it alone raised {type(exc).__name__}")
            flat = [t.numpy() for port, t in enumerate(tf.nest.flatten(out))
                    if hasattr(t, "numpy") and port not in workspace]
            seen.add(digest(flat + [v.numpy() for v in variables.values()]))
    return Replay(runs=runs, distinct=len(seen))


def not_replayed(exc: NotReplayable) -> Replay:
    return Replay(runs=0, distinct=0, note=f"not replayed alone: {exc}")
