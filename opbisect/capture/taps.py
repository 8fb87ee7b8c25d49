"""Capture: an instrumented copy of the traced step that also returns fingerprints of chosen tensors.

The instrumented step is the flat GraphDef plus capture nodes, imported into a fresh tf.function and fed with
the user's arguments and the captured values (variable handles among them), so it runs on the user's real
variables. Capture nodes are added to the GraphDef itself:
- an output `op:i` gets a copy of the fingerprint template stamped next to it;
- the state after a write, `op:res<i>`, is read by a ReadVariableOp ordered right after the write and before
  every later use of the variable (control edges), then fingerprinted.
All digests are packed into one int64 vector, so one small copy reaches the host per run. The chosen set of
taps is an argument, so bisection can tap only a frontier. `full` names tensors returned whole (for the
magnitude pass of the sources only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir import optypes
from ..ir.ids import TensorRef, split_op_id
from ..tfcompat import grappler_options, read_now
from ..trace.inline import parse_input
from ..trace.trace import Trace
from .fingerprint import Fingerprinter, tappable

PREFIX = "opbisect_capture"  # node names of capture nodes; the import scope is SCOPE
SCOPE = "step"
FUSED_BY_XLA = "fused by XLA"  # the skipped count of outputs and post-write states not tapped under XLA
WORKSPACE = "workspace"  # the skipped count of outputs whose bytes have no defined value (optypes.workspace)
FAN_IN = 32  # grappler slows down sharply on nodes with thousands of inputs: pack in a tree


@dataclasses.dataclass
class Instrumented:
    taps: list[str]
    full: list[str]
    fn: Any  # tf.function(*feeds) -> (int64[len(taps)], [step outputs], [full tensors])
    trace: Trace
    regions: list[str] = dataclasses.field(default_factory=list)  # entered bodies, in the order returned
    region_taps: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # the columns of each matrix
    layout: np.ndarray | None = None  # tap index of each position of the digest vector (None: tap order)
    concrete: Any = None  # traced once, on the first call: resource handles would retrace the tf.function
    calls: int = 0  # the first traces and compiles the function: timed apart (Runner.instrumented)
    values: Any = None  # capture.values.BodyValues: what the bodies hand over, per run
    slots: list[str] = dataclasses.field(default_factory=list)  # the values threaded out, returned after the matrices

    def __call__(self, args: tuple) -> tuple[np.ndarray, list, list, dict[str, np.ndarray]]:
        """Digests of the taps, the step's outputs, the `full` tensors, and per entered body its digest matrix
        (a row per execution of the body in this step, a column per tap of the body)."""
        feeds = self.trace.flat_args(args)
        if self.concrete is None:  # for the traced specs: a partial last batch is fed to the same function
            specs = self.trace.arg_specs()
            self.concrete = self.fn.get_concrete_function(*(specs if len(specs) == len(feeds) else feeds))
        if self.values is not None:
            self.values.start_run()
        fps, outs, full, matrices = self.concrete(*feeds)
        self.calls += 1
        digests = fps.numpy()
        if self.layout is not None:
            in_order = np.empty_like(digests)
            in_order[self.layout] = digests
            digests = in_order
        from .regions import read_rows

        bodies = {r: read_rows(self.trace, r, m.numpy()) for r, m in zip(self.regions, matrices)}
        if self.slots:
            self.values.keep({s: v.numpy() for s, v in zip(self.slots, matrices[len(self.regions):])},
                             {r: ran for r, (_, ran) in bodies.items()})
        return digests, list(outs), [t.numpy() for t in full], bodies

    def unrolled(self, fps: list[np.ndarray], bodies: list[dict]) -> tuple[list[str], list[list]]:
        """Every run's digests as one row over the same columns: the taps, then each body's taps at each
        execution (`region::op:0@k`), as many executions as the most any run had; None where a run had fewer."""
        taps, rows = list(self.taps), [list(map(int, f)) for f in fps]
        matrices = [{r: m for r, (m, _) in run.items()} for run in bodies]
        for r in self.regions:
            most = max((m[r].shape[0] for m in matrices), default=0)
            width = len(self.region_taps[r])
            for k in range(most):
                for tid in self.region_taps[r]:
                    ref = TensorRef.parse(tid)
                    taps.append(str(ref.at(k)))
            for row, m in zip(rows, matrices):
                block = m[r][:, 1:]  # column 0: where it ran
                for k in range(most):
                    row.extend(block[k].tolist() if k < block.shape[0] else [None] * width)
        return taps, rows


def tappable_tensors(trace: Trace, region: str = "") -> tuple[list[str], dict[str, int]]:
    """All tensor ids of one scope worth tapping (numeric, integer, boolean outputs and post-write states),
    and the count of outputs skipped per dtype (and of cuDNN workspace outputs, whose bytes mean nothing: compare
    derives them from what feeds them, as it does every untapped tensor). The top level by default; `region` names
    a body. Every scope is listed in one pass over the graph, once per trace (capture asks for each body several
    times).

    Under XLA the outputs and post-write states of ops XLA fuses (optypes.FUSED) are not tapped: the compiled step
    never writes them out, a tap would (XLA compiling every tap as an output of the cluster is most of an XLA
    trace's cost), and their inputs and the state they read fix them bit for bit, so compare derives whether they
    differ from what feeds them (and names a read of state that differed before the step as its source)."""
    if not trace.tappable:
        graph = trace.graph
        for op in graph.topo_order():
            taps, skipped = trace.tappable.setdefault(graph.region_of(op), ([], {}))
            if _fused_by_xla(trace, op):
                skipped[FUSED_BY_XLA] = skipped.get(FUSED_BY_XLA, 0) + len(graph.outputs(op) + graph.states(op))
                continue
            workspace = optypes.workspace(graph.op_type(op))
            for tid in graph.outputs(op):
                dtype = graph.dtype(tid)
                if workspace and TensorRef.parse(tid).port in workspace:
                    skipped[WORKSPACE] = skipped.get(WORKSPACE, 0) + 1
                elif tappable(dtype):
                    taps.append(tid)
                else:
                    skipped[dtype] = skipped.get(dtype, 0) + 1
            taps.extend(graph.states(op))
    taps, skipped = trace.tappable.get(region, ([], {}))
    return list(taps), dict(skipped)


def fused_by_xla(trace: Trace, tid: str) -> bool:
    """Whether tensor `tid` is left untapped because XLA fuses the op making it (see tappable_tensors)."""
    return _fused_by_xla(trace, TensorRef.parse(tid).op)


def _fused_by_xla(trace: Trace, op: str) -> bool:
    return bool(trace.jit_compile) and optypes.has(trace.graph.op_type(op), optypes.FUSED)


class _GraphDefBuilder:
    """Appends capture nodes to a copy of the step's GraphDef."""

    def __init__(self, graph_def):
        from tensorflow.core.framework import graph_pb2

        self.gd = graph_pb2.GraphDef()
        self.gd.CopyFrom(graph_def)
        self.nodes = {n.name: n for n in self.gd.node}
        self.shared: dict[tuple, str] = {}  # (template key, const name) -> stamped name
        self.functions: list = []  # rebuilt body functions the GraphDef calls, at any depth (capture.regions)

    def register(self, graph) -> None:
        """Register the rebuilt body functions in the graph importing the GraphDef (its library alone is not
        enough: a function that calls them must find them in its own graph)."""
        for f in self.functions:
            f.add_to_graph(graph)

    def add(self, name: str, op: str, inputs=(), **attrs):
        from tensorflow.core.framework import attr_value_pb2

        if name in self.nodes:
            raise ValueError(f"capture node name {name} is taken in the step's graph")
        node = self.gd.node.add(name=name, op=op, input=list(inputs))  # add(): append() would store a copy
        for key, value in attrs.items():  # ints are counts and axes; dtypes come as tf.DType
            node.attr[key].CopyFrom(value if isinstance(value, attr_value_pb2.AttrValue) else
                                    attr_value_pb2.AttrValue(i=value) if isinstance(value, int) else
                                    attr_value_pb2.AttrValue(type=value.as_datatype_enum))
        self.nodes[name] = node
        return node

    def stamp(self, key, template, source: str, prefix: str) -> str:
        """Copy `template` reading tensor `source`; its input-less Consts are shared by all stamps."""
        names = {}
        for n in template.nodes:
            shared = n.op == "Const" and not n.input
            if shared:
                names[n.name] = self.shared.setdefault((key, n.name), f"{PREFIX}/t{len(self.shared)}/{n.name}")
                if names[n.name] in self.nodes:
                    continue
            else:
                names[n.name] = f"{prefix}/{n.name}"
            copy = self.gd.node.add()
            copy.CopyFrom(n)
            copy.name = names[n.name]
            self.nodes[copy.name] = copy
        for n in template.nodes:
            node = self.nodes[names[n.name]]
            fixed = []
            for spec in node.input:
                name, idx, control = parse_input(spec)
                if name == template.source:
                    fixed.append(f"^{source.split(':')[0]}" if control else source)
                else:
                    fixed.append(f"^{names[name]}" if control else f"{names[name]}:{idx}")
            del node.input[:]
            node.input.extend(fixed)
        out_name, out_idx, _ = parse_input(template.output)
        return f"{names[out_name]}:{out_idx}"


def _concat_tree(b: _GraphDefBuilder, parts: list[str], dtype) -> str:
    """One tensor of the parts, concatenated on axis 0 by a tree of small ConcatV2 nodes."""
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2, tensor_pb2

    axis = tensor_pb2.TensorProto(dtype=tf.int32.as_datatype_enum, int_val=[0])
    b.add(f"{PREFIX}/axis", "Const", dtype=tf.int32, value=attr_value_pb2.AttrValue(tensor=axis))
    level, depth = parts, 0
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level), FAN_IN):
            part = level[i:i + FAN_IN]
            if len(part) == 1:  # ConcatV2 wants at least two inputs
                nxt.append(part[0])
                continue
            name = f"{PREFIX}/concat/{depth}/{i}"
            b.add(name, "ConcatV2", part + [f"{PREFIX}/axis:0"], N=len(part), T=dtype, Tidx=tf.int32)
            nxt.append(name + ":0")
        level, depth = nxt, depth + 1
    return level[0]


def _empty_digests(b: _GraphDefBuilder) -> str:
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2, tensor_pb2

    zeros = tensor_pb2.TensorProto(dtype=tf.int64.as_datatype_enum)
    zeros.tensor_shape.dim.add(size=0)
    b.add(f"{PREFIX}/fingerprints", "Const", dtype=tf.int64, value=attr_value_pb2.AttrValue(tensor=zeros))
    return f"{PREFIX}/fingerprints:0"


def _stamped_digests(b: _GraphDefBuilder, specs: list[tuple[str, str]], fingerprinter) -> str:
    """A template stamped next to each tensor, the [1, 8] uint8 rows concatenated and bitcast to int64[n]."""
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2, tensor_pb2

    rows = [b.stamp(dtype, fingerprinter.template(dtype), spec, f"{PREFIX}/tap/{i}")
            for i, (spec, dtype) in enumerate(specs)]
    block = _concat_tree(b, rows, tf.uint8)
    b.add(f"{PREFIX}/bitcast", "Bitcast", [block], T=tf.uint8, type=tf.int64)  # [n, 8] uint8 -> [n] int64
    shape = tensor_pb2.TensorProto(dtype=tf.int32.as_datatype_enum, int_val=[-1])
    shape.tensor_shape.dim.add(size=1)
    b.add(f"{PREFIX}/flat", "Const", dtype=tf.int32, value=attr_value_pb2.AttrValue(tensor=shape))
    b.add(f"{PREFIX}/fingerprints", "Reshape", [f"{PREFIX}/bitcast:0", f"{PREFIX}/flat:0"], T=tf.int64,
          Tshape=tf.int32)
    return f"{PREFIX}/fingerprints:0"


FUSED_GROUP = 512  # taps per fused node, in topological order: an early group runs (and frees) early


def _fused_digests(b: _GraphDefBuilder, specs: list[tuple[str, str]], fingerprinter) -> tuple[str, list[int]]:
    """One OpbisectFingerprint node per group of taps, their int64 vectors concatenated; and the layout.

    Taps of the fingerprinter's `host_dtypes` (int32 on a GPU, which TensorFlow keeps in host memory) go to
    nodes on the CPU, so they are not copied to the GPU one by one. The others are grouped by the device their
    producer asked for, and each node is pinned there: a replicated step's taps are digested on their replica's
    GPU, never copied to another (8k tensors, 14 GB, on a two-GPU BERT-like step).
    """
    import tensorflow as tf
    from tensorflow.core.framework import attr_value_pb2

    on_device, on_host = fingerprinter.split([d for _, d in specs])
    families: dict[tuple[str, str], list[int]] = {}
    for k in on_device:
        families.setdefault(("device", b.nodes[specs[k][0].split(":")[0]].device), []).append(k)
    if on_host:
        families[("host", "/device:CPU:0")] = on_host
    parts, layout = [], []
    for f, ((where, device), members) in enumerate(families.items()):
        for i in range(0, len(members), FUSED_GROUP):
            group = members[i:i + FUSED_GROUP]
            types = attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(
                type=[tf.as_dtype(specs[k][1]).as_datatype_enum for k in group]))
            name = f"{PREFIX}/fused/{where}{f}/{i}"
            node = b.add(name, "OpbisectFingerprint", [specs[k][0] for k in group], T=types)
            node.device = device  # empty: the placer's choice, as for the step's own unpinned ops
            parts.append(name + ":0")
            layout.extend(group)
    b.add(f"{PREFIX}/fingerprints", "Identity", [_concat_tree(b, parts, tf.int64)], T=tf.int64)
    return f"{PREFIX}/fingerprints:0", layout


def tap_specs(b: _GraphDefBuilder, graph, region: str, taps: list[str]) -> Callable[[str], str]:
    """A function giving the GraphDef spec of a tap of scope `region` (whose GraphDef `b` holds): an output is
    itself; the state after a write gets a ReadVariableOp right after the write, before anything else touches it;
    the state before an op, one after what the op waits for, which the op then waits for too."""
    import tensorflow as tf

    later_users: dict[tuple[str, str], list[str]] = {}
    for u, v, d in graph.g.edges(data=True):
        if d["kind"] == "resource" and graph.region_of(u) == region == graph.region_of(v):
            later_users.setdefault((u, d["var"]), []).append(split_op_id(v)[1])
    states: dict[str, str] = {}

    def spec(tid: str) -> str:
        ref = TensorRef.parse(tid)
        local = split_op_id(ref.op)[1]
        if ref.is_prior:
            return _prior_state(b, graph, ref)
        if not ref.is_state:
            return f"{local}:{ref.port}"
        if tid not in states:
            write = b.nodes[local]
            dtype = tf.as_dtype(graph.attrs(ref.op)["res_dtypes"][str(ref.port)])
            name = f"{PREFIX}/state/{local}/res{ref.port}"
            b.add(name, "ReadVariableOp", [write.input[ref.port], f"^{local}"], dtype=dtype).device = write.device
            for user in later_users.get((ref.op, dict(graph.resources(ref.op))[ref.port]), []):
                b.nodes[user].input.append(f"^{name}")
            states[tid] = f"{name}:0"
        return states[tid]

    return spec


def _prior_state(b: _GraphDefBuilder, graph, ref: TensorRef) -> str:
    """The variable at resource input `ref.port` of `ref.op`, read right before the op: after every op the op waits
    for (its control inputs, which order it after the writes before it), and the op waits for the read."""
    import tensorflow as tf

    local = split_op_id(ref.op)[1]
    name = f"{PREFIX}/prior/{local}/pre{ref.port}"
    if name not in b.nodes:
        op = b.nodes[local]
        dtype = graph.attrs(ref.op).get("res_dtypes", {}).get(str(ref.port))
        dtype = tf.as_dtype(dtype) if dtype else tf.as_dtype(op.attr["dtype"].type)
        waits = [i for i in op.input if i.startswith("^")]
        b.add(name, "ReadVariableOp", [op.input[ref.port], *waits], dtype=dtype).device = op.device
        op.input.append(f"^{name}")
    return f"{name}:0"


def digest_vector(b: _GraphDefBuilder, graph, specs: list[tuple[str, str]], fingerprinter) -> tuple[str, list | None]:
    """Capture nodes digesting the tensors `specs` ((spec, dtype) pairs): the spec of the int64 vector, and the
    tap index of each of its positions (None: tap order)."""
    if not specs:
        return _empty_digests(b), None
    if fingerprinter.fused:
        return _fused_digests(b, specs, fingerprinter)
    return _stamped_digests(b, specs, fingerprinter), None


def instrumented_graph_def(trace: Trace, taps: list[str], fingerprinter: Fingerprinter, full: list[str] = (),
                           descend: bool = True, grouped: bool = False, values=None):
    """(the builder holding the GraphDef, fingerprint vector spec, specs of the `full` tensors, layout of the vector
    or None, {region: spec of its digest matrix, then threaded slot: spec of its value}). `descend`: rebuild the
    entered loop and branch bodies with taps of their own. `grouped`: no digest nodes for the top level's taps;
    the specs of the tapped tensors themselves stand for the vector, for `fingerprinter.many` to digest after the
    import. `values`: tensors the bodies hand over (capture.values)."""
    from .regions import empty_matrices, rewrite_control_flow, slot_zeros

    graph = trace.graph
    b = _GraphDefBuilder(trace.graph_def)
    spec = tap_specs(b, graph, "", taps)
    specs = [(spec(t), graph.dtype(t)) for t in taps]
    fps, layout = ([s for s, _ in specs], None) if grouped else digest_vector(b, graph, specs, fingerprinter)
    if not descend:
        return b, fps, [spec(t) for t in full], layout, {}
    index, matrices = empty_matrices(b, trace)
    threaded = values.slots(list(trace.regions)) if values is not None else []
    slots = {s: f"{PREFIX}/slot/{j}" for j, s in enumerate(threaded)}
    regions = rewrite_control_flow(b, trace, "", fingerprinter, index,
                                   {**matrices, **{s: f"{name}:0" for s, name in slots.items()}}, values)
    slot_zeros(b, trace, values, slots)  # now that the bodies are traced: their shapes are known
    return b, fps, [spec(t) for t in full], layout, regions


def _without_fed_placeholders(gd, placeholders: list[str]):
    """The GraphDef without the placeholders that feeds replace, and the fed ones something still reads.

    An imported placeholder stays in the graph even when every use of it is remapped, and XLA refuses to
    compile a function holding one; so the fed placeholders go, and only the ones still read are mapped.
    """
    from tensorflow.core.framework import graph_pb2

    fed = set(placeholders)
    read = {parse_input(spec)[0] for n in gd.node for spec in n.input} & fed
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(gd.versions)
    out.library.CopyFrom(gd.library)
    out.node.extend(n for n in gd.node if n.name not in fed)
    colocated_with_present(out)
    return out, read


def colocated_with_present(gd) -> None:
    """Drop colocation constraints (`_class: loc:@name`) on nodes `gd` does not have: the import refuses them
    (tf_keras's embedding lookup is colocated with its table's captured handle, whose placeholder a feed replaces;
    the fed tensor sits where the handle does, so placement is unchanged)."""
    present = {n.name for n in gd.node}
    for node in gd.node:
        if "_class" not in node.attr:
            continue
        refs = list(node.attr["_class"].list.s)
        kept = [c for c in refs if c.decode(errors="replace").removeprefix("loc:@") in present]
        if len(kept) == len(refs):
            continue
        del node.attr["_class"].list.s[:]
        if kept:
            node.attr["_class"].list.s.extend(kept)
        else:
            del node.attr["_class"]


def graph_importer(graph_def, placeholders: list[str], wanted: list[str], scope: str) -> Callable[[dict], list]:
    """`run(feeds)` imports `graph_def` into the graph being built, its `placeholders` replaced by `feeds` ("name:0"
    -> tensor), and returns the tensors `wanted` (specs in the GraphDef; a placeholder gives what feeds it)."""
    import tensorflow as tf

    gd, read = _without_fed_placeholders(graph_def, placeholders)
    imported = [w for w in wanted if parse_input(w)[0] not in set(placeholders)]

    def run(feeds: dict) -> list:
        got = tf.graph_util.import_graph_def(gd, input_map={f"{n}:0": feeds[f"{n}:0"] for n in read},
                                             return_elements=imported, name=scope)
        by_spec = dict(zip(imported, got))
        return [by_spec[w] if w in by_spec else feeds[w] for w in wanted]

    return run


def step_importer(trace: Trace, graph_def, register: Callable, wanted: list[str], scope: str = SCOPE,
                  variables: dict | None = None) -> Callable:
    """A function of the step's flat arguments importing `graph_def` (the step's GraphDef, changed) and returning
    the tensors `wanted` (specs in it); `register(graph)` puts the functions it calls in the importing graph.
    `scope` prefixes the imported names ("": the step's own names, for a step traced again). `variables`
    ({placeholder name: tf.Variable}): placeholders the change added, fed with those variables' handles.

    The captured values (variable handles above all) are captured again by closure, not passed as arguments:
    a concrete function's call costs about 24 us more per tensor argument (300 handles: 8.3 ms against 1.2 ms
    captured, on the 2-core CPU machine), which the plain step, whose captures are bound, does not pay."""
    import tensorflow as tf

    added = dict(variables or {})
    placeholders = trace.arg_names + trace.capture_names + list(added)
    run = graph_importer(graph_def, placeholders, wanted, scope)
    captured = list(trace.concrete.captured_inputs)
    used = list(trace.variables.values()) + list(added.values())

    def body(*feeds):
        graph = tf.compat.v1.get_default_graph()  # the FuncGraph being traced
        register(graph)
        for v in used:  # the function uses these variables (as the step did): its graph lists them
            graph.watch_variable(v)
        values = list(feeds) + [graph.capture(c) for c in captured] + [graph.capture(v.handle) for v in added.values()]
        return run({f"{name}:0": t for name, t in zip(placeholders, values)})

    return body


def build(trace: Trace, taps: list[str], fingerprinter: Fingerprinter, full: list[str] = (),
          descend: bool = True, values=None) -> Instrumented:
    """The instrumented step. `values` (capture.values.BodyValues): tensors inside bodies, each at one execution,
    threaded out of the bodies, or handed to the host by a callback XLA cannot compile (that step runs without
    XLA)."""
    import tensorflow as tf

    jit = bool(trace.jit_compile) and (values is None or values.threaded)
    # Under XLA the weighted sums are made after the import, grouped by size (`many`): a digest node per tap
    # compiles a reduction per tap (2000 taps of a small BERT-like step: most of the op analysis on a CPU).
    grouped = jit and not fingerprinter.fused
    b, fps_spec, full_specs, layout, region_specs = instrumented_graph_def(trace, taps, fingerprinter, full, descend,
                                                                           grouped, values)
    regions = [k for k in region_specs if k in trace.regions]  # the rest: the slots of threaded values
    slots = [k for k in region_specs if k not in trace.regions]
    tapped = fps_spec if grouped else [fps_spec]
    wanted = tapped + list(trace.output_names) + full_specs + [region_specs[r] for r in regions + slots]
    importer = step_importer(trace, b.gd, b.register, wanted)
    k, n, m = len(tapped), len(trace.output_names), len(full_specs)

    def body(*feeds):
        got = importer(*feeds)
        fps = fingerprinter.many(got[:k]) if grouped else got[0]
        return fps, got[k:k + n], got[k + n:k + n + m], got[k + n + m:]

    fn = tf.function(body, autograph=False,
                     jit_compile=trace.jit_compile if values is None or values.threaded else False)
    return Instrumented(taps=list(taps), full=list(full), fn=fn, trace=trace, regions=regions, slots=slots,
                        region_taps={r: tappable_tensors(trace, r)[0] for r in regions},
                        layout=None if layout is None else np.asarray(layout), values=values)


UNOPTIMIZED = {"disable_meta_optimizer": True}  # grappler off, for opbisect's own helper functions


EAGER_STATE_CALLS = 100  # as snapshot.EAGER_RESTORES: where tracing the function has paid for itself


def make_state_fingerprinter(variables: dict, fingerprinter: Fingerprinter) -> Callable[[], dict[str, int]]:
    """A callable fingerprinting every variable's current value, keyed like `variables`.

    With the fused op (one node for all the tensors) the first EAGER_STATE_CALLS calls read the variables and run
    the op eagerly (about 12 us a variable), later ones call one traced function (its tracing costs about 1.3 ms a
    variable: 3 s at 2400 variables, where an experiment calls this about 30 times). The digests are the same op's
    on the same bits. Other fingerprinters build several ops per tensor: always traced."""
    import tensorflow as tf

    keys = sorted(variables)
    values = [variables[k] for k in keys]
    fn = tf.function(lambda: fingerprinter.many([v.read_value() for v in values]), autograph=False)
    calls = [0]

    def state() -> dict[str, int]:
        if not keys:
            return {}
        calls[0] += 1
        if fingerprinter.fused and calls[0] <= EAGER_STATE_CALLS:
            return dict(zip(keys, fingerprinter.many([read_now(v) for v in values]).numpy().tolist()))
        with grappler_options(UNOPTIMIZED):  # our own function: grappler has nothing to gain, and costs minutes
            return dict(zip(keys, fn().numpy().tolist()))

    return state


def make_value_fingerprinter(fingerprinter: Fingerprinter) -> Callable[[list], list[int]]:
    """A callable fingerprinting a list of eager tensors (the step's outputs)."""
    import tensorflow as tf

    fn = tf.function(lambda ts: fingerprinter.many(list(ts)), autograph=False, reduce_retracing=True)

    def values(tensors: list) -> list[int]:
        tensors = [t for t in tensors if hasattr(t, "dtype") and t.dtype not in (tf.string, tf.resource, tf.variant)]
        return fn(tensors).numpy().tolist() if tensors else []

    return values
