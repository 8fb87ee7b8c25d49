"""Capture inside loop and branch bodies: each entered body is rebuilt as a new function that also records the
digests of its own taps, and each loop or branch op is rewired to call the rebuilt bodies.

Each body's digests are a matrix with a row per execution of the body in the step: column 0 is the row of the
enclosing body's execution it ran in (0 at the step's top level), the other columns the digests of its taps. The
matrices are threaded through the step like loop variables: every rewired op takes the matrices of the bodies it
holds (at any depth) as extra inputs and returns them with its rows appended:
- a branch op passes them to the branch that runs, which appends its row (the others are left unchanged: which
  branch ran is recorded too);
- a loop op carries them as extra loop variables; each iteration appends its row, so a body's row count is the
  number of times it ran in the whole step, and a body nested in a loop appends to the same matrix on every
  iteration of the outer loop.
The index of the current row of the enclosing body goes in as one more input, so each row says where it ran.

Under XLA every shape is fixed, so a matrix cannot grow: it has a fixed number of rows instead, a header row
whose column 0 counts the executions, then `capacity` rows, then one spare row that executions past the capacity
overwrite (counted, not fingerprinted). A body outside any loop runs at most once: its capacity is 1.

Only the GraphDef changes: each rebuilt body is traced once (tf.function over the body's own GraphDef with
capture nodes added) and put in the step's function library; no Python name is patched.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..graphdef.importer import graph_importer
from ..ir.ids import TensorRef
from .builder import PREFIX, GraphDefBuilder, digest_vector, tap_specs, tappable_tensors

INDEX = f"{PREFIX}/index"  # placeholder in a rebuilt body: the index of its current execution
LOOP_ROWS = 512  # under XLA: the executions of a body inside a loop fingerprinted per step


def width(trace, region: str) -> int:
    """Columns of a body's matrix: the enclosing execution's index, then one per tap."""
    return 1 + len(tappable_tensors(trace, region)[0])


def capacity(trace, region: str) -> int | None:
    """Rows of a body's matrix under XLA (None: it grows, one row per execution)."""
    if not trace.jit_compile:
        return None
    graph, r = trace.graph, region
    while r:
        if graph.regions[r]["kind"] == "loop":
            return LOOP_ROWS
        r = graph.regions[r]["parent"]
    return 1


def shape(trace, region: str) -> list:
    rows = capacity(trace, region)
    return [-1 if rows is None else rows + 2, width(trace, region)]


def read_rows(trace, region: str, matrix) -> tuple:
    """(the fingerprinted rows of a body's matrix, how many times the body ran)."""
    rows = capacity(trace, region)
    if rows is None:
        return matrix, matrix.shape[0]
    ran = int(matrix[0, 0])
    return matrix[1:1 + min(ran, rows)], ran


def _append(matrix, row, rows: int | None):
    """The matrix with `row` added for one more execution, and the index of that execution."""
    import tensorflow as tf

    if rows is None:
        return tf.concat([matrix, row], 0), tf.shape(matrix, out_type=tf.int64)[0]
    ran = matrix[0, 0]
    at = tf.reshape(tf.minimum(ran + 1, rows + 1), [1, 1])  # past the capacity: the spare row
    matrix = tf.tensor_scatter_nd_update(matrix, at, row)
    return tf.tensor_scatter_nd_update(matrix, [[0, 0]], tf.reshape(ran + 1, [1])), ran


@dataclasses.dataclass
class Rebuild:
    """What rebuilding the entered bodies of one scope shares: the GraphDef's builder, the trace, the fingerprinter,
    and the values the bodies hand over (capture.values.BodyValues; None: none)."""

    b: GraphDefBuilder
    trace: Any
    fingerprinter: Any
    values: Any = None

    def nested(self, b: GraphDefBuilder) -> "Rebuild":
        return dataclasses.replace(self, b=b)


@dataclasses.dataclass
class _Carried:
    """What a loop or branch op's bodies carry besides their own values: the digest matrices of the bodies they
    report (`report`, with their shapes) and the threaded values' slots."""

    report: list[str]
    shapes_of: dict
    slots: list[str]


def rewrite_control_flow(ctx: Rebuild, scope: str, index: str, matrices: dict[str, str]) -> dict[str, str]:
    """Rewire every entered loop and branch op of `scope` (whose GraphDef `ctx.b` holds). `index` is the spec of the
    current execution's index of `scope`, `matrices` the specs of the matrices of the bodies nested in it (as they
    come in), and of the slots of their values where `ctx.values` threads them. Returns the specs of those matrices
    and slots as they come out of the ops."""
    by_op: dict[str, list] = {}
    for region in ctx.trace.regions.values():
        if region.parent == scope:
            by_op.setdefault(region.op, []).append(region)
    out = {}
    for op_name, bodies in by_op.items():
        out.update(_rewire(ctx, op_name, bodies, index, matrices))
    return out


def _rewire(ctx: Rebuild, op_name: str, bodies: list, index: str, matrices: dict[str, str]) -> dict[str, str]:
    """One loop or branch op: its bodies rebuilt, its signature, inputs and shapes extended by what they carry."""
    report = [r for body in bodies for r in ctx.trace.graph.subregions(body.id)]
    carried = _Carried(report, {r: shape(ctx.trace, r) for r in report},
                       ctx.values.slots(report) if ctx.values is not None else [])
    node = ctx.b.nodes[op_name]
    if ctx.values is not None and not ctx.values.threaded:
        # A pass with host callbacks runs without XLA, but a step traced for XLA leaves its loops and branches
        # functional (no `_lower_using_switch_merge`): each body then runs as one function on the op's device,
        # and on a GPU the callback inside it has no kernel (NotFoundError on the H200). Lowered, each node of
        # the body is placed on its own, the callback on the CPU, as in a step traced without XLA.
        node.attr["_lower_using_switch_merge"].b = True
    loop = "body" in node.attr
    n0 = len(node.attr["T" if loop else "Tout"].list.type)
    for body in bodies:
        name = _BodyRebuild(ctx, body, carried, loop).function()
        if body.suffix.startswith("branch") and node.attr["branches"].list.func:
            node.attr["branches"].list.func[int(body.suffix[len("branch"):])].name = name
        else:
            node.attr[body.suffix].func.name = name
    _extend_types(ctx, node, loop, carried, bodies[0])
    data = [i for i in node.input if not i.startswith("^")]
    control = [i for i in node.input if i.startswith("^")]
    del node.input[:]
    node.input.extend(data + [index] + [matrices[k] for k in carried.report + carried.slots] + control)
    _extend_shapes(node, n0, loop, carried)
    first = n0 + (1 if loop else 0)
    return {k: f"{op_name}:{first + j}" for j, k in enumerate(carried.report + carried.slots)}


def _extend_types(ctx: Rebuild, node, loop: bool, carried: _Carried, body) -> None:
    """The op's types gain the index, the matrices and the slots (a loop's condition takes them too)."""
    import tensorflow as tf

    int64, slot_types = tf.int64.as_datatype_enum, _dtypes(ctx.values, ctx.trace.graph, carried.slots)
    if loop:
        node.attr["cond"].func.name = _cond_function(ctx, body, carried)
        node.attr["T"].list.type.extend([int64] * (1 + len(carried.report)) + slot_types)
    else:
        node.attr["Tin"].list.type.extend([int64] * (1 + len(carried.report)) + slot_types)
        node.attr["Tout"].list.type.extend([int64] * len(carried.report) + slot_types)


def _extend_shapes(node, n0: int, loop: bool, carried: _Carried) -> None:
    """Where the op states its outputs' shapes: those of the index, the matrices and the slots too."""
    from tensorflow.core.framework import tensor_shape_pb2

    shapes = node.attr["output_shapes"].list.shape if "output_shapes" in node.attr else None
    if shapes is None or len(shapes) != n0:
        return
    if loop:
        shapes.add()  # the index: a scalar
    for r in carried.report:
        proto = tensor_shape_pb2.TensorShapeProto()
        for size in carried.shapes_of[r]:
            proto.dim.add(size=size)
        shapes.append(proto)
    shapes.extend(tensor_shape_pb2.TensorShapeProto(unknown_rank=True) for _ in carried.slots)


def slot_zeros(b: GraphDefBuilder, trace, values, names: dict[str, str]) -> None:
    """For the step's top level, once every body is traced (which fixes each slot's shape): each threaded slot's
    value before its body runs, zeros, as the node `names` gives it in b's GraphDef."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2

    for slot, name in names.items():
        dtype = _dtypes(values, trace.graph, [slot], enum=False)[0]
        dims = tf.make_tensor_proto(np.asarray(values.shape(slot), np.int32))
        zero = tf.make_tensor_proto(np.zeros([], dtype.as_numpy_dtype), dtype)
        b.add(f"{name}/dims", "Const", dtype=tf.int32, value=attr_value_pb2.AttrValue(tensor=dims))
        b.add(f"{name}/zero", "Const", dtype=dtype, value=attr_value_pb2.AttrValue(tensor=zero))
        b.add(name, "Fill", [f"{name}/dims:0", f"{name}/zero:0"], T=dtype, index_type=tf.int32)


def _variable_shape(trace, tid: str):
    """A variable's state has the variable's shape, which reading it inside a body does not carry; None for an
    output."""
    ref = TensorRef.parse(tid)
    if not (ref.is_state or ref.is_prior):
        return None
    var = trace.variables.get(dict(trace.graph.resources(ref.op)).get(ref.port))
    return None if var is None else var.shape


def _dtypes(values, graph, slots: list[str], enum: bool = True) -> list:
    """The dtype of each slot (as a DataType enum, or a tf.DType)."""
    dtypes = [values.dtype(s, graph) for s in slots]
    return [d.as_datatype_enum for d in dtypes] if enum else dtypes


def empty_matrices(b: GraphDefBuilder, trace) -> tuple[str, dict[str, str]]:
    """For the step's top level: the index 0 and an empty matrix per entered body, as Consts in b's GraphDef."""
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2, tensor_pb2

    zero = tensor_pb2.TensorProto(dtype=tf.int64.as_datatype_enum, int64_val=[0])
    b.add(INDEX, "Const", dtype=tf.int64, value=attr_value_pb2.AttrValue(tensor=zero))
    specs = {}
    for j, region in enumerate(trace.regions):
        rows, cols = shape(trace, region)
        dims = tensor_pb2.TensorProto(dtype=tf.int32.as_datatype_enum, int_val=[max(rows, 0), cols])
        dims.tensor_shape.dim.add(size=2)
        b.add(f"{PREFIX}/empty/{j}/dims", "Const", dtype=tf.int32, value=attr_value_pb2.AttrValue(tensor=dims))
        b.add(f"{PREFIX}/empty/{j}", "Fill", [f"{PREFIX}/empty/{j}/dims:0", f"{INDEX}:0"], T=tf.int64,
              index_type=tf.int32)  # zeros: a fixed-size matrix's count starts at 0
        specs[region] = f"{PREFIX}/empty/{j}:0"
    return f"{INDEX}:0", specs


def _signature(ctx: Rebuild, region, carried: _Carried) -> list:
    import tensorflow as tf

    return ([tf.TensorSpec(s, dtype) for dtype, s in region.arg_specs] + [tf.TensorSpec([], tf.int64)]
            + [tf.TensorSpec([None if n < 0 else n for n in carried.shapes_of[r]], tf.int64) for r in carried.report]
            + [tf.TensorSpec(None, dtype) for dtype in _dtypes(ctx.values, ctx.trace.graph, carried.slots,
                                                               enum=False)])


class _BodyRebuild:
    """The rebuilt body of `region`: its own taps digested into a row of its matrix each execution, the bodies nested
    in it rewired (rewrite_control_flow), its values handed over; traced, its FunctionDef (and those it calls) go
    in the library of `ctx.b` (`function()`, its name)."""

    def __init__(self, ctx: Rebuild, region, carried: _Carried, loop: bool):
        import numpy as np
        import tensorflow as tf

        self.ctx, self.region, self.carried, self.loop = ctx, region, carried, loop
        graph, values = ctx.trace.graph, ctx.values
        taps = tappable_tensors(ctx.trace, region.id)[0]
        self.rb = rb = GraphDefBuilder(region.graph_def)
        spec = tap_specs(rb, graph, region.id, taps)
        fps, layout = digest_vector(rb, graph, [(spec(t), graph.dtype(t)) for t in taps], ctx.fingerprinter)
        inner = graph.subregions(region.id)[1:]  # the bodies nested in this one
        self.through = inner + (values.slots(inner) if values is not None else [])  # what the nested ops carry
        self.ours = {INDEX: INDEX, **{k: f"{PREFIX}/in/{j}" for j, k in enumerate(self.through)}}
        for k, name in self.ours.items():
            rb.add(name, "Placeholder", dtype=tf.int64 if k == INDEX or k in inner else _dtypes(values, graph, [k])[0])
        nested = rewrite_control_flow(ctx.nested(rb), region.id, f"{self.ours[INDEX]}:0",
                                      {k: f"{self.ours[k]}:0" for k in self.through})
        self.taken = values.tensors(region.id) if values is not None else []
        self.fixed = [_variable_shape(ctx.trace, t) for t in self.taken]
        wanted = list(region.output_names) + [fps] + [nested[k] for k in self.through] + [spec(t) for t in self.taken]
        self.run = graph_importer(rb.gd, list(region.arg_names) + list(self.ours.values()), wanted, "body")
        self.order = None if layout is None else np.argsort(np.asarray(layout))  # vector position of each tap
        self.rows, self.cols = capacity(ctx.trace, region.id), carried.shapes_of[region.id][1]

    def __call__(self, *args):
        import tensorflow as tf

        region, carried, values = self.region, self.carried, self.ctx.values
        self.rb.register(tf.compat.v1.get_default_graph())
        n_args, n_out = len(region.arg_names), len(region.output_names)
        tick, came = args[n_args], dict(zip(carried.report + carried.slots, args[n_args + 1:]))
        index = tf.shape(came[region.id], out_type=tf.int64)[0] if self.rows is None else came[region.id][0, 0]
        feeds = {f"{a}:0": x for a, x in zip(region.arg_names, args)}
        feeds[f"{self.ours[INDEX]}:0"] = index
        feeds.update({f"{self.ours[k]}:0": came[k] for k in self.through})
        got = self.run(feeds)
        gone = dict(zip(self.through, got[n_out + 1:n_out + 1 + len(self.through)]))
        mine = got[n_out + 1 + len(self.through):]  # the tensors `taken`
        if self.taken and values.threaded:
            mine = [x if fixed is None else tf.ensure_shape(x, fixed) for x, fixed in zip(mine, self.fixed)]
            gone.update(values.fill(region.id, index, mine, came))
        elif self.taken:
            values.take(region.id, index, mine)
        digests = got[n_out] if self.order is None else tf.gather(got[n_out], self.order)
        row = tf.concat([tf.reshape(tick, [1, 1]), tf.reshape(digests, [1, self.cols - 1])], 1)
        gone[region.id] = _append(came[region.id], row, self.rows)[0]
        carried_tick = [tick] if self.loop else []
        return ([tf.identity(v) for v in got[:n_out]] + carried_tick
                + [gone.get(k, came[k]) for k in carried.report + carried.slots])

    def function(self) -> str:
        import tensorflow as tf

        fn = tf.function(self, input_signature=_signature(self.ctx, self.region, self.carried), autograph=False)
        self.ctx.b.functions.extend(self.rb.functions)
        return _into_library(self.ctx.b, fn.get_concrete_function())


def _cond_function(ctx: Rebuild, region, carried: _Carried) -> str:
    """The loop's condition, taking (and ignoring) the extra loop variables."""
    import tensorflow as tf

    cond = region.cond
    names = [t.op.name for t in cond.inputs]
    run = graph_importer(cond.as_graph_def(), names, [cond.outputs[0].name], "cond")  # no placeholders: XLA

    def fn(*args):
        return tf.identity(run({f"{n}:0": x for n, x in zip(names, args)})[0])

    sig = _signature(ctx, region, carried)
    return _into_library(ctx.b, tf.function(fn, input_signature=sig, autograph=False).get_concrete_function())


def _into_library(b: GraphDefBuilder, concrete) -> str:
    """Put a traced function, and every function it calls, in b's GraphDef library; its name."""
    b.functions.append(concrete)
    have = {f.signature.name for f in b.gd.library.function}
    for f in [concrete.function_def, *concrete.graph.as_graph_def().library.function]:
        if f.signature.name not in have:
            b.gd.library.function.add().CopyFrom(f)
            have.add(f.signature.name)
    return concrete.function_def.signature.name
