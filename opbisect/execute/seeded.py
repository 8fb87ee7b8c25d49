"""Seeded stateful random ops, started before every run where a fresh process starts them.

A stateful random op with a seed (tf_keras Dropout's RandomUniform, tf.random.normal, tf.nn.dropout(seed=...)) draws
a fixed sequence per kernel: a fresh process's first run draws its first numbers, a second run in the same process
the next ones. Restoring the variables does not restart it, so without this every run would draw anew, the op would
be named a source and every op after it would differ (masking the real sources behind a dropout). So each run starts
each such op where a fresh process (or tf.random.set_seed) starts it:

- an op with a stateless twin (optypes' `generator`) at the step's top level becomes what tf.random.Generator runs:
  RngReadAndSkip reads the Philox key and counter from a state variable opbisect makes ([0, seed2, seed], where
  the kernel starts in a fresh process) and moves it on by the op's reservation, and the stateless op draws from
  them: the same numbers, bit for bit. The variable is restored with the rest of the state (and checked like it),
  at no cost per run. (Not the Stateful* generator ops: on an H200 their GPU kernel, which moves the state from
  inside the fill kernel, gave 2 distinct values in 5 runs in a GPT-2 step from an identical state.)
- any other (RandomShuffle, Multinomial, RandomGamma..., or one inside a loop or branch body): TensorFlow's kernel
  cache is cleared before each run (as tf.random.set_seed does), which builds every kernel anew: exact, but each run
  pays the functions' instantiation again (a small tf_keras step 7 -> 285 ms a run on the CPU).

`model.fit` runs Keras's own train function, not the rewritten step: its kernel cache is cleared before each fit run.
Unseeded ops (no global and no op seed: the kernel seeds itself from the OS) are left alone: they are sources.

Under XLA, TensorFlow's compiled stateful random ops ignore their seeds, while the twin draws from its state: there
the rewritten step draws the kernel's stream, not what the compiled original would have drawn.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import tfcompat
from ..graphdef.roundtrip import step_function, traced_again
from ..ir import optypes
from ..ir.ids import split_op_id
from ..record.model import SeededDraw

STATE_SCOPE = "opbisect_seed_state"  # the state variables' names and their placeholders in the GraphDef
BY_STATE, BY_CACHE = "state variable", "kernel cache"


@dataclasses.dataclass
class Restart:
    """How each seeded stateful random op of the step is started anew before every run."""

    draws: list[SeededDraw] = dataclasses.field(default_factory=list)
    variables: dict[str, Any] = dataclasses.field(default_factory=dict)  # variable key -> its state variable

    @property
    def by_cache(self) -> bool:
        return any(d.restart == BY_CACHE for d in self.draws)

    def before_run(self) -> None:
        """Before a run of the (rewritten) step: clear the kernel cache where an op has no state variable."""
        if self.by_cache:
            tfcompat.clear_kernel_cache()

    def before_fit(self) -> None:
        """Before a run of model.fit, whose train function holds the original ops."""
        if self.draws:
            tfcompat.clear_kernel_cache()


def seeded_ops(graph) -> list[str]:
    """The stateful random ops with a global or op seed (trace records their seed attributes)."""
    return [op for op in graph.ops if optypes.has(graph.op_type(op), optypes.RANDOM)
            and (graph.attrs(op).get("seed") or graph.attrs(op).get("seed2"))]


def restarted(target, trace):
    """(target, trace, Restart): the step with each seeded stateful random op drawing from a state variable where it
    can (traced again), and how every seeded op is started before each run. Without seeded ops, all as they were."""
    graph = trace.graph
    ops = seeded_ops(graph)
    twins = [op for op in ops if not split_op_id(op)[0] and optypes.info(graph.op_type(op)).generator]
    draws = [SeededDraw(op, graph.op_type(op), graph.attrs(op).get("site") or graph.attrs(op).get("library_site", ""),
                        BY_STATE if op in twins else BY_CACHE) for op in ops]
    if not twins:
        return target, trace, Restart(draws)
    step, variables = _rewritten_step(trace, twins)
    retarget = dataclasses.replace(target, step=step)
    again = traced_again(retarget, trace)
    keys = {id(v.handle): k for k, v in again.variables.items()}
    return retarget, again, Restart(draws, {keys[id(v.handle)]: v for v in variables})


def _rewritten_step(trace, ops: list[str]):
    """A tf.function of the step's arguments: the step with `ops` replaced by their generator twins; the state
    variables it reads."""
    import tensorflow as tf

    from ..patches.rewrite import rewrite

    unchanged = rewrite(trace, {}, edit_bodies=False)  # the step's GraphDef, its functions registered on import
    gd = unchanged.graph_def
    nodes = {n.name: n for n in gd.node}
    consts = _Consts(gd)
    fed = {}
    for k, op in enumerate(ops):
        node = nodes[op]
        with tf.device(node.device or None), tf.init_scope():
            state = tf.Variable([0, node.attr["seed2"].i, node.attr["seed"].i], dtype=tf.int64, trainable=False,
                                name=f"{STATE_SCOPE}/{op}")
        handle = f"{STATE_SCOPE}/{k}/handle"
        placeholder = gd.node.add(name=handle, op="Placeholder")
        placeholder.attr["dtype"].type = tf.resource.as_datatype_enum
        _as_twin(gd, node, handle, consts)
        fed[handle] = state
    step = step_function(trace, unchanged.without_own_functions(gd), unchanged.register, variables=fed)
    return step, list(fed.values())


class _Consts:
    """The constants the twins share, made once in the GraphDef."""

    def __init__(self, gd):
        self.gd, self.made = gd, {}

    def __call__(self, name: str, value, dtype) -> str:
        import tensorflow as tf

        full = f"{STATE_SCOPE}/{name}"
        if full not in self.made:
            node = self.gd.node.add(name=full, op="Const")
            node.attr["dtype"].type = dtype.as_datatype_enum
            node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value, dtype))
            self.made[full] = node
        return full


def _add(gd, name: str, op: str, inputs: list[str], device: str, **types):
    """A node of `op` with its type attributes (`types`: tf.DTypes; a bool for keep_dims)."""
    node = gd.node.add(name=name, op=op, device=device)
    node.input.extend(inputs)
    for key, value in types.items():
        if isinstance(value, bool):
            node.attr[key].b = value
        else:
            node.attr[key].type = value.as_datatype_enum
    return name


def _as_twin(gd, node, handle: str, const) -> None:
    """Turn a stateful random op's NodeDef into its twin reading the state at `handle`: RngReadAndSkip moves the
    state on by the op's element count (it skips 256 samples an element, as the op's kernel does) and gives the
    key and counter it was at, and the stateless op under the node's own name draws from them. Inputs, control
    inputs, device and output are the op's."""
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2

    scope, dev = f"{node.name}/{STATE_SCOPE}", node.device
    data = [i for i in node.input if not i.startswith("^")]
    controls = [i for i in node.input if i.startswith("^")]
    shape_type = tf.as_dtype(node.attr["T"].type)
    int64, uint64 = tf.int64, tf.uint64
    count = _add(gd, f"{scope}/count", "Prod", [data[0], const("axis0", 0, tf.int32)], dev, T=shape_type,
                 Tidx=tf.int32, keep_dims=False)
    delta = _add(gd, f"{scope}/delta", "Cast", [count], dev, SrcT=shape_type, DstT=uint64)
    state = _add(gd, f"{scope}/read_and_skip", "RngReadAndSkip",
                 [handle, const("algorithm", optypes.PHILOX, tf.int32), delta, *controls], dev)
    parts = {}
    for part, begin, size in (("counter", 0, 2), ("key", 2, 1)):
        sliced = _add(gd, f"{scope}/{part}_slice", "Slice", [state, const(f"begin{begin}", [begin], tf.int32),
                                                             const(f"size{size}", [size], tf.int32)], dev,
                      T=int64, Index=tf.int32)
        parts[part] = _add(gd, f"{scope}/{part}", "Bitcast", [sliced], dev, T=int64, type=uint64)

    def copy(key):
        return attr_value_pb2.AttrValue.FromString(node.attr[key].SerializeToString())

    kept = {key: copy(key) for key in node.attr if key.startswith("_") and key != "_class"}
    renamed = {optypes.GENERATOR_ATTRS[key]: copy(key) for key in node.attr if key in optypes.GENERATOR_ATTRS}
    node.op = optypes.info(node.op).generator
    node.ClearField("attr")
    for key, value in {**kept, **renamed}.items():
        node.attr[key].CopyFrom(value)
    del node.input[:]
    node.input.extend([data[0], parts["key"], parts["counter"], const("algorithm", optypes.PHILOX, tf.int32),
                       *data[1:], *controls])
