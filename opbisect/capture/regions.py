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

Only the GraphDef changes: each rebuilt body is traced once (tf.function over the body's own GraphDef with
capture nodes added) and put in the step's function library; no Python name is patched.
"""

from __future__ import annotations

from ..trace.inline import parse_input
from .taps import PREFIX, _GraphDefBuilder, _without_fed_placeholders, digest_vector, tap_specs, tappable_tensors

INDEX = f"{PREFIX}/index"  # placeholder in a rebuilt body: the index of its current execution


def width(trace, region: str) -> int:
    """Columns of a body's matrix: the enclosing execution's index, then one per tap."""
    return 1 + len(tappable_tensors(trace, region)[0])


def rewrite_control_flow(b: _GraphDefBuilder, trace, scope: str, fingerprinter, index: str,
                         matrices: dict[str, str]) -> dict[str, str]:
    """Rewire every entered loop and branch op of `scope` (whose GraphDef `b` holds). `index` is the spec of the
    current execution's index of `scope`, `matrices` the specs of the matrices of the bodies nested in it (as they
    come in). Returns the specs of those matrices as they come out of the ops."""
    import tensorflow as tf
    from tensorflow.core.framework import tensor_shape_pb2

    graph = trace.graph
    by_op: dict[str, list] = {}
    for region in trace.regions.values():
        if region.parent == scope:
            by_op.setdefault(region.op, []).append(region)
    out = {}
    for op_name, bodies in by_op.items():
        report = [r for body in bodies for r in graph.subregions(body.id)]
        widths = {r: width(trace, r) for r in report}
        node = b.nodes[op_name]
        loop = "body" in node.attr
        n0 = len(node.attr["T" if loop else "Tout"].list.type)
        for body in bodies:
            name = _body_function(b, trace, body, report, widths, fingerprinter, loop)
            if body.suffix.startswith("branch") and node.attr["branches"].list.func:
                node.attr["branches"].list.func[int(body.suffix[len("branch"):])].name = name
            else:
                node.attr[body.suffix].func.name = name
        int64 = tf.int64.as_datatype_enum
        if loop:
            node.attr["cond"].func.name = _cond_function(b, bodies[0], report, widths)
            node.attr["T"].list.type.extend([int64] * (1 + len(report)))
        else:
            node.attr["Tin"].list.type.extend([int64] * (1 + len(report)))
            node.attr["Tout"].list.type.extend([int64] * len(report))
        data = [i for i in node.input if not i.startswith("^")]
        control = [i for i in node.input if i.startswith("^")]
        del node.input[:]
        node.input.extend(data + [index] + [matrices[r] for r in report] + control)
        shapes = node.attr["output_shapes"].list.shape if "output_shapes" in node.attr else None
        if shapes is not None and len(shapes) == n0:
            if loop:
                shapes.add()  # the index: a scalar
            for r in report:
                shape = tensor_shape_pb2.TensorShapeProto()
                shape.dim.add(size=-1)
                shape.dim.add(size=widths[r])
                shapes.append(shape)
        first = n0 + (1 if loop else 0)
        out.update({r: f"{op_name}:{first + j}" for j, r in enumerate(report)})
    return out


def empty_matrices(b: _GraphDefBuilder, trace) -> tuple[str, dict[str, str]]:
    """For the step's top level: the index 0 and an empty matrix per entered body, as Consts in b's GraphDef."""
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2, tensor_pb2

    zero = tensor_pb2.TensorProto(dtype=tf.int64.as_datatype_enum, int64_val=[0])
    b.add(INDEX, "Const", dtype=tf.int64, value=attr_value_pb2.AttrValue(tensor=zero))
    specs = {}
    for j, region in enumerate(trace.regions):
        value = tensor_pb2.TensorProto(dtype=tf.int64.as_datatype_enum)
        value.tensor_shape.dim.add(size=0)
        value.tensor_shape.dim.add(size=width(trace, region))
        b.add(f"{PREFIX}/empty/{j}", "Const", dtype=tf.int64, value=attr_value_pb2.AttrValue(tensor=value))
        specs[region] = f"{PREFIX}/empty/{j}:0"
    return f"{INDEX}:0", specs


def _signature(region, report: list[str], widths: dict) -> list:
    import tensorflow as tf

    return ([tf.TensorSpec(shape, dtype) for dtype, shape in region.arg_specs] + [tf.TensorSpec([], tf.int64)]
            + [tf.TensorSpec([None, widths[r]], tf.int64) for r in report])


def _body_function(b: _GraphDefBuilder, trace, region, report: list[str], widths: dict, fingerprinter,
                   loop: bool) -> str:
    """Trace the rebuilt body of `region`; its FunctionDef (and those it calls) go in b's library. Its name."""
    import numpy as np
    import tensorflow as tf

    graph = trace.graph
    taps = tappable_tensors(trace, region.id)[0]
    rb = _GraphDefBuilder(region.graph_def)
    spec = tap_specs(rb, graph, region.id, taps)
    fps, layout = digest_vector(rb, graph, [(spec(t), graph.dtype(t)) for t in taps], fingerprinter)
    inner = graph.subregions(region.id)[1:]  # the bodies nested in this one
    ours = [INDEX] + [f"{PREFIX}/in/{j}" for j, _ in enumerate(inner)]
    for name in ours:
        rb.add(name, "Placeholder", dtype=tf.int64)
    nested = rewrite_control_flow(rb, trace, region.id, fingerprinter, f"{INDEX}:0",
                                  {r: f"{PREFIX}/in/{j}:0" for j, r in enumerate(inner)})
    fed = list(region.arg_names) + list(ours)
    gd, read = _without_fed_placeholders(rb.gd, fed)
    wanted = list(region.output_names) + [fps] + [nested[r] for r in inner]
    imported = [w for w in wanted if parse_input(w)[0] not in set(fed)]
    order = None if layout is None else np.argsort(np.asarray(layout))  # vector position of each tap
    n_args, n_out = len(region.arg_names), len(region.output_names)

    def body(*args):
        rb.register(tf.compat.v1.get_default_graph())
        tick, came = args[n_args], dict(zip(report, args[n_args + 1:]))
        index = tf.shape(came[region.id], out_type=tf.int64)[0]  # this execution's row
        feeds = {f"{a}:0": x for a, x in zip(region.arg_names, args)}
        feeds[f"{INDEX}:0"] = index
        feeds.update({f"{PREFIX}/in/{j}:0": came[r] for j, r in enumerate(inner)})
        got = tf.graph_util.import_graph_def(gd, input_map={f"{n}:0": feeds[f"{n}:0"] for n in read},
                                             return_elements=imported, name="body")
        by_spec = dict(zip(imported, got))
        values = [by_spec[w] if w in by_spec else feeds[w] for w in wanted]
        digests = values[n_out] if order is None else tf.gather(values[n_out], order)
        row = tf.concat([tf.reshape(tick, [1, 1]), tf.reshape(digests, [1, widths[region.id] - 1])], 1)
        gone = dict(zip(inner, values[n_out + 1:]))
        gone[region.id] = tf.concat([came[region.id], row], 0)
        carried = [tick] if loop else []
        return [tf.identity(v) for v in values[:n_out]] + carried + [gone.get(r, came[r]) for r in report]

    fn = tf.function(body, input_signature=_signature(region, report, widths), autograph=False)
    b.functions.extend(rb.functions)
    return _into_library(b, fn.get_concrete_function())


def _cond_function(b: _GraphDefBuilder, region, report: list[str], widths: dict) -> str:
    """The loop's condition, taking (and ignoring) the extra loop variables."""
    import tensorflow as tf

    cond = region.cond
    gd = cond.as_graph_def()
    names = [t.op.name for t in cond.inputs]
    out = cond.outputs[0].name

    def fn(*args):
        feeds = {f"{n}:0": x for n, x in zip(names, args)}
        if out in feeds:
            return tf.identity(feeds[out])
        return tf.graph_util.import_graph_def(gd, input_map=feeds, return_elements=[out], name="cond")[0]

    sig = _signature(region, report, widths)
    return _into_library(b, tf.function(fn, input_signature=sig, autograph=False).get_concrete_function())


def _into_library(b: _GraphDefBuilder, concrete) -> str:
    """Put a traced function, and every function it calls, in b's GraphDef library; its name."""
    b.functions.append(concrete)
    have = {f.signature.name for f in b.gd.library.function}
    for f in [concrete.function_def, *concrete.graph.as_graph_def().library.function]:
        if f.signature.name not in have:
            b.gd.library.function.add().CopyFrom(f)
            have.add(f.signature.name)
    return concrete.function_def.signature.name
