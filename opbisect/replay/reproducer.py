"""A standalone reproducer per source: `repro/<rank>_<op_type>.py` and its inputs, `repro/<rank>_<op_type>.npz`.

The script imports only TensorFlow and NumPy (and the standard library), rebuilds the op as a `tf.raw_ops` call
with its attributes and device, runs it K times on the recorded inputs and exits 1 if the results differ: what
TensorFlow's maintainers ask for in a determinism report.
"""

from __future__ import annotations

import dataclasses
import io

import numpy as np

from ..ir import optypes
from .call import NotReplayable, OpCall

LIMIT_BYTES = 256 * 2**20  # inputs larger than this are not saved (the reproducer is skipped, and says so)

TEMPLATE = '''"""Reproducer written by opbisect for {op} ({op_type}): source #{rank} of {script}.

It runs the op alone {runs} times on the inputs it had in the step (saved beside this file, {npz}), on
{device}, and prints how many distinct results it gave: exit 1 if they differ, 0 if not.{note}
Needs only TensorFlow and NumPy:  python {name}
"""
import hashlib
import sys

import numpy as np
import tensorflow as tf

RUNS = {runs}
saved = np.load(__file__[:-3] + ".npz")

with tf.device({device!r}):
{variables}    args = dict({kwargs})
    digests = set()
    for _ in range(RUNS):
{restore}        out = tf.raw_ops.{op_type}(**args)
        results = {results}{states}
        h = hashlib.sha256()
        for a in results:
            a = np.asarray(a)  # a string tensor's array holds pointers: its items are compared instead
            body = repr(a.tolist()).encode() if a.dtype == object else np.ascontiguousarray(a).tobytes()
            h.update(a.dtype.str.encode() + str(a.shape).encode() + body)
        digests.add(h.hexdigest())
print(f"{op_type}: {{len(digests)}} distinct results in {{RUNS}} runs on {device}")
sys.exit(1 if len(digests) > 1 else 0)
'''


_WORKSPACE_NOTE = """
Outputs {ports} are cuDNN's workspace (its reserve space): their bytes have no defined value and are not compared."""


def _results(workspace: frozenset) -> tuple[str, str]:
    """The template's list of the outputs compared, and the docstring's note on those left out."""
    if not workspace:
        return '[t.numpy() for t in tf.nest.flatten(out) if hasattr(t, "numpy")]', ""
    ports = ", ".join(map(str, sorted(workspace)))
    return (f'[t.numpy() for port, t in enumerate(tf.nest.flatten(out)) if hasattr(t, "numpy") and port not in '
            f'{{{ports}}}]', _WORKSPACE_NOTE.format(ports=ports))


def _render(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_render(v) for v in value) + "]"
    return repr(value)  # tf.DType's repr is "tf.float32"


@dataclasses.dataclass(frozen=True)
class Heading:
    """What a reproducer says of itself: the source's rank, the script it came from, how many runs, where."""

    rank: int
    script: str
    runs: int
    device: str  # where the op runs when the graph placed it nowhere


def files(call: OpCall, values: dict, states: dict, heading: Heading) -> dict[str, str | bytes]:
    """{relative path: content} of the reproducer; NotReplayable when it cannot be written."""
    if call.op_type in ("PyFunc", "EagerPyFunc", "PyFuncStateless"):
        raise NotReplayable("it runs Python code of your process, which a script cannot rebuild")
    arrays, names = {}, {}
    for i, t in enumerate(call.captured):
        names[t] = f"in_{i}"
        arrays[names[t]] = values[t]
    for j, v in enumerate(call.variables):
        names[v] = f"state_{j}"
        arrays[names[v]] = states[v]
    size = sum(np.asarray(a).nbytes for a in arrays.values())
    if size > LIMIT_BYTES:
        raise NotReplayable(f"its inputs take {size / 2**20:.0f} MiB (the limit is {LIMIT_BYTES // 2**20} MiB)")
    kwargs = []
    for a in call.args:
        if a.variable:
            kwargs.append(f"{a.name}=var_{names[a.variable]}.handle")
        elif a.is_list:
            kwargs.append(f"{a.name}=[" + ", ".join(f'tf.constant(saved["{names[t]}"])' for t in a.tensors) + "]")
        else:
            kwargs.append(f'{a.name}=tf.constant(saved["{names[a.tensors[0]]}"])')
    kwargs += [f"{k}={_render(v)}" for k, v in call.attrs.items()]
    variables = "".join(f'    var_{names[v]} = tf.Variable(saved["{names[v]}"])  # `{v}` right before the op\n'
                        for v in call.variables)
    restore = "".join(f'        var_{names[v]}.assign(saved["{names[v]}"])\n' for v in call.variables)
    states = "".join(f" + [var_{names[v]}.numpy()]" for v in call.variables)
    base = f"{heading.rank}_{call.op_type}"
    results, note = _results(optypes.workspace(call.op_type))
    text = TEMPLATE.format(op=call.op, op_type=call.op_type, rank=heading.rank, script=heading.script,
                           runs=heading.runs, device=call.device or heading.device, npz=f"{base}.npz",
                           name=f"{base}.py", variables=variables,
                           kwargs=", ".join(kwargs), restore=restore, states=states, results=results, note=note)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return {f"repro/{base}.py": text, f"repro/{base}.npz": buf.getvalue()}
